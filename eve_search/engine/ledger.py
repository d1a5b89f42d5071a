"""The rung rule of synchronous successive halving, once, and the ledger every driver feeds.

Rungs are cumulative budgets in whole evaluation units (Optuna reports steps as integers, so a rung
is an integer everywhere: in the ledger, in the store and on the command line). At each rung every
trial of the rung's cohort trains (resumed, never restarted) to the rung's budget and reports its
validation score; when the whole cohort has reported (or failed for good), the best
``ceil(fraction * reporters)`` (at least one) are promoted to the next rung and the rest stop. The
last rung promotes nobody: its trials are complete. With 48 configurations and the paper's rungs
100/300/900/2,700/3,000 the rungs hold 48, 16, 6, 2 and 1 trials (paper, Appendix "UCI Adult").

One tie-break everywhere (:func:`rank_order`): a better score first; equal scores in the order the
trials joined the cohort (for a sweep, the configuration sampled first); a score that is not finite
(NaN, or an infinity: training diverged, or a metric gave no number) last, whatever the mode: an
infinite accuracy never wins a rung. The
in-process engine, the Ray Tune scheduler, the Optuna pruner, the sweep's winner and the ranking's
top configuration all use it.

Example:
    >>> promote_top_fraction({0: 0.80, 1: 0.85, 2: 0.85, 3: 0.70}, 1 / 3)
    [1, 2]
    >>> rung_sizes(48, (100, 300, 900, 2700, 3000))
    [48, 16, 6, 2, 1]
    >>> ledger = RungLedger(rungs=(100, 300), trials=["a", "b", "c"])
    >>> for name, score in [("a", 0.7), ("b", 0.9)]:
    ...     ledger.report(name, 0, score)
    >>> ledger.decide(0) is None, ledger.waiting_for(0)
    (True, ['c'])
    >>> ledger.report("c", 0, 0.8)
    >>> ledger.decide(0)
    RungDecision(rung=0, budget=100, promoted=['b'], stopped=['a', 'c'])
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eve_search._checks import InputError

__all__ = [
    "DEFAULT_RUNGS",
    "MAX_RUNGS",
    "PROMOTED_FRACTION",
    "RungDecision",
    "RungLedger",
    "check_fraction",
    "check_rungs",
    "promote_top_fraction",
    "promotion_count",
    "rank_order",
    "rung_sizes",
    "rungs_from_geometric",
]

DEFAULT_RUNGS = (100, 300, 900, 2700, 3000)
PROMOTED_FRACTION = 1.0 / 3.0
MODES = ("max", "min")
#: The most rungs a ledger holds, whoever builds it (a sweep, the Ray scheduler, the Optuna pruner):
#: each rung is a barrier the whole cohort waits at, and a reduction factor barely above 1 over a
#: long run would otherwise ask for millions of them (and exhaust the memory building the list).
MAX_RUNGS = 1000


def check_rungs(rungs: Sequence[float]) -> tuple[int, ...]:
    """Cumulative rung budgets: whole numbers of evaluation units, positive and strictly increasing.

    Args:
        rungs: the budgets, in evaluation units (floats with whole values are accepted).

    Returns:
        The budgets as a tuple of ints; a one-line InputError names them otherwise.

    Example:
        >>> check_rungs([100, 300.0, 900])
        (100, 300, 900)
        >>> check_rungs([300, 100])
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid rungs: 300, 100 (expected strictly increasing cumulative budgets)
    """
    try:
        values = tuple(rungs)
    except TypeError:
        raise InputError(f"Invalid rungs: {rungs!r} (expected a sequence of budgets)") from None
    if not values:
        raise InputError("Invalid rungs: () (expected at least one budget)")
    shown = ", ".join(f"{r:g}" if isinstance(r, (int, float)) and not isinstance(r, bool) else repr(r)
                      for r in values)
    if any(isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r != int(r) or r <= 0
           for r in values):
        raise InputError(f"Invalid rungs: {shown} (expected positive whole numbers of evaluation units)")
    if len(values) > MAX_RUNGS:
        raise InputError(f"Invalid rungs: {len(values):,} budgets is more than {MAX_RUNGS:,} (each rung is a barrier "
                         "every trial of the cohort waits at)")
    budgets = tuple(int(r) for r in values)
    if any(b <= a for a, b in itertools.pairwise(budgets)):
        raise InputError(f"Invalid rungs: {shown} (expected strictly increasing cumulative budgets)")
    return budgets


def rungs_from_geometric(min_resource: float, max_resource: float, reduction_factor: float) -> tuple[int, ...]:
    """Rungs in the vocabulary of Ray's ASHA (``grace_period``, ``max_t``, ``reduction_factor``) and
    Optuna's successive-halving pruners (``min_resource``, ``max_resource``, ``reduction_factor``):
    ``min_resource * reduction_factor**k`` for every k that stays below ``max_resource`` (rounded up
    to whole steps, repeats dropped), then ``max_resource`` itself as the last rung, where the
    survivors complete.

    Args:
        min_resource: the first rung, in steps (a positive whole number).
        max_resource: the last rung, in steps (a whole number, at least ``min_resource``).
        reduction_factor: the growth from one rung to the next, a number above 1 (a rung promotes
            ``1 / reduction_factor`` of its trials).

    Returns:
        The rungs, strictly increasing whole numbers (see :func:`check_rungs`).

    >>> rungs_from_geometric(1, 100, 3)
    (1, 3, 9, 27, 81, 100)
    >>> rungs_from_geometric(100, 3000, 3)
    (100, 300, 900, 2700, 3000)
    >>> rungs_from_geometric(1, 10**9, 1.0000001)
    Traceback (most recent call last):
    ...
    eve_search.InputError: Invalid reduction_factor: 1.0000001 makes more than 1,000 rungs from 1 to 1e+09 (expected a larger factor, or a smaller range of steps)

    At most :data:`MAX_RUNGS` rungs, found in as many steps (never one per geometric term).
    """
    for name, value in (("min_resource", min_resource), ("max_resource", max_resource)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value != int(value) or value <= 0:
            raise InputError(f"Invalid {name}: {value!r} (expected a positive whole number of steps)")
    if isinstance(reduction_factor, bool) or not isinstance(reduction_factor, (int, float)) \
            or not math.isfinite(reduction_factor) or reduction_factor <= 1:
        raise InputError(f"Invalid reduction_factor: {reduction_factor!r} (expected a number above 1)")
    if max_resource < min_resource:
        raise InputError(f"Invalid max_resource: {max_resource!r} (expected at least min_resource, "
                         f"{min_resource!r})")
    rungs: list[int] = []
    budget = float(min_resource)
    while budget < max_resource:
        step = math.ceil(budget - 1e-9)
        if not rungs or step > rungs[-1]:
            rungs.append(step)
            if len(rungs) > MAX_RUNGS:  # refused before the list grows any further
                break
            budget *= reduction_factor
        else:
            # Below 1 / (reduction_factor - 1) steps one factor does not reach the next whole step: jump
            # over the terms that would round to the same rung instead of walking through them (a
            # factor of 1.0000001 would take millions of iterations). The jump stops a term short of
            # the next rung, so no rung is skipped.
            terms = math.floor(math.log((rungs[-1] + 1e-9) / budget) / math.log(reduction_factor))
            budget *= reduction_factor ** max(1, terms - 1)
    if not rungs or int(max_resource) > rungs[-1]:
        rungs.append(int(max_resource))
    if len(rungs) > MAX_RUNGS:
        raise InputError(f"Invalid reduction_factor: {reduction_factor!r} makes more than {MAX_RUNGS:,} rungs from "
                         f"{min_resource:g} to {max_resource:g} (expected a larger factor, or a smaller range of "
                         "steps)")
    return check_rungs(rungs)


def check_fraction(fraction: float) -> float:
    """The promoted share of a rung: a number in (0, 1].

    Args:
        fraction: the value to check.

    Returns:
        ``fraction`` as a float; a one-line InputError naming it otherwise.

    Example:
        >>> check_fraction(1)
        1.0
        >>> check_fraction(0)
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid fraction: 0 (expected a number in (0, 1])
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise InputError(f"Invalid fraction: {fraction!r} (expected a number in (0, 1])")
    return float(fraction)


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InputError(f"Invalid mode: {mode!r} (expected 'max' or 'min')")
    return mode


