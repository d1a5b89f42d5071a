"""Synchronous successive halving on Optuna storage: a resumable, multi-worker ask-and-tell driver.

Each configuration is one Optuna trial (user attribute ``config_index``); each rung of a configuration
is one work item. Between work items a trial is **WAITING**, its whole state in a checkpoint file
(:meth:`eve_search.engine.trial.Trial.save`, atomic; read without executing code). A worker claims a
waiting trial with the storage's atomic WAITING -> RUNNING transition (the one ``study.ask()`` uses
to pop queued trials), records heartbeats for it while it trains, trains it to the rung's budget
(resumed from its checkpoint, never restarted), saves the checkpoint, writes the rung's details
(user attribute ``rung_{budget}``) and score (intermediate value at ``step = budget``, the commit
point), and puts it back to WAITING. Any worker may train any rung, so the work spreads evenly and no
trial stays in memory between rungs. On SQLite and PostgreSQL the claim (with its first heartbeat) is
one transaction, the result and the return to WAITING another, and the trials a rung ends are ended
together in a third (:mod:`eve_search.engine._stores`); on another storage each is Optuna's own call.

The work a worker takes next is chosen by the scheduling core, a
:class:`~eve_search.engine.stream.CohortStream` rebuilt from the storage on every look (workers share no
state but the database): the configurations form cohorts of ``cohort_size`` in index order, a promoted
trial of the oldest cohort goes first, then a first-rung trial of the oldest cohort that has one, so a
worker that would wait at a rung barrier trains the next cohort instead. Each cohort's rungs are decided
by its rung ledger (:mod:`eve_search.engine.ledger`) once every live trial of the cohort has reported,
whatever the number of workers or the order in which results arrive. Eliminated trials end PRUNED
(their checkpoints deleted), the survivor of each cohort's last rung COMPLETE with its score.

A worker that dies stops sending heartbeats; after the grace period any worker's
``optuna.storages.fail_stale_trials`` marks its trial FAIL, and the storage's
``RetryHeartbeatStaleTrialCallback`` (set by :func:`worker_storage`) queues a copy with the same
parameters, user attributes and reported values, which another worker resumes from the checkpoint.
Training is deterministic (one seed per configuration), so the result equals an uninterrupted run.
No decision reads a clock: a failed configuration leaves its cohort when the storage shows that no
retry will come (an error recorded, no retry callback, or its retries used up), not after a wait.
"""

from __future__ import annotations

import inspect
import math
import multiprocessing
import os
import pickle
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from eve_search._checks import check_int, with_overrides
from eve_search._openmp import child_environment
from eve_search.engine._stores import claim_at_once, end_waiting_at_once, record_results, requeue_at_once
from eve_search.engine.checkpoint import CheckpointError, remove_checkpoint, save_atomically
from eve_search.engine.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    RungLedger,
    check_fraction,
    check_rungs,
    rank_order,
)
from eve_search.engine.stream import CohortStream, Work
from eve_search.optim import optimizer_names
from eve_search.optim.budget import check_cost_mode
from eve_search.tasks.spaces import SearchSpace, get_space
from eve_search.engine.sha import KEEP_BYTES, trial_bytes
from eve_search.engine.store import check_sweep_id, checkpoint_folder, write_ahead
from eve_search.tasks import Task, get_task
from eve_search.engine.trial import KeptTrials, Trial

__all__ = ["ShaOptions", "WorkerReport", "run_sha", "run_sweep_on_optuna", "worker_storage"]

WORKER_ATTR = "worker"  # user attribute: the worker that holds, or last held, a trial (host:pid)
ERROR_ATTR = "error"  # user attribute of a trial whose training raised: it failed for good
# A last guard, never a decision: a configuration whose trial failed as stale and whose retry is due
# (the storage's retry callback has retries left) waits for that retry, which the process that failed
# the trial adds right after; if that process died in between, the retry never comes, and after this
# long (sized for a machine ten times slower than any seen) the worker stops in one line.
RETRY_GUARD_SECONDS = 600.0


def _quiet(call: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return call()


def worker_storage(url: str, *, heartbeat_interval: int = 2, grace_period: int | None = None,
                   max_retry: int | None = 3) -> optuna.storages.RDBStorage:
    """An RDB storage for SHA workers: heartbeats, and a dead worker's trial re-queued with its reports.

    Args:
        url: SQLAlchemy URL (``sqlite:///sweep.db``, ``postgresql+psycopg2://user@host/db``).
        heartbeat_interval: seconds between heartbeats of a claimed trial.
        grace_period: seconds without a heartbeat after which a trial is stale (default 4 intervals).
        max_retry: times one configuration is re-queued after its worker died (None: no limit).

    Returns:
        An ``optuna.storages.RDBStorage`` to pass to ``create_study`` and :func:`run_sha`.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage = worker_storage(f"sqlite:///{folder}/sha.db")
        ...     print(storage.heartbeat_interval, storage.grace_period)
        ...     storage.remove_session()
        2 8
    """
    for name, value in (("heartbeat_interval", heartbeat_interval), ("grace_period", grace_period)):
        if value is not None:
            check_int(name, value, 1, detail=" of seconds")
    grace = 4 * heartbeat_interval if grace_period is None else grace_period
    sqlite = url.startswith("sqlite")
    engine_kwargs = {"connect_args": {"timeout": 60}} if sqlite else {}
    # Optuna 4.9 renamed RetryFailedTrialCallback / failed_trial_callback; older releases have the old names.
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    callback = _quiet(lambda: retry(max_retry=max_retry, inherit_intermediate_values=True))
    keyword = ("heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in
               inspect.signature(optuna.storages.RDBStorage).parameters else "failed_trial_callback")
    storage = _quiet(lambda: optuna.storages.RDBStorage(
        url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval, grace_period=grace,
        **{keyword: callback}))
    write_ahead(storage, url)  # several workers on one SQLite file: readers do not block the writer
    return storage


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


@dataclass
class _View:
    """The study as one read sees it: per configuration its trials, the stream of cohorts replayed (every
    cohort's ledger fed with the stored scores; the trials some worker holds count as running work)."""

    chains: dict[int, list[FrozenTrial]]
    stream: CohortStream

    def live(self, index: int) -> FrozenTrial | None:
        """The configuration's current trial (not FAIL), if any."""
        alive = [t for t in self.chains.get(index, []) if t.state != TrialState.FAIL]
        return alive[0] if alive else None

    def ledger(self, index: int) -> RungLedger:
        """The rung ledger of configuration ``index``'s cohort."""
        return self.stream.ledger(self.stream.cohort_of(index))

    def status(self, index: int) -> str:
        return self.ledger(index).status(index)

    @property
    def ledgers(self) -> list[RungLedger]:
        """Every cohort's ledger, in cohort order."""
        return [self.stream.ledger(k) for k in range(self.stream.opened)]


def _trial_id(storage: optuna.storages.BaseStorage, study_id: int, trial: FrozenTrial) -> int:
    """The storage's id of ``trial``: a frozen trial read from the storage carries it (``_trial_id``), so
    no query is needed; else it is asked for by number."""
    known = getattr(trial, "_trial_id", None)
    if isinstance(known, int) and not isinstance(known, bool):
        return known
    return storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)


