"""What the pruner checks and refuses, each in one line naming the fix: steps that do not fit the rungs, a
storage whose heartbeats would fail live trials, a trial failed as stale while this process ran it, and the
scripts that cannot fill a cohort (one trial at a time, in ``study.optimize`` or in ask-and-tell)."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from eve_search._checks import InputError
from eve_search.integrations._optuna_adapter import heartbeats, in_memory, study_key
from eve_search.integrations._optuna_pruner._cohort import root_number
from eve_search.integrations._optuna_pruner._errors import RungScheduleWarning, SequentialStudyError, StaleTrialWarning
from eve_search.integrations._optuna_pruner._threads import thread_activity

__all__ = ["SAFE_GRACE_MARGIN", "Guards"]

SAFE_GRACE_MARGIN = 10.0  # seconds a heartbeat may come late on a busy machine (the docstring's safe grace periods)


class Guards:
    """Checks, warnings and refusals (a part of :class:`~eve_search.integrations.optuna.SynchronousSHAPruner`,
    which holds the settings ``rungs`` and ``workers`` and the state ``_warned_unreached``, ``_warned_jump``,
    ``_dropped`` and ``_verdicts``; it reads the study with :class:`~._ledger.StudyLedger`)."""

    # Steps that do not fit the rungs ------------------------------------------------------------------

    def check_steps(self, study: optuna.Study) -> None:
        """Warn once (:class:`RungScheduleWarning`) if a trial completed with reports that never reached the
        first rung: the pruner never judged it, which usually means the rungs are in other units than the
        objective's steps."""
        if self._warned_unreached:
            return
        for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if trial.last_step is not None and trial.last_step < self.rungs[0]:
                self._warned_unreached = True
                warnings.warn(
                    f"SynchronousSHAPruner: trial {trial.number} completed at step {trial.last_step} without "
                    f"reaching the first rung ({self.rungs[0]}), so the pruner never judged it. A step is what the "
                    "objective passes to trial.report(value, step): give the rungs in those units, e.g. "
                    "SynchronousSHAPruner(min_resource=1, reduction_factor=3, cohort_size=...) for a step per "
                    "epoch", RungScheduleWarning, stacklevel=3)
                return

    def _check_jump(self, trial: FrozenTrial, step: int) -> None:
        if self._warned_jump:
            return
        earlier = [s for s in trial.intermediate_values if s < step]
        floor = max(earlier) if earlier else None
        passed = [b for b in self.rungs if (floor is None or floor < b) and b <= step]
        if len(passed) > 1:
            self._warned_jump = True
            interval = step if floor is None else step - floor
            after = "as its first report" if floor is None else f"after step {floor}"
            warnings.warn(
                f"SynchronousSHAPruner: trial {trial.number} reported step {step} {after}, passing rungs "
                f"{', '.join(str(b) for b in passed)} at once: they are all judged with that one score. Report "
                f"every step, or start the rungs at the steps you report (min_resource={interval})",
                RungScheduleWarning, stacklevel=3)

    # Setup and storage --------------------------------------------------------------------------------

    def check_storage(self, study: optuna.Study) -> None:
        """Refuse a study this pruner cannot run (one line naming the setting): several objectives, or heartbeats
        whose ``grace_period`` is not above ``heartbeat_interval`` (a live trial would be stale between two of
        its heartbeats, and a trial waiting at a rung checks for stale trials every second). Called at the first
        ``should_prune()`` on a study and by :func:`~eve_search.integrations.optuna.optimize_in_cohorts`.

        Args:
            study: the study the pruner prunes.

        Raises:
            ValueError: the study cannot work with this pruner.
        """
        self._mode(study)
        beats = heartbeats(study)
        if beats is not None and beats[1] <= beats[0]:
            interval, grace = beats
            raise InputError(
                f"Invalid grace_period: {grace:g} (the storage's heartbeat_interval is {interval:g} s, so a live trial "
                "is stale between two of its heartbeats: expected grace_period above heartbeat_interval, and at least "
                f"heartbeat_interval + {SAFE_GRACE_MARGIN:g} s on a busy machine, e.g. RDBStorage(url, "
                f"heartbeat_interval={interval:g}, grace_period={interval + SAFE_GRACE_MARGIN:g}))")

    def _drop(self, study: optuna.Study, number: int, depth: int = 0) -> bool:
        """A trial this process runs was failed as stale by a heartbeat check: it is dropped (True: the objective
        ends it as pruned), with one warning (``depth``: calls between ``prune()`` and here, so that the warning
        points at the objective's ``should_prune()``)."""
        key = (study_key(study), number)
        if key not in self._dropped:
            self._dropped.add(key)
            beats = heartbeats(study)
            settings = "" if beats is None else f"heartbeat_interval={beats[0]:g} s, grace_period={beats[1]:g} s: "
            warnings.warn(
                f"SynchronousSHAPruner: trial {number} was failed as stale by a heartbeat check while this process "
                f"still ran it ({settings}its heartbeats came too far apart, usually on a busy machine); it is dropped "
                "(should_prune() returns True, the study keeps it as FAIL and its cohort goes on without it or with "
                f"its retry): use a grace_period at least heartbeat_interval + {SAFE_GRACE_MARGIN:g} s",
                StaleTrialWarning, stacklevel=4 + depth)
        return True

    def _failed_meanwhile(self, study: optuna.Study, number: int, rung: int) -> bool:
        """Whether trial ``number`` is FAIL now, asked the first time it learns the verdict at ``rung``. Optuna
        reads a study's trials in several queries (their states, then their reports), and neither SQLite nor
        PostgreSQL keeps one snapshot across them: a trial failed as stale while its look ran can show as
        running beside reports that came after its failure and decide its rung. A read that starts after
        those reports sees the failure. (A failure after the verdict is Optuna's: the next ``report`` raises.)"""
        key = (study_key(study), number, rung)
        if key in self._verdicts:
            return False
        self._verdicts.add(key)
        return any(t.number == number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))

    def dropped(self, study: optuna.Study, number: int) -> bool:
        """Whether trial ``number`` of ``study`` was dropped because it was failed as stale while this process
        ran it (see :class:`StaleTrialWarning`).

        Args:
            study: the study.
            number: the trial's number.

        Returns:
            True if the pruner dropped it.
        """
        return (study_key(study), number) in self._dropped

    def _local(self, study: optuna.Study) -> bool:
        """Every trial that will run on the study runs in this process: in-memory storage, or shared storage
        that ``workers=1`` says no other process runs."""
        return in_memory(study) or self.workers == 1

    def _workers_hint(self, study: optuna.Study) -> str:
        if in_memory(study):
            return ""
        return (", or, if other worker processes run this study on its shared storage, say how many: "
                "SynchronousSHAPruner(..., workers=N)")

    # Scripts that cannot fill a cohort ------------------------------------------------------------------

    def _ask_and_tell(self, study: optuna.Study, trial: FrozenTrial, size: int, mode: str, rung: int) -> bool:
        """``should_prune()`` outside ``study.optimize``: the caller may train the rest of the cohort itself (the
        batched ask-and-tell pattern), so it never waits. A rung decided already gives its verdict; a rung
        still open gives False, and the trial learns the verdict at its next ``should_prune()`` (its score at
        the rung is the one reported there, so the decision is the same). One trial at a time cannot work."""
        trials, _, mine = self._look(study, size, mode, root_number(trial))
        own = next((t for t in trials if t.number == trial.number), trial)
        if own.state == TrialState.FAIL:
            return self._drop(study, trial.number, depth=1)
        position = mine.roots.index(root_number(trial))
        outcome = self._outcome(mine, position, rung)
        if outcome is not None:
            if self._failed_meanwhile(study, trial.number, rung):
                return self._drop(study, trial.number, depth=1)
            return outcome
        pending = self._pending(mine, position, rung)
        assert pending is not None and mine.ledger is not None
        absent = [p for p in mine.ledger.waiting_for(pending) if mine.queued(p)]
        if absent and self._one_at_a_time(study, trials, trial.number):
            raise SequentialStudyError(
                f"SynchronousSHAPruner: trial {trial.number} reached rung {self.rungs[pending]} of {mine.describe()}, "
                f"whose other {len(absent)} trial(s) have not been asked, and this ask-and-tell script runs one trial "
                f"at a time, so they cannot report the rung before this trial ends: {self._batched_fix(size)}"
                f"{self._workers_hint(study)}")
        return False

    @staticmethod
    def _batched_fix(size: int) -> str:
        return (f"ask the whole cohort first (trials = [study.ask() for _ in range({size})]) and train them in turn, "
                "reporting each one's step and calling should_prune() (in ask-and-tell it never waits: a trial "
                "learns its rung's verdict at its next should_prune())")

    def _one_at_a_time(self, study: optuna.Study, trials: list[FrozenTrial], number: int) -> bool:
        """Ask-and-tell one trial at a time: no other trial of the study runs, and none will start elsewhere."""
        if not self._local(study):
            return False
        return not any(t.state == TrialState.RUNNING and t.number != number for t in trials)

    def _refuse_one_at_a_time(self, study: optuna.Study, trial: FrozenTrial, size: int, mode: str) -> None:
        """At the first ``should_prune()`` of an ask-and-tell trial: refused if it runs alone (in the main thread,
        no other trial running, none starting elsewhere) while its cohort has trials not yet asked."""
        if threading.current_thread() is not threading.main_thread():
            return  # a thread of the caller's own: its siblings may still ask the rest of the cohort
        trials, _, mine = self._look(study, size, mode, root_number(trial))
        absent = [p for p in range(mine.capacity) if mine.queued(p)]
        if absent and self._one_at_a_time(study, trials, trial.number):
            raise SequentialStudyError(
                f"SynchronousSHAPruner: trial {trial.number} is in {mine.describe()}, whose other {len(absent)} "
                "trial(s) have not been asked, and this ask-and-tell script runs one trial at a time, so they cannot "
                f"report a rung before this trial ends: {self._batched_fix(size)}{self._workers_hint(study)}")

    def _refuse_sequential(self, study: optuna.Study, trial: FrozenTrial, loop: dict[str, Any], size: int,
                           mode: str) -> None:
        """At the first ``should_prune()``: a ``study.optimize(..., n_jobs=1)`` runs one trial at a time in this
        thread; when no other thread runs the study, no trial of another process runs, and the storage is this
        process's alone (in memory, or ``workers=1``), the rest of the cohort can never start while this trial
        waits at a rung."""
        if loop.get("n_jobs") != 1 or not self._local(study):
            return
        if thread_activity(study).loops > 1:
            return  # other threads run study.optimize on this study too
        trials, _, mine = self._look(study, size, mode, root_number(trial))
        if any(t.state == TrialState.RUNNING and t.number != trial.number for t in trials):
            return  # another trial runs (another process's): it may start the rest
        absent = [p for p in range(mine.capacity) if mine.queued(p)]
        if not absent:
            return
        raise SequentialStudyError(
            f"SynchronousSHAPruner: trial {trial.number} is in {mine.describe()}, whose other {len(absent)} trial(s) "
            "have not started, and this study runs one trial at a time (study.optimize with n_jobs=1), so they "
            "cannot start while this trial waits at a rung in should_prune(): run the objective with "
            "eve_search.integrations.optuna.optimize_in_cohorts(study, objective, n_trials=...) (a cohort's trials "
            f"are alive at once, n_jobs of them training), or study.optimize(objective, n_trials=..., n_jobs={size})"
            f"{self._workers_hint(study)}")
