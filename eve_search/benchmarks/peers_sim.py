"""Asynchronous peers of the stream of synchronous cohorts, replayed in the same simulated time.

:func:`~eve_search.engine.simulator.simulate_pool` runs our scheduling core over a recorded pool
(:mod:`eve_search.engine.pool`) on simulated workers. To compare it with what users run today, this
module drives the peers' real decision code over the same pool, the same workers and the same budget
in charged units, and returns the same :class:`~eve_search.engine.simulator.Simulation`:

* :func:`simulate_optuna`: an Optuna study (``InMemoryStorage``) with a given pruner, e.g.
  ``SuccessiveHalvingPruner`` (asynchronous successive halving, Li et al., "A System for Massively
  Parallel Hyperparameter Tuning", MLSys 2020) or ``HyperbandPruner`` (Li et al., JMLR 2018), through
  Optuna's documented ask-and-tell interface: ``study.ask()``, ``trial.report(score, step=budget)``,
  ``trial.should_prune()``, ``study.tell(...)``.
* :func:`simulate_ray_asha`: Ray Tune's ``ASHAScheduler`` without a Tune run, through the methods a
  ``TuneController`` calls (``on_trial_add``, ``on_trial_result``, ``on_trial_complete``; read from
  ``ray/tune/schedulers/async_hyperband.py`` and ``ray/tune/execution/tune_controller.py`` of Ray
  2.60). The scheduler reads nothing of a trial but its ``trial_id`` and ignores the controller, so a
  one-field stand-in is the whole Tune trial it needs.

How a run goes (both peers): each simulated worker that is idle takes the next search position ``i``
(configuration ``order[i]`` of the pool) as a new trial and trains it rung by rung; a rung's segment
takes the pool's recorded seconds between the two budgets (:meth:`RecordedPool.segment_seconds`,
scaled by ``exp(jitter * N(0, 1))`` as in :func:`~eve_search.engine.simulator.simulate`). At each rung
budget the trial reports its recorded validation score and the peer decides there and then whether it
goes on; a trial that stops frees its worker. Events are taken in simulated-time order from a heap
(ties: the order their work started) and idle workers take work lowest worker number first, the way
Syne Tune's simulator backend keeps time, so a run is a pure function of its inputs.

Budget rule: a worker starts a segment (a new trial's first rung, or the next rung of a trial the peer
let go on) only while the charged units started so far (each started segment counts its rung's
budget increment) are below ``units``, so the units spent exceed ``units`` by at most one segment
per worker, and the searches compared spend the same compute (a trial the budget stops keeps the
rung it reached, as when a Tune run's budget ends). The search also ends when the search positions
run out.

The pick (:attr:`Simulation.winner`, a search position): among the trials that reached the highest
budget any trial reached, the best score there, ties to the lower search position
(:func:`~eve_search.engine.ledger.rank_order`). A trial that reported at that budget counts even if
the peer stopped it there.

In the result, ``dropped`` and ``dropped_units`` are 0 (no work is thrown away: a stopped trial's
last segment is what the decision was made on), and ``decisions`` holds one ``(0, RungDecision)``
per rung any trial reached, made up at the end: the positions that went on from that rung (best
first) and those that ended there (stopped, or at the last rung completed). Asynchronous peers make
these decisions one trial at a time; the summary lets :meth:`Simulation.decision_summary` compare
them with each other and with the stream.

Example:
    >>> import optuna
    >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
    >>> scores = [[0.5, 0.55], [0.7, 0.5], [0.6, 0.65], [0.65, 0.9]]
    >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1, 3),
    ...                     configs=[{"k": k} for k in range(4)], referee="adam",
    ...                     trainers={"adam": TrainerRecord(score=scores, test=scores, seconds=[[1.0, 3.0]] * 4)})
    >>> sha = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    >>> result = simulate_optuna(pool, "adam", pruner=sha, workers=2, rungs=(1, 3), units=100)
    >>> result.winner, result.wall, result.units  # 1 is pruned at budget 3, 2 and 3 at budget 1
    (0, 4.0, 8.0)
"""

