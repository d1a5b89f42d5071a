"""Train a rung's trials on parallel worker processes, one thread each (``--jobs N``).

Workers only train: a job names a trial (its task, configuration, optimizer, seeds, frozen ratio and
owner), the checkpoint to continue from and the rung budgets to pass through; the worker returns the
validation metrics and the meter's figures. The engine
(:class:`~eve_search.engine.sha.SynchronousSuccessiveHalving`) keeps the ledger, records results in rung order
and decides, so the store looks exactly as with one process.

Each worker keeps the trials it trained in its memory, within its share of the engine's
``keep_bytes``, as the in-process engine keeps its own: a trial's next rung goes to the worker that
holds it, which continues it without rebuilding it or reading a checkpoint, and a trial's state
crosses to the engine only when it is needed there (the checkpoint of a promoted trial, or the
state of a new best for its test metrics). A trial that does not fit comes back as checkpoint bytes
at once, as every trial did before.

Every worker runs PyTorch with one intra-op thread, so a trial's arithmetic does not depend on which
worker trains it or how many there are: ``--jobs 1`` and ``--jobs 4`` give the same results, bit for
bit. One thread is not always bit-identical to the default two-thread process (a reduction may be
split differently), which is why ``--jobs`` is opt-in and the default stays in-process.

Where the machine has a CPU to spare for every worker (twice as many CPUs as workers, e.g. ``--jobs 1``
on two), a worker evaluates each trial on a second thread while its main thread trains the next one
(:func:`evaluates_beside`). Each operation still runs on the one thread that calls it, so the results
are the same bit for bit; only the validation pass (a third to half of a short rung's time on the
Adult network) leaves the critical path. A trial's result therefore comes back with the next job's
(or, for a worker's last job of a rung, once it is evaluated).
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import (
    CancelledError,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eve_search._checks import InputError, check_int
from eve_search._openmp import available_cpus, child_environment
from eve_search.engine import MAX_JOBS

__all__ = ["TrialJob", "TrialWorkers", "check_jobs", "evaluates_beside", "start_worker_server"]

# What the process workers are forked from imports once (PyTorch and torch._dynamo, which any
# torch.optim optimizer imports on first use, take about 2.5 s here), so a worker starts in
# milliseconds instead of importing them again.
_PRELOAD = ["torch", "torch._dynamo", "eve_search.engine.trial", "eve_search.engine.sweep", "eve_search.engine._workers"]


def check_jobs(jobs: Any) -> int:
    """``jobs`` worker processes: an int from 1 to 1024 (each is a process holding its own PyTorch; the
    command line also keeps it within --configs and 4 x the CPUs, see :mod:`eve_search.cli.args`)."""
    check_int("jobs", jobs, 1, detail=" of worker processes")
    if jobs > MAX_JOBS:
        raise InputError(f"Invalid jobs: {jobs!r} (expected at most {MAX_JOBS} worker processes: each is a "
                         "process holding its own PyTorch)")
    return jobs


def evaluates_beside(jobs: int, cpus: int) -> bool:
    """Whether each of ``jobs`` workers evaluates a trial on a second thread while it trains the next:
    when there are at least two CPUs per worker, so the second thread takes a CPU that would idle.

    Args:
        jobs: worker processes.
        cpus: the CPUs the sweep may run on.

    Returns:
        True when ``cpus >= 2 * jobs``.

    Example:
        >>> evaluates_beside(jobs=1, cpus=2), evaluates_beside(jobs=2, cpus=2), evaluates_beside(jobs=4, cpus=16)
        (True, False, True)
    """
    return cpus >= 2 * jobs


@dataclass(frozen=True)
class TrialJob:
    """One trial's work for one rung: continue from ``checkpoint`` (a path; missing or unusable:
    from the start) through ``budgets`` (every rung budget up to this rung, in order)."""

    index: int
    config: dict[str, Any]
    optimizer: str
    seed: int
    cost_mode: str
    backward_ratio: float | None
    owner: str
    checkpoint: str | None
    budgets: tuple[int, ...]
    forget: tuple[int, ...] = ()
    """Trials the worker may drop from its memory first (stopped, or moved to another worker)."""
    keep: bool = True
    """Whether the worker may keep the trial (False: its checkpoint bytes always come back)."""


_STATE: dict[str, Any] = {}


def _started_at(pid: int) -> str | None:
    """When process ``pid`` started (Linux), so a reused process id is not taken for it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else: not the same process, but the start time decides
    return started is None or _started_at(pid) == started


