"""The pruner's arguments, checked: its rungs (Optuna's ``min_resource``/``reduction_factor``/``max_resource``,
or explicit ``rungs``) and promoted share, and :class:`PrunerOptions`, how it waits (``timeout``,
``poll_interval``, ``stall_seconds``) and what it is told about the study (``n_trials``, ``workers``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eve_search._checks import InputError, check_int, with_overrides
from eve_search.engine.ledger import PROMOTED_FRACTION, check_fraction, check_rungs, rungs_from_geometric

__all__ = ["OPEN_END", "PrunerOptions", "geometric_rungs", "pruner_options", "rung_rule"]

OPEN_END = 10**9  # steps: without max_resource the geometric rungs run past any step a script reports


def geometric_rungs(min_resource: Any, reduction_factor: Any, max_resource: Any) -> tuple[int, ...]:
    """Optuna's vocabulary: ``min_resource * reduction_factor**k``, then ``max_resource`` (or open-ended)."""
    if max_resource is not None:
        return rungs_from_geometric(min_resource, max_resource, reduction_factor)
    first = rungs_from_geometric(min_resource, min_resource, reduction_factor)  # checks both arguments
    if first[0] >= OPEN_END:
        return first
    return rungs_from_geometric(min_resource, OPEN_END, reduction_factor)[:-1]  # OPEN_END itself is no rung


def rung_rule(rungs: Sequence[int] | None, fraction: float | None, min_resource: Any, reduction_factor: Any,
              max_resource: Any) -> tuple[tuple[int, ...], float, Any, Any]:
    """The rungs and the promoted share: explicit ``rungs`` (promoting a third by default), or Optuna's
    geometric schedule (``min_resource=1``, ``reduction_factor=3`` by default, promoting
    ``1 / reduction_factor``); the two vocabularies are not mixed. Also returns ``min_resource`` and
    ``reduction_factor`` with their defaults filled in (None with explicit rungs)."""
    geometric = {"min_resource": min_resource, "reduction_factor": reduction_factor, "max_resource": max_resource}
    if rungs is not None:
        given = [name for name, value in geometric.items() if value is not None]
        if given:
            raise InputError(f"Invalid rungs: {rungs!r} together with {', '.join(given)} (expected either "
                             "explicit rungs= or min_resource/reduction_factor/max_resource, not both)")
        return check_rungs(rungs), check_fraction(PROMOTED_FRACTION if fraction is None else fraction), None, None
    min_resource = 1 if min_resource is None else min_resource
    reduction_factor = 3 if reduction_factor is None else reduction_factor
    schedule = geometric_rungs(min_resource, reduction_factor, max_resource)
    share = check_fraction(1.0 / reduction_factor if fraction is None else fraction)
    return schedule, share, min_resource, reduction_factor


@dataclass(frozen=True, kw_only=True)
class PrunerOptions:
    """How :class:`~eve_search.integrations.optuna.SynchronousSHAPruner` waits at a rung, and what it is told
    about the study: the knobs most scripts leave at their defaults. Pass them as keywords to the pruner, or
    as one object (``SynchronousSHAPruner(cohort_size=9, options=PrunerOptions(workers=4))``), not both.

    Args:
        timeout: seconds a trial waits at a rung before deciding without absent members (None: never;
            a decision by the clock, so results may depend on the machine's speed).
        poll_interval: seconds between two reads of the storage while waiting.
        stall_seconds: a last guard, never a decision: on shared storage, how long every running trial
            may wait at a rung, while this process can start no trial and no other process runs one,
            before ``should_prune()`` raises :class:`~eve_search.integrations.optuna.CohortStalledError`
            (default 300 s: over ten times the 5-11 s a worker process took here to import PyTorch and
            Optuna under load).
        n_trials: the number of trials the study will have, when it is not a multiple of
            ``cohort_size`` (``study.optimize(objective, n_trials=N)``): the last cohort is decided
            with the trials up to N (None: only ``optimize_in_cohorts`` closes cohorts early).
        workers: the processes that run the study at once on RDB storage, this one included (default 1:
            this process alone; ignored on in-memory storage). Only whether it is above 1 matters: then
            the pruner waits for other processes to start the trials this one cannot.

    Raises:
        InputError: one line naming the argument, its value and what was expected.

    Example:
        >>> PrunerOptions(workers=4, stall_seconds=600).workers
        4
        >>> from eve_search.integrations.optuna import SynchronousSHAPruner
        >>> SynchronousSHAPruner(cohort_size=9, options=PrunerOptions(workers=4)).workers
        4
        >>> SynchronousSHAPruner(cohort_size=9, workers=4).options == PrunerOptions(workers=4)
        True
        >>> SynchronousSHAPruner(options=PrunerOptions(workers=4), timeout=60)
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid options: PrunerOptions(timeout=None, poll_interval=0.1, stall_seconds=300.0, n_trials=None, workers=4) together with the keywords timeout (expected options= or its fields as keywords, not both)
        >>> PrunerOptions(timeout=-1)
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid timeout: -1 (expected a number of seconds > 0)
    """

    timeout: float | None = None
    poll_interval: float = 0.1
    stall_seconds: float = 300.0
    n_trials: int | None = None
    workers: int = 1

    def __post_init__(self) -> None:
        if self.n_trials is not None:
            check_int("n_trials", self.n_trials, 1, detail=", or None")
        check_int("workers", self.workers, 1, detail=" of worker processes")
        for name in ("timeout", "poll_interval", "stall_seconds"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise InputError(f"Invalid {name}: {value!r} (expected a number of seconds > 0)")
            if value is not None:
                object.__setattr__(self, name, float(value))


def pruner_options(options: PrunerOptions | None, keywords: Mapping[str, Any]) -> PrunerOptions:
    """``options``, or a :class:`PrunerOptions` of the keywords: one or the other, not both."""
    if options is not None and keywords:
        raise InputError(f"Invalid options: {options!r} together with the keywords {', '.join(sorted(keywords))} "
                         "(expected options= or its fields as keywords, not both)")
    return with_overrides("SynchronousSHAPruner", PrunerOptions, options, keywords)
