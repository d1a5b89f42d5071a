"""One worker of a synchronous SHA study on Optuna storage: it claims work items until every rung is decided."""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from eve_search.engine import _stores
from eve_search.engine.checkpoint import CheckpointError, remove_checkpoint, save_atomically
from eve_search.engine.sha import trial_bytes
from eve_search.engine.trial import KeptTrials, Trial
from eve_search.integrations._optuna_adapter import claim_at_once, end_waiting_at_once
from eve_search.integrations._optuna_driver._storage import Heartbeat, quiet
from eve_search.integrations._optuna_driver._view import (
    ERROR_ATTR,
    View,
    WorkerSettings,
    all_done,
    best_score,
    ending,
    progress,
    read_view,
)

__all__ = ["WORKER_ATTR", "ShaWorker", "WorkerReport"]

WORKER_ATTR = "worker"  # user attribute: the worker that holds, or last held, a trial (host:pid)


@dataclass
class WorkerReport:
    """What one worker did: rung results it trained, trials it pruned and completed, retries it resumed.

    Args:
        worker: the worker's name (host:pid unless given).
        trained: rung results it trained and recorded.
        pruned: configurations it ended PRUNED.
        completed: configurations it ended COMPLETE (or FAIL, for a non-finite final score).
        resumed: retries of a dead worker's trial it took over.
        seconds: its wall time.

    Example:
        >>> report = WorkerReport(worker="host:1", trained=8, pruned=4, completed=2)
        >>> report.trained + report.resumed, report.seconds
        (8, 0.0)
    """

    worker: str
    trained: int = 0
    pruned: int = 0
    completed: int = 0
    resumed: int = 0
    seconds: float = 0.0


