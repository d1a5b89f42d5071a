"""The end of a sweep, written once for every driver: the rung reports, the winner and its test metrics.

A driver (the in-process engine, Ray Tune, Optuna workers) trains the trials and feeds each cohort's
rung ledger; it then hands :func:`finish` a :class:`SweepBackend`: the ledgers it decided, how a ledger's
trial key maps to a configuration index, and how to score a configuration on the test set. :func:`finish`
builds the rung reports from the ledgers (:func:`rung_reports`), scores the test set once for the best
validation result found (:meth:`~eve_search.engine.sweep.Sweep.test_best`), picks the winner
(:func:`pick_winner`: the best configuration that completed the last rung, over every cohort) and stores
it with the sweep's wall time, then summarizes the sweep. A resumed sweep whose winner is stored keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol

from eve_search.engine.ledger import RungLedger, rank_order
from eve_search.engine.sha import RungReport

__all__ = ["SweepBackend", "finish", "pick_winner", "rung_reports"]


class SweepBackend(Protocol):
    """What a driver hands the end of a sweep (:func:`finish`): three methods.

    Attributes:
        ledgers: ``ledgers()``, every cohort's rung ledger, in cohort order.
        index_of: ``index_of(key)``, the configuration index of a trial key of the ledgers.
        winner_test: ``winner_test(index)``, the test metrics of configuration ``index`` at the last rung.

    Example:
        >>> class Decided:  # a driver whose ledgers are keyed by "trial-<index>"
        ...     def __init__(self, ledgers): self._ledgers = ledgers
        ...     def ledgers(self): return self._ledgers
        ...     def index_of(self, key): return int(key.split("-")[1])
        ...     def winner_test(self, index): return {"accuracy": 0.5}
        >>> ledger = _example_ledger(["trial-0", "trial-1", "trial-2", "trial-3"])
        >>> backend = Decided([ledger])
        >>> pick_winner(backend.ledgers(), "max", backend.index_of)
        (2, 0.95)
    """

    def ledgers(self) -> list[RungLedger]:
        """Every cohort's rung ledger, in cohort order, with the decisions the driver took."""

    def index_of(self, key: Hashable) -> int:
        """The configuration index of a trial key of the ledgers (the index itself, or a driver's trial id)."""

    def winner_test(self, index: int) -> dict[str, float]:
        """The test metrics of configuration ``index`` as of the last rung (the winner's)."""


def rung_reports(ledgers: list[RungLedger], index_of: Callable[[Hashable], int]) -> list[RungReport]:
    """One :class:`~eve_search.engine.sha.RungReport` per decided rung of every cohort, cohort by cohort, in
    configuration indices (``index_of`` maps a ledger's trial key to one).

    Args:
        ledgers: every cohort's ledger, in cohort order.
        index_of: a trial key of the ledgers -> its configuration index.

    Returns:
        The reports: each rung's budget, the trials it judged, their scores and those it promoted.

    Example:
        >>> [(r.budget, r.trials, r.promoted) for r in rung_reports([_example_ledger(range(4))], int)]
        [(10, [0, 1, 2, 3], [1, 2]), (30, [1, 2], [])]
    """
    reports = []
    for cohort, ledger in enumerate(ledgers):
        for decision in ledger.decisions():
            scores = ledger.scores(decision.rung)
            judged = ledger.cohort(decision.rung)
            reports.append(RungReport(budget=decision.budget, trials=[index_of(key) for key in judged],
                                      scores={index_of(key): scores[key] for key in judged},
                                      promoted=[index_of(key) for key in decision.promoted], cohort=cohort))
    return reports


def pick_winner(ledgers: list[RungLedger], mode: str,
                index_of: Callable[[Hashable], int]) -> tuple[int, float] | None:
    """The configuration the search picked and its score: the best that completed the last rung, over
    every cohort (ties: the one sampled first, a non-finite score last); None while none has.

    Args:
        ledgers: every cohort's ledger.
        mode: ``"max"`` or ``"min"``.
        index_of: a trial key of the ledgers -> its configuration index.

    Returns:
        ``(index, score)``, or None.

    Example:
        >>> pick_winner([_example_ledger(range(4))], "max", int), pick_winner([_example_ledger(range(4))], "min", int)
        ((2, 0.95), (1, 0.8))
    """
    completed: dict[int, float] = {}
    for ledger in ledgers:
        last = len(ledger.rungs) - 1
        decision = ledger.decide(last)
        if decision is not None:
            completed.update((index_of(key), ledger.scores(last)[key]) for key in decision.stopped)
    if not completed:
        return None
    completed = dict(sorted(completed.items()))
    index = rank_order(completed, mode)[0]
    return index, completed[index]


def finish(sweep: Any, backend: SweepBackend, *, trained: int) -> Any:
    """End a sweep the same way for every driver, and summarize it.

    The test set is scored once for the best validation result found (``sweep.test_best()``); unless the
    store holds the winner already (a resumed sweep), the winner (:func:`pick_winner`) is scored on the test
    set by the backend and stored with the sweep's wall time.

    Args:
        sweep: the :class:`~eve_search.engine.sweep.Sweep` (its settings, task, store and clock).
        backend: what the driver decided (:class:`SweepBackend`).
        trained: trial-rungs this run trained.

    Returns:
        The sweep's :class:`~eve_search.engine.sweep.SweepResult`.

    Raises:
        RuntimeError: no configuration completed the last rung (every one failed).

    Example (trains a sweep, so not run as a doctest; every driver calls it, tests/engine runs them):
        >>> result = finish(sweep, backend, trained=12)  # doctest: +SKIP
        >>> result.winner["index"], result.rungs  # doctest: +SKIP
    """
    ledgers = backend.ledgers()
    reports = rung_reports(ledgers, backend.index_of)
    sweep.test_best()
    store = sweep.store
    winner = store.get("winner")
    if winner is None:
        picked = pick_winner(ledgers, sweep.task.mode, backend.index_of)
        if picked is None:
            raise RuntimeError(f"sweep {sweep.settings.name!r}: no configuration completed the last rung (every one "
                               "failed)")
        index, score = picked
        winner = {"index": index, "score": score, "test": backend.winner_test(index)}
        store.set("winner", winner)
        store.set("wall_seconds", sweep.elapsed())
    return sweep.result(reports, winner, trained=trained)


def _example_ledger(keys: Any) -> RungLedger:
    """A decided two-rung ledger of four trials (the examples' data): rung 10 promotes the 2nd and 3rd."""
    keys = list(keys)
    ledger = RungLedger((10, 30), 0.5, "max", trials=keys)
    for key, score in zip(keys, [0.5, 0.9, 0.7, 0.1], strict=True):
        ledger.report(key, 0, score)
    ledger.decide(0)
    for key, score in [(keys[1], 0.8), (keys[2], 0.95)]:
        ledger.report(key, 1, score)
    return ledger
