"""Statistics of the synthetic benchmarks (paper, Section "Synthetic Scalable Benchmarks", Table
"Shared parameters for the synthetic scalable-benchmark sweep").

Per (function, n) cell: min/median/max of the final values over seeds; two one-sided Wilcoxon
signed-rank tests on the differences paired by seed (EvE lower than Adam, and Adam lower than EvE);
Holm-Bonferroni over every test run at family-wise alpha; a cell is a win (EvE significantly
better), a loss (Adam significantly better) or a tie (neither).

A value that is not finite (a run that overflowed) is worse than every finite value: differences
with one infinite side rank above every finite difference, and two infinite values are a tie.

Example:
    >>> holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    [True, False, False, True]
    >>> classify(eve_better=True, adam_better=False)
    'win'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from eve_search._checks import InputError

__all__ = [
    "PAPER_WIN_TIE_LOSS",
    "CellStatistics",
    "analyse",
    "classify",
    "holm",
    "holm_adjusted",
    "one_sided_wilcoxon",
    "paired_differences",
    "summary",
    "win_tie_loss",
]

# The paper's Table "Per-problem summary of EvE vs. Adam on the synthetic benchmarks": cells over
# its ten dimensions where EvE is significantly better / indistinguishable / Adam is significantly better.
PAPER_WIN_TIE_LOSS: dict[str, tuple[int, int, int]] = {
    "ackley": (7, 3, 0),
    "griewank": (10, 0, 0),
    "rastrigin": (7, 3, 0),
    "rosenbrock": (0, 10, 0),
    "schwefel": (1, 2, 7),
    "sphere": (0, 0, 10),
    "zakharov": (8, 2, 0),
}


def holm_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values: the k-th smallest (k = 0, 1, ...) becomes
    max over j <= k of min(1, (m - j) p_(j)); reject where the adjusted value is <= alpha.

    Args:
        pvalues: the raw p-values of the family, in any order.

    Returns:
        The adjusted p-values, in the same order.

    Example:
        >>> holm_adjusted([0.01, 0.04, 0.03, 0.005])
        [0.03, 0.06, 0.06, 0.02]
    """
    m = len(pvalues)
    order = sorted(range(m), key=lambda k: pvalues[k])
    adjusted = [1.0] * m
    running = 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[k]))
        adjusted[k] = running
    return adjusted


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Which hypotheses Holm's step-down procedure rejects at family-wise ``alpha``.

    Args:
        pvalues: the raw p-values of the family.
        alpha: the family-wise error rate.

    Returns:
        Per p-value, in order, whether its hypothesis is rejected.

    Example:
        >>> holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
        [True, False, False, True]
    """
    return [p <= alpha for p in holm_adjusted(pvalues)]


def paired_differences(eve: Sequence[float], adam: Sequence[float]) -> np.ndarray:
    """EvE minus Adam per seed, with infinities made rank-safe: equal values (two infinities
    included) differ by 0, and a difference with an infinite side becomes larger in size than every
    finite one (all such differences tie in size), keeping its sign."""
    a, b = np.asarray(eve, dtype=np.float64), np.asarray(adam, dtype=np.float64)
    if a.shape != b.shape:
        raise InputError(f"Invalid pairs: {a.size} EvE values against {b.size} Adam values")
    if np.isnan(a).any() or np.isnan(b).any():
        raise InputError("Invalid values: NaN (record a run that failed numerically as +inf)")
    with np.errstate(invalid="ignore"):
        d = np.where(a == b, 0.0, a - b)
    infinite = np.isinf(d)
    if infinite.any():
        finite = np.abs(d[~infinite])
        top = 2.0 * (finite.max() if finite.size else 1.0) + 1.0
        d[infinite] = np.sign(d[infinite]) * top
    return d


def one_sided_wilcoxon(eve: Sequence[float], adam: Sequence[float]) -> tuple[float, float]:
    """(p that EvE is lower, p that Adam is lower): two one-sided Wilcoxon signed-rank tests on the
    seed-paired differences (scipy's default method; zero differences dropped). A cell whose
    values are all equal gives (1, 1).

    Args:
        eve: EvE's final values, one per seed.
        adam: Adam's, paired with them by position (a failed run as +inf; NaN is refused).

    Returns:
        ``(p_eve_lower, p_adam_lower)``.

    Example:
        >>> eve = [0.1, 0.2, 0.15, 0.12, 0.11, 0.3, 0.05, 0.2]
        >>> adam = [1.0, 1.2, 0.9, 1.1, 0.8, 1.3, 1.0, 0.95]
        >>> one_sided_wilcoxon(eve, adam)
        (0.00390625, 1.0)
    """
    from scipy.stats import wilcoxon

    d = paired_differences(eve, adam)
    if not np.any(d != 0.0):
        return 1.0, 1.0
    less = float(wilcoxon(d, alternative="less").pvalue)
    greater = float(wilcoxon(d, alternative="greater").pvalue)
    return less, greater


def classify(eve_better: bool, adam_better: bool) -> str:
    """'win' (EvE significantly better), 'loss' (Adam significantly better) or 'tie'.

    Args:
        eve_better: whether the test "EvE is lower" was rejected (after correction).
        adam_better: whether the test "Adam is lower" was rejected.

    Returns:
        ``"win"``, ``"loss"`` or ``"tie"``.

    Raises:
        ValueError: both are True.

    Example:
        >>> classify(eve_better=False, adam_better=True), classify(False, False)
        ('loss', 'tie')
    """
    if eve_better and adam_better:
        raise ValueError("both one-sided tests rejected: the two directions cannot both hold")
    return "win" if eve_better else "loss" if adam_better else "tie"


def summary(values: Sequence[float]) -> dict[str, float]:
    """min / median / max of one method's final values in one cell."""
    array = np.asarray(values, dtype=np.float64)
    return {"min": float(array.min()), "median": float(np.median(array)), "max": float(array.max())}


@dataclass
class CellStatistics:
    """One (function, n) cell: the seeds paired, each side's min/median/max, both one-sided p-values
    raw and Holm-adjusted over the whole family, and the verdict.

    Attributes:
        function, n: the cell.
        seeds: the seeds paired.
        eve, adam: each method's ``min``, ``median`` and ``max`` final value.
        p_eve_better, p_adam_better: the raw one-sided p-values.
        p_eve_better_holm, p_adam_better_holm: the same, Holm-adjusted over the family.
        verdict: ``"win"``, ``"tie"`` or ``"loss"`` for EvE.

    Example:
        >>> eve = [0.1, 0.2, 0.15, 0.12, 0.11, 0.3, 0.05, 0.2]
        >>> adam = [1.0, 1.2, 0.9, 1.1, 0.8, 1.3, 1.0, 0.95]
        >>> cells = analyse({("sphere", 2): {s: (eve[s], adam[s]) for s in range(8)},
        ...                  ("ackley", 2): {s: (adam[s], eve[s]) for s in range(8)}})
        >>> cells[0].function, cells[0].eve["median"], cells[0].verdict
        ('sphere', 0.135, 'win')
    """

    function: str
    n: int
    seeds: list[int]
    eve: dict[str, float]
    adam: dict[str, float]
    p_eve_better: float
    p_adam_better: float
    p_eve_better_holm: float
    p_adam_better_holm: float
    verdict: str

    def as_dict(self) -> dict:
        return asdict(self)


def analyse(cells: Mapping[tuple[str, int], Mapping[int, tuple[float, float]]],
            alpha: float = 0.05) -> list[CellStatistics]:
    """Test every cell ``(function, n) -> {seed: (eve value, adam value)}`` and correct over all of
    them (two tests per cell) with Holm-Bonferroni at family-wise ``alpha``.

    Args:
        cells: per (function, n), ``{seed: (eve value, adam value)}``.
        alpha: the family-wise error rate, in (0, 1).

    Returns:
        One :class:`CellStatistics` per cell, in the order given.

    Raises:
        InputError: ``alpha`` is outside (0, 1), a cell is empty, or a value is NaN.

    Example:
        >>> eve = [0.1, 0.2, 0.15, 0.12, 0.11, 0.3, 0.05, 0.2]
        >>> adam = [1.0, 1.2, 0.9, 1.1, 0.8, 1.3, 1.0, 0.95]
        >>> cells = analyse({("sphere", 2): {s: (eve[s], adam[s]) for s in range(8)},
        ...                  ("ackley", 2): {s: (adam[s], eve[s]) for s in range(8)}})
        >>> [(cell.function, cell.verdict) for cell in cells]
        [('sphere', 'win'), ('ackley', 'loss')]
    """
    if not 0.0 < alpha < 1.0:
        raise InputError(f"Invalid alpha: {alpha!r} (expected a level in (0, 1))")
    raw = []
    for key, pairs in cells.items():
        if not pairs:
            raise InputError(f"Invalid cell {key}: no seed has both an EvE and an Adam run")
        seeds = sorted(pairs)
        eve = [pairs[s][0] for s in seeds]
        adam = [pairs[s][1] for s in seeds]
        raw.append((key, seeds, eve, adam, *one_sided_wilcoxon(eve, adam)))
    adjusted = holm_adjusted([p for *_, less, greater in raw for p in (less, greater)])
    results = []
    for k, ((function, n), seeds, eve, adam, less, greater) in enumerate(raw):
        less_holm, greater_holm = adjusted[2 * k], adjusted[2 * k + 1]
        results.append(CellStatistics(function, n, seeds, summary(eve), summary(adam), less, greater, less_holm,
                                      greater_holm, classify(less_holm <= alpha, greater_holm <= alpha)))
    return results


def win_tie_loss(cells: Sequence[CellStatistics]) -> dict[str, tuple[int, int, int]]:
    """Per function: (wins, ties, losses) of EvE against Adam over the cells tested.

    Args:
        cells: the tested cells (:func:`analyse`).

    Returns:
        ``{function: (wins, ties, losses)}``, functions in the order first met.

    Example:
        >>> eve = [0.1, 0.2, 0.15, 0.12, 0.11, 0.3, 0.05, 0.2]
        >>> adam = [1.0, 1.2, 0.9, 1.1, 0.8, 1.3, 1.0, 0.95]
        >>> cells = analyse({("sphere", 2): {s: (eve[s], adam[s]) for s in range(8)},
        ...                  ("ackley", 2): {s: (adam[s], eve[s]) for s in range(8)}})
        >>> win_tie_loss(cells)
        {'sphere': (1, 0, 0), 'ackley': (0, 0, 1)}
    """
    counts: dict[str, list[int]] = {}
    for cell in cells:
        row = counts.setdefault(cell.function, [0, 0, 0])
        row[("win", "tie", "loss").index(cell.verdict)] += 1
    return {name: (w, t, loss) for name, (w, t, loss) in counts.items()}