def promotion_count(survivors: int, fraction: float = PROMOTED_FRACTION) -> int:
    """How many of ``survivors`` go on: ceil(survivors * fraction), at least one.

    Args:
        survivors: the trials that reported the rung.
        fraction: the promoted share, in (0, 1] (default: one third, the paper's).

    Returns:
        The number promoted.

    Example:
        >>> promotion_count(9), promotion_count(10), promotion_count(2)
        (3, 4, 1)
    """
    check_fraction(fraction)
    return max(1, math.ceil(survivors * fraction - 1e-9))


def rank_order(scores: Mapping[Any, float], mode: str = "max") -> list[Any]:
    """The keys of ``scores`` from best to worst: a better score first, ties in the mapping's order
    (the order trials joined), a score that is not finite (NaN, +-inf) last.

    Args:
        scores: each trial's score, in the order that breaks ties.
        mode: ``"max"`` (a higher score is better) or ``"min"``.

    Returns:
        The keys, best first.

    Example:
    >>> rank_order({"x": 0.5, "y": float("nan"), "z": 0.5, "w": 0.9})
    ['w', 'x', 'z', 'y']
    >>> rank_order({"x": 0.5, "y": float("inf"), "z": 0.9}), rank_order({"x": 0.5, "y": float("-inf")}, "min")
    (['z', 'x', 'y'], ['x', 'y'])
    """
    sign = -1.0 if _check_mode(mode) == "max" else 1.0
    position = {key: k for k, key in enumerate(scores)}

    def key(name: Any) -> tuple[float, int]:
        score = scores[name]
        return (sign * score if math.isfinite(score) else math.inf, position[name])

    return sorted(scores, key=key)


