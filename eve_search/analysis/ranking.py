"""Ranking agreement: does a cheap trainer order configurations the way the reference trainer does?

Kendall's tau-b (tie-corrected, scipy) between two methods' validation accuracies of the same
configurations, paired by training seed, mean +- std over seeds (paper, Appendix "Does EvE Rank
Configurations Like Adam Does?"), with the reference comparisons that give it a scale (the
reference against itself under another training seed; the reference against a near-identical
optimizer). Beyond the paper: agreement at every rung, agreement of each rung with the reference's
final SHA ordering, bootstrap intervals, and a plain-language verdict.

Scores are ``{config_index: accuracy}`` per rung budget per training seed, as a sweep records them.

Example:
    >>> round(kendall_tau_b({0: 0.8, 1: 0.7, 2: 0.9}, {0: 0.81, 1: 0.75, 2: 0.85}), 3)
    1.0
    >>> top_config_rank({0: 0.8, 1: 0.7, 2: 0.9}, {0: 0.9, 1: 0.7, 2: 0.85})
    2
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from eve_search._checks import InputError
from eve_search.engine.ledger import rank_order

__all__ = [
    "Agreement",
    "Comparison",
    "agreement",
    "comparisons",
    "final_ordering",
    "kendall_tau_b",
    "rung_scores",
    "top_config",
    "top_config_rank",
    "verdict",
]

Scores = Mapping[int, float]


def _common(a: Scores, b: Scores) -> list[int]:
    return sorted(set(a) & set(b))


def kendall_tau_b(a: Scores, b: Scores) -> float:
    """Tau-b between two scorings over the configurations both contain (NaN if fewer than 2).

    Args:
        a, b: scores by configuration index (e.g. validation accuracy at one rung).

    Returns:
        Kendall's tau-b in [-1, 1] (ties counted as tau-b does), or NaN.

    Example:
        >>> kendall_tau_b({0: 0.1, 1: 0.5, 2: 0.3}, {0: 0.2, 1: 0.9, 2: 0.4})
        1.0
        >>> round(kendall_tau_b({0: 0.1, 1: 0.5, 2: 0.3}, {0: 0.2, 1: 0.3, 2: 0.4, 7: 1.0}), 3)
        0.333
    """
    keys = _common(a, b)
    if len(keys) < 2:
        return math.nan
    from scipy import stats  # imported on first use: building the CLI parser must not pay for scipy

    return float(stats.kendalltau([a[k] for k in keys], [b[k] for k in keys], variant="b").statistic)


def _tau_b_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Tau-b of every row pair (x[r], y[r]) at once: sum sign(dx) sign(dy) over all pairs, divided by
    sqrt(untied pairs in x * untied pairs in y); the bootstrap needs thousands of these."""
    dx = np.sign(x[:, :, None] - x[:, None, :])
    dy = np.sign(y[:, :, None] - y[:, None, :])
    concordance = (dx * dy).sum(axis=(1, 2))
    denominator = np.sqrt(np.abs(dx).sum(axis=(1, 2)) * np.abs(dy).sum(axis=(1, 2)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, concordance / denominator, np.nan)


def top_config(scores: Scores) -> int:
    """The best-scored configuration, by the SHA promotion tie-break (ties: the lower index).

    Args:
        scores: scores by configuration index (higher is better).

    Returns:
        The index of the best configuration.

    Example:
        >>> top_config({3: 0.8, 1: 0.8, 2: 0.5})
        1
    """
    return rank_order(dict(sorted(scores.items())))[0]


def top_config_rank(scores: Scores, reference: Scores) -> int:
    """Rank (1 = best) under ``reference`` of the configuration ``scores`` puts first.

    Competition ranking: 1 + how many configurations the reference scores strictly higher.

    Args:
        scores: the method's scores by configuration index.
        reference: the reference's scores (it must score the method's top configuration).

    Returns:
        The rank, from 1.

    Example:
        >>> top_config_rank({0: 0.9, 1: 0.5, 2: 0.1}, {0: 0.7, 1: 0.8, 2: 0.9})
        3
    """
    chosen = reference[top_config(scores)]
    return 1 + sum(value > chosen for value in reference.values())


def final_ordering(rungs: Mapping[float, Scores]) -> dict[int, float]:
    """A sweep's final SHA ordering as one score per configuration.

    A configuration that reached a later rung ranks above every one stopped earlier; within a
    rung, by its accuracy there. Encoded as rung number + accuracy (accuracies lie in [0, 1]).

    Args:
        rungs: per rung budget, the scores of the configurations that reached it.

    Returns:
        One score per configuration, higher for the configurations SHA kept longer.

    Example:
        >>> final_ordering({100: {0: 0.7, 1: 0.8, 2: 0.6}, 300: {1: 0.5}})
        {0: 0.7, 1: 1.5, 2: 0.6}
    """
    ordered: dict[int, float] = {}
    for number, budget in enumerate(sorted(rungs)):
        for index, accuracy in rungs[budget].items():
            ordered[index] = number + accuracy
    return ordered


@dataclass
class Agreement:
    """Tau-b of one comparison over paired seeds, with a bootstrap interval of the mean (made by
    :func:`agreement`).

    Args:
        taus: tau-b of each seed pair (NaN where a pair shares fewer than two configurations).
        pairs: the (method seed, reference seed) pairs.
        configurations: how many configurations each pair shares.
        interval: the bootstrap interval of the mean tau-b.
        top_ranks: per pair, the reference's rank of the method's top configuration.

    Example:
        >>> result = Agreement(taus=[0.5, 1.0, math.nan], pairs=[(0, 0), (1, 1), (2, 2)],
        ...                    configurations=[3, 3, 1], interval=(0.5, 1.0))
        >>> result.mean  # the pair without a tau-b is left out
        0.75
    """

    taus: list[float]
    pairs: list[tuple[int, int]]
    configurations: list[int]
    interval: tuple[float, float]
    top_ranks: list[int | None] = field(default_factory=list)

    @property
    def _defined(self) -> list[float]:
        # A pair with fewer than two shared configurations has no tau; later rungs can be that small.
        return [t for t in self.taus if not math.isnan(t)]

    @property
    def mean(self) -> float:
        return statistics.fmean(self._defined) if self._defined else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self._defined) if len(self._defined) > 1 else (0.0 if self._defined else math.nan)

    def as_dict(self) -> dict:
        return {"mean": self.mean, "std": self.std, "taus": self.taus, "pairs": self.pairs,
                "configurations": self.configurations, "interval": list(self.interval),
                "top_ranks": self.top_ranks}


