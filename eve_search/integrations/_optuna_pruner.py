"""A synchronous successive-halving pruner for ordinary Optuna objectives.

Optuna's own :class:`optuna.pruners.SuccessiveHalvingPruner` is asynchronous: it judges a trial at a
rung against the trials that happened to report that rung before it, so the outcome depends on the
order in which trials run (the first trial of a study is never pruned). Synchronous successive
halving (paper, Section "Successive halving") judges a rung once its whole cohort has reported it.
A pruner cannot pause a trial, so :class:`SynchronousSHAPruner` makes ``should_prune()`` wait at a
rung until every trial of the cohort has reported the rung or ended, then lets the rung ledger
(:mod:`eve_search.engine.ledger`, the only place with the rung rule and its tie-break) decide.

Everything it decides with is read from the study's storage on every poll (trials, their intermediate
values and states, decisions already taken, cohorts closed early), so it works across threads
(:func:`eve_search.integrations.optuna.optimize_in_cohorts`, ``study.optimize(..., n_jobs=k)``) and
across processes and machines sharing one RDB storage. No decision reads a clock: a cohort closes
early on events (``study.optimize`` stopped asking and its trials wait; ``optimize_in_cohorts`` stopped
starting trials; the pruner's ``n_trials``), which the pruner learns from the storage and from the
stacks of this process's threads (which ``study.optimize`` loops run the study, and what each is
doing). A timer remains only as a last guard that raises (``stall_seconds``), and as the user's own
``timeout=``.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from eve_search._checks import InputError, check_int
from eve_search.engine.ledger import (
    PROMOTED_FRACTION,
    RungDecision,
    RungLedger,
    check_fraction,
    check_rungs,
    rungs_from_geometric,
)
from eve_search.engine.stream import CohortStream, Work
from eve_search.integrations._optuna_adapter import activity, heartbeats, in_memory, own_loop, study_key

__all__ = [
    "CUT_PREFIX",
    "CohortStalledError",
    "PartialRungWarning",
    "RungScheduleWarning",
    "SequentialStudyError",
    "StaleTrialWarning",
    "SynchronousSHAPruner",
    "decision_key",
    "root_number",
]

CUT_PREFIX = "sha:cut"  # study user attribute sha:cut{n}: the trials numbered below n end their cohort
SAFE_GRACE_MARGIN = 10.0  # seconds a heartbeat may come late on a busy machine (the docstring's safe grace periods)
OPEN_END = 10**9  # steps: without max_resource the geometric rungs run past any step a script reports

# The training slot of the trial running in this thread, set by optimize_in_cohorts: a trial waiting at a
# rung gives it up so that the rest of its cohort can train, and takes it back when it goes on.
_THREAD = threading.local()


class CohortStalledError(RuntimeError):
    """A rung waits for trials that cannot start: every running trial is itself waiting at a rung, and no
    thread of ``study.optimize`` is free to start one (or, on shared storage, none started within the
    pruner's ``stall_seconds`` guard)."""


class SequentialStudyError(CohortStalledError):
    """A study that runs one trial at a time (``study.optimize`` with ``n_jobs=1``, or ask-and-tell one trial
    at a time): the rest of the cohort cannot report while this trial waits or goes on alone; raised at
    the first ``should_prune()`` where that is known, naming a fix that fits the script."""


class PartialRungWarning(UserWarning):
    """A rung was decided among fewer trials than its cohort (timeout, a cohort closed early, members that
    ended without reporting it). The decision records ``partial``, ``reporters``, ``cohort`` and ``reason``."""


class StaleTrialWarning(UserWarning):
    """A trial that this process still runs was failed as stale by a heartbeat check (another worker's, or
    this process's own): its heartbeats came more than the storage's ``grace_period`` apart, usually on a
    busy machine. The pruner drops it (``should_prune()`` returns True from then on), once per trial."""


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
    ``should_prune()`` inside ``study.optimize`` waits until every trial of the cohort has reported the
    rung or ended (COMPLETE, PRUNED, FAIL, or failed by Optuna's heartbeat check after its worker died);
    then the best
    ``ceil(fraction x reporters)`` go on (``should_prune()`` returns False) and the rest are pruned
    (True). At the last rung nobody is pruned. A NaN score ranks last; ties go to the lower trial
    number (:func:`eve_search.engine.ledger.rank_order`).

    **Cohorts** are consecutive trial numbers: the first ``cohort_size`` trials of the study form cohort
    0, the next ``cohort_size`` cohort 1, and so on (a trial re-queued after its worker died takes the
    original's place). A cohort ends early, and is decided with the trials it has, when the study stops
    starting trials: ``study.optimize`` reached its ``n_trials``, its ``timeout`` passed, or
    ``study.stop()`` was called, and every trial of the cohort that runs waits at a rung;
    :func:`~eve_search.integrations.optuna.optimize_in_cohorts` closes it the moment it stops starting
    trials; the pruner's own ``n_trials=`` closes it at that count. These are events, never a wait: a
    slow trial, or a report that comes late, keeps its cohort open for as long as it trains.

    **Running a cohort.** A pruner cannot pause a trial, so inside ``study.optimize`` the trials of a
    cohort must be alive at once. :func:`~eve_search.integrations.optuna.optimize_in_cohorts` runs an
    ordinary objective so, with ``n_jobs`` of them training at a time (a trial waiting at a rung gives
    up its turn, and the next turn goes where the stream of cohorts says: a promoted trial of the oldest
    cohort, else a new trial); so do ``study.optimize(objective, n_trials=..., n_jobs=cohort_size)`` and
    that many worker processes on one RDB storage. The pruner reads from the stacks of this process's
    threads what each ``study.optimize`` on the study is doing (training, waiting at a rung, waiting
    for a free thread, or done asking), so it knows when no trial can start any more:

    - a study that runs one trial at a time (``study.optimize`` with ``n_jobs=1``, or ask-and-tell one
      trial at a time) cannot fill a cohort: its first ``should_prune()``, before any rung, raises
      :class:`SequentialStudyError` naming a fix that fits the script (on RDB storage too, unless
      ``workers`` says that other processes run the study);
    - when every thread of ``study.optimize(..., n_jobs=k)`` waits at a rung for members that have not
      started (k below ``cohort_size``), ``should_prune()`` raises :class:`CohortStalledError` at once,
      naming the fix;
    - when ``study.optimize`` has stopped asking (``n_trials``, ``timeout``, ``study.stop()``) and its
      running trials wait at a rung, the last cohort is closed with the trials it has.

    **Worker processes.** Nothing in one process tells whether other processes will join a study on RDB
    storage (a lone script on ``sqlite:///...`` and the first of several workers still starting look
    the same), so the pruner is told: ``workers`` is the number of processes that run the study at once,
    this one included (default 1: this process alone, judged as an in-memory study is). With
    ``workers=N`` (N > 1) a process that cannot hold a cohort alive by itself waits for the other
    processes' trials, and ``stall_seconds`` is only a last guard against a hang
    (:class:`CohortStalledError`), not a decision. ``timeout=seconds`` is a decision by the clock, for
    those who want it: a trial that has waited that long decides its rung without the members that have
    not reported; one that reports later is pruned at that rung (results then depend on the machine's
    speed).

    **Ask and tell.** Outside ``study.optimize`` the caller may train several trials itself (Optuna's
    batched ask-and-tell: ``trials = [study.ask() for _ in range(cohort_size)]``, then each trained,
    reported and checked in turn, epoch by epoch), so ``should_prune()`` never waits there: a rung
    already decided gives its verdict, a rung still open gives False, and the trial learns the verdict
    at its next ``should_prune()`` (the rung's score is its report at the rung, so the decisions are the
    same as waiting; a pruned trial trains one step more). Ask-and-tell with one trial at a time cannot
    work (its cohort's other trials are asked only after it ends) and is refused at its first
    ``should_prune()``, naming the batched pattern; the cohort it needs is ``cohort_size`` trials asked
    before any of them is told. A last batch smaller than the cohort needs ``n_trials=`` (the study's
    total), so that its cohort is decided with the trials it has.

    **Records.** Every decision is written to the study's user attributes (``sha:cohort{k}:rung{budget}``:
    promoted and stopped trial numbers, their scores, ``reporters`` and the ``cohort`` it expected),
    where ``optuna-dashboard`` shows it; a decision once written is final, so every thread and process
    applies the same one. A rung decided among fewer reporters than its cohort (a timeout, a cohort
    closed early, members that ended without reporting) records ``partial: true`` and its ``reason``,
    and warns (:class:`PartialRungWarning`).

    **Heartbeats.** To detect dead workers, build the storage with heartbeats
    (``RDBStorage(url, heartbeat_interval=h, grace_period=g)``); a waiting trial checks for stale
    trials every second while it waits (nothing else would find them while every trial waits). With
    ``heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback()`` a dead worker's trial is
    re-queued and the rung waits for the retry (which needs a free worker). Optuna records a trial's
    first heartbeat just after the trial starts: a worker killed in between leaves a trial that never
    goes stale, so set ``timeout`` where workers may be killed at any moment.

    A trial is failed as stale once its last heartbeat is more than ``g`` seconds old, so a *live*
    worker's trial is failed whenever one of its heartbeats comes more than ``g - h`` seconds late; the
    pruner's wait does not delay heartbeats (Optuna beats from its own thread while the trial waits),
    but its checks every second find such a late one at once. Heartbeats come late when the machine is
    busy (a heartbeat more than 2 s late at a load of 10 on 2 cores failed a live trial with ``h=1``,
    ``g=3``) and on SQLite, where a write waits for the database's lock up to the connection's busy
    timeout (5 s by default).
    Safe: ``g >= h + 10`` seconds (``SAFE_GRACE_MARGIN``), plus SQLite's busy timeout on SQLite, e.g.
    ``RDBStorage("sqlite:///s.db", heartbeat_interval=1, grace_period=16)``; PostgreSQL
    ``heartbeat_interval=1, grace_period=11``. Refused at the first ``should_prune()`` (one line):
    ``g <= h``, where a live trial is stale between two of its own heartbeats. A live trial failed as
    stale all the same is dropped with one :class:`StaleTrialWarning`: ``should_prune()`` returns True
    (the objective ends it as pruned, it stays FAIL in the study, and its cohort goes on without it, or
    with its retry); it never raises ``UpdateFinishedTrialError`` through the pruner.
    :func:`~eve_search.integrations.optuna.optimize_in_cohorts` also drops such a trial when its next
    ``trial.report`` finds it failed, and goes on; a plain ``study.optimize`` then raises Optuna's own
    ``ValueError: Cannot tell a FAIL trial`` when it records the trial's end (optuna/optuna#5470, with
    any pruner), so a worker process that must outlive it calls ``study.optimize`` again.

    **Several objectives** cannot be pruned: Optuna refuses ``trial.report`` there (its own
    ``NotImplementedError``) and never asks a pruner. :func:`~eve_search.integrations.optuna.optimize_in_cohorts`
    and :func:`~eve_search.integrations.optuna.run_sha` refuse such a study in one ``ValueError``, before
    any trial.

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
        timeout: seconds a trial waits at a rung before deciding without absent members (None: never;
            a decision by the clock, so results may depend on the machine's speed).
        poll_interval: seconds between two reads of the storage while waiting.
        stall_seconds: a last guard, never a decision: on shared storage, how long every running trial
            may wait at a rung, while this process can start no trial and no other process runs one,
            before ``should_prune()`` raises :class:`CohortStalledError` (default 300 s: over ten times the
            5-11 s a worker process took here to import PyTorch and Optuna under load).
        min_resource: the first rung, in steps (default 1: the second epoch of an objective counting
            from 0).
        reduction_factor: the growth from one rung to the next, a number above 1 (default 3).
        max_resource: the last rung, in steps, where the survivors complete (None: open-ended; a
            trial's schedule ends when its objective returns).
        n_trials: the number of trials the study will have, when it is not a multiple of
            ``cohort_size`` (``study.optimize(objective, n_trials=N)``): the last cohort is decided
            with the trials up to N (None: only ``optimize_in_cohorts`` closes cohorts early).
        workers: the processes that run the study at once on RDB storage, this one included (default 1:
            this process alone; ignored on in-memory storage). Only whether it is above 1 matters: then
            the pruner waits for other processes to start the trials this one cannot.

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
                 stall_seconds: float = 300.0, *, min_resource: int | None = None,
                 reduction_factor: float | None = None, max_resource: int | None = None,
                 n_trials: int | None = None, workers: int = 1) -> None:
        geometric = {"min_resource": min_resource, "reduction_factor": reduction_factor,
                     "max_resource": max_resource}
        if rungs is not None:
            given = [name for name, value in geometric.items() if value is not None]
            if given:
                raise InputError(f"Invalid rungs: {rungs!r} together with {', '.join(given)} (expected either "
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
        check_int("workers", workers, 1, detail=" of worker processes")
        for name, value in (("timeout", timeout), ("poll_interval", poll_interval), ("stall_seconds", stall_seconds)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise InputError(f"Invalid {name}: {value!r} (expected a number of seconds > 0)")
        self.cohort_size = cohort_size
        self.n_trials = n_trials
        self.workers = workers
        self.timeout = None if timeout is None else float(timeout)
        self.poll_interval = float(poll_interval)
        self.stall_seconds = float(stall_seconds)
        self._lock = threading.Lock()
        self._warned_unreached = False
        self._warned_jump = False
        self._checked: set[int] = set()
        self._looked: set[tuple[int, bool]] = set()  # (trial, at a rung) whose refusals were checked
        self._warned_alone = False
        self._set_up: set[Any] = set()  # studies (keys) whose storage was checked at the first should_prune()
        self._dropped: set[tuple[Any, int]] = set()  # (study key, trial number) failed as stale while running here

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

    def _pending(self, cohort: _Cohort, position: int, rung: int) -> int | None:
        """The first undecided rung up to ``rung`` of the member's cohort (None: all decided)."""
        ledger = cohort.ledger
        assert ledger is not None
        return next((r for r in range(rung + 1) if ledger.decide(r) is None), None)

    def _look(self, study: optuna.Study, size: int, mode: str, root: int) -> tuple[list[FrozenTrial], list[_Cohort],
                                                                                   _Cohort]:
        """One read of the study: its trials, its cohorts, and the cohort of ``root`` replayed."""
        trials = study.get_trials(deepcopy=False)
        attrs = study.user_attrs
        cohorts = self._cohorts(trials, size, attrs)
        mine = next(c for c in cohorts if root in c.roots)
        self._replay(study, mine, mode, attrs)
        return trials, cohorts, mine

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        mode = self._mode(study)
        key = study_key(study)
        if key not in self._set_up:
            self.check_storage(study)  # the first should_prune(): a storage that cannot work is refused (in every
            self._set_up.add(key)  # thread: a refused study is never marked as checked)
        if trial.state == TrialState.FAIL:
            return self._drop(study, trial.number)
        step = trial.last_step
        if step is None:
            return False
        size = self._size(study)
        slot = getattr(_THREAD, "slot", None)
        loop = None if slot is not None else own_loop(study)
        rung = self.rung_of(step)
        first_look = (trial.number, rung is not None) not in self._looked
        if first_look:
            self._looked.add((trial.number, rung is not None))
        if rung is None:
            if trial.number not in self._checked:
                self._checked.add(trial.number)
                self.check_steps(study)
            if first_look and slot is None and self.timeout is None:  # known at the first should_prune
                if loop is not None:
                    self._refuse_sequential(study, trial, loop, size, mode)
                else:
                    self._refuse_one_at_a_time(study, trial, size, mode)
            return False
        self._check_jump(trial, step)
        root = root_number(trial)
        if slot is None and loop is None and self.timeout is None:
            return self._ask_and_tell(study, trial, size, mode, rung)
        if first_look and slot is None and loop is not None and self.timeout is None:
            self._refuse_sequential(study, trial, loop, size, mode)
        with _WAITING_LOCK:
            _WAITING[threading.get_ident()] = (key, trial.number, rung)
        try:
            return self._wait(study, trial, size, mode, rung, root, slot, loop)
        finally:
            with _WAITING_LOCK:
                _WAITING.pop(threading.get_ident(), None)

    # Setup and storage --------------------------------------------------------------------------------

    def check_storage(self, study: optuna.Study) -> None:
        """Refuse a study this pruner cannot run (one line naming the setting): several objectives, or heartbeats
        whose ``grace_period`` is not above ``heartbeat_interval`` (a live trial would be stale between two of
        its heartbeats, and a trial waiting at a rung checks for stale trials every second). Called at the first
        ``should_prune()`` on a study and by :func:`~eve_search.integrations.optuna.optimize_in_cohorts`.

        Args:
            study: the study the pruner prunes.

        Raises:
            ValueError: the study cannot work with this pruner.
        """
        self._mode(study)
        beats = heartbeats(study)
        if beats is not None and beats[1] <= beats[0]:
            interval, grace = beats
            raise InputError(
                f"Invalid grace_period: {grace:g} (the storage's heartbeat_interval is {interval:g} s, so a live trial "
                "is stale between two of its heartbeats: expected grace_period above heartbeat_interval, and at least "
                f"heartbeat_interval + {SAFE_GRACE_MARGIN:g} s on a busy machine, e.g. RDBStorage(url, "
                f"heartbeat_interval={interval:g}, grace_period={interval + SAFE_GRACE_MARGIN:g}))")

    def _drop(self, study: optuna.Study, number: int, depth: int = 0) -> bool:
        """A trial this process runs was failed as stale by a heartbeat check: it is dropped (True: the objective
        ends it as pruned), with one warning (``depth``: calls between ``prune()`` and here, so that the warning
        points at the objective's ``should_prune()``)."""
        key = (study_key(study), number)
        if key not in self._dropped:
            self._dropped.add(key)
            beats = heartbeats(study)
            settings = "" if beats is None else f"heartbeat_interval={beats[0]:g} s, grace_period={beats[1]:g} s: "
            warnings.warn(
                f"SynchronousSHAPruner: trial {number} was failed as stale by a heartbeat check while this process "
                f"still ran it ({settings}its heartbeats came too far apart, usually on a busy machine); it is dropped "
                "(should_prune() returns True, the study keeps it as FAIL and its cohort goes on without it or with "
                f"its retry): use a grace_period at least heartbeat_interval + {SAFE_GRACE_MARGIN:g} s",
                StaleTrialWarning, stacklevel=4 + depth)
        return True

    def dropped(self, study: optuna.Study, number: int) -> bool:
        """Whether trial ``number`` of ``study`` was dropped because it was failed as stale while this process
        ran it (see :class:`StaleTrialWarning`).

        Args:
            study: the study.
            number: the trial's number.

        Returns:
            True if the pruner dropped it.
        """
        return (study_key(study), number) in self._dropped

    def _local(self, study: optuna.Study) -> bool:
        """Every trial that will run on the study runs in this process: in-memory storage, or shared storage
        that ``workers=1`` says no other process runs."""
        return in_memory(study) or self.workers == 1

    def _workers_hint(self, study: optuna.Study) -> str:
        if in_memory(study):
            return ""
        return (", or, if other worker processes run this study on its shared storage, say how many: "
                "SynchronousSHAPruner(..., workers=N)")

    # Scripts that cannot fill a cohort ------------------------------------------------------------------

    def _ask_and_tell(self, study: optuna.Study, trial: FrozenTrial, size: int, mode: str, rung: int) -> bool:
        """``should_prune()`` outside ``study.optimize``: the caller may train the rest of the cohort itself (the
        batched ask-and-tell pattern), so it never waits. A rung decided already gives its verdict; a rung
        still open gives False, and the trial learns the verdict at its next ``should_prune()`` (its score at
        the rung is the one reported there, so the decision is the same). One trial at a time cannot work."""
        trials, _, mine = self._look(study, size, mode, root_number(trial))
        own = next((t for t in trials if t.number == trial.number), trial)
        if own.state == TrialState.FAIL:
            return self._drop(study, trial.number, depth=1)
        position = mine.roots.index(root_number(trial))
        outcome = self._outcome(mine, position, rung)
        if outcome is not None:
            return outcome
        pending = self._pending(mine, position, rung)
        assert pending is not None and mine.ledger is not None
        absent = [p for p in mine.ledger.waiting_for(pending) if mine.queued(p)]
        if absent and self._one_at_a_time(study, trials, trial.number):
            raise SequentialStudyError(
                f"SynchronousSHAPruner: trial {trial.number} reached rung {self.rungs[pending]} of {mine.describe()}, "
                f"whose other {len(absent)} trial(s) have not been asked, and this ask-and-tell script runs one trial "
                f"at a time, so they cannot report the rung before this trial ends: {self._batched_fix(size)}"
                f"{self._workers_hint(study)}")
        return False

    @staticmethod
    def _batched_fix(size: int) -> str:
        return (f"ask the whole cohort first (trials = [study.ask() for _ in range({size})]) and train them in turn, "
                "reporting each one's step and calling should_prune() (in ask-and-tell it never waits: a trial "
                "learns its rung's verdict at its next should_prune())")

    def _one_at_a_time(self, study: optuna.Study, trials: list[FrozenTrial], number: int) -> bool:
        """Ask-and-tell one trial at a time: no other trial of the study runs, and none will start elsewhere."""
        if not self._local(study):
            return False
        return not any(t.state == TrialState.RUNNING and t.number != number for t in trials)

    def _refuse_one_at_a_time(self, study: optuna.Study, trial: FrozenTrial, size: int, mode: str) -> None:
        """At the first ``should_prune()`` of an ask-and-tell trial: refused if it runs alone (in the main thread,
        no other trial running, none starting elsewhere) while its cohort has trials not yet asked."""
        if threading.current_thread() is not threading.main_thread():
            return  # a thread of the caller's own: its siblings may still ask the rest of the cohort
        trials, _, mine = self._look(study, size, mode, root_number(trial))
        absent = [p for p in range(mine.capacity) if mine.queued(p)]
        if absent and self._one_at_a_time(study, trials, trial.number):
            raise SequentialStudyError(
                f"SynchronousSHAPruner: trial {trial.number} is in {mine.describe()}, whose other {len(absent)} "
                "trial(s) have not been asked, and this ask-and-tell script runs one trial at a time, so they cannot "
                f"report a rung before this trial ends: {self._batched_fix(size)}{self._workers_hint(study)}")

    def _refuse_sequential(self, study: optuna.Study, trial: FrozenTrial, loop: dict[str, Any], size: int,
                           mode: str) -> None:
        """At the first ``should_prune()``: a ``study.optimize(..., n_jobs=1)`` runs one trial at a time in this
        thread; when no other thread runs the study, no trial of another process runs, and the storage is this
        process's alone (in memory, or ``workers=1``), the rest of the cohort can never start while this trial
        waits at a rung."""
        if loop.get("n_jobs") != 1 or not self._local(study):
            return
        if _activity(study).loops > 1:
            return  # other threads run study.optimize on this study too
        trials, _, mine = self._look(study, size, mode, root_number(trial))
        if any(t.state == TrialState.RUNNING and t.number != trial.number for t in trials):
            return  # another trial runs (another process's): it may start the rest
        absent = [p for p in range(mine.capacity) if mine.queued(p)]
        if not absent:
            return
        raise SequentialStudyError(
            f"SynchronousSHAPruner: trial {trial.number} is in {mine.describe()}, whose other {len(absent)} trial(s) "
            "have not started, and this study runs one trial at a time (study.optimize with n_jobs=1), so they "
            "cannot start while this trial waits at a rung in should_prune(): run the objective with "
            "eve_search.integrations.optuna.optimize_in_cohorts(study, objective, n_trials=...) (a cohort's trials "
            f"are alive at once, n_jobs of them training), or study.optimize(objective, n_trials=..., n_jobs={size})"
            f"{self._workers_hint(study)}")

    def _wait(self, study: optuna.Study, trial: FrozenTrial, size: int, mode: str, rung: int, root: int,
              slot: Any, loop: dict[str, Any] | None) -> bool:
        """Wait at the rung until it is decided (polling the storage); close the cohort, or refuse, when the
        threads of this process show that no trial can start any more."""
        released = False
        started = time.monotonic()
        last_stale_check = 0.0
        previous: tuple[Any, ...] | None = None  # the last stall verdict, with the study's state it was seen in
        stalled_since: float | None = None
        while True:
            trials, cohorts, mine = self._look(study, size, mode, root)
            own = next((t for t in trials if t.number == trial.number), trial)
            if own.state == TrialState.FAIL:
                return self._drop(study, trial.number, depth=1)  # failed as stale while it waited: it ends here
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
            pending = self._pending(mine, position, rung)
            assert pending is not None
            absent = [p for p in ledger.waiting_for(pending) if mine.queued(p)]
            if absent and slot is None and self._runs_alone(study, trials, trial.number):
                # one trial at a time, with timeout=: the trials that have not started cannot be waited for
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
            verdict = self._stalled(study, trials, size, mode) if absent and loop is not None else None
            seen = None if verdict is None else (verdict, _fingerprint(trials))
            if seen is None or seen != previous:
                previous, stalled_since = seen, None
                time.sleep(self.poll_interval)
                continue  # acted on only when two looks in a row see it, the study unchanged between them
            kind, detail = verdict
            if kind == "ended":
                self._close(study, detail)  # no more trials join the last cohort
                _, _, mine = self._look(study, size, mode, root)
                ledger = mine.ledger
                assert ledger is not None
                pending = self._pending(mine, position, rung)
                if pending is not None and any(mine.queued(p) for p in ledger.waiting_for(pending)):
                    self._replay(study, mine, mode, study.user_attrs, force=pending, reason="closed")
                previous = None
                continue
            if self.timeout is None and kind == "full":
                raise CohortStalledError(
                    f"SynchronousSHAPruner: rung {self.rungs[pending]} of {mine.describe()} waits for {len(absent)} "
                    f"trial(s) that have not started, while all {detail} threads of study.optimize(..., "
                    f"n_jobs={detail}) wait at a rung, so none can start: run study.optimize(objective, n_trials=..., "
                    f"n_jobs={size}) (a cohort's trials alive at once), or eve_search.integrations.optuna."
                    f"optimize_in_cohorts(study, objective, n_trials=..., n_jobs={detail}) (they take turns), or "
                    f"lower cohort_size to {detail}, or set timeout= to decide without them"
                    f"{self._workers_hint(study)}")
            if self.timeout is None:  # "unknown": other worker processes may still start the trials
                if stalled_since is None and not self._warned_alone:
                    self._warned_alone = True
                    warnings.warn(
                        f"SynchronousSHAPruner: rung {self.rungs[pending]} of {mine.describe()} waits for "
                        f"{len(absent)} trial(s) that have not started, while every running trial of the study waits "
                        "at a rung and this process can start none: on shared storage only other worker processes "
                        "can start them. If none will, stop and run the objective with eve_search.integrations."
                        "optuna.optimize_in_cohorts(study, objective, n_trials=...); should_prune() raises "
                        f"CohortStalledError after stall_seconds={self.stall_seconds:g} s of this",
                        RuntimeWarning, stacklevel=4)
                stalled_since = now if stalled_since is None else stalled_since
                if now - stalled_since >= self.stall_seconds:
                    raise CohortStalledError(
                        f"SynchronousSHAPruner: rung {self.rungs[pending]} of {mine.describe()} waited "
                        f"stall_seconds={self.stall_seconds:g} s for {len(absent)} trial(s) that have not started, "
                        "while every running trial of the study waits at a rung and this process can start none: "
                        f"start more worker processes on the study (a cohort needs {size} trials alive at once), or "
                        "run the objective with eve_search.integrations.optuna.optimize_in_cohorts(study, objective, "
                        "n_trials=...), or pass n_trials= to the pruner if no more trials will start, or lower "
                        "cohort_size")
            time.sleep(self.poll_interval)

    def _stalled(self, study: optuna.Study, trials: list[FrozenTrial], size: int,
                 mode: str) -> tuple[str, Any] | None:
        """Whether no trial of this process can report or start any more (read from the stacks of its threads):
        None while one can (a thread trains or is about to ask, another process's trial runs, a waiting trial's
        rung can be decided), else ``("ended", reason)`` when every ``study.optimize`` on the study has stopped
        asking, ``("full", n_jobs)`` when one waits for a free thread that no trial will give back, and
        ``("unknown", None)`` otherwise (a sequential loop waits, on shared storage)."""
        activity = _activity(study)
        if not activity.known or activity.busy or activity.pending > activity.pool:
            return None  # a thread can still report or start a trial, or a task is on its way to one
        if activity.full and activity.pool < sum(activity.full):
            return None  # a thread of a full pool is free again: its loop is about to start a trial
        running = {t.number for t in trials if t.state == TrialState.RUNNING}
        if running - activity.running:
            return None  # a trial this process does not run: another process's, which may report or end
        attrs = study.user_attrs
        cohorts = self._cohorts(trials, size, attrs)
        for number, waiting_rung in activity.waiting:
            frozen = next((t for t in trials if t.number == number), None)
            if frozen is None:
                return None
            cohort = next((c for c in cohorts if root_number(frozen) in c.roots), None)
            if cohort is None:
                return None
            self._replay(study, cohort, mode, attrs)
            if self._outcome(cohort, cohort.roots.index(root_number(frozen)), waiting_rung) is not None:
                return None  # decided: that trial goes on
        local = self._local(study)  # no other process will start a trial
        if activity.full or activity.blocked:
            if local and activity.full:
                return ("full", min(activity.full))
            if local:
                return ("full", 1)
            return ("unknown", None)
        if activity.ended:
            return ("ended", activity.ended[0])
        return ("unknown", None)

    def _runs_alone(self, study: optuna.Study, trials: list[FrozenTrial], number: int) -> bool:
        """One trial at a time: this study's trials live in this process only (in-memory storage, or ``workers=1``),
        this trial runs in the main thread (``study.optimize`` with ``n_jobs=1``, or ask-and-tell), and no other
        trial is running."""
        if threading.current_thread() is not threading.main_thread():
            return False
        if not self._local(study):
            return False  # shared storage: another process may still start the rest of the cohort
        return not any(t.state == TrialState.RUNNING and t.number != number for t in trials)

    # For optimize_in_cohorts ------------------------------------------------------------------------

    def stream_view(self, study: optuna.Study, training: set[int]) -> tuple[CohortStream, Callable[[int], int | None]]:
        """The study's cohorts as a :class:`~eve_search.engine.stream.CohortStream`, for choosing what trains next.

        Configuration ``k * cohort_size + p`` of the stream is member ``p`` of cohort ``k`` (a cohort closed early
        has fewer members); each cohort's ledger is the one the pruner replays from the storage. The trials
        in ``training`` (numbers) are the stream's running work.

        Returns:
            The stream, and a function from a stream index to the number of the trial that holds that place
            (None: not asked yet, a trial to start).
        """
        size = self._size(study)
        mode = self._mode(study)
        trials = study.get_trials(deepcopy=False)
        attrs = study.user_attrs
        cohorts = self._cohorts(trials, size, attrs)
        states = []
        for cohort in cohorts:
            self._replay(study, cohort, mode, attrs)
            ledger = cohort.ledger
            assert ledger is not None
            state = ledger.state_dict()
            shift = cohort.index * size

            def moved(values: Any, shift: int = shift) -> Any:
                return [shift + v for v in values]

            state["members"] = moved(state["members"])
            state["scores"] = [[[shift + t, s] for t, s in rung] for rung in state["scores"]]
            state["failed"] = moved(state["failed"])
            state["decisions"] = [None if d is None else {"promoted": moved(d["promoted"]),
                                                          "stopped": moved(d["stopped"])}
                                  for d in state["decisions"]]
            states.append(state)
        stream = CohortStream(None, size, rungs=self.rungs, fraction=self.fraction, mode=mode)
        stream.load_state_dict({"configs": None, "cohort_size": size, "speculate": False, "ledgers": states,
                                "held": [], "dropped": []})
        place = {root: cohort.index * size + p for cohort in cohorts for p, root in enumerate(cohort.roots)}
        for trial in trials:
            if trial.number in training and root_number(trial) in place:
                index = place[root_number(trial)]
                rung = stream.ledger(stream.cohort_of(index)).next_rung(index)
                if rung is not None and Work(index, rung) not in stream.running:
                    stream.start(Work(index, rung))

        def number(index: int) -> int | None:
            k, p = divmod(index, size)
            return cohorts[k].root_at(p) if k < len(cohorts) else None

        return stream, number


# What this process's threads do with a study ------------------------------------------------------------

# Each thread waiting inside should_prune(): (study key, trial number, rung).
_WAITING: dict[int, tuple[Any, int, int]] = {}
_WAITING_LOCK = threading.Lock()


def _activity(study: optuna.Study) -> Any:
    """What this process's threads are doing with ``study`` (see
    :class:`~eve_search.integrations._optuna_adapter.Activity`), with the trials waiting in ``should_prune()``."""
    key = study_key(study)
    with _WAITING_LOCK:
        waiting = {ident: (number, rung) for ident, (k, number, rung) in _WAITING.items() if k == key}
    return activity(study, waiting)


def _fingerprint(trials: list[FrozenTrial]) -> tuple[Any, ...]:
    """What changes when anything happens to a study: its trials, their states and reports."""
    return tuple((t.number, t.state, len(t.intermediate_values)) for t in trials)
