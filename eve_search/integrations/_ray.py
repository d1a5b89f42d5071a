"""Ray Tune integration: synchronous successive halving that pauses and resumes trials.

Ray's own early-stopping schedulers do not run the paper's search (Appendix "UCI Adult"): ASHA
never pauses a trial, so there is no cohort and a promoted trial is never resumed at a rung;
HyperBand runs several brackets with its own geometric milestones; and ``Tuner.restore`` rebuilds a
scheduler from the pickle written when the run started, without the state it gathered since.

In an existing Ray Tune script, swap the scheduler line (ASHA's vocabulary is accepted; a step is
one ``tune.report`` or one ``Trainable.step()``) and make the trainable resume from its checkpoint::

    scheduler=SynchronousSHAScheduler(grace_period=1, reduction_factor=3, max_t=27)

    def train_fn(config):
        start = 0
        checkpoint = tune.get_checkpoint()          # resume where the pause left off
        if checkpoint:
            with checkpoint.as_directory() as folder:
                start = load_state(folder) + 1
        for epoch in range(start, 27):
            ...
            with tempfile.TemporaryDirectory() as folder:
                save_state(folder, epoch)
                tune.report({"accuracy": accuracy}, checkpoint=tune.Checkpoint.from_directory(folder))

:class:`SynchronousSHAScheduler` pauses a trial (Tune checkpoints it) when its ``time_attr`` reaches
a rung, waits until every live trial of the rung's cohort has reached it or ended, then lets
:class:`~eve_search.engine.ledger.RungLedger` decide: the losers are stopped, the winners resumed from their
checkpoints. A paused trial gives its concurrency slot back, so ``ConcurrencyLimiter`` and
``max_concurrent_trials`` limit how many trials train at once, never the cohort. The ledgers are
written beside Tune's experiment state (the driver staging folder that Tune syncs to
``storage_path``), so a restored run continues them exactly.

:class:`EveTrainable` is a ``tune.Trainable`` over :class:`~eve_search.engine.trial.Trial`: each ``step()``
trains to the next rung budget and reports ``eval_cost``, the task's validation metrics and
``wall_seconds``; its checkpoint is the whole trial (model, optimizer with EvE's population and
moments, cost meter, batch stream, generators), so a paused or restored trial continues bit for bit.

Example (the paper's search; see ``searches/ray_tune_example.py`` for a user's own model)::

    from ray import tune
    from eve_search.integrations.ray import EveTrainable, SynchronousSHAScheduler

    rungs = (100, 300, 900)  # evaluation units (eval_cost)
    tuner = tune.Tuner(
        tune.with_parameters(EveTrainable, task="adult", rungs=rungs, backward_ratio=2.0),
        param_space={"lr": tune.loguniform(1e-4, 1e-2), "weight_decay": 1e-4,
                     "width": tune.choice([64, 256]), "depth": 2},
        tune_config=tune.TuneConfig(metric="accuracy", mode="max", num_samples=27, reuse_actors=True,
                                    scheduler=SynchronousSHAScheduler(time_attr="eval_cost", rungs=rungs)),
    )
    results = tuner.fit()
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eve_search._imports import require
from eve_search.engine.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    RungDecision,
    RungLedger,
    check_fraction,
    check_rungs,
    rungs_from_geometric,
)

require("ray", "ray")
require("ray.tune", "ray")

from ray import tune
from ray.tune.experiment import Trial as TuneTrial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.result import AUTO_RESULT_KEYS
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter

if TYPE_CHECKING:
    from eve_search.tasks import Task
    from eve_search.engine.trial import Trial

__all__ = ["INDEX_KEY", "STATE_FILE", "EveTrainable", "SynchronousSHAScheduler", "SynchronousSHAWarning",
           "config_index", "load_scheduler_state"]

logger = logging.getLogger(__name__)

STATE_FILE = "eve_sha_scheduler.json"
INDEX_KEY = "trial_index"
MODES = ("max", "min")
_TUNE_KEYS = {"done", "trial_id", "experiment_tag", "should_checkpoint", "__duplicate__", "experiment_id"}
STALL_SECONDS = 2.0  # how long every trial may wait with no new trial coming before the cohort closes


def _write_json_atomically(value: Any, path: Path, scratch: Path | None = None) -> None:
    """Write ``value`` as JSON to ``path`` through a temporary file in ``scratch`` (default: ``path``'s
    folder; it must be on the same file system), renamed over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent if scratch is None else scratch, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(value, handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_scheduler_state(experiment_path: str | os.PathLike) -> dict[str, Any]:
    """The scheduler state a run saved under ``experiment_path`` (Tune's experiment folder on local
    storage): ``{"cohorts": [RungLedger.state_dict(), ...], "ledger": the first cohort's, "closed":
    [...], "partial": [...], "early": ..., "trials": {trial_id: tag}, "time_attr": ..., "metric": ...}``.

    Args:
        experiment_path: the experiment's folder (``tuner.get_results().experiment_path``).

    Returns:
        The saved state, as parsed from its JSON file; ValueError when the folder holds none.

    Example:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / STATE_FILE).write_text(json.dumps({"cohorts": [], "metric": "accuracy"}))
        ...     load_scheduler_state(folder)["metric"]
        'accuracy'
        >>> load_scheduler_state("/nonexistent")
        Traceback (most recent call last):
        ...
        ValueError: Invalid experiment_path: '/nonexistent' (no eve_sha_scheduler.json there)
    """
    path = Path(experiment_path) / STATE_FILE
    if not path.exists():
        raise ValueError(f"Invalid experiment_path: {str(experiment_path)!r} (no {STATE_FILE} there)")
    return json.loads(path.read_text())


def _shown_keys(result: dict[str, Any]) -> str:
    """The keys a trainable reported, for an error message: its own first, then Tune's automatic ones."""
    own = sorted(k for k in result if k not in AUTO_RESULT_KEYS and k not in _TUNE_KEYS and not k.startswith("config/"))
    return f"{', '.join(own) or 'nothing of its own'} (and Tune's training_iteration, time_total_s, ...)"


class SynchronousSHAWarning(UserWarning):
    """A run of :class:`SynchronousSHAScheduler` that is not the successive halving it was asked for:
    a rung decided with part of its cohort, a trial that restarted instead of resuming, a trial that
    ended before its rung. Each kind is issued once per run."""


class _Slots:
    """One concurrency limit of the search algorithm: the set of trial ids it counts as live and
    its maximum (a ``ConcurrencyLimiter``, or a ``BasicVariantGenerator`` with ``max_concurrent``,
    which is how ``TuneConfig(max_concurrent_trials=...)`` reaches it)."""

    def __init__(self, owner: Any, live: str, limit: str) -> None:
        self.owner, self._live, self._limit = owner, live, limit

    @property
    def live(self) -> set[str]:
        return getattr(self.owner, self._live)

    @property
    def limit(self) -> int:
        return int(getattr(self.owner, self._limit))


class SynchronousSHAScheduler(FIFOScheduler):
    """Synchronous successive halving for Ray Tune: pause at each rung, decide when the cohort is in,
    stop the losers, resume the winners from their checkpoints.

    A drop-in for ``ASHAScheduler`` in an existing script: it takes ASHA's ``time_attr``,
    ``grace_period``, ``reduction_factor`` and ``max_t``, and its defaults suit a script that reports
    once per epoch or iteration. Unlike ASHA it pauses a trial at each rung, so a function trainable
    must resume from ``tune.get_checkpoint()`` (a trial that comes back below its rung restarted from
    scratch: the scheduler warns once) and a class ``Trainable`` needs ``save_checkpoint`` and
    ``load_checkpoint``.

    A step is one unit of ``time_attr``. With the default ``"training_iteration"`` it is one
    ``tune.report(...)`` of a function trainable or one ``step()`` of a class ``Trainable`` (for most
    scripts an epoch); with ``time_attr="eval_cost"`` (what :class:`EveTrainable` reports) it is one
    evaluation unit of :class:`~eve_search.optim.budget.CostMeter`, and the rungs default to the paper's
    ``(100, 300, 900, 2700, 3000)``.

    Rungs: ``rungs=`` gives them explicitly; otherwise they grow geometrically from ``grace_period``
    by ``reduction_factor`` while below ``max_t``, and ``max_t`` is the last one (defaults 1, 3 and
    100: rungs 1, 3, 9, 27, 81, 100), where the survivors complete. The defaults are ASHA's
    ``grace_period`` and ``max_t``, so a script that swaps its scheduler keeps its horizon, and the
    paper's promoted third; a trial that ends before a rung is warned about. At each rung the best
    ``1 / reduction_factor`` of the cohort (``fraction``; ceil, at least one) go on.

    Cohorts: a rung is decided when every live trial of its cohort has reached it or ended.

    - By default the cohort is every trial of the run (the paper's search). A paused trial gives up
      its concurrency slot (``ConcurrencyLimiter``, ``TuneConfig(max_concurrent_trials=...)``), so a
      limit caps how many trials train at once, never the cohort; a promoted trial takes a slot back
      before it resumes, ahead of new trials.
    - ``cohort_size=n``: trials form cohorts of n in the order Tune creates them, each its own
      successive halving; the last one is decided with the trials it has when the search ends. It
      is required for an endless search (``num_samples=-1``, usually with ``time_budget_s``); there,
      and whenever the search algorithm has no concurrency limit of its own, at most n trials train
      at once, so that the promoted trials of a cohort resume before the next cohort's trials start.
    - When no new trial can start (the search algorithm suggests nothing while every trial of the
      cohort waits at the first rung, as a searcher with its own concurrency limit does), the
      cohort is closed after 2 seconds with the trials present, and decided.

    A cohort decided with fewer trials than it was meant to have is listed by
    :meth:`partial_cohorts` and in the saved state, with a warning (:class:`SynchronousSHAWarning`).
    Where no cohort can be defined the run stops at setup with one error, never a silent stall.

    Args:
        time_attr: the cumulative result key that counts steps; a trial reaches a rung when
            ``result[time_attr] >= rung``.
        rungs: cumulative budgets in steps, whole numbers, strictly increasing (instead of
            ``grace_period``/``max_t``).
        fraction: the promoted share of each rung, in (0, 1]; the same as ``1 / reduction_factor``.
        metric, mode: the ranked result key and ``"max"``/``"min"``; from here or from
            ``tune.TuneConfig(metric=..., mode=...)``, as with Ray's own schedulers.
        grace_period: the first rung, in steps (default 1).
        reduction_factor: the growth of the rungs and the inverse of the promoted share (default 3).
        max_t: the last rung, in steps (default 100, as ASHA's).
        cohort_size: the number of trials in a cohort (default: every trial of the run).

    Example (needs Ray and starts a local Ray instance, so not run as a doctest):
        >>> from ray import tune  # doctest: +SKIP
        >>> scheduler = SynchronousSHAScheduler(grace_period=1, reduction_factor=3, max_t=27)  # doctest: +SKIP
        >>> tuner = tune.Tuner(train_fn, tune_config=tune.TuneConfig(  # doctest: +SKIP
        ...     metric="accuracy", mode="max", num_samples=27, scheduler=scheduler))
        >>> results = tuner.fit()  # doctest: +SKIP
    """

    _supports_buffered_results = False

    def __init__(self, time_attr: str = "training_iteration", rungs: Sequence[int] | None = None,
                 fraction: float | None = None, metric: str | None = None, mode: str | None = None, *,
                 grace_period: int | None = None, reduction_factor: float | None = None,
                 max_t: int | None = None, cohort_size: int | None = None) -> None:
        super().__init__()
        if not isinstance(time_attr, str) or not time_attr:
            raise ValueError(f"Invalid time_attr: {time_attr!r} (expected a result key)")
        if metric is not None and (not isinstance(metric, str) or not metric):
            raise ValueError(f"Invalid metric: {metric!r} (expected a result key)")
        if mode is not None and mode not in MODES:
            raise ValueError(f"Invalid mode: {mode!r} (expected 'max' or 'min')")
        if cohort_size is not None and (isinstance(cohort_size, bool) or not isinstance(cohort_size, int)
                                        or cohort_size < 2):
            raise ValueError(f"Invalid cohort_size: {cohort_size!r} (expected a whole number of trials, at least 2)")
        if reduction_factor is not None and (isinstance(reduction_factor, bool)
                                             or not isinstance(reduction_factor, (int, float))
                                             or not math.isfinite(reduction_factor) or reduction_factor <= 1):
            raise ValueError(f"Invalid reduction_factor: {reduction_factor!r} (expected a number above 1)")
        if fraction is not None:
            fraction = check_fraction(fraction)
            if reduction_factor is not None and not math.isclose(fraction, 1 / reduction_factor):
                raise ValueError(f"Invalid fraction: {fraction!r} (expected 1 / reduction_factor = "
                                 f"{1 / reduction_factor:.4g}, or only one of the two)")
        elif reduction_factor is not None:
            fraction = 1 / reduction_factor
        else:
            fraction = PROMOTED_FRACTION
        for name, value in (("grace_period", grace_period), ("max_t", max_t)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value != int(value) or value <= 0):
                raise ValueError(f"Invalid {name}: {value!r} (expected a positive whole number of steps)")
        if rungs is not None:
            if grace_period is not None or max_t is not None:
                raise ValueError(f"Invalid rungs: {rungs!r} (expected either rungs=... or grace_period/max_t, "
                                 "not both)")
            self._rungs = check_rungs(rungs)
        elif time_attr == "eval_cost" and grace_period is None and max_t is None:
            self._rungs = check_rungs(DEFAULT_RUNGS)  # the paper's rungs, in its cost units
        else:
            first = 1 if grace_period is None else int(grace_period)
            last = 100 if max_t is None else int(max_t)
            if last < first:
                raise ValueError(f"Invalid max_t: {max_t!r} (expected at least grace_period, {first})")
            factor = reduction_factor if reduction_factor is not None else 1 / fraction
            if factor <= 1:
                raise ValueError(f"Invalid fraction: {fraction!r} (rungs from grace_period and max_t need a "
                                 "reduction_factor above 1: pass rungs=... with fraction=1)")
            self._rungs = rungs_from_geometric(first, last, factor)
        self._time_attr = time_attr
        self._fraction = check_fraction(fraction)
        self._metric = metric
        self._mode = mode
        self._cohort_size = cohort_size
        self._reset()

    def _reset(self) -> None:
        self._cohorts: list[RungLedger] = []
        self._closed: list[bool] = []  # per cohort: no trial joins it any more (its first rung can be decided)
        self._cohort_of: dict[str, int] = {}
        self._partial: list[dict[str, Any]] = []  # cohorts decided with fewer trials than meant
        self._early: dict[str, float] = {}  # first-rung scores held until the trial's cohort is closed
        self._tags: dict[str, str] = {}  # trial id -> Tune's experiment tag (for people reading the state)
        self._trials: dict[str, TuneTrial] = {}
        self._hold: set[str] = set()  # restored trials to park as PAUSED before they start
        self._recovering: set[str] = set()
        self._idle: set[str] = set()  # trials left RUNNING without work on their actor (NOOP)
        self._served: set[str] = set()  # pending trials an idle actor was freed for
        self._stopping: set[str] = set()  # trials given a slot back only so that the searcher hears they end
        self._in_stop: set[str] = set()  # trials whose stop_trial call is under way
        self._paused: set[str] = set()  # trials paused at a rung that have not reported since
        self._warned: set[str] = set()
        self._done: set[int] = set()  # cohorts decided to the end whose trials have all ended
        self._results_seen = False
        self._capped = False
        self._stall_since: float | None = None
        self._stuck_since: float | None = None
        self._state_path: Path | None = None
        self._version = 0  # bumped whenever a ledger, a cohort or the held scores change
        self._saved: tuple[Path | None, int] = (None, -1)  # the state last written
        self._cached: tuple[int, dict[str, str]] = (-1, {})

    # Properties -----------------------------------------------------------------------------------

    @property
    def rungs(self) -> tuple[int, ...]:
        return self._rungs

    @property
    def fraction(self) -> float:
        return self._fraction

    @property
    def reduction_factor(self) -> float:
        return 1 / self._fraction

    @property
    def mode(self) -> str | None:
        return self._mode

    @property
    def metric(self) -> str | None:
        return self._metric

    @property
    def time_attr(self) -> str:
        return self._time_attr

    @property
    def cohort_size(self) -> int | None:
        return self._cohort_size

    @property
    def ledger(self) -> RungLedger | None:
        """The rung ledger of the first cohort (trial ids as keys); None before the first trial."""
        return self._cohorts[0] if self._cohorts else None

    @property
    def ledgers(self) -> list[RungLedger]:
        """One rung ledger per cohort, in the order the cohorts formed."""
        return list(self._cohorts)

    def decisions(self) -> list[RungDecision]:
        """Every rung decided so far (trial ids), cohort after cohort."""
        return [d for ledger in self._cohorts for d in ledger.decisions()]

    def partial_cohorts(self) -> list[dict[str, Any]]:
        """The cohorts decided with fewer trials than they were meant to have: ``{"cohort": index,
        "trials": how many it had, "reason": why it closed}``."""
        return [dict(p) for p in self._partial]

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        if self._metric and metric and metric != self._metric:
            return False
        if self._mode and mode and mode != self._mode:
            return False
        if mode is not None and mode not in MODES:
            raise ValueError(f"Invalid mode: {mode!r} (expected 'max' or 'min')")
        self._metric = metric or self._metric
        self._mode = mode or self._mode
        self._check_metric_and_mode()
        samples = spec.get("num_samples")
        if self._cohort_size is None and isinstance(samples, int) and samples >= sys.maxsize:
            raise ValueError("Invalid cohort_size: None (num_samples=-1 is an endless search, so a cohort of "
                             "every trial would never be complete: pass SynchronousSHAScheduler(cohort_size=...), "
                             "e.g. 27)")
        return True

    def _check_metric_and_mode(self) -> None:
        if self._metric is None:
            raise ValueError("Invalid metric: None (expected SynchronousSHAScheduler(metric=...) or "
                             "tune.TuneConfig(metric=...))")
        if self._mode is None:
            raise ValueError("Invalid mode: None (expected SynchronousSHAScheduler(mode=...) or "
                             "tune.TuneConfig(mode=...), 'max' or 'min')")

    def _warn(self, kind: str, message: str) -> None:
        if kind in self._warned:
            return
        self._warned.add(kind)
        logger.warning("SynchronousSHAScheduler: %s", message)
        warnings.warn(message, SynchronousSHAWarning, stacklevel=2)

    # State on disk --------------------------------------------------------------------------------

    def _open(self, trial: TuneTrial) -> None:
        """Load the state a previous driver saved in ``trial``'s experiment (``Tuner.restore``), once."""
        self._check_metric_and_mode()
        path = Path(trial.storage.experiment_driver_staging_path) / STATE_FILE
        if self._state_path == path:
            return
        self._reset()
        self._state_path = path
        if not path.exists():
            return
        state = json.loads(path.read_text())
        if state.get("time_attr") != self._time_attr or state.get("metric") != self._metric:
            raise ValueError(f"Invalid scheduler: time_attr {self._time_attr!r} and metric {self._metric!r} "
                             f"differ from the restored run's ({state.get('time_attr')!r}, {state.get('metric')!r})")
        self._load(state)
        logger.info("SynchronousSHAScheduler: restored %d cohorts, %d trials, %d rungs decided, from %s",
                    len(self._cohorts), len(self._cohort_of), len(self.decisions()), path)

    def _state(self) -> dict[str, Any]:
        cohorts = [ledger.state_dict() for ledger in self._cohorts]
        return {"time_attr": self._time_attr, "metric": self._metric, "rungs": list(self._rungs),
                "cohort_size": self._cohort_size, "ledger": cohorts[0] if cohorts else None, "cohorts": cohorts,
                "closed": list(self._closed), "partial": self._partial, "early": self._early,
                "trials": self._tags}

    def _load(self, state: dict[str, Any]) -> None:
        cohorts = state.get("cohorts")
        if cohorts is None:  # a single-cohort state (written before cohorts existed)
            cohorts = [] if state.get("ledger") is None else [state["ledger"]]
        self._cohorts, self._cohort_of, self._done = [], {}, set()
        for index, saved in enumerate(cohorts):
            ledger = RungLedger(self._rungs, self._fraction, self._mode or "max")
            ledger.load_state_dict(saved)
            self._cohorts.append(ledger)
            self._cohort_of.update({str(t): index for t in ledger.members})
        self._early = {str(k): float(v) for k, v in state.get("early", {}).items()}
        closed = state.get("closed")
        if closed is None:  # a single cohort: closed once its first rung has every score
            closed = [not any(t in self._early for t in ledger.members) for ledger in self._cohorts]
        self._closed = [bool(c) for c in closed]
        self._partial = [dict(p) for p in state.get("partial", [])]
        self._tags = dict(state.get("trials", {}))
        self._version += 1

    def _save(self) -> None:
        if self._state_path is None or self._saved == (self._state_path, self._version):
            return
        # The temporary file goes beside Tune's driver staging folder, not in it: Tune copies that folder
        # to storage from another thread, and a temporary file it listed and that is renamed before
        # it is copied fails the whole copy, with a traceback on the terminal.
        _write_json_atomically(self._state(), self._state_path, scratch=self._state_path.parent.parent)
        self._saved = (self._state_path, self._version)

    # Cohorts ----------------------------------------------------------------------------------------

    def _open_cohort(self) -> int | None:
        """The cohort new trials join (None: the next trial starts a new one)."""
        return len(self._cohorts) - 1 if self._cohorts and not self._closed[-1] else None

    def _ledger_of(self, trial_id: str) -> RungLedger:
        return self._cohorts[self._cohort_of[trial_id]]

    def _members(self) -> list[str]:
        """The trials of every cohort still under way (a finished cohort whose trials all ended is
        skipped: an endless search piles them up)."""
        out: list[str] = []
        for index, ledger in enumerate(self._cohorts):
            if index in self._done:
                continue
            members = ledger.members
            if self._closed[index] and ledger.finished and all(
                    t in self._trials and self._trials[t].status in (TuneTrial.TERMINATED, TuneTrial.ERROR)
                    for t in members):
                self._done.add(index)
                continue
            out.extend(members)
        return out

    def _join(self, trial_id: str) -> None:
        index = self._open_cohort()
        if index is None:
            self._cohorts.append(RungLedger(self._rungs, self._fraction, self._mode or "max"))
            self._closed.append(False)
            index = len(self._cohorts) - 1
        self._cohorts[index].add(trial_id)
        self._cohort_of[trial_id] = index
        self._version += 1
        if self._cohort_size is not None and len(self._cohorts[index].members) >= self._cohort_size:
            self._close(index)

    def _close(self, index: int, reason: str | None = None) -> None:
        """No trial joins cohort ``index`` any more: its held first-rung scores go to its ledger."""
        self._closed[index] = True
        ledger = self._cohorts[index]
        first = set(ledger.cohort(0))
        for trial_id in ledger.members:  # joining order
            if trial_id in self._early:
                score = self._early.pop(trial_id)
                if trial_id in first:
                    ledger.report(trial_id, 0, score)
        self._version += 1
        if reason is not None:
            size = len(ledger.members)
            self._partial.append({"cohort": index, "trials": size, "reason": reason})
            self._warn(f"partial:{reason.split(' ')[0]}",
                       f"cohort {index} is decided with {size} trial{'s' if size != 1 else ''}: {reason}")

    def _searcher_finished(self, tune_controller: Any) -> bool:
        try:
            return bool(tune_controller.search_alg.is_finished())
        except AttributeError:  # an older controller without the property: assume the trials are in
            return True

    def _close_if_search_ended(self, tune_controller: Any) -> bool:
        index = self._open_cohort()
        if index is None or not self._searcher_finished(tune_controller):
            return False
        size = len(self._cohorts[index].members)
        reason = None
        if self._cohort_size is not None and size < self._cohort_size:
            reason = f"the search ended with {size} of its {self._cohort_size} trials (the last cohort)"
        elif self._cohort_size is None and index > 0:
            reason = "the search ended (the trials that came after the previous cohort closed)"
        self._close(index, reason)
        return True

    # Concurrency slots ------------------------------------------------------------------------------

    def _slots(self, tune_controller: Any) -> list[_Slots]:
        """The search algorithm's concurrency limits that count trials by id (a paused trial's slot
        can be given back). A limit this cannot see (a searcher's own) is handled as a stall."""
        found: list[_Slots] = []
        alg = getattr(tune_controller, "search_alg", None)
        if isinstance(alg, BasicVariantGenerator):
            if alg.max_concurrent > 0:
                found.append(_Slots(alg, "_live_trials", "max_concurrent"))
            return found
        searcher = getattr(alg, "searcher", None)
        for _ in range(16):  # wrappers of wrappers
            if searcher is None:
                break
            if isinstance(searcher, ConcurrencyLimiter) and getattr(searcher, "_limit_concurrency", True) \
                    and not searcher.batch:
                found.append(_Slots(searcher, "live_trials", "max_concurrent"))
            searcher = getattr(searcher, "searcher", None)
        return found

    def _cap(self, tune_controller: Any) -> None:
        """With cohorts of ``cohort_size`` and a search without a limit, at most ``cohort_size`` trials
        train at once: the promoted trials of a cohort then resume before the next cohort starts."""
        if self._capped:
            return
        self._capped = True
        alg = getattr(tune_controller, "search_alg", None)
        if self._cohort_size is not None and isinstance(alg, BasicVariantGenerator) and alg.max_concurrent == 0:
            alg.max_concurrent = self._cohort_size
            logger.info("SynchronousSHAScheduler: at most %d trials (cohort_size) train at once", self._cohort_size)

    def _holds_slot(self, tune_controller: Any, trial_id: str) -> bool:
        return all(trial_id in slots.live for slots in self._slots(tune_controller))

    def _release(self, tune_controller: Any, trial_id: str) -> None:
        """A trial that waits (paused, or idle on its actor) gives its slot back, first to a promoted
        trial waiting for one, else to the search algorithm's next trial."""
        for slots in self._slots(tune_controller):
            slots.live.discard(trial_id)
        self._grant(tune_controller)

    def _claim(self, tune_controller: Any, trial_id: str) -> bool:
        """Take a slot for ``trial_id`` (True), or say there is none free (False)."""
        limits = self._slots(tune_controller)
        for slots in limits:  # a trial that ended without the limit hearing of it holds no slot
            slots.live.difference_update([t for t in slots.live if t in self._trials and self._trials[t].status
                                          in (TuneTrial.TERMINATED, TuneTrial.ERROR) and t not in self._in_stop
                                          and t not in self._recovering])
        missing = [s for s in limits if trial_id not in s.live]
        if any(len(s.live) >= s.limit for s in missing):
            return False
        for slots in missing:
            slots.live.add(trial_id)
        return True

    def _stop(self, tune_controller: Any, trial: TuneTrial) -> None:
        """Stop a paused or idle trial; its slot comes back first, so that the search algorithm hears
        that it ended (a ``ConcurrencyLimiter`` only passes on the trials it counts)."""
        if trial.trial_id in self._in_stop:  # Tune calls back into the scheduler while it stops a trial
            return
        if not self._holds_slot(tune_controller, trial.trial_id):
            for slots in self._slots(tune_controller):
                slots.live.add(trial.trial_id)
            self._stopping.add(trial.trial_id)
        self._in_stop.add(trial.trial_id)
        try:
            tune_controller.stop_trial(trial)
        finally:
            self._in_stop.discard(trial.trial_id)

    def _hand_over(self, tune_controller: Any, trial_id: str) -> None:
        """``trial_id`` ends holding a slot (Tune frees it after this callback): a promoted trial
        waiting for a slot takes it now, ahead of the search algorithm's next trial."""
        if trial_id in self._stopping:
            self._stopping.discard(trial_id)
            return
        limits = self._slots(tune_controller)
        if not limits or not all(trial_id in s.live for s in limits):
            return
        for winner in self._waiting_winners():
            if not self._holds_slot(tune_controller, winner.trial_id):
                for slots in limits:
                    slots.live.add(winner.trial_id)
                return

    def _grant(self, tune_controller: Any) -> None:
        for winner in self._waiting_winners():
            if not self._holds_slot(tune_controller, winner.trial_id) and not self._claim(tune_controller,
                                                                                        winner.trial_id):
                return

    # Feeding the ledgers ----------------------------------------------------------------------------

    def _record(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any], fresh: bool = True) -> None:
        """Report every rung that ``result`` reaches and the ledger expects from this trial (``fresh``:
        a new result, not the last one repeated when the trial ends)."""
        trial_id = trial.trial_id
        shown = _shown_keys(result)
        if self._time_attr not in result:
            raise ValueError(f"Invalid result: trial {trial_id} reported no {self._time_attr!r} (the scheduler's "
                             f"time_attr); it reported: {shown}")
        if not self._results_seen and self._metric not in result:
            raise ValueError(f"Invalid result: trial {trial_id} reported no {self._metric!r} (the metric); it "
                             f"reported: {shown}")
        self._results_seen = True
        elapsed = float(result[self._time_attr])
        ledger = self._ledger_of(trial_id)
        reached = self._reached(trial_id)
        # The first result after a pause must lie past the rung the trial had reached; at or below
        # it, the trainable began from scratch.
        if fresh and trial_id in self._paused:
            self._paused.discard(trial_id)
            restarted = result.get("iterations_since_restore") == 1 and not result.get("done")
        else:
            restarted = False
        if restarted and elapsed <= reached:
            self._warn("restart", f"trial {trial_id} came back at {self._time_attr}={elapsed:g} after a pause at "
                                  f"rung {reached}: it started over instead of resuming. In a function "
                                  "trainable, resume from tune.get_checkpoint() and report checkpoints with "
                                  "tune.report(metrics, checkpoint=...); a class Trainable needs save_checkpoint "
                                  "and load_checkpoint")
        closed = self._closed[self._cohort_of[trial_id]]
        while True:
            if trial_id in self._early:
                return
            rung = ledger.next_rung(trial_id)
            if rung is None or elapsed < self._rungs[rung]:
                return
            if self._metric not in result:
                raise ValueError(f"Invalid result: trial {trial_id} reached rung {self._rungs[rung]} "
                                 f"({self._time_attr}={elapsed:g}) without the metric {self._metric!r}; it "
                                 f"reported: {shown}")
            score = float(result[self._metric])
            if rung == 0 and not closed:
                self._early[trial_id] = score
                self._version += 1
                return
            ledger.report(trial_id, rung, score)
            self._version += 1

    def _leave(self, trial_id: str) -> None:
        """``trial_id`` ended or failed for good: it leaves every rung not yet decided."""
        self._early.pop(trial_id, None)
        self._ledger_of(trial_id).fail(trial_id)
        self._version += 1

    def _status(self, trial_id: str) -> str:
        """The ledger's status of a trial ("wait" while its first-rung score is held), computed once
        per change of the ledgers: Tune asks for it on every step."""
        if self._cached[0] != self._version:
            self._cached = (self._version, {})
        statuses = self._cached[1]
        if trial_id not in statuses:
            statuses[trial_id] = "wait" if trial_id in self._early else self._ledger_of(trial_id).status(trial_id)
        return statuses[trial_id]

    def _reached(self, trial_id: str) -> int:
        """The budget of the highest rung this trial has reported (0: none)."""
        if trial_id in self._early:
            return self._rungs[0]
        ledger = self._ledger_of(trial_id)
        reported = [self._rungs[k] for k in range(len(self._rungs)) if ledger.score(trial_id, k) is not None]
        return max(reported, default=0)

    def _waiting_winners(self) -> list[TuneTrial]:
        """Promoted trials without work: paused, or idle on their actor; the oldest cohort first."""
        return [self._trials[tid] for tid in self._members()
                if tid in self._trials and self._status(tid) == "train" and tid not in self._hold
                and (self._trials[tid].status == TuneTrial.PAUSED
                     or (tid in self._idle and self._trials[tid].status == TuneTrial.RUNNING))]

    def _paused_winners(self, tune_controller: Any) -> list[TuneTrial]:
        """Paused promoted trials that may resume now (they hold a concurrency slot, or there is none)."""
        self._grant(tune_controller)
        return [t for t in self._waiting_winners()
                if t.status == TuneTrial.PAUSED and self._holds_slot(tune_controller, t.trial_id)]

    def _runnable(self, tune_controller: Any, exclude: TuneTrial) -> bool:
        """Whether another trial could use ``exclude``'s actor now: a paused winner, or a pending trial
        that the actors Tune already holds free for reuse will not serve.

        Pausing a trial when every pending trial has a free actor waiting leaves one actor too many in
        Tune's cache, and Tune ends it at its next step. At the end of the first rung that took one of
        the demo sweep's two actors; Tune then started replacement actors (2 s each to import PyTorch)
        that never trained, and the other rungs ran on one actor (14-21 s instead of 10-12 s).
        """
        return bool(self._paused_winners(tune_controller) or self._needing_actors(tune_controller, exclude))

    def _needing_actors(self, tune_controller: Any, exclude: TuneTrial | None = None) -> list[TuneTrial]:
        """Pending trials (but ``exclude``) that no actor Tune already holds free will serve: not parked,
        not being handed a cached actor already (Tune's ``_resetting_trials``), and beyond as many as
        there are free actors: those in Tune's cache, and those of trials told to pause whose checkpoint
        is still being saved (a pause frees the actor only then). Trials already promised an idle
        trial's actor (``_served``) are the first ones those actors serve."""
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        resetting = getattr(controller, "_resetting_trials", ())
        trials = tune_controller.get_trials()
        pending = [t for t in trials if t is not exclude and t.status == TuneTrial.PENDING
                   and t.trial_id not in self._hold and t not in resetting]
        pending.sort(key=lambda t: t.trial_id not in self._served)
        cached = getattr(getattr(controller, "_actor_cache", None), "num_cached_objects", 0)
        freeing = sum(1 for t in trials if t is not exclude and t.trial_id in self._paused
                      and t.status == TuneTrial.RUNNING and t.is_saving)
        return pending[(cached if isinstance(cached, int) else 0) + freeing:]

    def _handovers(self, tune_controller: Any) -> list[tuple[TuneTrial, str]]:
        """(pending trial, idle trial) pairs: each pending trial that no free actor will serve takes the
        actor of a trial idle on one, losers first, then trials that wait for their rung or for a slot.

        A pending trial that Tune is already handing a cached actor must not count: an idle trial
        paused for it would leave its actor one too many, Tune would end it, and the next rungs would
        start replacement actors (2 s each) that never train, and run on one actor.
        """
        needers = [t for t in self._needing_actors(tune_controller) if t.trial_id not in self._served]
        order = {"wait": 1, "train": 2}  # losers first, then trials that wait for their rung or for a slot
        idle = sorted((tid for tid in self._idle
                       if self._status(tid) != "train" or not self._holds_slot(tune_controller, tid)),
                      key=lambda tid: order.get(self._status(tid), 0))
        return list(zip(needers, idle))

    def _act(self, tune_controller: Any, current: TuneTrial | None = None) -> None:
        """Carry out the ledgers' decisions on every trial but ``current`` (it gets the return value)."""
        for trial_id in self._members():
            trial = self._trials.get(trial_id)
            if trial is None or trial is current:
                continue
            status = self._status(trial_id)
            if trial_id in self._idle:
                if trial.status != TuneTrial.RUNNING:
                    self._idle.discard(trial_id)
                elif status == "train":
                    if self._holds_slot(tune_controller, trial_id) or self._claim(tune_controller, trial_id):
                        self._idle.discard(trial_id)
                        self._resume(tune_controller, trial)
                elif status != "wait" and not self._paused_winners(tune_controller):
                    self._idle.discard(trial_id)
                    self._stop(tune_controller, trial)
                continue
            if status in ("stopped", "complete", "failed"):
                parked = trial.status == TuneTrial.PAUSED or trial.is_saving
                if parked or (trial.status == TuneTrial.PENDING and trial_id in self._hold):
                    self._hold.discard(trial_id)
                    self._stop(tune_controller, trial)

    @staticmethod
    def _resume(tune_controller: Any, trial: TuneTrial) -> None:
        """Train an idle trial (its actor kept its state) on to its next rung."""
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        train = getattr(controller, "_schedule_trial_train", None)
        if train is not None:
            train(trial)
        else:  # a controller without the hook: checkpoint, pause, and let choose_trial_to_run resume it
            tune_controller.pause_trial(trial)

    def _action(self, tune_controller: Any, trial: TuneTrial) -> str:
        """What ``trial`` does after its result. A trial that must wait (or has lost) while no other
        trial could take its actor stays idle on it (NOOP) rather than pausing: Tune would otherwise
        shut the actor down, and the next trial would pay a new one's start-up (seconds: a Python
        process importing torch) for a fraction of a second of training. Either way it gives its
        concurrency slot back."""
        status = self._status(trial.trial_id)
        if status == "train":
            return TrialScheduler.CONTINUE
        if status == "wait":
            if self._ledger_of(trial.trial_id).score(trial.trial_id, len(self._rungs) - 1) is not None:
                return TrialScheduler.STOP  # complete at the last rung: nothing to wait for
            self._release(tune_controller, trial.trial_id)
            if self._runnable(tune_controller, trial):
                self._paused.add(trial.trial_id)
                return TrialScheduler.PAUSE
            self._idle.add(trial.trial_id)
            return TrialScheduler.NOOP
        if self._paused_winners(tune_controller):  # hand its actor to a winner waiting for one
            self._release(tune_controller, trial.trial_id)
            self._idle.add(trial.trial_id)
            return TrialScheduler.NOOP
        return TrialScheduler.STOP

    def _ended_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """Warn (once) about a trial that ended on its own before its next rung."""
        if not result or self._time_attr not in result:
            return
        elapsed = float(result[self._time_attr])
        rung = self._ledger_of(trial_id).next_rung(trial_id)
        if trial_id in self._early or rung is None or elapsed >= self._rungs[rung]:
            return
        if rung == 0:
            self._warn("first-rung", f"trial {trial_id} ended at {self._time_attr}={elapsed:g}, before the first "
                                     f"rung ({self._rungs[0]}), so successive halving never applied to it: use "
                                     "a grace_period (or first rung) that trials reach, in the steps time_attr "
                                     "counts")
        else:
            self._warn("later-rung", f"trial {trial_id} ended at {self._time_attr}={elapsed:g}, before rung "
                                     f"{self._rungs[rung]}, and left the cohort: set max_t (the last rung) to "
                                     "the length of a trial")

    # Tune's callbacks ---------------------------------------------------------------------------------

    def on_trial_add(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._open(trial)
        self._cap(tune_controller)
        trial_id = trial.trial_id
        self._trials[trial_id] = trial
        recovering = trial_id in self._recovering
        self._recovering.discard(trial_id)
        if trial_id not in self._cohort_of:
            self._join(trial_id)
            self._tags[trial_id] = str(trial.experiment_tag)
            self._save()
            return
        # A trial the ledger knows: restored by Tuner.restore, or requeued after its actor failed. It
        # restarts from its latest checkpoint; if that already holds every rung it reported, and it
        # must wait or stop, it is parked instead of training past its rung.
        if trial.status not in (TuneTrial.PENDING, TuneTrial.PAUSED):
            return
        checkpoint = trial.latest_checkpoint_result
        restored = float(checkpoint.metrics.get(self._time_attr, 0.0)) if checkpoint is not None else 0.0
        if self._status(trial_id) != "train" and restored >= self._reached(trial_id):
            self._hold.add(trial_id)
        elif recovering:
            logger.info("SynchronousSHAScheduler: trial %s rejoins its rung from %s=%g", trial_id,
                        self._time_attr, restored)

    def on_trial_result(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> str:
        self._open(trial)
        self._record(tune_controller, trial, result)
        self._close_if_search_ended(tune_controller)
        self._act(tune_controller, current=trial)
        action = self._action(tune_controller, trial)
        self._save()
        return action

    def on_trial_complete(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> None:
        self._open(trial)
        trial_id = trial.trial_id
        if trial_id not in self._cohort_of:
            return
        if result and self._time_attr in result:
            self._record(tune_controller, trial, result, fresh=False)
            self._close_if_search_ended(tune_controller)
        status = self._status(trial_id)
        # A trial that ends on its own (done, or a Tune stopper) before its rung leaves the cohort; one
        # that ended at the last rung keeps its place there.
        last_rung_reported = self._ledger_of(trial_id).score(trial_id, len(self._rungs) - 1) is not None
        if status == "train" or (status == "wait" and not last_rung_reported):
            self._ended_early(trial_id, result)
            self._leave(trial_id)
        self._idle.discard(trial_id)
        self._hand_over(tune_controller, trial_id)
        self._act(tune_controller, current=trial)
        self._save()

    def on_trial_remove(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._open(trial)
        trial_id = trial.trial_id
        if trial_id not in self._cohort_of:
            return
        self._hand_over(tune_controller, trial_id)
        if self._status(trial_id) in ("train", "wait"):  # stopped by someone else
            self._leave(trial_id)
            self._act(tune_controller, current=trial)
            self._save()

    def on_trial_error(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._open(trial)
        trial_id = trial.trial_id
        if trial_id not in self._cohort_of:
            return
        if trial.status == TuneTrial.ERROR and trial.should_recover():
            # Tune is requeueing it (FailureConfig(max_failures)): it restores from its last checkpoint
            # and is added again.
            self._recovering.add(trial_id)
            return
        if self._status(trial_id) in ("train", "wait"):
            self._leave(trial_id)
        self._idle.discard(trial_id)
        self._hand_over(tune_controller, trial_id)
        self._act(tune_controller, current=trial)
        self._save()

    def _busy(self, trials: list[TuneTrial]) -> bool:
        """Whether some trial is training or about to (so the run moves on without a new trial)."""
        for trial in trials:
            if trial.trial_id in self._hold:
                continue
            if trial.status == TuneTrial.PENDING:
                return True
            if trial.status == TuneTrial.RUNNING and (trial.trial_id not in self._idle
                                                      or self._status(trial.trial_id) == "train"):
                return True
            if trial.status == TuneTrial.PAUSED and trial.trial_id in self._cohort_of \
                    and self._status(trial.trial_id) == "train":
                return True
        return False

    def _check_progress(self, tune_controller: Any, trials: list[TuneTrial]) -> bool:
        """Close the open cohort when no new trial can start, and fail loudly rather than wait
        forever: True when a cohort was closed."""
        now = time.monotonic()
        if self._busy(trials):
            self._stall_since = self._stuck_since = None
            return False
        index = self._open_cohort()
        if index is not None and not self._searcher_finished(tune_controller):
            self._stuck_since = None
            if not any(t in self._early for t in self._cohorts[index].members):
                self._stall_since = None
                return False
            if self._stall_since is None:
                self._stall_since = now
                return False
            if now - self._stall_since < STALL_SECONDS:
                return False
            self._stall_since = None
            self._close(index, "no new trial could start (the search algorithm suggested none while every "
                               "trial of the cohort waited at the first rung)")
            return True
        waiting = [t.trial_id for t in trials if t.trial_id in self._cohort_of and self._status(t.trial_id) == "wait"
                   and t.status in (TuneTrial.PAUSED, TuneTrial.RUNNING)]
        if not waiting:
            self._stuck_since = None
            return False
        if self._stuck_since is None:
            self._stuck_since = now
        elif now - self._stuck_since >= STALL_SECONDS:
            raise RuntimeError(f"SynchronousSHAScheduler cannot go on: trials {', '.join(waiting[:5])} wait at "
                               f"their rung and no trial can train ({self.debug_string()})")
        return False

    def choose_trial_to_run(self, tune_controller: Any) -> TuneTrial | None:
        if not self._cohorts:
            return super().choose_trial_to_run(tune_controller)
        changed = self._close_if_search_ended(tune_controller)
        for trial_id in sorted(self._hold):
            trial = self._trials.get(trial_id)
            if trial is not None and trial.status == TuneTrial.PENDING:
                tune_controller._set_trial_status(trial, TuneTrial.PAUSED)
                if self._status(trial_id) == "wait":
                    self._hold.discard(trial_id)
            elif trial is None or trial.status != TuneTrial.PAUSED:
                self._hold.discard(trial_id)
        # A trial that ended without the ledger hearing of it (an error while pending, a requeue that
        # never came) leaves the cohort, so the others never wait for it.
        for trial_id in self._members():
            trial = self._trials.get(trial_id)
            if trial is None or trial.status not in (TuneTrial.TERMINATED, TuneTrial.ERROR):
                continue
            status = self._status(trial_id)
            if status == "train" or (status == "wait" and trial.status == TuneTrial.ERROR):
                self._leave(trial_id)
                changed = True
        trials = tune_controller.get_trials()
        for trial_id in list(self._served):
            if self._trials[trial_id].status != TuneTrial.PENDING:
                self._served.discard(trial_id)
        for trial_id in sorted(self._idle):
            if self._trials[trial_id].status != TuneTrial.RUNNING:
                self._idle.discard(trial_id)
        changed = self._check_progress(tune_controller, trials) or changed
        # A trial waiting for an actor takes an idle one's: stopping (a loser) or pausing (a trial that
        # waits for its rung) it while the other is staged lets Tune hand the actor over.
        for needer, trial_id in self._handovers(tune_controller):
            self._served.add(needer.trial_id)
            self._idle.discard(trial_id)
            if self._status(trial_id) in ("wait", "train"):
                self._paused.add(trial_id)
                tune_controller.pause_trial(self._trials[trial_id])
            else:
                self._stop(tune_controller, self._trials[trial_id])
        self._act(tune_controller)
        if changed:
            self._save()
        winners = self._paused_winners(tune_controller)  # an older cohort's promoted trials first
        if winners:
            return winners[0]
        for trial in trials:
            if trial.status == TuneTrial.PENDING and trial.trial_id not in self._hold \
                    and not self._actor_starting(tune_controller, trial):
                return trial
        return None

    @staticmethod
    def _actor_starting(tune_controller: Any, trial: TuneTrial) -> bool:
        """Whether Tune is constructing an actor for ``trial`` now (granted its resources, not ready yet).

        Such a trial is not chosen to run: Tune gives the trial it is told to run a free cached actor
        if it has one, and ends the actor it was constructing for it. When a sweep's first trial
        finished before the second actor was ready, Tune ended that actor, then each replacement in
        turn (each 2-4 s to start, and the first trial's actor was free again every fraction of a
        second), and the whole sweep ran on one actor (14-18 s for the demo sweep instead of 9-10).
        """
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        actor = getattr(controller, "_trial_to_actor", {}).get(trial)
        manager = getattr(controller, "_actor_manager", None)
        if actor is None or manager is None:
            return False
        try:
            return bool(manager.is_actor_started(actor)) and actor not in controller._started_actors
        except (AttributeError, TypeError):  # another Tune: choose as before
            return False

    def debug_string(self) -> str:
        if not self._cohorts:
            return "Using synchronous successive halving (no trials yet)."
        shown = []
        for index, ledger in enumerate(self._cohorts):
            parts = []
            for rung, budget in enumerate(self._rungs):
                cohort = ledger.cohort(rung)
                if not cohort and rung > 0:
                    break
                held = sum(1 for t in ledger.members if t in self._early) if rung == 0 else 0
                parts.append(f"{budget:g}: {len(ledger.scores(rung)) + held}/{len(cohort)}")
            shown.append(f"cohort {index}{'' if self._closed[index] else ' (open)'} {', '.join(parts)}")
        if len(shown) > 3:
            shown = [f"{len(shown) - 3} earlier cohorts", *shown[-3:]]
        return f"Synchronous SHA ({self._time_attr} rungs, reported/cohort): {'; '.join(shown)}"

    def save(self, checkpoint_path: str) -> None:
        _write_json_atomically(self._state(), Path(checkpoint_path))

    def restore(self, checkpoint_path: str) -> None:
        self._load(json.loads(Path(checkpoint_path).read_text()))


# The trainable ----------------------------------------------------------------------------------------


def config_index(config: dict[str, Any]) -> int:
    """A configuration's index for its seeds: ``config[INDEX_KEY]`` when the sweep gives one, else a
    stable hash of the configuration (the same configuration gets the same weights and batches).

    Args:
        config: a trial's configuration.

    Returns:
        An int in [0, 2**31).

    Example:
        >>> config_index({"lr": 1e-3, "width": 64, INDEX_KEY: 7})
        7
        >>> config_index({"lr": 1e-3, "width": 64}) == config_index({"width": 64, "lr": 1e-3})
        True
    """
    if INDEX_KEY in config:
        return int(config[INDEX_KEY])
    text = json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, default=repr)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF


# The best validation score this process has reported, per (owner, task, metric): test_metrics="best" reads it.
_BEST_REPORTED: dict[tuple[str, str, str], float] = {}


def _follow_ray_threads() -> None:
    """Run PyTorch on as many threads as Ray gave this actor CPUs.

    Ray says how many through ``OMP_NUM_THREADS``, set before the actor runs, but PyTorch reads it only
    when it is first imported: in a worker that imported PyTorch earlier (Ray's preloaded modules, a setup
    hook) every actor would run one thread per core. On the 2-core machine two such actors trained 15x
    slower than with one thread each.
    """
    import torch

    wanted = os.environ.get("OMP_NUM_THREADS", "")
    if wanted.isdigit() and int(wanted) > 0 and torch.get_num_threads() != int(wanted):
        torch.set_num_threads(int(wanted))


class EveTrainable(tune.Trainable):
    """A Ray Tune trainable over :class:`~eve_search.engine.trial.Trial`, for any registered task.

    Pass the settings with ``tune.with_parameters(EveTrainable, task=..., rungs=..., ...)``; the
    trial's ``config`` is the configuration (``lr``, ``weight_decay`` and the task's model keys).
    Schedule it with ``SynchronousSHAScheduler(time_attr="eval_cost", rungs=...)`` and the same rungs:
    each ``step()`` trains to the next rung, and ``eval_cost`` counts the evaluation units charged.

    The settings are keywords of ``setup`` (passed through ``tune.with_parameters``).

    Args:
        task: a :class:`~eve_search.tasks.Task` (it travels to the actor without its data) or a
            registered task name.
        optimizer: ``"eve"`` or a baseline name; ``seed``: the training seed.
        rungs: where ``step()`` stops: each step trains to the next rung budget.
        cost_mode: ``"calibrated"`` or ``"measured"`` (see :class:`~eve_search.optim.budget.CostMeter`).
        backward_ratio: one frozen backward/forward ratio for every configuration, or
            ``backward_ratios``: one per ``task.cost_key(config)`` (a sweep measures them once, before
            training); with neither, calibrated mode measures this trial's own ratio in ``setup``.
        data_dir: the task's data folder on the worker (None: its default data).
        owner: the sweep a checkpoint belongs to (a checkpoint of another sweep is refused).
        test_metrics: also report the task's metrics on the test split, as ``test`` (for a driver
            that records the test score of the best configuration): ``True`` with every result;
            ``"best"`` only with the results that can be the search's best or its winner (a
            validation score at least as good as every one this actor process has reported for the
            same ``owner``, and every result at the last rung), which always includes the best one
            whatever the order the actors finish in; ``False`` (default) never.

    The configuration's seeds come from ``config["trial_index"]`` when present (a sweep's
    configuration index; the key is not passed to the model), else from a hash of the configuration.

    Example (needs a Ray runtime and trains, so not run as a doctest; tests/integrations runs it):
        >>> from ray import tune  # doctest: +SKIP
        >>> from eve_search.integrations.ray import EveTrainable, SynchronousSHAScheduler
        >>> rungs = (100, 300)
        >>> tuner = tune.Tuner(  # doctest: +SKIP
        ...     tune.with_parameters(EveTrainable, task="adult", rungs=rungs, backward_ratio=2.0),
        ...     param_space={"lr": tune.loguniform(1e-4, 1e-2), "width": 64, "depth": 1},
        ...     tune_config=tune.TuneConfig(num_samples=6, scheduler=SynchronousSHAScheduler(
        ...         time_attr="eval_cost", rungs=rungs, metric="accuracy", mode="max")))
        >>> best = tuner.fit().get_best_result()  # doctest: +SKIP
    """

    def setup(self, config: dict[str, Any], task: Task | str = "adult", optimizer: str = "eve",
              rungs: Sequence[int] = DEFAULT_RUNGS, seed: int = 0, cost_mode: str = "calibrated",
              backward_ratio: float | None = None, backward_ratios: dict[str, float] | None = None,
              data_dir: str | None = None, owner: str = "", test_metrics: bool | str = False) -> None:
        from eve_search.tasks import get_task

        if test_metrics not in (True, False, "best"):
            raise ValueError(f"Invalid test_metrics: {test_metrics!r} (expected True, False or 'best')")

        _follow_ray_threads()
        self._task = get_task(task) if isinstance(task, str) else task
        self._settings = {"optimizer": optimizer, "seed": seed, "cost_mode": cost_mode, "owner": owner}
        self._rungs = check_rungs(rungs)
        self._backward_ratio = backward_ratio
        self._backward_ratios = dict(backward_ratios or {})
        self._data_dir = data_dir
        self._test_metrics = test_metrics
        self.trial = self._build(config)

    def _build(self, config: dict[str, Any]) -> Trial:
        from eve_search.engine.trial import Trial

        params = {k: v for k, v in config.items() if k != INDEX_KEY}
        s = self._settings
        index = config_index(config)
        data = self._task.data(self._data_dir)
        ratio = None
        if s["cost_mode"] == "calibrated":
            ratio = self._backward_ratios.get(self._task.cost_key(params), self._backward_ratio)
            if ratio is None:
                ratio = Trial(self._task, params, s["optimizer"], seed=s["seed"], index=index, cost_mode="measured",
                              data=data).calibrate()
        return Trial(self._task, params, s["optimizer"], seed=s["seed"], index=index, cost_mode=s["cost_mode"],
                     backward_ratio=ratio, data=data, owner=s["owner"])

    def _metrics(self) -> dict[str, Any]:
        trial = self.trial
        val = trial.evaluate("val")
        result: dict[str, Any] = {"eval_cost": trial.charged_units, "budget": trial.budget, **val, "val": val,
                                  "wall_seconds": trial.wall_seconds, "backward_passes": trial.meter.backward_passes}
        result["done"] = trial.budget >= self._rungs[-1]
        if self._test_metrics is True or (self._test_metrics == "best" and self._may_be_best(val, result["done"])):
            result["test"] = trial.evaluate("test")
        return result

    def _may_be_best(self, val: dict[str, float], last: bool) -> bool:
        """Whether this result could be the search's best (or its winner), as far as this process has
        seen: a score at least as good as the best this process has reported for the same owner (ties
        included: the tie-break is the driver's; NaN never), and every result at the last rung (the
        winner is one of them, even where every score there is NaN)."""
        score = self.trial.score(val)
        if math.isnan(score):
            return last
        key = (self._settings["owner"], self._task.name, self._task.metric)
        best = _BEST_REPORTED.get(key)
        sign = 1.0 if self._task.mode == "max" else -1.0
        if best is None or sign * score >= sign * best:
            _BEST_REPORTED[key] = score
            return True
        return last

    def step(self) -> dict[str, Any]:
        later = [rung for rung in self._rungs if rung > self.trial.budget]
        if later:
            self.trial.train_to(later[0])
        return self._metrics()

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.trial.save(Path(checkpoint_dir) / "trial.pt")

    def load_checkpoint(self, checkpoint: str | dict | None) -> None:
        if isinstance(checkpoint, str):
            self.trial.load(Path(checkpoint) / "trial.pt")

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.trial = self._build(new_config)
        return True
