"""eve-search: rank many candidate configurations cheaply with EvE as the inner-loop trainer.

The heavy integrations (Ray Tune, Optuna, transformers/peft) import lazily; ``import eve_search``
needs only the core dependencies.
"""

import os as _os
import sys as _sys


def cpu_is_shared(others_running: int, stalled_percent: float | None, cpus: int) -> bool:
    """Whether PyTorch's OpenMP threads should wait passively: other processes are running right now
    on about half the CPUs or more, or tasks have been waiting for a CPU (Linux pressure stall
    information, share of the last 10 s) at least 10% of the time. A load average is not used: it
    still counts a run that has just ended, on a machine that is now idle.

    Example:
        >>> cpu_is_shared(others_running=2, stalled_percent=None, cpus=2)
        True
        >>> cpu_is_shared(others_running=0, stalled_percent=2.7, cpus=2)
        False
        >>> cpu_is_shared(others_running=0, stalled_percent=35.0, cpus=16)
        True
    """
    return others_running >= max(1.0, cpus / 2) or (stalled_percent is not None and stalled_percent >= 10.0)


def _read_cpu_sharing() -> tuple[int, float | None]:
    """(other runnable tasks now, this process excluded; CPU "some" stall percentage over 10 s or None)."""
    others = 0
    try:
        with open("/proc/loadavg") as handle:
            others = max(0, int(handle.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        pass
    stalled = None
    try:
        with open("/proc/pressure/cpu") as handle:
            stalled = float(handle.readline().split()[1].split("=")[1])
    except (OSError, ValueError, IndexError):
        pass
    return others, stalled


if "torch" not in _sys.modules and "OMP_WAIT_POLICY" not in _os.environ and cpu_is_shared(
        *_read_cpu_sharing(), cpus=len(_os.sched_getaffinity(0)) if hasattr(_os, "sched_getaffinity")
        else (_os.cpu_count() or 1)):
    # On a shared CPU, OpenMP threads wait passively (sleep) instead of spinning: with two CPU hogs,
    # 1000 units of one Adult trial took EvE 58 s spinning and 1.5 s passive. On a quiet machine
    # spinning is faster (the whole hp sweep: 7.6 s of training spinning, 21.1 s passive), so it is
    # kept there. Read once, when PyTorch loads its OpenMP runtime; it never changes a result. Set
    # OMP_WAIT_POLICY yourself to choose.
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from eve_search.budget import CostMeter
from eve_search.checkpoint import CheckpointError
from eve_search.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    RungDecision,
    RungLedger,
    check_rungs,
    promote_top_fraction,
    rank_order,
    rung_sizes,
)
from eve_search.optim import (
    EvE,
    MeteredOptimizer,
    MinimizeResult,
    make_optimizer,
    minimize,
    optimizer_names,
    register_optimizer,
)
from eve_search.spaces import (
    Categorical,
    Fixed,
    Float,
    Int,
    SearchSpace,
    get_space,
    register_space,
    space_names,
)
from eve_search.tasks import Splits, Task, get_task, register_task, task_names
from eve_search.trial import Trial

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
