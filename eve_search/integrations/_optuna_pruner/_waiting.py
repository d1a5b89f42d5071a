"""The wait at a rung inside ``should_prune()``: poll the storage until the rung is decided, and close the
cohort or refuse when this process's threads show that no trial can start any more. Events decide, never a
clock: the pruner's ``timeout`` (the user's own decision by the clock) and ``stall_seconds`` (a last guard
that raises) are the only timers."""

from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from eve_search.integrations._optuna_pruner._cohort import Cohort, root_number
from eve_search.integrations._optuna_pruner._errors import CohortStalledError
from eve_search.integrations._optuna_pruner._threads import fingerprint, thread_activity

__all__ = ["Waiter", "Waiting"]


@dataclass
class Waiter:
    """One trial waiting at a rung in ``should_prune()``: where it waits, and what its wait has seen so far."""

    study: optuna.Study
    trial: FrozenTrial
    size: int  # the cohort size
    mode: str  # "max" or "min"
    rung: int
    root: int  # the trial's place: root_number(trial)
    slot: Any  # the training slot of optimize_in_cohorts, or None
    loop: dict[str, Any] | None  # what this thread's study.optimize does (own_loop), or None
    started: float = field(default_factory=time.monotonic)
    released: bool = False  # the slot was given up while waiting
    last_stale_check: float = 0.0
    previous: tuple[Any, ...] | None = None  # the last stall verdict, with the study's state it was seen in
    stalled_since: float | None = None


