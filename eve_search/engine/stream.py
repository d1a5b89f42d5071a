"""The scheduling core of a search: a stream of synchronous cohorts that leaves no worker idle.

Synchronous successive halving decides each rung on the whole cohort, so a seed fixes the whole
search; its cost is the barrier, where the workers that finished early wait for the stragglers, and
the last rungs hold fewer trials than there are workers. A :class:`CohortStream` keeps the
synchronous decisions and removes the wait:

* the configurations are cut into cohorts of ``cohort_size`` in sampling order (configuration ``i``
  is in cohort ``i // cohort_size``), the same for any number of workers;
* each cohort is decided by its own :class:`~eve_search.engine.ledger.RungLedger`, exactly as one
  synchronous sweep of those configurations;
* a worker that would wait at a barrier takes other ready work (:meth:`CohortStream.next_work`): a
  promoted trial of the oldest cohort first, then a first-rung trial of the oldest cohort that still
  has one, opening the next cohort when no opened one has ready work;
* with ``speculate=True`` and no other ready work, a worker trains ahead one of the trials that lead
  the open rung so far, to the next rung's budget (the trial's next rung is what promotion would ask
  of it, so its score there does not depend on when it was trained). The rung's decision is still
  made on the scores at the rung's budget: a promoted trial keeps that work, a stopped one drops it.

No decision reads a clock, and the search ends at a count of cohorts (:func:`cohorts_within` turns a
budget in charged units into one), so the decisions and the winner are the same for 1 or 256
workers and for any order in which results arrive. The core only decides what runs next; the
in-process engine, the worker pool and the simulator (:mod:`eve_search.engine.simulator`) execute
it.

Example:
    >>> stream = CohortStream(configs=6, cohort_size=3, rungs=(1, 3))
    >>> stream.next_work()
    Work(index=0, rung=0, speculative=False)
    >>> for index in range(3):
    ...     stream.start(stream.next_work())
    >>> stream.next_work()  # cohort 0 trains, so the next worker opens cohort 1
    Work(index=3, rung=0, speculative=False)
    >>> for index, score in [(0, 0.5), (1, 0.9), (2, 0.7)]:
    ...     decided = stream.report(index, 0, score)
    >>> decided
    [(0, RungDecision(rung=0, budget=1, promoted=[1], stopped=[0, 2]))]
    >>> stream.next_work()  # the promoted trial of the older cohort goes first
    Work(index=1, rung=1, speculative=False)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from eve_search._checks import InputError, check_int
from eve_search.engine.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    RungDecision,
    RungLedger,
    check_fraction,
    check_rungs,
    promotion_count,
    rank_order,
    rung_sizes,
)

__all__ = ["CohortStream", "Work", "cohort_units", "cohorts_within"]


@dataclass(frozen=True)
class Work:
    """One item of work: train configuration ``index`` to rung ``rung``'s budget (continuing it from
    its previous rung), then report its score there.

    Attributes:
        index: the configuration's index in sampling order.
        rung: the rung to train to.
        speculative: trained ahead of its cohort's decision (see :class:`CohortStream`).

    Example:
        >>> Work(3, 1)
        Work(index=3, rung=1, speculative=False)
    """

    index: int
    rung: int
    speculative: bool = False


def cohort_units(size: int, rungs: Sequence[float] = DEFAULT_RUNGS, fraction: float = PROMOTED_FRACTION) -> int:
    """The charged units one cohort of ``size`` trials spends when none fails: each rung's trials
    times the budget it adds to them.

    Args:
        size: the cohort's configurations.
        rungs: the rung budgets.
        fraction: the promoted share of each rung.

    Returns:
        The units, a whole number.

    Example:
        >>> cohort_units(48)  # 48 x 100 + 16 x 200 + 6 x 600 + 2 x 1,800 + 1 x 300
        15500
    """
    rungs = check_rungs(rungs)
    sizes = rung_sizes(check_int("size", size, 1), rungs, check_fraction(fraction))
    return sum(n * (budget - earlier) for n, budget, earlier in zip(sizes, rungs, (0, *rungs[:-1]), strict=True))


def cohorts_within(units: float, cohort_size: int, rungs: Sequence[float] = DEFAULT_RUNGS,
                   fraction: float = PROMOTED_FRACTION) -> int:
    """How many whole cohorts fit in a budget of ``units`` charged units (at least one): the stop rule
    of a search bounded by compute, decided before it starts, so it does not depend on timing.

    Args:
        units: the budget in charged units.
        cohort_size: configurations per cohort.
        rungs: the rung budgets.
        fraction: the promoted share of each rung.

    Returns:
        The number of cohorts.

    Example:
        >>> cohorts_within(100_000, 48)
        6
    """
    if isinstance(units, bool) or not isinstance(units, (int, float)) or not math.isfinite(units) or units <= 0:
        raise InputError(f"Invalid units: {units!r} (expected a positive number of charged units)")
    return max(1, int(units // cohort_units(cohort_size, rungs, fraction)))


class CohortStream:
    """A stream of synchronous cohorts as a small state machine; no training, no clock, no I/O.

    An executor asks :meth:`next_work` (no side effects: asking twice gives the same answer), tells
    :meth:`start` when it hands that work to a worker, and :meth:`report` (or :meth:`fail`) when the
    work ends. :meth:`report` returns the rung decisions it made possible; :meth:`cancelled` lists the
    speculative work that a decision made useless. :meth:`state_dict` captures everything but the
    work in flight (a restarted executor hands that out again).

    Args:
        configs: how many configurations the search runs (indices ``0 .. configs - 1``).
        cohort_size: configurations per cohort (None: one cohort of all, today's synchronous SHA).
        rungs: cumulative rung budgets (see :func:`~eve_search.engine.ledger.check_rungs`).
        fraction: promoted share of each rung, in (0, 1].
        mode: ``"max"`` (a higher score is better) or ``"min"``.
        speculate: let idle workers train the leaders of an open rung ahead (see above).
        cost: a configuration's relative cost per unit (e.g. its model's parameter count): among the
            ready pieces of one rung, the costliest goes first. It orders work, never decides.

    Example:
        >>> stream = CohortStream(configs=2, rungs=(1, 2))
        >>> work = stream.next_work(); stream.start(work); stream.report(work.index, work.rung, 0.3)
        []
        >>> work = stream.next_work(); stream.start(work); stream.report(work.index, work.rung, 0.6)
        [(0, RungDecision(rung=0, budget=1, promoted=[1], stopped=[0]))]
        >>> stream.start(stream.next_work()); _ = stream.report(1, 1, 0.7)
        >>> stream.finished, stream.winner()
        (True, 1)
    """

    def __init__(self, configs: int | None, cohort_size: int | None = None, *, rungs: Sequence[float] = DEFAULT_RUNGS,
                 fraction: float = PROMOTED_FRACTION, mode: str = "max", speculate: bool = False,
                 cost: Callable[[int], float] | None = None) -> None:
        if configs is None and cohort_size is None:
            raise InputError("Invalid cohort_size: None (a search of unknown length needs a cohort size)")
        self.configs: int | None = None if configs is None else check_int("configs", configs, 1)
        self.cohort_size = configs if cohort_size is None else check_int("cohort_size", cohort_size, 1)
        self.rungs = check_rungs(rungs)
        self.fraction = check_fraction(fraction)
        self.mode = mode
        self.speculate = bool(speculate)
        self.cost = cost
        self.cohorts: int | None = None if configs is None else -(-configs // self.cohort_size)
        self._ledgers: list[RungLedger] = []  # one per opened cohort
        self._running: set[Work] = set()
        self._held: dict[tuple[int, int], float] = {}  # speculative results waiting for their rung's decision
        self._cancelled: set[Work] = set()  # dropped work in flight: its result is ignored when it comes
        self._to_cancel: list[Work] = []
        self._announced: list[int] = []  # per opened cohort, how many of its decisions were returned
        self._first_open = 0  # cohorts before it are finished
        self.dropped: list[Work] = []  # speculative work whose trial its rung stopped

    # Where things are -----------------------------------------------------------------------------

    def cohort_of(self, index: int) -> int:
        """The cohort of configuration ``index``."""
        return index // self.cohort_size

    def members(self, cohort: int) -> range:
        """The configuration indices of ``cohort``."""
        end = (cohort + 1) * self.cohort_size
        return range(cohort * self.cohort_size, end if self.configs is None else min(end, self.configs))

    def end(self, configs: int) -> list[tuple[int, RungDecision]]:
        """The search has ``configs`` configurations in all (a search of unknown length learns it when
        its searcher is finished): the last cohort may be smaller; its missing members leave it.
        Returns the decisions this made possible."""
        check_int("configs", configs, 0)
        started = max((w.index for w in self._running), default=-1)
        for ledger in self._ledgers:
            started = max([started, *(t for t in ledger.members if ledger.score(t, 0) is not None)])
        if configs <= started:
            raise ValueError(f"Invalid configs: {configs} (configuration {started} has already started)")
        if self.configs is not None and configs > self.configs:
            raise ValueError(f"Invalid configs: {configs} (expected at most this search's {self.configs})")
        self.configs = configs
        self.cohorts = -(-configs // self.cohort_size)
        made: list[tuple[int, RungDecision]] = []
        for cohort, ledger in enumerate(self._ledgers):
            gone = [t for t in ledger.members if t >= configs]
            for index in gone:
                ledger.fail(index)
            if gone:
                made.extend(self._settle(cohort))
        return made

    def ledger(self, cohort: int) -> RungLedger:
        """The rung ledger of ``cohort`` (created when the cohort opens)."""
        while len(self._ledgers) <= cohort:
            self._ledgers.append(RungLedger(self.rungs, self.fraction, self.mode,
                                            trials=self.members(len(self._ledgers))))
            self._announced.append(0)
        return self._ledgers[cohort]

    @property
    def opened(self) -> int:
        """How many cohorts have started."""
        return len(self._ledgers)

    @property
    def running(self) -> frozenset[Work]:
        return frozenset(self._running)

    # Choosing -------------------------------------------------------------------------------------

    def next_work(self, skip: Collection[int] = ()) -> Work | None:
        """The work an idle worker should take now, or None (nothing is ready: wait for a result, or
        the search is finished). Asking has no side effects.

        ``skip`` names trials this worker cannot take now (an executor whose trial is held in another,
        busy, worker's memory); the next ready work is returned instead. Which worker runs what never
        changes a decision."""
        busy = {(w.index, w.rung) for w in self._running} | {(index, rung) for index in skip
                                                              for rung in range(len(self.rungs))}
        while self._first_open < self.opened and self._ledgers[self._first_open].finished:
            self._first_open += 1  # (a cache: what is finished stays finished)
        ledgers = self._ledgers[self._first_open:]
        for ledger in ledgers:  # promoted trials of the oldest cohort first
            for rung in range(1, len(self.rungs)):
                decision = ledger.decide(rung - 1)
                if decision is None:
                    break
                ready = [index for index in ledger.cohort(rung)
                         if ledger.next_rung(index) == rung and (index, rung) not in busy]
                if ready:
                    return Work(self._costliest(ready), rung)
        for ledger in ledgers:  # then first-rung trials, opening the next cohort when none is left
            ready = [index for index in ledger.cohort(0) if ledger.score(index, 0) is None and (index, 0) not in busy]
            if ready:
                return Work(self._costliest(ready), 0)
        if self.cohorts is None or self.opened < self.cohorts:
            return Work(self._costliest(list(self.members(self.opened))), 0)
        if self.speculate:
            return self._speculative(busy, ledgers)
        return None

    def _speculative(self, busy: set[tuple[int, int]], ledgers: list[RungLedger]) -> Work | None:
        """A leader of an open rung, trained ahead (oldest cohort first, then the nearest rung, then best
        first). The leaders of the open rung are those its decision would promote if it were made on the
        scores reported so far; their results ahead are held, and the leaders among those go further."""
        for ledger in ledgers:
            rung = next((r for r in range(len(self.rungs)) if ledger.decide(r) is None), None)
            if rung is None or rung == len(self.rungs) - 1 or not ledger.cohort(rung):
                continue
            level = rank_order(ledger.scores(rung), self.mode)[:promotion_count(len(ledger.cohort(rung)), self.fraction)]
            for ahead in range(rung + 1, len(self.rungs)):
                for index in level:
                    ready = ahead == rung + 1 or (index, ahead - 1) in self._held
                    if ready and (index, ahead) not in busy and (index, ahead) not in self._held:
                        return Work(index, ahead, speculative=True)
                if ahead == len(self.rungs) - 1:
                    break
                scored = {i: self._held[(i, ahead)] for i in sorted(level) if (i, ahead) in self._held}
                level = rank_order(scored, self.mode)[:promotion_count(len(level), self.fraction)] if scored else []
                if not level:
                    break
        return None

    def _costliest(self, candidates: list[int]) -> int:
        """The first of ``candidates`` (in rank or joining order) or, with a cost hint, the costliest (ties:
        the first), so the long pieces start early and the workers finish together."""
        if self.cost is None or len(candidates) == 1:
            return candidates[0]
        return max(candidates, key=lambda index: (self.cost(index), -candidates.index(index)))

    # Feeding it -----------------------------------------------------------------------------------

    def start(self, work: Work) -> None:
        """``work`` was handed to a worker."""
        if work.rung == 0 and self.cohort_of(work.index) >= self.opened:
            self.ledger(self.cohort_of(work.index))
        if work in self._running or Work(work.index, work.rung, not work.speculative) in self._running:
            raise ValueError(f"Invalid work: {work!r} is already running")
        self._running.add(work)

    def report(self, index: int, rung: int, score: float) -> list[tuple[int, RungDecision]]:
        """Configuration ``index`` scored ``score`` at rung ``rung``; returns ``(cohort, decision)`` for
        every rung this made decidable, in order. The result of dropped speculative work is ignored."""
        cancelled = Work(index, rung, True)
        if cancelled in self._cancelled:
            self._cancelled.discard(cancelled)
            return []
        if cancelled in self._running:
            self._running.discard(cancelled)
            return self._speculated(cancelled, float(score))
        self._running.discard(Work(index, rung))
        return self._report(index, rung, float(score))

    def _speculated(self, work: Work, score: float) -> list[tuple[int, RungDecision]]:
        ledger = self.ledger(self.cohort_of(work.index))
        decision = ledger.decide(work.rung - 1)
        if decision is None:  # the rung is still open: hold the result for its decision
            self._held[(work.index, work.rung)] = score
            return []
        if work.index in decision.promoted:
            return self._report(work.index, work.rung, score)
        return []  # stopped meanwhile: already counted as dropped

    def _report(self, index: int, rung: int, score: float) -> list[tuple[int, RungDecision]]:
        cohort = self.cohort_of(index)
        ledger = self.ledger(cohort)
        ledger.report(index, rung, score)
        return self._settle(cohort)

    def fail(self, index: int) -> list[tuple[int, RungDecision]]:
        """Configuration ``index`` failed for good (its work in flight ends)."""
        for work in [w for w in self._running if w.index == index]:
            self._running.discard(work)
        cohort = self.cohort_of(index)
        self.ledger(cohort).fail(index)
        return self._settle(cohort)

    def _settle(self, cohort: int) -> list[tuple[int, RungDecision]]:
        """Decide what the cohort's ledger can decide; apply the decisions to speculative work."""
        decisions = self._ledgers[cohort].decisions()
        made: list[tuple[int, RungDecision]] = []
        while self._announced[cohort] < len(decisions):
            decision = decisions[self._announced[cohort]]
            self._announced[cohort] += 1
            made.append((cohort, decision))
            made.extend(self._apply(cohort, decision))
        return made

    def _apply(self, cohort: int, decision: RungDecision) -> list[tuple[int, RungDecision]]:
        """Speculative work on the decided rung's trials: a promoted trial's held result at the next
        rung is reported (which may decide that rung too), its work in flight there becomes its regular
        work; every speculative result and piece in flight of a stopped trial is dropped."""
        made: list[tuple[int, RungDecision]] = []
        ahead = decision.rung + 1
        for index in decision.stopped:
            for rung in range(ahead, len(self.rungs)):
                work = Work(index, rung, True)
                if self._held.pop((index, rung), None) is not None:
                    self.dropped.append(work)
                if work in self._running:
                    self._running.discard(work)
                    self._cancelled.add(work)
                    self._to_cancel.append(work)
                    self.dropped.append(work)
        for index in decision.promoted:
            work = Work(index, ahead, True)
            if work in self._running:  # it goes on as the trial's regular work
                self._running.discard(work)
                self._running.add(Work(index, ahead))
        for index in [i for i in decision.promoted if (i, ahead) in self._held]:
            score = self._held.pop((index, ahead))
            made.extend(self._report(index, ahead, score))
        return made

    def cancelled(self) -> list[Work]:
        """Speculative work in flight whose trial its rung stopped: an executor may stop it (its result,
        if it comes, is ignored). Each is listed once."""
        out, self._to_cancel = self._to_cancel, []
        return out

    # Reading it -----------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """True once every cohort is opened and finished."""
        return self.opened == self.cohorts and all(ledger.finished for ledger in self._ledgers) \
            and not self._running

    def decisions(self, cohort: int) -> list[RungDecision]:
        return self.ledger(cohort).decisions() if cohort < self.opened else []

    def completed(self) -> dict[int, float]:
        """Every configuration that completed the last rung, with its score there, in index order."""
        last = len(self.rungs) - 1
        out: dict[int, float] = {}
        for ledger in self._ledgers:
            decision = ledger.decide(last)
            if decision is not None:
                out.update((i, ledger.scores(last)[i]) for i in decision.stopped)
        return dict(sorted(out.items()))

    def winner(self) -> int | None:
        """The best configuration that completed the last rung, over every cohort (ties: the one
        sampled first); None while none has."""
        completed = self.completed()
        return rank_order(completed, self.mode)[0] if completed else None

    # Persistence ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Every cohort's ledger and the held speculative results, as plain lists and numbers."""
        return {"configs": self.configs, "cohort_size": self.cohort_size, "speculate": self.speculate,
                "ledgers": [ledger.state_dict() for ledger in self._ledgers],
                "held": [[i, r, s] for (i, r), s in sorted(self._held.items())],
                "dropped": [[w.index, w.rung] for w in self.dropped]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["configs"] != self.configs or state["cohort_size"] != self.cohort_size:
            raise ValueError(f"Invalid state: {state['configs']} configurations in cohorts of "
                             f"{state['cohort_size']} differ from this stream's {self.configs} in {self.cohort_size}")
        self._ledgers = []
        for k, ledger_state in enumerate(state["ledgers"]):
            self.ledger(k).load_state_dict(ledger_state)
        self._held = {(int(i), int(r)): float(s) for i, r, s in state["held"]}
        self.dropped = [Work(int(i), int(r), True) for i, r in state["dropped"]]
        self._announced = [len(ledger.decisions()) for ledger in self._ledgers]
        self._first_open = 0
        self._running = set()
        self._cancelled, self._to_cancel = set(), []

    def __repr__(self) -> str:
        return (f"CohortStream(configs={self.configs}, cohort_size={self.cohort_size}, rungs={self.rungs}, "
                f"opened={self.opened}/{self.cohorts}, running={len(self._running)})")
