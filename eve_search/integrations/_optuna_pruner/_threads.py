"""What this process's threads do with a study: the training slot of the trial running in each thread (set by
``optimize_in_cohorts``), the trials waiting inside ``should_prune()``, and what changes when anything happens
to a study. The pruner reads these, never a clock, to know when no trial can start any more."""

from __future__ import annotations

import threading
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from eve_search.integrations._optuna_adapter import activity, study_key

__all__ = ["THREAD", "WAITING", "WAITING_LOCK", "fingerprint", "thread_activity"]

# The training slot of the trial running in this thread, set by optimize_in_cohorts: a trial waiting at a
# rung gives it up so that the rest of its cohort can train, and takes it back when it goes on.
THREAD = threading.local()

# Each thread waiting inside should_prune(): (study key, trial number, rung).
WAITING: dict[int, tuple[Any, int, int]] = {}
WAITING_LOCK = threading.Lock()


def thread_activity(study: optuna.Study) -> Any:
    """What this process's threads are doing with ``study`` (see
    :class:`~eve_search.integrations._optuna_adapter.Activity`), with the trials waiting in ``should_prune()``."""
    key = study_key(study)
    with WAITING_LOCK:
        waiting = {ident: (number, rung) for ident, (k, number, rung) in WAITING.items() if k == key}
    return activity(study, waiting)


def fingerprint(trials: list[FrozenTrial]) -> tuple[Any, ...]:
    """What changes when anything happens to a study: its trials, their states and reports."""
    return tuple((t.number, t.state, len(t.intermediate_values)) for t in trials)