def agreement(method: Mapping[int, Scores], reference: Mapping[int, Scores], pairs: Sequence[tuple[int, int]], *,
              resamples: int = 1000, level: float = 0.95, seed: int = 0) -> Agreement:
    """Tau-b of ``method[s]`` against ``reference[t]`` for each seed pair (s, t), and its spread.

    The interval is a percentile bootstrap of the mean over pairs: each pair's configurations are
    resampled with replacement, tau-b recomputed, and averaged over pairs.

    ``top_ranks`` holds, per pair, the rank under the reference of the method's top configuration
    (None when the two share no configuration, which can happen at late rungs).

    Args:
        method: per training seed, the method's scores by configuration index.
        reference: per training seed, the reference's scores.
        pairs: the (method seed, reference seed) pairs to compare.
        resamples: bootstrap resamples.
        level: the interval's coverage.
        seed: the bootstrap's random seed.

    Returns:
        An :class:`Agreement` (``mean``, ``std``, ``interval``, ``taus``, ``top_ranks``).

    Raises:
        InputError: ``pairs`` is empty.

    Example:
        >>> eve = {0: {0: 0.1, 1: 0.5, 2: 0.3, 3: 0.9}, 1: {0: 0.2, 1: 0.4, 2: 0.35, 3: 0.8}}
        >>> adam = {0: {0: 0.15, 1: 0.45, 2: 0.5, 3: 0.85}, 1: {0: 0.1, 1: 0.6, 2: 0.3, 3: 0.7}}
        >>> result = agreement(eve, adam, [(0, 0), (1, 1)], resamples=200)
        >>> [round(t, 3) for t in result.taus], result.top_ranks
        ([0.667, 1.0], [1, 1])
    """
    if not pairs:
        raise InputError("Invalid pairs: [] (expected at least one (method seed, reference seed) pair)")
    taus, ranks, sizes = [], [], []
    columns = []
    for s, t in pairs:
        keys = _common(method[s], reference[t])
        sizes.append(len(keys))
        taus.append(kendall_tau_b(method[s], reference[t]))
        ranks.append(top_config_rank({k: method[s][k] for k in keys}, {k: reference[t][k] for k in keys})
                     if keys else None)
        columns.append((np.array([method[s][k] for k in keys]), np.array([reference[t][k] for k in keys])))
    rng = np.random.default_rng(seed)
    per_pair = []
    for x, y in columns:
        if len(x) < 2:
            continue
        draws = rng.integers(0, len(x), (resamples, len(x)))
        per_pair.append(_tau_b_rows(x[draws], y[draws]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample in which no pair has a tau
        means = [float(m) for m in np.nanmean(np.stack(per_pair), axis=0)] if per_pair else []
    means = [m for m in means if not math.isnan(m)]
    alpha = (1 - level) / 2
    interval = (float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))) if means else (math.nan,) * 2
    return Agreement(taus=taus, pairs=[tuple(p) for p in pairs], configurations=sizes, interval=interval,
                     top_ranks=ranks)