from __future__ import annotations

import copy
import heapq
import itertools
import math
import operator
import random
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from eve_search._checks import InputError, check_int, options_or_keywords
from eve_search.engine.ledger import RungDecision, check_rungs, rank_order
from eve_search.engine.pool import RecordedPool
from eve_search.engine.simulator import Simulation

__all__ = ["Replay", "simulate_optuna", "simulate_ray_asha"]

STUDY_NAME = "eve-search-peers"
"""The name of every simulated Optuna study. ``HyperbandPruner`` puts a trial in a bracket by a hash of
the study's name and the trial's number, so a fixed name keeps a run a function of its inputs."""

TIME_ATTR = "eval_cost"
"""The result key that carries a rung's budget to Ray's scheduler (as ``EveTrainable`` reports it)."""

REDUCTION_FACTOR = 3
"""Ray ASHA's reduction factor here: one third of a rung goes on, as in the stream's cohorts."""


@dataclass(frozen=True, kw_only=True)
class Replay:
    """How a peer's search is replayed over a recorded pool: :func:`simulate_optuna` and
    :func:`simulate_ray_asha` take this object or its fields as keywords (not both). The fields are
    checked when the replay starts.

    Args:
        workers: simulated workers.
        rungs: the budgets at which trials report, among the pool's recorded budgets.
        units: the budget in charged units (new trials start only while the units started are below it).
        order: search position ``i`` is the pool's configuration ``order[i]`` (None: the pool's order).
        jitter: scale every segment's seconds by ``exp(jitter * N(0, 1))`` (0: as recorded).
        jitter_seed: the seed of those factors.

    Example:
        >>> Replay(workers=2, rungs=(1, 3), units=100).jitter
        0.0
    """

    workers: int
    rungs: Sequence[int]
    units: float
    order: Sequence[int] | None = None
    jitter: float = 0.0
    jitter_seed: int = 0


@dataclass(frozen=True)
class _Setup:
    """The checked arguments of one simulated run."""

    pool: RecordedPool
    trainer: str
    workers: int
    rungs: tuple[int, ...]
    positions: tuple[int, ...]  # each rung's position among the pool's budgets
    units: float
    order: tuple[int, ...]
    jitter: float
    jitter_seed: int


class _Peer(Protocol):
    """What the event loop asks of a peer's decision code."""

    def start(self, position: int) -> Any:
        """A new trial for search position ``position``; returns its handle."""

    def result(self, handle: Any, rung: int, budget: int, score: float, last: bool) -> bool:
        """The trial reached ``budget`` with ``score``; True: it trains on to the next rung."""


def _check(pool: Any, trainer: Any, replay: Replay) -> _Setup:
    workers, rungs, units, order = replay.workers, replay.rungs, replay.units, replay.order
    jitter, jitter_seed = replay.jitter, replay.jitter_seed
    if not isinstance(pool, RecordedPool):
        raise InputError(f"Invalid pool: {reprlib.repr(pool)} (expected a RecordedPool)")
    if not isinstance(trainer, str) or trainer not in pool.trainers:
        raise InputError(f"Invalid trainer: {trainer!r} (expected one of the pool's trainers: "
                         f"{', '.join(sorted(pool.trainers))})")
    workers = check_int("workers", workers, 1)
    rungs = check_rungs(rungs)
    positions = tuple(pool.rung_positions(rungs))
    if isinstance(units, bool) or not isinstance(units, (int, float)) or not math.isfinite(units) or units <= 0:
        raise InputError(f"Invalid units: {units!r} (expected a positive number of charged units)")
    if order is None:
        indices: tuple[int, ...] = tuple(range(pool.size))
    else:
        expected = f"(expected configuration indices in [0, {pool.size}); one may repeat, a search drawn with replacement)"
        try:
            if isinstance(order, (str, bytes)) or any(isinstance(i, bool) for i in order):
                raise TypeError
            indices = tuple(operator.index(i) for i in order)
        except TypeError:
            raise InputError(f"Invalid order: {reprlib.repr(order)} {expected}") from None
        if any(not 0 <= i < pool.size for i in indices):
            raise InputError(f"Invalid order: {reprlib.repr(order)} {expected}")
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter <= 10:
        raise InputError(f"Invalid jitter: {jitter!r} (expected a number in [0, 10])")
    if isinstance(jitter_seed, bool) or not isinstance(jitter_seed, int):
        raise InputError(f"Invalid jitter_seed: {jitter_seed!r} (expected an int)")
    return _Setup(pool, trainer, workers, rungs, positions, float(units), indices, float(jitter), jitter_seed)


