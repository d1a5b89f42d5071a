"""The pruner's bookkeeping, read from the study's storage on every look: the cohorts (consecutive trial
numbers, cut short where the study stopped starting trials), each cohort's rung ledger replayed from the
stored reports, and the decisions written to the study's user attributes, once and for all."""

from __future__ import annotations

import warnings
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from eve_search._checks import InputError
from eve_search.engine.ledger import RungDecision, RungLedger
from eve_search.integrations._optuna_pruner._cohort import CUT_PREFIX, Cohort, decision_key, plain, root_number
from eve_search.integrations._optuna_pruner._errors import PartialRungWarning

__all__ = ["StudyLedger"]


class StudyLedger:
    """Reading the study and keeping its rung decisions (a part of
    :class:`~eve_search.integrations.optuna.SynchronousSHAPruner`, which holds the settings: ``rungs``,
    ``fraction``, ``cohort_size``, ``n_trials``, ``timeout``, and the lock ``_lock``)."""

    # Reading the study ------------------------------------------------------------------------------

    def _size(self, study: optuna.Study) -> int:
        if self.cohort_size is not None:
            return self.cohort_size
        size = study.user_attrs.get("sha_cohort_size")
        if isinstance(size, int) and size >= 1:
            return size
        raise InputError("Invalid cohort_size: None and the study has no 'sha_cohort_size' user attribute "
                         "(expected SynchronousSHAPruner(cohort_size=N), N the trials judged together)")

    def _mode(self, study: optuna.Study) -> str:
        if len(study.directions) > 1:
            raise InputError(f"Invalid study: {len(study.directions)} objectives (SynchronousSHAPruner ranks one "
                             "score: expected optuna.create_study(direction=...), with the other objectives recorded "
                             "by trial.set_user_attr)")
        return "max" if study.direction == StudyDirection.MAXIMIZE else "min"

    def rung_of(self, step: int) -> int | None:
        """The highest rung whose budget ``step`` has reached (None: below the first rung)."""
        reached = [k for k, budget in enumerate(self.rungs) if step >= budget]
        return reached[-1] if reached else None

    def _score(self, chain: list[FrozenTrial], budget: int) -> float | None:
        """The member's score at a rung: its first report at a step at or past the budget."""
        for trial in chain:
            steps = [s for s in trial.intermediate_values if s >= budget]
            if steps:
                return float(trial.intermediate_values[min(steps)])
        return None

    def _cuts(self, attrs: dict[str, Any]) -> list[int]:
        cuts = {int(key[len(CUT_PREFIX):]) for key in attrs
                if key.startswith(CUT_PREFIX) and key[len(CUT_PREFIX):].isdigit()}
        if self.n_trials is not None:
            cuts.add(self.n_trials)
        return sorted(cuts)

    def _cohorts(self, trials: list[FrozenTrial], size: int, attrs: dict[str, Any]) -> list[Cohort]:
        """Consecutive root numbers, ``size`` at a time; a cut ``n`` ends the cohort holding the trials below
        ``n`` (it is closed once every trial numbered below ``n`` exists)."""
        roots = sorted({root_number(t) for t in trials})
        chains: dict[int, list[FrozenTrial]] = {r: [] for r in roots}
        for trial in sorted(trials, key=lambda t: t.number):
            chains[root_number(trial)].append(trial)
        cuts = self._cuts(attrs)
        groups: list[tuple[list[int], int]] = []
        current: list[int] = []
        for root in roots:
            if current and (len(current) >= size or any(current[-1] < c <= root for c in cuts)):
                groups.append((current, len(current)))
                current = []
            current.append(root)
        if current:
            closed = len(current) >= size or any(current[-1] < c <= len(trials) for c in cuts)
            groups.append((current, len(current) if closed else size))
        return [Cohort(k, size, capacity, members, {r: chains[r] for r in members})
                for k, (members, capacity) in enumerate(groups)]

    def _replay(self, study: optuna.Study, cohort: Cohort, mode: str, attrs: dict[str, Any],
                force: int | None = None, reason: str | None = None) -> None:
        """Feed the ledger from the stored reports, rung by rung, applying decisions already written and
        taking (and writing) the ones that can be taken now. ``force``: decide that rung now without the
        members that have not reported (``reason``: why)."""
        ledger = RungLedger(self.rungs, self.fraction, mode, trials=range(cohort.capacity))
        cohort.ledger = ledger
        for rung, budget in enumerate(self.rungs):
            for position in ledger.cohort(rung):
                root = cohort.root_at(position)
                score = None if root is None else self._score(cohort.chains[root], budget)
                if score is not None:
                    ledger.report(position, rung, score)
            stored = attrs.get(decision_key(cohort.index, budget))
            if stored is not None:
                judged = set(stored["promoted"]) | set(stored["stopped"])
                for position in ledger.cohort(rung):
                    if cohort.root_at(position) not in judged:
                        ledger.fail(position)
            else:
                for position in ledger.waiting_for(rung):
                    if cohort.ended(position) or force == rung:
                        ledger.fail(position)
            decision = ledger.decide(rung)
            if decision is None:
                return
            if not decision.promoted and not decision.stopped:
                return  # nobody reached this rung (the survivors completed before it): nothing to record
            if stored is None:
                self._write(study, cohort, decision, ledger, reason if force == rung else None)

    def _write(self, study: optuna.Study, cohort: Cohort, decision: RungDecision, ledger: RungLedger,
               forced: str | None) -> None:
        key = decision_key(cohort.index, decision.budget)
        scores = ledger.scores(decision.rung)
        previous = ledger.decide(decision.rung - 1) if decision.rung > 0 else None
        expected = cohort.size if previous is None else len(previous.promoted)
        reporters = len(decision.promoted) + len(decision.stopped)
        value: dict[str, Any] = {
            "budget": decision.budget,
            "promoted": [cohort.roots[p] for p in decision.promoted],
            "stopped": [cohort.roots[p] for p in decision.stopped],
            "scores": {str(cohort.roots[p]): plain(s) for p, s in scores.items() if p in decision.promoted
                       or p in decision.stopped},
            "reporters": reporters,
            "cohort": expected,
            "partial": reporters < expected,
        }
        if value["partial"]:
            value["reason"] = forced or ("closed" if previous is None and cohort.capacity < cohort.size else "ended")
        with self._lock:
            if key in study.user_attrs:
                return
            try:
                study.set_user_attr(key, value)
            except Exception:
                if key not in study.user_attrs:
                    raise
                return
        if value["partial"]:
            warnings.warn(self._partial_message(cohort, value, key), PartialRungWarning, stacklevel=2)

    def _partial_message(self, cohort: Cohort, value: dict[str, Any], key: str) -> str:
        reason = value["reason"]
        if reason == "timeout":
            why = (f"after waiting timeout={self.timeout:g} s; the others are pruned at this rung when they "
                   "report it")
        elif reason == "sequential":
            why = ("because this study runs one trial at a time, so the trials that have not started cannot be "
                   "waited for and each cohort is decided by its first trial; run the objective with "
                   "eve_search.integrations.optuna.optimize_in_cohorts(study, objective, n_trials=...)")
        elif reason == "closed":
            why = ("because no more trials joined the cohort (the last cohort of n_trials, a timeout or "
                   "study.stop()): a smaller cohort judges with less evidence")
        else:
            why = f"because {value['cohort'] - value['reporters']} trial(s) ended without reporting it"
        return (f"SynchronousSHAPruner: rung {value['budget']} of {cohort.describe()} was decided among "
                f"{value['reporters']} of {value['cohort']} trials {why} (recorded as partial in the study's "
                f"user attribute {key!r})")

    def _close(self, study: optuna.Study, reason: str) -> None:
        """No more trials will join: the cohort in progress ends with the trials that exist now."""
        trials = study.get_trials(deepcopy=False)
        if not trials:
            return
        cohorts = self._cohorts(trials, self._size(study), study.user_attrs)
        last = cohorts[-1]
        if last.capacity > len(last.roots):
            study.set_user_attr(f"{CUT_PREFIX}{len(trials)}", {"members": list(last.roots), "reason": reason})

    # Judging ----------------------------------------------------------------------------------------

    def _outcome(self, cohort: Cohort, position: int, rung: int) -> bool | None:
        """True: prune; False: go on; None: wait for rung decisions."""
        ledger = cohort.ledger
        assert ledger is not None
        last = len(self.rungs) - 1
        for r in range(rung + 1):
            decision = ledger.decide(r)
            if decision is None:
                return None
            if position in decision.stopped:
                return r < last
            if position not in decision.promoted:
                return True  # left out of the rung (it reported after a timeout decided without it)
        return False

    def _pending(self, cohort: Cohort, position: int, rung: int) -> int | None:
        """The first undecided rung up to ``rung`` of the member's cohort (None: all decided)."""
        ledger = cohort.ledger
        assert ledger is not None
        return next((r for r in range(rung + 1) if ledger.decide(r) is None), None)

    def _look(self, study: optuna.Study, size: int, mode: str, root: int) -> tuple[list[FrozenTrial], list[Cohort],
                                                                                   Cohort]:
        """One read of the study: its trials, its cohorts, and the cohort of ``root`` replayed."""
        trials = study.get_trials(deepcopy=False)
        attrs = study.user_attrs
        cohorts = self._cohorts(trials, size, attrs)
        mine = next(c for c in cohorts if root in c.roots)
        self._replay(study, mine, mode, attrs)
        return trials, cohorts, mine
