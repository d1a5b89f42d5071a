"""Run an ordinary Optuna objective in cohorts, so that :class:`SynchronousSHAPruner` can judge whole cohorts.

A pruner cannot pause a trial, and an ordinary objective (``trial.report`` / ``trial.should_prune`` in
a loop over epochs) cannot be paused from outside either: its state lives in its stack frame. So the
only way a study that runs "one trial at a time" can judge a rung among a whole cohort is to keep the
cohort's trials alive at once, each in its own thread, and let them take turns training: a trial
waiting at a rung inside ``should_prune()`` gives up its turn, and the next trial of the cohort starts
or goes on. :func:`optimize_in_cohorts` does that with ``n_jobs`` turns (one by default: the compute
of a sequential study). A free turn goes where the scheduling core of a stream of cohorts
(:class:`~eve_search.engine.stream.CohortStream`, replayed from the study) says: a promoted trial of
the oldest cohort first, then a new trial, which opens the next cohort when the current one waits at a
rung. Each trial runs through ``study.optimize(..., n_trials=1)`` in its thread, so states, heartbeats,
``catch``, callbacks and logging are Optuna's own.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from eve_search._checks import InputError, check_int
from eve_search.integrations._optuna_adapter import on_stop, stop_requested
from eve_search.integrations._optuna_pruner import _THREAD, SynchronousSHAPruner

__all__ = ["optimize_in_cohorts"]


NEW_TRIAL = -1  # the launcher's place among those asking for a turn: it starts the next trial


class _Turns:
    """``n`` training turns. A free turn goes to the one asking for it (a promoted trial by its number, or the
    launcher as :data:`NEW_TRIAL`) whose work ``choose`` puts first; ``training`` holds the numbers of the
    trials that hold a turn now.

    Args:
        n: the number of turns.
        choose: ``choose(asking, training)`` -> the one of ``asking`` to serve.
    """

    def __init__(self, n: int, choose: Callable[[set[int], set[int]], int]) -> None:
        self._free = n
        self._asking: set[int] = set()
        self.training: set[int] = set()
        self._choose = choose
        self._chosen: int | None = None  # who gets the next free turn (None: to be chosen again)
        self._condition = threading.Condition()

    def _next(self) -> int:
        if self._chosen is None or self._chosen not in self._asking:
            self._chosen = next(iter(self._asking)) if len(self._asking) == 1 else \
                self._choose(set(self._asking), set(self.training))
        return self._chosen

    def acquire(self, who: int, give_up: Callable[[], bool] | None = None) -> bool:
        with self._condition:
            self._asking.add(who)
            self._chosen = None
            try:
                while self._free == 0 or self._next() != who:
                    if give_up is not None and give_up():
                        return False
                    if self._free:
                        self._condition.notify_all()  # the free turn is another's: wake it
                    self._condition.wait(None if give_up is None else 0.05)
                self._free -= 1
                if who != NEW_TRIAL:
                    self.training.add(who)
                return True
            finally:
                self._asking.discard(who)
                self._chosen = None
                self._condition.notify_all()

    def release(self, number: int | None) -> None:
        with self._condition:
            self._free += 1
            self.training.discard(number)  # type: ignore[arg-type]
            self._chosen = None
            self._condition.notify_all()

    def bind(self, number: int) -> None:
        """The turn the launcher took now belongs to trial ``number``."""
        with self._condition:
            self.training.add(number)


class _Turn:
    """One trial's turn: the pruner releases it while the trial waits at a rung, and takes it back after."""

    def __init__(self, turns: _Turns) -> None:
        self._turns = turns
        self.number: int | None = None  # known once the trial is asked
        self.held = True  # the launcher acquired it for the trial

    def bind(self, number: int) -> None:
        self.number = number
        self._turns.bind(number)

    def release(self) -> None:
        if self.held:
            self.held = False
            self._turns.release(self.number)

    def acquire(self) -> None:
        if not self.held:
            self._turns.acquire(self.number if self.number is not None else NEW_TRIAL)
            self.held = True