def promote_top_fraction(scores: Mapping[Any, float], fraction: float = PROMOTED_FRACTION,
                         mode: str = "max") -> list[Any]:
    """The best ``ceil(len(scores) * fraction)`` keys (at least one), in rank order (see :func:`rank_order`).

    A sweep passes its scores in configuration order, so ties go to the configuration sampled first
    and the outcome never depends on the order in which trials finished.

    Args:
        scores: each trial's score at the rung, in the order that breaks ties.
        fraction: the promoted share, in (0, 1].
        mode: ``"max"`` (a higher score is better) or ``"min"``.

    Returns:
        The promoted keys, best first.

    Example:
        >>> promote_top_fraction({"a": 0.7, "b": 0.9, "c": 0.8})
        ['b']
        >>> promote_top_fraction({"a": 0.7, "b": 0.9, "c": 0.8}, fraction=0.5, mode="min")
        ['a', 'c']
    """
    return rank_order(scores, mode)[: promotion_count(len(scores), fraction)]


def rung_sizes(trials: int, rungs: Sequence[float], fraction: float = PROMOTED_FRACTION) -> list[int]:
    """How many trials each rung trains when none fails.

    Args:
        trials: the cohort's size (trained at the first rung).
        rungs: the rung budgets (only their number matters).
        fraction: the promoted share of each rung.

    Returns:
        One count per rung.

    Example:
        >>> rung_sizes(27, DEFAULT_RUNGS)
        [27, 9, 3, 1, 1]
    """
    sizes = [trials]
    for _ in rungs[1:]:
        sizes.append(promotion_count(sizes[-1], fraction))
    return sizes


