"""What eve-search reads of an Optuna study beyond Optuna's public API.

Optuna's ``Study`` does not say which storage it lives on, how to tell two ``Study`` objects of one
study apart from two studies, or whether ``study.stop()`` was called; its heartbeat callback does not
say how many retries it allows; and nothing public says what a ``study.optimize`` loop is doing. The
pruner needs all of that to judge whole cohorts without a clock, so it is read here, and only here:

- :func:`storage_of`, :func:`study_key`, :func:`in_memory`, :func:`heartbeats`, :func:`retry_limit`:
  private attributes (``Study._storage``, ``Study._study_id``, the cached storage's ``_backend``, the
  retry callback's ``_max_retry``), read with ``getattr`` and a neutral answer when one is missing.
- :func:`stop_requested` and :func:`on_stop`: ``study.stop()`` as Optuna records it (``_stop_flag``),
  and a hook that runs the moment it is called on one ``Study`` object.
- :func:`own_loop` and :func:`activity`: the stacks of this process's threads, matched against the
  code of Optuna's ``study.optimize`` loop (``optuna.study._optimize``). Where a function is not found
  nothing is concluded from the stacks (:attr:`Activity.known` is False).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.storages import InMemoryStorage
from optuna.study import _optimize as _optuna_optimize

__all__ = ["Activity", "activity", "heartbeats", "in_memory", "on_stop", "own_loop", "retry_limit", "stop_requested",
           "storage_of", "study_key"]


# A study's storage, identity and settings ---------------------------------------------------------


def storage_of(study: Any) -> Any:
    """The storage ``study`` lives on (Optuna keeps it in ``Study._storage``), or None."""
    return getattr(study, "_storage", None)


def study_key(study: Any) -> Any:
    """What identifies a study across ``Study`` objects: its storage (an RDB's URL, else the storage
    object) and its id in that storage."""
    storage = storage_of(study)
    backend = getattr(storage, "_backend", storage)  # RDB storages come wrapped in a cache
    url = getattr(backend, "url", None)
    return (url if isinstance(url, str) else id(backend), getattr(study, "_study_id", None))


def in_memory(study: Any) -> bool:
    """Whether ``study`` lives in this process's memory (an ``InMemoryStorage``)."""
    return isinstance(storage_of(study), InMemoryStorage)


def heartbeats(study: Any) -> tuple[float, float] | None:
    """The storage's ``(heartbeat_interval, grace_period)`` in seconds (Optuna's default grace: two
    intervals), or None without heartbeats."""
    storage = storage_of(study)
    getter = getattr(storage, "get_heartbeat_interval", None)
    interval = getter() if callable(getter) else None
    if not interval:
        return None
    grace = getattr(getattr(storage, "_backend", storage), "grace_period", None)
    return float(interval), float(2 * interval if grace is None else grace)


def retry_limit(callback: Any) -> int | None:
    """How many times a ``RetryHeartbeatStaleTrialCallback`` re-queues one trial (``_max_retry``; None:
    no limit, as Optuna reads None)."""
    return getattr(callback, "_max_retry", None)


# study.stop() ---------------------------------------------------------------------------------------


def stop_requested(study: Any) -> bool:
    """Whether ``study.stop()`` was called in the ``study.optimize`` running now (Optuna's ``_stop_flag``,
    which each ``study.optimize`` clears as it starts)."""
    return bool(getattr(study, "_stop_flag", False))