class ShaWorker:
    """One worker of a synchronous SHA study: claims work items until every rung is decided and applied.

    The next work item is the one the stream of cohorts (:class:`~eve_search.engine.stream.CohortStream`)
    offers first among the trials waiting in the queue: a promoted trial of the oldest cohort, then a
    first-rung trial of the oldest cohort that has one. A worker whose cohort waits at a rung for
    trials other workers hold takes the next cohort's first rung meanwhile; the decisions, and the
    winner, are each cohort's ledger's, the same for any number of workers.

    Args:
        study: the study (loaded on ``storage``).
        storage: the study's RDB storage, preferably from :func:`worker_storage` (heartbeats, retries).
        settings: the configurations, rung rule, cohorts, polling and memory (:class:`WorkerSettings`).
        make_trial: a fresh :class:`~eve_search.engine.trial.Trial` for an index.
        checkpoint_path: where an index's checkpoint lives (shared by every worker).
        details: extra details to record with a rung result (e.g. test metrics of a new best).
        progress: called as (phase, rung, reported in the rung, trials of the rung, best score), the
            counts summed over the cohorts.

    A trial this worker trained stays in its memory while the kept trials fit in ``keep_bytes``, and
    its checkpoint is written only once its rung has promoted it (a trial the rung stops, or one past
    the last rung, is never written), or when the worker stops early; this worker then continues it at
    the next rung without reading it back. A trial that does not fit is checkpointed with its result,
    as is every trial at the last rung. Another worker that claims a promoted trial before its
    checkpoint is written, or a resumed sweep after a killed worker, replays it from its last
    checkpoint through every rung budget in order: the same state, bit for bit, at the cost of the
    replay.
    """

    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage, settings: WorkerSettings, *,
                 make_trial: Callable[[int], Trial], checkpoint_path: Callable[[int], Path],
                 details: Callable[[Trial, dict[str, float], float | None], dict[str, Any]] | None = None,
                 progress: Callable[..., None] | None = None) -> None:
        self.study = study
        self.storage = storage
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.settings = settings
        self.rungs = settings.rungs
        self.make_trial = make_trial
        self.checkpoint_path = checkpoint_path
        self.details = details
        self.progress = progress
        self.report = WorkerReport(worker=settings.name or f"{socket.gethostname()}:{os.getpid()}")
        self._last_stale_check = 0.0
        self._kept = KeptTrials(settings.keep_bytes)  # trials as of their last result (and which are unsaved)

    def view(self) -> View:
        """The study as stored now (see :func:`~eve_search.integrations._optuna_driver._view.read_view`)."""
        return read_view(self.study, self.storage, self.settings)

    # Claiming ---------------------------------------------------------------------------------------

    def _id_of(self, trial: FrozenTrial) -> int:
        return _stores.trial_id_of(self.storage, self.study_id, trial)

    def _claim(self, trial: FrozenTrial, heartbeat: Heartbeat) -> int | None:
        """Take a WAITING trial (atomic WAITING -> RUNNING); its id, or None if another worker took it.
        Heartbeats are recorded for it until ``heartbeat.hold(None)``."""
        trial_id = self._id_of(trial)
        attrs = {} if trial.user_attrs.get(WORKER_ATTR) == self.report.worker else {WORKER_ATTR: self.report.worker}
        # One transaction where it can be: the claim, a fresh heartbeat (the last one may be old, and a
        # trial must never be stale the moment it starts running) and the holder's name.
        claimed = claim_at_once(self.storage, trial_id, heartbeat=heartbeat.interval > 0, attrs=attrs)
        if claimed is not None:
            if claimed:
                heartbeat.hold(trial_id, beat=False)
            return trial_id if claimed else None
        # Through Optuna: the heartbeat first (there is no window between the claim and the first
        # heartbeat either).
        heartbeat.hold(trial_id)
        try:
            claimed = self.storage.set_trial_state_values(trial_id, state=TrialState.RUNNING)
        except optuna.exceptions.UpdateFinishedTrialError:
            claimed = False
        if not claimed:
            heartbeat.hold(None)
            return None
        for key, value in attrs.items():  # written only when the holder changes
            self.storage.set_trial_user_attr(trial_id, key, value)
        return trial_id

    def _release(self, trial_id: int, heartbeat: Heartbeat) -> None:
        heartbeat.hold(None)
        self.storage.set_trial_state_values(trial_id, state=TrialState.WAITING)

    # Training ---------------------------------------------------------------------------------------

    def _drop(self, index: int) -> Trial | None:
        """Forget a kept trial (its checkpoint unwritten, if it was); returns it."""
        return self._kept.pop(index)

    def _load(self, index: int, budget: int) -> Trial:
        kept = self._drop(index)
        rung = self.rungs.index(budget)
        if kept is not None and rung > 0 and kept.budget == self.rungs[rung - 1]:
            return kept  # as of the rung before: exactly where this rung starts
        trial = self.make_trial(index)
        path = self.checkpoint_path(index)
        if path.exists():
            try:
                trial.load(path)
            except CheckpointError:
                trial = self.make_trial(index)  # replayed from the start below, exactly
            if trial.budget > budget:
                trial = self.make_trial(index)
        return trial

    def _train(self, index: int, rung: int, trial_id: int, best: float | None) -> float:
        budget = self.rungs[rung]
        trial = self._load(index, budget)
        # Every earlier rung budget is a stopping point of the trajectory: a missing or stale
        # checkpoint is replayed into exactly the state an uninterrupted run had.
        for earlier in self.rungs[:rung]:
            if trial.budget < earlier:
                trial.train_to(earlier)
        trial.train_to(budget)
        metrics = trial.evaluate()
        score = trial.score(metrics)
        details = {"score": score, "val": metrics, "charged_units": trial.charged_units,
                   "wall_seconds": trial.wall_seconds, "backward_passes": trial.meter.backward_passes}
        if self.details is not None:
            details.update(self.details(trial, metrics, best))
        # A kept trial's checkpoint waits for its rung's decision.
        if rung == len(self.rungs) - 1 or not self._kept.keep(index, trial, trial_bytes(trial), unsaved=True):
            save_atomically(trial.to_bytes(), self.checkpoint_path(index))
        # One transaction where it can be (the intermediate value is the commit point), which also puts
        # the trial back in the queue (WAITING).
        _stores.record_results(self.storage, [(trial_id, budget, details)], release=True)
        self.report.trained += 1
        return score

    def _settle(self, view: View) -> None:
        """Apply the decided rungs to the kept trials: a stopped (or failed) one is dropped unwritten, a
        promoted one gets its checkpoint now, so that any worker can continue it."""
        for index in sorted(self._kept):
            status = view.status(index)
            if status in ("stopped", "complete", "failed"):
                self._drop(index)
            elif status == "train" and self._kept.is_unsaved(index):
                self._save_kept(view, index)

    def _save_kept(self, view: View | None, index: int) -> None:
        """Write a kept trial's checkpoint, unless the view shows another worker has recorded it further."""
        trial = self._kept.get(index)
        live = view.live(index) if view is not None else None
        if view is None or (live is not None and max(live.intermediate_values, default=None) == trial.budget):
            save_atomically(trial.to_bytes(), self.checkpoint_path(index))
        self._kept.mark_saved(index)

    def _save_unsaved(self, view: View | None) -> None:
        """On the way out (Ctrl-C, an error): the checkpoints of the kept trials that may train again (as
        of the last view), so a resumed sweep continues them instead of replaying them."""
        try:
            view = self.view()  # what this worker recorded since the last look included
        except Exception:  # noqa: BLE001 the storage is what failed: the last view it gave
            pass
        try:
            if view is not None:
                self._settle(view)
            for index in self._kept.unsaved():
                self._save_kept(None, index)
        except Exception:  # noqa: BLE001 the error being raised is the one to report
            return

    # Ending trials ----------------------------------------------------------------------------------

    def _ended(self, index: int, state: TrialState) -> None:
        if state == TrialState.PRUNED:
            remove_checkpoint(self.checkpoint_path(index))  # a pruned trial never trains again
            self.report.pruned += 1
        else:
            self.report.completed += 1

    def _finish_all(self, view: View, indices: list[int], heartbeat: Heartbeat) -> int:
        """End the configurations the ledger stopped (PRUNED) or completed (COMPLETE) whose trial waits in
        the queue: in one transaction where the storage allows (each trial ended by the worker whose
        update finds it still WAITING), else one by one. Returns how many this worker ended."""
        waiting = {index: live for index in indices
                   if (live := view.live(index)) is not None and live.state == TrialState.WAITING}
        ends = {index: (self._id_of(live), *ending(view, index)) for index, live in waiting.items()}
        ended = end_waiting_at_once(self.storage, list(ends.values()))
        if ended is None:
            return sum(self._finish(view, index, live, heartbeat) for index, live in waiting.items())
        for index, (trial_id, state, _) in ends.items():
            if trial_id in ended:
                self._ended(index, state)
        return len(ended)

    def _finish(self, view: View, index: int, live: FrozenTrial, heartbeat: Heartbeat) -> bool:
        """End one configuration through Optuna's calls: claim its trial, then one call with what
        ``study.tell`` would store."""
        if self._claim(live, heartbeat) is None:
            return False
        state, values = ending(view, index)
        try:
            self.storage.set_trial_state_values(self._id_of(live), state, values)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
            return False  # failed as stale while held (a stalled worker): its queued retry is ended instead
        finally:
            heartbeat.hold(None)
        self._ended(index, state)
        return True

    # The loop ---------------------------------------------------------------------------------------

    def _work(self, view: View, heartbeat: Heartbeat) -> int:
        """End the trials this view shows decided, then train the first work item of the stream's order
        that this worker can claim (the atomic claim keeps two workers off one item). Returns the items
        done; the caller looks again before the next item, so the order follows every new decision."""
        trials = self.settings.trials
        self._settle(view)
        done = self._finish_all(view, [index for index in range(trials)
                                       if view.status(index) in ("stopped", "complete")], heartbeat)
        best = best_score(view, self.settings.mode)
        claimable = {index for index in range(trials)
                     if (live := view.live(index)) is not None and live.state == TrialState.WAITING
                     and view.ledger(index).next_rung(index) is not None}
        while claimable and (work := view.stream.next_work()) is not None:
            view.stream.start(work)  # asked for once: the next call offers the next item
            if work.index not in claimable:
                continue  # held by another worker, or failed and waiting for its retry
            claimable.discard(work.index)
            live = view.live(work.index)
            trial_id = self._claim(live, heartbeat)
            if trial_id is None:
                continue  # another worker claimed it first: the next item
            if live.system_attrs.get("failed_trial") is not None:
                self.report.resumed += 1
            if self._attempt(work.index, work.rung, trial_id, live, best, heartbeat):
                return done + 1
        return done

    def _attempt(self, index: int, rung: int, trial_id: int, live: FrozenTrial, best: float | None,
                 heartbeat: Heartbeat) -> bool:
        """Train a claimed work item; False when its trial was failed as stale meanwhile (its retry takes
        over), True when the item is done (recorded, or the configuration failed for good)."""
        try:
            self._train(index, rung, trial_id, best)  # recorded and back in the queue
            heartbeat.hold(None)
        except optuna.exceptions.UpdateFinishedTrialError:
            heartbeat.hold(None)  # failed as stale while this worker trained it: its retry takes over
            self._drop(index)
            return False
        except CheckpointError:
            # The checkpoint folder, not the configuration, is at fault (a directory in a file's place,
            # a read-only folder): the trial goes back to the queue and the command stops in one line;
            # once fixed, --resume trains it again from what was recorded.
            self._release(trial_id, heartbeat)
            raise
        except Exception as error:  # noqa: BLE001 the configuration fails for good; the cohort goes on
            self._fail(index, rung, trial_id, live, error, heartbeat)
        return True

    def _fail(self, index: int, rung: int, trial_id: int, live: FrozenTrial, error: Exception,
              heartbeat: Heartbeat) -> None:
        """A configuration whose training raised fails for good (FAIL, with the error recorded)."""
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        reason = f"{type(error).__name__}: {message}"
        heartbeat.hold(None)
        self._drop(index)
        try:
            self.storage.set_trial_user_attr(trial_id, ERROR_ATTR, reason)
            self.study.tell(live.number, state=TrialState.FAIL)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
            pass  # already failed as stale: its retry will meet the same error
        warnings.warn(f"configuration {index} failed at rung {self.rungs[rung]} ({reason}); its cohort "
                      "goes on without it", RuntimeWarning, stacklevel=4)

    def _report_progress(self, view: View) -> None:
        if self.progress is not None:
            rung, reported, trials = progress(view, len(self.rungs) - 1)
            self.progress("training", rung, reported, trials, best_score(view, self.settings.mode))

    def run(self, offset: int = 0) -> WorkerReport:
        """Work until every configuration has ended; returns what this worker did.

        ``offset`` is accepted for callers of earlier releases and ignored: every worker takes the work
        the stream of cohorts offers first (see the class)."""
        started = time.perf_counter()
        heartbeat = Heartbeat(self.storage)
        view: View | None = None
        try:
            while True:
                now = time.monotonic()
                if now - self._last_stale_check >= 1.0:
                    self._last_stale_check = now
                    quiet(lambda: optuna.storages.fail_stale_trials(self.study))
                view = self.view()
                self._report_progress(view)
                if all_done(view, self.settings.trials):
                    break
                if not self._work(view, heartbeat):
                    time.sleep(self.settings.poll_interval)
        except BaseException:
            self._save_unsaved(view)
            raise
        finally:
            heartbeat.stop()
            self.report.seconds = time.perf_counter() - started
        return self.report