def verdict(candidate: Agreement, self_agreement: Agreement, name: str, reference: str) -> str:
    """One sentence comparing a method's agreement with the reference to the reference's own.

    Args:
        candidate: the method's agreement with the reference (:func:`agreement`).
        self_agreement: the reference's agreement with itself under other training seeds.
        name, reference: the two methods' names, as the sentence writes them.

    Returns:
        The sentence: "less well than", "about as well as" or "better than", from whether the two
        bootstrap intervals overlap.

    Example:
        >>> eve = {0: {0: 0.1, 1: 0.5, 2: 0.3, 3: 0.9}, 1: {0: 0.2, 1: 0.4, 2: 0.35, 3: 0.8}}
        >>> adam = {0: {0: 0.15, 1: 0.45, 2: 0.5, 3: 0.85}, 1: {0: 0.1, 1: 0.6, 2: 0.3, 3: 0.7}}
        >>> text = verdict(agreement(eve, adam, [(0, 0), (1, 1)], resamples=200),
        ...                agreement(adam, adam, [(0, 1), (1, 0)], resamples=200), "EvE", "Adam")
        >>> text.split(" (")[0]
        "EvE's ranking agrees with Adam's about as well as Adam agrees with itself under another training seed"
    """
    low, high = self_agreement.interval
    if candidate.interval[1] < low:
        relation = "less well than"
    elif candidate.interval[0] > high:
        relation = "better than"
    else:
        relation = "about as well as"
    return (f"{name}'s ranking agrees with {reference}'s {relation} {reference} agrees with itself under another "
            f"training seed (tau-b {candidate.mean:.3f} vs {self_agreement.mean:.3f}; 95% intervals "
            f"[{candidate.interval[0]:.3f}, {candidate.interval[1]:.3f}] and [{low:.3f}, {high:.3f}])")


@dataclass(frozen=True)
class Comparison:
    """``method`` against ``reference``, pairing seed s with s ("same") or with the next seed ("next").

    Attributes:
        method: the trainer whose ranking is compared.
        reference: the trainer it is compared with.
        pairing: ``"same"`` or ``"next"`` (a method against itself needs ``"next"``).

    Example:
        >>> comparison = Comparison("adam", "adam", "next")
        >>> comparison.label, comparison.pairs([0, 1, 2])
        ('adam vs adam (different training seeds)', [(0, 1), (1, 2), (2, 0)])
    """

    method: str
    reference: str
    pairing: str

    @property
    def label(self) -> str:
        if self.method == self.reference:
            return f"{self.method} vs {self.reference} (different training seeds)"
        return f"{self.method} vs {self.reference}"

    def pairs(self, seeds: list[int]) -> list[tuple[int, int]]:
        if self.pairing == "same":
            return [(s, s) for s in seeds]
        return [(s, seeds[(k + 1) % len(seeds)]) for k, s in enumerate(seeds)]


def comparisons(against: str = "adam") -> list[Comparison]:
    """EvE vs the reference, EvE vs AdamW, the reference vs itself, the reference vs AdamW.

    Args:
        against: the reference trainer.

    Returns:
        The four comparisons the ranking study reports, in that order.

    Example:
        >>> [comparison.label for comparison in comparisons()]
        ['eve vs adam', 'eve vs adamw', 'adam vs adam (different training seeds)', 'adam vs adamw']
    """
    return [Comparison("eve", against, "same"), Comparison("eve", "adamw", "same"),
            Comparison(against, against, "next"), Comparison(against, "adamw", "same")]


def rung_scores(entries: Iterable[tuple[int, float, float]]) -> dict[float, dict[int, float]]:
    """``{budget: {config_index: score}}`` from (config_index, budget, score) triples: the shape every
    ranking comparison reads, whether the scores come from a sweep result or from a store.

    Args:
        entries: (config_index, budget, score) triples, in any order.

    Returns:
        Per budget, each configuration's score (a repeated pair keeps the last).

    Example:
        >>> rung_scores([(0, 100, 0.8), (1, 100, 0.7), (0, 300, 0.85)])
        {100: {0: 0.8, 1: 0.7}, 300: {0: 0.85}}
    """
    scores: dict[float, dict[int, float]] = {}
    for index, budget, score in entries:
        scores.setdefault(budget, {})[index] = score
    return scores
