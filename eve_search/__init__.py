"""eve-search: rank many candidate configurations cheaply with EvE as the inner-loop trainer.

The heavy integrations (Ray Tune, Optuna, transformers/peft) import lazily; ``import eve_search``
needs only the core dependencies.
"""

import os as _os
import sys as _sys


def cpu_is_shared(others_running: int, cpus: int) -> bool:
    """Whether PyTorch's OpenMP threads should wait passively: other processes are running right now
    on about half the CPUs or more. Only the present counts: a load average, or Linux's CPU pressure
    averaged over the last 10 s, still remembers a run that has just ended on a machine that is now
    idle (right after a two-worker sweep, the next sweep chose passive waiting and ran 1.7x slower).

    Example:
        >>> cpu_is_shared(others_running=2, cpus=2)
        True
        >>> cpu_is_shared(others_running=0, cpus=2)
        False
        >>> cpu_is_shared(others_running=4, cpus=16)
        False
    """
    return others_running >= max(1.0, cpus / 2)


def _available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform tells it)."""
    return len(_os.sched_getaffinity(0)) if hasattr(_os, "sched_getaffinity") else (_os.cpu_count() or 1)


def _others_running(samples: int = 5, interval: float = 0.002) -> int:
    """Other runnable tasks now (this process excluded): the median of a few reads of /proc/loadavg's
    runnable count, ~10 ms apart in all, so one passing task does not decide; 0 where it cannot be read."""
    import time

    counts = []
    for sample in range(samples):
        try:
            with open("/proc/loadavg") as handle:
                counts.append(max(0, int(handle.read().split()[3].split("/")[0]) - 1))
        except (OSError, ValueError, IndexError):
            return 0
        if sample + 1 < samples:
            time.sleep(interval)
    return sorted(counts)[len(counts) // 2]


if "torch" not in _sys.modules and "OMP_WAIT_POLICY" not in _os.environ and cpu_is_shared(
        _others_running(), cpus=_available_cpus()):
    # On a shared CPU, OpenMP threads wait passively (sleep) instead of spinning: with two CPU hogs,
    # 1000 units of one Adult trial took EvE 58 s spinning and 1.5 s passive. On a quiet machine
    # spinning is faster (the whole hp sweep: 7.6 s of training spinning, 21.1 s passive), so it is
    # kept there. Read once, when PyTorch loads its OpenMP runtime; it never changes a result. Set
    # OMP_WAIT_POLICY yourself to choose.
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

# The public API, imported on first use (PEP 562): ``import eve_search`` stays light (PyTorch is not
# loaded until something needs it), so a command can start helper processes before it pays for PyTorch.
_EXPORTS = {
    "CostMeter": "eve_search.optim.budget",
    "CheckpointError": "eve_search.engine.checkpoint",
    **dict.fromkeys(["DEFAULT_RUNGS", "PROMOTED_FRACTION", "RungDecision", "RungLedger", "check_rungs",
                     "promote_top_fraction", "rank_order", "rung_sizes"], "eve_search.engine.ledger"),
    **dict.fromkeys(["EvE", "MeteredOptimizer", "MinimizeResult", "make_optimizer", "minimize", "optimizer_names",
                     "register_optimizer"], "eve_search.optim"),
    **dict.fromkeys(["Categorical", "Fixed", "Float", "Int", "SearchSpace", "get_space", "register_space",
                     "space_names"], "eve_search.tasks.spaces"),
    **dict.fromkeys(["Splits", "Task", "get_task", "register_task", "task_names"], "eve_search.tasks"),
    "Trial": "eve_search.engine.trial",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'eve_search' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__version__ = "0.2.0"

__all__ = [
    "DEFAULT_RUNGS",
    "PROMOTED_FRACTION",
    "Categorical",
    "CheckpointError",
    "CostMeter",
    "EvE",
    "Fixed",
    "Float",
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
