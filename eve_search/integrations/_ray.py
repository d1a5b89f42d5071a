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
checkpoints. The cohorts run as a :class:`~eve_search.engine.stream.CohortStream` (the project's one
scheduling core), which also says what a free actor takes next: a promoted trial of the oldest
cohort, then first-rung trials, then the search algorithm's next trial. Cohorts close on events
(the search algorithm is finished, or proposes none while every trial waits), never on a timer. A
paused trial gives its concurrency slot back, so ``ConcurrencyLimiter`` and
``max_concurrent_trials`` limit how many trials train at once, never the cohort. The scheduler's
state is written beside Tune's experiment state (the driver staging folder that Tune syncs to
``storage_path``), so a restored run continues it exactly.

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
    rank_order,
    rungs_from_geometric,
)
from eve_search.engine.stream import CohortStream, Work

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
GUARD_SECONDS = 60.0  # the last guard: a run stalled this long (no trial trains or starts) raises an error.
# No decision waits for it: cohorts close on events. With nothing training, the run moves on within a Tune
# step or two (under a second here, a few seconds under load), so this is sized for a machine ten times slower.


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
    [...], "partial": [...], "early": ..., "trials": {trial_id: tag}, "time_attr": ..., "metric": ...,
    "segments": [...]}``. The ledgers have trial ids as keys; a cohort that trials can still join keeps
    its first-rung scores in ``"early"``. ``"segments"`` is the scheduling state itself: the
    :class:`~eve_search.engine.stream.CohortStream` of each run of cohorts, by configuration index.

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
    ended before its rung, a rung passed without the metric, or a ``get_best_result()`` that will not
    return the search's winner. Each kind is issued once per run."""


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


