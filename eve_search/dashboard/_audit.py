"""The dashboard's section for proxy audits: tau-b and top-1 regret against wall seconds, per proxy.

A built-in section of the dashboard (:mod:`eve_search.dashboard._data` and ``_render`` list it): studies
whose ``kind`` is ``"audit"`` are grouped by (task, space), the seeds whose runs all finished are
measured with :func:`~eve_search.analysis.audit.audit_measures`, and each group is drawn as two charts and
a verdict table. Recorded pools (``eve-search dashboard --pool``) are drawn the same way
(:func:`pool_audit_section`). Every string shown is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from eve_search.analysis.audit import (
    KEEP_RATE,
    REGRET_THRESHOLD,
    audit_measures,
    audit_pool,
    regret_scale,
    regret_unit,
)
from eve_search.engine.pool import RecordedPool

__all__ = ["audit_section", "pool_audit_section", "render_audit_section"]

VIEW = "audit"
DEFAULT_TRUTH = "adam"
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")
FINISHED = ("COMPLETE", "PRUNED", "FAIL")


def _group(records: list[Mapping[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(task, space, budgets) -> {"runs": {(trainer, seed): details}, "finished": {...}, "truth", ...}."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in records:
        attrs = record["user_attrs"]
        settings = attrs.get("settings")
        if not isinstance(settings, Mapping):
            continue
        try:
            task, space, trainer = str(settings["task"]), str(settings["space"]), str(settings["optimizer"])
            seed, budgets = int(settings["seed"]), [int(b) for b in settings["budgets"]]
        except (KeyError, TypeError, ValueError):
            continue
        group = groups.setdefault((task, space, ",".join(map(str, budgets))), {
            "task": task, "space": space, "budgets": budgets, "mode": str(settings.get("mode", "max")),
            "metric": str(settings.get("metric", "accuracy")), "runs": {}, "complete": {}, "configs": 0,
            "truths": set()})
        details: dict[int, dict[int, dict[str, Any]]] = {}
        finished = 0
        for trial in record["trials"]:
            index = trial["user_attrs"].get("config_index")
            if not isinstance(index, int):
                continue
            details[index] = {v["budget"]: v for k, v in trial["user_attrs"].items()
                              if k.startswith("rung_") and isinstance(v, Mapping)
                              and isinstance(v.get("budget"), int) and not isinstance(v["budget"], bool)}
            finished += trial["state"] in FINISHED and set(details[index]) >= set(budgets)
        group["runs"][(trainer, seed)] = details
        expected = settings.get("configs")
        group["complete"][(trainer, seed)] = bool(details) and finished == (expected if isinstance(expected, int)
                                                                          else len(details))
        group["configs"] = max(group["configs"], len(details))
        if isinstance(attrs.get("truth"), str):
            group["truths"].add(attrs["truth"])
    return groups


def _audit_of(group: dict[str, Any]) -> dict[str, Any]:
    trainers = sorted({trainer for trainer, _ in group["runs"]})
    truth = next(iter(sorted(group["truths"])), DEFAULT_TRUTH) if len(group["truths"]) == 1 else DEFAULT_TRUTH
    entry = {"task": group["task"], "space": group["space"], "budgets": group["budgets"], "truth": truth,
             "trainers": trainers, "seeds": [], "proxies": {}, "noise_floor": None,
             "regret_unit": regret_unit(group["metric"])}
    if truth not in trainers:
        entry["note"] = f"no runs of the truth trainer {truth}"
        return entry
    seeds = sorted({seed for _, seed in group["runs"]})
    complete = [s for s in seeds if all(group["complete"].get((t, s)) for t in trainers)]
    entry["seeds"] = complete
    if not complete:
        entry["note"] = "no seed has finished every run yet"
        return entry
    scale = regret_scale(group["metric"])
    measures = audit_measures(group["runs"], complete, trainers, truth, group["budgets"], mode=group["mode"],
                              scale=scale, resamples=200)
    entry.update(proxies=measures["proxies"], noise_floor=measures["noise_floor"])
    return entry


def audit_section(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The dashboard section of every audit study record (a :func:`eve_search.dashboard.register_kind`
    collector)."""
    audits = [_audit_of(group) for _, group in sorted(_group(records).items())]
    return {"title": "Proxy audits", "view": VIEW, "audits": audits}


