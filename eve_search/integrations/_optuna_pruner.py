"""A synchronous successive-halving pruner for ordinary Optuna objectives.

Optuna's own :class:`optuna.pruners.SuccessiveHalvingPruner` is asynchronous: it judges a trial at a
rung against the trials that happened to report that rung before it, so the outcome depends on the
order in which trials run (the first trial of a study is never pruned). Synchronous successive
halving (paper, Section "Successive halving") judges a rung once its whole cohort has reported it.
A pruner cannot pause a trial, so :class:`SynchronousSHAPruner` makes ``should_prune()`` wait at a
rung until every trial of the cohort has reported the rung or ended, then lets the rung ledger
(:mod:`eve_search.engine.ledger`, the only place with the rung rule and its tie-break) decide.

Everything it needs is read from the study's storage on every poll (trials, their intermediate values
and states, decisions already taken, cohorts closed early), so it works across threads
(:func:`eve_search.integrations.optuna.optimize_in_cohorts`, ``study.optimize(..., n_jobs=k)``) and
across processes and machines sharing one RDB storage.
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
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from eve_search._checks import check_int
from eve_search.engine.ledger import (
    PROMOTED_FRACTION,
    RungDecision,
    RungLedger,
    check_fraction,
    check_rungs,
    rungs_from_geometric,
)

__all__ = [
    "CUT_PREFIX",
    "CohortStalledError",
    "PartialRungWarning",
    "RungScheduleWarning",
    "SequentialStudyError",
    "SynchronousSHAPruner",
    "decision_key",
    "root_number",
]

CUT_PREFIX = "sha:cut"  # study user attribute sha:cut{n}: the trials numbered below n end their cohort
OPEN_END = 10**9  # steps: without max_resource the geometric rungs run past any step a script reports

# The training slot of the trial running in this thread, set by optimize_in_cohorts: a trial waiting at a
# rung gives it up so that the rest of its cohort can train, and takes it back when it goes on.
_THREAD = threading.local()


class CohortStalledError(RuntimeError):
    """A rung waits for trials that cannot start: every running trial is itself waiting at a rung."""


class SequentialStudyError(CohortStalledError):
    """``should_prune()`` at a rung in a study that runs one trial at a time: the rest of the cohort cannot
    start while this trial waits (use :func:`eve_search.integrations.optuna.optimize_in_cohorts`)."""


class PartialRungWarning(UserWarning):
    """A rung was decided among fewer trials than its cohort (timeout, a cohort closed early, members that
    ended without reporting it). The decision records ``partial``, ``reporters``, ``cohort`` and ``reason``."""


class RungScheduleWarning(UserWarning):
    """The objective's steps do not fit the rungs: a trial completed below the first rung (the pruner never
    judged it), or one report passed several rungs at once (they were judged with one score)."""


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


def _plain(score: float) -> float | None:
    return None if math.isnan(score) else score  # JSON without NaN, which the dashboard cannot parse


def _geometric_rungs(min_resource: Any, reduction_factor: Any, max_resource: Any) -> tuple[int, ...]:
    """Optuna's vocabulary: ``min_resource * reduction_factor**k``, then ``max_resource`` (or open-ended)."""
    if max_resource is not None:
        return rungs_from_geometric(min_resource, max_resource, reduction_factor)
    first = rungs_from_geometric(min_resource, min_resource, reduction_factor)  # checks both arguments
    if first[0] >= OPEN_END:
        return first
    return rungs_from_geometric(min_resource, OPEN_END, reduction_factor)[:-1]  # OPEN_END itself is no rung


@dataclass
class _Cohort:
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


