"""Synchronous successive halving: the rung rule, once, and the resumable in-process engine.

The rung rule is two small pure functions, :func:`check_rungs` and :func:`promote_top_fraction`;
the engine here, the Ray Tune scheduler and the Optuna integration all call them. At each rung
every survivor trains (resumed, never restarted) to the rung's cumulative budget and is scored on
validation data; the top third (ceil, at least one) goes on. With 48 configurations and rungs
100/300/900/2700/3000 the rungs hold 48, 16, 6, 2 and 1 trials (paper, Appendix "UCI Adult").

Example:
    >>> promote_top_fraction({0: 0.80, 1: 0.85, 2: 0.85, 3: 0.70}, 1 / 3)
    [1, 2]
    >>> rung_sizes(48, (100, 300, 900, 2700, 3000))
    [48, 16, 6, 2, 1]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from eve_search.trial import Evaluation, Trial

__all__ = [
    "DEFAULT_RUNGS",
    "PROMOTED_FRACTION",
    "RungStore",
    "SynchronousSuccessiveHalving",
    "check_rungs",
    "promote_top_fraction",
    "rung_sizes",
]

DEFAULT_RUNGS = (100.0, 300.0, 900.0, 2700.0, 3000.0)
PROMOTED_FRACTION = 1.0 / 3.0


def check_rungs(rungs: Sequence[float]) -> tuple[float, ...]:
    """Cumulative rung budgets: positive and strictly increasing."""
    values = tuple(float(r) for r in rungs)
    if not values:
        raise ValueError("Invalid rungs: () (expected at least one budget)")
    if any(not (math.isfinite(r) and r > 0) for r in values) or any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"Invalid rungs: {', '.join(f'{r:g}' for r in values)} (expected positive, strictly "
                         "increasing cumulative budgets)")
    return values


def promotion_count(survivors: int, fraction: float = PROMOTED_FRACTION) -> int:
    """How many of ``survivors`` go on: ceil(survivors * fraction), at least one."""
    if not 0 < fraction <= 1:
        raise ValueError(f"Invalid fraction: {fraction!r} (expected a number in (0, 1])")
    return max(1, math.ceil(survivors * fraction - 1e-9))


def promote_top_fraction(scores: Mapping[int, float], fraction: float = PROMOTED_FRACTION) -> list[int]:
    """The keys of the best ``ceil(len(scores) * fraction)`` scores (higher is better), in rank order.

    Ties are broken by the lower key (the configuration sampled first), so the outcome never depends
    on the order in which trials finished. A NaN score ranks last.
    """
    def rank(key: int) -> tuple[float, int]:
        score = scores[key]
        return (-score if not math.isnan(score) else math.inf, key)

    return sorted(scores, key=rank)[: promotion_count(len(scores), fraction)]


def rung_sizes(trials: int, rungs: Sequence[float], fraction: float = PROMOTED_FRACTION) -> list[int]:
    """How many trials each rung trains."""
    sizes = [trials]
    for _ in rungs[1:]:
        sizes.append(promotion_count(sizes[-1], fraction))
    return sizes


class RungStore(Protocol):
    """Where the engine keeps results and checkpoints, so that a killed sweep resumes exactly."""

    def recorded(self, index: int, budget: float) -> float | None:
        """The validation accuracy recorded for trial ``index`` at ``budget``, if any."""

    def checkpoint(self, index: int) -> dict[str, Any] | None:
        """The trial's latest saved state, if any."""

    def record(self, index: int, budget: float, evaluation: Evaluation, trial: Trial) -> None:
        """Save the trial's state (atomically), then its result at this rung."""

    def eliminate(self, indices: Sequence[int], budget: float) -> None:
        """These trials stop at ``budget``."""

    def finish(self, index: int, budget: float, accuracy: float) -> None:
        """This trial completed the last rung."""


@dataclass
class RungReport:
    """What happened at one rung: its budget, the trials it trained and those promoted."""

    budget: float
    trials: list[int]
    scores: dict[int, float]
    promoted: list[int]


class SynchronousSuccessiveHalving:
    """Run SHA over ``trials`` configurations with the rung rule above.

    Args:
        trials: number of configurations (indices 0..trials-1).
        make_trial: builds a fresh :class:`~eve_search.trial.Trial` for an index.
        store: results and checkpoints (see :class:`RungStore`).
        rungs: cumulative budgets; ``fraction``: promoted share.
        on_result: called after every trial result with (rung number, index, accuracy, resumed).

    Trials stay in memory between rungs; after a restart each one is rebuilt from its checkpoint.
    """

    def __init__(self, trials: int, make_trial: Callable[[int], Trial], store: RungStore, *,
                 rungs: Sequence[float] = DEFAULT_RUNGS, fraction: float = PROMOTED_FRACTION,
                 on_result: Callable[[int, int, float, bool], None] | None = None) -> None:
        if not isinstance(trials, int) or trials < 1:
            raise ValueError(f"Invalid trials: {trials!r} (expected an int >= 1)")
        self.trials = trials
        self.make_trial = make_trial
        self.store = store
        self.rungs = check_rungs(rungs)
        self.fraction = fraction
        promotion_count(trials, fraction)  # validates fraction
        self.on_result = on_result
        self._live: dict[int, Trial] = {}

    def trial(self, index: int) -> Trial:
        """The live trial of ``index``, rebuilt from its checkpoint if this process has not trained it."""
        trial = self._live.get(index)
        if trial is None:
            trial = self.make_trial(index)
            state = self.store.checkpoint(index)
            if state is not None:
                trial.load_state_dict(state)
            self._live[index] = trial
        return trial

    def run(self) -> list[RungReport]:
        """Train every rung (skipping results already recorded); return one report per rung."""
        reports = []
        survivors = list(range(self.trials))
        for rung, budget in enumerate(self.rungs):
            scores: dict[int, float] = {}
            for index in survivors:
                accuracy = self.store.recorded(index, budget)
                resumed = accuracy is not None
                if accuracy is None:
                    trial = self.trial(index)
                    # A trial always passes through every earlier rung budget in order (each one is a
                    # stopping point of its trajectory), so a stale or missing checkpoint is replayed
                    # into exactly the state an uninterrupted sweep had.
                    for earlier in self.rungs[:rung]:
                        if trial.budget < earlier:
                            trial.train_to(earlier)
                    trial.train_to(budget)
                    evaluation = trial.evaluate()
                    self.store.record(index, budget, evaluation, trial)
                    accuracy = evaluation.accuracy
                scores[index] = accuracy
                if self.on_result is not None:
                    self.on_result(rung, index, accuracy, resumed)
            last = rung == len(self.rungs) - 1
            promoted = promote_top_fraction(scores, self.fraction) if not last else sorted(scores, key=survivors.index)
            reports.append(RungReport(budget=budget, trials=list(survivors), scores=scores,
                                      promoted=[] if last else promoted))
            if last:
                for index in survivors:
                    self.store.finish(index, budget, scores[index])
            else:
                stopped = [index for index in survivors if index not in promoted]
                self.store.eliminate(stopped, budget)
                for index in stopped:
                    self._live.pop(index, None)
                survivors = promoted
        return reports
