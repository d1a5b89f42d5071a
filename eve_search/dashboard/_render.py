"""The dashboard page: one self-contained HTML file drawn from a dashboard document.

Charts are inline SVG drawn in Python (:mod:`eve_search.dashboard._svg`), the page's style and its
small script are embedded from the package's ``assets/`` folder, and the document itself is
embedded as JSON; nothing is fetched from elsewhere, so the page opens offline. Every string from
the store is escaped for HTML, and the embedded JSON escapes ``<``, ``>`` and ``&`` so that no
value can close its ``<script>`` element. A Content-Security-Policy allows only the page's own
script and style (by hash) as a second line of defence.

Example:
    >>> from eve_search.dashboard._data import build
    >>> page = render_page(build([]))
    >>> page.startswith("<!DOCTYPE html>"), "The store holds no studies" in page
    (True, True)
    >>> script_json({"name": "</script><b>"})
    '{"name": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"}'
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import string
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from importlib import resources
from typing import Any

from eve_search._checks import InputError
from eve_search.dashboard._svg import PALETTE, Point, Series, chart, color_for, esc

__all__ = ["asset", "register_view", "render_page", "script_json"]

View = Callable[[Mapping[str, Any]], str]


def _audit_view(section: Mapping[str, Any]) -> str:
    from eve_search.dashboard._audit import render_audit_section

    return render_audit_section(section)


def _peers_view(section: Mapping[str, Any]) -> str:
    from eve_search.dashboard._peers import render_peers

    return render_peers(section)


def _peers_referee_view(section: Mapping[str, Any]) -> str:
    from eve_search.dashboard._peers import render_referee

    return render_referee(section)


_VIEWS: dict[str, View] = {"audit": _audit_view, "peers": _peers_view,
                           "peers-referee": _peers_referee_view}  # built in; register_view adds more


def register_view(view: str, render: View) -> None:
    """Draw sections whose ``"view"`` is ``view`` with ``render(section) -> HTML``.

    ``render`` must escape every string it takes from the section (use :func:`esc`); charts come
    from :func:`eve_search.dashboard.chart`.

    Args:
        view: the sections' ``"view"`` value (not the built-in ``"sha-sweeps"`` or ``"trials"``).
        render: draws one section as HTML.

    Raises:
        InputError: ``view`` is built in.

    Example:
        >>> from eve_search.dashboard import esc
        >>> register_view("doctest-note", lambda section: f"<section><p>{esc(section['text'])}</p></section>")
        >>> data = {"sections": [{"title": "Note", "view": "doctest-note", "text": "a < b"}],
        ...         "configurations": {"rows": []}, "storage": None, "studies": 0, "sweeps": 0}
        >>> "<p>a &lt; b</p>" in render_page(data)
        True
    """
    if view in ("sha-sweeps", "trials"):
        raise InputError(f"Invalid view: {view!r} (built in)")
    _VIEWS[view] = render


def asset(name: str) -> str:
    """The text of one of the dashboard's files (page template, style, script), from the package."""
    return resources.files("eve_search.dashboard").joinpath("assets", name).read_text(encoding="utf-8")


def script_json(value: Any) -> str:
    """JSON that is safe inside an HTML ``<script>`` element (no ``<``, ``>``, ``&`` or line separators).

    Args:
        value: a JSON-able value (NaN and infinities are refused).

    Returns:
        Its JSON text, keys sorted, those characters written as JSON unicode escapes.

    Example:
        >>> import json
        >>> text = script_json({"name": "</script>"})
        >>> "<" in text, json.loads(text)
        (False, {'name': '</script>'})
    """
    text = json.dumps(value, sort_keys=True, allow_nan=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                          ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


# Formatting ------------------------------------------------------------------------------------------


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if not math.isfinite(value):
        return "–"
    if value != 0 and (abs(value) < 1e-4 or abs(value) >= 1e6):
        return f"{value:.3e}"
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.{digits}g}"