class Waiting:
    """Waiting at a rung (a part of :class:`~eve_search.integrations.optuna.SynchronousSHAPruner`, which holds
    the settings ``rungs``, ``timeout``, ``poll_interval`` and ``stall_seconds`` and the state
    ``_warned_alone``; it reads the study with :class:`~._ledger.StudyLedger` and refuses with
    :class:`~._guards.Guards`)."""

    def _wait(self, waiter: Waiter) -> bool:
        """Wait at the rung until it is decided (polling the storage); close the cohort, or refuse, when the
        threads of this process show that no trial can start any more."""
        while True:
            trials, mine, outcome = self._poll(waiter)
            if outcome is not None:
                return outcome
            pending = self._pending(mine, mine.roots.index(waiter.root), waiter.rung)
            assert pending is not None and mine.ledger is not None
            absent = [p for p in mine.ledger.waiting_for(pending) if mine.queued(p)]
            if self._decide_without_absent(waiter, trials, mine, pending, absent):
                continue
            self._check_stale(waiter)
            if self._act_on_stall(waiter, trials, mine, pending, absent):
                continue
            time.sleep(self.poll_interval)

    def _poll(self, waiter: Waiter) -> tuple[list[FrozenTrial], Cohort, bool | None]:
        """One read of the study: the trials, the waiting trial's cohort replayed, and the verdict at the rung
        (None: not decided yet). The trial gives its training slot up while it waits, and takes it back
        when it goes on."""
        trials, _, mine = self._look(waiter.study, waiter.size, waiter.mode, waiter.root)
        own = next((t for t in trials if t.number == waiter.trial.number), waiter.trial)
        if own.state == TrialState.FAIL:  # failed as stale while it waited: it ends here
            return trials, mine, self._drop(waiter.study, waiter.trial.number, depth=2)
        outcome = self._outcome(mine, mine.roots.index(waiter.root), waiter.rung)
        if outcome is not None:
            if self._failed_meanwhile(waiter.study, waiter.trial.number, waiter.rung):
                return trials, mine, self._drop(waiter.study, waiter.trial.number, depth=2)
            if waiter.released and not outcome:
                waiter.slot.acquire()  # goes on: train again when its turn comes
            return trials, mine, outcome
        if waiter.slot is not None and not waiter.released:
            waiter.slot.release()  # waits: let another trial of the cohort train meanwhile
            waiter.released = True
        return trials, mine, None

    def _decide_without_absent(self, waiter: Waiter, trials: list[FrozenTrial], mine: Cohort, pending: int,
                               absent: list[int]) -> bool:
        """Decide the pending rung without the members that have not started, where they cannot be waited for
        (one trial at a time) or the user's ``timeout`` has passed. True: decided (read it at the next poll)."""
        study = waiter.study
        if absent and waiter.slot is None and self._runs_alone(study, trials, waiter.trial.number):
            # one trial at a time, with timeout=: the trials that have not started cannot be waited for
            self._replay(study, mine, waiter.mode, study.user_attrs, force=pending, reason="sequential")
            return True
        if self.timeout is not None and time.monotonic() - waiter.started >= self.timeout:
            self._replay(study, mine, waiter.mode, study.user_attrs, force=pending, reason="timeout")
            return True
        return False

    @staticmethod
    def _check_stale(waiter: Waiter) -> None:
        """Fail stale trials (a dead worker's) at most once a second: nothing else finds them while every trial
        waits."""
        now = time.monotonic()
        if now - waiter.last_stale_check >= 1.0:
            waiter.last_stale_check = now
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(waiter.study)

    def _act_on_stall(self, waiter: Waiter, trials: list[FrozenTrial], mine: Cohort, pending: int,
                      absent: list[int]) -> bool:
        """When no trial can report or start any more (seen twice in a row, the study unchanged between): close
        the last cohort (True: look again at once), or refuse, or guard against a hang on shared storage."""
        verdict = None
        if absent and waiter.loop is not None:
            verdict = self._stalled(waiter.study, trials, waiter.size, waiter.mode)
        seen = None if verdict is None else (verdict, fingerprint(trials))
        if seen is None or seen != waiter.previous:
            waiter.previous, waiter.stalled_since = seen, None
            return False  # acted on only when two looks in a row see it, the study unchanged between them
        kind, detail = verdict
        if kind == "ended":
            self._close_and_decide(waiter, detail)
            waiter.previous = None
            return True
        if self.timeout is None and kind == "full":
            raise CohortStalledError(self._full_message(waiter, mine, pending, absent, detail))
        if self.timeout is None:  # "unknown": other worker processes may still start the trials
            self._guard_stall(waiter, mine, pending, absent)
        return False

    def _close_and_decide(self, waiter: Waiter, reason: str) -> None:
        """No more trials join the last cohort: close it, and decide the pending rung without the members that
        never started."""
        study = waiter.study
        self._close(study, reason)
        _, _, mine = self._look(study, waiter.size, waiter.mode, waiter.root)
        ledger = mine.ledger
        assert ledger is not None
        pending = self._pending(mine, mine.roots.index(waiter.root), waiter.rung)
        if pending is not None and any(mine.queued(p) for p in ledger.waiting_for(pending)):
            self._replay(study, mine, waiter.mode, study.user_attrs, force=pending, reason="closed")

    def _guard_stall(self, waiter: Waiter, mine: Cohort, pending: int, absent: list[int]) -> None:
        """On shared storage, where only other worker processes can start the absent trials: warn once, and
        raise :class:`CohortStalledError` once the stall has lasted ``stall_seconds`` (a last guard)."""
        if waiter.stalled_since is None and not self._warned_alone:
            self._warned_alone = True
            warnings.warn(
                f"SynchronousSHAPruner: rung {self.rungs[pending]} of {mine.describe()} waits for "
                f"{len(absent)} trial(s) that have not started, while every running trial of the study waits "
                "at a rung and this process can start none: on shared storage only other worker processes "
                "can start them. If none will, stop and run the objective with eve_search.integrations."
                "optuna.optimize_in_cohorts(study, objective, n_trials=...); should_prune() raises "
                f"CohortStalledError after stall_seconds={self.stall_seconds:g} s of this",
                RuntimeWarning, stacklevel=6)  # _guard_stall, _act_on_stall, _wait, prune, should_prune: the objective
        now = time.monotonic()
        waiter.stalled_since = now if waiter.stalled_since is None else waiter.stalled_since
        if now - waiter.stalled_since >= self.stall_seconds:
            raise CohortStalledError(
                f"SynchronousSHAPruner: rung {self.rungs[pending]} of {mine.describe()} waited "
                f"stall_seconds={self.stall_seconds:g} s for {len(absent)} trial(s) that have not started, "
                "while every running trial of the study waits at a rung and this process can start none: "
                f"start more worker processes on the study (a cohort needs {waiter.size} trials alive at once), or "
                "run the objective with eve_search.integrations.optuna.optimize_in_cohorts(study, objective, "
                "n_trials=...), or pass n_trials= to the pruner if no more trials will start, or lower "
                "cohort_size")

    def _full_message(self, waiter: Waiter, mine: Cohort, pending: int, absent: list[int], jobs: int) -> str:
        """Every thread of ``study.optimize(..., n_jobs=jobs)`` waits at a rung for trials none can start."""
        size = waiter.size
        return (f"SynchronousSHAPruner: rung {self.rungs[pending]} of {mine.describe()} waits for {len(absent)} "
                f"trial(s) that have not started, while all {jobs} threads of study.optimize(..., "
                f"n_jobs={jobs}) wait at a rung, so none can start: run study.optimize(objective, n_trials=..., "
                f"n_jobs={size}) (a cohort's trials alive at once), or eve_search.integrations.optuna."
                f"optimize_in_cohorts(study, objective, n_trials=..., n_jobs={jobs}) (they take turns), or "
                f"lower cohort_size to {jobs}, or set timeout= to decide without them"
                f"{self._workers_hint(waiter.study)}")

    def _stalled(self, study: optuna.Study, trials: list[FrozenTrial], size: int,
                 mode: str) -> tuple[str, Any] | None:
        """Whether no trial of this process can report or start any more (read from the stacks of its threads):
        None while one can (a thread trains or is about to ask, another process's trial runs, a waiting trial's
        rung can be decided), else ``("ended", reason)`` when every ``study.optimize`` on the study has stopped
        asking, ``("full", n_jobs)`` when one waits for a free thread that no trial will give back, and
        ``("unknown", None)`` otherwise (a sequential loop waits, on shared storage)."""
        activity = thread_activity(study)
        if not activity.known or activity.busy or activity.pending > activity.pool:
            return None  # a thread can still report or start a trial, or a task is on its way to one
        if activity.full and activity.pool < sum(activity.full):
            return None  # a thread of a full pool is free again: its loop is about to start a trial
        running = {t.number for t in trials if t.state == TrialState.RUNNING}
        if running - activity.running:
            return None  # a trial this process does not run: another process's, which may report or end
        attrs = study.user_attrs
        cohorts = self._cohorts(trials, size, attrs)
        for number, waiting_rung in activity.waiting:
            frozen = next((t for t in trials if t.number == number), None)
            if frozen is None:
                return None
            cohort = next((c for c in cohorts if root_number(frozen) in c.roots), None)
            if cohort is None:
                return None
            self._replay(study, cohort, mode, attrs)
            if self._outcome(cohort, cohort.roots.index(root_number(frozen)), waiting_rung) is not None:
                return None  # decided: that trial goes on
        local = self._local(study)  # no other process will start a trial
        if activity.full or activity.blocked:
            if local and activity.full:
                return ("full", min(activity.full))
            if local:
                return ("full", 1)
            return ("unknown", None)
        if activity.ended:
            return ("ended", activity.ended[0])
        return ("unknown", None)

    def _runs_alone(self, study: optuna.Study, trials: list[FrozenTrial], number: int) -> bool:
        """One trial at a time: this study's trials live in this process only (in-memory storage, or ``workers=1``),
        this trial runs in the main thread (``study.optimize`` with ``n_jobs=1``, or ask-and-tell), and no other
        trial is running."""
        if threading.current_thread() is not threading.main_thread():
            return False
        if not self._local(study):
            return False  # shared storage: another process may still start the rest of the cohort
        return not any(t.state == TrialState.RUNNING and t.number != number for t in trials)
