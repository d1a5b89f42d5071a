"""A synchronous successive-halving pruner for ordinary Optuna objectives.

Optuna's own :class:`optuna.pruners.SuccessiveHalvingPruner` is asynchronous: it judges a trial at a
rung against the trials that happened to report that rung before it, so the outcome depends on the
order in which trials run (the first trial of a study is never pruned). Synchronous successive
halving (paper, Section "Successive halving") judges a rung once its whole cohort has reported it.
A pruner cannot pause a trial, so :class:`SynchronousSHAPruner` makes ``should_prune()`` wait at a
rung until every trial of the cohort has reported the rung or ended, then lets the rung ledger
(:mod:`eve_search.ledger`, the only place with the rung rule and its tie-break) decide.

Everything it needs is read from the study's storage on every poll (trials, their intermediate values
and states, decisions already taken), so it works across threads (``study.optimize(..., n_jobs=k)``)
and across processes and machines sharing one RDB storage.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from eve_search.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    RungDecision,
    RungLedger,
    check_fraction,
    check_rungs,
)

__all__ = ["CohortStalledError", "SynchronousSHAPruner", "decision_key", "root_number"]


class CohortStalledError(RuntimeError):
    """A rung waits for trials that cannot start: every running trial is itself waiting at a rung."""


def root_number(trial: FrozenTrial) -> int:
    """The number of the trial that ``trial`` retries, or its own number.

    A trial re-queued after its worker died (Optuna's ``RetryHeartbeatStaleTrialCallback``) keeps the
    original's number in the system attribute ``failed_trial``; it takes the original's place in its
    cohort.
    """
    return int(trial.system_attrs.get("failed_trial", trial.number))


def decision_key(cohort: int, budget: int) -> str:
    """The study user attribute that records a rung decision of a cohort."""
    return f"sha:cohort{cohort}:rung{int(budget)}"


def _plain(score: float) -> float | None:
    return None if math.isnan(score) else score  # JSON without NaN, which the dashboard cannot parse


@dataclass
class _Cohort:
    """One cohort as the storage holds it now: members by position, their trials, the ledger replayed."""

    index: int
    size: int
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


class SynchronousSHAPruner(BasePruner):
    """Synchronous successive halving as an Optuna pruner: a rung is judged once its whole cohort reported it.

    The objective reports its validation score with ``trial.report(value, step=units)``, where
    ``units`` is the budget the trial has consumed (eve-search charges evaluation units, paper
    Appendix "Evaluation-Cost Accounting"), and calls ``trial.should_prune()``. A report at a step at
    or past a rung's budget counts for that rung (the first such report). At a rung,
    ``should_prune()`` waits until every trial of the cohort has reported the rung or ended (COMPLETE,
    PRUNED, FAIL, or failed by Optuna's heartbeat check after its worker died); then the best
    ``ceil(fraction x reporters)`` go on (``should_prune()`` returns False) and the rest are pruned
    (True). At the last rung nobody is pruned. A report between rungs decides nothing. A NaN score
    ranks last; ties go to the lower trial number (:func:`eve_search.ledger.rank_order`).

    Cohorts are consecutive trial numbers: the first ``cohort_size`` trials of the study form cohort 0,
    the next ``cohort_size`` cohort 1, and so on (a trial re-queued after its worker died takes the
    original's place). A pruner cannot pause a trial, so **a cohort must run all at once**:
    ``study.optimize(objective, n_trials=..., n_jobs=cohort_size)``, or that many worker processes on
    one RDB storage. When every running trial waits at a rung for cohort members that have not started
    (fewer workers than ``cohort_size``), the behaviour depends on ``timeout``:

    - ``timeout=None`` (default): ``should_prune()`` raises :class:`CohortStalledError`, one message
      that names the fix, once the study has been stalled for ``stall_seconds``. It never hangs.
    - ``timeout=seconds``: a trial that has waited that long decides its rung without the members that
      have not reported; one that reports later is pruned at that rung. Use it when a worker may
      vanish without a heartbeat, or to accept a partial cohort.

    Every decision is written to the study's user attributes (``sha:cohort{k}:rung{budget}``: promoted
    and stopped trial numbers and the scores), where ``optuna-dashboard`` shows it; a decision once
    written is final, so every thread and process applies the same one.

    To detect dead workers, build the storage with heartbeats
    (``RDBStorage(url, heartbeat_interval=..., grace_period=...)``); a waiting trial checks for stale
    trials while it waits. With ``heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback()``
    a dead worker's trial is re-queued and the rung waits for the retry (which needs a free worker).
    Optuna records a trial's first heartbeat just after the trial starts: a worker killed in between
    leaves a trial that never goes stale, so set ``timeout`` where workers may be killed at any moment.

    For eve-search's own trials, which resume from checkpoints, prefer
    :func:`eve_search.integrations.optuna.run_sha`: it trains each rung as a work item, so the cohort
    need not run at once and a pruned trial's work is never lost to the order of execution.

    Args:
        rungs: cumulative budgets (integers, strictly increasing).
        fraction: promoted share of a rung, in (0, 1].
        cohort_size: trials judged together (None: the study's ``sha_cohort_size`` user attribute).
        timeout: seconds a trial waits at a rung before deciding without absent members (None: never).
        poll_interval: seconds between two reads of the storage while waiting.
        stall_seconds: how long every running trial must have been waiting at a rung, with cohort
            members not started, before the cohort counts as stalled (a worker process that is still
            starting up must have started its trial by then).

    Example:
        >>> import optuna
        >>> from eve_search.integrations.optuna import SynchronousSHAPruner
        >>> def objective(trial):
        ...     x = trial.suggest_float("x", 0.0, 1.0)
        ...     for step in (100, 300, 900):
        ...         trial.report(x, step=step)
        ...         if trial.should_prune():
        ...             raise optuna.TrialPruned()
        ...     return x
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> pruner = SynchronousSHAPruner(rungs=(100, 300, 900), cohort_size=9, poll_interval=0.01)
        >>> study = optuna.create_study(direction="maximize", pruner=pruner,
        ...                             sampler=optuna.samplers.RandomSampler(seed=0))
        >>> study.optimize(objective, n_trials=9, n_jobs=9)
        >>> sorted(t.state.name for t in study.trials).count("PRUNED")
        8
        >>> study.best_value == max(t.params["x"] for t in study.trials)
        True
    """

    def __init__(self, rungs: Sequence[int] = DEFAULT_RUNGS, fraction: float = PROMOTED_FRACTION,
                 cohort_size: int | None = None, timeout: float | None = None, poll_interval: float = 0.1,
                 stall_seconds: float = 30.0) -> None:
        self.rungs = check_rungs(rungs)
        self.fraction = check_fraction(fraction)
        if cohort_size is not None and (isinstance(cohort_size, bool) or not isinstance(cohort_size, int)
                                        or cohort_size < 1):
            raise ValueError(f"Invalid cohort_size: {cohort_size!r} (expected an int >= 1, or None)")
        for name, value in (("timeout", timeout), ("poll_interval", poll_interval), ("stall_seconds", stall_seconds)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise ValueError(f"Invalid {name}: {value!r} (expected a number of seconds > 0)")
        self.cohort_size = cohort_size
        self.timeout = None if timeout is None else float(timeout)
        self.poll_interval = float(poll_interval)
        self.stall_seconds = float(stall_seconds)
        self._lock = threading.Lock()

    # Reading the study ------------------------------------------------------------------------------

    def _size(self, study: optuna.Study) -> int:
        if self.cohort_size is not None:
            return self.cohort_size
        size = study.user_attrs.get("sha_cohort_size")
        if isinstance(size, int) and size >= 1:
            return size
        raise ValueError("Invalid cohort_size: None and the study has no 'sha_cohort_size' user attribute "
                         "(expected SynchronousSHAPruner(cohort_size=N), N the trials judged together, all "
                         "running at once)")

    def _mode(self, study: optuna.Study) -> str:
        if len(study.directions) > 1:
            raise ValueError("Invalid study: SynchronousSHAPruner needs a single-objective study")
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

    def _cohorts(self, study: optuna.Study, trials: list[FrozenTrial], size: int) -> list[_Cohort]:
        roots = sorted({root_number(t) for t in trials})
        chains: dict[int, list[FrozenTrial]] = {r: [] for r in roots}
        for trial in sorted(trials, key=lambda t: t.number):
            chains[root_number(trial)].append(trial)
        cohorts = []
        for k in range(max(1, math.ceil(len(roots) / size))):
            members = roots[k * size:(k + 1) * size]
            cohorts.append(_Cohort(k, size, members, {r: chains[r] for r in members}))
        return cohorts

    def _replay(self, study: optuna.Study, cohort: _Cohort, mode: str, attrs: dict[str, Any],
                force: int | None = None) -> None:
        """Feed the ledger from the stored reports, rung by rung, applying decisions already written and
        taking (and writing) the ones that can be taken now. ``force``: decide that rung now without the
        members that have not reported (timeout)."""
        ledger = RungLedger(self.rungs, self.fraction, mode, trials=range(cohort.size))
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
            if stored is None:
                self._write(study, cohort, decision, ledger)

    def _write(self, study: optuna.Study, cohort: _Cohort, decision: RungDecision, ledger: RungLedger) -> None:
        key = decision_key(cohort.index, decision.budget)
        scores = ledger.scores(decision.rung)
        value = {
            "budget": decision.budget,
            "promoted": [cohort.roots[p] for p in decision.promoted],
            "stopped": [cohort.roots[p] for p in decision.stopped],
            "scores": {str(cohort.roots[p]): _plain(s) for p, s in scores.items() if p in decision.promoted
                       or p in decision.stopped},
        }
        with self._lock:
            if key in study.user_attrs:
                return
            try:
                study.set_user_attr(key, value)
            except Exception:
                if key not in study.user_attrs:
                    raise

    # Judging ----------------------------------------------------------------------------------------

    def _outcome(self, cohort: _Cohort, position: int, rung: int) -> bool | None:
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

    def _blocked(self, trial: FrozenTrial, cohorts: list[_Cohort]) -> bool:
        """A running trial that reported a rung whose decision is pending (it waits in should_prune)."""
        if trial.last_step is None:
            return False
        rung = self.rung_of(trial.last_step)
        if rung is None:
            return False
        root = root_number(trial)
        for cohort in cohorts:
            if root in cohort.roots and cohort.ledger is not None:
                return self._outcome(cohort, cohort.roots.index(root), rung) is None
        return False

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        mode = self._mode(study)
        step = trial.last_step
        if step is None:
            return False
        rung = self.rung_of(step)
        if rung is None:
            return False
        size = self._size(study)
        root = root_number(trial)
        started = time.monotonic()
        stalled_since: float | None = None
        last_stale_check = 0.0
        while True:
            trials = study.get_trials(deepcopy=False)
            attrs = study.user_attrs
            cohorts = self._cohorts(study, trials, size)
            mine = next(c for c in cohorts if root in c.roots)
            self._replay(study, mine, mode, attrs)
            position = mine.roots.index(root)
            outcome = self._outcome(mine, position, rung)
            if outcome is not None:
                return outcome
            ledger = mine.ledger
            assert ledger is not None
            pending = next(r for r in range(rung + 1) if ledger.decide(r) is None)
            now = time.monotonic()
            if self.timeout is not None and now - started >= self.timeout:
                self._replay(study, mine, mode, study.user_attrs, force=pending)
                continue
            if now - last_stale_check >= 1.0:
                last_stale_check = now
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(study)
            if self.timeout is None:
                absent = [p for p in ledger.waiting_for(pending) if mine.queued(p)]
                others = [c for c in cohorts if c is not mine]
                for other in others:
                    self._replay(study, other, mode, attrs)
                running = [t for t in trials if t.state == TrialState.RUNNING]
                if absent and all(self._blocked(t, cohorts) for t in running):
                    stalled_since = now if stalled_since is None else stalled_since
                    if now - stalled_since >= self.stall_seconds:
                        first = mine.index * size
                        raise CohortStalledError(
                            f"SynchronousSHAPruner: rung {self.rungs[pending]} of cohort {mine.index} (trials "
                            f"{first}-{first + size - 1}) waits for {len(absent)} trial(s) that have not started, "
                            f"while every running trial waits at a rung: run all {size} trials of a cohort at "
                            f"once (study.optimize(..., n_jobs={size}) or more worker processes), lower "
                            "cohort_size to the number that run at once, or set timeout= to decide without them")
                else:
                    stalled_since = None
            time.sleep(self.poll_interval)
