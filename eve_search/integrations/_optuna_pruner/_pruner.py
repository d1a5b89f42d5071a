"""The public class, :class:`SynchronousSHAPruner`: its arguments, ``prune()`` (what ``trial.should_prune()``
asks) and the view of the study that ``optimize_in_cohorts`` schedules from. Its parts live beside it: the
bookkeeping (:mod:`._ledger`), the wait at a rung (:mod:`._waiting`) and the checks and refusals
(:mod:`._guards`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from eve_search._checks import check_int
from eve_search.engine.stream import CohortStream, Work
from eve_search.integrations._optuna_adapter import own_loop, study_key
from eve_search.integrations._optuna_pruner._cohort import root_number
from eve_search.integrations._optuna_pruner._guards import Guards
from eve_search.integrations._optuna_pruner._ledger import StudyLedger
from eve_search.integrations._optuna_pruner._options import PrunerOptions, pruner_options, rung_rule
from eve_search.integrations._optuna_pruner._threads import THREAD, WAITING, WAITING_LOCK
from eve_search.integrations._optuna_pruner._waiting import Waiter, Waiting

__all__ = ["SynchronousSHAPruner"]


class SynchronousSHAPruner(Waiting, Guards, StudyLedger, BasePruner):
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
        min_resource: the first rung, in steps (default 1: the second epoch of an objective counting
            from 0).
        reduction_factor: the growth from one rung to the next, a number above 1 (default 3).
        max_resource: the last rung, in steps, where the survivors complete (None: open-ended; a
            trial's schedule ends when its objective returns).
        options: how the pruner waits and what it is told about the study, as one :class:`PrunerOptions`
            (default: its defaults), or its fields as the keywords below: one or the other, not both
            (an InputError); any other keyword is a TypeError.
        **knobs: the fields of :class:`PrunerOptions` as keywords (``timeout``, ``poll_interval``,
            ``stall_seconds``, ``n_trials``, ``workers``), documented there.

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
                 cohort_size: int | None = None, *, min_resource: int | None = None,
                 reduction_factor: float | None = None, max_resource: int | None = None,
                 options: PrunerOptions | None = None, **knobs: Any) -> None:
        self.rungs, self.fraction, min_resource, reduction_factor = rung_rule(rungs, fraction, min_resource,
                                                                              reduction_factor, max_resource)
        self.min_resource, self.reduction_factor, self.max_resource = min_resource, reduction_factor, max_resource
        if cohort_size is not None:
            check_int("cohort_size", cohort_size, 1, detail=", or None")
        self.cohort_size = cohort_size
        opts = self.options = pruner_options(options, knobs)
        self.timeout, self.poll_interval, self.stall_seconds = opts.timeout, opts.poll_interval, opts.stall_seconds
        self.n_trials, self.workers = opts.n_trials, opts.workers
        self._lock = threading.Lock()
        self._warned_unreached = False
        self._warned_jump = False
        self._checked: set[int] = set()
        self._looked: set[tuple[int, bool]] = set()  # (trial, at a rung) whose refusals were checked
        self._warned_alone = False
        self._set_up: set[Any] = set()  # studies (keys) whose storage was checked at the first should_prune()
        self._dropped: set[tuple[Any, int]] = set()  # (study key, trial number) failed as stale while running here
        self._verdicts: set[tuple[Any, int, int]] = set()  # (study key, trial number, rung) verdicts it has seen

    def __repr__(self) -> str:
        shown = len(self.rungs) if self.max_resource is not None or len(self.rungs) <= 6 else 4
        rungs = ", ".join(str(r) for r in self.rungs[:shown]) + (", ..." if shown < len(self.rungs) else "")
        return (f"SynchronousSHAPruner(rungs=({rungs}), fraction={self.fraction:.4g}, "
                f"cohort_size={self.cohort_size}, timeout={self.timeout})")

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
        slot = getattr(THREAD, "slot", None)
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
        with WAITING_LOCK:
            WAITING[threading.get_ident()] = (key, trial.number, rung)
        try:
            return self._wait(Waiter(study, trial, size, mode, rung, root, slot, loop))
        finally:
            with WAITING_LOCK:
                WAITING.pop(threading.get_ident(), None)

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
