"""The in-process engine of synchronous successive halving: a loop over the rung ledger.

The rung rule lives in :mod:`eve_search.engine.ledger` (re-exported here); this module only moves trials:
for each rung it trains every trial of the ledger's cohort that has not reported yet (resumed from
its checkpoint, never restarted), records the result, feeds the ledger and applies its decision.
A trial stays in memory while the trials kept there fit in ``keep_bytes`` (default 512 MiB; 0 keeps
none, so a sweep of a large model holds one model at a time), and is dropped as soon as its rung stops
it: a kept trial continues at the next rung without reading its checkpoint back. A trial that is not
kept is checkpointed with its result. A kept one is checkpointed only once its rung has promoted it
(a trial the rung stops, or one at the last rung, is never written), and at once when the run is
interrupted (Ctrl-C, an error): a killed process may leave a recorded result without the checkpoint
of its rung, and the engine then replays that trial from its last checkpoint through every rung
budget in order, into exactly the state an uninterrupted sweep had. Every path continues the same
state, bit for bit. With ``--jobs`` workers, each worker keeps the trials it trained in the same
way, within its share of ``keep_bytes``: a trial's next rung goes to the worker that keeps it, and a
promoted trial's checkpoint is made there (see :mod:`eve_search.engine._workers`). The Ray Tune
scheduler and the Optuna pruner are two more drivers of the same ledger.

Example:
    >>> promote_top_fraction({0: 0.80, 1: 0.85, 2: 0.85, 3: 0.70}, 1 / 3)
    [1, 2]
    >>> rung_sizes(48, (100, 300, 900, 2700, 3000))
    [48, 16, 6, 2, 1]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import torch

from eve_search._checks import check_int, options_or_keywords
from eve_search.engine.checkpoint import CheckpointError, load_state
from eve_search.engine.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    RungDecision,
    RungLedger,
    check_rungs,
    promote_top_fraction,
    promotion_count,
    rung_sizes,
)
from eve_search.engine.stream import CohortStream, Work
from eve_search.engine.trial import KEEP_BYTES, KeptTrials, Trial, trial_bytes

if TYPE_CHECKING:
    from eve_search.engine._workers import TrialJob, TrialWorkers

__all__ = [
    "DEFAULT_RUNGS",
    "KEEP_BYTES",
    "PROMOTED_FRACTION",
    "HalvingOptions",
    "OnWorkers",
    "RungReport",
    "RungStore",
    "SynchronousSuccessiveHalving",
    "check_rungs",
    "one_torch_thread",
    "promote_top_fraction",
    "promotion_count",
    "rung_sizes",
    "trial_bytes",
]


class RungStore(Protocol):
    """Where the engine keeps results and checkpoints, so that a killed sweep resumes exactly.

    A structural type (``typing.Protocol``): :class:`~eve_search.engine.store.SweepStore` is one, and
    so is any object with these methods (see :class:`SynchronousSuccessiveHalving` for one kept in a
    dict).

    Attributes:
        rung_details: ``rung_details()``, the results recorded so far, per trial and rung budget.
        checkpoint_path: ``checkpoint_path(index)``, the ``Path`` of a trial's latest checkpoint.
        record: ``record(index, budget, details, checkpoint)``, one result (and its checkpoint).
        eliminate: ``eliminate(indices)``, trials stopped at their rung.
        complete: ``complete(index, score)``, a trial that completed the last rung.

    Example:
        >>> from eve_search.engine.store import SweepStore
        >>> all(callable(getattr(SweepStore, name)) for name in
        ...     ("rung_details", "checkpoint_path", "record", "eliminate", "complete"))
        True
    """

    def rung_details(self) -> dict[int, dict[int, dict[str, Any]]]:
        """Per trial index, per rung budget: the details recorded (``score`` at least)."""

    def checkpoint_path(self, index: int) -> Any:
        """Where trial ``index``'s latest state is saved."""

    def record(self, index: int, budget: int, details: dict[str, Any], checkpoint: bytes | None) -> None:
        """Save the checkpoint (atomically) when there is one, then the result at this rung.

        A store may also have ``save_checkpoint(index, checkpoint)``: the engine then writes the
        checkpoints of the trials it keeps in memory only for those their rung promotes, after their
        results (``record`` gets None); without it, every result comes with its checkpoint."""

    def eliminate(self, indices: list[int]) -> None:
        """These trials stop at their rung."""

    def complete(self, index: int, score: float) -> None:
        """This trial completed the last rung."""


