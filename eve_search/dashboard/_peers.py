"""The dashboard's view of ``searches/peers.py``: the same search through eve-search, Optuna, Ray Tune,
DEHB, Syne Tune and random search, every pick judged by one referee.

Data first (:func:`peers_section`, tested on plain records), drawing second (:func:`render_peers`).
A run is one study whose ``kind`` user attribute is ``"peer-run"``; the referee's cache is a
``"peer-run-referee"`` study. Both are in the documented format of
:mod:`eve_search.analysis.peer_records`. Per task, space and budget multiple, the section gives one row per tool over its search seeds (the referee's test accuracy of the
pick, mean ± sd; its validation accuracy; the pick's rank among the reference configurations; charged
units; wall and CPU seconds), the anytime curves (the referee's test accuracy of the best
configuration so far against wall seconds and against charged units, means over seeds at fixed shares
of the budget), and whether eve-search's synchronous SHA met the comparison's goal: within one
standard deviation of the best other tool's quality at no more than 0.6x its wall time (the other
tools: what a user would pick instead, not eve-search's own searches with another trainer or sampler).

Stored values are checked as they are read: a run whose attributes are not what the script writes is
left out and counted (``skipped``), never drawn from; every string is escaped when drawn.

Example:
    >>> run = {"kind": "peer-run", "status": "done", "task": "adult", "space": "hp", "tool": "random",
    ...        "seed": 0, "multiplier": 1, "budget_units": 100.0, "charged_units": 99.0, "wall_seconds": 2.0,
    ...        "cpu_seconds": 3.0, "referee": {"test": 0.85, "val": 0.86}, "rank": 3, "rank_of": 48,
    ...        "anytime": [{"fraction": 1.0, "wall": 2.0, "units": 99.0, "test": 0.85, "val": 0.86}]}
    >>> section = peers_section([{"name": "r", "directions": ["maximize"], "user_attrs": run, "trials": []}])
    >>> [(row["tool"], row["test_mean"], row["rank_mean"]) for row in section["groups"][0]["rows"]]
    [('random', 0.85, 3.0)]
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from eve_search._checks import finite_number
from eve_search.analysis.peer_records import REFEREE_KIND, RUN_KIND, read_referee_score, read_run
from eve_search.dashboard._svg import PALETTE, Point, Series, chart, esc

__all__ = ["REFEREE_KIND", "RUN_KIND", "TOOLS", "goal", "peers_section", "referee_section",
           "render_peers", "render_referee"]

VIEW = "peers"
REFEREE_VIEW = "peers-referee"
REFERENCE_TOOL = "eve-sha-eve"  # the search whose spend sets the budget, and whose goal is checked
GOAL_WALL_RATIO = 0.6
OWN_PREFIX = "eve-"  # eve-search's own searches; the goal compares against the other tools only

# Every tool of the comparison, in the order the tables list them, with what it is.
TOOLS: dict[str, str] = {
    "eve-sha-eve": "eve-search sync SHA, EvE",
    "eve-sha-adam": "eve-search sync SHA, Adam",
    "eve-run-sha-tpe": "eve-search run_sha + Optuna TPE, EvE",
    "eve-run-sha-tpe2": "eve-search run_sha + TPE, 2 cohorts, EvE",
    "optuna-tpe-sh": "Optuna TPE + SuccessiveHalvingPruner",
    "optuna-tpe-hb": "Optuna TPE + HyperbandPruner",
    "ray-asha": "Ray Tune ASHAScheduler",
    "ray-hyperband": "Ray Tune HyperBandScheduler",
    "dehb": "DEHB",
    "synetune-asha": "Syne Tune ASHA",
    "synetune-bohb": "Syne Tune BOHB",
    "random": "random search, full budget",
}


# The packages whose versions say what ran, per tool (the rest of the stack is the same for all).
PACKAGES: dict[str, tuple[str, ...]] = {
    "eve-sha-eve": ("eve-search",), "eve-sha-adam": ("eve-search",), "eve-run-sha-tpe": ("eve-search", "optuna"),
    "eve-run-sha-tpe2": ("eve-search", "optuna"),
    "optuna-tpe-sh": ("optuna",), "optuna-tpe-hb": ("optuna",), "ray-asha": ("ray",), "ray-hyperband": ("ray",),
    "dehb": ("dehb", "ConfigSpace", "numpy"), "synetune-asha": ("syne-tune",), "synetune-bohb": ("syne-tune",),
    "random": ("eve-search",),
}


def _mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _run(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """A run's attributes as the section uses them, or None when they are not a finished run in the
    documented format (:mod:`eve_search.analysis.peer_records`)."""
    run = read_run(attrs)
    if run is None:
        return None
    setup = ", ".join(part for part in (
        f"{run.configs} configurations" if run.configs is not None else "",
        f"at most {run.max_units} units each" if run.max_units is not None else "",
        f"{run.cpus} CPU(s) per search" if run.cpus is not None else "") if part)
    return {"task": run.task, "space": run.space, "tool": run.tool, "seed": run.seed,
            "multiplier": run.multiplier, "charged_units": run.charged_units, "wall_seconds": run.wall_seconds,
            "cpu_seconds": run.cpu_seconds, "budget_units": run.budget_units, "test": run.test, "val": run.val,
            "setup": setup, "signature": run.signature, "rank": run.rank, "rank_of": run.rank_of,
            "anytime": [vars(p) for p in run.anytime], "versions": dict(run.versions), "note": run.note}


def _row(tool: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    tests = [r["test"] for r in runs if r["test"] is not None]
    vals = [r["val"] for r in runs if r["val"] is not None]
    ranks = [r["rank"] for r in runs if r["rank"] is not None]
    walls = [r["wall_seconds"] for r in runs]
    cpus = [r["cpu_seconds"] for r in runs if r["cpu_seconds"] is not None]
    test_mean, test_sd = _mean_sd(tests)
    val_mean, val_sd = _mean_sd(vals)
    wall_mean, wall_sd = _mean_sd(walls)
    cpu_mean, cpu_sd = _mean_sd(cpus)
    wanted = PACKAGES.get(tool, ())
    versions = sorted({f"{k} {v}" for r in runs for k, v in r["versions"].items() if k in wanted or k == "torch"})
    return {"tool": tool, "label": TOOLS.get(tool, tool), "seeds": sorted(r["seed"] for r in runs),
            "judged": len(tests), "test_mean": test_mean, "test_sd": test_sd, "val_mean": val_mean, "val_sd": val_sd,
            "rank_mean": statistics.fmean(ranks) if ranks else None, "ranks": sorted(ranks),
            "rank_of": next((r["rank_of"] for r in runs if r["rank_of"] is not None), None),
            "units_mean": statistics.fmean(r["charged_units"] for r in runs),
            "budget_mean": statistics.fmean(b) if (b := [r["budget_units"] for r in runs
                                                        if r["budget_units"] is not None]) else None,
            "wall_mean": wall_mean, "wall_sd": wall_sd, "cpu_mean": cpu_mean, "cpu_sd": cpu_sd,
            "versions": versions, "notes": sorted({r["note"] for r in runs if r["note"]})}


def _curve(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Means over the seeds at each share of the budget (the points every run recorded)."""
    shares = sorted({p["fraction"] for r in runs for p in r["anytime"]})
    points = []
    for share in shares:
        at = [p for r in runs for p in r["anytime"] if p["fraction"] == share]
        wall, wall_sd = _mean_sd([p["wall"] for p in at])
        units, _ = _mean_sd([p["units"] for p in at])
        test, test_sd = _mean_sd([p["test"] for p in at])
        points.append({"fraction": share, "wall": wall, "wall_sd": wall_sd, "units": units, "test": test,
                       "test_sd": test_sd, "n": len(at)})
    return points


