"""Tune's callbacks: what the scheduler does when Tune adds a trial, hears a result, or a trial ends.

They are where Ray lets a scheduler act: ``on_trial_result`` returns what the trial does next
(CONTINUE; PAUSE at a rung; NOOP, idle on its actor; STOP), and every callback carries out the
stream's decisions on the other trials (stops the losers that wait, hands idle actors over).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from ray.tune.experiment import Trial as TuneTrial

from eve_search._checks import InputError
from eve_search.integrations._ray import _compat
from eve_search.integrations._ray._options import check_mode

__all__ = ["Callbacks"]

logger = logging.getLogger(__package__)


class Callbacks:
    """Tune's callbacks (a part of :class:`SynchronousSHAScheduler`, which holds the state)."""

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        if self._metric and metric and metric != self._metric:
            return False
        if self._mode and mode and mode != self._mode:
            return False
        check_mode(mode)
        self._metric = metric or self._metric
        self._mode = mode or self._mode
        self._check_metric_and_mode()
        samples = spec.get("num_samples")
        if self._cohort_size is None and isinstance(samples, int) and samples >= sys.maxsize:
            raise InputError("Invalid cohort_size: None (num_samples=-1 is an endless search, so a cohort of "
                             "every trial would never be complete: pass SynchronousSHAScheduler(cohort_size=...), "
                             "e.g. 27)")
        return True

    def _check_metric_and_mode(self) -> None:
        if self._metric is None:
            raise InputError("Invalid metric: None (expected SynchronousSHAScheduler(metric=...) or "
                             "tune.TuneConfig(metric=...))")
        if self._mode is None:
            raise InputError("Invalid mode: None (expected SynchronousSHAScheduler(mode=...) or "
                             "tune.TuneConfig(mode=...), 'max' or 'min')")

    def _heard(self, trial: TuneTrial) -> None:
        """Any callback: the state it was saved in is loaded, and the run moves (the guard rests)."""
        self._open(trial)
        self._last_event = time.monotonic()

    def _park(self, tune_controller: Any, trial: TuneTrial, status: str) -> None:
        """Give a trial that Tune is adding (restored, or requeued after its actor failed) ``status``
        before Tune can start it: PAUSED (it waits for its rung's decision, its checkpoint holds its
        result there) or TERMINATED (its rung was decided, and it lost)."""
        if _compat.is_requeued(tune_controller, trial):  # Tune has filed it as pending
            if status == TuneTrial.TERMINATED:
                self._stop(tune_controller, trial)
            else:
                _compat.set_trial_status(tune_controller, trial, status)
            return
        trial.set_status(status)  # being added: Tune files it by the status it has when this returns
        if status == TuneTrial.TERMINATED:
            for slots in self._slots(tune_controller):
                slots.live.discard(trial.trial_id)

    def on_trial_add(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._heard(trial)
        trial_id = trial.trial_id
        self._trials[trial_id] = trial
        recovering = trial_id in self._recovering
        self._recovering.discard(trial_id)
        if trial_id not in self._where:
            self._limit_admission(tune_controller, trial)
            self._arrive(trial_id)
            self._tags[trial_id] = str(trial.experiment_tag)
            if trial.status == TuneTrial.PENDING:
                self._start_next(trial_id)
            self._act(tune_controller)  # an idle actor may be its
            self._save()
            return
        # A trial the stream knows: restored by Tuner.restore, or requeued after its actor failed. It
        # restarts from its latest checkpoint; if it lost its rung it ends, and if that checkpoint
        # already holds every rung it reported and it must wait, it is parked instead of training past
        # its rung.
        if trial.status not in (TuneTrial.PENDING, TuneTrial.PAUSED):
            return
        checkpoint = trial.latest_checkpoint_result
        restored = float(checkpoint.metrics.get(self._time_attr, 0.0)) if checkpoint is not None else 0.0
        status = self._status(trial_id)
        if status in ("stopped", "complete", "failed"):
            self._park(tune_controller, trial, TuneTrial.TERMINATED)
        elif status == "wait" and restored >= self._reached(trial_id):
            self._park(tune_controller, trial, TuneTrial.PAUSED)
        elif recovering:
            logger.info("SynchronousSHAScheduler: trial %s rejoins its rung from %s=%g", trial_id,
                        self._time_attr, restored)
        if trial.status == TuneTrial.PENDING and status == "train":
            self._start_next(trial_id)

    def on_trial_result(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> str:
        self._heard(trial)
        self._pausing.discard(trial.trial_id)
        self._record(trial, result)
        self._close_if_search_ended(tune_controller)
        self._act(tune_controller, current=trial)
        action = self._action(tune_controller, trial)
        self._save()
        return action

    def _ended(self, tune_controller: Any, trial: TuneTrial) -> None:
        """Bookkeeping for a trial that ended, after the stream heard of it."""
        trial_id = trial.trial_id
        for waiting in (self._idle, self._pausing, self._handing, self._paused):
            waiting.discard(trial_id)
        self._queue = [t for t in self._queue if t != trial_id]
        self._close_if_search_ended(tune_controller)
        self._hand_over(tune_controller, trial_id)
        self._act(tune_controller, current=trial)
        self._check_best(tune_controller, trial)
        self._save()

    def on_trial_complete(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> None:
        self._heard(trial)
        trial_id = trial.trial_id
        if trial_id not in self._where:
            return
        if result and self._time_attr in result:
            self._record(trial, result, fresh=False)
        status = self._status(trial_id)
        # A trial that ends on its own (done, or a Tune stopper) before its rung leaves the cohort; one
        # that ended at the last rung keeps its place there.
        segment, index = self._locate(trial_id)
        last_rung_reported = segment.score(index, len(self._rungs) - 1) is not None
        if status == "train" or (status == "wait" and not last_rung_reported):
            self._ended_early(trial_id, result)
            self._leave(trial_id)
        self._ended(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._heard(trial)
        trial_id = trial.trial_id
        if trial_id not in self._where:
            return
        if self._status(trial_id) in ("train", "wait"):  # stopped by someone else
            self._leave(trial_id)
        self._ended(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._heard(trial)
        trial_id = trial.trial_id
        if trial_id not in self._where:
            return
        if trial.status == TuneTrial.ERROR and trial.should_recover():
            # Tune is requeueing it (FailureConfig(max_failures)): it restores from its last checkpoint
            # and is added again.
            self._recovering.add(trial_id)
            return
        if self._status(trial_id) in ("train", "wait"):
            self._leave(trial_id)
        self._ended(tune_controller, trial)