def _last_score(view: _View, index: int) -> float | None:
    """The score configuration ``index`` reported at its last rung (the ledger's view), or None."""
    ledger = view.ledger(index)
    for rung in reversed(range(len(ledger.rungs))):
        score = ledger.score(index, rung)
        if score is not None:
            return float(score)
    return None


def _retry_due(storage: optuna.storages.BaseStorage, trial: FrozenTrial) -> bool:
    """Whether the storage's heartbeat callback re-queues ``trial`` (a FAIL trial that went stale): a
    :class:`optuna.storages.RetryHeartbeatStaleTrialCallback` with retries left for it."""
    getter = getattr(storage, "get_heartbeat_stale_trial_callback", None) or getattr(
        storage, "get_failed_trial_callback", None)
    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    if getter is None or not interval:
        return False  # no heartbeats: nothing fails as stale, nothing is retried
    callback = _quiet(getter)
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
    if not isinstance(callback, retry or optuna.storages.RetryFailedTrialCallback):
        return False
    max_retry = getattr(callback, "_max_retry", None)
    return max_retry is None or len(trial.system_attrs.get("retry_history", [])) < max_retry


class _Heartbeat:
    """Records heartbeats for the trial this worker holds, from a background thread."""

    def __init__(self, storage: optuna.storages.RDBStorage) -> None:
        self.storage = storage
        self.interval = float(storage.get_heartbeat_interval() or 0)
        self.trial_id: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.interval > 0:
            self._thread = threading.Thread(target=self._beat, name="eve-search-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            trial_id = self.trial_id
            if trial_id is not None:
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception:  # noqa: BLE001, S110 a missed beat is retried; a long outage makes the trial stale
                    pass

    def hold(self, trial_id: int | None, *, beat: bool = True) -> None:
        """Beat for ``trial_id`` from now on (None: for no trial); ``beat``: record one at once."""
        if trial_id is not None and beat and self.interval > 0:
            self.storage.record_heartbeat(trial_id)
        self.trial_id = trial_id

    def stop(self) -> None:
        self._stop.set()


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
        trials: configurations in the study (``config_index`` 0..trials-1).
        make_trial: a fresh :class:`~eve_search.engine.trial.Trial` for an index.
        checkpoint_path: where an index's checkpoint lives (shared by every worker).
        rungs, fraction, mode: the rung rule's parameters (:class:`~eve_search.engine.ledger.RungLedger`).
        details: extra details to record with a rung result (e.g. test metrics of a new best).
        progress: called as (phase, rung, reported in the rung, trials of the rung, best score), the
            counts summed over the cohorts.
        keep_bytes: memory for trials this worker keeps between rungs, as the in-process engine keeps
            them (see :func:`~eve_search.engine.sha.trial_bytes`); 0 keeps none.
        cohort_size: configurations per cohort, in index order (None: one cohort of all).

    A trial this worker trained stays in its memory while the kept trials fit in ``keep_bytes``, and
    its checkpoint is written only once its rung has promoted it (a trial the rung stops, or one past
    the last rung, is never written), or when the worker stops early; this worker then continues it at
    the next rung without reading it back. A trial that does not fit is checkpointed with its result,
    as is every trial at the last rung. Another worker that claims a promoted trial before its
    checkpoint is written, or a resumed sweep after a killed worker, replays it from its last
    checkpoint through every rung budget in order: the same state, bit for bit, at the cost of the
    replay.
    """

    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage, *, trials: int,
                 make_trial: Callable[[int], Trial], checkpoint_path: Callable[[int], Path],
                 rungs: tuple[int, ...], fraction: float, mode: str,
                 details: Callable[[Trial, dict[str, float], float | None], dict[str, Any]] | None = None,
                 poll_interval: float = 0.2, progress: Callable[..., None] | None = None,
                 name: str | None = None, keep_bytes: int = KEEP_BYTES, cohort_size: int | None = None) -> None:
        self.study = study
        self.storage = storage
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.trials = check_int("trials", trials, 1)
        self.cohort_size = None if cohort_size is None else check_int("cohort_size", cohort_size, 1)
        self.make_trial = make_trial
        self.checkpoint_path = checkpoint_path
        self.rungs = check_rungs(rungs)
        self.fraction = check_fraction(fraction)
        self.mode = mode
        self.details = details
        self.poll_interval = poll_interval
        self.progress = progress
        self.report = WorkerReport(worker=name or f"{socket.gethostname()}:{os.getpid()}")
        self._last_stale_check = 0.0
        self.keep_bytes = check_int("keep_bytes", keep_bytes, 0)
        self._kept = KeptTrials(self.keep_bytes)  # trials as of their last result
        self._unsaved: set[int] = set()  # kept trials whose checkpoint of their last result is not written

    # Reading ----------------------------------------------------------------------------------------

    def view(self) -> _View:
        """The study as stored now: each cohort's ledger replayed from the stored scores (rung by rung, the
        configurations that failed for good leaving it), and the trials some worker holds (RUNNING) as
        work in flight at their next rung."""
        chains: dict[int, list[FrozenTrial]] = {}
        for trial in self.study.get_trials(deepcopy=False):
            index = trial.user_attrs.get("config_index")
            if isinstance(index, int) and 0 <= index < self.trials:
                chains.setdefault(index, []).append(trial)
        for chain in chains.values():
            chain.sort(key=lambda t: t.number)
        stream = CohortStream(self.trials, self.cohort_size, rungs=self.rungs, fraction=self.fraction, mode=self.mode)
        view = _View(chains, stream)
        for cohort in range(stream.cohorts or 0):
            ledger = stream.ledger(cohort)  # every cohort opened: next_work's order is the same
            for rung, budget in enumerate(self.rungs):
                for index in ledger.cohort(rung):
                    for trial in view.chains.get(index, []):
                        if budget in trial.intermediate_values:
                            stream.report(index, rung, float(trial.intermediate_values[budget]))
                            break
                for index in ledger.waiting_for(rung):
                    if self._gone(view, index):
                        stream.fail(index)
                if ledger.decide(rung) is None:
                    break
        for index in range(self.trials):
            live = view.live(index)
            rung = view.ledger(index).next_rung(index)
            if live is not None and live.state == TrialState.RUNNING and rung is not None:
                stream.start(Work(index, rung))  # held by a worker: not offered to another
        return view

    def _gone(self, view: _View, index: int) -> bool:
        """A configuration whose trials all failed for good: its last trial is FAIL and no retry will come
        (its training raised, the storage has no retry callback, or the retries are used up)."""
        chain = view.chains.get(index, [])
        if not chain or view.live(index) is not None:
            return False
        last = chain[-1]
        if ERROR_ATTR in last.user_attrs or not _retry_due(self.storage, last):
            return True
        # Failed as stale, its retry due: the process that failed it adds the retry right after.
        ended = last.datetime_complete.timestamp() if last.datetime_complete else time.time()
        if time.time() - ended > RETRY_GUARD_SECONDS:
            raise RuntimeError(f"study {self.study.study_name!r}: configuration {index} (trial {last.number}) failed "
                               f"as stale {time.time() - ended:.0f} s ago and its retry never came (the process that "
                               "failed it may have died): run the sweep again with --resume")
        return False

    # Claiming ---------------------------------------------------------------------------------------

    def _trial_id(self, trial: FrozenTrial) -> int:
        return _trial_id(self.storage, self.study_id, trial)

    def _claim(self, trial: FrozenTrial, heartbeat: _Heartbeat) -> int | None:
        """Take a WAITING trial (atomic WAITING -> RUNNING); its id, or None if another worker took it.
        Heartbeats are recorded for it until ``heartbeat.hold(None)``."""
        trial_id = self._trial_id(trial)
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

    def _release(self, trial_id: int, heartbeat: _Heartbeat) -> None:
        heartbeat.hold(None)
        self.storage.set_trial_state_values(trial_id, state=TrialState.WAITING)

    # Working ----------------------------------------------------------------------------------------

    def _drop(self, index: int) -> Trial | None:
        """Forget a kept trial (its checkpoint unwritten, if it was); returns it."""
        self._unsaved.discard(index)
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
        if rung < len(self.rungs) - 1 and self._kept.keep(index, trial, trial_bytes(trial)):
            self._unsaved.add(index)  # its checkpoint waits for the rung's decision
        else:
            save_atomically(trial.to_bytes(), self.checkpoint_path(index))
        # One transaction where it can be (the intermediate value is the commit point), which also puts
        # the trial back in the queue (WAITING).
        record_results(self.storage, [(trial_id, budget, details)], release=True)
        self.report.trained += 1
        return score

    def _settle(self, view: _View) -> None:
        """Apply the decided rungs to the kept trials: a stopped (or failed) one is dropped unwritten, a
        promoted one gets its checkpoint now, so that any worker can continue it."""
        for index in sorted(self._kept):
            status = view.status(index)
            if status in ("stopped", "complete", "failed"):
                self._drop(index)
            elif status == "train" and index in self._unsaved:
                self._save_kept(view, index)

    def _save_kept(self, view: _View | None, index: int) -> None:
        """Write a kept trial's checkpoint, unless the view shows another worker has recorded it further."""
        trial = self._kept.get(index)
        live = view.live(index) if view is not None else None
        if view is None or (live is not None and max(live.intermediate_values, default=None) == trial.budget):
            save_atomically(trial.to_bytes(), self.checkpoint_path(index))
        self._unsaved.discard(index)

    def _save_unsaved(self, view: _View | None) -> None:
        """On the way out (Ctrl-C, an error): the checkpoints of the kept trials that may train again (as
        of the last view), so a resumed sweep continues them instead of replaying them."""
        try:
            view = self.view()  # what this worker recorded since the last look included
        except Exception:  # noqa: BLE001 the storage is what failed: the last view it gave
            pass
        try:
            if view is not None:
                self._settle(view)
            for index in sorted(self._unsaved):
                self._save_kept(None, index)
        except Exception:  # noqa: BLE001 the error being raised is the one to report
            return

    def _best(self, view: _View) -> float | None:
        scores = {(i, r): s for ledger in view.ledgers for r in range(len(self.rungs))
                  for i, s in ledger.scores(r).items()}
        if not scores:
            return None
        best = scores[rank_order(scores, self.mode)[0]]
        return None if math.isnan(best) else best

    @staticmethod
    def _ending(view: _View, index: int) -> tuple[TrialState, list[float] | None]:
        """What Optuna's ``study.tell`` would store for a configuration the ledger ended: its final score
        (FAIL for a non-finite one), or for a pruned one its last reported score when that is a number."""
        ledger = view.ledger(index)
        if ledger.status(index) == "complete":
            score = ledger.scores(len(ledger.rungs) - 1)[index]
            return (TrialState.COMPLETE, [float(score)]) if math.isfinite(score) else (TrialState.FAIL, None)
        last = _last_score(view, index)
        return TrialState.PRUNED, None if last is None or math.isnan(last) else [last]

    def _ended(self, index: int, state: TrialState) -> None:
        if state == TrialState.PRUNED:
            remove_checkpoint(self.checkpoint_path(index))  # a pruned trial never trains again
            self.report.pruned += 1
        else:
            self.report.completed += 1

    def _finish_all(self, view: _View, indices: list[int], heartbeat: _Heartbeat) -> int:
        """End the configurations the ledger stopped (PRUNED) or completed (COMPLETE) whose trial waits in
        the queue: in one transaction where the storage allows (each trial ended by the worker whose
        update finds it still WAITING), else one by one. Returns how many this worker ended."""
        waiting = {index: live for index in indices
                   if (live := view.live(index)) is not None and live.state == TrialState.WAITING}
        ends = {index: (self._trial_id(live), *self._ending(view, index)) for index, live in waiting.items()}
        ended = end_waiting_at_once(self.storage, list(ends.values()))
        if ended is None:
            return sum(self._finish(view, index, live, heartbeat) for index, live in waiting.items())
        for index, (trial_id, state, _) in ends.items():
            if trial_id in ended:
                self._ended(index, state)
        return len(ended)

    def _finish(self, view: _View, index: int, live: FrozenTrial, heartbeat: _Heartbeat) -> bool:
        """End one configuration through Optuna's calls: claim its trial, then one call with what
        ``study.tell`` would store."""
        if self._claim(live, heartbeat) is None:
            return False
        state, values = self._ending(view, index)
        try:
            self.storage.set_trial_state_values(self._trial_id(live), state, values)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
            return False  # failed as stale while held (a stalled worker): its queued retry is ended instead
        finally:
            heartbeat.hold(None)
        self._ended(index, state)
        return True

    def _work(self, view: _View, heartbeat: _Heartbeat) -> int:
        """End the trials this view shows decided, then train the first work item of the stream's order
        that this worker can claim (the atomic claim keeps two workers off one item). Returns the items
        done; the caller looks again before the next item, so the order follows every new decision."""
        stream = view.stream
        self._settle(view)
        done = self._finish_all(view, [index for index in range(self.trials)
                                       if view.status(index) in ("stopped", "complete")], heartbeat)
        best = self._best(view)
        claimable = {index for index in range(self.trials)
                     if (live := view.live(index)) is not None and live.state == TrialState.WAITING
                     and view.ledger(index).next_rung(index) is not None}
        while claimable and (work := stream.next_work()) is not None:
            stream.start(work)  # asked for once: the next call offers the next item
            index, rung = work.index, work.rung
            if index not in claimable:
                continue  # held by another worker, or failed and waiting for its retry
            claimable.discard(index)
            live = view.live(index)
            trial_id = self._claim(live, heartbeat)
            if trial_id is None:
                continue  # another worker claimed it first: the next item
            if live.system_attrs.get("failed_trial") is not None:
                self.report.resumed += 1
            try:
                self._train(index, rung, trial_id, best)  # recorded and back in the queue
                heartbeat.hold(None)
            except optuna.exceptions.UpdateFinishedTrialError:
                heartbeat.hold(None)  # failed as stale while this worker trained it: its retry takes over
                self._drop(index)
                continue
            except CheckpointError:
                # The checkpoint folder, not the configuration, is at fault (a directory in a file's place,
                # a read-only folder): the trial goes back to the queue and the command stops in one line;
                # once fixed, --resume trains it again from what was recorded.
                self._release(trial_id, heartbeat)
                raise
            except Exception as error:  # noqa: BLE001 the configuration fails for good; the cohort goes on
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
                              "goes on without it", RuntimeWarning, stacklevel=2)
                return done + 1
            return done + 1
        return done

    def _done(self, view: _View) -> bool:
        for index in range(self.trials):
            chain = view.chains.get(index, [])
            live = view.live(index)
            if not chain or (live is not None and not live.state.is_finished()):
                return False
            if live is None and view.status(index) != "failed":
                return False
        return True

    def _report_progress(self, view: _View) -> None:
        """The lowest rung still open in some cohort, with its reports and trials summed over the cohorts."""
        if self.progress is None:
            return
        ledgers = [ledger for ledger in view.ledgers if not ledger.finished] or view.ledgers[-1:]
        rung = min(min(len(ledger.decisions()), len(self.rungs) - 1) for ledger in ledgers)
        reported = trials = 0
        for ledger in view.ledgers:
            cohort = ledger.cohort(rung)
            scores = ledger.scores(rung)
            reported += len([i for i in cohort if i in scores])
            trials += len(cohort)
        self.progress("training", rung, reported, trials, self._best(view))

    def run(self, offset: int = 0) -> WorkerReport:
        """Work until every configuration has ended; returns what this worker did.

        ``offset`` is accepted for callers of earlier releases and ignored: every worker takes the work
        the stream of cohorts offers first (see the class)."""
        started = time.perf_counter()
        heartbeat = _Heartbeat(self.storage)
        view: _View | None = None
        try:
            while True:
                now = time.monotonic()
                if now - self._last_stale_check >= 1.0:
                    self._last_stale_check = now
                    _quiet(lambda: optuna.storages.fail_stale_trials(self.study))
                view = self.view()
                self._report_progress(view)
                if self._done(view):
                    break
                if not self._work(view, heartbeat):
                    time.sleep(self.poll_interval)
        except BaseException:
            self._save_unsaved(view)
            raise
        finally:
            heartbeat.stop()
            self.report.seconds = time.perf_counter() - started
        return self.report