def goal(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Did eve-search's sync SHA (EvE) pick within one sd of the best tool's quality at <= 0.6x its wall time?

    The best tool is the one with the highest mean referee test accuracy among the other tools, what a
    user would pick instead of eve-search (eve-search's own searches with another trainer or sampler are
    not among them); its standard deviation over seeds is the tolerance (unknown with one seed: then only
    the means are compared).
    """
    ours = next((r for r in rows if r["tool"] == REFERENCE_TOOL and r["test_mean"] is not None), None)
    others = [r for r in rows if not r["tool"].startswith(OWN_PREFIX) and r["test_mean"] is not None]
    if ours is None or not others:
        return None
    best = max(others, key=lambda r: r["test_mean"])
    gap = best["test_mean"] - ours["test_mean"]
    tolerance = best["test_sd"] or 0.0
    within = gap <= tolerance
    ratio = ours["wall_mean"] / best["wall_mean"] if best["wall_mean"] else None
    fast = ratio is not None and ratio <= GOAL_WALL_RATIO
    return {"best": best["tool"], "best_label": best["label"], "gap": gap, "tolerance": tolerance,
            "within": within, "wall_ratio": ratio, "fast": fast, "met": within and fast,
            "seeds": min(len(ours["seeds"]), len(best["seeds"]))}


def peers_section(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The dashboard section of every ``peer-run`` study record (a ``register_kind`` collector)."""
    groups: dict[tuple[str, str, float, str, str], dict[str, list[dict[str, Any]]]] = {}
    skipped = 0
    for record in records:
        run = _run(record.get("user_attrs", {}))
        if run is None:
            skipped += 1
            continue
        key = (run["task"], run["space"], run["multiplier"], run["setup"], run["signature"])
        groups.setdefault(key, {}).setdefault(run["tool"], []).append(run)
    order = list(TOOLS)
    out = []
    for (task, space, multiplier, setup, _), tools in sorted(groups.items()):
        names = sorted(tools, key=lambda t: (order.index(t) if t in order else len(order), t))
        rows = [_row(tool, tools[tool]) for tool in names]
        rows.sort(key=lambda r: (r["test_mean"] is None, -(r["test_mean"] or 0.0)))
        out.append({"task": task, "space": space, "multiplier": multiplier, "setup": setup, "rows": rows,
                    "anytime": [{"tool": t, "label": TOOLS.get(t, t), "points": _curve(tools[t])} for t in names],
                    "goal": goal(rows)})
    return {"title": "Against other search tools (searches/peers.py)", "view": VIEW, "groups": out,
            "skipped": skipped}


def referee_section(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The referee's cache: per space, every configuration scored, mean over its referee seeds."""
    spaces = []
    for record in sorted(records, key=lambda r: str(r.get("name", ""))):
        attrs = record.get("user_attrs", {})
        by_key: dict[str, dict[str, Any]] = {}
        for trial in record.get("trials", []):
            score = read_referee_score(trial.get("user_attrs", {}))
            if score is None:
                continue
            entry = by_key.setdefault(score.config_key, {"config": score.config_key, "val": [], "test": []})
            entry["val"].append(score.val)
            entry["test"].append(score.test)
        rows = [{"config": e["config"], "seeds": len(e["test"]), "val": statistics.fmean(e["val"]),
                 "test": statistics.fmean(e["test"])} for e in by_key.values()]
        rows.sort(key=lambda r: -r["test"])
        spaces.append({"name": str(record.get("name", "")), "space": str(attrs.get("space", "")),
                       "task": str(attrs.get("task", "")), "rows": rows})
    return {"title": "Referee scores (cache of searches/peers.py)", "view": REFEREE_VIEW, "spaces": spaces}


# Drawing -------------------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 4) -> str:
    number = finite_number(value)
    if number is None:
        return "–"
    if abs(number) >= 1000:
        return f"{number:,.0f}"
    if abs(number) >= 100:
        return f"{number:.1f}"
    return f"{number:.{digits}g}"


_BARS = "mean ± sd over search seeds; an accuracy's bar is cut at 0 and 1"


def _accuracy_bar(mean: Any, sd: Any) -> tuple[float, float] | None:
    """The bar of an accuracy's mean ± sd, cut to [0, 1] (an accuracy has no values outside it).

    Example:
        >>> _accuracy_bar(0.8, 0.3)
        (0.5, 1.0)
        >>> _accuracy_bar(0.8, None) is None
        True
    """
    if finite_number(mean) is None or finite_number(sd) is None or not sd:
        return None
    return max(0.0, mean - sd), min(1.0, mean + sd)


def _pm(mean: Any, sd: Any, digits: int = 4) -> str:
    if finite_number(mean) is None:
        return "–"
    return f"{_fmt(mean, digits)} ± {_fmt(sd, 2)}" if finite_number(sd) is not None else _fmt(mean, digits)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-") or "x"


def goal_text(group: Mapping[str, Any]) -> str:
    g = group.get("goal")
    if not g:
        return f"Goal not checked: {REFERENCE_TOOL} or every other tool has no judged pick yet."
    ratio = "unknown" if g["wall_ratio"] is None else f"{g['wall_ratio']:.2f}x"
    quality = (f"{'within' if g['within'] else 'not within'} one sd of the best other tool ({g['best_label']}; "
               f"referee test accuracy {-g['gap'] * 100:+.2f} points against it, its sd {g['tolerance'] * 100:.2f} "
               "points)")
    return (f"Goal {'met' if g['met'] else 'not met'}: eve-search sync SHA (EvE) is {quality}, at {ratio} its "
            f"wall time (goal: at most {GOAL_WALL_RATIO}x); {g['seeds']} seed(s).")


def _table(group: Mapping[str, Any], table_id: str) -> str:
    head = ("tool", "seeds", "referee test acc of the pick", "referee val acc", "rank of the pick",
            "charged units", "budget units", "wall s", "CPU s", "versions")
    rows = []
    for r in group["rows"]:
        rank = "–" if r["rank_mean"] is None else f"{r['rank_mean']:.1f} of {r['rank_of']}" if r["rank_of"] else \
            f"{r['rank_mean']:.1f}"
        cells = [(r["label"], None), (len(r["seeds"]), len(r["seeds"])), (_pm(r["test_mean"], r["test_sd"]), r["test_mean"]),
                 (_pm(r["val_mean"], r["val_sd"]), r["val_mean"]), (rank, r["rank_mean"]),
                 (_fmt(r["units_mean"]), r["units_mean"]), (_fmt(r["budget_mean"]), r["budget_mean"]),
                 (_pm(r["wall_mean"], r["wall_sd"], 3), r["wall_mean"]), (_pm(r["cpu_mean"], r["cpu_sd"], 3), r["cpu_mean"]),
                 ("; ".join(r["versions"]) or "–", None)]
        rows.append("<tr>" + "".join(
            f'<td class="num" data-value="{esc(repr(float(v)))}">{esc(text)}</td>' if finite_number(v) is not None else
            f"<td>{esc(text)}</td>" for text, v in cells) + "</tr>")
    notes = sorted({f"{r['label']}: {n}" for r in group["rows"] for n in r["notes"]})
    caption = "Quality against cost per tool (means over search seeds, ± sd)"
    return (f'<div class="table-wrap"><table class="sortable peers" id="{esc(table_id)}"><caption>{esc(caption)}</caption>'
            "<thead><tr>" + "".join(f'<th scope="col" data-numeric="{0 if h in ("tool", "versions") else 1}">'
                                    f"{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>"
            + (f'<p class="note">Picks: {esc(" · ".join(notes))}</p>' if notes else ""))


def render_peers(section: Mapping[str, Any]) -> str:
    """HTML of the peers section: per task, space and budget multiple a goal line, the quality-cost chart,
    the two anytime charts and the table."""
    parts = [f'<section class="kind" id="kind-peers"><h2>{esc(section.get("title", "Peers"))}</h2>'
             '<p class="note">One search problem through each tool; every pick (the configuration the tool '
             "returns) is trained with Adam to the full per-configuration budget on the referee's seeds, and its "
             "mean test accuracy there is its quality. Anytime curves: the referee's test accuracy of the best "
             "configuration so far (furthest trained, then best reported score; the pick at the end), means over "
             "search seeds at fixed shares of the budget.</p>"]
    if section.get("skipped"):
        parts.append(f'<p class="empty">{esc(section["skipped"])} stored run(s) left out: their attributes are not '
                     "what searches/peers.py writes.</p>")
    for number, group in enumerate(section.get("groups", [])):
        anchor = f"peers-{number}-{_slug(group['task'])}-{_slug(group['space'])}-x{_slug(format(group['multiplier'], 'g'))}"
        budget = next((r["budget_mean"] for r in group["rows"] if r["tool"] != REFERENCE_TOOL and r["budget_mean"]), None)
        title = (f"{group['task']} / {group['space']} space, {format(group['multiplier'], 'g')}x budget"
                 + (f" ({_fmt(budget)} charged units per search)" if budget else "")
                 + (f"; {group['setup']}" if group.get("setup") else ""))
        parts.append(f'<h3 id="{esc(anchor)}">{esc(title)}</h3><p class="goal">{esc(goal_text(group))}</p>')
        colors = {row["tool"]: PALETTE[k % len(PALETTE)] for k, row in enumerate(group["rows"])}
        cost = [Series(r["label"], [Point(r["wall_mean"], r["test_mean"], r["wall_sd"], None,
                                          f"{r['label']}: {_pm(r['wall_mean'], r['wall_sd'], 3)} s, test "
                                          f"{_pm(r['test_mean'], r['test_sd'])}",
                                          y_range=_accuracy_bar(r["test_mean"], r["test_sd"]))],
                       color=colors[r["tool"]], marker="diamond" if r["tool"].startswith("eve-") else "circle")
                for r in group["rows"] if finite_number(r["test_mean"]) is not None and finite_number(r["wall_mean"])]
        curves = {}
        for x_key, x_label in (("wall", "wall seconds (log scale)"), ("units", "charged units")):
            curves[x_key] = [Series(c["label"], [Point(p[x_key], p["test"], None, None,
                                                       f"{c['label']}: {p['fraction']:.0%} of the budget, "
                                                       f"{_fmt(p[x_key])} {'s' if x_key == 'wall' else 'units'}, "
                                                       f"test {_pm(p['test'], p['test_sd'])}",
                                                       y_range=_accuracy_bar(p["test"], p["test_sd"]))
                                                 for p in c["points"] if finite_number(p[x_key]) and finite_number(p["test"])],
                                    color=colors.get(c["tool"], PALETTE[0]), lines=True)
                             for c in group["anytime"]]
        parts.append('<div class="charts">')
        parts.append(chart(cost, title="Referee test accuracy of the pick against search wall time",
                           x_label="wall seconds (log scale)", y_label="referee test accuracy", x_log=True,
                           chart_id=f"{anchor}-cost", note=_BARS))
        parts.append(chart(curves["wall"], title="Anytime: best so far against wall seconds",
                           x_label="wall seconds (log scale)", y_label="referee test accuracy", x_log=True,
                           chart_id=f"{anchor}-anytime-wall", note=_BARS))
        parts.append(chart(curves["units"], title="Anytime: best so far against charged units",
                           x_label="charged units", y_label="referee test accuracy",
                           chart_id=f"{anchor}-anytime-units", note=_BARS))
        parts.append("</div>")
        parts.append(_table(group, f"{anchor}-table"))
    if not section.get("groups"):
        parts.append('<p class="empty">No finished peer run in this store yet.</p>')
    parts.append("</section>")
    return "".join(parts)


def render_referee(section: Mapping[str, Any]) -> str:
    parts = [f'<section class="kind" id="kind-peers-referee"><h2>{esc(section.get("title", "Referee"))}</h2>']
    for space in section.get("spaces", []):
        rows = "".join(f"<tr><td>{esc(r['config'])}</td><td class=\"num\">{esc(r['seeds'])}</td>"
                       f"<td class=\"num\">{esc(_fmt(r['val']))}</td><td class=\"num\">{esc(_fmt(r['test']))}</td></tr>"
                       for r in space["rows"])
        parts.append(f"<details><summary>{esc(space['task'])} / {esc(space['space'])}: {len(space['rows'])} "
                     f"configurations ({esc(space['name'])})</summary><table class=\"sortable\"><thead><tr>"
                     "<th>configuration</th><th>seeds</th><th>val acc</th><th>test acc</th></tr></thead>"
                     f"<tbody>{rows}</tbody></table></details>")
    parts.append("</section>")
    return "".join(parts)
