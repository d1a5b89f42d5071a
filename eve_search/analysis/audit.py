"""The proxy audit's measures: pure functions over {config_index: score} of finished runs.

Top-1 regret, whether promotion keeps the true best, the per-budget table and the verdict, and
:func:`audit_measures` that applies them all. The runs that feed them are
:mod:`eve_search.experiments.audit`, or a recorded pool (:func:`audit_pool`); the dashboard draws them
(:mod:`eve_search.dashboard._audit`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eve_search._checks import InputError, options_or_keywords
from eve_search.analysis.ranking import agreement
from eve_search.engine.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    promotion_count,
    rank_order,
)
from eve_search.engine.pool import RecordedPool

__all__ = [
    "AUDIT_KIND",
    "DEFAULT_BUDGETS",
    "KEEP_RATE",
    "REGRET_THRESHOLD",
    "MeasureOptions",
    "audit_header",
    "audit_measures",
    "audit_pool",
    "budget_table",
    "keeps_true_best",
    "regret_scale",
    "regret_unit",
    "top1_regret",
    "verdict",
]

AUDIT_KIND = "audit"
# The rungs of a sweep plus a cheaper point.
DEFAULT_BUDGETS: tuple[int, ...] = (30, *DEFAULT_RUNGS)
KEEP_RATE = 0.8  # "in at least 4 of 5 seeds"
REGRET_THRESHOLD = 0.1  # points (accuracy) or metric units

Scores = Mapping[int, float]


@dataclass(frozen=True, kw_only=True)
class MeasureOptions:
    """How the audit measures a proxy: the ranking's direction and scale, the promoted share, the
    bootstrap and the verdict's thresholds. :func:`budget_table` and :func:`audit_measures` take this
    object or its fields as keywords (not both).

    Args:
        mode: ``"max"`` or ``"min"``; ``scale``: multiplies regrets (100 for accuracy in points).
        fraction: the promoted share of a rung (see :func:`keeps_true_best`).
        resamples, level, seed: the bootstrap's (see :func:`eve_search.analysis.ranking.agreement`).
        keep_rate, regret_threshold: as for :func:`verdict`.

    Example:
        >>> MeasureOptions(scale=100.0).resamples
        1000
    """

    mode: str = "max"
    scale: float = 1.0
    fraction: float = PROMOTED_FRACTION
    resamples: int = 1000
    level: float = 0.95
    seed: int = 0
    keep_rate: float = KEEP_RATE
    regret_threshold: float = REGRET_THRESHOLD


def regret_scale(metric: str) -> float:
    """What regrets are multiplied by, so that they read in points for accuracy.

    Args:
        metric: the task's metric.

    Returns:
        100 for accuracy (a regret in points), 1 for any other metric (its own units).

    Example:
        >>> regret_scale("accuracy"), regret_scale("loss")
        (100.0, 1.0)
    """
    return 100.0 if metric == "accuracy" else 1.0


def regret_unit(metric: str) -> str:
    """The unit regrets are given in once scaled by :func:`regret_scale`.

    Args:
        metric: the task's metric.

    Returns:
        ``"points"`` for accuracy, the metric's own name otherwise.

    Example:
        >>> regret_unit("accuracy"), regret_unit("loss")
        ('points', 'loss')
    """
    return "points" if regret_scale(metric) == 100 else metric


def audit_header(run: Mapping[str, Any], truth: str, budgets: Sequence[int], fraction: float,
                 seeds: Sequence[int], incomplete_seeds: Sequence[int] = ()) -> dict[str, Any]:
    """The first fields of an audit report, the same whether the runs come from a results store or a
    recorded pool; :func:`audit_measures` adds the measures.

    Args:
        run: ``task``, ``space``, ``metric``, ``mode`` and ``configs`` (how many configurations).
        truth: the reference trainer; ``budgets``: the budgets audited (the last is the truth's).
        fraction: the promoted share; ``seeds``: the complete seeds; ``incomplete_seeds``: the others.

    Returns:
        The report's fields before its measures: where the runs come from, the truth, the budgets,
        the unit of regrets, and empty ``proxies``, ``truth_runs`` and ``noise_floor``.

    Example:
        >>> header = audit_header({"task": "adult", "space": "arch", "metric": "accuracy", "mode": "max",
        ...                        "configs": 8}, "adam", [100, 300], 1 / 3, [0])
        >>> header["regret_unit"], header["truth_budget"], header["noise_floor"]
        ('points', 300, None)
    """
    metric = run["metric"]
    return {"task": run["task"], "space": run["space"], "metric": metric, "mode": run["mode"],
            "regret_unit": regret_unit(metric), "truth": truth,
            "truth_budget": list(budgets)[-1], "budgets": list(budgets), "fraction": fraction,
            "seeds": list(seeds), "incomplete_seeds": list(incomplete_seeds), "configs": run["configs"],
            "proxies": {}, "truth_runs": {}, "noise_floor": None}


# The measures: small pure functions over {config_index: score} ----------------------------------


def _ordered(scores: Scores) -> dict[int, float]:
    return dict(sorted(scores.items()))


def _worst(scores: Scores, mode: str) -> float:
    finite = [v for v in scores.values() if not math.isnan(v)]
    if not finite:
        return math.nan
    return min(finite) if mode == "max" else max(finite)


def top1_regret(proxy: Scores, truth: Scores, mode: str = "max", scale: float = 1.0) -> float:
    """How much worse, under the truth, the proxy's best configuration is than the true best.

    Both picks use the promotion tie-break (:func:`eve_search.engine.ledger.rank_order`, ties: the lower
    configuration index); only configurations both scorings hold count. A pick whose truth score is
    NaN (diverged) counts as the worst finite truth score. ``scale`` converts units (100: points).

    Args:
        proxy: the cheap trainer's scores by configuration index.
        truth: the reference scores (the full-budget trainer's).
        mode: ``"max"`` or ``"min"``: which way is better.
        scale: multiplies the regret (100 turns accuracy into points).

    Returns:
        The regret (>= 0), or NaN when the two scorings share no configuration.

    >>> round(top1_regret({0: 0.9, 1: 0.5}, {0: 0.80, 1: 0.86}, scale=100), 6)
    6.0
    """
    keys = sorted(set(proxy) & set(truth))
    if not keys:
        return math.nan
    truth = {k: truth[k] for k in keys}
    best = rank_order(truth, mode)[0]
    pick = rank_order({k: proxy[k] for k in keys}, mode)[0]
    picked = truth[pick] if not math.isnan(truth[pick]) else _worst(truth, mode)
    gap = truth[best] - picked if mode == "max" else picked - truth[best]
    return scale * gap


def keeps_true_best(proxy: Scores, truth: Scores, fraction: float = PROMOTED_FRACTION, mode: str = "max") -> bool:
    """Whether the truth's best configuration is among the proxy's top ``fraction`` (successive
    halving's promotion: ceil(n * fraction), the same tie-break).

    Args:
        proxy: the cheap trainer's scores by configuration index.
        truth: the reference scores.
        fraction: the promoted fraction (default: one third).
        mode: ``"max"`` or ``"min"``.

    Returns:
        True when the truth's best is kept (False when the scorings share no configuration).

    >>> keeps_true_best({0: 0.9, 1: 0.8, 2: 0.7}, {0: 0.1, 1: 0.2, 2: 0.9})
    False
    """
    keys = sorted(set(proxy) & set(truth))
    if not keys:
        return False
    best = rank_order({k: truth[k] for k in keys}, mode)[0]
    kept = rank_order({k: proxy[k] for k in keys}, mode)[:promotion_count(len(keys), fraction)]
    return best in kept


def _bootstrap_top(proxies: Sequence[Scores], truths: Sequence[Scores], fraction: float, mode: str, scale: float,
                   resamples: int, level: float, seed: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Percentile intervals of the mean (over seeds) top-1 regret and keep rate, configurations
    resampled with replacement within each seed (as :func:`eve_search.analysis.ranking.agreement` does for tau).
    Within a resample, ties go to the first drawn copy."""
    rng = np.random.default_rng(seed)
    sign = 1.0 if mode == "max" else -1.0
    regrets, keeps = [], []
    for proxy, truth in zip(proxies, truths, strict=True):
        keys = sorted(set(proxy) & set(truth))
        p = sign * np.array([proxy[k] for k in keys], dtype=float)
        t = sign * np.array([truth[k] for k in keys], dtype=float)
        p = np.where(np.isnan(p), -np.inf, p)
        worst = np.nanmin(t) if np.isfinite(np.nanmin(t)) else 0.0
        t = np.where(np.isnan(t), worst, t)
        draws = rng.integers(0, len(keys), (resamples, len(keys)))
        pd, td = p[draws], t[draws]
        rows = np.arange(resamples)
        pick = np.argmax(pd, axis=1)
        regrets.append(scale * (td.max(axis=1) - td[rows, pick]))
        best = np.argmax(td, axis=1)
        ahead = (pd > pd[rows, best][:, None]).sum(axis=1)
        keeps.append(ahead < promotion_count(len(keys), fraction))
    alpha = (1 - level) / 2
    mean_regret = np.mean(regrets, axis=0)
    mean_keep = np.mean(keeps, axis=0)
    return ((float(np.quantile(mean_regret, alpha)), float(np.quantile(mean_regret, 1 - alpha))),
            (float(np.quantile(mean_keep, alpha)), float(np.quantile(mean_keep, 1 - alpha))))


def budget_table(proxy: Mapping[int, Scores], truth: Mapping[int, Scores], seeds: Sequence[int], *,
                 pairs: Sequence[tuple[int, int]] | None = None, options: MeasureOptions | None = None,
                 **keywords: Any) -> dict[str, Any]:
    """Tau-b, top-1 regret and top-``fraction`` inclusion of one proxy scoring against the truth.

    ``proxy[s]`` and ``truth[t]`` are ``{config_index: score}``, compared for each pair (s, t)
    (default: the same seed); means over pairs with bootstrap intervals over configurations.

    Args:
        proxy, truth: per seed, scores by configuration index.
        seeds: the seeds compared (each with itself unless ``pairs`` is given).
        pairs: (proxy seed, truth seed) pairs instead.
        options: :class:`MeasureOptions`; its ``fraction``, ``mode``, ``scale`` (as for
            :func:`keeps_true_best` and :func:`top1_regret`) and ``resamples``, ``level``, ``seed``
            (the bootstrap's) apply.
        **keywords: fields of :class:`MeasureOptions` instead of ``options``.

    Returns:
        ``{"tau": ..., "regret": ..., "keep": ...}``: tau-b's and the regret's means, per-seed values
        and intervals, and ``keep["rate"]``, the share of pairs that keep the true best.

    Example:
        >>> proxy = {0: {0: 0.9, 1: 0.5, 2: 0.7}, 1: {0: 0.8, 1: 0.6, 2: 0.7}}
        >>> truth = {0: {0: 0.8, 1: 0.6, 2: 0.7}, 1: {0: 0.85, 1: 0.5, 2: 0.7}}
        >>> table = budget_table(proxy, truth, seeds=[0, 1], resamples=100)
        >>> table["tau"]["mean"], table["regret"]["mean"], table["keep"]["rate"]
        (1.0, 0.0, 1.0)
    """
    o = options_or_keywords("budget_table", MeasureOptions, options, keywords)
    fraction, mode, scale, resamples, level, seed = o.fraction, o.mode, o.scale, o.resamples, o.level, o.seed
    pairs = [(s, s) for s in seeds] if pairs is None else list(pairs)
    tau = agreement(proxy, truth, pairs, resamples=resamples, level=level, seed=seed)
    regrets = [top1_regret(proxy[s], truth[t], mode, scale) for s, t in pairs]
    keeps = [keeps_true_best(proxy[s], truth[t], fraction, mode) for s, t in pairs]
    regret_interval, keep_interval = _bootstrap_top([proxy[s] for s, _ in pairs], [truth[t] for _, t in pairs],
                                                    fraction, mode, scale, resamples, level, seed)
    return {
        "tau": {"mean": tau.mean, "std": tau.std, "per_seed": tau.taus, "interval": list(tau.interval)},
        "regret": {"mean": statistics.fmean(regrets), "per_seed": regrets, "interval": list(regret_interval)},
        "keep": {"rate": statistics.fmean(keeps), "kept": sum(keeps), "seeds": len(keeps), "per_seed": keeps,
                 "interval": list(keep_interval)},
    }


def verdict(rows: Mapping[int, Mapping[str, Any]], *, keep_rate: float = KEEP_RATE,
            regret_threshold: float = REGRET_THRESHOLD) -> dict[str, Any]:
    """The cheapest budget, by mean wall seconds, at which the proxy keeps the true best in its top
    third in at least ``keep_rate`` of seeds; the cheapest at which its mean top-1 regret is under
    ``regret_threshold``; and the cheapest at which both hold. None where no budget of the grid does.

    ``rows[budget]`` holds ``"keep"``, ``"regret"`` (as :func:`budget_table` gives them) and
    ``"wall_seconds"`` (``{"mean": ...}``).

    Args:
        rows: per budget, the measures above.
        keep_rate: the share of seeds that must keep the true best.
        regret_threshold: the mean top-1 regret a budget must stay under.

    Returns:
        ``keeps_best``, ``regret_under`` and ``both``: each the cheapest qualifying budget and its
        mean wall seconds, or None; and the two thresholds used.

    >>> rows = {30: {"keep": {"rate": 0.6}, "regret": {"mean": 0.5}, "wall_seconds": {"mean": 2.0}},
    ...         100: {"keep": {"rate": 0.8}, "regret": {"mean": 0.3}, "wall_seconds": {"mean": 6.0}},
    ...         300: {"keep": {"rate": 1.0}, "regret": {"mean": 0.0}, "wall_seconds": {"mean": 18.0}}}
    >>> v = verdict(rows)
    >>> v["keeps_best"]["budget"], v["regret_under"]["budget"], v["both"]["budget"]
    (100, 300, 300)
    """

    def cheapest(ok: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any] | None:
        passing = [(row["wall_seconds"]["mean"], budget) for budget, row in rows.items() if ok(row)]
        if not passing:
            return None
        seconds, budget = min(passing)
        return {"budget": budget, "wall_seconds": seconds}

    def keeps(row: Mapping[str, Any]) -> bool:
        return row["keep"]["rate"] >= keep_rate - 1e-9

    def small(row: Mapping[str, Any]) -> bool:
        return row["regret"]["mean"] < regret_threshold

    return {"keep_rate": keep_rate, "regret_threshold": regret_threshold,
            "keeps_best": cheapest(keeps), "regret_under": cheapest(small),
            "both": cheapest(lambda row: keeps(row) and small(row))}


def audit_measures(details: Mapping[tuple[str, int], Mapping[int, Mapping[int, Mapping[str, Any]]]],
                   seeds: Sequence[int], proxies: Sequence[str], truth: str, budgets: Sequence[int], *,
                   options: MeasureOptions | None = None, **keywords: Any) -> dict[str, Any]:
    """Every measure of finished runs: per proxy and budget against the truth, the verdicts, the
    truth's best per seed and the truth under the next seed.

    ``details[(trainer, seed)][config_index][budget]`` holds what a grid point recorded (``score``,
    ``wall_seconds``, ``charged_units``, optionally ``test``); every trainer and seed must hold every
    budget of every configuration.

    Args:
        details: what every grid point recorded, as above.
        seeds: the training seeds.
        proxies: the cheap trainers audited.
        truth: the reference trainer.
        budgets: the proxy budgets audited.
        options: :class:`MeasureOptions` (the measures' and the verdict's).
        **keywords: fields of :class:`MeasureOptions` instead of ``options``.

    Returns:
        A JSON-ready dict: per proxy and budget the :func:`budget_table` measures and cost, the
        verdicts, the truth's best per seed and the truth against itself under the next seed.

    Example:
        >>> def grid(scores):  # each configuration scores the same at both budgets
        ...     return {index: {budget: {"score": score, "wall_seconds": 1.0, "charged_units": float(budget)}
        ...                     for budget in (10, 30)} for index, score in enumerate(scores)}
        >>> details = {(trainer, seed): grid([0.9, 0.5, 0.7]) for trainer in ("proxy", "truth") for seed in (0, 1)}
        >>> report = audit_measures(details, seeds=[0, 1], proxies=["proxy"], truth="truth", budgets=[10, 30],
        ...                         resamples=100)
        >>> report["truth_runs"]["0"]["best_index"], sorted(report["proxies"]["proxy"]["budgets"])
        (0, ['10', '30'])
        >>> report["proxies"]["proxy"]["budgets"]["10"]["tau"]["mean"]
        1.0
    """
    options = options_or_keywords("audit_measures", MeasureOptions, options, keywords)
    budgets = list(budgets)
    seeds = list(seeds)

    def scores(trainer: str, seed: int, budget: int) -> dict[int, float]:
        return {index: float(rungs[budget]["score"]) for index, rungs in sorted(details[(trainer, seed)].items())}

    truths = {seed: scores(truth, seed, budgets[-1]) for seed in seeds}
    report: dict[str, Any] = {"proxies": {}, "truth_runs": {}, "noise_floor": None}
    for seed in seeds:
        best = rank_order(truths[seed], options.mode)[0]
        record = details[(truth, seed)][best][budgets[-1]]
        report["truth_runs"][str(seed)] = {
            "best_index": best, "best_score": record["score"], "best_test": record.get("test"),
            "wall_seconds": sum(r[budgets[-1]]["wall_seconds"] for r in details[(truth, seed)].values())}
    for proxy in proxies:
        rows: dict[int, dict[str, Any]] = {}
        for budget in budgets:
            row = budget_table({s: scores(proxy, s, budget) for s in seeds}, truths, seeds, options=options)
            walls = [sum(r[budget]["wall_seconds"] for r in details[(proxy, s)].values()) for s in seeds]
            units = [sum(r[budget]["charged_units"] for r in details[(proxy, s)].values()) for s in seeds]
            row["wall_seconds"] = {"mean": statistics.fmean(walls), "per_seed": walls}
            row["charged_units"] = statistics.fmean(units)
            rows[budget] = row
        report["proxies"][proxy] = {
            "budgets": {str(b): row for b, row in rows.items()},
            "verdict": verdict(rows, keep_rate=options.keep_rate, regret_threshold=options.regret_threshold),
        }
    if len(seeds) >= 2:  # the truth against itself under the next training seed: how noisy full training is
        pairs = [(s, seeds[(k + 1) % len(seeds)]) for k, s in enumerate(seeds)]
        report["noise_floor"] = {"pairs": pairs, **budget_table(truths, truths, seeds, pairs=pairs, options=options)}
    return report


# A recorded pool ------------------------------------------------------------------------------------


def audit_pool(pool: RecordedPool, proxies: Sequence[str], truth: str | None = None, *,
               fraction: float = PROMOTED_FRACTION, resamples: int = 1000) -> dict[str, Any]:
    """The proxy audit of a recorded pool: the measures of ``eve-search audit`` (one training seed, the
    pool's), read from the pool instead of a results store, so that a recording still in progress (an
    exported prefix) can be audited while it goes on.

    A grid point's charged units are its budget (the pool records budgets, not charges; a trajectory
    pinned to a backward ratio is charged its budget to within one step). Everything else is what
    :func:`eve_search.experiments.audit.audit_report` gives for the store the pool came from.

    Args:
        pool: the recorded pool.
        proxies: the pool's trainers measured against the truth.
        truth: the reference trainer (default: the pool's referee), whose score at the last budget is
            the truth.
        fraction: the share a proxy must keep the true best in (default one third).
        resamples: bootstrap resamples of each interval.

    Returns:
        The report, shaped like :func:`~eve_search.experiments.audit.audit_report`'s.

    Raises:
        InputError: a proxy or the truth is not one of the pool's trainers.

    Example:
        >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
        >>> scores = [[0.5, 0.55], [0.7, 0.6], [0.6, 0.65], [0.65, 0.9]]
        >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1, 3),
        ...                     configs=[{"k": k} for k in range(4)], referee="adam",
        ...                     trainers={"adam": TrainerRecord(score=scores, test=scores, seconds=[[1.0, 3.0]] * 4)})
        >>> report = audit_pool(pool, ["adam"], resamples=50)
        >>> report["truth_runs"]["0"]["best_index"], report["proxies"]["adam"]["budgets"]["1"]["keep"]["kept"]
        (3, 1)
    """
    truth = pool.referee if truth is None else truth
    for role, name in [*(("proxies", p) for p in proxies), ("truth", truth)]:
        if name not in pool.trainers:
            raise InputError(f"Invalid {role}: {name!r} (expected a trainer the pool recorded: "
                             f"{', '.join(sorted(pool.trainers))})")
    scale = regret_scale(pool.metric)
    details = {}
    for trainer in dict.fromkeys([*proxies, truth]):
        record = pool.trainers[trainer]
        details[(trainer, pool.seed)] = {
            index: {budget: {"score": record.score[index][k], "wall_seconds": record.seconds[index][k],
                             "charged_units": float(budget), "test": {pool.metric: record.test[index][k]}}
                    for k, budget in enumerate(pool.budgets)}
            for index in range(pool.size)}
    budgets = list(pool.budgets)
    report = audit_header({"task": pool.task, "space": pool.space, "metric": pool.metric, "mode": pool.mode,
                           "configs": pool.size}, truth, budgets, fraction, [pool.seed])
    report.update(audit_measures(details, [pool.seed], list(proxies), truth, budgets, mode=pool.mode, scale=scale,
                                 fraction=fraction, resamples=resamples))
    for run in report["truth_runs"].values():
        run["best_config"] = pool.configs[run["best_index"]]
    for proxy in proxies:
        total = sum(row[-1] for row in pool.trainers[proxy].seconds)
        report["proxies"][proxy]["audit_wall_seconds"] = {"mean": total, "total": total}
    return report
