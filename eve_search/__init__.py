"""eve-search: rank many candidate configurations cheaply with EvE as the inner-loop trainer.

The heavy integrations (Ray Tune, Optuna) import lazily; ``import eve_search`` needs only the core
dependencies.
"""

from eve_search.budget import CostMeter
from eve_search.optim import (
    EvE,
    MeteredOptimizer,
    MinimizeResult,
    make_optimizer,
    minimize,
    optimizer_names,
    register_optimizer,
)

__version__ = "0.1.0"

__all__ = [
    "CostMeter",
    "EvE",
    "MeteredOptimizer",
    "MinimizeResult",
    "__version__",
    "make_optimizer",
    "minimize",
    "optimizer_names",
    "register_optimizer",
]
