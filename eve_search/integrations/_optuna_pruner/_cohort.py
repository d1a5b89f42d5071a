"""A cohort as the study's storage holds it (:class:`Cohort`), the names of what the pruner records in the
study's user attributes, and the place a retried trial takes in its cohort (:func:`root_number`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from optuna.trial import FrozenTrial, TrialState

from eve_search.engine.ledger import RungLedger

__all__ = ["CUT_PREFIX", "Cohort", "decision_key", "plain", "root_number"]

CUT_PREFIX = "sha:cut"  # study user attribute sha:cut{n}: the trials numbered below n end their cohort


def root_number(trial: FrozenTrial) -> int:
    """The number of the trial that ``trial`` retries, or its own number.

    A trial re-queued after its worker died (Optuna's ``RetryHeartbeatStaleTrialCallback``) keeps the
    original's number in the system attribute ``failed_trial``; it takes the original's place in its
    cohort.

    Args:
        trial: a trial of the study.

    Returns:
        The number of the trial whose place in the cohort it holds.

    Example:
        >>> from optuna.trial import create_trial
        >>> root_number(create_trial(value=0.8, system_attrs={"failed_trial": 4}))
        4
        >>> root_number(create_trial(value=0.8))  # a trial not yet in a study is number -1
        -1
    """
    return int(trial.system_attrs.get("failed_trial", trial.number))


def decision_key(cohort: int, budget: int) -> str:
    """The study user attribute that records a rung decision of a cohort.

    Args:
        cohort: the cohort's number.
        budget: the rung's budget, in steps.

    Returns:
        The attribute's key.

    Example:
        >>> decision_key(0, 300)
        'sha:cohort0:rung300'
    """
    return f"sha:cohort{cohort}:rung{int(budget)}"


def plain(score: float) -> float | None:
    return None if math.isnan(score) else score  # JSON without NaN, which the dashboard cannot parse


@dataclass
class Cohort:
    """One cohort as the storage holds it now: members by position, their trials, the ledger replayed.

    ``capacity`` is how many members the cohort has or waits for: ``size``, or fewer when the cohort was
    closed early (the study's trials ended: the last cohort of ``n_trials``, a timeout).
    """

    index: int
    size: int
    capacity: int
    roots: list[int]  # root numbers of the members that exist, position = index in this list
    chains: dict[int, list[FrozenTrial]] = field(default_factory=dict)  # root -> its trials, by number
    ledger: RungLedger | None = None

    def root_at(self, position: int) -> int | None:
        return self.roots[position] if position < len(self.roots) else None

    def _ended(self, root: int) -> bool:
        return all(t.state.is_finished() for t in self.chains[root])

    def ended(self, position: int) -> bool:
        """Every trial of the member has ended (COMPLETE, PRUNED or FAIL): it reports nothing more."""
        root = self.root_at(position)
        return root is not None and self._ended(root)

    def queued(self, position: int) -> bool:
        """The member does not exist yet, or only waits in the queue (not running, not ended)."""
        root = self.root_at(position)
        if root is None:
            return True
        live = [t for t in self.chains[root] if not t.state.is_finished()]
        return bool(live) and all(t.state == TrialState.WAITING for t in live)

    def describe(self) -> str:
        first = self.roots[0]
        last = self.roots[-1] if self.capacity == len(self.roots) else first + self.capacity - 1
        if last > first:
            return f"cohort {self.index} (trials {first}-{last})"
        return f"cohort {self.index} (trial {first})"