class _Gate:
    """Whether new trials may start: it closes for good once an objective error, ``study.stop()`` or the
    timeout is seen, and no trial is asked after that.

    The launcher holds ``lock`` from its last look at the gate until the trial it starts has been asked,
    and :meth:`close` takes the same lock, so a trial is asked either before the gate closed or not at
    all: a trial that raises closes the gate before its error reaches Optuna, so only the trials already
    asked by then run on.
    """

    _PRECEDENCE = ("error", "timeout", "stopped")  # the reason recorded when several were seen

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._seen: set[str] = set()

    @property
    def closed(self) -> bool:
        return bool(self._seen)

    @property
    def reason(self) -> str | None:
        return next((reason for reason in self._PRECEDENCE if reason in self._seen), None)

    def close(self, reason: str) -> None:
        with self.lock:
            self._seen.add(reason)

    def close_locked(self, reason: str) -> None:
        """:meth:`close` for a caller that already holds ``lock``."""
        self._seen.add(reason)


def _failed(study: optuna.Study, number: int) -> bool:
    """Whether trial ``number`` of ``study`` is FAIL in the storage (failed as stale by a heartbeat check)."""
    return any(t.number == number and t.state == optuna.trial.TrialState.FAIL
               for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)))


def _check_count(name: str, value: Any) -> None:
    if value is not None:
        check_int(name, value, 1, detail=", or None")


def optimize_in_cohorts(study: optuna.Study, objective: Callable[[optuna.Trial], Any], n_trials: int | None = None,
                        timeout: float | None = None, n_jobs: int = 1, catch: tuple[type[Exception], ...] = (),
                        callbacks: Iterable[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
                        gc_after_trial: bool = False) -> None:
    """``study.optimize`` for a study pruned by :class:`SynchronousSHAPruner`: the same objective, judged in cohorts.

    The trials of a cohort are alive at once, each in its own thread, and ``n_jobs`` of them train at a
    time: a trial that reaches a rung waits in ``should_prune()`` without its turn, so the next trial
    of the cohort starts; when the rung is decided, the pruned trials end and the promoted ones take
    turns again (a free turn goes to the oldest trial asking for one). With ``n_jobs=1`` (default) the
    study trains one trial at a time, as a sequential ``study.optimize(objective, n_trials=N)`` does,
    and its rungs are judged among whole cohorts. The objective needs no change: it reports
    ``trial.report(value, step)`` and calls ``trial.should_prune()`` as in any Optuna pruning example.

    When no more trials start (``n_trials`` started, ``timeout`` passed, or ``study.stop()`` called from
    the objective or a callback), the cohort in progress is closed with the trials it has: its rungs
    are decided among them, recorded as partial in the study's user attributes, with a
    :class:`~eve_search.integrations.optuna.PartialRungWarning`. Running trials always finish (as in
    ``study.optimize``, ``timeout`` stops new trials only). An objective error not in ``catch`` also
    stops new trials, at once: no trial is asked after an objective raised it (the trials asked before
    finish), and it is re-raised once they finished.

    Every waiting trial keeps its objective's state (the model, on the GPU too) in memory until its
    rung is decided: up to ``cohort_size`` models at once. Run it from one process per study.

    A trial that a heartbeat check fails as stale while it still runs here (its heartbeats came more than
    the storage's ``grace_period`` apart, on a busy machine) is dropped with one
    :class:`~eve_search.integrations.optuna.StaleTrialWarning`: it ends as the pruner's wait or its next
    report finds it, stays FAIL in the study, and the study goes on (Optuna's own refusal to record its end
    is absorbed).

    Args:
        study: a study whose ``pruner`` is a :class:`SynchronousSHAPruner`.
        objective: an ordinary Optuna objective.
        n_trials: trials to start (None: until ``timeout`` or ``study.stop()``).
        timeout: seconds after which no new trial starts (None: no limit).
        n_jobs: how many trials train at once (the others of the cohort wait for a turn).
        catch: exception types that fail a trial without stopping the study, as in ``study.optimize``.
        callbacks: called with ``(study, frozen_trial)`` after each trial ends, as in ``study.optimize``.
        gc_after_trial: run ``gc.collect()`` after each trial, as in ``study.optimize``.

    Raises:
        The first exception an objective raised that is not in ``catch``, once the running trials finished.

    Example:
        >>> import optuna
        >>> from eve_search.integrations.optuna import SynchronousSHAPruner, optimize_in_cohorts
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> def objective(trial):
        ...     x = trial.suggest_float("x", 0.0, 1.0)
        ...     for step in range(1, 10):
        ...         trial.report(x * step, step)
        ...         if trial.should_prune():
        ...             raise optuna.TrialPruned()
        ...     return x
        >>> study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0),
        ...                             pruner=SynchronousSHAPruner(cohort_size=3))
        >>> optimize_in_cohorts(study, objective, n_trials=3)
        >>> sorted(trial.state.name for trial in study.trials)  # rung 1 keeps the best third
        ['COMPLETE', 'PRUNED', 'PRUNED']
    """
    pruner = _checked_pruner(study, n_trials, timeout, n_jobs, catch)
    run = _CohortRun(study, objective, pruner, n_jobs=n_jobs, timeout=timeout, catch=catch,
                     callbacks=list(callbacks or ()), gc_after_trial=gc_after_trial)
    # study.stop() from an objective or a callback closes the gate the moment it is called (see on_stop)
    with on_stop(study, lambda: run.gate.close("stopped")):
        try:
            run.launch_all(n_trials)
        finally:
            if run.launched:
                pruner._close(study, run.reason)  # the cohort in progress is decided with the trials it has
        run.join()
    if run.errors:
        raise run.errors[0]
    pruner.check_steps(study)


def _checked_pruner(study: optuna.Study, n_trials: int | None, timeout: float | None, n_jobs: int,
                    catch: Any) -> SynchronousSHAPruner:
    """The study's pruner, once the arguments of :func:`optimize_in_cohorts` and the study are checked: a
    missing cohort size, a study with several objectives, or heartbeats that cannot work are refused
    before any trial."""
    pruner = study.pruner
    if not isinstance(pruner, SynchronousSHAPruner):
        raise InputError(f"Invalid study: its pruner is {type(pruner).__name__} (expected a SynchronousSHAPruner, "
                         "e.g. optuna.create_study(pruner=SynchronousSHAPruner(cohort_size=9)))")
    _check_count("n_trials", n_trials)
    _check_count("n_jobs", n_jobs)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout <= 0):
        raise InputError(f"Invalid timeout: {timeout!r} (expected a number of seconds > 0, or None)")
    if not isinstance(catch, tuple):
        raise InputError(f"Invalid catch: {catch!r} (expected a tuple of exception types)")
    pruner._size(study)
    pruner.check_storage(study)
    return pruner


