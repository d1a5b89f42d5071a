"""The library driver: :func:`run_sha` on a study the caller created, its configurations proposed by the
study's sampler, its settings in :class:`ShaOptions`."""

from __future__ import annotations

import math
import os
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from eve_search._checks import InputError, check_int, with_overrides
from eve_search.engine.store import check_sweep_id, checkpoint_folder
from eve_search.engine.sweep import SearchSettings
from eve_search.engine.trial import Trial
from eve_search.integrations._optuna_driver._view import WorkerSettings
from eve_search.integrations._optuna_driver._worker import ShaWorker, WorkerReport
from eve_search.tasks import Task, get_task
from eve_search.tasks.spaces import SearchSpace, get_space

__all__ = ["ShaOptions", "run_sha"]


@dataclass(frozen=True, kw_only=True)
class ShaOptions(SearchSettings):
    """The settings of :func:`run_sha` that a study keeps for all its workers, and a worker's own (its data
    folder, polling and progress callback).

    Built on :class:`~eve_search.engine.sweep.SearchSettings` (the optimizer, seed, rung rule, cost rule and
    cohorts every driver shares), so one from a sweep's settings is
    ``ShaOptions(**settings.search_fields())``. All workers of one study must agree on every field but
    ``data_dir``, ``poll_interval`` and ``progress``.

    Args:
        optimizer, seed, rungs, fraction, cost_mode, backward_ratio, cohort_size: as for
            :class:`~eve_search.engine.sweep.SearchSettings`.
        data_dir: where the task's data is read from (None: the task's default).
        poll_interval: seconds a worker waits when no work item is ready (> 0).
        progress: called as (phase, rung, reported in the rung, cohort of the rung, best score), or None.

    Raises:
        InputError: one line naming the argument, its value and what was expected.

    Example:
        >>> from eve_search.integrations.optuna import ShaOptions
        >>> ShaOptions(rungs=[10, 30], backward_ratio=2.0).rungs
        (10, 30)
        >>> ShaOptions(fraction=1.5)
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid fraction: 1.5 (expected a number in (0, 1])
    """

    data_dir: str | os.PathLike | None = None
    poll_interval: float = 0.2
    progress: Callable[..., None] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.data_dir is not None and not isinstance(self.data_dir, (str, os.PathLike)):
            raise InputError(f"Invalid data_dir: {self.data_dir!r} (expected a path or None)")
        poll = self.poll_interval
        if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not (math.isfinite(poll) and poll > 0):
            raise InputError(f"Invalid poll_interval: {poll!r} (expected a finite number of seconds > 0)")
        if self.progress is not None and not callable(self.progress):
            raise InputError(f"Invalid progress: {self.progress!r} (expected a callable or None)")


def _options(options: ShaOptions | None, overrides: dict[str, Any]) -> ShaOptions:
    """``options``, or a :class:`ShaOptions` of the keywords: one or the other, not both."""
    if options is not None and overrides:
        raise InputError(f"Invalid options: {options!r} together with the keywords {', '.join(sorted(overrides))} "
                         "(expected options= or its fields as keywords, not both)")
    return with_overrides("run_sha", ShaOptions, options, overrides)


