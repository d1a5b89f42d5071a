"""Actors: what a trial does after its result (train on, pause, stay idle on its actor, stop), and
which waiting trial gives its actor to a trial that needs one. Starting a Python process that imports
PyTorch takes seconds, so an actor is kept busy rather than shut down; how many actors Tune holds free
is read through :mod:`~eve_search.integrations._ray._compat`.
"""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial as TuneTrial
from ray.tune.schedulers import TrialScheduler

from eve_search.integrations._ray import _compat

__all__ = ["ActorKeeping"]


class ActorKeeping:
    """The actors of a run (a part of :class:`SynchronousSHAScheduler`, which holds the state:
    ``_idle``, ``_served``, ``_pausing``, ``_handing``, ``_paused``, ``_acting``)."""

    def _executing(self, trial: TuneTrial) -> bool:
        """Whether Tune runs ``trial`` to its next rung: pending, or training on its actor."""
        if trial.status == TuneTrial.PENDING:
            return True
        return trial.status == TuneTrial.RUNNING and trial.trial_id not in self._idle \
            and not (trial.trial_id in self._pausing and trial.is_saving)

    def _waiting(self, trial: TuneTrial) -> bool:
        """Whether ``trial`` waits for work: paused, being paused, or idle on its actor."""
        return trial.status == TuneTrial.PAUSED or (trial.status == TuneTrial.RUNNING and not self._executing(trial))

    def _runnable(self, tune_controller: Any, exclude: TuneTrial) -> bool:
        """Whether another trial could use ``exclude``'s actor now: a trial handed its next work while
        paused, or a pending trial, that the actors Tune already holds free will not serve.

        Pausing a trial when every such trial has a free actor waiting leaves one actor too many in
        Tune's cache, and Tune ends it at its next step. At the end of the first rung that took one of
        the demo sweep's two actors; Tune then started replacement actors (a new process importing
        PyTorch each) that never trained, and the other rungs ran on one actor.
        """
        return bool(self._needing_actors(tune_controller, exclude))

    def _needing_actors(self, tune_controller: Any, exclude: TuneTrial | None = None) -> list[TuneTrial]:
        """Trials (but ``exclude``) that need an actor no actor Tune already holds free will serve: the
        paused trials handed their next work (the stream's order), then the pending trials that are not
        being handed a cached actor already, beyond as many as there are free actors: those in Tune's
        cache, and those of trials told to pause whose checkpoint is still being saved (a pause frees the
        actor only then). Trials already promised an idle trial's actor (``_served``) are the first ones
        those actors serve. A pending trial whose own actor is still starting counts: a free actor serves
        it at once, where a new one takes seconds (a Python process importing torch)."""
        resetting = _compat.resetting_trials(tune_controller)
        trials = tune_controller.get_trials()
        handed = [self._trials[t] for t in self._queue if t in self._trials and self._trials[t] is not exclude
                  and self._trials[t].status == TuneTrial.PAUSED]
        pending = [t for t in trials if t is not exclude and t.status == TuneTrial.PENDING and t not in resetting]
        pending.sort(key=lambda t: t.trial_id not in self._served)
        freeing = sum(1 for t in trials if t is not exclude and (t.trial_id in self._paused or t.trial_id in
                                                                 self._pausing)
                      and t.status == TuneTrial.RUNNING and t.is_saving)
        return (handed + pending)[_compat.cached_actors(tune_controller) + freeing:]

    @staticmethod
    def _has_actor(controller: Any, trial: TuneTrial) -> bool:
        """Whether Tune has granted pending ``trial`` an actor (started, or being constructed): it does
        not wait for the cluster's resources."""
        return _compat.has_actor(controller, trial)

    @staticmethod
    def _actor_starting(tune_controller: Any, trial: TuneTrial) -> bool:
        """Whether Tune is constructing an actor for ``trial`` now (granted its resources, not ready yet).

        Such a trial is not chosen to run: Tune gives the trial it is told to run a free cached actor
        if it has one, and ends the actor it was constructing for it. When a sweep's first trial
        finished before the second actor was ready, Tune ended that actor, then each replacement in
        turn (the first trial's actor was free again every fraction of a second), and the whole sweep
        ran on one actor. Choosing another pending trial also keeps Tune from giving the free actor to
        one it picks itself, which may be that one.
        """
        return _compat.actor_starting(tune_controller, trial)

    def _handovers(self, tune_controller: Any, exclude: TuneTrial | None = None) -> list[tuple[TuneTrial, str]]:
        """(trial that needs an actor, idle trial) pairs: each trial that no free actor will serve takes
        the actor of a trial idle on one, losers first, then trials that wait for their rung or for a
        slot.

        A pending trial that Tune is already handing a cached actor must not count: an idle trial
        paused for it would leave its actor one too many, Tune would end it, and the next rungs would
        start replacement actors that never train, and run on one actor.
        """
        needers = [t for t in self._needing_actors(tune_controller, exclude) if t.trial_id not in self._served]
        order = {"wait": 1, "train": 2}  # losers first, then trials that wait for their rung or for a slot
        idle = sorted((tid for tid in self._idle if (exclude is None or tid != exclude.trial_id)
                       and (self._status(tid) != "train" or not self._holds_slot(tune_controller, tid))),
                      key=lambda tid: (order.get(self._status(tid), 0), tid))
        return list(zip(needers, idle))

    def _pause(self, tune_controller: Any, trial: TuneTrial) -> None:
        """Pause an idle trial (its actor goes back to Tune once its checkpoint is saved)."""
        trial_id = trial.trial_id
        self._idle.discard(trial_id)
        self._pausing.add(trial_id)
        if self._status(trial_id) in ("wait", "train"):
            self._paused.add(trial_id)
        else:
            self._handing.add(trial_id)
        tune_controller.pause_trial(trial)

    @staticmethod
    def _resume(tune_controller: Any, trial: TuneTrial) -> None:
        """Train an idle trial (its actor kept its state) on to its next rung."""
        if not _compat.train_idle_trial(tune_controller, trial):
            tune_controller.pause_trial(trial)  # no such hook: checkpoint, pause, and resume it as paused

    def _quiet(self, tune_controller: Any, current: TuneTrial | None = None) -> bool:
        """Whether nothing will run unless the search algorithm proposes a trial: no trial but
        ``current`` trains or is pending, none was handed work it has not started, and ``current``
        (whose result this is) does not go on."""
        if current is not None and current.trial_id in self._where and self._status(current.trial_id) == "train":
            return False
        if any(t in self._trials and self._waiting(self._trials[t]) for t in self._queue):
            return False
        return not any(t is not current and self._executing(t) for t in tune_controller.get_trials())

    def _act(self, tune_controller: Any, current: TuneTrial | None = None) -> None:
        """Carry out the stream's decisions on every trial but ``current`` (it gets the return value of
        :meth:`on_trial_result`): hand out ready work, stop the losers that wait, give idle actors to
        the trials that need one. When nothing else runs and the search algorithm may still propose
        a trial, every trial idle on its actor is paused: if it proposes none, the cut made in
        :meth:`choose_trial_to_run` can only hand work to paused trials (it changes no trial itself)."""
        if self._acting:  # a trial this stops calls back (on_trial_remove): the loop below goes on
            return
        self._acting = True
        try:
            self._grant(tune_controller)
            self._queue = [t for t in self._queue if t in self._trials and self._waiting(self._trials[t])]
            self._served = {t for t in self._served
                            if t in self._trials and self._trials[t].status == TuneTrial.PENDING}
            self._act_on_members(tune_controller, current)
            for needer, trial_id in self._handovers(tune_controller, current):
                self._served.add(needer.trial_id)
                self._pause(tune_controller, self._trials[trial_id])
            self._act_on_idle(tune_controller, current)
        finally:
            self._acting = False

    def _act_on_members(self, tune_controller: Any, current: TuneTrial | None) -> None:
        """Idle trials whose work was handed to them train on; paused losers are stopped."""
        for trial_id in self._members():
            trial = self._trials.get(trial_id)
            if trial is None or trial is current:
                continue
            if trial_id in self._idle:
                if trial.status != TuneTrial.RUNNING:
                    self._idle.discard(trial_id)
                elif self._status(trial_id) == "train" and self._handed(trial_id):
                    self._idle.discard(trial_id)
                    self._resume(tune_controller, trial)
                continue
            # A loser is stopped once paused, never while a checkpoint of it is being saved (a pause, or a
            # checkpoint it reported with its last result): Tune drops a save in flight when the trial stops, and
            # its latest checkpoint with it. It is stopped at a later callback (the winners of its rung train on).
            if self._status(trial_id) in ("stopped", "complete", "failed") and trial.status == TuneTrial.PAUSED:
                self._stop(tune_controller, trial)

    def _act_on_idle(self, tune_controller: Any, current: TuneTrial | None) -> None:
        """Idle losers that no trial needs the actor of are stopped; when nothing else runs and the search
        algorithm may still propose a trial, idle trials that wait are paused."""
        needed = bool(self._needing_actors(tune_controller, current))
        quiet = self._quiet(tune_controller, current) and not self._searcher_finished(tune_controller)
        for trial_id in sorted(self._idle):
            trial = self._trials[trial_id]
            if trial is current or trial.status != TuneTrial.RUNNING:
                continue
            status = self._status(trial_id)
            if status not in ("wait", "train") and not needed and not trial.is_saving:
                self._idle.discard(trial_id)
                self._stop(tune_controller, trial)
            elif quiet and status == "wait":
                self._pause(tune_controller, trial)

    def _action(self, tune_controller: Any, trial: TuneTrial) -> str:
        """What ``trial`` does after its result. A trial that must wait (or has lost) while no other
        trial could take its actor stays idle on it (NOOP) rather than pausing: Tune would otherwise
        shut the actor down, and the next trial would pay a new one's start-up (seconds: a Python
        process importing torch) for a fraction of a second of training. Either way it gives its
        concurrency slot back. A loser whose actor another trial needs is paused (its actor goes to
        Tune when its checkpoint is saved, by then promised to that trial) and stopped afterwards."""
        trial_id = trial.trial_id
        status = self._status(trial_id)
        if status == "train":
            self._start_next(trial_id)
            return TrialScheduler.CONTINUE
        if status == "wait":
            segment, index = self._locate(trial_id)
            if segment.score(index, len(self._rungs) - 1) is not None:
                return TrialScheduler.STOP  # complete at the last rung: nothing to wait for
            self._release(tune_controller, trial_id)
            if self._runnable(tune_controller, trial) or (self._quiet(tune_controller, trial)
                                                          and not self._searcher_finished(tune_controller)):
                self._paused.add(trial_id)
                self._pausing.add(trial_id)
                return TrialScheduler.PAUSE
            self._idle.add(trial_id)
            return TrialScheduler.NOOP
        if self._runnable(tune_controller, trial):  # hand its actor to a trial that needs one
            self._release(tune_controller, trial_id)
            self._handing.add(trial_id)
            self._pausing.add(trial_id)
            return TrialScheduler.PAUSE
        return TrialScheduler.STOP