def _run(setup: _Setup, peer: _Peer) -> Simulation:
    """Play ``peer``'s decisions over ``setup``'s pool in simulated time (see the module's docstring)."""
    pool, trainer, rungs, positions, order = setup.pool, setup.trainer, setup.rungs, setup.positions, setup.order
    increment = [budget - (rungs[r - 1] if r else 0) for r, budget in enumerate(rungs)]
    last = len(rungs) - 1
    rng = random.Random(setup.jitter_seed)
    result = Simulation(workers=setup.workers, busy=[0.0] * setup.workers)
    free = list(range(setup.workers))  # a heap: the lowest idle worker takes work first
    # (finish, sequence, worker, position, rung, start, handle): ties in time go to the work started first
    events: list[tuple[float, int, int, int, int, float, Any]] = []
    sequence = itertools.count()
    started = 0.0  # charged units of every segment started
    scores: list[dict[int, float]] = [{} for _ in rungs]  # per rung, position -> score reported there
    went_on: list[set[int]] = [set() for _ in rungs]
    now = 0.0

    def begin(worker: int, position: int, rung: int, handle: Any) -> None:
        nonlocal started
        seconds = max(0.0, pool.segment_seconds(trainer, order[position], positions[rung],
                                                positions[rung - 1] if rung else None))
        if setup.jitter:
            seconds *= math.exp(setup.jitter * rng.gauss(0.0, 1.0))
        heapq.heappush(events, (now + seconds, next(sequence), worker, position, rung, now, handle))
        started += increment[rung]
        result.trained += 1

    taken = 0  # search positions handed out
    while True:
        while free and taken < len(order) and started < setup.units:
            begin(heapq.heappop(free), taken, 0, peer.start(taken))
            taken += 1
        if not events:
            break
        now, _, worker, position, rung, start, handle = heapq.heappop(events)
        result.busy[worker] += now - start
        result.work += now - start
        result.units += increment[rung]
        result.wall = now
        score = pool.score(trainer, order[position], positions[rung])
        scores[rung][position] = score
        if peer.result(handle, rung, rungs[rung], score, rung == last) and rung < last and started < setup.units:
            went_on[rung].add(position)
            begin(worker, position, rung + 1, handle)
        else:
            heapq.heappush(free, worker)
    reached = [r for r in range(len(rungs)) if scores[r]]
    for r in reached:
        ranked = rank_order(dict(sorted(scores[r].items())), pool.mode)
        decision = RungDecision(rung=r, budget=rungs[r], promoted=[p for p in ranked if p in went_on[r]],
                                stopped=sorted(set(scores[r]) - went_on[r]))
        result.decisions.append((0, decision))
    if reached:
        result.winner = rank_order(dict(sorted(scores[reached[-1]].items())), pool.mode)[0]
    return result