def _budget(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else "–"


def _pm(mean: Any, std: Any, digits: int = 4) -> str:
    if mean is None:
        return "–"
    return f"{_num(mean, digits)} ± {_num(std, 2)}" if std is not None else _num(mean, digits)


def _cell(value: Any, numeric: bool) -> str:
    if numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num" data-value="{esc(repr(float(value)))}">{esc(_num(value))}</td>'
    return f"<td>{esc('–' if value is None else value)}</td>"


def _table(table_id: str, columns: list[Mapping[str, Any]], rows: list[list[Any]], *, caption: str = "") -> str:
    head = "".join(f'<th scope="col" data-numeric="{1 if c["numeric"] else 0}">{esc(c["label"])}</th>' for c in columns)
    body = "".join("<tr>" + "".join(_cell(v, bool(c["numeric"])) for v, c in zip(row, columns, strict=False))
                   + "</tr>" for row in rows)
    return (f'<div class="filter"><input type="search" class="table-filter" id="{esc(table_id)}-filter" '
            f'data-table="{esc(table_id)}" data-counter="{esc(table_id)}-count" '
            f'placeholder="filter rows (all words must match)" aria-label="filter {esc(caption or table_id)}">'
            f'<span id="{esc(table_id)}-count"></span></div>'
            f'<div class="table-wrap"><table class="sortable" id="{esc(table_id)}">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def _slug(text: str) -> str:
    cleaned = "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")
    return cleaned or "section"


def _metric_label(metric: str) -> str:
    return f"best validation {metric} found"


# Successive-halving sweeps ----------------------------------------------------------------------------


def _time_vs_best_html(section: Mapping[str, Any], anchor: str) -> str:
    panels = section["time_vs_best"]
    if not panels:
        return ""
    charts, tables = [], []
    for panel in panels:
        metric = panel["ours"][0]["metric"]
        series = []
        for row in panel["ours"]:
            label = (f"{row['optimizer']} (ours, seeds {row['seeds']}): {_pm(row['wall_seconds'], row['wall_seconds_std'], 3)}"
                     f" s, {_pm(row['best'], row['best_std'])}" + (f", {row['running']} running" if row["running"] else ""))
            series.append(Series(f"{row['optimizer']} (ours)", [Point(row["wall_seconds"], row["best"],
                                                                      row["wall_seconds_std"], row["best_std"], label)],
                                 color=color_for(row["optimizer"]), tags={"source": "ours"}))
        for row in panel["paper"]:
            label = (f"{row['optimizer']} (paper, 5 seeds, GPU): {_pm(row['wall_seconds'], row['wall_seconds_std'], 3)} s, "
                     f"{_pm(row['best'], row['best_std'])}")
            series.append(Series(f"{row['optimizer']} (paper)", [Point(row["wall_seconds"], row["best"],
                                                                       row["wall_seconds_std"], row["best_std"], label)],
                                 color=color_for(row["optimizer"]), marker="diamond", hollow=True,
                                 tags={"source": "paper"}))
        charts.append(chart(series, title=f"{section['title']}, space {panel['space']}: sweep wall time against "
                                          f"{_metric_label(metric)}",
                            x_label="sweep wall time (s, log scale)", y_label=_metric_label(metric), x_log=True,
                            chart_id=f"{anchor}-time-{_slug(panel['space'])}",
                            note="mean ± std over training seeds; filled: this store; hollow diamonds: the paper "
                                 "(5 seeds, on a GPU), so compare ratios rather than seconds" if panel["paper"] else
                                 "mean ± std over training seeds"))
        paper = {row["optimizer"]: row for row in panel["paper"]}
        names = [row["optimizer"] for row in panel["ours"]] + [n for n in paper if n not in
                                                               {r["optimizer"] for r in panel["ours"]}]
        ours = {row["optimizer"]: row for row in panel["ours"]}
        rows = []
        for name in names:
            o, p = ours.get(name), paper.get(name)
            rows.append("<tr>" + f"<td>{esc(name)}</td>"
                        + (f'<td class="num">{esc(len(o["seeds"]))}</td>'
                           f'<td class="num">{esc(_pm(o["wall_seconds"], o["wall_seconds_std"], 3))}</td>'
                           f'<td class="num">{esc(_pm(o["best"], o["best_std"]))}</td>' if o else
                           "<td>–</td><td>–</td><td>–</td>")
                        + (f'<td class="num">{esc(_pm(p["wall_seconds"], p["wall_seconds_std"], 3))}</td>'
                           f'<td class="num">{esc(_pm(p["best"], p["best_std"]))}</td>' if p else
                           "<td>–</td><td>–</td>") + "</tr>")
        tables.append(f'<table class="summary" data-space="{esc(panel["space"])}"><caption>space '
                      f'{esc(panel["space"])}: {esc(_metric_label(metric))}</caption><thead><tr><th>optimizer</th><th>seeds</th>'
                      "<th>wall s (ours)</th><th>best (ours)</th><th>wall s (paper)</th><th>best (paper)</th></tr>"
                      f'</thead><tbody>{"".join(rows)}</tbody></table>')
    blocks = "".join(c + t for c, t in zip(charts, tables, strict=True))
    return f'<h3 id="{anchor}-time">Sweep time against best score found</h3><div class="charts">{blocks}</div>'



def _ranking_html(section: Mapping[str, Any], anchor: str) -> str:
    panels = section["ranking"]
    if not panels:
        return ""
    out = [(f'<h3 id="{anchor}-ranking">Ranking agreement: does EvE order configurations as Adam does?</h3>'
            '<p class="note">Kendall tau-b between the two trainers\' validation scores of the same configurations, '
            "paired by training seed (mean ± std over pairs, 95% bootstrap interval of the mean, configurations "
            "shared by the pair), at every rung; the paper reports the first rung over 48 configurations.</p>")]
    for panel in panels:
        budgets = sorted({r["budget"] for row in panel["comparisons"] for r in row["per_rung"]})
        head = "".join(f"<th>rung {esc(_budget(b))}</th>" for b in budgets)
        body = []
        for row in panel["comparisons"]:
            cells = {r["budget"]: r for r in row["per_rung"]}
            tds = []
            for b in budgets:
                r = cells.get(b)
                if r is None or r["mean"] is None:
                    tds.append("<td>–</td>")
                elif min(r["configurations"]) < 5:
                    # SHA keeps few configurations at late rungs: a tau over fewer than five says nothing.
                    tds.append(f'<td class="num" title="too few shared configurations for a tau">– '
                               f'(n={esc(min(r["configurations"]))})</td>')
                else:
                    low, high = r["interval"]
                    interval = f" [{_num(low, 3)}, {_num(high, 3)}]" if low is not None and high is not None else ""
                    tds.append(f'<td class="num">{esc(_pm(r["mean"], r["std"], 3))}{esc(interval)} '
                               f'(n={esc(min(r["configurations"]))})</td>')
            paper = row["paper_first_rung"]
            body.append(f"<tr><td>{esc(row['label'])}</td>{''.join(tds)}<td class=\"num\">"
                        f"{esc(_pm(paper[0], paper[1], 3)) if paper else '–'}</td></tr>")
        table = (f'<table class="ranking" data-space="{esc(panel["space"])}"><caption>space {esc(panel["space"])}'
                 f"</caption><thead><tr><th>comparison</th>{head}<th>paper, first rung</th></tr></thead>"
                 f"<tbody>{''.join(body)}</tbody></table>")
        seeds = sorted({p["seed"] for p in panel["rank_points"]})
        series = [Series(f"seed {seed}", [Point(p["adam_rank"], p["eve_rank"], label=(
            f"seed {seed}, config {p['index']}: rank {_num(p['adam_rank'])} under Adam "
            f"({_num(p['adam_score'])}), {_num(p['eve_rank'])} under EvE ({_num(p['eve_score'])})"))
            for p in panel["rank_points"] if p["seed"] == seed], color=PALETTE[k % len(PALETTE)], opacity=0.85)
            for k, seed in enumerate(seeds)]
        budget = panel["rank_points"][0]["budget"] if panel["rank_points"] else None
        scatter = chart(series, title=f"Space {panel['space']}: each configuration's rank under EvE against its rank "
                                      f"under Adam (rung {_budget(budget)}, per training seed)",
                        x_label="rank under Adam (1 = best)", y_label="rank under EvE (1 = best)", diagonal=True,
                        chart_id=f"{anchor}-rank-{_slug(panel['space'])}", width=420, height=360,
                        note="on the dashed line the two trainers agree") if series else ""
        out.append(f'<div class="charts">{scatter}{table}</div>')
    return "".join(out)


def _describe_config(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {_num(v, 3)}" for k, v in config.items())


def _ladder_svg(sweep: Mapping[str, Any], chart_id: str) -> str:
    ladder = sweep["ladder"]
    if not ladder:
        return '<p class="empty">no rung recorded yet</p>'
    width, row_h, left = 520, 26, 92
    most = max([r["planned"] or 0 for r in ladder] + [r["trained"] for r in ladder] + [1])
    scale = (width - left - 150) / most
    parts, drawn = [], 0
    colors = {"promoted": "#2ca02c", "reached the last rung": "#ff7f0e", "stopped": "#b0b0b0",
              "waiting": "#1f77b4", "not yet trained": "#ffffff"}
    counts = {"promoted": "promoted", "reached the last rung": "completed", "stopped": "stopped", "waiting": "waiting"}
    for number, rung in enumerate(ladder):
        y = 8 + number * row_h
        x = left
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">rung {esc(_budget(rung["budget"]))}</text>')
        missing = max(0, (rung["planned"] or 0) - rung["trained"])
        for part in ("promoted", "reached the last rung", "waiting", "stopped", "not yet trained"):
            count = missing if part == "not yet trained" else rung[counts[part]]
            if count <= 0:
                continue
            w = count * scale
            parts.append(f'<rect class="bar point" data-part="{part}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="20" '
                         f'fill="{colors[part]}" stroke="#666"><title>rung {esc(_budget(rung["budget"]))}: {count} '
                         f'{part}</title></rect>')
            drawn += 1
            x += w
        facts = f"{rung['trained']}" + (f"/{rung['planned']}" if rung["planned"] is not None else "") + " trained"
        if rung["promoted"]:
            facts += f", {rung['promoted']} on"
        if rung["winner_here"]:
            facts += ", winner"
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{esc(facts)}</text>')
    height = 16 + len(ladder) * row_h
    legend = "".join(f'<li><svg width="14" height="12" aria-hidden="true"><rect class="swatch" x="1" y="1" width="12" '
                     f'height="10" fill="{color}" stroke="#666"/></svg>{esc(name)}</li>' for name, color in colors.items())
    winner = sweep["winner"]
    caption = "Successive-halving ladder: configurations per rung"
    if winner:
        config = next((t["config"] for t in sweep["trials"] if t["index"] == winner.get("index")), {})
        test = winner.get("test") or {}
        caption_note = (f"winner: configuration {winner.get('index')} ({_describe_config(config)}), "
                        f"{sweep['metric']} {_num(winner.get('score'))}"
                        + (f", test {', '.join(f'{k} {_num(v)}' for k, v in test.items())}" if test else ""))
    else:
        caption_note = "no winner yet"
    return (f'<figure class="chart ladder" id="{esc(chart_id)}" data-points="{drawn}"><figcaption>{esc(caption)}'
            f'<span class="note winner">{esc(caption_note)}</span></figcaption>'
            f'<svg class="plot" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{esc(caption)}">{"".join(parts)}</svg><ul class="legend">{legend}</ul></figure>')


_STATE_COLORS = {"winner": "#d62728", "COMPLETE": "#ff7f0e", "PRUNED": "#9a9a9a", "RUNNING": "#1f77b4"}


def _curves(sweep: Mapping[str, Any], x_key: str, x_label: str, chart_id: str) -> str:
    winner = (sweep["winner"] or {}).get("index")
    series = []
    for t in sweep["trials"]:
        role = "winner" if t["index"] == winner else t["state"]
        points = [Point(r[x_key], r["score"], label=(
            f"configuration {t['index']} ({_describe_config(t['config'])}), rung {_budget(r['budget'])}: "
            f"{sweep['metric']} {_num(r['score'])}, {_num(r['charged_units'])} charged units, "
            f"{_num(r['wall_seconds'])} s"))
            for r in t["rungs"] if r[x_key] is not None]
        series.append(Series(f"configuration {t['index']} ({role})", points, color=_STATE_COLORS.get(role, "#555"),
                             lines=True, width=2.5 if role == "winner" else 1.2,
                             opacity=1.0 if role in ("winner", "COMPLETE") else 0.65, legend=False,
                             tags={"state": t["state"]}))
    series.sort(key=lambda s: s.color == _STATE_COLORS["winner"])  # the winner drawn last, on top
    figure = chart(series, title=f"Each configuration's validation {sweep['metric']} against {x_label}",
                   x_label=x_label, y_label=f"validation {sweep['metric']}", chart_id=chart_id)
    legend = "".join(f'<li><svg width="22" height="12" aria-hidden="true"><line x1="0" y1="6" x2="22" y2="6" '
                     f'stroke="{color}" stroke-width="2"/></svg>{esc(name)}</li>' for name, color in
                     (("winner", _STATE_COLORS["winner"]), ("reached the last rung", _STATE_COLORS["COMPLETE"]),
                      ("stopped", _STATE_COLORS["PRUNED"]), ("running", _STATE_COLORS["RUNNING"])))
    return figure.replace("</figure>", f'<ul class="legend">{legend}</ul></figure>')


def _sweep_details(sweep: Mapping[str, Any], anchor: str, open_: bool) -> str:
    best = sweep["best"]
    facts = [f"{sweep['optimizer']}, space {sweep['space']}, seed {sweep['seed']}"]
    if best:
        test = best.get("test") or {}
        facts.append(f"best {sweep['metric']} {_num(best['score'])} (configuration {best['index']}, rung "
                     f"{_budget(best['budget'])}" + (f", test {_num(test.get(sweep['metric']))}"
                                                  if test.get(sweep["metric"]) is not None else "") + ")")
    if sweep["wall_seconds"] is not None:
        facts.append(f"{_num(sweep['wall_seconds'])} s")
    facts.append("finished" if sweep["finished"] else "running")
    sid = f"{anchor}-sweep-{_slug(sweep['name'])}"
    settings = sweep["settings"]
    attrs = {"rungs": ", ".join(_budget(b) for b in sweep["rungs"]), "configurations": settings.get("configs"),
             "cost mode": settings.get("cost_mode"), "backward ratios": ", ".join(
                 f"{k}: {_num(v, 3)}" for k, v in sorted(sweep["backward_ratios"].items())) or None,
             "charged units (all trials)": _num(sweep["charged_units"]),
             "training seconds (all trials)": _num(sweep["training_seconds"])}
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in attrs.items() if v is not None)
    return (f'<details class="study sweep" id="{esc(sid)}" data-sweep="{esc(sweep["name"])}"{" open" if open_ else ""}>'
            f'<summary>{esc(sweep["name"])} <span class="summary-facts">{esc(" · ".join(facts))}</span></summary>'
            f'<dl class="attrs">{dl}</dl><div class="charts">'
            f'{_ladder_svg(sweep, sid + "-ladder")}'
            f'{_curves(sweep, "charged_units", "charged evaluation units", sid + "-units")}'
            f'{_curves(sweep, "wall_seconds", "training wall seconds", sid + "-seconds")}'
            "</div></details>")


def _sweeps_html(section: Mapping[str, Any]) -> str:
    anchor = f"task-{_slug(section['task'])}"
    sweeps = section["sweeps"]
    details = "".join(_sweep_details(s, anchor, number < 2) for number, s in enumerate(sweeps))
    return (f'<section class="task" id="{esc(anchor)}" data-task="{esc(section["task"])}"><h2>{esc(section["title"])}'
            f"</h2>{_time_vs_best_html(section, anchor)}{_ranking_html(section, anchor)}"
            f'<h3 id="{esc(anchor)}-sweeps">Sweeps ({len(sweeps)})</h3>'
            '<p class="note">Each sweep: how many configurations every rung trained, promoted and stopped, and '
            "every configuration's validation score at each rung against the evaluation units it was charged and "
            "against its training wall time.</p>"
            f"{details}</section>")


# Any other study -----------------------------------------------------------------------------------------


def _trials_html(section: Mapping[str, Any]) -> str:
    anchor = f"kind-{_slug(section.get('kind') or 'other')}"
    blocks = []
    for number, study in enumerate(section["studies"]):
        sid = f"{anchor}-{number}"
        dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in study["user_attrs"].items())
        figure = ""
        if study["curves"]:
            series = [Series(f"trial {c['number']} ({c['state']})", [Point(x, y) for x, y in c["points"]],
                             color=PALETTE[k % len(PALETTE)], lines=True, legend=len(study["curves"]) <= 12)
                      for k, c in enumerate(study["curves"])]
            figure = chart(series, title="Intermediate values against step", x_label="step", y_label="value",
                           chart_id=f"{sid}-curves")
        numeric = [all(isinstance(row[k], (int, float)) and not isinstance(row[k], bool)
                       for row in study["rows"] if row[k] is not None) and any(row[k] is not None for row in study["rows"])
                   for k in range(len(study["columns"]))]
        columns = [{"label": c, "numeric": n} for c, n in zip(study["columns"], numeric, strict=True)]
        blocks.append(f'<details class="study generic" id="{esc(sid)}" data-study="{esc(study["name"])}" open>'
                      f'<summary>{esc(study["name"])} <span class="summary-facts">{len(study["rows"])} trials, '
                      f'{esc(", ".join(study["directions"]))}</span></summary><dl class="attrs">{dl}</dl>'
                      f'<div class="charts">{figure}</div>{_table(sid + "-trials", columns, study["rows"])}</details>')
    return (f'<section class="kind" id="{esc(anchor)}"><h2>{esc(section["title"])}</h2>'
            '<p class="note">Studies of a kind this dashboard has no special view for: every trial as a row.</p>'
            f'{"".join(blocks)}</section>')