def settings_attr(**values: Any) -> dict[str, Any]:
    """``values`` as a study attribute keeps them (tuples as lists)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()}


def run_sha(study: optuna.Study, task: Task | str, n_trials: int, *, space: SearchSpace | str,
            storage: optuna.storages.BaseStorage, checkpoint_dir: str | os.PathLike, options: ShaOptions | None = None,
            **fields: Any) -> WorkerReport:
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
        options: the rung, training, polling and progress settings (:class:`ShaOptions`; default: its
            defaults).
        **fields: instead of ``options``, its fields as keywords (``optimizer=``, ``seed=``, ``rungs=``,
            ``fraction=``, ``cost_mode=``, ``backward_ratio=``, ``data_dir=``, ``poll_interval=``,
            ``cohort_size=``, ``progress=``: called as (phase, rung, reported in the rung, cohort of the
            rung, best score)); both at once is an InputError, any other keyword a TypeError.

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
    opts = _options(options, fields)
    task = get_task(task) if isinstance(task, str) else task
    space = get_space(space) if isinstance(space, str) else space
    check_int("n_trials", n_trials, 1)
    _check_study(study, storage)
    settings = settings_attr(task=task.name, n_trials=n_trials, optimizer=opts.optimizer, seed=opts.seed,
                             rungs=opts.rungs, fraction=opts.fraction, cost_mode=opts.cost_mode,
                             backward_ratio=opts.backward_ratio)
    if opts.cohort_size is not None and opts.cohort_size < n_trials:  # one cohort: stored as before cohorts
        settings["cohort_size"] = opts.cohort_size
    data = task.data(opts.data_dir)
    _create_cohort(study, storage, _Cohort(task, space, n_trials, settings, data))
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

    worker = ShaWorker(study, storage, WorkerSettings(trials=n_trials, rungs=opts.rungs, fraction=opts.fraction,
                                                      mode=task.mode, cohort_size=settings.get("cohort_size"),
                                                      poll_interval=opts.poll_interval),
                       make_trial=make_trial, checkpoint_path=lambda index: folder / f"trial-{index:04d}.pt",
                       details=_best_details(task), progress=opts.progress)
    return worker.run(offset=os.getpid())


def _check_study(study: optuna.Study, storage: optuna.storages.BaseStorage) -> None:
    try:
        storage.get_study_id_from_name(study.study_name)
    except KeyError:
        raise InputError(f"Invalid storage: it holds no study {study.study_name!r} (expected the storage the "
                         "study was created on)") from None
    if len(study.directions) > 1:
        raise InputError(f"Invalid study: {study.study_name!r} has {len(study.directions)} objectives (expected a "
                         "single-objective study: optuna.create_study(direction=...); run_sha ranks one score)")


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


@dataclass(frozen=True)
class _Cohort:
    """What the first worker creates: ``n_trials`` configurations of ``space`` for ``task``, with ``settings``."""

    task: Task
    space: SearchSpace
    n_trials: int
    settings: dict[str, Any]
    data: Any


def _create_cohort(study: optuna.Study, storage: optuna.storages.BaseStorage, cohort: _Cohort) -> None:
    """Create the cohort once (the first worker), or wait for it and check the settings match."""
    attrs = study.user_attrs
    if "sha_cohort_size" not in attrs and "sha_creator" not in attrs:
        token = uuid.uuid4().hex
        study.set_user_attr("sha_creator", token)
        time.sleep(0.5)  # the last of simultaneous starters wins; the others wait below
        if study.user_attrs.get("sha_creator") == token:
            _ask_cohort(study, storage, cohort)
    deadline = time.monotonic() + 3600
    while "sha_cohort_size" not in study.user_attrs:
        if time.monotonic() > deadline:
            raise RuntimeError(f"study {study.study_name!r}: the worker creating the cohort did not finish "
                               "within an hour (it may have died: delete the study's 'sha_creator' user "
                               "attribute and start again)")
        time.sleep(0.5)
    saved, settings = study.user_attrs.get("sha_settings"), cohort.settings
    if saved != settings:
        different = sorted(k for k in set(saved or {}) | set(settings) if (saved or {}).get(k) != settings.get(k))
        raise InputError(f"Invalid settings: study {study.study_name!r} runs SHA with other settings "
                         f"({', '.join(different)} differ)")


def _ask_cohort(study: optuna.Study, storage: optuna.storages.BaseStorage, cohort: _Cohort) -> None:
    study_id = storage.get_study_id_from_name(study.study_name)
    existing = {t.user_attrs["config_index"] for t in study.get_trials(deepcopy=False)
                if isinstance(t.user_attrs.get("config_index"), int)}
    asked = []
    for index in range(cohort.n_trials):
        if index in existing:
            continue
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)  # ask-and-tell on purpose
            trial = study.ask()
        config = cohort.space.suggest(trial)
        trial.set_user_attr("config_index", index)
        trial.set_user_attr("config", config)
        asked.append(trial.number)
    # Calibrate before any training (one frozen ratio per model shape), then release the trials.
    study.set_user_attr("backward_ratios", _calibrate(study, cohort))
    study.set_user_attr("sweep_id", uuid.uuid4().hex)
    study.set_user_attr("sha_settings", cohort.settings)
    for number in asked:
        storage.set_trial_state_values(storage.get_trial_id_from_study_id_trial_number(study_id, number),
                                       state=TrialState.WAITING)
    study.set_user_attr("sha_cohort_size", cohort.n_trials)


def _calibrate(study: optuna.Study, cohort: _Cohort) -> dict[str, float]:
    """One frozen backward/forward ratio per model shape (calibrated mode; pinned or measured)."""
    settings, task = cohort.settings, cohort.task
    ratios: dict[str, float] = {}
    if settings["cost_mode"] != "calibrated":
        return ratios
    configs = {t.user_attrs["config_index"]: t.user_attrs["config"] for t in study.get_trials(deepcopy=False)
               if isinstance(t.user_attrs.get("config_index"), int)}
    for index in sorted(configs):
        key = task.cost_key(configs[index])
        if key not in ratios:
            ratios[key] = settings["backward_ratio"] or Trial(
                task, configs[index], settings["optimizer"], seed=settings["seed"], index=index,
                cost_mode="measured", data=cohort.data).calibrate()
    return ratios
