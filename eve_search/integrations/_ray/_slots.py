"""Concurrency slots: a trial that waits at a rung gives its slot back to the search algorithm's
concurrency limit (``ConcurrencyLimiter``, ``TuneConfig(max_concurrent_trials=...)``), and the
stream's ready work takes slots first, so that a limit caps how many trials train at once, never the
cohort. How Tune counts them is read through :mod:`~eve_search.integrations._ray._compat`.
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray.tune.experiment import Trial as TuneTrial
from ray.tune.search import BasicVariantGenerator

from eve_search.integrations._ray import _compat

__all__ = ["SlotKeeping"]

logger = logging.getLogger(__package__)


class SlotKeeping:
    """Slots and the work handed out in them (a part of :class:`SynchronousSHAScheduler`, which holds
    the state: ``_queue``, ``_stopping``, ``_in_stop``, ``_admission_set``)."""

    def _slots(self, tune_controller: Any) -> list[_compat.Limit]:
        """The search algorithm's concurrency limits that count trials by id (a paused trial's slot
        can be given back). A limit this cannot see (a searcher's own) makes the search algorithm
        propose no trial while every trial waits: the open cohort is then cut."""
        return _compat.concurrency_limits(getattr(tune_controller, "search_alg", None))

    def _limit_admission(self, tune_controller: Any, trial: TuneTrial) -> None:
        """With cohorts of ``cohort_size`` and a search algorithm without a limit, give it one: as many
        slots as trials can train at once on the cluster (its CPUs and GPUs over a trial's), and at
        least ``cohort_size``.

        The stream opens the next cohort only when a worker is free and no promoted trial takes it.
        The slots do that here: a trial that waits at a rung gives its slot back, a promoted trial
        takes one first, and the search algorithm proposes a trial only for a free slot. Without a
        limit Tune keeps up to 200 new trials pending and gives free actors to them in an order of its
        own: an endless search with cohorts of 4 on 2 CPUs opened 88 cohorts in 20 s and decided none.
        The limit used to be ``cohort_size`` itself, which left workers idle whenever a cohort was
        smaller than the cluster.
        """
        if self._admission_set:
            return
        self._admission_set = True
        alg = getattr(tune_controller, "search_alg", None)
        if self._cohort_size is None or not isinstance(alg, BasicVariantGenerator) or alg.max_concurrent != 0:
            return
        try:
            cluster = ray.cluster_resources()
            needs = trial.placement_group_factory.required_resources
            fits = min(int(cluster.get(name, 0) // amount) for name, amount in needs.items() if amount > 0)
        except Exception:  # noqa: BLE001 no view of the cluster: cohort_size alone, as before
            fits = 0
        alg.max_concurrent = max(self._cohort_size, fits)
        logger.info("SynchronousSHAScheduler: the search algorithm proposes a trial when one of %d slots is free",
                    alg.max_concurrent)

    def _holds_slot(self, tune_controller: Any, trial_id: str) -> bool:
        return all(trial_id in slots.live for slots in self._slots(tune_controller))

    def _release(self, tune_controller: Any, trial_id: str) -> None:
        """A trial that waits (paused, or idle on its actor) gives its slot back, first to the stream's
        next ready work, else to the search algorithm's next trial."""
        for slots in self._slots(tune_controller):
            slots.live.discard(trial_id)
        self._grant(tune_controller)

    def _claim(self, tune_controller: Any, trial_id: str) -> bool:
        """Take a slot for ``trial_id`` (True), or say there is none free (False)."""
        limits = self._slots(tune_controller)
        for slots in limits:  # a trial that ended without the limit hearing of it holds no slot
            slots.live.difference_update([t for t in slots.live if t in self._trials and self._trials[t].status
                                          in (TuneTrial.TERMINATED, TuneTrial.ERROR) and t not in self._in_stop
                                          and t not in self._recovering])
        missing = [s for s in limits if trial_id not in s.live]
        if any(len(s.live) >= s.limit for s in missing):
            return False
        for slots in missing:
            slots.live.add(trial_id)
        return True

    def _stop(self, tune_controller: Any, trial: TuneTrial) -> None:
        """Stop a paused or idle trial; its slot comes back first, so that the search algorithm hears
        that it ended (a ``ConcurrencyLimiter`` only passes on the trials it counts)."""
        if trial.trial_id in self._in_stop:  # Tune calls back into the scheduler while it stops a trial
            return
        if not self._holds_slot(tune_controller, trial.trial_id):
            for slots in self._slots(tune_controller):
                slots.live.add(trial.trial_id)
            self._stopping.add(trial.trial_id)
        self._in_stop.add(trial.trial_id)
        try:
            tune_controller.stop_trial(trial)
        finally:
            self._in_stop.discard(trial.trial_id)

    def _hand_over(self, tune_controller: Any, trial_id: str) -> None:
        """``trial_id`` ends holding a slot (Tune frees it after this callback): the stream's next ready
        work takes it now, ahead of the search algorithm's next trial."""
        if trial_id in self._stopping:
            self._stopping.discard(trial_id)
            return
        limits = self._slots(tune_controller)
        if limits and all(trial_id in s.live for s in limits):
            self._grant(tune_controller, freeing=trial_id)

    def _grant(self, tune_controller: Any, freeing: str | None = None, resume: bool = True) -> None:
        """Hand the stream's ready work out, in its order, while concurrency slots allow: each piece
        goes to its waiting trial with a slot (a trial idle on its actor trains on at once when
        ``resume``; a paused one is queued for :meth:`choose_trial_to_run`). Work that Tune runs already
        is counted as running. ``freeing``: a trial that ends holding a slot that Tune frees after this
        callback; the first piece with no free slot takes it, ahead of the search algorithm's next trial.
        Stops at the search algorithm's next trial (it opens the next cohort when a slot is free)."""
        while (found := self._next_work()) is not None:
            segment, work = found
            if work.index >= len(segment.trials):
                return
            trial_id = segment.trials[work.index]
            trial = self._trials.get(trial_id)
            if trial is None or trial_id in self._recovering:
                return  # a restored run whose trial Tune has not added back yet, or one Tune adds again
            if trial.status in (TuneTrial.TERMINATED, TuneTrial.ERROR):
                self._leave(trial_id)  # it ended without the scheduler hearing of it
                continue
            if self._executing(trial):
                segment.start(work.index, work.rung)
                continue
            if not (self._holds_slot(tune_controller, trial_id) or self._claim(tune_controller, trial_id)):
                if freeing is None:
                    return
                for slots in self._slots(tune_controller):
                    slots.live.add(trial_id)
                freeing = None
            segment.start(work.index, work.rung)
            if trial_id in self._idle and trial.status == TuneTrial.RUNNING and resume:
                self._idle.discard(trial_id)
                self._resume(tune_controller, trial)
            elif trial_id not in self._queue:
                self._queue.append(trial_id)