class _Segment:
    """Trials in arrival order whose cohorts one :class:`~eve_search.engine.stream.CohortStream` runs
    (the segment's i-th trial is the stream's configuration i).

    With ``cohort_size=n`` the stream exists from the segment's first trial: cohort k holds its
    trials ``k*n .. k*n + n - 1``, the ones that have not arrived yet included, so a first rung
    waits for them. With ``cohort_size=None`` the segment is one cohort of every trial, whose size
    is known only when the segment ends: its first-rung scores wait in ``held`` and its stream is
    made then. A segment ends when the search algorithm is finished, or when its open cohort is cut
    (every trial waits and the search algorithm proposes none); the next trial starts a new segment.
    """

    def __init__(self, cohort: int, size: int | None, rungs: tuple[int, ...], fraction: float, mode: str) -> None:
        self.cohort = cohort  # the run's number of its first cohort
        self.size = size
        self._settings = (rungs, fraction, mode)
        self.trials: list[str] = []  # trial ids by configuration index
        self.held: dict[int, float] = {}  # first-rung scores, while the size of its one cohort is unknown
        self.failed: set[int] = set()  # trials that left before that
        self.stream: CohortStream | None = None if size is None else self._stream(None, size)
        self.done = 0  # its cohorts before this one are finished and their trials ended

    def _stream(self, configs: int | None, size: int | None) -> CohortStream:
        rungs, fraction, mode = self._settings
        return CohortStream(configs, size, rungs=rungs, fraction=fraction, mode=mode)

    @property
    def ended(self) -> bool:
        """No trial joins it any more."""
        return self.stream is not None and self.stream.configs is not None

    @property
    def cohorts(self) -> int:
        """How many of its cohorts have trials."""
        return 1 if self.stream is None else self.stream.opened

    def add(self, trial_id: str) -> int:
        """``trial_id`` arrives; returns its configuration index."""
        index = len(self.trials)
        self.trials.append(trial_id)
        if self.stream is not None:
            self.stream.ledger(self.stream.cohort_of(index))  # a cohort opens with its first trial
        return index

    def end(self) -> None:
        """No trial joins any more: the last cohort is decided with the trials it has."""
        if self.stream is not None:
            self.stream.end(len(self.trials))
            return
        self.stream = self._stream(len(self.trials), None)
        self.stream.ledger(0)
        for index in sorted(self.failed):
            self.stream.fail(index)
        for index, score in sorted(self.held.items()):
            self.stream.report(index, 0, score)
        self.held, self.failed = {}, set()

    # One trial ------------------------------------------------------------------------------------

    def _ledger(self, index: int) -> RungLedger | None:
        return None if self.stream is None else self.stream.ledger(self.stream.cohort_of(index))

    def status(self, index: int) -> str:
        """The ledger's status of configuration ``index`` ("wait" while its first-rung score is held)."""
        ledger = self._ledger(index)
        if ledger is None:
            return "failed" if index in self.failed else "wait" if index in self.held else "train"
        return ledger.status(index)

    def next_rung(self, index: int) -> int | None:
        ledger = self._ledger(index)
        if ledger is None:
            return None if index in self.failed or index in self.held else 0
        return ledger.next_rung(index)

    def score(self, index: int, rung: int) -> float | None:
        ledger = self._ledger(index)
        if ledger is None:
            return self.held.get(index) if rung == 0 else None
        return ledger.score(index, rung)

    def start(self, index: int, rung: int) -> None:
        """Tune runs configuration ``index`` to ``rung`` (the stream counts that work as running)."""
        if self.stream is not None and Work(index, rung) not in self.stream.running:
            self.stream.start(Work(index, rung))

    def report(self, index: int, rung: int, score: float) -> None:
        if self.stream is None:
            self.held[index] = score
        else:
            self.stream.report(index, rung, score)

    def fail(self, index: int) -> None:
        if self.stream is None:
            self.failed.add(index)
            self.held.pop(index, None)
        else:
            self.stream.fail(index)

    # Its cohorts -----------------------------------------------------------------------------------

    def final(self, cohort: int) -> bool:
        """Whether every trial of its ``cohort`` has arrived (none can join it any more)."""
        if self.ended:
            return True
        return self.stream is not None and (cohort + 1) * int(self.size or 0) <= len(self.trials)

    def members(self, cohort: int) -> list[str]:
        """The trials of its ``cohort`` that have arrived."""
        if self.stream is None:
            return list(self.trials)
        return [self.trials[i] for i in self.stream.members(cohort) if i < len(self.trials)]

    def finished(self, cohort: int) -> bool:
        return self.final(cohort) and self.stream is not None and self.stream.ledger(cohort).finished

    def view(self, cohort: int) -> tuple[RungLedger, dict[str, float]]:
        """Its ``cohort`` as a rung ledger of trial ids (the arrived trials), and the first-rung scores
        held apart while trials can still join it (as the saved state has always shown them)."""
        rungs, fraction, mode = self._settings
        ledger = RungLedger(rungs, fraction, mode)
        ids = self.trials
        if self.stream is None:
            for trial_id in ids:
                ledger.add(trial_id)
            for index in sorted(self.failed):
                ledger.fail(ids[index])
            return ledger, {ids[i]: s for i, s in sorted(self.held.items())}

        def named(indices: list[int]) -> list[str]:
            return [ids[i] for i in indices if i < len(ids)]

        state = self.stream.ledger(cohort).state_dict()
        scores = [[[ids[i], s] for i, s in rung if i < len(ids)] for rung in state["scores"]]
        early: dict[str, float] = {}
        if not self.final(cohort):
            early, scores[0] = {t: s for t, s in scores[0]}, []
        decisions = [None if d is None else {"promoted": named(d["promoted"]), "stopped": named(d["stopped"])}
                     for d in state["decisions"]]
        ledger.load_state_dict({**state, "members": named(state["members"]), "scores": scores,
                                "failed": named(state["failed"]), "decisions": decisions})
        return ledger, early

    # Persistence ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"cohort": self.cohort, "size": self.size, "trials": list(self.trials),
                "held": [[i, s] for i, s in sorted(self.held.items())], "failed": sorted(self.failed),
                "stream": None if self.stream is None else self.stream.state_dict()}

    @classmethod
    def from_state(cls, state: dict[str, Any], rungs: tuple[int, ...], fraction: float, mode: str) -> _Segment:
        segment = cls(int(state["cohort"]), state["size"], rungs, fraction, mode)
        segment.trials = [str(t) for t in state["trials"]]
        segment.held = {int(i): float(s) for i, s in state["held"]}
        segment.failed = {int(i) for i in state["failed"]}
        saved = state["stream"]
        if saved is not None:
            segment.stream = segment._stream(saved["configs"], saved["cohort_size"])
            segment.stream.load_state_dict(saved)
        return segment


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

    Sparse reporting: results without the metric (a trainable that reports it every few steps, with
    ``TUNE_DISABLE_STRICT_METRIC_CHECKING=1``, as Tune's message advises) are accepted between rungs.
    A rung counts the first result at or past its budget that has the metric: a trial that passes a
    rung with a result without it trains on to its next result with the metric, which counts for that
    rung (and for every rung it passed meanwhile), and waits there; a trial that ends before such a
    result leaves the cohort, as one that ended early. Each case is warned once per run.

    Cohorts: a rung is decided when every live trial of its cohort has reached it or ended. The
    cohorts run as a :class:`~eve_search.engine.stream.CohortStream` over the trials in the order
    Tune creates them, and the stream chooses what a free actor runs next: a promoted trial of the
    oldest cohort first (it takes a concurrency slot and a free actor ahead of new trials), then
    first-rung trials, then the search algorithm's next trial, which opens the next cohort. A trial
    that waits at a rung gives its actor to such work, so trials of several cohorts train at once;
    which and how many never changes a decision.

    - By default the cohort is every trial of the run (the paper's search). A paused trial gives up
      its concurrency slot (``ConcurrencyLimiter``, ``TuneConfig(max_concurrent_trials=...)``), so a
      limit caps how many trials train at once, never the cohort.
    - ``cohort_size=n``: trials form cohorts of n in the order Tune creates them, each its own
      successive halving. It is required for an endless search (``num_samples=-1``, usually with
      ``time_budget_s``). A search algorithm without a concurrency limit of its own gets one, as
      many trials as the cluster can train at once and at least n, so that it proposes a trial only
      for a free worker and the cohorts are decided in order.
    - Cohorts close on events, never on a timer: when the search algorithm is finished, the last
      cohort is decided with the trials it has; when every live trial waits at a rung, none is
      pending and the search algorithm proposes none (a searcher with its own concurrency limit,
      or one that waits for results), the open cohort is decided with the trials it has and the
      next trial starts a new one. A slow searcher or a slow trial never closes a cohort. (A
      searcher that answers "none" while it computes in the background does close one: the
      decision then follows its timing.)

    Checkpoints and the best result: a trial is never stopped while a checkpoint of it is being saved
    (Tune would drop it), so every trial keeps the last checkpoint it reported, the winner its final
    one. ``results.get_best_result()`` ranks every trial by its last result, and a loser's last result
    is its score at the rung where it was stopped: with a metric that worsens with training, or a noisy
    one, it can outrank the winner, and it has only the checkpoints it reported by then (none, for a
    trainable that checkpoints at its end such as Ray's LightGBM example). :meth:`best_result` gives the
    search's winner (:meth:`winner`) with its checkpoint, and the scheduler warns at the end of a run
    where ``get_best_result()`` would return another trial.

    A cohort decided with fewer trials than it was meant to have is listed by
    :meth:`partial_cohorts` and in the saved state, with a warning (:class:`SynchronousSHAWarning`).
    Where no cohort can be defined the run stops at setup with one error, never a silent stall; a
    run that stalls all the same (no trial trains or starts for ``GUARD_SECONDS``) raises an error.

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
        self._segments: list[_Segment] = []
        self._where: dict[str, tuple[int, int]] = {}  # trial id -> (segment, configuration index in it)
        self._first_live = 0  # segments before it are finished and their trials ended
        self._partial: list[dict[str, Any]] = []  # cohorts decided with fewer trials than meant
        self._tags: dict[str, str] = {}  # trial id -> Tune's experiment tag (for people reading the state)
        self._trials: dict[str, TuneTrial] = {}
        self._queue: list[str] = []  # trials handed their next work while waiting, in the stream's order
        self._recovering: set[str] = set()
        self._idle: set[str] = set()  # trials left RUNNING without work on their actor (NOOP)
        self._served: set[str] = set()  # pending trials an idle actor was freed for
        self._pausing: set[str] = set()  # trials told to pause, until they report or end
        self._handing: set[str] = set()  # trials that end, paused only so that their actor goes to another
        self._stopping: set[str] = set()  # trials given a slot back only so that the searcher hears they end
        self._in_stop: set[str] = set()  # trials whose stop_trial call is under way
        self._paused: set[str] = set()  # trials paused at a rung that have not reported since
        self._warned: set[str] = set()
        self._admission_set = False
        self._acting = False
        self._stalled_since: float | None = None
        self._state_path: Path | None = None
        self._version = 0  # bumped whenever a ledger, a cohort or the held scores change
        self._saved: tuple[Path | None, int] = (None, -1)  # the state last written
        self._cached: tuple[int, dict[str, str]] = (-1, {})
        self._shown: tuple[int, list[tuple[RungLedger, dict[str, float], bool]]] = (-1, [])

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
        views = self._views()
        return views[0][0] if views else None

    @property
    def ledgers(self) -> list[RungLedger]:
        """One rung ledger per cohort (trial ids as keys), in the order the cohorts formed. The
        first-rung scores of a cohort that trials can still join are not in it (they are held)."""
        return [ledger for ledger, _, _ in self._views()]

    def decisions(self) -> list[RungDecision]:
        """Every rung decided so far (trial ids), cohort after cohort."""
        return [d for ledger, _, _ in self._views() for d in ledger.decisions()]

    def partial_cohorts(self) -> list[dict[str, Any]]:
        """The cohorts decided with fewer trials than they were meant to have: ``{"cohort": index,
        "trials": how many it had, "reason": why it closed}``."""
        return [dict(p) for p in self._partial]

    def winner(self) -> str | None:
        """The trial id the search picked: the best score at the highest rung any trial reached, over every
        cohort (ties go to the trial that came first); None before any rung was reached."""
        reached: dict[str, float] = {}
        for rung in reversed(range(len(self._rungs))):
            for ledger, early, _ in self._views():
                reached.update(ledger.scores(rung))
                if rung == 0:
                    reached.update(early)
            if reached:
                return rank_order(reached, self._mode or "max")[0]
        return None

    def best_result(self, results: Any) -> Any:
        """The result of the trial the search picked (:meth:`winner`), with its checkpoint.

        ``results.get_best_result()`` ranks every trial by its *last* result, and a trial stopped at an
        early rung keeps its early score there: with a metric that does not improve with training (or a
        noisy one) it can outrank the winner, and it has only the checkpoints it reported by then (none,
        for a trainable that checkpoints at its end, like LightGBM's ``TuneReportCheckpointCallback``). The
        scheduler warns at the end of such a run.

        Args:
            results: the ``ResultGrid`` of the run this scheduler ran (``tuner.fit()``).

        Returns:
            The winner's ``ray.tune.Result``.

        Example (needs Ray):
            >>> results = tuner.fit()  # doctest: +SKIP
            >>> best = scheduler.best_result(results)  # doctest: +SKIP
            >>> best.checkpoint  # the last checkpoint the winner reported  # doctest: +SKIP
        """
        winner = self.winner()
        for result in results:
            if (result.metrics or {}).get("trial_id") == winner:
                return result
        raise ValueError(f"Invalid results: {type(results).__name__} without trial {winner} (expected the ResultGrid "
                         "of the run this scheduler ran, from tuner.fit())")

    def _check_best(self, tune_controller: Any, ending: TuneTrial) -> None:
        """At the end of the run: warn (once) when ``results.get_best_result()`` will not give the winner."""
        if not self._searcher_finished(tune_controller):
            return
        trials = tune_controller.get_trials()
        if any(t is not ending and t.status not in (TuneTrial.TERMINATED, TuneTrial.ERROR) for t in trials):
            return
        last = {}
        for trial in trials:
            value = (getattr(trial, "metric_analysis", None) or {}).get(self._metric, {}).get("last")
            if isinstance(value, (int, float)) and math.isfinite(value):
                last[trial.trial_id] = float(value)
        winner = self.winner()
        if not last or winner is None or winner not in self._trials:
            return
        picked = rank_order(last, self._mode or "max")[0]
        if picked == winner:
            return
        chosen, won = self._trials[picked], self._trials[winner]

        def at(trial: TuneTrial) -> str:
            steps = (trial.last_result or {}).get(self._time_attr)
            return f"{self._metric}={last.get(trial.trial_id, float('nan')):g}" + (
                "" if steps is None else f" at {self._time_attr}={float(steps):g}")

        lost = "" if chosen.checkpoint is not None else ", and it has no checkpoint"
        self._warn("best", f"results.get_best_result() ranks each trial by its last result, so it will return trial "
                           f"{picked} ({at(chosen)}{lost}), not the search's winner {winner} ({at(won)}): take the "
                           "winner, with its checkpoint, from scheduler.best_result(results)")

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
                    len(self._views()), len(self._where), len(self.decisions()), path)

    def _views(self) -> list[tuple[RungLedger, dict[str, float], bool]]:
        """Every cohort as (rung ledger of trial ids, first-rung scores held apart, closed), computed once
        per change: what the saved state, :attr:`ledgers` and :meth:`debug_string` show."""
        if self._shown[0] != self._version:
            views = []
            for segment in self._segments:
                for cohort in range(segment.cohorts):
                    ledger, early = segment.view(cohort)
                    views.append((ledger, early, segment.final(cohort)))
            self._shown = (self._version, views)
        return self._shown[1]

    def _state(self) -> dict[str, Any]:
        views = self._views()
        cohorts = [ledger.state_dict() for ledger, _, _ in views]
        return {"time_attr": self._time_attr, "metric": self._metric, "rungs": list(self._rungs),
                "cohort_size": self._cohort_size, "ledger": cohorts[0] if cohorts else None, "cohorts": cohorts,
                "closed": [closed for _, _, closed in views], "partial": self._partial,
                "early": {t: s for _, early, _ in views for t, s in early.items()}, "trials": self._tags,
                "segments": [segment.state_dict() for segment in self._segments]}

    def _load(self, state: dict[str, Any]) -> None:
        settings = (self._rungs, self._fraction, self._mode or "max")
        if "segments" in state:
            self._segments = [_Segment.from_state(saved, *settings) for saved in state["segments"]]
        else:  # written before the cohorts ran as a stream
            self._segments = self._segments_of_ledgers(state)
        self._where = {t: (s, i) for s, segment in enumerate(self._segments) for i, t in enumerate(segment.trials)}
        self._first_live = 0
        self._partial = [dict(p) for p in state.get("partial", [])]
        self._tags = dict(state.get("trials", {}))
        self._version += 1

    def _segments_of_ledgers(self, state: dict[str, Any]) -> list[_Segment]:
        """The segments of a state saved before the cohorts ran as a stream (ledgers of trial ids, the
        first-rung scores of the open cohort held in ``"early"``): a closed cohort becomes a segment of
        one cohort, the open one (the last) a segment that trials go on joining."""
        settings = (self._rungs, self._fraction, self._mode or "max")
        cohorts = state.get("cohorts")
        if cohorts is None:
            cohorts = [] if state.get("ledger") is None else [state["ledger"]]
        early = {str(k): float(v) for k, v in state.get("early", {}).items()}
        closed = state.get("closed") or [not any(t in early for t in saved["members"]) for saved in cohorts]
        segments = []
        for number, saved in enumerate(cohorts):
            ledger = RungLedger(*settings)
            ledger.load_state_dict(saved)
            members = [str(t) for t in ledger.members]
            index = {t: i for i, t in enumerate(members)}
            if closed[number] and members:
                segment = _Segment(number, None, *settings)
                segment.trials = members
                segment.stream = segment._stream(len(members), None)
                stream = segment.stream.state_dict()
                stream["ledgers"] = [{**saved, "members": list(range(len(members))),
                                      "scores": [[[index[t], s] for t, s in rung] for rung in saved["scores"]],
                                      "failed": [index[t] for t in saved["failed"]],
                                      "decisions": [None if d is None else
                                                    {key: [index[t] for t in d[key]] for key in ("promoted", "stopped")}
                                                    for d in saved["decisions"]]}]
                segment.stream.load_state_dict(stream)
            else:
                segment = _Segment(number, self._cohort_size, *settings)
                for trial_id in members:
                    segment.add(trial_id)
                for trial_id in members:
                    if ledger.status(trial_id) == "failed":
                        segment.fail(index[trial_id])
                    elif trial_id in early:
                        segment.report(index[trial_id], 0, early[trial_id])
            segments.append(segment)
        return segments

    def _save(self) -> None:
        if self._state_path is None or self._saved == (self._state_path, self._version):
            return
        # The temporary file goes beside Tune's driver staging folder, not in it: Tune copies that folder
        # to storage from another thread, and a temporary file it listed and that is renamed before
        # it is copied fails the whole copy, with a traceback on the terminal.
        _write_json_atomically(self._state(), self._state_path, scratch=self._state_path.parent.parent)
        self._saved = (self._state_path, self._version)

    # The stream of cohorts ----------------------------------------------------------------------------

    def _locate(self, trial_id: str) -> tuple[_Segment, int]:
        segment, index = self._where[trial_id]
        return self._segments[segment], index

    def _arrive(self, trial_id: str) -> None:
        """A new trial: the next configuration of the open segment (a new one after an end)."""
        if not self._segments or self._segments[-1].ended:
            last = self._segments[-1] if self._segments else None
            first = 0 if last is None else last.cohort + last.cohorts
            self._segments.append(_Segment(first, self._cohort_size, self._rungs, self._fraction,
                                           self._mode or "max"))
        index = self._segments[-1].add(trial_id)
        self._where[trial_id] = (len(self._segments) - 1, index)
        self._version += 1

    def _end(self, reason: str) -> bool:
        """The open segment takes no more trials (``reason``: "finished", the search algorithm is, or
        "cut", it proposes none while every trial waits); True when one was open."""
        if not self._segments or self._segments[-1].ended:
            return False
        segment = self._segments[-1]
        size = len(segment.trials) - (0 if segment.size is None else (segment.cohorts - 1) * segment.size)
        segment.end()
        self._version += 1
        if reason == "cut":
            why = ("no new trial could start (the search algorithm suggested none while every trial of the "
                   "cohort waited at the first rung)")
        elif segment.size is not None and size < segment.size:
            why = f"the search ended with {size} of its {segment.size} trials (the last cohort)"
        elif segment.size is None and len(self._segments) > 1:
            why = "the search ended (the trials that came after the previous cohort closed)"
        else:
            return True
        number = segment.cohort + segment.cohorts - 1
        self._partial.append({"cohort": number, "trials": size, "reason": why})
        self._warn(f"partial:{why.split(' ')[0]}",
                   f"cohort {number} is decided with {size} trial{'s' if size != 1 else ''}: {why}")
        return True

    def _searcher_finished(self, tune_controller: Any) -> bool:
        try:
            return bool(tune_controller.search_alg.is_finished())
        except AttributeError:  # an older controller without the property: assume the trials are in
            return True

    def _close_if_search_ended(self, tune_controller: Any) -> bool:
        return self._searcher_finished(tune_controller) and self._end("finished")

    def _cut_if_nothing_comes(self, tune_controller: Any) -> bool:
        """Cut the open cohort when every live trial waits at a rung, none is pending or handed work,
        and the search algorithm proposed none (see :meth:`choose_trial_to_run`: it has just been asked)."""
        if not self._segments or self._segments[-1].ended or self._queue:
            return False
        segment = self._segments[-1]
        open_cohort = segment.cohorts - 1
        if segment.final(open_cohort) or not any(
                self._status(t) == "wait" for t in segment.members(open_cohort) if t in self._trials):
            return False
        for trial in tune_controller.get_trials():
            if trial.status == TuneTrial.PENDING or self._executing(trial):
                return False
            if trial.status in (TuneTrial.PAUSED, TuneTrial.RUNNING) and trial.trial_id in self._where \
                    and self._status(trial.trial_id) == "train":
                return False  # promoted, waiting for a slot
        if self._searcher_finished(tune_controller):
            return False
        return self._end("cut")

    def _next_work(self) -> tuple[_Segment, Work] | None:
        """The work a free actor should take now, as :meth:`CohortStream.next_work` orders it, over the
        segments that cuts and ends begin: promoted work of the oldest cohort first, then first-rung work
        (a configuration that has not arrived is the search algorithm's next trial)."""
        first = None
        for segment in self._segments[self._first_live:]:
            work = segment.stream.next_work() if segment.stream is not None else None
            if work is not None and work.rung > 0:
                return segment, work
            if work is not None and first is None:
                first = (segment, work)
        return first

    def _executing(self, trial: TuneTrial) -> bool:
        """Whether Tune runs ``trial`` to its next rung: pending, or training on its actor."""
        if trial.status == TuneTrial.PENDING:
            return True
        return trial.status == TuneTrial.RUNNING and trial.trial_id not in self._idle \
            and not (trial.trial_id in self._pausing and trial.is_saving)

    def _waiting(self, trial: TuneTrial) -> bool:
        """Whether ``trial`` waits for work: paused, being paused, or idle on its actor."""
        return trial.status == TuneTrial.PAUSED or (trial.status == TuneTrial.RUNNING and not self._executing(trial))

    def _grant(self, tune_controller: Any, freeing: str | None = None, resume: bool = True) -> None:
        """Hand the stream's ready work out, in its order, while concurrency slots allow: each piece
        goes to its waiting trial with a slot (a trial idle on its actor trains on at once when
        ``resume``; a paused one is queued for :meth:`choose_trial_to_run`). Work that Tune runs already
        is counted as running. ``freeing``: a trial that ends holding a slot that Tune frees after this
        callback; the first piece with no free slot takes it, ahead of the search algorithm's next trial.
        Stops at the search algorithm's next trial (it opens the next cohort when a slot is free)."""
        while (found := self._next_work()) is not None:
            segment, work = found
            if work.index >= len(segment.trials):
                return
            trial_id = segment.trials[work.index]
            trial = self._trials.get(trial_id)
            if trial is None:
                return  # a restored run: Tune has not added it back yet
            if trial_id in self._recovering:
                return  # Tune adds it again
            if trial.status in (TuneTrial.TERMINATED, TuneTrial.ERROR):
                self._leave(trial_id)  # it ended without the scheduler hearing of it
                continue
            if self._executing(trial):
                segment.start(work.index, work.rung)
                continue
            if not (self._holds_slot(tune_controller, trial_id) or self._claim(tune_controller, trial_id)):
                if freeing is None:
                    return
                for slots in self._slots(tune_controller):
                    slots.live.add(trial_id)
                freeing = None
            segment.start(work.index, work.rung)
            if trial_id in self._idle and trial.status == TuneTrial.RUNNING and resume:
                self._idle.discard(trial_id)
                self._resume(tune_controller, trial)
            elif trial_id not in self._queue:
                self._queue.append(trial_id)

    def _handed(self, trial_id: str) -> bool:
        """Whether ``trial_id``'s next work was handed to it (the stream counts it as running)."""
        segment, index = self._locate(trial_id)
        rung = segment.next_rung(index)
        return rung is not None and segment.stream is not None and Work(index, rung) in segment.stream.running

    # Concurrency slots ------------------------------------------------------------------------------

    def _slots(self, tune_controller: Any) -> list[_Slots]:
        """The search algorithm's concurrency limits that count trials by id (a paused trial's slot
        can be given back). A limit this cannot see (a searcher's own) makes the search algorithm
        propose no trial while every trial waits: the open cohort is then cut."""
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

    def _limit_admission(self, tune_controller: Any, trial: TuneTrial) -> None:
        """With cohorts of ``cohort_size`` and a search algorithm without a limit, give it one: as many
        slots as trials can train at once on the cluster (its CPUs and GPUs over a trial's), and at
        least ``cohort_size``.

        The stream opens the next cohort only when a worker is free and no promoted trial takes it.
        The slots do that here: a trial that waits at a rung gives its slot back, a promoted trial
        takes one first, and the search algorithm proposes a trial only for a free slot. Without a
        limit Tune keeps up to 200 new trials pending and gives free actors to them in an order of its
        own: an endless search with cohorts of 4 on 2 CPUs opened 88 cohorts in 20 s and decided none.
        The limit used to be ``cohort_size`` itself, which left workers idle whenever a cohort was
        smaller than the cluster.
        """
        if self._admission_set:
            return
        self._admission_set = True
        alg = getattr(tune_controller, "search_alg", None)
        if self._cohort_size is None or not isinstance(alg, BasicVariantGenerator) or alg.max_concurrent != 0:
            return
        try:
            import ray

            cluster = ray.cluster_resources()
            needs = trial.placement_group_factory.required_resources
            fits = min(int(cluster.get(name, 0) // amount) for name, amount in needs.items() if amount > 0)
        except Exception:  # noqa: BLE001 no view of the cluster: cohort_size alone, as before
            fits = 0
        alg.max_concurrent = max(self._cohort_size, fits)
        logger.info("SynchronousSHAScheduler: the search algorithm proposes a trial when one of %d slots is free",
                    alg.max_concurrent)

    def _holds_slot(self, tune_controller: Any, trial_id: str) -> bool:
        return all(trial_id in slots.live for slots in self._slots(tune_controller))

    def _release(self, tune_controller: Any, trial_id: str) -> None:
        """A trial that waits (paused, or idle on its actor) gives its slot back, first to the stream's
        next ready work, else to the search algorithm's next trial."""
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
        """``trial_id`` ends holding a slot (Tune frees it after this callback): the stream's next ready
        work takes it now, ahead of the search algorithm's next trial."""
        if trial_id in self._stopping:
            self._stopping.discard(trial_id)
            return
        limits = self._slots(tune_controller)
        if limits and all(trial_id in s.live for s in limits):
            self._grant(tune_controller, freeing=trial_id)

    # Feeding the stream -----------------------------------------------------------------------------

    def _record(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any], fresh: bool = True) -> None:
        """Report every rung that ``result`` reaches and the stream expects from this trial (``fresh``:
        a new result, not the last one repeated when the trial ends)."""
        trial_id = trial.trial_id
        shown = _shown_keys(result)
        if self._time_attr not in result:
            raise ValueError(f"Invalid result: trial {trial_id} reported no {self._time_attr!r} (the scheduler's "
                             f"time_attr); it reported: {shown}")
        elapsed = float(result[self._time_attr])
        segment, index = self._locate(trial_id)
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
        while True:
            rung = segment.next_rung(index)
            if rung is None or elapsed < self._rungs[rung]:
                return
            if self._metric not in result:
                # Sparse reporting (TUNE_DISABLE_STRICT_METRIC_CHECKING=1): the trial goes on, and its next result
                # that has the metric counts for the rung, as a result past several rungs counts for each.
                if fresh:
                    self._warn("sparse", f"trial {trial_id} passed rung {self._rungs[rung]} ({self._time_attr}="
                                         f"{elapsed:g}) with a result without the metric {self._metric!r}: it goes "
                                         "on, and its next result that has the metric counts for the rung (a "
                                         f"trial that ends before one leaves the cohort); it reported: {shown}")
                return
            segment.report(index, rung, float(result[self._metric]))
            self._version += 1

    def _leave(self, trial_id: str) -> None:
        """``trial_id`` ended or failed for good: it leaves every rung not yet decided."""
        segment, index = self._locate(trial_id)
        segment.fail(index)
        self._version += 1

    def _status(self, trial_id: str) -> str:
        """The ledger's status of a trial ("wait" while its first-rung score is held), computed once
        per change of the stream: Tune asks for it on every step."""
        if self._cached[0] != self._version:
            self._cached = (self._version, {})
        statuses = self._cached[1]
        if trial_id not in statuses:
            segment, index = self._locate(trial_id)
            statuses[trial_id] = segment.status(index)
        return statuses[trial_id]

    def _reached(self, trial_id: str) -> int:
        """The budget of the highest rung this trial has reported (0: none)."""
        segment, index = self._locate(trial_id)
        reported = [self._rungs[k] for k in range(len(self._rungs)) if segment.score(index, k) is not None]
        return max(reported, default=0)

    def _start_next(self, trial_id: str) -> None:
        """Tune runs ``trial_id`` on: its next rung's work is running."""
        segment, index = self._locate(trial_id)
        rung = segment.next_rung(index)
        if rung is not None:
            segment.start(index, rung)

    def _members(self) -> list[str]:
        """The trials of every cohort still under way (a finished cohort whose trials all ended is
        skipped: an endless search piles them up)."""
        out: list[str] = []
        for number in range(self._first_live, len(self._segments)):
            segment = self._segments[number]
            for cohort in range(segment.done, segment.cohorts):
                members = segment.members(cohort)
                if cohort == segment.done and segment.finished(cohort) and all(
                        t in self._trials and self._trials[t].status in (TuneTrial.TERMINATED, TuneTrial.ERROR)
                        for t in members):
                    segment.done += 1
                    continue
                out.extend(members)
            if number == self._first_live and segment.ended and segment.done == segment.cohorts:
                self._first_live += 1
        return out

    # Actors -----------------------------------------------------------------------------------------

    def _runnable(self, tune_controller: Any, exclude: TuneTrial) -> bool:
        """Whether another trial could use ``exclude``'s actor now: a trial handed its next work while
        paused, or a pending trial, that the actors Tune already holds free will not serve.

        Pausing a trial when every such trial has a free actor waiting leaves one actor too many in
        Tune's cache, and Tune ends it at its next step. At the end of the first rung that took one of
        the demo sweep's two actors; Tune then started replacement actors (2 s each to import PyTorch)
        that never trained, and the other rungs ran on one actor (14-21 s instead of 10-12 s).
        """
        return bool(self._needing_actors(tune_controller, exclude))

    def _needing_actors(self, tune_controller: Any, exclude: TuneTrial | None = None) -> list[TuneTrial]:
        """Trials (but ``exclude``) that need an actor no actor Tune already holds free will serve: the
        paused trials handed their next work (the stream's order), then the pending trials that are not
        being handed a cached actor already (Tune's ``_resetting_trials``), beyond as many as there are
        free actors: those in Tune's cache, and those of trials told to pause whose checkpoint is still
        being saved (a pause frees the actor only then). Trials already promised an idle trial's actor
        (``_served``) are the first ones those actors serve. A pending trial whose own actor is still
        starting counts: a free actor serves it at once, where a new one takes seconds (a Python
        process importing torch)."""
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        resetting = getattr(controller, "_resetting_trials", ())
        trials = tune_controller.get_trials()
        handed = [self._trials[t] for t in self._queue if t in self._trials and self._trials[t] is not exclude
                  and self._trials[t].status == TuneTrial.PAUSED]
        pending = [t for t in trials if t is not exclude and t.status == TuneTrial.PENDING and t not in resetting]
        pending.sort(key=lambda t: t.trial_id not in self._served)
        cached = getattr(getattr(controller, "_actor_cache", None), "num_cached_objects", 0)
        freeing = sum(1 for t in trials if t is not exclude and (t.trial_id in self._paused or t.trial_id in
                                                                 self._pausing)
                      and t.status == TuneTrial.RUNNING and t.is_saving)
        return (handed + pending)[(cached if isinstance(cached, int) else 0) + freeing:]

    @staticmethod
    def _has_actor(controller: Any, trial: TuneTrial) -> bool:
        """Whether Tune has granted pending ``trial`` an actor (started, or being constructed): it does
        not wait for the cluster's resources."""
        actor = getattr(controller, "_trial_to_actor", {}).get(trial)
        manager = getattr(controller, "_actor_manager", None)
        if actor is None or manager is None:
            return False
        try:
            return bool(manager.is_actor_started(actor))
        except (AttributeError, TypeError):  # another Tune
            return False

    def _handovers(self, tune_controller: Any, exclude: TuneTrial | None = None) -> list[tuple[TuneTrial, str]]:
        """(trial that needs an actor, idle trial) pairs: each trial that no free actor will serve takes
        the actor of a trial idle on one, losers first, then trials that wait for their rung or for a
        slot.

        A pending trial that Tune is already handing a cached actor must not count: an idle trial
        paused for it would leave its actor one too many, Tune would end it, and the next rungs would
        start replacement actors (2 s each) that never train, and run on one actor.
        """
        needers = [t for t in self._needing_actors(tune_controller, exclude) if t.trial_id not in self._served]
        order = {"wait": 1, "train": 2}  # losers first, then trials that wait for their rung or for a slot
        idle = sorted((tid for tid in self._idle if (exclude is None or tid != exclude.trial_id)
                       and (self._status(tid) != "train" or not self._holds_slot(tune_controller, tid))),
                      key=lambda tid: (order.get(self._status(tid), 0), tid))
        return list(zip(needers, idle))

    def _pause(self, tune_controller: Any, trial: TuneTrial) -> None:
        """Pause an idle trial (its actor goes back to Tune once its checkpoint is saved)."""
        trial_id = trial.trial_id
        self._idle.discard(trial_id)
        self._pausing.add(trial_id)
        if self._status(trial_id) in ("wait", "train"):
            self._paused.add(trial_id)
        else:
            self._handing.add(trial_id)
        tune_controller.pause_trial(trial)

    def _quiet(self, tune_controller: Any, current: TuneTrial | None = None) -> bool:
        """Whether nothing will run unless the search algorithm proposes a trial: no trial but
        ``current`` trains or is pending, none was handed work it has not started, and ``current``
        (whose result this is) does not go on."""
        if current is not None and current.trial_id in self._where and self._status(current.trial_id) == "train":
            return False
        if any(t in self._trials and self._waiting(self._trials[t]) for t in self._queue):
            return False
        return not any(t is not current and self._executing(t) for t in tune_controller.get_trials())

    def _act(self, tune_controller: Any, current: TuneTrial | None = None) -> None:
        """Carry out the stream's decisions on every trial but ``current`` (it gets the return value of
        :meth:`on_trial_result`): hand out ready work, stop the losers that wait, give idle actors to
        the trials that need one. When nothing else runs and the search algorithm may still propose
        a trial, every trial idle on its actor is paused: if it proposes none, the cut made in
        :meth:`choose_trial_to_run` can only hand work to paused trials (it changes no trial itself)."""
        if self._acting:  # a trial this stops calls back (on_trial_remove): the loop below goes on
            return
        self._acting = True
        try:
            self._carry_out(tune_controller, current)
        finally:
            self._acting = False

    def _carry_out(self, tune_controller: Any, current: TuneTrial | None) -> None:
        self._grant(tune_controller)
        self._queue = [t for t in self._queue if t in self._trials and self._waiting(self._trials[t])]
        self._served = {t for t in self._served if t in self._trials and self._trials[t].status == TuneTrial.PENDING}
        for trial_id in self._members():
            trial = self._trials.get(trial_id)
            if trial is None or trial is current:
                continue
            if trial_id in self._idle:
                if trial.status != TuneTrial.RUNNING:
                    self._idle.discard(trial_id)
                elif self._status(trial_id) == "train" and self._handed(trial_id):
                    self._idle.discard(trial_id)
                    self._resume(tune_controller, trial)
                continue
            # A loser is stopped once paused, never while a checkpoint of it is being saved (a pause, or a
            # checkpoint it reported with its last result): Tune drops a save in flight when the trial stops, and
            # its latest checkpoint with it. It is stopped at a later callback (the winners of its rung train on).
            if self._status(trial_id) in ("stopped", "complete", "failed") and trial.status == TuneTrial.PAUSED:
                self._stop(tune_controller, trial)
        for needer, trial_id in self._handovers(tune_controller, current):
            self._served.add(needer.trial_id)
            self._pause(tune_controller, self._trials[trial_id])
        needed = bool(self._needing_actors(tune_controller, current))
        quiet = self._quiet(tune_controller, current) and not self._searcher_finished(tune_controller)
        for trial_id in sorted(self._idle):
            trial = self._trials[trial_id]
            if trial is current or trial.status != TuneTrial.RUNNING:
                continue
            status = self._status(trial_id)
            if status not in ("wait", "train") and not needed and not trial.is_saving:
                self._idle.discard(trial_id)
                self._stop(tune_controller, trial)
            elif quiet and status == "wait":
                self._pause(tune_controller, trial)

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
        concurrency slot back. A loser whose actor another trial needs is paused (its actor goes to
        Tune when its checkpoint is saved, by then promised to that trial) and stopped afterwards."""
        trial_id = trial.trial_id
        status = self._status(trial_id)
        if status == "train":
            self._start_next(trial_id)
            return TrialScheduler.CONTINUE
        if status == "wait":
            segment, index = self._locate(trial_id)
            if segment.score(index, len(self._rungs) - 1) is not None:
                return TrialScheduler.STOP  # complete at the last rung: nothing to wait for
            self._release(tune_controller, trial_id)
            if self._runnable(tune_controller, trial) or (self._quiet(tune_controller, trial)
                                                          and not self._searcher_finished(tune_controller)):
                self._paused.add(trial_id)
                self._pausing.add(trial_id)
                return TrialScheduler.PAUSE
            self._idle.add(trial_id)
            return TrialScheduler.NOOP
        if self._runnable(tune_controller, trial):  # hand its actor to a trial that needs one
            self._release(tune_controller, trial_id)
            self._handing.add(trial_id)
            self._pausing.add(trial_id)
            return TrialScheduler.PAUSE
        return TrialScheduler.STOP

    def _ended_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """Warn (once) about a trial that ended on its own before its next rung."""
        if not result or self._time_attr not in result:
            return
        elapsed = float(result[self._time_attr])
        segment, index = self._locate(trial_id)
        rung = segment.next_rung(index)
        if rung is None:
            return
        if elapsed >= self._rungs[rung]:  # past its rung, but no result there had the metric
            self._warn("sparse-end", f"trial {trial_id} ended at {self._time_attr}={elapsed:g}, past rung "
                                     f"{self._rungs[rung]}, without a result that has the metric {self._metric!r} "
                                     "since it passed the rung, so it left the cohort: report the metric at the "
                                     "rungs, or at least in the last result")
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

    def _heard(self, trial: TuneTrial) -> None:
        """Any callback: the state it was saved in is loaded, and the run moves (the guard rests)."""
        self._open(trial)
        self._stalled_since = None

    def _park(self, tune_controller: Any, trial: TuneTrial, status: str) -> None:
        """Give a trial that Tune is adding (restored, or requeued after its actor failed) ``status``
        before Tune can start it: PAUSED (it waits for its rung's decision, its checkpoint holds its
        result there) or TERMINATED (its rung was decided, and it lost)."""
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        if trial in getattr(controller, "_pending_trials", ()):  # requeued: Tune has filed it as pending
            if status == TuneTrial.TERMINATED:
                self._stop(tune_controller, trial)
            else:
                tune_controller._set_trial_status(trial, status)
            return
        trial.set_status(status)  # being added: Tune files it by the status it has when this returns
        if status == TuneTrial.TERMINATED:
            for slots in self._slots(tune_controller):
                slots.live.discard(trial.trial_id)

    def on_trial_add(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._heard(trial)
        trial_id = trial.trial_id
        self._trials[trial_id] = trial
        recovering = trial_id in self._recovering
        self._recovering.discard(trial_id)
        if trial_id not in self._where:
            self._limit_admission(tune_controller, trial)
            self._arrive(trial_id)
            self._tags[trial_id] = str(trial.experiment_tag)
            if trial.status == TuneTrial.PENDING:
                self._start_next(trial_id)
            self._act(tune_controller)  # an idle actor may be its
            self._save()
            return
        # A trial the stream knows: restored by Tuner.restore, or requeued after its actor failed. It
        # restarts from its latest checkpoint; if it lost its rung it ends, and if that checkpoint
        # already holds every rung it reported and it must wait, it is parked instead of training past
        # its rung.
        if trial.status not in (TuneTrial.PENDING, TuneTrial.PAUSED):
            return
        checkpoint = trial.latest_checkpoint_result
        restored = float(checkpoint.metrics.get(self._time_attr, 0.0)) if checkpoint is not None else 0.0
        status = self._status(trial_id)
        if status in ("stopped", "complete", "failed"):
            self._park(tune_controller, trial, TuneTrial.TERMINATED)
        elif status == "wait" and restored >= self._reached(trial_id):
            self._park(tune_controller, trial, TuneTrial.PAUSED)
        elif recovering:
            logger.info("SynchronousSHAScheduler: trial %s rejoins its rung from %s=%g", trial_id,
                        self._time_attr, restored)
        if trial.status == TuneTrial.PENDING and status == "train":
            self._start_next(trial_id)

    def on_trial_result(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> str:
        self._heard(trial)
        self._pausing.discard(trial.trial_id)
        self._record(tune_controller, trial, result)
        self._close_if_search_ended(tune_controller)
        self._act(tune_controller, current=trial)
        action = self._action(tune_controller, trial)
        self._save()
        return action

    def _ended(self, tune_controller: Any, trial: TuneTrial) -> None:
        """Bookkeeping for a trial that ended, after the stream heard of it."""
        trial_id = trial.trial_id
        for waiting in (self._idle, self._pausing, self._handing, self._paused):
            waiting.discard(trial_id)
        self._queue = [t for t in self._queue if t != trial_id]
        self._close_if_search_ended(tune_controller)
        self._hand_over(tune_controller, trial_id)
        self._act(tune_controller, current=trial)
        self._check_best(tune_controller, trial)
        self._save()

    def on_trial_complete(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> None:
        self._heard(trial)
        trial_id = trial.trial_id
        if trial_id not in self._where:
            return
        if result and self._time_attr in result:
            self._record(tune_controller, trial, result, fresh=False)
        status = self._status(trial_id)
        # A trial that ends on its own (done, or a Tune stopper) before its rung leaves the cohort; one
        # that ended at the last rung keeps its place there.
        segment, index = self._locate(trial_id)
        last_rung_reported = segment.score(index, len(self._rungs) - 1) is not None
        if status == "train" or (status == "wait" and not last_rung_reported):
            self._ended_early(trial_id, result)
            self._leave(trial_id)
        self._ended(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._heard(trial)
        trial_id = trial.trial_id
        if trial_id not in self._where:
            return
        if self._status(trial_id) in ("train", "wait"):  # stopped by someone else
            self._leave(trial_id)
        self._ended(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: TuneTrial) -> None:
        self._heard(trial)
        trial_id = trial.trial_id
        if trial_id not in self._where:
            return
        if trial.status == TuneTrial.ERROR and trial.should_recover():
            # Tune is requeueing it (FailureConfig(max_failures)): it restores from its last checkpoint
            # and is added again.
            self._recovering.add(trial_id)
            return
        if self._status(trial_id) in ("train", "wait"):
            self._leave(trial_id)
        self._ended(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> TuneTrial | None:
        """The paused trial that the stream handed its next work first (a promoted trial of the oldest
        cohort first), else the first pending trial whose actor is not starting (a free actor goes to
        it, rather than to one Tune picks), else None.

        Two events that close a cohort have no callback, and this is where they can be seen without a
        race. ``TuneController.step()`` asks the search algorithm for trials
        (``_maybe_update_trial_queue``: whenever it is not finished and fewer trials than its limit are
        pending; a new trial reaches ``on_trial_add`` at once) and then calls this method
        (``_maybe_add_actors``), before it handles any result; results, completions and errors reach
        the other callbacks only after that, in ``_actor_manager.next()``. So when no trial is pending
        here, the search algorithm has just been asked, after every event so far, and

        - if it is finished (it may have found so only now), the open segment ends: its last cohort
          keeps the trials it has;
        - if every live trial waits at a rung and it proposed none (its own concurrency limit, or a
          searcher waiting for results), it would propose none in any later step either: what it
          knows changes only through Tune's callbacks, and none comes before a cohort is decided.
          The open cohort is cut, decided with the trials it has, and the next trial starts a new one.

        Ray asks this method to be idempotent: it changes no trial. A cut (or an end) only updates
        the stream and hands the winners the concurrency slots they will train in; it is made once,
        and asking again returns the same trial. The trials it lets go on are paused ones (the
        callback that left every trial waiting paused the idle ones), so Tune runs them from here;
        the losers are stopped at the next callback. Without either event, a stretch of
        ``GUARD_SECONDS`` in which no trial trains or starts while trials wait raises an error: a
        last guard against a hang, never a decision.
        """
        if not self._segments:
            return super().choose_trial_to_run(tune_controller)
        if self._close_if_search_ended(tune_controller) or self._cut_if_nothing_comes(tune_controller):
            self._grant(tune_controller, resume=False)
            self._save()
            self._stalled_since = None
        else:
            self._guard(tune_controller)
        for trial_id in self._queue:
            trial = self._trials.get(trial_id)
            if trial is not None and trial.status == TuneTrial.PAUSED:
                return trial
        for trial in tune_controller.get_trials():  # first-rung work, in the stream's (arrival) order
            if trial.status == TuneTrial.PENDING and not self._actor_starting(tune_controller, trial):
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
        Choosing another pending trial also keeps Tune from giving the free actor to one it picks
        itself, which may be that one.
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

    def _stalled(self, tune_controller: Any) -> bool:
        """Whether the run cannot move on by itself: live trials, none training or starting, and none
        pending for cluster resources that no idle trial of this run holds."""
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        resetting = getattr(controller, "_resetting_trials", ())
        live = idle = pending = False
        for trial in tune_controller.get_trials():
            if trial.status in (TuneTrial.TERMINATED, TuneTrial.ERROR):
                continue
            live = True
            if trial.status == TuneTrial.RUNNING:
                if trial.trial_id not in self._idle:
                    return False  # training, saving or restoring
                idle = True
            elif trial.status == TuneTrial.PENDING:
                if trial in resetting or self._has_actor(controller, trial):
                    return False  # its actor is starting
                pending = True
            elif trial.trial_id in self._queue:
                return False  # chosen to run next
        return live and (idle or not pending)

    def _guard(self, tune_controller: Any) -> None:
        """The last guard: raise, rather than hang, when the run has stalled for ``GUARD_SECONDS``."""
        if not self._stalled(tune_controller):
            self._stalled_since = None
            return
        now = time.monotonic()
        if self._stalled_since is None:
            self._stalled_since = now
        elif now - self._stalled_since >= GUARD_SECONDS:
            waiting = [t.trial_id for t in tune_controller.get_trials()
                       if t.status not in (TuneTrial.TERMINATED, TuneTrial.ERROR)]
            raise RuntimeError(f"SynchronousSHAScheduler cannot go on: for {GUARD_SECONDS:g} s no trial trained or "
                               f"started while trials {', '.join(waiting[:5])} waited, and no event could close "
                               f"their cohort (a bug: please report it with this state: {self.debug_string()})")

    def debug_string(self) -> str:
        views = self._views()
        if not views:
            return "Using synchronous successive halving (no trials yet)."
        shown = []
        for index, (ledger, early, closed) in enumerate(views):
            parts = []
            for rung, budget in enumerate(self._rungs):
                cohort = ledger.cohort(rung)
                if not cohort and rung > 0:
                    break
                held = len(early) if rung == 0 else 0
                parts.append(f"{budget:g}: {len(ledger.scores(rung)) + held}/{len(cohort)}")
            shown.append(f"cohort {index}{'' if closed else ' (open)'} {', '.join(parts)}")
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
