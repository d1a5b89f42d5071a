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

from eve_search._checks import check_int
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
    pruner = study.pruner
    if not isinstance(pruner, SynchronousSHAPruner):
        raise ValueError(f"Invalid study: its pruner is {type(pruner).__name__} (expected a SynchronousSHAPruner, "
                         "e.g. optuna.create_study(pruner=SynchronousSHAPruner(cohort_size=9)))")
    _check_count("n_trials", n_trials)
    _check_count("n_jobs", n_jobs)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout <= 0):
        raise ValueError(f"Invalid timeout: {timeout!r} (expected a number of seconds > 0, or None)")
    if not isinstance(catch, tuple):
        raise ValueError(f"Invalid catch: {catch!r} (expected a tuple of exception types)")
    user_callbacks = list(callbacks or ())
    pruner._size(study)  # a missing cohort size, a study with several objectives, or heartbeats that cannot
    pruner.check_storage(study)  # work are refused before any trial

    def choose(asking: set[int], training: set[int]) -> int:
        """The work the stream of cohorts offers first among those asking: a promoted trial of the oldest
        cohort, else a new trial (the oldest asking, should the stream not name any)."""
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

    turns = _Turns(n_jobs, choose)
    gate = _Gate()
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    started = time.monotonic()

    def expired() -> bool:
        return timeout is not None and time.monotonic() - started >= timeout

    def give_up() -> bool:
        return gate.closed or expired()

    def ended(study_: optuna.Study, trial: FrozenTrial) -> None:
        for callback in user_callbacks:
            callback(study_, trial)
        if getattr(study_, "_stop_flag", False):  # a stop() that bypassed the wrapper below (Study.stop(study))
            gate.close("stopped")

    optuna_stop = study.stop

    def stop() -> None:
        # study.stop() from an objective or a callback closes the gate the moment it is called. Optuna's
        # flag alone is not enough here: every trial thread's study.optimize clears it when it starts,
        # so a trial launched between the call and the end of the calling trial would erase it.
        optuna_stop()  # Optuna's own check: only inside an optimization loop
        gate.close("stopped")

    def work(turn: _Turn, asked: threading.Event) -> None:
        _THREAD.slot = turn

        def run(trial: optuna.Trial) -> Any:
            turn.bind(trial.number)
            asked.set()  # its number is taken: the next trial may be asked
            try:
                return objective(trial)
            except optuna.exceptions.UpdateFinishedTrialError as error:
                if _failed(study, trial.number):  # failed as stale while it trained (a report came too late)
                    pruner._drop(study, trial.number, depth=-2)  # the warning points here: the objective has returned
                    raise optuna.TrialPruned() from error
                gate.close("error")
                raise
            except BaseException as error:
                if not isinstance(error, (optuna.TrialPruned, *catch)):
                    gate.close("error")  # before Optuna records it: no trial is asked from now on
                raise

        try:
            study.optimize(run, n_trials=1, catch=catch, callbacks=[ended], gc_after_trial=gc_after_trial)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError) as error:
            if turn.number is None or not pruner.dropped(study, turn.number):
                gate.close("error")
                errors.append(error)
            # else: Optuna refuses to record the end of a trial failed as stale (optuna/optuna#5470); the pruner
            # dropped it with a StaleTrialWarning, and the study goes on
        except BaseException as error:  # noqa: BLE001 - re-raised by the launcher once the others finished
            gate.close("error")  # also an error of Optuna's own, outside the objective
            errors.append(error)
        finally:
            turn.release()
            _THREAD.slot = None
            asked.set()

    def launch(number: int) -> bool:
        """Start trial ``number`` on the turn just acquired, unless the gate closed meanwhile."""
        with gate.lock:  # held until the trial is asked: the gate cannot close in between
            if expired():
                gate.close_locked("timeout")
            if gate.closed:
                turns.release(None)
                return False
            asked = threading.Event()
            thread = threading.Thread(target=work, args=(_Turn(turns), asked), daemon=True,
                                      name=f"eve-search-cohort-trial-{number}")
            thread.start()
            threads.append(thread)
            while not asked.wait(0.1):  # trial numbers in launch order: consecutive within a cohort
                pass
        return True

    launched = 0
    reason = "n_trials"
    study.stop = stop  # type: ignore[method-assign]  # on this object only, for this call
    try:
        try:
            while n_trials is None or launched < n_trials:
                if expired():
                    gate.close("timeout")
                if gate.closed:
                    reason = gate.reason or reason
                    break
                if not turns.acquire(NEW_TRIAL, give_up):
                    continue  # the gate closed or the time ran out while waiting for a turn: seen above
                if not launch(launched):
                    reason = gate.reason or reason
                    break
                launched += 1
        finally:
            if launched:
                pruner._close(study, reason)  # the cohort in progress is decided with the trials it has
        for thread in threads:
            while thread.is_alive():
                thread.join(0.1)
    finally:  # the study's own stop() again, also when the launcher or the closing raised
        if study.__dict__.get("stop") is stop:
            del study.stop
    if errors:
        raise errors[0]
    pruner.check_steps(study)
