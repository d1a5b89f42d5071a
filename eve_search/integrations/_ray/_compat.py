"""Every private part of Ray Tune that the scheduler reads or calls, behind one small function each, and
the Ray versions it was checked on.

Ray's scheduler API (``TrialScheduler``: the callbacks, ``choose_trial_to_run``, ``pause_trial``,
``stop_trial``) decides what a trial does, not which actor runs it nor how a search algorithm counts
its concurrency. Pausing a trial at a rung without wasting its actor, and giving its concurrency slot
back while it waits, needs a few of Tune's internals; they are all here, so that a new Ray touches one
file. Each function degrades to the public behaviour where the internal is missing (another Tune):
slower, never wrong. The supported versions are checked when this module is imported
(:func:`check_ray_version`).

Example:
    >>> from eve_search.integrations._ray._compat import TESTED_RAY, check_ray_version
    >>> TESTED_RAY, check_ray_version(TESTED_RAY[-1] + ".0")
    (('2.60',), None)
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Any

import ray
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter

from eve_search._hosts import declared

__all__ = ["DECLARED_RAY", "TESTED_RAY", "Limit", "actor_starting", "cached_actors", "check_ray_version",
           "concurrency_limits", "has_actor", "is_requeued", "resetting_trials", "set_trial_status",
           "supported_ray", "train_idle_trial"]

TESTED_RAY = ("2.60",)
"""The Ray minor versions the test suite runs on; a Ray of the declared range outside them is warned about."""
DECLARED_RAY = ">=2.60,<2.61"
"""The range of ``pyproject.toml`` (extra ``ray``), used where eve-search's metadata cannot be read."""


# The supported versions ---------------------------------------------------------------------------------

def supported_ray() -> SpecifierSet:
    """The Ray versions eve-search declares (its ``ray`` extra, from the installed metadata).

    Returns:
        The specifier set, e.g. ``<2.61,>=2.60``.

    Example:
        >>> Version("2.60.0") in supported_ray()
        True
    """
    return declared("ray", DECLARED_RAY)


def check_ray_version(version: str) -> str | None:
    """Say whether this Ray is one eve-search supports: an error outside the declared range, a warning
    for a version of it that the tests never ran (the Tune internals below may have changed there).

    Args:
        version: Ray's version, as ``ray.__version__`` gives it.

    Returns:
        The warning's text (also issued as a ``RuntimeWarning``), or None for a tested version.

    Raises:
        ImportError: ``version`` is outside the declared range (the message names it and the range).

    Example:
        >>> check_ray_version("2.60.0") is None
        True
        >>> check_ray_version("1.13.0")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ImportError: eve-search's Ray integration supports ray[tune]... (tested: 2.60); this is Ray 1.13.0: ...
    """
    supported = supported_ray()
    tested = ", ".join(TESTED_RAY)
    try:
        parsed = Version(version)
    except InvalidVersion:
        parsed = None
    if parsed is None or not supported.contains(parsed, prereleases=True):
        raise ImportError(f"eve-search's Ray integration supports ray[tune]{supported} (tested: {tested}); this is "
                          f"Ray {version}: pip install 'eve-search[ray]'")
    if f"{parsed.major}.{parsed.minor}" in TESTED_RAY:
        return None
    message = (f"eve-search's Ray scheduler was tested on Ray {tested} only, and relies on Tune internals "
               f"(eve_search/integrations/_ray/_compat.py) that Ray {version} may have changed: if a run "
               f"misbehaves, pin ray[tune]=={TESTED_RAY[-1]}.*")
    warnings.warn(message, RuntimeWarning, stacklevel=2)
    return message


check_ray_version(ray.__version__)


# Tune's controller --------------------------------------------------------------------------------------
# A scheduler receives Tune's controller wrapped (``TrialRunnerWrapper``) in some callbacks and bare in
# others; the wrapper keeps the controller as ``_tune_controller``.

def _controller(tune_controller: Any) -> Any:
    return getattr(tune_controller, "_tune_controller", tune_controller)


def set_trial_status(tune_controller: Any, trial: Any, status: str) -> None:
    """File ``trial`` under ``status`` in the controller's bookkeeping (a requeued trial Tune filed as
    pending, that must wait at its rung instead)."""
    tune_controller._set_trial_status(trial, status)


def is_requeued(tune_controller: Any, trial: Any) -> bool:
    """Whether Tune has already filed ``trial`` as pending (requeued after its actor failed), rather
    than adding it now (``Tuner.restore``)."""
    return trial in getattr(_controller(tune_controller), "_pending_trials", ())