@contextlib.contextmanager
def on_stop(study: optuna.Study, hook: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``study.stop()`` on this ``Study`` object makes Optuna's own call, then ``hook()``;
    the object's own ``stop`` is back afterwards, whatever happens.

    Optuna's flag alone cannot be waited on: every ``study.optimize`` clears it when it starts, so a
    thread that starts a trial between the call and the end of the calling trial would erase it.

    Example:
        >>> import optuna
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> study, seen = optuna.create_study(), []
        >>> with on_stop(study, lambda: seen.append("stopped")):
        ...     study.optimize(lambda trial: trial.study.stop() or 1.0, n_trials=3)
        >>> seen, len(study.trials), "stop" in vars(study)
        (['stopped'], 1, False)
    """
    optuna_stop = study.stop

    def stop() -> None:
        optuna_stop()  # Optuna's own check: only inside an optimization loop
        hook()

    study.stop = stop  # type: ignore[method-assign]  # on this object only, for the block
    try:
        yield
    finally:
        if study.__dict__.get("stop") is stop:
            del study.stop


# What this process's threads do with a study ----------------------------------------------------------


def _code(module: Any, path: str) -> Any:
    """The code object of ``module.path`` (e.g. ``"_optimize"`` or ``"ThreadPoolExecutor.shutdown"``), or None
    if this Optuna or Python has no such function (the loops are then not recognised: see :func:`activity`)."""
    target = module
    for name in path.split("."):
        target = getattr(target, name, None)
    return getattr(target, "__code__", None)


_OPTIMIZE = _code(_optuna_optimize, "_optimize")  # study.optimize's loop (and its n_jobs > 1 driver)
_SEQUENTIAL = _code(_optuna_optimize, "_optimize_sequential")  # the loop of one thread
_RUN_TRIAL = _code(_optuna_optimize, "_run_trial")  # one trial: ask, objective, tell
_SHUTDOWN = _code(concurrent.futures.ThreadPoolExecutor, "shutdown")  # a driver whose loop has ended
_WAIT = _code(concurrent.futures, "wait")  # a driver waiting for a free thread


def own_loop(study: optuna.Study) -> dict[str, Any] | None:
    """The ``study.optimize`` call the calling thread runs a trial of: its ``n_jobs``, ``n_trials`` and
    ``timeout`` (``{"n_jobs": None}`` for a thread of an ``n_jobs > 1`` pool); None outside
    ``study.optimize`` (ask-and-tell)."""
    if _OPTIMIZE is None or _SEQUENTIAL is None:
        return None
    key = study_key(study)
    frame = sys._getframe(1)
    pool = False
    while frame is not None:
        code = frame.f_code
        if code is _OPTIMIZE or code is _SEQUENTIAL:
            other = frame.f_locals.get("study")
            if other is study or (other is not None and study_key(other) == key):
                if code is _OPTIMIZE:
                    values = frame.f_locals
                    return {"n_jobs": values.get("n_jobs"), "n_trials": values.get("n_trials"),
                            "timeout": values.get("timeout")}
                pool = True
        frame = frame.f_back
    return {"n_jobs": None, "n_trials": None, "timeout": None} if pool else None


@dataclass
class Activity:
    """What this process's threads are doing with one study, read from their stacks.

    ``busy``: threads that may still report or start a trial (training, asking, finishing one, a loop about
    to start one); ``waiting``: (trial number, rung) of the trials waiting in ``should_prune()``; ``running``:
    the numbers of the trials these threads run; ``full``: the ``n_jobs`` of each ``study.optimize`` waiting
    for a free thread; ``blocked``: sequential loops whose own trial waits; ``ended``: why each loop that
    stopped asking stopped; ``pool``: threads of ``n_jobs > 1`` pools that run a trial of the study (waiting
    or not); ``pending``: the unfinished tasks of the loops that wait or ended (more than ``pool``: a task is
    on its way to a thread); ``loops``: ``study.optimize`` calls on the study; ``known``: Optuna's loop
    functions were found (else nothing is concluded from the stacks).
    """

    known: bool = True
    busy: int = 0
    waiting: list[tuple[int, int]] = field(default_factory=list)
    running: set[int] = field(default_factory=set)
    full: list[int] = field(default_factory=list)
    blocked: int = 0
    ended: list[str] = field(default_factory=list)
    pool: int = 0
    pending: int = 0
    loops: int = 0


def _ended_reason(study: Any, values: dict[str, Any]) -> str:
    if stop_requested(study):
        return "stopped"
    n_trials = values.get("n_trials")
    if n_trials is not None and values.get("n_submitted_trials", -1) >= n_trials:
        return "n_trials"
    if values.get("timeout") is not None:
        return "timeout"
    return "error"


def _driver(activity: Activity, study: Any, ours: list[Any], codes: set[Any]) -> None:
    """Count a ``study.optimize`` driver of an ``n_jobs > 1`` pool that waits for a free thread or has ended."""
    driver = next(f for f in ours if f.f_code is _OPTIMIZE)
    values = driver.f_locals
    try:
        activity.pending += sum(1 for future in list(values.get("futures") or ()) if not future.done())
    except RuntimeError:  # the set changed while read: the driver is not idle
        activity.busy += 1
        return
    if _SHUTDOWN in codes:
        activity.ended.append(_ended_reason(study, values))
    else:
        activity.full.append(int(values.get("n_jobs") or 0))


def activity(study: optuna.Study, waiting: dict[int, tuple[int, int]]) -> Activity:
    """Classify every thread of this process that runs ``study`` (see :class:`Activity`); ``waiting``: the
    threads (by ident) that wait inside ``should_prune()`` on this study, with (trial number, rung)."""
    if None in (_OPTIMIZE, _SEQUENTIAL, _RUN_TRIAL, _SHUTDOWN, _WAIT):
        return Activity(known=False)
    key = study_key(study)
    found = Activity()
    for ident, frame in sys._current_frames().items():
        frames = []
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
        codes = {f.f_code for f in frames}
        if not codes & {_OPTIMIZE, _SEQUENTIAL, _RUN_TRIAL}:
            continue
        ours = [f for f in frames if f.f_code in (_OPTIMIZE, _SEQUENTIAL, _RUN_TRIAL)
                and study_key(f.f_locals.get("study")) == key]
        if not ours:
            continue
        kinds = {f.f_code for f in ours}
        if _OPTIMIZE in kinds:
            found.loops += 1
        for f in ours:
            if f.f_code is _RUN_TRIAL:
                number = getattr(f.f_locals.get("trial"), "number", None)
                if isinstance(number, int):
                    found.running.add(number)
        if _SEQUENTIAL in kinds and _OPTIMIZE not in kinds:
            found.pool += 1
        if ident in waiting:
            found.waiting.append(waiting[ident])
            if _OPTIMIZE in kinds:
                found.blocked += 1  # a loop of one thread, whose trial waits: it starts nothing
        elif _SEQUENTIAL in kinds or _RUN_TRIAL in kinds:
            found.busy += 1
        elif _SHUTDOWN in codes or _WAIT in codes:
            _driver(found, study, ours, codes)
        else:
            found.busy += 1  # a driver about to start a trial
    return found
