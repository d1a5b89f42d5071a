"""EvE and the baselines: the closure-based optimizer, the flat-vector minimizer and the registry.

The names below are imported on first use (PEP 562), so that ``eve_search.optim.budget`` (the cost
meter and its cost modes, which the command line reads to declare ``--cost-mode``) loads without
PyTorch.
"""

_EXPORTS = {
    "ClosureContractError": "eve_search.optim._closure",
    **dict.fromkeys(["EvE", "kaiming_bounds"], "eve_search.optim._eve"),
    **dict.fromkeys(["MinimizeOptions", "MinimizeResult", "minimize"], "eve_search.optim._minimize"),
    **dict.fromkeys(["MeteredOptimizer", "TrainingOptimizer", "make_optimizer", "optimizer_names",
                     "register_optimizer"], "eve_search.optim._registry"),
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'eve_search.optim' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


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
