"""Optuna integration: a synchronous successive-halving pruner and a resumable multi-worker driver.

- :class:`SynchronousSHAPruner`: for ordinary objectives that ``report`` and ``should_prune``; a rung
  is judged once its whole cohort has reported it (Optuna's ``SuccessiveHalvingPruner`` judges each
  trial against whoever reported before it). Rungs in the objective's steps (``min_resource``,
  ``reduction_factor``, ``max_resource``), or the paper's in cost units (``rungs=``).
- :func:`optimize_in_cohorts`: ``study.optimize`` for that pruner: a cohort's trials alive at once in
  threads, ``n_jobs`` of them training, so a sequential script's rungs are judged among whole cohorts.
- :func:`run_sha`: ask-and-tell driver that trains eve-search trials rung by rung from checkpoints,
  with any number of worker processes on one RDB storage (SQLite or PostgreSQL); a killed worker's
  trials continue elsewhere. Its rung, training and polling settings: :class:`ShaOptions` (or the same
  names as keywords).
- :func:`run_sweep_on_optuna`: the ``eve-search ... --backend optuna --workers N`` backend.

Needs the ``optuna`` extra (``pip install 'eve-search[optuna]'``; PostgreSQL: ``[postgres]``).

Steps and rungs:
    A step is whatever your objective passes to ``trial.report(value, step)``: an epoch or an
    iteration. The default rungs are Optuna's geometric schedule in those steps (``min_resource=1``,
    ``reduction_factor=3``: rungs 1, 3, 9, 27, ...; ``max_resource=`` adds a final rung), and each
    rung promotes the best ``1/reduction_factor``. The paper's rungs in evaluation units are
    ``rungs=eve_search.engine.ledger.DEFAULT_RUNGS``. A :class:`RungScheduleWarning` says when a
    trial finished below the first rung (wrong units) or one report jumped several rungs.

Cohorts:
    ``cohort_size`` consecutive trials are judged together: at a rung, ``should_prune()`` waits for
    the whole cohort. :func:`optimize_in_cohorts` runs each trial in a thread and lets ``n_jobs`` of
    them (default 1) train at a time; a trial waiting at a rung gives its turn away. Also fine:
    ``study.optimize(objective, n_trials=N, n_jobs=cohort_size)`` (pass ``n_trials=N`` to the pruner
    when N is not a multiple of the cohort), or ``cohort_size`` worker processes on one RDB storage.
    A plain sequential ``study.optimize`` cannot fill a cohort: the first ``should_prune()`` at a
    rung raises :class:`SequentialStudyError` at once, naming both fixes.

Partial rungs are never silent:
    When no more trials start (the last partial cohort, ``timeout``, ``study.stop()``) or the
    pruner's own ``timeout=`` passes, the rung is decided with the trials that reported, recorded in
    the study's user attribute ``sha:cohort{k}:rung{step}`` (:func:`decision_key`) with ``partial``,
    ``reporters``, ``cohort`` and ``reason``, and a :class:`PartialRungWarning` is emitted.

What the pruner cannot do:
    Pause a trial (a waiting trial keeps its model in memory, up to ``cohort_size`` at once;
    :func:`run_sha` resumes from checkpoints instead); know where a plain ``study.optimize`` stops
    (its last partial cohort waits ``stall_seconds``, 30 s, then ends FAIL with the fix named, unless
    the pruner was given ``n_trials``); tell a lone process on RDB storage from the first of several
    workers still starting (there it waits ``stall_seconds`` before refusing); prune multi-objective
    studies.
"""

from __future__ import annotations

from eve_search._imports import require

require("optuna", "optuna")

from eve_search.integrations._optuna_cohorts import optimize_in_cohorts
from eve_search.integrations._optuna_driver import (
    ShaOptions,
    WorkerReport,
    run_sha,
    run_sweep_on_optuna,
    worker_storage,
)
from eve_search.integrations._optuna_pruner import (
    CohortStalledError,
    PartialRungWarning,
    RungScheduleWarning,
    SequentialStudyError,
    SynchronousSHAPruner,
    decision_key,
    root_number,
)

__all__ = [
    "CohortStalledError",
    "PartialRungWarning",
    "RungScheduleWarning",
    "SequentialStudyError",
    "ShaOptions",
    "SynchronousSHAPruner",
    "WorkerReport",
    "decision_key",
    "optimize_in_cohorts",
    "root_number",
    "run_sha",
    "run_sweep_on_optuna",
    "worker_storage",
]
