"""Optuna integration: a synchronous successive-halving pruner and a resumable multi-worker driver.

- :class:`SynchronousSHAPruner`: for ordinary objectives that ``report`` and ``should_prune``; a rung
  is judged once its whole cohort has reported it (Optuna's ``SuccessiveHalvingPruner`` judges each
  trial against whoever reported before it). Rungs in the objective's steps (``min_resource``,
  ``reduction_factor``, ``max_resource``), or the paper's in cost units (``rungs=``).
- :func:`optimize_in_cohorts`: ``study.optimize`` for that pruner: a cohort's trials alive at once in
  threads, ``n_jobs`` of them training, so a sequential script's rungs are judged among whole cohorts.
- :func:`run_sha`: ask-and-tell driver that trains eve-search trials rung by rung from checkpoints,
  with any number of worker processes on one RDB storage (SQLite or PostgreSQL); a killed worker's
  trials continue elsewhere.
- :func:`run_sweep_on_optuna`: the ``eve-search ... --backend optuna --workers N`` backend.

Needs the ``optuna`` extra (``pip install 'eve-search[optuna]'``; PostgreSQL: ``[postgres]``).
"""

from __future__ import annotations

from eve_search._imports import require

require("optuna", "optuna")

from eve_search.integrations._optuna_cohorts import optimize_in_cohorts
from eve_search.integrations._optuna_driver import (
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
    "SynchronousSHAPruner",
    "WorkerReport",
    "decision_key",
    "optimize_in_cohorts",
    "root_number",
    "run_sha",
    "run_sweep_on_optuna",
    "worker_storage",
]