class _OptunaPeer:
    """An Optuna study driven by ask and tell: one trial per search position, in order."""

    def __init__(self, study: Any, trial_state: Any) -> None:
        self.study = study
        self.pruned = trial_state.PRUNED

    def start(self, position: int) -> Any:
        return self.study.ask()

    def result(self, handle: Any, rung: int, budget: int, score: float, last: bool) -> bool:
        handle.report(score, step=budget)
        if handle.should_prune():
            self.study.tell(handle, state=self.pruned)
            return False
        if last:
            self.study.tell(handle, score)
            return False
        return True


def simulate_optuna(pool: RecordedPool, trainer: str, replay: Replay | None = None, *, pruner: Any,
                    **keywords: Any) -> Simulation:
    """Replay an Optuna study with ``pruner`` over a recorded pool on ``workers`` simulated workers.

    The study (``optuna.create_study`` on an ``InMemoryStorage``, named :data:`STUDY_NAME`, directed
    by the pool's mode) gets one trial per search position through ``study.ask()``, in position order
    (trial number ``i`` is search position ``i``). At each rung budget the trial calls
    ``report(score, step=budget)`` and ``should_prune()``: pruned, ``study.tell(trial,
    state=TrialState.PRUNED)``; at the last rung, ``study.tell(trial, score)``. The pruner is copied
    first (Optuna's pruners keep state, e.g. Hyperband's brackets), so the caller's object is left as
    it was and the same arguments give the same run. Optuna's log is set to WARNING during the run.

    Args:
        pool: the recorded pool.
        trainer: which of the pool's trainers to replay.
        replay: workers, rungs, units, search order and jitter (:class:`Replay`).
        pruner: an ``optuna.pruners.BasePruner``, e.g.
            ``SuccessiveHalvingPruner(min_resource=rungs[0], reduction_factor=3)`` or
            ``HyperbandPruner(min_resource=rungs[0], max_resource=rungs[-1], reduction_factor=3)``.
        **keywords: fields of :class:`Replay` (``workers``, ``rungs``, ``units``, ``order``, ``jitter``,
            ``jitter_seed``) instead of ``replay``.

    Returns:
        A :class:`~eve_search.engine.simulator.Simulation`; its ``winner`` is a search position.

    Raises:
        InputError: an argument is invalid (one line naming it, its value and what was expected).

    Example:
        >>> import optuna
        >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
        >>> scores = [[0.5, 0.55], [0.7, 0.5], [0.6, 0.65], [0.65, 0.9]]
        >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1, 3),
        ...                     configs=[{"k": k} for k in range(4)], referee="adam",
        ...                     trainers={"adam": TrainerRecord(score=scores, test=scores, seconds=[[1.0, 3.0]] * 4)})
        >>> sha = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
        >>> result = simulate_optuna(pool, "adam", pruner=sha, workers=1, rungs=(1, 3), units=100)
        >>> result.decision_summary()  # 2 and 3 pruned at budget 1, 1 pruned at 3: 0 is picked
        [(0, 0, (1, 0), (2, 3)), (0, 1, (), (0, 1))]
        >>> result.winner, result.wall, result.units, round(result.utilisation, 2)
        (0, 8.0, 8.0, 1.0)
    """
    setup = _check(pool, trainer, options_or_keywords("simulate_optuna", Replay, replay, keywords))
    import optuna
    from optuna.trial import TrialState

    if not isinstance(pruner, optuna.pruners.BasePruner):
        raise InputError(f"Invalid pruner: {reprlib.repr(pruner)} (expected an optuna.pruners.BasePruner, e.g. "
                         "SuccessiveHalvingPruner or HyperbandPruner)")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), study_name=STUDY_NAME,
                                    sampler=optuna.samplers.RandomSampler(seed=0), pruner=copy.deepcopy(pruner),
                                    direction="maximize" if setup.pool.mode == "max" else "minimize")
        return _run(setup, _OptunaPeer(study, TrialState))
    finally:
        optuna.logging.set_verbosity(verbosity)


@dataclass(frozen=True)
class _TuneTrial:
    """The part of a Tune ``Trial`` that ``AsyncHyperBandScheduler`` reads: its id."""

    trial_id: str