def _best_details(task: Task) -> Callable[[Trial, dict[str, float], float | None], dict[str, Any]]:
    """Test metrics for a score at least as good as the best recorded so far (read from the storage).

    The best score found at any rung is always among them, so its test metrics exist whatever the
    order in which workers finished (the in-process engine scores strict improvements in its fixed
    order, which picks the same record)."""
    def details(trial: Trial, metrics: dict[str, float], best: float | None) -> dict[str, Any]:
        score = trial.score(metrics)
        if math.isnan(score):
            return {}
        if best is None or (score >= best if task.mode == "max" else score <= best):
            return {"test": trial.evaluate("test")}
        return {}

    return details


# The library driver --------------------------------------------------------------------------------


def _settings_attr(**values: Any) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()}


@dataclass(frozen=True)
class ShaOptions:
    """The settings of :func:`run_sha` that a study keeps for all its workers, and a worker's polling.

    Every field can also be passed to :func:`run_sha` as a keyword, which overrides the object's value.
    All workers of one study must agree on every field but ``data_dir`` and ``poll_interval``.

    Args:
        optimizer: a registered optimizer (:func:`~eve_search.optim.optimizer_names`).
        seed: the training seed (weights, batches, EvE's randomness), an int >= 0.
        rungs: cumulative rung budgets in evaluation units, strictly increasing.
        fraction: the share of a rung promoted to the next, in (0, 1].
        cost_mode: ``"calibrated"`` or ``"measured"`` (see :class:`~eve_search.optim.budget.CostMeter`).
        backward_ratio: the pinned backward/forward ratio (calibrated mode only), or None (measured
            once per model shape when the cohort is created).
        data_dir: where the task's data is read from (None: the task's default).
        poll_interval: seconds a worker waits when no work item is ready (> 0).
        cohort_size: configurations per cohort, each cohort decided as one synchronous sweep of its
            configurations, in index order (None: one cohort of all; see
            :class:`~eve_search.engine.stream.CohortStream`).

    Raises:
        ValueError: one line naming the argument, its value and what was expected.

    Example:
        >>> from eve_search.integrations.optuna import ShaOptions
        >>> ShaOptions(rungs=[10, 30], backward_ratio=2.0).rungs
        (10, 30)
        >>> ShaOptions(fraction=1.5)
        Traceback (most recent call last):
        ...
        ValueError: Invalid fraction: 1.5 (expected a number in (0, 1])
    """

    optimizer: str = "eve"
    seed: int = 0
    rungs: tuple[int, ...] = DEFAULT_RUNGS
    fraction: float = PROMOTED_FRACTION
    cost_mode: str = "calibrated"
    backward_ratio: float | None = None
    data_dir: str | os.PathLike | None = None
    poll_interval: float = 0.2
    cohort_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rungs", check_rungs(self.rungs))
        object.__setattr__(self, "fraction", check_fraction(self.fraction))
        if self.optimizer not in optimizer_names():
            raise ValueError(f"Invalid optimizer: {self.optimizer!r} (expected one of {', '.join(optimizer_names())})")
        check_int("seed", self.seed, 0)
        check_cost_mode(self.cost_mode)
        ratio = self.backward_ratio
        if ratio is not None:
            if self.cost_mode == "measured":
                raise ValueError(f"Invalid backward_ratio: {ratio!r} (only the calibrated cost mode takes one; "
                                 "expected None)")
            if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) \
                    or ratio <= 0:
                raise ValueError(f"Invalid backward_ratio: {ratio!r} (expected a finite number > 0, or None)")
        if self.data_dir is not None and not isinstance(self.data_dir, (str, os.PathLike)):
            raise ValueError(f"Invalid data_dir: {self.data_dir!r} (expected a path or None)")
        poll = self.poll_interval
        if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not (math.isfinite(poll) and poll > 0):
            raise ValueError(f"Invalid poll_interval: {poll!r} (expected a finite number of seconds > 0)")
        if self.cohort_size is not None:
            check_int("cohort_size", self.cohort_size, 1, detail=" of configurations, or None")


