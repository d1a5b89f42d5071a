"""A backend that runs the real scheduling core in simulated time, over recorded trials.

Measuring a scheduler at 256 workers needs 256 workers, unless the trials are replayed: a recorded
pool (:mod:`eve_search.engine.pool`) holds each configuration's score at every rung budget and the
seconds that training took, so the simulator can play the work that
:class:`~eve_search.engine.stream.CohortStream` hands out on any number of workers, advancing a
simulated clock from one finished piece of work to the next (the way Syne Tune's simulator backend
keeps time: an event queue ordered by simulated finish time, no sleeping). The decisions come from
the same code that the in-process engine, the worker pool, Ray and Optuna run, so a table at 256
simulated workers is evidence about the real scheduler; only the training is replayed.

Idle workers are always offered work first, lowest worker number first, so a simulation is a pure
function of its inputs; ``jitter`` scales every duration by a seeded random factor, to show that the
decisions do not depend on timing.

Example:
    >>> from eve_search.engine.stream import CohortStream
    >>> seconds = {0: 1.0, 1: 2.0, 2: 3.0, 3: 1.0}  # each configuration's seconds per rung
    >>> result = simulate(CohortStream(4, 2, rungs=(1, 2)), workers=2,
    ...                   duration=lambda work: seconds[work.index],
    ...                   score=lambda index, rung: float(index))
    >>> result.winner, result.wall, result.work
    (3, 6.0, 10.0)
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eve_search._checks import InputError, check_int, options_or_keywords
from eve_search.engine.ledger import RungDecision
from eve_search.engine.pool import RecordedPool
from eve_search.engine.stream import CohortStream, Work

__all__ = ["PoolSearch", "Simulation", "pool_duration", "pool_score", "simulate", "simulate_pool"]


@dataclass
class Simulation:
    """What a simulated search did.

    Attributes:
        workers: simulated workers.
        wall: simulated seconds from the first piece of work to the last.
        work: worker-seconds spent on work whose result was used.
        dropped: worker-seconds spent on speculative work that its rung's decision threw away.
        units: charged units of the used work (each piece is its rung's budget increment).
        dropped_units: charged units of the dropped work (a cancelled piece counts its share).
        busy: per worker, the seconds it spent working.
        decisions: every ``(cohort, RungDecision)``, in the order they were made.
        winner: the configuration the search picked (None: none completed).
        trained: pieces of work run (trial-rungs, speculative ones included).

    Example:
        >>> Simulation(workers=2, wall=4.0, work=6.0).utilisation
        0.75
    """

    workers: int
    wall: float = 0.0
    work: float = 0.0
    dropped: float = 0.0
    units: float = 0.0
    dropped_units: float = 0.0
    busy: list[float] = field(default_factory=list)
    decisions: list[tuple[int, RungDecision]] = field(default_factory=list)
    winner: int | None = None
    trained: int = 0

    @property
    def utilisation(self) -> float:
        """Busy worker-seconds (dropped work included) over wall x workers."""
        return (self.work + self.dropped) / (self.wall * self.workers) if self.wall > 0 else 0.0

    @property
    def useful_utilisation(self) -> float:
        """Worker-seconds of used work over wall x workers."""
        return self.work / (self.wall * self.workers) if self.wall > 0 else 0.0

    def decision_summary(self) -> list[tuple[int, int, tuple[Any, ...], tuple[Any, ...]]]:
        """The decisions as sorted plain tuples (cohort, rung, promoted, stopped): equal for two
        searches that decided alike, whatever the order in which the decisions were made."""
        return sorted((c, d.rung, tuple(d.promoted), tuple(d.stopped)) for c, d in self.decisions)


def simulate(stream: CohortStream, *, workers: int, duration: Callable[[Work], float],
             score: Callable[[int, int], float], jitter: float = 0.0, jitter_seed: int = 0) -> Simulation:
    """Run ``stream`` to its end on ``workers`` simulated workers.

    Args:
        stream: a fresh scheduling core.
        workers: how many workers take work at once.
        duration: the seconds a piece of work takes (for work at rung r: training from rung r - 1's
            budget to rung r's).
        score: the score of configuration ``index`` at rung ``rung``.
        jitter: scale every duration by ``exp(jitter * N(0, 1))`` (0: as recorded).
        jitter_seed: the seed of those factors.

    Returns:
        A :class:`Simulation`.

    Example:
        >>> from eve_search.engine.stream import CohortStream
        >>> result = simulate(CohortStream(3, rungs=(1,)), workers=2, duration=lambda work: 1.0,
        ...                   score=lambda index, rung: -index)
        >>> result.wall, result.winner, result.busy
        (2.0, 0, [2.0, 1.0])
    """
    check_int("workers", workers, 1)
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter <= 10:
        raise InputError(f"Invalid jitter: {jitter!r} (expected a number in [0, 10])")
    rng = random.Random(jitter_seed)
    rungs = stream.rungs
    increment = {r: rungs[r] - (rungs[r - 1] if r else 0) for r in range(len(rungs))}
    result = Simulation(workers=workers, busy=[0.0] * workers)
    free = list(range(workers))
    events: list[tuple[float, int, int, Work, float]] = []  # (finish, sequence, worker, work, start)
    live: dict[tuple[int, int], tuple[int, float, float]] = {}  # (index, rung) -> (worker, start, duration)
    held: dict[tuple[int, int], float] = {}  # finished speculative pieces, by their seconds
    sequence = itertools.count()
    now = 0.0
    while True:
        while free:
            work = stream.next_work()
            if work is None:
                break
            worker = heapq.heappop(free)
            stream.start(work)
            seconds = max(0.0, float(duration(work)))
            if jitter:
                seconds *= math.exp(jitter * rng.gauss(0.0, 1.0))
            heapq.heappush(events, (now + seconds, next(sequence), worker, work, now))
            live[(work.index, work.rung)] = (worker, now, seconds)
            result.trained += 1
        if not events:
            break
        finish, _, worker, work, start = heapq.heappop(events)
        key = (work.index, work.rung)
        if live.get(key, (None,))[0] != worker:
            continue  # cancelled: its worker was freed then
        del live[key]
        now = finish
        result.busy[worker] += finish - start
        result.decisions.extend(stream.report(work.index, work.rung, score(work.index, work.rung)))
        heapq.heappush(free, worker)
        if work.speculative:
            held[key] = finish - start  # used or dropped: known once its rung is decided
        else:
            result.work += finish - start
            result.units += increment[work.rung]
        for cancelled in stream.cancelled():
            ckey = (cancelled.index, cancelled.rung)
            if ckey in live:
                other, begun, seconds = live.pop(ckey)
                result.busy[other] += now - begun
                result.dropped += now - begun
                result.dropped_units += increment[cancelled.rung] * ((now - begun) / seconds if seconds else 1.0)
                heapq.heappush(free, other)
        result.wall = now
    for (index, rung), seconds in held.items():
        if stream.ledger(stream.cohort_of(index)).score(index, rung) is not None:
            result.work += seconds
            result.units += increment[rung]
        else:
            result.dropped += seconds
            result.dropped_units += increment[rung]
    result.winner = stream.winner()
    return result


def pool_score(pool: RecordedPool, trainer: str, rungs: tuple[int, ...],
               order: list[int] | None = None) -> Callable[[int, int], float]:
    """The recorded score of search position ``index`` (``order[index]`` in the pool) at rung ``rung``.

    Args:
        pool: the recorded pool.
        trainer: the trainer whose trajectories are replayed.
        rungs: the search's rung budgets (each recorded in the pool).
        order: search position -> pool configuration (default: the pool's order).

    Returns:
        ``score(index, rung)``, as :func:`simulate` takes it.

    Example:
        >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
        >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1, 2),
        ...                     configs=[{}, {}], referee="adam",
        ...                     trainers={"adam": TrainerRecord([[0.1, 0.2], [0.3, 0.4]], [[0, 0], [0, 0]],
        ...                                                     [[1, 2], [1, 3]])})
        >>> pool_score(pool, "adam", (1, 2), order=[1, 0])(0, 1)
        0.4
    """
    positions = pool.rung_positions(rungs)
    record = pool.trainers[trainer].score
    order = list(range(pool.size)) if order is None else order
    return lambda index, rung: record[order[index]][positions[rung]]


def pool_duration(pool: RecordedPool, trainer: str, rungs: tuple[int, ...],
                  order: list[int] | None = None) -> Callable[[Work], float]:
    """The recorded seconds of a piece of work (training from the previous rung's budget to its rung's).

    Args:
        pool: the recorded pool.
        trainer: the trainer whose trajectories are replayed.
        rungs: the search's rung budgets (each recorded in the pool).
        order: search position -> pool configuration (default: the pool's order).

    Returns:
        ``duration(work)``, as :func:`simulate` takes it.

    Example:
        >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
        >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1, 2),
        ...                     configs=[{}], referee="adam",
        ...                     trainers={"adam": TrainerRecord([[0.1, 0.2]], [[0, 0]], [[1.0, 2.5]])})
        >>> pool_duration(pool, "adam", (1, 2))(Work(0, 1))
        1.5
    """
    positions = pool.rung_positions(rungs)
    order = list(range(pool.size)) if order is None else order
    return lambda work: pool.segment_seconds(trainer, order[work.index], positions[work.rung],
                                             positions[work.rung - 1] if work.rung else None)


@dataclass(frozen=True, kw_only=True)
class PoolSearch:
    """The search :func:`simulate_pool` replays over a recorded pool: workers, the stream of cohorts,
    the search order and the jitter; it takes this object or its fields as keywords (not both).

    Args:
        workers: simulated workers.
        configs: configurations searched.
        cohort_size: configurations per cohort (None: one cohort).
        rungs: the rung budgets (default: the pool's).
        fraction: the promoted share of each rung.
        speculate: train an open rung's leaders ahead on idle workers.
        order: search position -> pool configuration.
        jitter, jitter_seed: as for :func:`simulate`.
        cost: a pool configuration's relative cost per unit (the engine uses its model's parameter
            count), the stream's hint for ordering work (see :class:`~eve_search.engine.stream.CohortStream`).

    Example:
        >>> PoolSearch(workers=4, configs=48, cohort_size=12).fraction == 1 / 3
        True
    """

    workers: int
    configs: int
    cohort_size: int | None = None
    rungs: tuple[int, ...] | None = None
    fraction: float = 1 / 3
    speculate: bool = False
    order: list[int] | None = None
    jitter: float = 0.0
    jitter_seed: int = 0
    cost: Callable[[int], float] | None = None


def simulate_pool(pool: RecordedPool, trainer: str, search: PoolSearch | None = None,
                  **keywords: Any) -> Simulation:
    """:func:`simulate` over a recorded pool: search position ``i`` is the pool's configuration
    ``order[i]`` (default: the pool's order); ``configs`` of them in cohorts of ``cohort_size``.

    Args:
        pool: the recorded pool.
        trainer: the trainer whose trajectories are replayed.
        search: the search replayed (:class:`PoolSearch`).
        **keywords: fields of :class:`PoolSearch` (``workers``, ``configs``, ``cohort_size``, ``rungs``,
            ``fraction``, ``speculate``, ``order``, ``jitter``, ``jitter_seed``, ``cost``) instead of
            ``search``.

    Returns:
        The :class:`Simulation`.

    Example:
        >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
        >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1,),
        ...                     configs=[{}, {}], referee="adam",
        ...                     trainers={"adam": TrainerRecord([[0.1], [0.3]], [[0], [0]], [[1.0], [2.0]])})
        >>> simulate_pool(pool, "adam", workers=2, configs=2).winner
        1
    """
    s = options_or_keywords("simulate_pool", PoolSearch, search, keywords)
    configs, order, cost = s.configs, s.order, s.cost
    rungs = pool.budgets if s.rungs is None else tuple(s.rungs)
    if configs > (pool.size if order is None else len(order)):
        raise InputError(f"Invalid configs: {configs} (the pool holds {pool.size} configurations)")
    searched = list(range(pool.size)) if order is None else order
    hint = None if cost is None else (lambda index: cost(searched[index]))
    stream = CohortStream(configs, s.cohort_size, rungs=rungs, fraction=s.fraction, mode=pool.mode,
                          speculate=s.speculate, cost=hint)
    return simulate(stream, workers=s.workers, duration=pool_duration(pool, trainer, rungs, order),
                    score=pool_score(pool, trainer, rungs, order), jitter=s.jitter, jitter_seed=s.jitter_seed)
