"""Train a rung's trials on parallel worker processes, one thread each (``--jobs N``).

Workers only train: a job names a trial (its task, configuration, optimizer, seeds, frozen ratio and
owner), the checkpoint to continue from and the rung budgets to pass through; the worker returns the
validation metrics, the meter's figures and the checkpoint bytes. The engine
(:class:`~eve_search.sha.SynchronousSuccessiveHalving`) keeps the ledger, records results in rung order
and decides, so the store looks exactly as with one process.

Every worker runs PyTorch with one intra-op thread, so a trial's arithmetic does not depend on which
worker trains it or how many there are: ``--jobs 1`` and ``--jobs 4`` give the same results, bit for
bit. One thread is not always bit-identical to the default two-thread process (a reduction may be
split differently), which is why ``--jobs`` is opt-in and the default stays in-process.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TrialJob", "TrialWorkers", "check_jobs"]


def check_jobs(jobs: Any) -> int:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"Invalid jobs: {jobs!r} (expected an int >= 1 of worker processes)")
    return jobs


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


_STATE: dict[str, Any] = {}


def _exit_with_parent(parent: int) -> None:
    """End this worker once its parent is gone (e.g. killed by SIGKILL), instead of waiting forever for
    work that will never come."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _start_worker(task: Any, data_dir: Path | None) -> None:
    import torch

    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="eve-search-parent-watch",
                     daemon=True).start()

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set in this process
    _STATE["task"], _STATE["data"] = task, task.data(data_dir)


def _train(job: TrialJob) -> tuple[float, dict[str, float], float, float, int, bytes]:
    from eve_search.checkpoint import CheckpointError
    from eve_search.trial import Trial

    task, data = _STATE["task"], _STATE["data"]

    def fresh() -> Trial:
        return Trial(task, job.config, job.optimizer, seed=job.seed, index=job.index, cost_mode=job.cost_mode,
                     backward_ratio=job.backward_ratio, data=data, owner=job.owner)

    trial = fresh()
    if job.checkpoint is not None and os.path.exists(job.checkpoint):
        try:
            trial.load(job.checkpoint)
        except CheckpointError:
            trial = fresh()  # replayed exactly from the start, as the in-process engine does
    for budget in job.budgets:
        if trial.budget < budget:
            trial.train_to(budget)
    metrics = trial.evaluate()
    return trial.score(metrics), metrics, trial.charged_units, trial.wall_seconds, trial.meter.backward_passes, trial.to_bytes()


def _calibrate(job: TrialJob) -> tuple[float, dict[str, Any] | None]:
    from eve_search.trial import Trial

    probe = Trial(_STATE["task"], job.config, job.optimizer, seed=job.seed, index=job.index, cost_mode="measured",
                  data=_STATE["data"])
    ratio = probe.calibrate()
    return ratio, probe.last_calibration


class TrialWorkers:
    """``jobs`` worker processes (spawned, one PyTorch thread each) that train trials of ``task``."""

    def __init__(self, task: Any, jobs: int, data_dir: Path | None = None) -> None:
        self.jobs = check_jobs(jobs)
        # Spawned, not forked: a fork of a process whose OpenMP pool has run can hang in the child.
        self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start_worker, initargs=(task, data_dir))

    def train(self, job: TrialJob) -> Future:
        """A future of (score, validation metrics, charged units, wall seconds, backward passes, checkpoint bytes)."""
        return self._pool.submit(_train, job)

    def calibrate(self, job: TrialJob) -> Future:
        """A future of (ratio, calibration report) measured in a worker, as its trials will train."""
        return self._pool.submit(_calibrate, job)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> TrialWorkers:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
