"""Summary statistics of repeated runs, with one rule for every report."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["mean_std"]


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation of ``values``.

    Args:
        values: the results of repeated runs (e.g. one per seed).

    Returns:
        ``(None, None)`` for no values; the deviation of a single value is unknown: ``(value, None)``.

    Example:
        >>> mean_std([1.0, 3.0])
        (2.0, 1.4142135623730951)
        >>> mean_std([2.0])
        (2.0, None)
    """
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)
