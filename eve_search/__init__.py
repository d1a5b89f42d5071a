"""eve-search: rank many candidate configurations cheaply with EvE as the inner-loop trainer.

The heavy integrations (Ray Tune, Optuna, transformers/peft) import lazily; ``import eve_search``
needs only the core dependencies.
"""

import os as _os
import sys as _sys


def _cpu_is_shared() -> bool:
    """Whether other processes already want about half the CPUs or more (runnable now, or on average
    over the last minute): then OpenMP threads that spin while waiting burn the time a descheduled
    sibling needs."""
    try:
        with open("/proc/loadavg") as handle:
            fields = handle.read().split()
        others = int(fields[3].split("/")[0]) - 1  # runnable right now, this process excluded
        average = float(fields[0])
    except (OSError, ValueError, IndexError):
        return False
    return max(others, average) >= max(1.0, (_os.cpu_count() or 1) / 2)


if "torch" not in _sys.modules and "OMP_WAIT_POLICY" not in _os.environ and _cpu_is_shared():
    # On a shared CPU, OpenMP threads wait passively (sleep) instead of spinning: with two CPU hogs,
    # 1000 units of one Adult trial took EvE 58 s spinning and 1.5 s passive. On a quiet machine
    # spinning is faster (about 2.5x on the same run), so it is kept there. Read once, when PyTorch
    # loads its OpenMP runtime; it never changes a result. Set OMP_WAIT_POLICY yourself to choose.
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
