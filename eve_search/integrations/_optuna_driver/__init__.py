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
together in a third (:mod:`eve_search.integrations._optuna_adapter`); on another storage each is
Optuna's own call.

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

The package, one module per part: ``_storage`` (the workers' storage and heartbeats), ``_view`` (the study
as one read sees it), ``_worker`` (:class:`ShaWorker`), ``_library`` (:func:`run_sha`, :class:`ShaOptions`)
and ``_backend`` (:func:`run_sweep_on_optuna`, the command line's ``--backend optuna``).
"""

from __future__ import annotations

from eve_search.integrations._optuna_driver._backend import run_sweep_on_optuna
from eve_search.integrations._optuna_driver._library import ShaOptions, run_sha
from eve_search.integrations._optuna_driver._library import settings_attr as _settings_attr
from eve_search.integrations._optuna_driver._storage import worker_storage
from eve_search.integrations._optuna_driver._view import WorkerSettings
from eve_search.integrations._optuna_driver._worker import ShaWorker, WorkerReport

__all__ = ["ShaOptions", "ShaWorker", "WorkerReport", "WorkerSettings", "run_sha", "run_sweep_on_optuna",
           "worker_storage"]