class SynchronousSHAPruner(BasePruner):
    """Synchronous successive halving as an Optuna pruner: a rung is judged once its whole cohort reported it.

    **What a step is.** The rungs are steps, and a step is whatever the objective passes to
    ``trial.report(value, step)``: an epoch counter in most Optuna examples (``for epoch in
    range(EPOCHS): ...; trial.report(accuracy, epoch)``), an iteration counter, or, for eve-search's
    own trials, the evaluation units charged so far (paper, Appendix "Evaluation-Cost Accounting").
    By default the rungs are Optuna's geometric schedule from ``min_resource=1`` step growing by
    ``reduction_factor=3`` (steps 1, 3, 9, 27, ...), open-ended unless ``max_resource`` is given, and
    each rung promotes the best third: a script that counts epochs or iterations works unchanged. The
    paper's rungs in cost units are one argument away: ``rungs=eve_search.engine.ledger.DEFAULT_RUNGS``
    (100, 300, 900, 2,700 and 3,000 units). The first report at a step at or past a rung's budget
    counts for that rung; a report between rungs decides nothing. A warning says when a trial completed
    below the first rung (the pruner never judged it) or when one report passed several rungs at once.

    **The rule.** The objective calls ``trial.should_prune()`` after each report. At a rung,
    ``should_prune()`` waits until every trial of the cohort has reported the rung or ended (COMPLETE,
    PRUNED, FAIL, or failed by Optuna's heartbeat check after its worker died); then the best
    ``ceil(fraction x reporters)`` go on (``should_prune()`` returns False) and the rest are pruned
    (True). At the last rung nobody is pruned. A NaN score ranks last; ties go to the lower trial
    number (:func:`eve_search.engine.ledger.rank_order`).

    **Cohorts** are consecutive trial numbers: the first ``cohort_size`` trials of the study form cohort
    0, the next ``cohort_size`` cohort 1, and so on (a trial re-queued after its worker died takes the
    original's place). A cohort ends early, and is decided with the trials it has, where the study's
    trials end: at ``n_trials`` (for ``study.optimize(objective, n_trials=N)`` with N not a multiple of
    ``cohort_size``), and where :func:`~eve_search.integrations.optuna.optimize_in_cohorts` stops
    starting trials (its ``n_trials``, ``timeout`` or ``study.stop()``).

    **Running a cohort.** A pruner cannot pause a trial, so the trials of a cohort must be alive at
    once. :func:`~eve_search.integrations.optuna.optimize_in_cohorts` runs an ordinary objective so,
    with ``n_jobs`` of them training at a time (a trial waiting at a rung gives up its turn); so do
    ``study.optimize(objective, n_trials=..., n_jobs=cohort_size)`` and that many worker processes on
    one RDB storage. A study that runs one trial at a time (``study.optimize`` with ``n_jobs=1`` on
    in-memory storage) cannot fill a cohort: its first ``should_prune()`` at a rung raises
    :class:`SequentialStudyError` naming the fix, at once. When every running trial waits at a rung
    for cohort members that have not started (fewer workers than ``cohort_size``), the behaviour
    depends on ``timeout``:

    - ``timeout=None`` (default): ``should_prune()`` raises :class:`CohortStalledError`, one message
      that names the fix, once the study has been stalled for ``stall_seconds``. It never hangs.
    - ``timeout=seconds``: a trial that has waited that long decides its rung without the members that
      have not reported; one that reports later is pruned at that rung. In a study that runs one trial
      at a time the rung is decided at once by the trials that reported it (the cohort's first).

    **Records.** Every decision is written to the study's user attributes (``sha:cohort{k}:rung{budget}``:
    promoted and stopped trial numbers, their scores, ``reporters`` and the ``cohort`` it expected),
    where ``optuna-dashboard`` shows it; a decision once written is final, so every thread and process
    applies the same one. A rung decided among fewer reporters than its cohort (a timeout, a cohort
    closed early, members that ended without reporting) records ``partial: true`` and its ``reason``,
    and warns (:class:`PartialRungWarning`).

    To detect dead workers, build the storage with heartbeats
    (``RDBStorage(url, heartbeat_interval=..., grace_period=...)``); a waiting trial checks for stale
    trials while it waits. With ``heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback()``
    a dead worker's trial is re-queued and the rung waits for the retry (which needs a free worker).
    Optuna records a trial's first heartbeat just after the trial starts: a worker killed in between
    leaves a trial that never goes stale, so set ``timeout`` where workers may be killed at any moment.

    For eve-search's own trials, which resume from checkpoints, prefer
    :func:`eve_search.integrations.optuna.run_sha`: it trains each rung as a work item, so the cohort
    need not be alive at once and no trial holds memory while it waits.

    Args:
        rungs: explicit cumulative budgets in steps (integers, strictly increasing), for instance the
            paper's ``eve_search.engine.ledger.DEFAULT_RUNGS`` in cost units; the last promotes nobody. None:
            the geometric schedule below. Give either ``rungs`` or the three arguments below.
        fraction: promoted share of a rung, in (0, 1] (None: ``1 / reduction_factor``, or 1/3 with
            ``rungs``).
        cohort_size: trials judged together (None: the study's ``sha_cohort_size`` user attribute).
        timeout: seconds a trial waits at a rung before deciding without absent members (None: never).
        poll_interval: seconds between two reads of the storage while waiting.
        stall_seconds: how long every running trial must have been waiting at a rung, with cohort
            members not started, before the cohort counts as stalled (a worker process that is still
            starting up must have started its trial by then).
        min_resource: the first rung, in steps (default 1: the second epoch of an objective counting
            from 0).
        reduction_factor: the growth from one rung to the next, a number above 1 (default 3).
        max_resource: the last rung, in steps, where the survivors complete (None: open-ended; a
            trial's schedule ends when its objective returns).
        n_trials: the number of trials the study will have, when it is not a multiple of
            ``cohort_size`` (``study.optimize(objective, n_trials=N)``): the last cohort is decided
            with the trials up to N (None: only ``optimize_in_cohorts`` closes cohorts early).

    Example:
        An objective in the style of Optuna's examples, reporting a validation accuracy per epoch:

        >>> import optuna
        >>> from eve_search.integrations.optuna import SynchronousSHAPruner, optimize_in_cohorts
        >>> def objective(trial):
        ...     quality = trial.suggest_float("quality", 0.0, 1.0)
        ...     for epoch in range(10):
        ...         accuracy = quality * (1 - 0.5 ** (epoch + 1))  # after this epoch's training
        ...         trial.report(accuracy, epoch)
        ...         if trial.should_prune():
        ...             raise optuna.TrialPruned()
        ...     return accuracy
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> pruner = SynchronousSHAPruner(cohort_size=9, poll_interval=0.01)  # rungs at epochs 1, 3, 9
        >>> study = optuna.create_study(direction="maximize", pruner=pruner,
        ...                             sampler=optuna.samplers.RandomSampler(seed=0))
        >>> optimize_in_cohorts(study, objective, n_trials=9)  # one trial trains at a time
        >>> [sum(1 for t in study.trials if step in t.intermediate_values) for step in (1, 3, 9)]
        [9, 3, 1]
        >>> study.best_trial.params["quality"] == max(t.params["quality"] for t in study.trials)
        True
    """

    def __init__(self, rungs: Sequence[int] | None = None, fraction: float | None = None,
                 cohort_size: int | None = None, timeout: float | None = None, poll_interval: float = 0.1,
                 stall_seconds: float = 30.0, *, min_resource: int | None = None,
                 reduction_factor: float | None = None, max_resource: int | None = None,
                 n_trials: int | None = None) -> None:
        geometric = {"min_resource": min_resource, "reduction_factor": reduction_factor,
                     "max_resource": max_resource}
        if rungs is not None:
            given = [name for name, value in geometric.items() if value is not None]
            if given:
                raise ValueError(f"Invalid rungs: {rungs!r} together with {', '.join(given)} (expected either "
                                 "explicit rungs= or min_resource/reduction_factor/max_resource, not both)")
            self.rungs = check_rungs(rungs)
            self.fraction = check_fraction(PROMOTED_FRACTION if fraction is None else fraction)
        else:
            min_resource = 1 if min_resource is None else min_resource
            reduction_factor = 3 if reduction_factor is None else reduction_factor
            self.rungs = _geometric_rungs(min_resource, reduction_factor, max_resource)
            self.fraction = check_fraction(1.0 / reduction_factor if fraction is None else fraction)
        self.min_resource, self.reduction_factor, self.max_resource = min_resource, reduction_factor, max_resource
        for name, count in (("cohort_size", cohort_size), ("n_trials", n_trials)):
            if count is not None:
                check_int(name, count, 1, detail=", or None")
        for name, value in (("timeout", timeout), ("poll_interval", poll_interval), ("stall_seconds", stall_seconds)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise ValueError(f"Invalid {name}: {value!r} (expected a number of seconds > 0)")
        self.cohort_size = cohort_size
        self.n_trials = n_trials
        self.timeout = None if timeout is None else float(timeout)
        self.poll_interval = float(poll_interval)
        self.stall_seconds = float(stall_seconds)
        self._lock = threading.Lock()
        self._warned_unreached = False
        self._warned_jump = False
        self._checked: set[int] = set()

    def __repr__(self) -> str:
        shown = len(self.rungs) if self.max_resource is not None or len(self.rungs) <= 6 else 4
        rungs = ", ".join(str(r) for r in self.rungs[:shown]) + (", ..." if shown < len(self.rungs) else "")
        return (f"SynchronousSHAPruner(rungs=({rungs}), fraction={self.fraction:.4g}, "
                f"cohort_size={self.cohort_size}, timeout={self.timeout})")

    # Reading the study ------------------------------------------------------------------------------

    def _size(self, study: optuna.Study) -> int:
        if self.cohort_size is not None:
            return self.cohort_size
        size = study.user_attrs.get("sha_cohort_size")
        if isinstance(size, int) and size >= 1:
            return size
        raise ValueError("Invalid cohort_size: None and the study has no 'sha_cohort_size' user attribute "
                         "(expected SynchronousSHAPruner(cohort_size=N), N the trials judged together)")

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

    def _cuts(self, attrs: dict[str, Any]) -> list[int]:
        cuts = {int(key[len(CUT_PREFIX):]) for key in attrs
                if key.startswith(CUT_PREFIX) and key[len(CUT_PREFIX):].isdigit()}
        if self.n_trials is not None:
            cuts.add(self.n_trials)
        return sorted(cuts)

    def _cohorts(self, trials: list[FrozenTrial], size: int, attrs: dict[str, Any]) -> list[_Cohort]:
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
        return [_Cohort(k, size, capacity, members, {r: chains[r] for r in members})
                for k, (members, capacity) in enumerate(groups)]

    def _replay(self, study: optuna.Study, cohort: _Cohort, mode: str, attrs: dict[str, Any],
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

    def _write(self, study: optuna.Study, cohort: _Cohort, decision: RungDecision, ledger: RungLedger,
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
            "scores": {str(cohort.roots[p]): _plain(s) for p, s in scores.items() if p in decision.promoted
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

    def _partial_message(self, cohort: _Cohort, value: dict[str, Any], key: str) -> str:
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

    # Steps that do not fit the rungs ------------------------------------------------------------------

    def check_steps(self, study: optuna.Study) -> None:
        """Warn once (:class:`RungScheduleWarning`) if a trial completed with reports that never reached the
        first rung: the pruner never judged it, which usually means the rungs are in other units than the
        objective's steps."""
        if self._warned_unreached:
            return
        for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if trial.last_step is not None and trial.last_step < self.rungs[0]:
                self._warned_unreached = True
                warnings.warn(
                    f"SynchronousSHAPruner: trial {trial.number} completed at step {trial.last_step} without "
                    f"reaching the first rung ({self.rungs[0]}), so the pruner never judged it. A step is what the "
                    "objective passes to trial.report(value, step): give the rungs in those units, e.g. "
                    "SynchronousSHAPruner(min_resource=1, reduction_factor=3, cohort_size=...) for a step per "
                    "epoch", RungScheduleWarning, stacklevel=3)
                return

    def _check_jump(self, trial: FrozenTrial, step: int) -> None:
        if self._warned_jump:
            return
        earlier = [s for s in trial.intermediate_values if s < step]
        floor = max(earlier) if earlier else None
        passed = [b for b in self.rungs if (floor is None or floor < b) and b <= step]
        if len(passed) > 1:
            self._warned_jump = True
            interval = step if floor is None else step - floor
            after = "as its first report" if floor is None else f"after step {floor}"
            warnings.warn(
                f"SynchronousSHAPruner: trial {trial.number} reported step {step} {after}, passing rungs "
                f"{', '.join(str(b) for b in passed)} at once: they are all judged with that one score. Report "
                f"every step, or start the rungs at the steps you report (min_resource={interval})",
                RungScheduleWarning, stacklevel=3)

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

    @staticmethod
    def _runs_alone(study: optuna.Study, trials: list[FrozenTrial], number: int) -> bool:
        """This study runs one trial at a time: its trials live in this process only (in-memory storage),
        this trial runs in the main thread (``study.optimize`` with ``n_jobs=1``, or ask-and-tell; threads of
        ``n_jobs > 1`` are never the main thread), and no other trial is running."""
        if threading.current_thread() is not threading.main_thread():
            return False
        if not isinstance(getattr(study, "_storage", None), InMemoryStorage):
            return False  # shared storage: another process may still start the rest of the cohort
        return not any(t.state == TrialState.RUNNING and t.number != number for t in trials)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        mode = self._mode(study)
        step = trial.last_step
        if step is None:
            return False
        rung = self.rung_of(step)
        if rung is None:
            if trial.number not in self._checked:
                self._checked.add(trial.number)
                self.check_steps(study)
            return False
        self._check_jump(trial, step)
        size = self._size(study)
        root = root_number(trial)
        slot = getattr(_THREAD, "slot", None)
        released = False
        started = time.monotonic()
        stalled_since: float | None = None
        last_stale_check = last_stall_check = 0.0
        while True:
            trials = study.get_trials(deepcopy=False)
            attrs = study.user_attrs
            cohorts = self._cohorts(trials, size, attrs)
            mine = next(c for c in cohorts if root in c.roots)
            self._replay(study, mine, mode, attrs)
            position = mine.roots.index(root)
            outcome = self._outcome(mine, position, rung)
            if outcome is not None:
                if released and not outcome:
                    slot.acquire()  # goes on: train again when its turn comes
                return outcome
            if slot is not None and not released:
                slot.release()  # waits: let another trial of the cohort train meanwhile
                released = True
            ledger = mine.ledger
            assert ledger is not None
            pending = next(r for r in range(rung + 1) if ledger.decide(r) is None)
            absent = [p for p in ledger.waiting_for(pending) if mine.queued(p)]
            if absent and slot is None and self._runs_alone(study, trials, trial.number):
                if self.timeout is None:
                    raise SequentialStudyError(
                        f"SynchronousSHAPruner: trial {trial.number} reached rung {self.rungs[pending]} of "
                        f"{mine.describe()}, whose other {len(absent)} trial(s) have not started, and this study "
                        "runs one trial at a time (study.optimize with n_jobs=1), so they cannot start while this "
                        "trial waits in should_prune(): run the objective with eve_search.integrations.optuna."
                        "optimize_in_cohorts(study, objective, n_trials=...) (a cohort's trials are alive at once, "
                        f"n_jobs of them training), or study.optimize(objective, n_trials=..., n_jobs={size})")
                self._replay(study, mine, mode, study.user_attrs, force=pending, reason="sequential")
                continue
            now = time.monotonic()
            if self.timeout is not None and now - started >= self.timeout:
                self._replay(study, mine, mode, study.user_attrs, force=pending, reason="timeout")
                continue
            if now - last_stale_check >= 1.0:
                last_stale_check = now
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(study)
            if self.timeout is None and now - last_stall_check >= min(1.0, self.stall_seconds / 4):
                last_stall_check = now
                running = [t for t in trials if t.state == TrialState.RUNNING]
                live = {root_number(t) for t in running}
                for other in cohorts:
                    if other is not mine and live.intersection(other.roots):
                        self._replay(study, other, mode, attrs)
                if absent and all(self._blocked(t, cohorts) for t in running):
                    stalled_since = now if stalled_since is None else stalled_since
                    if now - stalled_since >= self.stall_seconds:
                        raise CohortStalledError(
                            f"SynchronousSHAPruner: rung {self.rungs[pending]} of {mine.describe()} waits for "
                            f"{len(absent)} trial(s) that have not started, while every running trial waits at a "
                            f"rung: run all {size} trials of a cohort at once (study.optimize(..., n_jobs={size}) "
                            "or more worker processes), or run the objective with eve_search.integrations.optuna."
                            "optimize_in_cohorts(study, objective, n_trials=..., n_jobs=...), which lets fewer "
                            "train at once; if no more trials will start (the last cohort of n_trials, or "
                            "optimize's timeout), pass n_trials= to the pruner or use optimize_in_cohorts; or "
                            "lower cohort_size, or set timeout= to decide without them")
                else:
                    stalled_since = None
            time.sleep(self.poll_interval)