def _unknown_view(section: Mapping[str, Any]) -> str:
    return (f'<section class="kind"><h2>{esc(section.get("title", "Section"))}</h2><p class="note">No view named '
            f'{esc(section.get("view"))} is registered; its data:</p><pre>{esc(json.dumps(section, indent=1))}'
            "</pre></section>")


# The page ---------------------------------------------------------------------------------------------------


def render_page(data: Mapping[str, Any], *, live: bool = False, interval: float = 5.0, title: str | None = None,
                generated: datetime | None = None) -> str:
    """The whole page for a dashboard document (see :func:`eve_search.dashboard.build`).

    ``live`` makes the page poll ``data.json`` beside it every ``interval`` seconds and reload when
    the store changed (``--serve``).

    Args:
        data: the dashboard document.
        live: poll for changes and reload (the served page).
        interval: the polling interval, in seconds.
        title: the page's title (None: the default).
        generated: the time shown as the page's generation time (None: now).

    Returns:
        The page's HTML, self-contained (style, script and charts inline).

    Example:
        >>> from eve_search.dashboard import build
        >>> page = render_page(build([]), title="Empty store")
        >>> page.startswith("<!DOCTYPE html>"), "Empty store" in page
        (True, True)
    """
    sections, nav = [], []
    for section in data["sections"]:
        view = section.get("view")
        if view == "sha-sweeps":
            sections.append(_sweeps_html(section))
            nav.append((f"task-{_slug(section['task'])}", section["title"]))
        elif view == "trials":
            sections.append(_trials_html(section))
            nav.append((f"kind-{_slug(section.get('kind') or 'other')}", section["title"]))
        else:
            sections.append(_VIEWS.get(view, _unknown_view)(section))
    configurations = data["configurations"]
    if configurations["rows"]:
        sections.append('<section id="configurations-section"><h2>Configurations</h2><p class="note">Every '
                        "configuration of every sweep with its results; click a column header to sort, type to "
                        "filter.</p>" + _table("configurations", configurations["columns"], configurations["rows"],
                                               caption="configurations") + "</section>")
        nav.append(("configurations-section", "Configurations"))
    if not data["sections"]:
        sections.append('<p class="empty">The store holds no studies yet.</p>'
                        + ('<p class="empty">This page reloads when the first results arrive.</p>' if live else ""))
    style, script = asset("dashboard.css"), asset("dashboard.js")
    csp = (f"default-src 'none'; script-src {_csp_hash(script)}; style-src {_csp_hash(style)}; img-src data:; "
           "connect-src 'self'; base-uri 'none'; form-action 'none'")
    generated = generated or datetime.now(timezone.utc)
    meta = (f"{data['sweeps']} sweeps, {data['studies']} studies"
            + (f", {data['pools']} recorded pools" if isinstance(data.get("pools"), int) else "")
            + (f" · store {data['storage']}" if data.get("storage") else "")
            + f" · drawn {generated.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    page = string.Template(asset("page.html")).substitute(
        csp=esc(csp), title=esc(title or "eve-search results"), style=style, script=script,
        live="1" if live else "0", interval=esc(f"{interval:g}"), fingerprint=esc(data.get("fingerprint", "")),
        meta=esc(meta), nav="".join(f'<li><a href="#{esc(a)}">{esc(t)}</a></li>' for a, t in nav),
        body="\n".join(sections), data=script_json(data))
    return page