def _exit_with_parent(parent: int, started: str | None) -> None:
    """End this worker once the process that started the workers is gone (e.g. killed by SIGKILL),
    instead of waiting forever for work that will never come. (A forked worker's own parent is the
    fork server, which stays up as long as any worker does, so the watch is on the sweep's process.)"""
    while _alive(parent, started):
        time.sleep(0.5)
    os._exit(1)


def _start_worker(task: Any, data_dir: Path | None, optimizer: str | None, parent: int,
                  started: str | None, keep_bytes: int = 0, beside: bool = False) -> None:
    import torch

    threading.Thread(target=_exit_with_parent, args=(parent, started), name="eve-search-parent-watch",
                     daemon=True).start()

    torch.set_num_threads(1)  # (a thread PyTorch has not seen yet takes this count at its first operation)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set in this process
    from eve_search.engine.trial import KeptTrials

    _STATE["task"], _STATE["data"] = task, task.data(data_dir)
    _STATE["kept"] = KeptTrials(keep_bytes)
    _STATE["pending"] = []  # (key, job, trial, future of its metrics), in the order they were handed in
    _STATE["beside"] = ThreadPoolExecutor(1, thread_name_prefix="eve-search-evaluate") if beside else None
    if optimizer is not None:
        from eve_search.engine.trial import warm_up

        warm_up(optimizer)  # one-time imports and kernel set-up, while the parent still prepares


def _started() -> int:
    return os.getpid()


# What a worker call returns: (key, True, value) or (key, False, (error, its traceback as text)) for
# each call whose answer is ready, its own and those of trials evaluated beside the training since.
Answer = tuple[int, bool, Any]


def _failed(key: int, error: BaseException) -> Answer:
    return key, False, (error, "".join(traceback.format_exception(error)))


def _trained(job: TrialJob) -> Any:
    """``job``'s trial, trained to its last budget."""
    from eve_search.engine.checkpoint import CheckpointError
    from eve_search.engine.trial import Trial

    task, data, kept = _STATE["task"], _STATE["data"], _STATE["kept"]
    for index in job.forget:
        kept.pop(index)

    def fresh() -> Trial:
        return Trial(task, job.config, job.optimizer, seed=job.seed, index=job.index, cost_mode=job.cost_mode,
                     backward_ratio=job.backward_ratio, data=data, owner=job.owner)

    held = kept.pop(job.index)
    if held is not None and held.budget <= job.budgets[-1]:
        trial = held  # as its last result left it: what its checkpoint would give back
    else:
        trial = fresh()
        if job.checkpoint is not None and os.path.exists(job.checkpoint):
            try:
                trial.load(job.checkpoint)
            except CheckpointError:
                trial = fresh()  # replayed exactly from the start, as the in-process engine does
            if trial.budget > job.budgets[-1]:  # a checkpoint past this rung (its record was removed): replay
                trial = fresh()
    for budget in job.budgets:
        if trial.budget < budget:
            trial.train_to(budget)
    return trial


def _result(key: int, job: TrialJob, trial: Any, metrics: dict[str, float]) -> Answer:
    """``job``'s answer: (score, validation metrics, charged units, wall seconds, backward passes,
    checkpoint bytes, or None when this worker keeps the trial, see :func:`_save`)."""
    from eve_search.engine.trial import trial_bytes

    kept = _STATE["kept"]
    checkpoint = None if job.keep and kept.keep(job.index, trial, trial_bytes(trial)) else trial.to_bytes()
    return key, True, (trial.score(metrics), metrics, trial.charged_units, trial.wall_seconds,
                       trial.meter.backward_passes, checkpoint)


def _collect() -> list[Answer]:
    """The answers of the trials being evaluated beside the training, waiting for each."""
    answers, pending = [], _STATE["pending"]
    while pending:
        key, job, trial, metrics = pending.pop(0)
        try:
            answers.append(_result(key, job, trial, metrics.result()))
        except Exception as error:  # noqa: BLE001 the engine raises it, as it would the job's own
            answers.append(_failed(key, error))
    return answers


