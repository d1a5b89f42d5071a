"""Optuna integration: a synchronous successive-halving pruner and a resumable multi-worker driver.

- :class:`SynchronousSHAPruner`: for ordinary objectives that ``report`` and ``should_prune``; a rung
  is judged once its whole cohort has reported it (Optuna's ``SuccessiveHalvingPruner`` judges each
  trial against whoever reported before it). Rungs in the objective's steps (``min_resource``,
  ``reduction_factor``, ``max_resource``), or the paper's in cost units (``rungs=``). How it waits
  and what it is told about the study (``timeout``, ``poll_interval``, ``stall_seconds``, ``n_trials``,
  ``workers``): :class:`PrunerOptions` (or the same names as keywords).
- :func:`optimize_in_cohorts`: ``study.optimize`` for that pruner: a cohort's trials alive at once in
  threads, ``n_jobs`` of them training, so a sequential script's rungs are judged among whole cohorts;
  a free turn goes where the stream of cohorts says (a promoted trial of the oldest cohort, else a new
  trial, which opens the next cohort).
- :func:`run_sha`: ask-and-tell driver that trains eve-search trials rung by rung from checkpoints,
  with any number of worker processes on one RDB storage (SQLite or PostgreSQL); a killed worker's
  trials continue elsewhere. With ``cohort_size`` it runs a stream of cohorts, each worker taking the
  work :class:`~eve_search.engine.stream.CohortStream` offers first, so no worker waits at a rung
  while another cohort has work; the decisions and the winner are the same for any number of
  workers. Its rung, training and polling settings: :class:`ShaOptions` (or the same names as
  keywords).
- :func:`run_sweep_on_optuna`: the ``eve-search ... --backend optuna --workers N`` backend.

Optuna is a dependency of eve-search (4.3 to 5.0); a PostgreSQL storage needs the ``postgres`` extra.

Steps and rungs:
    A step is whatever your objective passes to ``trial.report(value, step)``: an epoch or an
    iteration. The default rungs are Optuna's geometric schedule in those steps (``min_resource=1``,
    ``reduction_factor=3``: rungs 1, 3, 9, 27, ...; ``max_resource=`` adds a final rung), and each
    rung promotes the best ``1/reduction_factor``. The paper's rungs in evaluation units are
    ``rungs=eve_search.engine.ledger.DEFAULT_RUNGS``. A :class:`RungScheduleWarning` says when a
    trial finished below the first rung (wrong units) or one report jumped several rungs.

Cohorts:
    ``cohort_size`` consecutive trials are judged together: at a rung, ``should_prune()`` inside
    ``study.optimize`` waits for the whole cohort. :func:`optimize_in_cohorts` runs each trial in a
    thread and lets ``n_jobs`` of them (default 1) train at a time; a trial waiting at a rung gives its
    turn away. Also fine: ``study.optimize(objective, n_trials=N, n_jobs=cohort_size)`` (with or
    without ``timeout=``), or ``cohort_size`` worker processes on one RDB storage. In ask-and-tell,
    ask a whole cohort and train its trials in turn (Optuna's batched pattern): there
    ``should_prune()`` never waits, and a trial learns a rung's verdict at its next call. A plain
    sequential ``study.optimize`` (or ask-and-tell one trial at a time) cannot fill a cohort: it is
    refused at its first ``should_prune()`` (:class:`SequentialStudyError`), naming a fix that fits, on
    in-memory and RDB storage alike. Several worker processes on one RDB storage say so with
    ``SynchronousSHAPruner(..., workers=N)``: then a process that cannot fill a cohort by itself waits
    for the others.

Cohorts close on events, not on a timer:
    The last cohort is closed with the trials it has when the study stops starting trials:
    ``study.optimize`` reached ``n_trials``, its ``timeout`` passed or ``study.stop()`` was called
    while its trials wait at a rung (the pruner reads this from the stacks of this process's threads),
    :func:`optimize_in_cohorts` stopped starting trials, or the pruner's ``n_trials=`` was reached. A
    slow trial keeps its cohort open for as long as it trains. When every thread of
    ``study.optimize(..., n_jobs=k)`` waits for trials no thread is free to start (k below the
    cohort), :class:`CohortStalledError` says so at once.

Partial rungs are never silent:
    When no more trials start (the last partial cohort, ``timeout``, ``study.stop()``) or the
    pruner's own ``timeout=`` passes, the rung is decided with the trials that reported, recorded in
    the study's user attribute ``sha:cohort{k}:rung{step}`` (:func:`decision_key`) with ``partial``,
    ``reporters``, ``cohort`` and ``reason``, and a :class:`PartialRungWarning` is emitted.

Heartbeats:
    With ``RDBStorage(url, heartbeat_interval=h, grace_period=g)``, safe grace periods are
    ``g >= h + 10`` s (plus SQLite's busy timeout on SQLite); ``g <= h`` is refused at the first
    ``should_prune()``. A live trial that a heartbeat check fails as stale all the same is dropped with
    one :class:`StaleTrialWarning` (``should_prune()`` returns True), never raised through the pruner.

What the pruner cannot do:
    Pause a trial (a waiting trial keeps its model in memory, up to ``cohort_size`` at once;
    :func:`run_sha` resumes from checkpoints instead); tell a lone process on RDB storage from the
    first of several workers still starting without ``workers=`` (with ``workers=N`` a stalled
    cohort waits for other processes, and ``stall_seconds``, 300 s, is a last guard that raises
    :class:`CohortStalledError`); see ``study.optimize`` loops of other processes (each process
    closes the cohort when its own loop stops asking and no trial of another process runs); prune
    multi-objective studies (Optuna refuses ``trial.report`` there; :func:`optimize_in_cohorts` and
    :func:`run_sha` refuse them in one line, before any trial); keep a plain ``study.optimize`` going after one
    of its live trials was failed as stale (Optuna raises ``Cannot tell a FAIL trial`` as it records
    the trial's end; :func:`optimize_in_cohorts` goes on).
"""

from __future__ import annotations

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
    PrunerOptions,
    RungScheduleWarning,
    SequentialStudyError,
    StaleTrialWarning,
    SynchronousSHAPruner,
    decision_key,
    root_number,
)

__all__ = [
    "CohortStalledError",
    "PartialRungWarning",
    "PrunerOptions",
    "RungScheduleWarning",
    "SequentialStudyError",
    "ShaOptions",
    "StaleTrialWarning",
    "SynchronousSHAPruner",
    "WorkerReport",
    "decision_key",
    "optimize_in_cohorts",
    "root_number",
    "run_sha",
    "run_sweep_on_optuna",
    "worker_storage",
]
