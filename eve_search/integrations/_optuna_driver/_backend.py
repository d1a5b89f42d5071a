"""``eve-search ... --backend optuna --workers N``: a prepared sweep run by worker processes on its store."""

from __future__ import annotations

import dataclasses
import multiprocessing
import pickle
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import TrialState

from eve_search._checks import InputError, check_int
from eve_search._openmp import child_environment
from eve_search.engine import _stores
from eve_search.engine.backend import finish
from eve_search.engine.ledger import RungLedger
from eve_search.integrations._optuna_adapter import requeue_at_once
from eve_search.integrations._optuna_driver._storage import worker_storage
from eve_search.integrations._optuna_driver._view import View, WorkerSettings
from eve_search.integrations._optuna_driver._worker import WORKER_ATTR, ShaWorker
from eve_search.tasks import Task
from eve_search.tasks.spaces import get_space

__all__ = ["run_sweep_on_optuna"]


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
    s = job.settings
    settings = WorkerSettings(trials=len(sweep.configs), rungs=s.rungs, fraction=s.fraction, mode=sweep.task.mode,
                              cohort_size=s.cohort_size, poll_interval=job.poll_interval)
    worker = ShaWorker(study, storage, settings, make_trial=sweep.make_trial,
                       checkpoint_path=sweep.store.checkpoint_path,
                       details=lambda trial, metrics, best: sweep.note_best(trial, metrics))
    return worker, sweep


def _worker_process(job: _WorkerJob) -> None:
    torch.set_num_threads(job.threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    worker, _ = _open_worker(job)
    worker.run(offset=job.offset)


def _release_unclaimed(storage: optuna.storages.BaseStorage, study: optuna.Study) -> None:
    """The store creates one RUNNING trial per configuration; a trial no worker has claimed yet goes to
    the queue (WAITING), where workers claim it."""
    study_id = storage.get_study_id_from_name(study.study_name)
    ids = [_stores.trial_id_of(storage, study_id, trial)
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
        poll_interval: seconds a worker waits when no work item is ready.
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
    warm_up(sweep.settings.optimizer)
    sweep.start_clock()
    if progress is not None:
        progress("calibrating", 0, 0, 0, None)
    sweep.calibrate()
    total_threads = torch.get_num_threads()
    job = _worker_job(sweep, threads or max(1, total_threads // workers), heartbeat_interval=heartbeat_interval,
                      grace_period=grace_period, poll_interval=poll_interval, many=workers > 1)
    worker, _ = _open_worker(job, sweep)
    _release_unclaimed(worker.storage, worker.study)
    before = _recorded_rungs(sweep.store)
    _run_workers(worker, job, workers, len(sweep.configs), progress, total_threads)
    trained = _recorded_rungs(sweep.store) - before
    return finish(sweep, _OptunaBackend(sweep, worker.view()), trained=trained)


class _OptunaBackend:
    """The workers' study as a :class:`~eve_search.engine.backend.SweepBackend`: the ledgers a last view
    replays (keyed by configuration index), and the winner scored from its checkpoint."""

    def __init__(self, sweep: Any, view: View) -> None:
        self._sweep, self._view = sweep, view

    def ledgers(self) -> list[RungLedger]:
        return self._view.ledgers

    def index_of(self, key: Hashable) -> int:
        return int(key)  # type: ignore[call-overload]

    def winner_test(self, index: int) -> dict[str, float]:
        trial = self._sweep.make_trial(index)
        trial.load(self._sweep.store.checkpoint_path(index))
        return trial.evaluate("test")


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
            raise InputError(f"Invalid task: {sweep.task.name!r} cannot be sent to worker processes ({error}); define "
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
                                    args=(dataclasses.replace(job, offset=k * configs // workers),))
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
