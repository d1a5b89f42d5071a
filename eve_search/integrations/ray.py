"""Ray Tune integration (extra ``ray``): :class:`SynchronousSHAScheduler`, :class:`EveTrainable` and
:func:`run_sweep_on_ray`, the ``--backend ray`` of ``eve-search``. See :mod:`eve_search.integrations._ray`."""

from eve_search.integrations._ray import (
    INDEX_KEY,
    STATE_FILE,
    EveTrainable,
    SynchronousSHAScheduler,
    SynchronousSHAWarning,
    config_index,
    load_scheduler_state,
)
from eve_search.integrations._ray_sweep import run_sweep_on_ray
from eve_search.engine.ledger import DEFAULT_RUNGS as PAPER_RUNGS

__all__ = [
    "INDEX_KEY",
    "PAPER_RUNGS",
    "STATE_FILE",
    "EveTrainable",
    "SynchronousSHAScheduler",
    "SynchronousSHAWarning",
    "config_index",
    "load_scheduler_state",
    "run_sweep_on_ray",
]