def train_idle_trial(tune_controller: Any, trial: Any) -> bool:
    """Train a trial left running without work on its actor (a NOOP decision) on to its next result;
    False where this Tune has no such hook (the caller then pauses it, and resumes it as paused).

    While the checkpoint of the trial's last result is still being saved, Tune holds that result's
    decision (NOOP) until the save is processed: the decision becomes CONTINUE, and Tune starts the
    next step then, as for any trial. Starting it at once left a trial running with no work: Tune
    takes ready futures in random order, and when it took the new step's result before the save, the
    held NOOP (a later CONTINUE never replaces a held decision) stayed the trial's last word.
    """
    controller = _controller(tune_controller)
    train = getattr(controller, "_schedule_trial_train", None)
    held = getattr(controller, "_cached_trial_decisions", None)
    if train is None or not isinstance(held, dict):
        return False
    if trial.is_saving:
        if held.get(trial.trial_id) in (None, TrialScheduler.NOOP):
            held[trial.trial_id] = TrialScheduler.CONTINUE
        return True  # a held PAUSE or STOP (Tune's own) stands
    train(trial)
    return True


# Actors -------------------------------------------------------------------------------------------------

def resetting_trials(tune_controller: Any) -> Collection[Any]:
    """The pending trials Tune is handing a free (cached) actor to now."""
    return getattr(_controller(tune_controller), "_resetting_trials", ())


def cached_actors(tune_controller: Any) -> int:
    """How many free actors Tune holds in its cache (0 where it cannot be read)."""
    cached = getattr(getattr(_controller(tune_controller), "_actor_cache", None), "num_cached_objects", 0)
    return cached if isinstance(cached, int) else 0


def _actor_of(tune_controller: Any, trial: Any) -> Any | None:
    """The actor Tune has granted ``trial`` (started, or being constructed), or None: none granted, or another
    Tune whose bookkeeping cannot be read."""
    controller = _controller(tune_controller)
    actor = getattr(controller, "_trial_to_actor", {}).get(trial)
    manager = getattr(controller, "_actor_manager", None)
    if actor is None or manager is None:
        return None
    try:
        return actor if manager.is_actor_started(actor) else None
    except (AttributeError, TypeError):  # another Tune
        return None


def has_actor(tune_controller: Any, trial: Any) -> bool:
    """Whether Tune has granted pending ``trial`` an actor (started, or being constructed)."""
    return _actor_of(tune_controller, trial) is not None


def actor_starting(tune_controller: Any, trial: Any) -> bool:
    """Whether Tune is constructing an actor for ``trial`` now (granted its resources, not ready yet)."""
    actor = _actor_of(tune_controller, trial)
    if actor is None:
        return False
    try:
        return actor not in _controller(tune_controller)._started_actors
    except (AttributeError, TypeError):  # another Tune: choose as before
        return False


# Concurrency limits of the search algorithm -------------------------------------------------------------

class Limit:
    """One concurrency limit of the search algorithm: the set of trial ids it counts as live, and its
    maximum (a ``ConcurrencyLimiter``, or a ``BasicVariantGenerator`` with ``max_concurrent``, which is
    how ``TuneConfig(max_concurrent_trials=...)`` reaches it). Both are read anew at each use.

    Args:
        owner: the object that holds the limit.
        live: the name of its attribute holding the set of live trial ids.
        limit: the name of its attribute holding the maximum.
    """

    def __init__(self, owner: Any, live: str, limit: str) -> None:
        self.owner, self._live, self._limit = owner, live, limit

    @property
    def live(self) -> set[str]:
        return getattr(self.owner, self._live)

    @property
    def limit(self) -> int:
        return int(getattr(self.owner, self._limit))


def concurrency_limits(search_alg: Any) -> list[Limit]:
    """The limits of ``search_alg`` that count trials by id, so that a waiting trial's slot can be
    given back. A limit this cannot see (a searcher's own, a ``ConcurrencyLimiter(batch=True)``) is
    left alone."""
    found: list[Limit] = []
    if isinstance(search_alg, BasicVariantGenerator):
        if search_alg.max_concurrent > 0:
            found.append(Limit(search_alg, "_live_trials", "max_concurrent"))
        return found
    searcher = getattr(search_alg, "searcher", None)
    for _ in range(16):  # wrappers of wrappers
        if searcher is None:
            break
        if isinstance(searcher, ConcurrencyLimiter) and getattr(searcher, "_limit_concurrency", True) \
                and not searcher.batch:
            found.append(Limit(searcher, "live_trials", "max_concurrent"))
        searcher = getattr(searcher, "searcher", None)
    return found
