"""EvE and the baselines: the closure-based optimizer, the flat-vector minimizer and the registry."""

from eve_search.optim._closure import ClosureContractError
from eve_search.optim._eve import EvE, kaiming_bounds
from eve_search.optim._minimize import MinimizeOptions, MinimizeResult, minimize
from eve_search.optim._registry import (
    MeteredOptimizer,
    TrainingOptimizer,
    make_optimizer,
    optimizer_names,
    register_optimizer,
)

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
