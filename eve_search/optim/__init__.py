"""EvE and the baselines: the closure-based optimizer, the flat-vector minimizer and the registry.

The names below are imported on first use (PEP 562), so that ``eve_search.optim.budget`` (the cost
meter and its cost modes, which the command line reads to declare ``--cost-mode``) loads without
PyTorch.
"""

from eve_search._imports import lazy_exports as _lazy_exports

_EXPORTS = {
    "ClosureContractError": "eve_search.optim._closure",
    **dict.fromkeys(["EvE", "kaiming_bounds"], "eve_search.optim._eve"),
    **dict.fromkeys(["MinimizeOptions", "MinimizeResult", "minimize"], "eve_search.optim._minimize"),
    **dict.fromkeys(["MeteredOptimizer", "TrainingOptimizer", "make_optimizer", "optimizer_names",
                     "register_optimizer"], "eve_search.optim._registry"),
}


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)

__all__ = [
    "ClosureContractError",
    "EvE",
    "MeteredOptimizer",
    "MinimizeOptions",
    "MinimizeResult",
    "TrainingOptimizer",
    "kaiming_bounds",
    "make_optimizer",
    "minimize",
    "optimizer_names",
    "register_optimizer",
]
