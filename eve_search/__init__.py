"""eve-search: rank many candidate configurations cheaply with EvE as the inner-loop trainer.

The heavy integrations (Ray Tune, Optuna, transformers/peft) import lazily; ``import eve_search``
needs only the core dependencies, and importing it changes nothing in the importing program (no
environment variable, no registration). On a machine other processes are using, call
:func:`configure_openmp` before importing PyTorch (the ``eve-search`` command does it for itself).
"""

from eve_search._imports import lazy_exports as _lazy_exports

# The public API, imported on first use (PEP 562): ``import eve_search`` stays light (PyTorch is not
# loaded until something needs it), so a command can start helper processes before it pays for PyTorch.
_EXPORTS = {
    **dict.fromkeys(["configure_openmp", "cpu_is_shared"], "eve_search._openmp"),
    "CostMeter": "eve_search.optim.budget",
    "CheckpointError": "eve_search.engine.checkpoint",
    "InputError": "eve_search._checks",
    **dict.fromkeys(["DEFAULT_RUNGS", "PROMOTED_FRACTION", "RungDecision", "RungLedger", "check_rungs",
                     "promote_top_fraction", "rank_order", "rung_sizes"], "eve_search.engine.ledger"),
    **dict.fromkeys(["ClosureContractError", "EvE", "MeteredOptimizer", "MinimizeResult", "make_optimizer", "minimize", "optimizer_names",
                     "register_optimizer"], "eve_search.optim"),
    **dict.fromkeys(["Categorical", "Fixed", "Float", "Int", "SearchSpace", "get_space", "register_space",
                     "space_names"], "eve_search.tasks.spaces"),
    **dict.fromkeys(["Splits", "Task", "get_task", "register_task", "task_names"], "eve_search.tasks"),
    "Trial": "eve_search.engine.trial",
}


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)

__version__ = "0.3.0"

__all__ = [
    "DEFAULT_RUNGS",
    "PROMOTED_FRACTION",
    "Categorical",
    "CheckpointError",
    "ClosureContractError",
    "CostMeter",
    "EvE",
    "Fixed",
    "Float",
    "InputError",
    "Int",
    "MeteredOptimizer",
    "MinimizeResult",
    "RungDecision",
    "RungLedger",
    "SearchSpace",
    "Splits",
    "Task",
    "Trial",
    "__version__",
    "check_rungs",
    "configure_openmp",
    "cpu_is_shared",
    "get_space",
    "get_task",
    "make_optimizer",
    "minimize",
    "optimizer_names",
    "promote_top_fraction",
    "rank_order",
    "register_optimizer",
    "register_space",
    "register_task",
    "rung_sizes",
    "space_names",
    "task_names",
]
