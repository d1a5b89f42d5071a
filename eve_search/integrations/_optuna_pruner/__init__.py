"""A synchronous successive-halving pruner for ordinary Optuna objectives.

Optuna's own :class:`optuna.pruners.SuccessiveHalvingPruner` is asynchronous: it judges a trial at a
rung against the trials that happened to report that rung before it, so the outcome depends on the
order in which trials run (the first trial of a study is never pruned). Synchronous successive
halving (paper, Section "Successive halving") judges a rung once its whole cohort has reported it.
A pruner cannot pause a trial, so :class:`SynchronousSHAPruner` makes ``should_prune()`` wait at a
rung until every trial of the cohort has reported the rung or ended, then lets the rung ledger
(:mod:`eve_search.engine.ledger`, the only place with the rung rule and its tie-break) decide.

Everything it decides with is read from the study's storage on every poll (trials, their intermediate
values and states, decisions already taken, cohorts closed early), so it works across threads
(:func:`eve_search.integrations.optuna.optimize_in_cohorts`, ``study.optimize(..., n_jobs=k)``) and
across processes and machines sharing one RDB storage. No decision reads a clock: a cohort closes
early on events (``study.optimize`` stopped asking and its trials wait; ``optimize_in_cohorts`` stopped
starting trials; the pruner's ``n_trials``), which the pruner learns from the storage and from the
stacks of this process's threads (which ``study.optimize`` loops run the study, and what each is
doing). A timer remains only as a last guard that raises (``stall_seconds``), and as the user's own
``timeout=``.

The package's modules, one role each: ``_pruner`` (the class, its arguments and ``prune()``), ``_options``
(the rungs and :class:`PrunerOptions`), ``_ledger`` (the cohorts and rung decisions read from the storage),
``_waiting`` (the wait at a rung), ``_guards`` (checks, warnings and refusals), ``_threads`` (what this
process's threads do with a study), ``_cohort`` (a cohort and the attribute names) and ``_errors``.
"""

from eve_search.integrations._optuna_pruner._cohort import CUT_PREFIX, decision_key, root_number
from eve_search.integrations._optuna_pruner._errors import (
    CohortStalledError,
    PartialRungWarning,
    RungScheduleWarning,
    SequentialStudyError,
    StaleTrialWarning,
)
from eve_search.integrations._optuna_pruner._guards import SAFE_GRACE_MARGIN
from eve_search.integrations._optuna_pruner._options import OPEN_END, PrunerOptions
from eve_search.integrations._optuna_pruner._pruner import SynchronousSHAPruner
from eve_search.integrations._optuna_pruner._threads import THREAD as _THREAD  # optimize_in_cohorts sets the slot

__all__ = [
    "CUT_PREFIX",
    "CohortStalledError",
    "PartialRungWarning",
    "PrunerOptions",
    "RungScheduleWarning",
    "SequentialStudyError",
    "StaleTrialWarning",
    "SynchronousSHAPruner",
    "decision_key",
    "root_number",
]