def run_sha(study: optuna.Study, task: Task | str, n_trials: int, *, space: SearchSpace | str,
            storage: optuna.storages.BaseStorage, checkpoint_dir: str | os.PathLike, options: ShaOptions | None = None,
            progress: Callable[..., None] | None = None, **overrides: Any) -> WorkerReport:
    """Synchronous successive halving of ``n_trials`` configurations proposed by the study's sampler.

    Call it in one process, or in several processes (machines) at once on the same study and storage:
    each call is a worker, and all of them share the work. The first call creates the cohort:
    ``n_trials`` trials through ``study.ask()``, each configuration from ``space.suggest(trial)`` (so
    the study's sampler proposes it: TPE, random, QMC..., or parameters queued with
    ``study.enqueue_trial``), and measures the cost calibration; the others wait for it (start the
    first worker alone if they might start within the same instant). Every configuration is trained
    as an eve-search :class:`~eve_search.engine.trial.Trial`, checkpointed under ``checkpoint_dir`` (a folder
    every worker can read) at every rung. A killed worker's trials continue in another worker after
    the storage's grace period when ``storage`` comes from :func:`worker_storage`; a call after every
    worker died resumes. Eliminated trials end PRUNED, the survivor COMPLETE. With ``cohort_size``
    the configurations run as a stream of cohorts (see :class:`ShaWorker`): no worker waits at a rung
    while the next cohort has work, and each cohort's survivor ends COMPLETE.

    Args:
        study: an Optuna study on ``storage`` (single objective; its direction should match the task's).
        task: a :class:`~eve_search.tasks.Task` or a registered name; ``space``: a declared space or name.
        n_trials: configurations in the study.
        storage: the RDB storage the study lives on (:func:`worker_storage` adds heartbeats and retries).
        checkpoint_dir: folder for the trials' checkpoints.
        options: the rung, training and polling settings (:class:`ShaOptions`; default: its defaults).
        progress: called as (phase, rung, reported in the rung, cohort of the rung, best score).
        **overrides: fields of :class:`ShaOptions` (``optimizer=``, ``seed=``, ``rungs=``, ``fraction=``,
            ``cost_mode=``, ``backward_ratio=``, ``data_dir=``, ``poll_interval=``, ``cohort_size=``), which
            replace the ones of ``options``; any other keyword is a TypeError.

    Returns:
        this worker's :class:`WorkerReport`. The results are in the study (``study.best_trial``, the
        user attributes ``rung_{budget}``, intermediate values at the rung budgets).

    Example (trains for seconds, so not run as a doctest; tests/integrations/test_optuna.py runs it):
        >>> import optuna
        >>> storage = worker_storage("sqlite:///sha.db")  # doctest: +SKIP
        >>> study = optuna.create_study(study_name="sha", storage=storage, direction="maximize")  # doctest: +SKIP
        >>> report = run_sha(study, "adult", 48, space="hp", storage=storage,
        ...                  options=ShaOptions(rungs=(100, 300, 900)))  # doctest: +SKIP
        >>> report.trained, study.best_trial.params  # doctest: +SKIP
    """
    opts = with_overrides("run_sha", ShaOptions, options, overrides)
    task = get_task(task) if isinstance(task, str) else task
    space = get_space(space) if isinstance(space, str) else space
    check_int("n_trials", n_trials, 1)
    try:
        storage.get_study_id_from_name(study.study_name)
    except KeyError:
        raise ValueError(f"Invalid storage: it holds no study {study.study_name!r} (expected the storage the "
                         "study was created on)") from None
    if len(study.directions) > 1:
        raise ValueError(f"Invalid study: {study.study_name!r} has {len(study.directions)} objectives (expected a "
                         "single-objective study: optuna.create_study(direction=...); run_sha ranks one score)")
    settings = _settings_attr(task=task.name, n_trials=n_trials, optimizer=opts.optimizer, seed=opts.seed,
                              rungs=opts.rungs, fraction=opts.fraction, cost_mode=opts.cost_mode,
                              backward_ratio=opts.backward_ratio)
    if opts.cohort_size is not None and opts.cohort_size < n_trials:  # one cohort: stored as before cohorts
        settings["cohort_size"] = opts.cohort_size
    data = task.data(opts.data_dir)
    _create_cohort(study, storage, task, space, n_trials, settings, data)
    attrs = study.user_attrs
    ratios = dict(attrs.get("backward_ratios") or {}) if opts.cost_mode == "calibrated" else {}
    # The folder's name comes from the storage: checked (hex id, one folder name, inside checkpoint_dir).
    sweep_id = check_sweep_id(study.study_name, attrs.get("sweep_id"))
    folder = checkpoint_folder(checkpoint_dir, study.study_name, sweep_id)
    configs: dict[int, dict[str, Any]] = {}
    for trial in study.get_trials(deepcopy=False):
        index = trial.user_attrs.get("config_index")
        if isinstance(index, int):
            configs.setdefault(index, dict(trial.user_attrs["config"]))

    def make_trial(index: int) -> Trial:
        config = configs[index]
        return Trial(task, config, opts.optimizer, seed=opts.seed, index=index, cost_mode=opts.cost_mode,
                     backward_ratio=ratios.get(task.cost_key(config)), data=data, owner=sweep_id)

    worker = ShaWorker(study, storage, trials=n_trials, make_trial=make_trial,
                       checkpoint_path=lambda index: folder / f"trial-{index:04d}.pt", rungs=opts.rungs,
                       fraction=opts.fraction, mode=task.mode, details=_best_details(task),
                       poll_interval=opts.poll_interval, progress=progress, cohort_size=settings.get("cohort_size"))
    return worker.run(offset=os.getpid())


