"""The scheduler: :class:`SynchronousSHAScheduler`, Ray Tune's ``TrialScheduler`` for synchronous
successive halving: its arguments, its state and its public methods. Its parts live beside it: Tune's
callbacks (:mod:`._callbacks`), the cohorts (:mod:`._cohorts`), the concurrency slots (:mod:`._slots`),
the actors (:mod:`._actors`), the events that close a cohort (:mod:`._closing`) and its warnings
(:mod:`._warnings`); every internal of Tune it needs is in :mod:`._compat`.

Within Ray's scheduler contract: the callbacks decide (``on_trial_result`` returns CONTINUE, PAUSE,
STOP or NOOP; losers are stopped and idle actors handed over from the callbacks), and
``choose_trial_to_run`` changes no trial and returns the same trial when asked again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray.tune.experiment import Trial as TuneTrial
from ray.tune.schedulers import FIFOScheduler

from eve_search._checks import InputError
from eve_search.engine.ledger import RungDecision, RungLedger, check_fraction, rank_order
from eve_search.integrations._ray._actors import ActorKeeping
from eve_search.integrations._ray._callbacks import Callbacks
from eve_search.integrations._ray._closing import ClosingEvents
from eve_search.integrations._ray._cohorts import CohortBook
from eve_search.integrations._ray._options import (
    check_cohort_size,
    check_keys,
    check_mode,
    promoted_fraction,
    scheduler_rungs,
)
from eve_search.integrations._ray._segment import Segment
from eve_search.integrations._ray._slots import SlotKeeping
from eve_search.integrations._ray._warnings import Warnings

__all__ = ["SynchronousSHAScheduler"]


class SynchronousSHAScheduler(Callbacks, CohortBook, SlotKeeping, ActorKeeping, ClosingEvents, Warnings,
                              FIFOScheduler):
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

    @property
    def supports_buffered_results(self) -> bool:
        return False  # one result at a time: a trial must stop at its rung, not a few results past it

    def __init__(self, time_attr: str = "training_iteration", rungs: Sequence[int] | None = None,
                 fraction: float | None = None, metric: str | None = None, mode: str | None = None, *,
                 grace_period: int | None = None, reduction_factor: float | None = None,
                 max_t: int | None = None, cohort_size: int | None = None) -> None:
        super().__init__()
        check_keys(time_attr, metric)
        self._mode = check_mode(mode)
        self._cohort_size = check_cohort_size(cohort_size)
        fraction = promoted_fraction(fraction, reduction_factor)
        self._rungs = scheduler_rungs(time_attr, rungs, fraction, reduction_factor=reduction_factor,
                                      grace_period=grace_period, max_t=max_t)
        self._time_attr = time_attr
        self._fraction = check_fraction(fraction)
        self._metric = metric
        self._reset()

    def _reset(self) -> None:
        self._segments: list[Segment] = []  # runs of cohorts, each one CohortStream over its trials
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
        self._last_event = time.monotonic()  # the last callback or closing event (the guard's clock)
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
        raise InputError(f"Invalid results: {type(results).__name__} without trial {winner} (expected the ResultGrid "
                         "of the run this scheduler ran, from tuner.fit())")

    def choose_trial_to_run(self, tune_controller: Any) -> TuneTrial | None:
        """The paused trial that the stream handed its next work first (a promoted trial of the oldest
        cohort first), else the first pending trial whose actor is not starting (a free actor goes to
        it, rather than to one Tune picks), else None.

        Ray asks this method to be idempotent, and it is: it pauses, stops or starts no trial, and
        asked again it returns the same trial. It changes nothing at all unless one of the two events
        that close a cohort without a callback of Tune's is due; it then records it, once:

        ``TuneController.step()`` asks the search algorithm for trials (whenever it is not finished
        and fewer trials than its limit are pending; a new trial reaches ``on_trial_add`` at once) and
        then calls this method, before it handles any result. So when no trial is pending here, the
        search algorithm has just been asked, after every event so far, and

        - if it is finished (it may have found so only now), the open segment ends: its last cohort
          keeps the trials it has;
        - if every live trial waits at a rung and it proposed none (its own concurrency limit, or a
          searcher waiting for results), it would propose none in any later step either: what it
          knows changes only through Tune's callbacks, and none comes before a cohort is decided.
          The open cohort is cut, decided with the trials it has, and the next trial starts a new one.

        Recording it decides the cohort's rung in the stream, gives the winners (paused trials: the
        callback that left every trial waiting paused the idle ones) the concurrency slots they will
        train in, and saves the state; the losers are stopped at the next callback. Without either
        event, a stretch of ``GUARD_SECONDS`` in which no trial trains or starts and nothing happens
        raises an error: a last guard against a hang, never a decision.
        """
        if not self._segments:
            return super().choose_trial_to_run(tune_controller)
        if not self._see_closing_events(tune_controller):
            self._guard(tune_controller)
        return self._trial_to_run(tune_controller)
