"""What the pruner raises and warns: a cohort that cannot fill, and steps or rungs decided with less than a
whole cohort."""

from __future__ import annotations

__all__ = ["CohortStalledError", "PartialRungWarning", "RungScheduleWarning", "SequentialStudyError",
           "StaleTrialWarning"]


class CohortStalledError(RuntimeError):
    """A rung waits for trials that cannot start: every running trial is itself waiting at a rung, and no
    thread of ``study.optimize`` is free to start one (or, on shared storage, none started within the
    pruner's ``stall_seconds`` guard)."""


class SequentialStudyError(CohortStalledError):
    """A study that runs one trial at a time (``study.optimize`` with ``n_jobs=1``, or ask-and-tell one trial
    at a time): the rest of the cohort cannot report while this trial waits or goes on alone; raised at
    the first ``should_prune()`` where that is known, naming a fix that fits the script."""


class PartialRungWarning(UserWarning):
    """A rung was decided among fewer trials than its cohort (timeout, a cohort closed early, members that
    ended without reporting it). The decision records ``partial``, ``reporters``, ``cohort`` and ``reason``."""


class StaleTrialWarning(UserWarning):
    """A trial that this process still runs was failed as stale by a heartbeat check (another worker's, or
    this process's own): its heartbeats came more than the storage's ``grace_period`` apart, usually on a
    busy machine. The pruner drops it (``should_prune()`` returns True from then on), once per trial."""


class RungScheduleWarning(UserWarning):
    """The objective's steps do not fit the rungs: a trial completed below the first rung (the pruner never
    judged it), or one report passed several rungs at once (they were judged with one score)."""