def _create_cohort(study: optuna.Study, storage: optuna.storages.BaseStorage, task: Task, space: SearchSpace,
                   n_trials: int, settings: dict[str, Any], data: Any) -> None:
    """Create the cohort once (the first worker), or wait for it and check the settings match."""
    attrs = study.user_attrs
    if "sha_cohort_size" not in attrs and "sha_creator" not in attrs:
        token = uuid.uuid4().hex
        study.set_user_attr("sha_creator", token)
        time.sleep(0.5)  # the last of simultaneous starters wins; the others wait below
        if study.user_attrs.get("sha_creator") == token:
            _ask_cohort(study, storage, task, space, n_trials, settings, data)
    deadline = time.monotonic() + 3600
    while "sha_cohort_size" not in study.user_attrs:
        if time.monotonic() > deadline:
            raise RuntimeError(f"study {study.study_name!r}: the worker creating the cohort did not finish "
                               "within an hour (it may have died: delete the study's 'sha_creator' user "
                               "attribute and start again)")
        time.sleep(0.5)
    saved = study.user_attrs.get("sha_settings")
    if saved != settings:
        different = sorted(k for k in set(saved or {}) | set(settings) if (saved or {}).get(k) != settings.get(k))
        raise ValueError(f"Invalid settings: study {study.study_name!r} runs SHA with other settings "
                         f"({', '.join(different)} differ)")