class _CohortRun:
    """One call of :func:`optimize_in_cohorts`: the launcher (:meth:`launch_all`) starts each trial in its own
    thread on a turn it acquired (:class:`_Turns`), and a free turn goes where the stream of cohorts says
    (:meth:`choose`); each thread runs its trial through ``study.optimize(..., n_trials=1)``."""

    def __init__(self, study: optuna.Study, objective: Callable[[optuna.Trial], Any], pruner: SynchronousSHAPruner,
                 *, n_jobs: int, timeout: float | None, catch: tuple[type[Exception], ...],
                 callbacks: list[Callable[[optuna.Study, FrozenTrial], None]], gc_after_trial: bool) -> None:
        self.study, self.objective, self.pruner = study, objective, pruner
        self.timeout, self.catch, self.callbacks, self.gc_after_trial = timeout, catch, callbacks, gc_after_trial
        self.turns = _Turns(n_jobs, self.choose)
        self.gate = _Gate()
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.started = time.monotonic()
        self.launched = 0
        self.reason = "n_trials"  # why no more trials start (recorded with a partial last cohort)

    def choose(self, asking: set[int], training: set[int]) -> int:
        """The work the stream of cohorts offers first among those asking: a promoted trial of the oldest
        cohort, else a new trial (the oldest asking, should the stream not name any)."""
        pruner, study = self.pruner, self.study
        stream, number = pruner.stream_view(study, training)
        for _ in range(len(asking) + len(training) + pruner._size(study) * (len(pruner.rungs) + 1)):
            work = stream.next_work()
            if work is None:
                break
            stream.start(work)
            held_by = number(work.index)
            if held_by is None:  # a trial not asked yet: the launcher's work, and all that follows is too
                if NEW_TRIAL in asking:
                    return NEW_TRIAL
                break
            if held_by in asking:
                return held_by
        return min(asking, key=lambda who: (who == NEW_TRIAL, who))

    def expired(self) -> bool:
        return self.timeout is not None and time.monotonic() - self.started >= self.timeout

    def give_up(self) -> bool:
        return self.gate.closed or self.expired()

    def ended(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Optuna's callback after each trial: the user's callbacks, then a stop() that bypassed
        :func:`~eve_search.integrations._optuna_adapter.on_stop` (``Study.stop(study)``) closes the gate."""
        for callback in self.callbacks:
            callback(study, trial)
        if stop_requested(study):
            self.gate.close("stopped")

    def _objective(self, turn: _Turn, asked: threading.Event) -> Callable[[optuna.Trial], Any]:
        """The user's objective, for one thread: it binds the trial to its turn and closes the gate on an
        error (before Optuna records it: no trial is asked from then on)."""
        study, gate = self.study, self.gate

        def run(trial: optuna.Trial) -> Any:
            turn.bind(trial.number)
            asked.set()  # its number is taken: the next trial may be asked
            try:
                return self.objective(trial)
            except optuna.exceptions.UpdateFinishedTrialError as error:
                if _failed(study, trial.number):  # failed as stale while it trained (a report came too late)
                    # the warning points here: the objective has returned
                    self.pruner._drop(study, trial.number, depth=-2)
                    raise optuna.TrialPruned() from error
                gate.close("error")
                raise
            except BaseException as error:
                if not isinstance(error, (optuna.TrialPruned, *self.catch)):
                    gate.close("error")
                raise

        return run

    def work(self, turn: _Turn, asked: threading.Event) -> None:
        """A trial's thread: its trial through ``study.optimize(..., n_trials=1)``, its turn given back at the end."""
        _THREAD.slot = turn
        try:
            self.study.optimize(self._objective(turn, asked), n_trials=1, catch=self.catch, callbacks=[self.ended],
                                gc_after_trial=self.gc_after_trial)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError) as error:
            if turn.number is None or not self.pruner.dropped(self.study, turn.number):
                self.gate.close("error")
                self.errors.append(error)
            # else: Optuna refuses to record the end of a trial failed as stale (optuna/optuna#5470); the pruner
            # dropped it with a StaleTrialWarning, and the study goes on
        except BaseException as error:  # noqa: BLE001 - re-raised by the caller once the others finished
            self.gate.close("error")  # also an error of Optuna's own, outside the objective
            self.errors.append(error)
        finally:
            turn.release()
            _THREAD.slot = None
            asked.set()

    def launch(self, number: int) -> bool:
        """Start trial ``number`` on the turn just acquired, unless the gate closed meanwhile."""
        gate = self.gate
        with gate.lock:  # held until the trial is asked: the gate cannot close in between
            if self.expired():
                gate.close_locked("timeout")
            if gate.closed:
                self.turns.release(None)
                return False
            asked = threading.Event()
            thread = threading.Thread(target=self.work, args=(_Turn(self.turns), asked), daemon=True,
                                      name=f"eve-search-cohort-trial-{number}")
            thread.start()
            self.threads.append(thread)
            while not asked.wait(0.1):  # trial numbers in launch order: consecutive within a cohort
                pass
        return True

    def launch_all(self, n_trials: int | None) -> None:
        """Start trials until ``n_trials`` have started or the gate closes (:attr:`reason` says why)."""
        gate = self.gate
        while n_trials is None or self.launched < n_trials:
            if self.expired():
                gate.close("timeout")
            if gate.closed:
                self.reason = gate.reason or self.reason
                return
            if not self.turns.acquire(NEW_TRIAL, self.give_up):
                continue  # the gate closed or the time ran out while waiting for a turn: seen above
            if not self.launch(self.launched):
                self.reason = gate.reason or self.reason
                return
            self.launched += 1

    def join(self) -> None:
        """Wait for every trial thread (in slices, so that Ctrl-C reaches this thread)."""
        for thread in self.threads:
            while thread.is_alive():
                thread.join(0.1)