def _train(key: int, job: TrialJob, last: bool = True) -> list[Answer]:
    """Train ``job``'s trial and evaluate it, here or (with a spare CPU) on the second thread while the
    next job trains: then its answer comes with the next call's, or at once when ``last``."""
    answers = []
    if any(pending[1].index == job.index or pending[1].index in job.forget for pending in _STATE["pending"]):
        answers = _collect()  # (the engine never sends these, but a trial is never continued while evaluated)
    try:
        trial = _trained(job)
        beside = _STATE["beside"]
        if beside is None:
            return [*answers, _result(key, job, trial, trial.evaluate())]
        answers += _collect()  # the previous trial's, evaluated while this one trained
        _STATE["pending"].append((key, job, trial, beside.submit(trial.evaluate)))
        return (answers + _collect()) if last else answers
    except Exception as error:  # noqa: BLE001 the engine raises it, as it would in-process
        return [*answers, *_collect(), _failed(key, error)]


def _answered(key: int, compute: Any) -> list[Answer]:
    """The answers still owed by trials evaluated beside the training, then ``compute()``'s as ``key``'s."""
    answers = _collect()
    try:
        return [*answers, (key, True, compute())]
    except Exception as error:  # noqa: BLE001 the engine raises it, as it would in-process
        return [*answers, _failed(key, error)]


def _save(key: int, index: int) -> list[Answer]:
    """The checkpoint bytes of kept trial ``index`` (which stays kept), or None when this worker does
    not hold it."""
    def content() -> bytes | None:
        held = _STATE["kept"].get(index)  # (read once the trials evaluated beside are kept)
        return None if held is None else held.to_bytes()

    return _answered(key, content)


def _calibrate(key: int, job: TrialJob) -> list[Answer]:
    from eve_search.engine.trial import Trial

    def measure() -> tuple[float, dict[str, Any] | None]:
        probe = Trial(_STATE["task"], job.config, job.optimizer, seed=job.seed, index=job.index,
                      cost_mode="measured", data=_STATE["data"])
        return probe.calibrate(), probe.last_calibration

    return _answered(key, measure)


class _RemoteTraceback(Exception):
    """The worker's traceback of an error, as its cause (as :mod:`concurrent.futures.process` shows one)."""

    def __str__(self) -> str:
        return str(self.args[0])


def _context() -> Any:
    """Workers are forked from a fresh server process that has imported PyTorch but never run an
    OpenMP parallel region (a fork of a process whose OpenMP pool has run can hang in the child);
    where there is no fork server (Windows), spawned."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def start_worker_server() -> None:
    """Start the process ``--jobs`` workers are forked from now, so its imports run side by side with
    this process's own start-up (opening the store, loading data). Idempotent; optional."""
    if _context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        with child_environment():  # the workers are forked from it and inherit its OpenMP policy
            forkserver.ensure_running()