def pool_audit_section(pools: Sequence[RecordedPool], *, resamples: int = 200) -> dict[str, Any]:
    """The dashboard section of recorded pools: every trainer of each pool against its referee at the
    last budget (:func:`eve_search.analysis.audit.audit_pool`), drawn as the store's audits are.

    Args:
        pools: the recorded pools (see :func:`eve_search.engine.pool.load_pool`).
        resamples: bootstrap resamples of each interval.

    Returns:
        The section: ``title``, ``view`` (``"audit"``), ``source`` (``"pools"``) and one ``audits`` entry
        per pool.

    Example:
        >>> from eve_search.engine import pool as pools
        >>> curves = [[0.2, 0.3], [0.4, 0.8], [0.1, 0.2]]  # three learning rates, at 10 and 30 units
        >>> adam = pools.TrainerRecord(score=curves, test=curves, seconds=[[2.0, 6.0]] * 3)
        >>> lrs = pools.RecordedPool(task="demo", space="lr", metric="accuracy", mode="max", budgets=(10, 30),
        ...                          configs=[{"lr": 1e-3}, {"lr": 1e-2}, {"lr": 1e-1}], referee="adam",
        ...                          trainers={"adam": adam})
        >>> (audit,) = pool_audit_section([lrs], resamples=20)["audits"]
        >>> audit["space"], audit["trainers"], audit["proxies"]["adam"]["budgets"]["10"]["tau"]["mean"]
        ('lr', ['adam'], 1.0)
    """
    audits = []
    for pool in pools:
        trainers = sorted(pool.trainers)
        report = audit_pool(pool, trainers, resamples=resamples)
        entry = {key: report[key] for key in ("task", "space", "budgets", "truth", "seeds", "proxies", "noise_floor",
                                              "regret_unit")}
        audits.append({**entry, "trainers": trainers, "configs": pool.size})
    return {"title": "Proxy audits of recorded pools", "view": VIEW, "source": "pools", "audits": audits}


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: Any, digits: int) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return f"{number:.{digits}f}" if math.isfinite(number) else "-"


def _points(rows: Mapping[str, Any], measure: str) -> list[Any]:
    from eve_search.dashboard._svg import Point

    points = []
    for budget, row in rows.items():
        x = row["wall_seconds"]["mean"]
        y = row[measure]["mean"]
        low, high = row[measure]["interval"]
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in (x, y, low, high)) and x > 0:
            points.append(Point(x, y, y_range=(min(low, y), max(high, y)), label=f"{budget} units"))
    return points


def render_audit_section(section: Mapping[str, Any]) -> str:
    """HTML of the audit section: per (task, space), tau-b and regret against wall seconds, verdicts."""
    from eve_search.dashboard._svg import Series, chart

    prefix = "pool-audit" if section.get("source") == "pools" else "audit"
    parts = [f'<section id="kind-{prefix}"><h2>{_esc(section.get("title", "Proxy audits"))}</h2>'
             + '<p class="note">Each proxy trained every configuration once along one trajectory; at each budget its '
             "ranking is compared with the truth (the reference trainer at the last budget), paired by training "
             "seed. Points: budgets of the grid, at the wall seconds the proxy spent over all configurations "
             "(mean over seeds); bars: 95% bootstrap intervals over configurations.</p>"]
    for audit in section.get("audits", []):
        title = (f"{audit['task']} / {audit['space']}: truth = {audit['truth']} at {audit['budgets'][-1]} units, "
                 f"seeds {','.join(map(str, audit['seeds'])) or 'none finished'}")
        parts.append(f"<h3>{_esc(title)}</h3>")
        if audit.get("note"):
            parts.append(f'<p class="empty">{_esc(audit["note"])}</p>')
            continue
        series = {measure: [Series(name, _points(entry["budgets"], measure), color=COLORS[k % len(COLORS)],
                                   lines=True) for k, (name, entry) in enumerate(audit["proxies"].items())]
                  for measure in ("tau", "regret")}
        parts.append('<div class="charts">')
        parts.append(chart(series["tau"], title="Kendall tau-b against the truth", x_label="wall seconds (log)",
                           y_label="tau-b", x_log=True, chart_id=f"{prefix}-tau-{audit['task']}-{audit['space']}"))
        parts.append(chart(series["regret"], title="Top-1 regret", x_label="wall seconds (log)",
                           y_label=f"regret ({audit['regret_unit']})", x_log=True,
                           chart_id=f"{prefix}-regret-{audit['task']}-{audit['space']}"))
        parts.append("</div>")
        rows = []
        for name, entry in audit["proxies"].items():
            verdict = entry["verdict"]

            def said(found: Mapping[str, Any] | None) -> str:
                return "none of the grid" if not found else \
                    f"{found['budget']} units ({_number(found['wall_seconds'], 1)} s)"

            rows.append(f"<tr><td>{_esc(name)}</td><td>{_esc(said(verdict['keeps_best']))}</td>"
                        f"<td>{_esc(said(verdict['regret_under']))}</td><td>{_esc(said(verdict['both']))}</td></tr>")
        floor = audit.get("noise_floor")
        caption = (f"Cheapest budget at which the true best is in the top third in at least {KEEP_RATE:.0%} of "
                   f"seeds, and at which the mean top-1 regret is under {REGRET_THRESHOLD:g} {audit['regret_unit']}")
        if floor:
            caption += (f"; {audit['truth']} against itself under the next seed: tau-b "
                        f"{_number(floor['tau']['mean'], 3)}, regret {_number(floor['regret']['mean'], 2)}")
        parts.append(f'<table class="audit-verdicts"><caption>{_esc(caption)}</caption><thead><tr><th>proxy</th>'
                     "<th>keeps the true best</th><th>regret small</th><th>both</th></tr></thead><tbody>"
                     + "".join(rows) + "</tbody></table>")
    parts.append("</section>")
    return "".join(parts)
