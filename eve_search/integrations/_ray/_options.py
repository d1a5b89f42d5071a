"""The scheduler's arguments, checked: ASHA's vocabulary (``grace_period``, ``reduction_factor``,
``max_t``) or explicit ``rungs`` and ``fraction``, turned into one tuple of rungs and one promoted share.

Example:
    >>> scheduler_rungs("training_iteration", None, 1 / 3, reduction_factor=3, grace_period=1, max_t=27)
    (1, 3, 9, 27)
    >>> promoted_fraction(None, 4)
    0.25
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from eve_search._checks import InputError
from eve_search.engine.ledger import DEFAULT_RUNGS, PROMOTED_FRACTION, check_fraction, check_rungs, rungs_from_geometric

__all__ = ["MODES", "check_cohort_size", "check_keys", "check_mode", "promoted_fraction", "scheduler_rungs"]

MODES = ("max", "min")


def check_mode(mode: str | None) -> str | None:
    """``mode`` when it is None, ``"max"`` or ``"min"``; else InputError naming it."""
    if mode is not None and mode not in MODES:
        raise InputError(f"Invalid mode: {mode!r} (expected 'max' or 'min')")
    return mode


def check_keys(time_attr: str, metric: str | None) -> None:
    """``time_attr`` and ``metric`` (when given) must be result keys: non-empty strings."""
    if not isinstance(time_attr, str) or not time_attr:
        raise InputError(f"Invalid time_attr: {time_attr!r} (expected a result key)")
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise InputError(f"Invalid metric: {metric!r} (expected a result key)")


def check_cohort_size(cohort_size: int | None) -> int | None:
    """``cohort_size`` when it is None or a whole number of at least 2 trials; else InputError."""
    if cohort_size is not None and (isinstance(cohort_size, bool) or not isinstance(cohort_size, int)
                                    or cohort_size < 2):
        raise InputError(f"Invalid cohort_size: {cohort_size!r} (expected a whole number of trials, at least 2)")
    return cohort_size


def promoted_fraction(fraction: float | None, reduction_factor: float | None) -> float:
    """The promoted share of each rung: ``fraction``, else ``1 / reduction_factor``, else a third; the
    two may both be given only when they agree."""
    if reduction_factor is not None and (isinstance(reduction_factor, bool)
                                         or not isinstance(reduction_factor, (int, float))
                                         or not math.isfinite(reduction_factor) or reduction_factor <= 1):
        raise InputError(f"Invalid reduction_factor: {reduction_factor!r} (expected a number above 1)")
    if fraction is not None:
        fraction = check_fraction(fraction)
        if reduction_factor is not None and not math.isclose(fraction, 1 / reduction_factor):
            raise InputError(f"Invalid fraction: {fraction!r} (expected 1 / reduction_factor = "
                             f"{1 / reduction_factor:.4g}, or only one of the two)")
        return fraction
    return 1 / reduction_factor if reduction_factor is not None else PROMOTED_FRACTION


def scheduler_rungs(time_attr: str, rungs: Sequence[int] | None, fraction: float, *,
                    reduction_factor: float | None = None, grace_period: int | None = None,
                    max_t: int | None = None) -> tuple[int, ...]:
    """The rungs: ``rungs`` checked; else the paper's for ``time_attr="eval_cost"`` with neither
    ``grace_period`` nor ``max_t``; else geometric from ``grace_period`` (default 1) by
    ``reduction_factor`` (default ``1 / fraction``) while below ``max_t`` (default 100), then ``max_t``."""
    for name, value in (("grace_period", grace_period), ("max_t", max_t)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value != int(value) or value <= 0):
            raise InputError(f"Invalid {name}: {value!r} (expected a positive whole number of steps)")
    if rungs is not None:
        if grace_period is not None or max_t is not None:
            raise InputError(f"Invalid rungs: {rungs!r} (expected either rungs=... or grace_period/max_t, "
                             "not both)")
        return check_rungs(rungs)
    if time_attr == "eval_cost" and grace_period is None and max_t is None:
        return check_rungs(DEFAULT_RUNGS)  # the paper's rungs, in its cost units
    first = 1 if grace_period is None else int(grace_period)
    last = 100 if max_t is None else int(max_t)
    if last < first:
        raise InputError(f"Invalid max_t: {max_t!r} (expected at least grace_period, {first})")
    factor = reduction_factor if reduction_factor is not None else 1 / fraction
    if factor <= 1:
        raise InputError(f"Invalid fraction: {fraction!r} (rungs from grace_period and max_t need a "
                         "reduction_factor above 1: pass rungs=... with fraction=1)")
    return rungs_from_geometric(first, last, factor)