@dataclass(frozen=True)
class RungDecision:
    """A rung's outcome: who goes on (in rank order) and who stops there. At the last rung nobody is
    promoted and ``stopped`` lists the trials that completed it.

    Attributes:
        rung: the rung's index.
        budget: its cumulative budget, in evaluation units.
        promoted: the trials that go on, best first.
        stopped: the other trials of its cohort, in cohort order.

    Example:
        >>> decision = RungDecision(rung=0, budget=100, promoted=[4], stopped=[0, 1])
        >>> decision.promoted, decision.stopped
        ([4], [0, 1])
    """

    rung: int
    budget: int
    promoted: list[Any]
    stopped: list[Any]


class RungLedger:
    """Synchronous successive halving as a small state machine over reports; no training, no I/O.

    A driver adds the trials of the cohort, reports each trial's score when it reaches a rung, marks
    a trial that failed for good, and asks what to do: :meth:`decide` settles a rung once every live
    trial of its cohort has reported it; :meth:`next_rung` says where a trial goes next. Decisions are
    final once made. :meth:`state_dict` captures everything, so a restarted driver continues exactly.

    Args:
        rungs: cumulative budgets (see :func:`check_rungs`).
        fraction: promoted share of each rung, in (0, 1].
        mode: ``"max"`` (higher scores are better) or ``"min"``.
        trials: the cohort's trial ids (hashable: indices, Ray trial ids, Optuna numbers), in the order
            that breaks ties; more can join with :meth:`add` until the first rung is decided.

    Example:
        >>> ledger = RungLedger(rungs=(1, 3), trials=["a", "b", "c"])
        >>> for trial, score in [("a", 0.7), ("b", 0.9), ("c", 0.8)]:
        ...     ledger.report(trial, 0, score)
        >>> ledger.decide(0)
        RungDecision(rung=0, budget=1, promoted=['b'], stopped=['a', 'c'])
        >>> ledger.next_rung("b"), ledger.status("a")
        (1, 'stopped')
    """

    def __init__(self, rungs: Sequence[float] = DEFAULT_RUNGS, fraction: float = PROMOTED_FRACTION,
                 mode: str = "max", trials: Iterable[Hashable] = ()) -> None:
        self.rungs = check_rungs(rungs)
        self.fraction = check_fraction(fraction)
        self.mode = _check_mode(mode)
        self._members: list[Hashable] = []
        self._scores: list[dict[Hashable, float]] = [{} for _ in self.rungs]
        self._failed: set[Hashable] = set()
        self._decisions: list[RungDecision | None] = [None for _ in self.rungs]
        self._reset_caches()
        for trial in trials:
            self.add(trial)

    def _reset_caches(self) -> None:
        """Derived views, kept so that every query costs O(1) amortized and a driver that asks about
        each of thousands of trials stays linear: the members as a set, each rung's cohort (list and
        set; None until asked or after a change), where each judged trial stopped, and, per rung, the
        change count at which it was last found undecidable."""
        self._member_set: set[Hashable] = set(self._members)
        self._cohorts: list[tuple[list[Hashable], set[Hashable]] | None] = [None for _ in self.rungs]
        self._stopped_at: dict[Hashable, int] = {t: d.rung for d in self._decisions if d is not None for t in d.stopped}
        self._changes = 0
        self._undecided_at: list[int] = [-1 for _ in self.rungs]

    # Feeding the ledger ---------------------------------------------------------------------------

    @property
    def members(self) -> list[Hashable]:
        """Every trial that joined, in joining order."""
        return list(self._members)

    def add(self, trial: Hashable) -> None:
        """``trial`` joins the cohort (again: nothing happens)."""
        if trial in self._member_set:
            return
        if self._members and self.decide(0) is not None:
            raise ValueError(f"Invalid trial: {trial!r} cannot join after the first rung was decided")
        self._members.append(trial)
        self._member_set.add(trial)
        self._changes += 1
        cohort = self._cohorts[0]  # the first rung is undecided: its cohort grows by this trial
        if cohort is not None:
            cohort[0].append(trial)
            cohort[1].add(trial)

    def rung_of(self, budget: float) -> int | None:
        """The highest rung whose budget ``budget`` has reached (None: below the first rung)."""
        reached = [k for k, rung in enumerate(self.rungs) if budget >= rung]
        return reached[-1] if reached else None

    def report(self, trial: Hashable, rung: int, score: float) -> None:
        """``trial`` scored ``score`` at ``rung``. A repeated report keeps the first score, so a
        replayed (deterministic) result or a duplicate message changes nothing."""
        self._check_rung(rung)
        if trial not in self._member_set:
            raise ValueError(f"Invalid trial: {trial!r} is not in the cohort")
        if trial not in self._cohort(rung)[1]:
            raise ValueError(f"Invalid report: trial {trial!r} is not in the cohort of rung {rung} "
                             f"(budget {self.rungs[rung]})")
        if trial not in self._scores[rung]:
            self._scores[rung][trial] = float(score)
            self._changes += 1

    def fail(self, trial: Hashable) -> None:
        """``trial`` failed for good: it leaves every rung not yet decided."""
        if trial not in self._member_set:
            raise ValueError(f"Invalid trial: {trial!r} is not in the cohort")
        if trial in self._failed:
            return
        self._failed.add(trial)
        self._changes += 1
        for rung, decision in enumerate(self._decisions):  # the cohorts of undecided rungs lose it
            if decision is None:
                self._cohorts[rung] = None

    # Reading it -----------------------------------------------------------------------------------

    def _check_rung(self, rung: int) -> None:
        if isinstance(rung, bool) or not isinstance(rung, int) or not 0 <= rung < len(self.rungs):
            raise InputError(f"Invalid rung: {rung!r} (expected an index in [0, {len(self.rungs) - 1}])")

    def cohort(self, rung: int) -> list[Hashable]:
        """The trials that train to ``rung``: every member at rung 0, then the previous rung's promoted."""
        self._check_rung(rung)
        return list(self._cohort(rung)[0])

    def _cohort(self, rung: int) -> tuple[list[Hashable], set[Hashable]]:
        """:meth:`cohort` as a list and a set, computed once per change."""
        cached = self._cohorts[rung]
        if cached is not None:
            return cached
        if rung == 0:
            eligible = self._members
        else:
            previous = self._decisions[rung - 1]
            eligible = [] if previous is None else previous.promoted
        decision = self._decisions[rung]
        if decision is not None:  # a settled rung keeps the trials it judged
            judged = set(decision.promoted) | set(decision.stopped)
            members = [t for t in eligible if t in judged]
        else:
            members = [t for t in eligible if t not in self._failed]
        cached = (members, set(members))
        self._cohorts[rung] = cached
        return cached

    def score(self, trial: Hashable, rung: int) -> float | None:
        self._check_rung(rung)
        return self._scores[rung].get(trial)

    def scores(self, rung: int) -> dict[Hashable, float]:
        """The scores reported at ``rung``, in joining order."""
        self._check_rung(rung)
        reported = self._scores[rung]
        return {t: reported[t] for t in self._members if t in reported}

    def waiting_for(self, rung: int) -> list[Hashable]:
        """Live trials of the rung's cohort that have not reported it yet."""
        self._check_rung(rung)
        return [t for t in self._cohort(rung)[0] if t not in self._scores[rung]]

    def decide(self, rung: int) -> RungDecision | None:
        """The rung's decision, made now if every live trial of its cohort has reported (None: not yet)."""
        self._check_rung(rung)
        if self._decisions[rung] is not None:
            return self._decisions[rung]
        if self._undecided_at[rung] == self._changes:  # nothing reported, added or failed since the last look
            return None
        decision = self._try_decide(rung)
        if decision is None:
            self._undecided_at[rung] = self._changes
        return decision

    def _try_decide(self, rung: int) -> RungDecision | None:
        if rung > 0 and self.decide(rung - 1) is None:
            return None
        cohort, members = self._cohort(rung)
        if not cohort and rung == 0:
            return None
        reported = self._scores[rung]
        if any(t not in reported for t in cohort):
            return None
        scores = {t: reported[t] for t in self._members if t in members}  # joining order: the tie-break
        last = rung == len(self.rungs) - 1
        promoted = [] if last or not scores else promote_top_fraction(scores, self.fraction, self.mode)
        chosen = set(promoted)
        stopped = [t for t in cohort if t not in chosen]
        decision = RungDecision(rung=rung, budget=self.rungs[rung], promoted=promoted, stopped=stopped)
        self._decisions[rung] = decision
        self._changes += 1
        self._stopped_at.update((t, rung) for t in stopped)
        self._cohorts[rung] = None
        if rung + 1 < len(self.rungs):
            self._cohorts[rung + 1] = None
        return decision

    def decisions(self) -> list[RungDecision]:
        """Every rung decided so far, in order (deciding what can be decided)."""
        out = []
        for rung in range(len(self.rungs)):
            decision = self.decide(rung)
            if decision is None:
                break
            out.append(decision)
        return out

    def next_rung(self, trial: Hashable) -> int | None:
        """The rung ``trial`` should train to now; None while it must wait, or once it stopped,
        completed the last rung or failed."""
        if trial in self._failed or trial not in self._member_set:
            return None
        for rung in range(len(self.rungs)):
            if trial not in self._cohort(rung)[1]:
                return None
            if trial not in self._scores[rung]:
                return rung
            decision = self.decide(rung)
            if decision is None:
                return None
        return None

    def status(self, trial: Hashable) -> str:
        """``"train"`` (see :meth:`next_rung`), ``"wait"``, ``"stopped"``, ``"complete"`` or ``"failed"``."""
        if trial not in self._member_set:
            raise ValueError(f"Invalid trial: {trial!r} is not in the cohort")
        if self.next_rung(trial) is not None:
            return "train"
        self.decisions()  # decide what can be decided
        rung = self._stopped_at.get(trial)
        if rung is not None:
            return "complete" if rung == len(self.rungs) - 1 else "stopped"
        return "failed" if trial in self._failed else "wait"

    @property
    def finished(self) -> bool:
        """True once the last rung is decided, or no trial is left to train."""
        return len(self.decisions()) == len(self.rungs) or (
            bool(self._members) and all(self.status(t) in ("stopped", "complete", "failed") for t in self._members))

    # Persistence ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything, as plain lists and numbers (trial ids must be str or int)."""
        return {
            "rungs": list(self.rungs), "fraction": self.fraction, "mode": self.mode,
            "members": list(self._members),
            "scores": [[[t, s] for t, s in rung.items()] for rung in self._scores],
            "failed": [t for t in self._members if t in self._failed],
            "decisions": [None if d is None else {"promoted": list(d.promoted), "stopped": list(d.stopped)}
                          for d in self._decisions],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["rungs"]) != list(self.rungs) or state["mode"] != self.mode or \
                not math.isclose(state["fraction"], self.fraction):
            raise ValueError(f"Invalid state: rungs {state['rungs']}, fraction {state['fraction']}, mode "
                             f"{state['mode']!r} differ from this ledger's")
        self._members = list(state["members"])
        self._scores = [{t: float(s) for t, s in rung} for rung in state["scores"]]
        self._failed = set(state["failed"])
        self._decisions = [None if d is None else RungDecision(rung=k, budget=self.rungs[k], promoted=list(d["promoted"]),
                                                               stopped=list(d["stopped"]))
                           for k, d in enumerate(state["decisions"])]
        self._reset_caches()

    def __repr__(self) -> str:
        return (f"RungLedger(rungs={self.rungs}, fraction={self.fraction:.4g}, mode={self.mode!r}, "
                f"trials={len(self._members)}, decided={len(self.decisions())})")