def _ask_cohort(study: optuna.Study, storage: optuna.storages.BaseStorage, task: Task, space: SearchSpace,
                n_trials: int, settings: dict[str, Any], data: Any) -> None:
    study_id = storage.get_study_id_from_name(study.study_name)
    existing = {t.user_attrs["config_index"] for t in study.get_trials(deepcopy=False)
                if isinstance(t.user_attrs.get("config_index"), int)}
    asked = []
    for index in range(n_trials):
        if index in existing:
            continue
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)  # ask-and-tell on purpose
            trial = study.ask()
        config = space.suggest(trial)
        trial.set_user_attr("config_index", index)
        trial.set_user_attr("config", config)
        asked.append(trial.number)
    # Calibrate before any training (one frozen ratio per model shape), then release the trials.
    ratios: dict[str, float] = {}
    if settings["cost_mode"] == "calibrated":
        configs = {t.user_attrs["config_index"]: t.user_attrs["config"] for t in study.get_trials(deepcopy=False)
                   if isinstance(t.user_attrs.get("config_index"), int)}
        for index in sorted(configs):
            key = task.cost_key(configs[index])
            if key not in ratios:
                ratios[key] = settings["backward_ratio"] or Trial(
                    task, configs[index], settings["optimizer"], seed=settings["seed"], index=index,
                    cost_mode="measured", data=data).calibrate()
    study.set_user_attr("backward_ratios", ratios)
    study.set_user_attr("sweep_id", uuid.uuid4().hex)
    study.set_user_attr("sha_settings", settings)
    for number in asked:
        storage.set_trial_state_values(storage.get_trial_id_from_study_id_trial_number(study_id, number),
                                       state=TrialState.WAITING)
    study.set_user_attr("sha_cohort_size", n_trials)