class TrialWorkers:
    """``jobs`` worker processes (forked from the fork server, one PyTorch thread each) that train trials of ``task``.

    All of them start at once, and each warms ``optimizer`` up (imports and first-call set-up) before
    its first job, so their start-up runs side by side instead of one worker per first job. Each has
    a queue of its own (work is handed to a chosen worker, the one that holds a trial) and keeps the
    trials it trained within ``keep_bytes / jobs`` (default: the in-process engine's ``KEEP_BYTES``).
    ``beside``: whether each worker evaluates a trial on a second thread while it trains the next
    (default: :func:`evaluates_beside` of ``jobs`` and the CPUs this process may use); the results
    are the same either way.
    """

    def __init__(self, task: Any, jobs: int, data_dir: Path | None = None, *, optimizer: str | None = None,
                 keep_bytes: int | None = None, beside: bool | None = None) -> None:
        self.jobs = check_jobs(jobs)
        if keep_bytes is None:  # (imported here: the fork server starts before this process imports PyTorch)
            from eve_search.engine.trial import KEEP_BYTES

            keep_bytes = KEEP_BYTES
        check_int("keep_bytes", keep_bytes, 0)
        if beside is None:
            beside = evaluates_beside(self.jobs, available_cpus())
        elif not isinstance(beside, bool):
            raise InputError(f"Invalid beside: {beside!r} (expected True, False or None)")
        self.beside = beside
        parent = (os.getpid(), _started_at(os.getpid()))
        self._pools = [ProcessPoolExecutor(max_workers=1, mp_context=_context(), initializer=_start_worker,
                                           initargs=(task, data_dir, optimizer, *parent, keep_bytes // self.jobs,
                                                     beside))
                       for _ in range(self.jobs)]
        self._keys = itertools.count()
        self._lock = threading.Lock()
        self._waiting: list[dict[int, Future]] = [{} for _ in range(self.jobs)]  # per worker: key -> answer
        # A pool starts its process at its first submission: one cheap call each starts them all.
        with child_environment():
            self._started = [pool.submit(_started) for pool in self._pools]

    def wait_until_ready(self) -> None:
        """Wait until every worker has started (its data loaded and its optimizer warmed up); raise what
        stopped one that could not."""
        for future in self._started:
            future.result()

    def train(self, job: TrialJob, worker: int = 0) -> Future:
        """A future of (score, validation metrics, charged units, wall seconds, backward passes, checkpoint
        bytes, or None when worker ``worker`` keeps the trial)."""
        return self.train_all([(job, worker)])[0]

    def train_all(self, work: Sequence[tuple[TrialJob, int]]) -> list[Future]:
        """Hand each (job, worker) pair to its worker, in order; one future per pair, as :meth:`train`'s.

        A worker that evaluates beside its training answers each job with the next one handed to it in
        this call, and its last one as soon as it is evaluated.
        """
        last = {worker: position for position, (_, worker) in enumerate(work)}
        return [self._call(worker, _train, job, last[worker] == position)
                for position, (job, worker) in enumerate(work)]

    def save(self, worker: int, index: int) -> Future:
        """A future of the checkpoint bytes of trial ``index``, kept by worker ``worker`` (None if it does
        not hold it), after the work already handed to that worker."""
        return self._call(worker, _save, index)

    def calibrate(self, job: TrialJob) -> Future:
        """A future of (ratio, calibration report) measured in a worker, as its trials will train."""
        return self._call(0, _calibrate, job)

    def _call(self, worker: int, function: Any, *args: Any) -> Future:
        """Run ``function(key, *args)`` on ``worker``; a future of the answer for ``key``, which may come
        back with this call or a later one."""
        key = next(self._keys)
        answer: Future = Future()
        with self._lock:
            self._waiting[worker][key] = answer
        try:
            call = self._pools[worker].submit(function, key, *args)
        except BaseException:
            with self._lock:
                self._waiting[worker].pop(key, None)
            raise
        call.add_done_callback(functools.partial(self._deliver, worker, key))
        return answer

    def _deliver(self, worker: int, key: int, call: Future) -> None:
        """Settle the answers ``call`` brought back. A call that brought none back (the worker died, the
        call was cancelled, its answer could not be sent) settles every answer still owed up to its own
        with what happened to it."""
        try:
            answers = call.result()
        except BaseException as error:  # noqa: BLE001 handed to whoever waits for those answers
            with self._lock:
                owed = [k for k in self._waiting[worker] if k <= key]
            answers = [(k, False, error) for k in owed]
        for k, ok, value in answers:
            with self._lock:
                answer = self._waiting[worker].pop(k, None)
            if answer is None:
                continue
            if ok:
                answer.set_result(value)
            elif isinstance(value, CancelledError):
                answer.cancel()
            elif isinstance(value, BaseException):
                answer.set_exception(value)
            else:
                error, text = value
                error.__cause__ = _RemoteTraceback(text)
                answer.set_exception(error)

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=False, cancel_futures=True)
        for pool in self._pools:
            pool.shutdown(wait=True)
        with self._lock:  # (a train_all's answers all come back; anything still owed is cancelled)
            owed = [answer for waiting in self._waiting for answer in waiting.values()]
            for waiting in self._waiting:
                waiting.clear()
        for answer in owed:
            answer.cancel()

    def __enter__(self) -> TrialWorkers:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
