"""eve-search: rank many candidate configurations cheaply with EvE as the inner-loop trainer.

The heavy integrations (Ray Tune, Optuna, transformers/peft) import lazily; ``import eve_search``
needs only the core dependencies.
"""

import os as _os
import sys as _sys

if "torch" not in _sys.modules:
    # OpenMP threads that wait passively (sleep) instead of spinning: with other CPU-bound processes
    # running, a spinning thread burns the time slice its descheduled sibling needs, and EvE's many
    # small parallel regions then ran up to 15x slower (see README "What a sweep costs"). Read once,
    # when PyTorch loads its OpenMP runtime; it never changes a result. Set OMP_WAIT_POLICY to override.
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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