# The CLI backend -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WorkerJob:
    """What a worker process needs to rebuild the sweep (the task travels without its data)."""

    settings: Any
    task: Task
    data: Any
    url: str
    checkpoint_root: Path
    heartbeat_interval: int
    grace_period: int | None
    poll_interval: float
    threads: int
    offset: int


def _open_worker(job: _WorkerJob, sweep: Any = None) -> tuple[ShaWorker, Any]:
    from eve_search.engine.store import SweepStore
    from eve_search.engine.sweep import Sweep

    if sweep is None:
        space = get_space(job.settings.space)
        configs = space.sample(job.settings.configs, job.settings.config_seed)
        store = SweepStore(job.url, job.settings.name, configs, space, job.checkpoint_root, job.settings.as_dict(),
                           direction="maximize" if job.task.mode == "max" else "minimize", resume=True)
        sweep = Sweep(job.settings, job.task, job.data, configs, store)
    storage = worker_storage(job.url, heartbeat_interval=job.heartbeat_interval, grace_period=job.grace_period)
    study = optuna.load_study(study_name=sweep.store.name, storage=storage)
    # As in the in-process engine, the test set is scored once at the end, for the best result found
    # (Sweep.test_best), not at every improvement: this process keeps the state of the best result it
    # trained (Sweep.note_best, which records nothing). A best another worker trained is read from its
    # checkpoint, or replayed.
    worker = ShaWorker(study, storage, trials=len(sweep.configs), make_trial=sweep.make_trial,
                       checkpoint_path=sweep.store.checkpoint_path, rungs=job.settings.rungs,
                       fraction=job.settings.fraction, mode=sweep.task.mode,
                       details=lambda trial, metrics, best: sweep.note_best(trial, metrics),
                       poll_interval=job.poll_interval, cohort_size=job.settings.cohort_size)
    return worker, sweep