@dataclass
class RungReport:
    """What happened at one rung: its budget, the trials it trained, their scores, those promoted.

    Attributes:
        budget: the rung's cumulative budget, in evaluation units.
        trials: the indices it trained (its cohort), in cohort order.
        scores: each of those trials' score at the rung.
        promoted: the indices that go on, best first (empty at the last rung).
        cohort: the cohort the rung belongs to (see :class:`~eve_search.engine.stream.CohortStream`).

    Example:
        >>> report = RungReport(budget=100, trials=[0, 1, 2], scores={0: 0.8, 1: 0.9, 2: 0.7}, promoted=[1])
        >>> report.promoted
        [1]
    """

    budget: int
    trials: list[int]
    scores: dict[int, float]
    promoted: list[int]
    cohort: int = 0


Details = Callable[[Trial, dict[str, float]], dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class HalvingOptions:
    """The rung rule and the memory of :class:`SynchronousSuccessiveHalving`, which takes this object or
    its fields as keywords (not both).

    Args:
        rungs: cumulative budgets; ``fraction``: promoted share; ``mode``: ``"max"`` or ``"min"``.
        keep_bytes: memory for trials kept between rungs (see :func:`trial_bytes`); 0 keeps none.
        cohort_size: run the configurations as a stream of cohorts of this size, each decided as one
            synchronous sweep, so that no worker waits at a rung barrier while another cohort has work
            (see :class:`~eve_search.engine.stream.CohortStream`); None: one cohort of all.

    Raises:
        InputError: a bad ``keep_bytes`` (the rung rule is checked by the engine's cohort stream).

    Example:
        >>> HalvingOptions(rungs=(30, 90), keep_bytes=0).keep_bytes
        0
    """

    rungs: tuple[int, ...] = DEFAULT_RUNGS
    fraction: float = PROMOTED_FRACTION
    mode: str = "max"
    keep_bytes: int = KEEP_BYTES
    cohort_size: int | None = None

    def __post_init__(self) -> None:
        check_int("keep_bytes", self.keep_bytes, 0)


@dataclass(frozen=True)
class OnWorkers:
    """Train each rung's trials on worker processes: what :class:`SynchronousSuccessiveHalving` needs for it.

    Args:
        workers: the worker processes (:class:`~eve_search.engine._workers.TrialWorkers`); each takes the
            next piece of work as soon as it is idle; results are recorded and decided in the engine.
        make_job: ``make_job(index, rung)``, the description of a piece of work.
        job_cost: the expected cost of a configuration's work, which orders the stream's work; None:
            index order.
        evaluate_checkpoint: (index, checkpoint bytes, split) -> metrics of a worker-trained trial
            without rebuilding its optimizer (see :func:`~eve_search.engine.trial.evaluate_checkpoint`);
            None rebuilds the whole trial.

    Example:
        >>> OnWorkers(workers=None, make_job=None)
        Traceback (most recent call last):
        ...
        ValueError: Invalid make_job: None (workers need a job description per trial)
    """

    workers: TrialWorkers
    make_job: Callable[[int, int], TrialJob]
    job_cost: Callable[[int], float] | None = None
    evaluate_checkpoint: Callable[[int, bytes, str], dict[str, float]] | None = None

    def __post_init__(self) -> None:
        if self.make_job is None:
            raise ValueError("Invalid make_job: None (workers need a job description per trial)")


class SynchronousSuccessiveHalving:
    """Run SHA over ``trials`` configurations, keeping trials in memory within ``keep_bytes``.

    Args:
        trials: number of configurations (indices 0..trials-1).
        make_trial: builds a fresh :class:`~eve_search.engine.trial.Trial` for an index.
        store: results and checkpoints (see :class:`RungStore`).
        options: the rung rule and memory (:class:`HalvingOptions`: ``rungs``, ``fraction``, ``mode``,
            ``keep_bytes``, ``cohort_size``); or give those fields as keywords instead (not both).
        details: extra details recorded with a result, from the trial and its validation metrics
            (e.g. test metrics of a new best); the score, metrics, charged units and wall seconds are
            always recorded.
        on_result: called after every trial result with (rung number, index, score, resumed).
        on_workers: train each rung's trials on worker processes (:class:`OnWorkers`); None: here.
        **keywords: fields of :class:`HalvingOptions`, instead of ``options``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from eve_search.engine.checkpoint import save_atomically
        >>> class DictStore:  # a RungStore in memory, checkpoints in a folder
        ...     def __init__(self, folder):
        ...         self.folder, self.results = Path(folder), {}
        ...     def rung_details(self):
        ...         return self.results
        ...     def checkpoint_path(self, index):
        ...         return self.folder / f"{index}.pt"
        ...     def record(self, index, budget, details, checkpoint):
        ...         if checkpoint is not None:
        ...             save_atomically(checkpoint, self.checkpoint_path(index))
        ...         self.results.setdefault(index, {})[budget] = details
        ...     def eliminate(self, indices):
        ...         pass
        ...     def complete(self, index, score):
        ...         pass
        >>> def make_trial(index):
        ...     return Trial("adult", {"lr": [1e-3, 3e-3, 1e-2][index], "width": 8, "depth": 1}, "adam",
        ...                  seed=0, index=index, backward_ratio=2.0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     reports = SynchronousSuccessiveHalving(3, make_trial, DictStore(folder), rungs=(30, 90)).run()
        >>> [(report.budget, len(report.trials), len(report.promoted)) for report in reports]
        [(30, 3, 1), (90, 1, 0)]
    """

    def __init__(self, trials: int, make_trial: Callable[[int], Trial], store: RungStore,
                 options: HalvingOptions | None = None, *, details: Details | None = None,
                 on_result: Callable[[int, int, float, bool], None] | None = None,
                 on_workers: OnWorkers | None = None, **keywords: Any) -> None:
        check_int("trials", trials, 1)
        options = options_or_keywords("SynchronousSuccessiveHalving", HalvingOptions, options, keywords)
        self.trials = trials
        self.make_trial = make_trial
        self.store = store
        self.options = options
        self.stream = CohortStream(trials, options.cohort_size, rungs=options.rungs, fraction=options.fraction,
                                   mode=options.mode, cost=None if on_workers is None else on_workers.job_cost)
        self.rungs = self.stream.rungs
        self.details = details
        self.on_result = on_result
        self.workers = None if on_workers is None else on_workers.workers
        self.make_job = None if on_workers is None else on_workers.make_job
        self.evaluate_checkpoint = None if on_workers is None else on_workers.evaluate_checkpoint
        self.keep_bytes = options.keep_bytes
        self._kept = KeptTrials(options.keep_bytes)  # trials as of their last result (and which are not saved yet)
        self._defer = callable(getattr(store, "save_checkpoint", None))
        # With workers: which worker keeps each trial it trained (its state crosses only when needed), and
        # the trials each worker may drop (stopped, or moved to another worker), told with its next job.
        self._holder: dict[int, int] = {}
        self._forget: dict[int, list[int]] = {}
        self._saving: dict[int, Any] = {}  # promoted trials' checkpoints asked of their workers, not yet written
        self._fetching = 0.0  # seconds spent waiting for a kept trial's state from its worker
        # Wall seconds of this run by part (read by `eve-search bench sweep`): building trials or loading
        # their checkpoints, training, evaluating (and recording details), serializing checkpoints, handing
        # results to the store, deciding rungs (the ledger, and the store's promotions and eliminations).
        self.seconds = dict.fromkeys(("load", "train", "evaluate", "serialize", "store", "decide"), 0.0)

    def load_trial(self, index: int) -> Trial:
        """Trial ``index`` as of its last checkpoint: the one kept in memory, else rebuilt from the
        checkpoint file; from the start when there is none or it is unusable (corrupt, truncated,
        another sweep's): the engine then replays it exactly. A directory in the checkpoint's place
        raises :class:`CheckpointError` at once (the trial's next checkpoint could not be written)."""
        if index in self._kept:
            return self._kept.pop(index)
        trial = self.make_trial(index)
        path = self.store.checkpoint_path(index)
        if path.exists():
            try:
                trial.load(path)
            except CheckpointError:
                if path.is_dir():
                    raise
                trial = self.make_trial(index)
        return trial

    def evaluate_trial(self, index: int, split: str, budget: int | None = None) -> dict[str, float]:
        """Metrics of trial ``index`` as of its last result: from the saved model alone where the engine
        has ``evaluate_checkpoint`` and does not hold the trial, else from :meth:`load_trial`. With
        ``budget`` (a rung budget the trial reached), a trial whose checkpoint is missing, unusable or
        of an earlier rung is first replayed to it (with workers, by a worker)."""
        if self.workers is not None and index not in self._holder and budget is not None:
            content = self._saved(index, budget)
            if content is None:  # replayed where trials train (and kept there, if it fits)
                job = replace(self.make_job(index, self.rungs.index(budget)), keep=self._defer)
                content = self.workers.train(job, 0).result()[-1]
                if content is None:
                    self._holder[index] = 0
        else:
            content = None
        if index in self._holder:  # kept by a worker: its state, from there
            content = self._fetch(index)
        if content is not None:
            if self.evaluate_checkpoint is not None:
                return self.evaluate_checkpoint(index, content, split)
            trial = self.make_trial(index)
            trial.load_bytes(content)
            return trial.evaluate(split)
        if self.evaluate_checkpoint is not None and index not in self._kept:
            content = self._saved(index, budget)
            if content is not None:
                return self.evaluate_checkpoint(index, content, split)
        trial = self.load_trial(index)
        if budget is not None:
            trial = self._bring_to(index, trial, self.rungs.index(budget))
        return trial.evaluate(split)

    def _saved(self, index: int, budget: int | None) -> bytes | None:
        """Trial ``index``'s checkpoint file's bytes when it is readable and (given ``budget``) of that
        rung budget; else None."""
        try:
            content = self.store.checkpoint_path(index).read_bytes()
            if budget is not None:
                state = load_state(content)
                if not isinstance(state, dict) or state.get("budget") != budget:
                    return None
        except (OSError, CheckpointError):
            return None
        return content

    def _bring_to(self, index: int, trial: Trial, rung: int) -> Trial:
        """``trial`` trained to rung ``rung``'s budget through every earlier rung budget in order (each
        one is a stopping point of its trajectory), so a stale or missing checkpoint is replayed into
        exactly the state an uninterrupted sweep had; one past that budget (its record was removed) is
        replayed from the start."""
        budget = self.rungs[rung]
        if trial.budget > budget:
            trial = self.make_trial(index)
        for earlier in self.rungs[:rung + 1]:
            if trial.budget < earlier:
                trial.train_to(earlier)
        return trial

    def _train(self, index: int, rung: int) -> float:
        clock, seconds = time.perf_counter, self.seconds
        start = clock()
        trial = self.load_trial(index)
        budget = self.rungs[rung]
        loaded = clock()
        trial = self._bring_to(index, trial, rung)  # (also replays a checkpoint past this rung)
        trained = clock()
        metrics = trial.evaluate()
        score = trial.score(metrics)
        details = {"score": score, "val": metrics, "charged_units": trial.charged_units,
                   "wall_seconds": trial.wall_seconds, "backward_passes": trial.meter.backward_passes}
        if self.details is not None:
            details.update(self.details(trial, metrics))
        evaluated = clock()
        size = trial_bytes(trial) if self._defer else 0
        if self._defer and self._kept.keep(index, trial, size, unsaved=True):  # saved once its rung decides
            checkpoint = None
        else:
            checkpoint = _serialized(trial)
        serialized = clock()
        self.store.record(index, budget, details, checkpoint)
        if checkpoint is not None and not self._defer:
            self._keep(index, trial, checkpoint)
        recorded = clock()
        seconds["load"] += loaded - start
        seconds["train"] += trained - loaded
        seconds["evaluate"] += evaluated - trained
        seconds["serialize"] += serialized - evaluated
        seconds["store"] += recorded - serialized
        return score

    def _keep(self, index: int, trial: Trial, checkpoint: bytes) -> None:
        """Keep ``trial`` (just checkpointed) in memory for its next rung if it fits."""
        self._kept.keep(index, trial, trial_bytes(trial, checkpoint))

    def _save(self, indices: list[int]) -> None:
        """Write the checkpoints of these kept trials that are not written yet, in this order."""
        for index in indices:
            if self._kept.is_unsaved(index):
                start = time.perf_counter()
                checkpoint = _serialized(self._kept.get(index))
                self.seconds["serialize"] += time.perf_counter() - start
                self.store.save_checkpoint(index, checkpoint)
                self._kept.mark_saved(index)

    def _fetch(self, index: int) -> bytes | None:
        """The checkpoint bytes of trial ``index`` from the worker that keeps it (after the work already
        handed to that worker); None when it does not hold it."""
        return self._ask(index)()

    def _ask(self, index: int) -> Callable[[], bytes | None]:
        """Ask the worker that keeps trial ``index`` for its checkpoint bytes now (it makes them after the
        work already handed to it, before anything handed later); call the result to wait for them. The
        wait counts as waiting for workers."""
        future = self.workers.save(self._holder[index], index)

        def wait() -> bytes | None:
            start = time.perf_counter()
            try:
                return future.result()
            finally:
                self._fetching += time.perf_counter() - start

        return wait

    def _save_held(self, indices: list[int]) -> None:
        """Ask the workers that keep these promoted trials for their checkpoints (each worker makes its
        own, side by side, before its next job); :meth:`_write_saved` writes them. The trials stay kept,
        so their next rung continues them in memory."""
        for index in indices:
            if index in self._holder:
                self._saving[index] = self.workers.save(self._holder[index], index)

    def _write_saved(self, indices: list[int]) -> None:
        """Hand the store the checkpoints asked of the workers for these trials (waiting for them)."""
        start = time.perf_counter()
        for index in indices:
            future = self._saving.pop(index, None)
            checkpoint = None if future is None else future.result()
            if checkpoint is not None:
                self.store.save_checkpoint(index, checkpoint)
        self.seconds["serialize"] += time.perf_counter() - start

    def _drop_held(self, indices: list[int]) -> None:
        """These trials stopped: the workers that keep them may drop them (told with their next job)."""
        for index in indices:
            holder = self._holder.pop(index, None)
            if holder is not None:
                self._forget.setdefault(holder, []).append(index)

    def _record_trained(self, index: int, rung: int, worker: int, future: Any) -> float:
        """Record a worker's result exactly as :meth:`_train` records its own."""
        start = time.perf_counter()
        score, metrics, charged, wall, backward, checkpoint = future.result()
        waited, fetching = time.perf_counter(), self._fetching
        if checkpoint is None:
            self._holder[index] = worker
        details = {"score": score, "val": metrics, "charged_units": charged, "wall_seconds": wall,
                   "backward_passes": backward}
        if self.details is not None:
            content: bytes | Callable[[], Callable[[], bytes | None]] = checkpoint if checkpoint is not None else (
                lambda: self._ask(index))
            details.update(self.details(_TrainedTrial(self.make_trial, index, score, content,
                                                      self.evaluate_checkpoint, budget=self.rungs[rung]),
                                        metrics))
        evaluated = time.perf_counter()
        self.store.record(index, self.rungs[rung], details, checkpoint)
        fetched = self._fetching - fetching  # a new best's state, from its worker
        self.seconds["train"] += waited - start + fetched  # waiting for the workers
        self.seconds["evaluate"] += evaluated - waited - fetched
        self.seconds["store"] += time.perf_counter() - evaluated
        return score

    def run(self) -> list[RungReport]:
        """Train every rung (skipping results already recorded); return one report per rung.

        Interrupted (Ctrl-C, an error), it first writes the checkpoints of the kept trials whose
        results are recorded, so a resumed sweep continues them instead of replaying them. (Trials
        that workers keep are not asked for: Ctrl-C stops the workers too. A resumed sweep replays
        them from their last checkpoint, exactly.)"""
        try:
            return self._run()
        except BaseException:
            last = self.rungs[-1]
            try:
                self._save([i for i in self._kept.unsaved() if self._kept.get(i).budget < last])
            except Exception:  # noqa: BLE001 the error being raised is the one to report
                pass
            raise

    @property
    def ledger(self) -> RungLedger:
        """The first cohort's rung ledger (with one cohort, the whole sweep's)."""
        return self.stream.ledger(0)

    def winner(self) -> int | None:
        """The configuration the search picked: the best that completed the last rung, over every cohort."""
        return self.stream.winner()

    def _run(self) -> list[RungReport]:
        """Hand out the work the stream of cohorts chooses (see :class:`~eve_search.engine.stream.CohortStream`):
        in this process one piece at a time, or on the workers as each one frees up; a result already
        in the store is fed back without training, so a resumed sweep takes the same decisions."""
        recorded = self.store.rung_details()
        reports: list[RungReport] = []
        if self.workers is not None:
            self._run_on_workers(recorded, reports)
            return reports
        while (work := self.stream.next_work()) is not None:
            self.stream.start(work)
            saved = recorded.get(work.index, {}).get(self.rungs[work.rung])
            score = float(saved["score"]) if saved is not None else self._train(work.index, work.rung)
            self._feed(work, score, saved is not None, reports)
        return reports

    def _run_on_workers(self, recorded: dict[int, dict[int, dict[str, Any]]], reports: list[RungReport]) -> None:
        """The workers' loop: every idle worker gets the next piece of work at once; results are recorded
        and fed to the stream as they come (in (index, rung) order when several come together)."""
        idle = list(range(self.workers.jobs))
        running: dict[Future, tuple[Work, int]] = {}
        while True:
            while (placed := self._next_for(idle)) is not None:
                work, worker = placed
                self.stream.start(work)
                saved = recorded.get(work.index, {}).get(self.rungs[work.rung])
                if saved is not None:
                    self._feed(work, float(saved["score"]), True, reports)
                    continue
                worker = self._worker_for(work.index, worker, idle)
                idle.remove(worker)
                job = replace(self.make_job(work.index, work.rung), forget=tuple(self._forget.pop(worker, ())),
                              keep=self._defer)
                running[self.workers.train(job, worker)] = (work, worker)
            self._write_saved([index for index, future in self._saving.items() if future.done()])
            if not running:
                break
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: (running[f][0].index, running[f][0].rung)):
                work, worker = running.pop(future)
                score = self._record_trained(work.index, work.rung, worker, future)
                idle.append(worker)
                self._feed(work, score, False, reports)
            idle.sort()
        self._write_saved(list(self._saving))

    def _next_for(self, idle: list[int]) -> tuple[Work, int] | None:
        """The next piece of work and an idle worker that can take it now, or None. A trial kept in a
        busy worker's memory, whose checkpoint is not written yet, waits for that worker; the idle one
        takes the next ready work instead (which worker runs what never changes a decision)."""
        for worker in idle:
            blocked = {index for index, holder in self._holder.items()
                       if holder != worker and holder not in idle
                       and index in self._saving and not self._saving[index].done()}
            work = self.stream.next_work(skip=blocked)
            if work is not None:
                return work, worker
        return None

    def _worker_for(self, index: int, worker: int, idle: list[int]) -> int:
        """The worker for trial ``index``'s next piece: the one that keeps it when that one is idle; else
        ``worker``, which reads the trial's checkpoint (the keeping worker forgets it)."""
        holder = self._holder.pop(index, None)
        if holder is None or holder in idle:
            return worker if holder is None else holder
        self._write_saved([index])
        self._forget.setdefault(holder, []).append(index)
        return worker

    def _feed(self, work: Work, score: float, resumed: bool, reports: list[RungReport]) -> None:
        """Give the stream a result; apply every rung decision it makes possible."""
        made = self.stream.report(work.index, work.rung, score)
        if self.on_result is not None:
            self.on_result(work.rung, work.index, score, resumed)
        for cohort, decision in made:
            start, serialized = time.perf_counter(), self.seconds["serialize"]
            reports.append(self._apply(cohort, decision))  # (promoted checkpoints count as serialize)
            self.seconds["decide"] += time.perf_counter() - start - (self.seconds["serialize"] - serialized)

    def _apply(self, cohort: int, decision: RungDecision) -> RungReport:
        ledger = self.stream.ledger(cohort)
        scores = ledger.scores(decision.rung)
        last = decision.rung == len(self.rungs) - 1
        if not last:  # a promoted trial's checkpoint, before any trial of the rung is removed
            self._save(list(decision.promoted))
            self._save_held(list(decision.promoted))
            self._drop_held(list(decision.stopped))
        for index in decision.stopped:
            if not last:  # the winner may still be asked for (its test metrics)
                self._kept.pop(index)
        if last:
            for index in decision.stopped:
                self.store.complete(index, scores[index])
        else:
            self.store.eliminate(decision.stopped)
        trained = ledger.cohort(decision.rung)
        return RungReport(budget=decision.budget, trials=trained, scores={i: scores[i] for i in trained},
                          promoted=list(decision.promoted), cohort=cohort)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the block on one PyTorch thread, then give back the count there was (also on error).

    Returns:
        A context manager; inside it ``torch.get_num_threads()`` is 1.

    Example:
        >>> import torch
        >>> with one_torch_thread():
        ...     torch.get_num_threads()
        1
    """
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _serialized(trial: Trial) -> bytes:
    """``trial.to_bytes()`` on one PyTorch thread. Its few passes over the weights (EvE's check that the
    module still holds its best member, the copies) gain nothing from a second thread, which only waits
    for a CPU the store's writer thread holds: in a demo sweep an EvE checkpoint took 5.9-8.5 ms per
    call this way against 3.4 ms on one thread (0.85 ms alone). The bytes are the same."""
    with one_torch_thread():
        return trial.to_bytes()


class _TrainedTrial:
    """A trial a worker trained, as the ``details`` callback sees it: its score at once, the trial
    itself rebuilt from the checkpoint bytes only if asked for more (e.g. test metrics of a new best;
    with ``evaluate_checkpoint``, metrics come from the saved model alone). When the worker keeps the
    trial (``checkpoint`` a callable that asks for its bytes), the bytes are asked for only when wanted:
    :meth:`pending_checkpoint` asks without waiting (the worker may have a rung of work queued before
    it), :meth:`checkpoint_bytes` waits."""

    def __init__(self, make_trial: Callable[[int], Trial], index: int, score: float,
                 checkpoint: bytes | Callable[[], Callable[[], bytes | None]],
                 evaluate_checkpoint: Callable[[int, bytes, str], dict[str, float]] | None = None, *,
                 budget: int | None = None) -> None:
        self._make_trial, self._index, self._score = make_trial, index, score
        self._checkpoint = checkpoint
        self._pending: Callable[[], bytes | None] | None = None
        self.index, self.budget = index, budget
        self._evaluate_checkpoint = evaluate_checkpoint
        self._trial: Trial | None = None

    def pending_checkpoint(self) -> Callable[[], bytes | None]:
        """A call that gives this trial's checkpoint bytes (None if its worker no longer holds it),
        asked for now and waited for only when called."""
        if self._pending is None:
            content = self._checkpoint
            self._pending = content() if callable(content) else lambda: content
        return self._pending

    def score(self, metrics: dict[str, float]) -> float:
        return self._score

    def checkpoint_bytes(self) -> bytes | None:
        """The worker's checkpoint of this trial (what :meth:`Trial.to_bytes` would give); None if the
        worker that kept it no longer holds it."""
        return self.pending_checkpoint()()  # (a worker's answer is kept by its future)

    def _rebuilt(self) -> Trial:
        if self._trial is None:
            content = self.checkpoint_bytes()
            if content is None:
                raise CheckpointError(f"trial {self._index}: its worker no longer holds its state")
            trial = self._make_trial(self._index)
            trial.load_bytes(content)
            self._trial = trial
        return self._trial

    def evaluate(self, split: str = "val") -> dict[str, float]:
        if self._trial is None and self._evaluate_checkpoint is not None and self.checkpoint_bytes() is not None:
            return self._evaluate_checkpoint(self._index, self.checkpoint_bytes(), split)
        return self._rebuilt().evaluate(split)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._rebuilt(), name)