class _RayPeer:
    """Ray Tune's ASHA, called as Tune's controller calls a scheduler (no controller, no actors)."""

    def __init__(self, scheduler: Any, metric: str, stop: str) -> None:
        self.scheduler = scheduler
        self.metric = metric
        self.stop = stop

    def start(self, position: int) -> Any:
        trial = _TuneTrial(trial_id=f"{position:06d}")
        self.scheduler.on_trial_add(None, trial)
        return trial

    def result(self, handle: Any, rung: int, budget: int, score: float, last: bool) -> bool:
        result = {TIME_ATTR: budget, self.metric: score, "trial_id": handle.trial_id}
        decision = self.scheduler.on_trial_result(None, handle, result)
        if decision == self.stop or last:  # Tune stops the trial (or it ends), then tells the scheduler
            self.scheduler.on_trial_complete(None, handle, result)
            return False
        return True


def simulate_ray_asha(pool: RecordedPool, trainer: str, replay: Replay | None = None, **keywords: Any) -> Simulation:
    """Replay Ray Tune's ``ASHAScheduler`` over a recorded pool on ``workers`` simulated workers.

    The scheduler is Ray's own, ``ASHAScheduler(time_attr="eval_cost", metric=pool.metric,
    mode=pool.mode, grace_period=rungs[0], max_t=rungs[-1], reduction_factor=3)`` (one bracket),
    driven without a Tune run the way Tune's controller drives it: ``on_trial_add`` when a worker takes
    a search position; ``on_trial_result`` with ``{"eval_cost": budget, metric: score}`` at each rung
    budget; when it answers STOP, or the last rung is reached, ``on_trial_complete`` with that result.
    ASHA's milestones are ``rungs[0] * 3**k`` below ``rungs[-1]``; a milestone between two rung budgets
    is judged at the first report past it (Ray compares ``eval_cost >= milestone``), and a report at
    ``rungs[-1]`` ends the trial. ``on_trial_add`` draws its bracket from NumPy's global generator
    (always bracket 0 here); that generator's state is put back afterwards.

    Args:
        pool: the recorded pool.
        trainer: which of the pool's trainers to replay.
        replay: workers, rungs, units, search order and jitter (:class:`Replay`).
        **keywords: fields of :class:`Replay` instead of ``replay``.

    Returns:
        A :class:`~eve_search.engine.simulator.Simulation`; its ``winner`` is a search position.

    Raises:
        InputError: an argument is invalid (one line naming it, its value and what was expected).

    Example:
        >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
        >>> scores = [[0.5, 0.55], [0.7, 0.5], [0.6, 0.65], [0.65, 0.9]]
        >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1, 3),
        ...                     configs=[{"k": k} for k in range(4)], referee="adam",
        ...                     trainers={"adam": TrainerRecord(score=scores, test=scores, seconds=[[1.0, 3.0]] * 4)})
        >>> result = simulate_ray_asha(pool, "adam", workers=1, rungs=(1, 3), units=100)
        >>> result.decision_summary()  # 2 is below the 2/3 quantile of (0.5, 0.7) at budget 1
        [(0, 0, (1, 3, 0), (2,)), (0, 1, (), (0, 1, 3))]
        >>> result.winner, result.wall, result.units
        (3, 10.0, 10.0)
    """
    setup = _check(pool, trainer, options_or_keywords("simulate_ray_asha", Replay, replay, keywords))
    import numpy as np
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    scheduler = ASHAScheduler(time_attr=TIME_ATTR, metric=setup.pool.metric, mode=setup.pool.mode,
                              grace_period=setup.rungs[0], max_t=setup.rungs[-1], reduction_factor=REDUCTION_FACTOR)
    state = np.random.get_state()
    try:
        return _run(setup, _RayPeer(scheduler, setup.pool.metric, TrialScheduler.STOP))
    finally:
        np.random.set_state(state)