def _worker_process(job: _WorkerJob) -> None:
    torch.set_num_threads(job.threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    worker, _ = _open_worker(job)
    worker.run(offset=job.offset)


def _release_unclaimed(sweep: Any, storage: optuna.storages.BaseStorage, study: optuna.Study) -> None:
    """The store creates one RUNNING trial per configuration; a trial no worker has claimed yet goes to
    the queue (WAITING), where workers claim it."""
    study_id = storage.get_study_id_from_name(study.study_name)
    ids = [_trial_id(storage, study_id, trial)
           for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
           if "config_index" in trial.user_attrs and WORKER_ATTR not in trial.user_attrs and
           trial.system_attrs.get("failed_trial") is None]
    if not requeue_at_once(storage, ids):
        for trial_id in ids:
            storage.set_trial_state_values(trial_id, state=TrialState.WAITING)


def run_sweep_on_optuna(sweep: Any, *, workers: int = 1, progress: Callable[..., None] | None = None,
                        heartbeat_interval: int = 2, grace_period: int | None = 20, poll_interval: float = 0.2,
                        threads: int | None = None) -> Any:
    """Run a prepared sweep (:func:`eve_search.engine.sweep.prepare_sweep`) with ``workers`` worker processes on
    its store, and summarize it exactly as the in-process engine does.

    This process is worker 0; ``workers - 1`` more are started (``spawn``). Each claims work items from
    the study (see the module docstring), so killing any worker, even this one, loses nothing: the
    others finish its work, and ``--resume`` continues a sweep every worker left. With the same seed and
    a pinned ``backward_ratio`` the configurations, rung scores, promotions and result equal the local
    engine's, for any number of workers; the sweep's ``cohort_size`` runs it as a stream of cohorts,
    as the local engine does (see :class:`ShaWorker`). To add workers on other machines, run the same
    command there with ``--resume`` and the same ``--storage`` (PostgreSQL) and a ``--workdir`` on a
    shared file system: checkpoints must be readable by every worker.

    Args:
        sweep: a :class:`~eve_search.engine.sweep.Sweep`.
        workers: worker processes (this one included).
        progress: as for :meth:`~eve_search.engine.sweep.Sweep.run`.
        heartbeat_interval, grace_period: see :func:`worker_storage`; a dead worker's trial is resumed
            elsewhere ``grace_period`` seconds after its last heartbeat (long enough that a live worker on
            a busy machine is not taken for dead; if one is, its trial is retried, which costs time only).
        threads: torch threads per worker (default: this process's threads divided among the workers).

    Returns:
        the sweep's :class:`~eve_search.engine.sweep.SweepResult`.

    Example (trains for seconds in worker processes, so not run as a doctest; the CLI's
    ``--backend optuna`` calls it):
        >>> from pathlib import Path
        >>> from eve_search.engine.sweep import SweepSettings, prepare_sweep
        >>> sweep = prepare_sweep(SweepSettings(space="hp", optimizer="eve", backward_ratio=2.0),
        ...                       storage="sqlite:///results.db", checkpoint_dir=Path("checkpoints"))  # doctest: +SKIP
        >>> result = run_sweep_on_optuna(sweep, workers=2)  # doctest: +SKIP
        >>> result.winner["index"], result.best["test"]  # doctest: +SKIP
    """
    from eve_search.engine.trial import warm_up

    check_int("workers", workers, 1)
    store = sweep.store
    warm_up(sweep.settings.optimizer)
    started = time.perf_counter()
    elapsed_before = float(store.get("wall_seconds", 0.0))
    if progress is not None:
        progress("calibrating", 0, 0, 0, None)
    sweep.calibrate()
    total_threads = torch.get_num_threads()
    job = _worker_job(sweep, threads or max(1, total_threads // workers), heartbeat_interval=heartbeat_interval,
                      grace_period=grace_period, poll_interval=poll_interval, many=workers > 1)
    worker, _ = _open_worker(job, sweep)
    _release_unclaimed(sweep, worker.storage, worker.study)
    before = _recorded_rungs(store)
    _run_workers(worker, job, workers, len(sweep.configs), progress, total_threads)
    view = worker.view()
    reports = _rung_reports(view)
    sweep.test_best()
    winner = store.get("winner")
    if winner is None:
        winner = _record_winner(sweep, view.stream, lambda: elapsed_before + time.perf_counter() - started)
    return sweep.result(reports, winner, trained=_recorded_rungs(store) - before)


def _worker_job(sweep: Any, threads: int, *, heartbeat_interval: int, grace_period: int | None,
                poll_interval: float, many: bool) -> _WorkerJob:
    """What every worker gets (worker 0's, at offset 0); with ``many`` workers the task must pickle."""
    store = sweep.store
    job = _WorkerJob(settings=sweep.settings, task=sweep.task, data=sweep.data, url=store.url,
                     checkpoint_root=store.checkpoint_dir.parent, heartbeat_interval=heartbeat_interval,
                     grace_period=grace_period, poll_interval=poll_interval, threads=threads, offset=0)
    if many:
        try:
            pickle.dumps(sweep.task)  # travels without its data
        except Exception as error:  # noqa: BLE001 pickle raises several kinds
            raise ValueError(f"Invalid task: {sweep.task.name!r} cannot be sent to worker processes ({error}); define "
                             "its functions at module level in an importable module (a --plugin module), or use "
                             "--workers 1") from None
    return job


def _recorded_rungs(store: Any) -> int:
    """How many (configuration, rung) results the store holds."""
    return sum(len(r) for r in store.rung_details().values())


def _run_workers(worker: ShaWorker, job: _WorkerJob, workers: int, configs: int,
                 progress: Callable[..., None] | None, total_threads: int) -> None:
    """Start ``workers - 1`` worker processes, run worker 0 here until every trial has ended, then stop them."""
    context = multiprocessing.get_context("spawn")
    children = []
    with child_environment():  # spawned children load PyTorch at start: their OpenMP policy is set now
        for k in range(1, workers):
            child = context.Process(target=_worker_process, name=f"eve-search-worker-{k}",
                                    args=(_WorkerJob(**{**job.__dict__, "offset": k * configs // workers}),))
            child.start()
            children.append(child)
    worker.progress = progress
    torch.set_num_threads(job.threads)
    try:
        worker.run(offset=0)
    finally:
        torch.set_num_threads(total_threads)
        # Every trial has ended (or this process is going down): no worker holds work any more, so a
        # worker still starting up (imports, opening the store) is stopped instead of waited for.
        for child in children:
            child.join(timeout=1)
            if child.is_alive():
                child.terminate()
                child.join(timeout=30)


def _rung_reports(view: _View) -> list[Any]:
    """The decided rungs of every cohort as the in-process engine reports them."""
    from eve_search.engine.sha import RungReport

    reports = []
    for k, ledger in enumerate(view.ledgers):
        for decision in ledger.decisions():
            cohort = ledger.cohort(decision.rung)
            scores = ledger.scores(decision.rung)
            reports.append(RungReport(budget=decision.budget, trials=cohort, scores={i: scores[i] for i in cohort},
                                      promoted=list(decision.promoted), cohort=k))
    return reports


def _record_winner(sweep: Any, stream: CohortStream, elapsed: Callable[[], float]) -> dict[str, Any]:
    """The best configuration that completed the last rung, over every cohort (the stream's winner), its
    test metrics measured from its checkpoint, stored with the sweep's wall time (``elapsed()`` seconds)."""
    store = sweep.store
    index = stream.winner()
    if index is None:
        raise RuntimeError(f"sweep {sweep.settings.name!r}: no configuration completed the last rung (every one "
                           "failed)")
    trial = sweep.make_trial(index)
    trial.load(store.checkpoint_path(index))
    winner = {"index": index, "score": stream.completed()[index], "test": trial.evaluate("test")}
    store.set("winner", winner)
    store.set("wall_seconds", elapsed())
    return winner
