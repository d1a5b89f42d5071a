"""The events that close a cohort without a trial's callback, and the last guard against a hang.

A cohort closes when the search algorithm is finished, or when every live trial waits at a rung, none
is pending and the search algorithm proposes none. Neither comes with a callback of Tune's: they are
seen in ``choose_trial_to_run``, right after Tune has asked the search algorithm for trials (Ray's
own ``HyperBandForBOHB`` processes its brackets there for the same reason). A run that stalls all the
same raises after :data:`GUARD_SECONDS`: a guard, never a decision.
"""

from __future__ import annotations

import time
from typing import Any

from ray.tune.experiment import Trial as TuneTrial

from eve_search.integrations._ray import _compat

__all__ = ["GUARD_SECONDS", "ClosingEvents"]

GUARD_SECONDS = 60.0
"""The last guard: a run stalled this long (no trial trains or starts, no event) raises an error. No
decision waits for it: cohorts close on events, and with nothing training the run moves on within a
Tune step or two, so it is sized for a machine ten times slower than any seen."""


class ClosingEvents:
    """Cohorts that close on events, and the guard (a part of :class:`SynchronousSHAScheduler`, which
    holds the state: ``_last_event``, the monotonic time of the last callback or closing event)."""

    def _searcher_finished(self, tune_controller: Any) -> bool:
        try:
            return bool(tune_controller.search_alg.is_finished())
        except AttributeError:  # an older controller without the property: assume the trials are in
            return True

    def _close_if_search_ended(self, tune_controller: Any) -> bool:
        return self._searcher_finished(tune_controller) and self._end("finished")

    def _cut_if_nothing_comes(self, tune_controller: Any) -> bool:
        """Cut the open cohort when every live trial waits at a rung, none is pending or handed work,
        and the search algorithm proposed none (see :meth:`choose_trial_to_run`: it has just been asked)."""
        if not self._segments or self._segments[-1].ended or self._queue:
            return False
        segment = self._segments[-1]
        open_cohort = segment.cohorts - 1
        if segment.final(open_cohort) or not any(
                self._status(t) == "wait" for t in segment.members(open_cohort) if t in self._trials):
            return False
        for trial in tune_controller.get_trials():
            if trial.status == TuneTrial.PENDING or self._executing(trial):
                return False
            if trial.status in (TuneTrial.PAUSED, TuneTrial.RUNNING) and trial.trial_id in self._where \
                    and self._status(trial.trial_id) == "train":
                return False  # promoted, waiting for a slot
        if self._searcher_finished(tune_controller):
            return False
        return self._end("cut")

    def _see_closing_events(self, tune_controller: Any) -> bool:
        """Record an end or a cut of the open cohort when one is due (True), once: the stream decides the
        cohort's rung and its winners get concurrency slots (queued for :meth:`_trial_to_run`), and the
        state is saved. No trial's status changes: the winners are paused trials, and the losers are
        stopped at the next callback."""
        if not (self._close_if_search_ended(tune_controller) or self._cut_if_nothing_comes(tune_controller)):
            return False
        self._grant(tune_controller, resume=False)
        self._save()
        self._last_event = time.monotonic()
        return True

    def _trial_to_run(self, tune_controller: Any) -> TuneTrial | None:
        """The paused trial handed its next work first, else the first pending trial whose actor is not
        starting, else None (reads only)."""
        for trial_id in self._queue:
            trial = self._trials.get(trial_id)
            if trial is not None and trial.status == TuneTrial.PAUSED:
                return trial
        for trial in tune_controller.get_trials():  # first-rung work, in the stream's (arrival) order
            if trial.status == TuneTrial.PENDING and not self._actor_starting(tune_controller, trial):
                return trial
        return None

    # The last guard -------------------------------------------------------------------------------

    def _stalled(self, tune_controller: Any) -> bool:
        """Whether the run cannot move on by itself: live trials, none training or starting, and none
        pending for cluster resources that no idle trial of this run holds."""
        resetting = _compat.resetting_trials(tune_controller)
        live = idle = pending = False
        for trial in tune_controller.get_trials():
            if trial.status in (TuneTrial.TERMINATED, TuneTrial.ERROR):
                continue
            live = True
            if trial.status == TuneTrial.RUNNING:
                if trial.trial_id not in self._idle:
                    return False  # training, saving or restoring
                idle = True
            elif trial.status == TuneTrial.PENDING:
                if trial in resetting or self._has_actor(tune_controller, trial):
                    return False  # its actor is starting
                pending = True
            elif trial.trial_id in self._queue:
                return False  # chosen to run next
        return live and (idle or not pending)

    def _guard(self, tune_controller: Any) -> None:
        """The last guard: raise, rather than hang, when the run has stalled and nothing has happened (no
        callback, no closing event) for ``GUARD_SECONDS``."""
        if not self._stalled(tune_controller) or time.monotonic() - self._last_event < GUARD_SECONDS:
            return
        waiting = [t.trial_id for t in tune_controller.get_trials()
                   if t.status not in (TuneTrial.TERMINATED, TuneTrial.ERROR)]
        raise RuntimeError(f"SynchronousSHAScheduler cannot go on: for {GUARD_SECONDS:g} s no trial trained or "
                           f"started while trials {', '.join(waiting[:5])} waited, and no event could close "
                           f"their cohort (a bug: please report it with this state: {self.debug_string()})")
