"""Charts as inline SVG, drawn in Python: axes with round ticks, markers, lines, error bars.

Every string that reaches the markup goes through :func:`esc`; colors and numbers are produced
here. Each mark a reader can point at carries class ``point`` and a ``<title>`` (the browser's
tooltip), and each chart says how many points it drew (``data-points``), so a test can check
that the browser shows them all.

Example:
    >>> nice_ticks(0.0, 1.0)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    >>> log_ticks(3.0, 2500.0), log_ticks(15.0, 90.0), log_ticks(3.2, 4.1)
    ([10.0, 100.0, 1000.0], [20.0, 50.0], [3.25, 3.5, 3.75, 4.0])
    >>> svg = chart([Series("a<b", [Point(1, 2, label="x")])], title="t", x_label="x", y_label="y")
    >>> svg.count('class="point"'), "a&lt;b" in svg, "a<b" in svg
    (1, True, False)
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from eve_search._checks import options_or_keywords

__all__ = ["ChartOptions", "Point", "Series", "chart", "color_for", "esc", "log_ticks", "nice_ticks"]

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]
# The paper's optimizers keep one color each on every chart.
FIXED_COLORS = {"eve": "#d62728", "adam": "#1f77b4", "adamw": "#2ca02c", "sgd_momentum": "#7f7f7f",
                "nadam": "#ff7f0e", "radam": "#9467bd", "adabelief": "#8c564b", "amsgrad": "#e377c2",
                "lookahead": "#17becf"}


def esc(value: object) -> str:
    """Text or attribute content, escaped for HTML and SVG (quotes included).

    Args:
        value: anything; its ``str`` is escaped.

    Returns:
        The escaped text.

    Example:
        >>> esc('<a href="x">')
        '&lt;a href=&quot;x&quot;&gt;'
    """
    return html.escape(str(value), quote=True)


def color_for(name: str, order: list[str] | None = None) -> str:
    """A stable color: the paper's optimizers have their own, others take the palette in ``order``."""
    if name in FIXED_COLORS:
        return FIXED_COLORS[name]
    position = order.index(name) if order and name in order else sum(map(ord, name))
    return PALETTE[position % len(PALETTE)]


@dataclass
class Point:
    """One point of a chart series.

    Attributes:
        x, y: its coordinates.
        xerr, yerr: half-widths of its error bars (None: no bar).
        label: its tooltip text.
        y_range: the (low, high) ends of an interval that need not be centred on ``y`` (a bootstrap
            interval of a regret, which cannot go below 0); drawn instead of ``yerr``.

    Example:
        >>> Point(1.0, 0.85, yerr=0.01, label="eve, lr 1e-3")
        Point(x=1.0, y=0.85, xerr=None, yerr=0.01, label='eve, lr 1e-3', y_range=None)
        >>> Point(300.0, 0.1, y_range=(0.0, 1.9)).y_bar()
        (0.0, 1.9)
    """

    x: float
    y: float
    xerr: float | None = None
    yerr: float | None = None
    label: str = ""
    y_range: tuple[float, float] | None = None

    def y_bar(self) -> tuple[float, float] | None:
        """The (low, high) ends of the point's vertical bar, or None when it has none."""
        if self.y_range is not None:
            return self.y_range
        return (self.y - self.yerr, self.y + self.yerr) if self.yerr else None


@dataclass
class Series:
    """One named series of a chart, and how it is drawn.

    Attributes:
        name: its legend entry.
        points: its points.
        color: its stroke and fill color.
        lines: join the points with a line.
        markers: draw a marker at each point.
        marker: ``"circle"``, ``"diamond"`` or ``"square"``.
        hollow: unfilled markers.
        dashed: a dashed line.
        width: the line width.
        opacity: the series' opacity.
        legend: list it in the legend.
        tags: extra ``data-*`` attributes of the series' SVG group.

    Example:
        >>> series = Series("eve", [Point(1, 0.80), Point(2, 0.85)], lines=True)
        >>> series.marker, len(series.points)
        ('circle', 2)
    """

    name: str
    points: list[Point]
    color: str = "#1f77b4"
    lines: bool = False
    markers: bool = True
    marker: str = "circle"  # circle, diamond or square
    hollow: bool = False
    dashed: bool = False
    width: float = 1.5
    opacity: float = 1.0
    legend: bool = True
    tags: dict[str, str] = field(default_factory=dict)  # extra data-* attributes on the series group


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high], about ``count`` of them."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        return [low]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9)
    return [round(k * step, 12) for k in range(first, math.floor(high / step + 1e-9) + 1)]


def log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten in [low, high]; 1-2-5 steps when that leaves fewer than three."""
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    ticks = [10.0 ** d for d in decades if low <= 10.0 ** d <= high]
    if len(ticks) < 3:
        ticks = [m * 10.0 ** d for d in decades for m in (1, 2, 5) if low <= m * 10.0 ** d <= high]
    if len(ticks) < 2:  # a narrow range: round values, spaced on the log axis
        ticks = [t for t in nice_ticks(low, high, 4) if t > 0]
    return ticks


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-3:
        return f"{value:.0e}"
    return f"{value:.6g}"


def _padded(low: float, high: float, log: bool) -> tuple[float, float]:
    if log:
        low, high = math.log10(low), math.log10(high)
    span = high - low
    pad = span * 0.06 if span > 0 else (abs(low) * 0.05 or 0.5)
    low, high = low - pad, high + pad
    return (10 ** low, 10 ** high) if log else (low, high)


def _marker(shape: str, x: float, y: float, size: float, fill: str, stroke: str, attrs: str, title: str) -> str:
    tip = f"<title>{esc(title)}</title>" if title else ""
    if shape == "diamond":
        d = f"M{x:.1f},{y - size:.1f}L{x + size:.1f},{y:.1f}L{x:.1f},{y + size:.1f}L{x - size:.1f},{y:.1f}Z"
        return f'<path class="point" d="{d}" fill="{fill}" stroke="{stroke}" stroke-width="1.5"{attrs}>{tip}</path>'
    if shape == "square":
        return (f'<rect class="point" x="{x - size:.1f}" y="{y - size:.1f}" width="{2 * size:.1f}" '
                f'height="{2 * size:.1f}" fill="{fill}" stroke="{stroke}" stroke-width="1.5"{attrs}>{tip}</rect>')
    return (f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="{size:.1f}" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="1.5"{attrs}>{tip}</circle>')


@dataclass(frozen=True, kw_only=True)
class ChartOptions:
    """How :func:`chart` draws: its caption, axes and size; it takes this object or its fields as
    keywords (not both).

    Args:
        title: the figure's caption.
        x_label, y_label: the axis labels.
        x_log: a logarithmic x axis.
        width, height: the SVG's size, in pixels.
        diagonal: draw the y = x line, both axes on one range.
        chart_id: the figure's ``id`` (empty: none).
        note: a line of text under the chart.

    Example:
        >>> ChartOptions(title="t", x_label="x", y_label="y").width
        520
    """

    title: str
    x_label: str
    y_label: str
    x_log: bool = False
    width: int = 520
    height: int = 340
    diagonal: bool = False
    chart_id: str = ""
    note: str = ""


@dataclass(frozen=True)
class _Frame:
    """The plot area inside the SVG and the data ranges it maps."""

    left: float
    top: float
    plot_w: float
    plot_h: float
    x0: float
    x1: float
    y0: float
    y1: float
    x_log: bool

    def sx(self, x: float) -> float:
        if self.x_log:
            return self.left + (math.log10(x) - math.log10(self.x0)) / (math.log10(self.x1) - math.log10(self.x0)) \
                * self.plot_w
        return self.left + (x - self.x0) / (self.x1 - self.x0) * self.plot_w

    def sy(self, y: float) -> float:
        return self.top + self.plot_h - (y - self.y0) / (self.y1 - self.y0) * self.plot_h


def _usable(points: list[Point], x_log: bool) -> list[Point]:
    return [p for p in points if math.isfinite(p.x) and math.isfinite(p.y) and (p.x > 0 or not x_log)]


def _frame(points: list[Point], o: ChartOptions) -> _Frame:
    """The plot area of ``o``'s size, over ranges that hold ``points`` with their error bars."""
    left, right, top, bottom = 62, 14, 14, 46
    x_log = o.x_log
    xs = [v for p in points for v in ((p.x - (p.xerr or 0), p.x + (p.xerr or 0)) if not x_log else (p.x,))]
    ys = [v for p in points for v in (p.y_bar() or (p.y, p.y))]
    if x_log:
        xs += [p.x - p.xerr for p in points if p.xerr and p.x - p.xerr > 0] + [p.x + (p.xerr or 0) for p in points]
    if o.diagonal and points:
        xs = ys = [min(xs + ys), max(xs + ys)]
    x0, x1 = _padded(min(xs), max(xs), x_log) if xs else (0.0, 1.0)
    y0, y1 = _padded(min(ys), max(ys), False) if ys else (0.0, 1.0)
    return _Frame(left, top, o.width - left - right, o.height - top - bottom, x0, x1, y0, y1, x_log)


def _axes(f: _Frame, o: ChartOptions, diagonal: bool) -> list[str]:
    """The plot area's frame, grid, ticks and axis labels (and the y = x line when ``diagonal``)."""
    left, top, plot_w, plot_h = f.left, f.top, f.plot_w, f.plot_h
    parts = [f'<rect class="plot-area" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" '
             'stroke="#999"/>']
    for tick in (log_ticks(f.x0, f.x1) if f.x_log else nice_ticks(f.x0, f.x1)):
        x = f.sx(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#eee"/>'
                     f'<text class="tick" x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle">{esc(_fmt(tick))}'
                     "</text>")
    for tick in nice_ticks(f.y0, f.y1):
        y = f.sy(tick)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text class="tick" x="{left - 5}" y="{y + 4:.1f}" text-anchor="end">{esc(_fmt(tick))}</text>')
    parts.append(f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{o.height - 8}" text-anchor="middle">'
                 f"{esc(o.x_label)}</text>"
                 f'<text class="axis-label" transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{esc(o.y_label)}</text>')
    if diagonal:
        a, b = max(f.x0, f.y0), min(f.x1, f.y1)
        parts.append(f'<line class="diagonal" x1="{f.sx(a):.1f}" y1="{f.sy(a):.1f}" x2="{f.sx(b):.1f}" '
                     f'y2="{f.sy(b):.1f}" stroke="#aaa" stroke-dasharray="4 3"/>')
    return parts


def _series_group(number: int, s: Series, f: _Frame) -> tuple[list[str], int]:
    """Series ``s``'s SVG group (its line, error bars and markers), and how many markers it drew."""
    usable = _usable(s.points, f.x_log)
    tags = "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in s.tags.items())
    group = [f'<g class="series" data-series="{esc(s.name)}" data-index="{number}" opacity="{s.opacity:g}"{tags}>']
    if s.lines and len(usable) > 1:
        path = "L".join(f"{f.sx(p.x):.1f},{f.sy(p.y):.1f}" for p in usable)
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        group.append(f'<path class="line" d="M{path}" fill="none" stroke="{s.color}" '
                     f'stroke-width="{s.width:g}"{dash}><title>{esc(s.name)}</title></path>')
    drawn = 0
    for p in usable:
        if p.xerr:
            lo = max(p.x - p.xerr, f.x0) if f.x_log else p.x - p.xerr
            group.append(f'<line class="errorbar" x1="{f.sx(lo):.1f}" y1="{f.sy(p.y):.1f}" '
                         f'x2="{f.sx(p.x + p.xerr):.1f}" y2="{f.sy(p.y):.1f}" stroke="{s.color}"/>')
        bar = p.y_bar()
        if bar is not None and bar[0] != bar[1]:
            group.append(f'<line class="errorbar" x1="{f.sx(p.x):.1f}" y1="{f.sy(bar[0]):.1f}" '
                         f'x2="{f.sx(p.x):.1f}" y2="{f.sy(bar[1]):.1f}" stroke="{s.color}"/>')
        if s.markers:
            fill = "#fff" if s.hollow else s.color
            group.append(_marker(s.marker, f.sx(p.x), f.sy(p.y), 4.5 if s.marker != "circle" else 3.5, fill,
                                 s.color, "", p.label or f"{s.name}: ({_fmt(p.x)}, {_fmt(p.y)})"))
            drawn += 1
    group.append("</g>")
    return group, drawn


def _legend(series: list[Series]) -> str:
    return "".join(
        '<li><svg width="22" height="12" aria-hidden="true">'
        + (f'<line x1="0" y1="6" x2="22" y2="6" stroke="{s.color}" stroke-width="2"'
           + (' stroke-dasharray="4 2"' if s.dashed else "") + "/>" if s.lines else "")
        + (_marker(s.marker, 11, 6, 4, "#fff" if s.hollow else s.color, s.color, "", "").replace('class="point"',
                                                                                                  'class="swatch"')
           if s.markers else "")
        + f"</svg>{esc(s.name)}</li>"
        for s in series if s.legend)


def chart(series: list[Series], options: ChartOptions | None = None, **keywords: Any) -> str:
    """A figure with one SVG chart of ``series`` and its legend; every string escaped here.

    Args:
        series: the series drawn (points that are not finite, or not > 0 on a log axis, are left out).
        options: the caption, axes and size (:class:`ChartOptions`).
        **keywords: fields of :class:`ChartOptions` (``title``, ``x_label``, ``y_label``, ...) instead
            of ``options``.

    Returns:
        The ``<figure>`` element's HTML.

    Example:
        >>> html = chart([Series("eve", [Point(1, 0.80), Point(2, 0.85)], lines=True)], title="<Accuracy>",
        ...              x_label="budget", y_label="accuracy")
        >>> html.startswith("<figure"), "<svg" in html, "&lt;Accuracy&gt;" in html
        (True, True, True)
    """
    o = options_or_keywords("chart", ChartOptions, options, keywords)
    points = [p for s in series for p in _usable(s.points, o.x_log)]
    frame = _frame(points, o)
    parts = _axes(frame, o, o.diagonal and bool(points))
    drawn = 0
    for number, s in enumerate(series):
        group, count = _series_group(number, s, frame)
        parts.extend(group)
        drawn += count
    legend = _legend(series)
    caption = f"<figcaption>{esc(o.title)}" + (f'<span class="note">{esc(o.note)}</span>' if o.note else "") \
        + "</figcaption>"
    ident = f' id="{esc(o.chart_id)}"' if o.chart_id else ""
    return (f'<figure class="chart"{ident} data-points="{drawn}">{caption}'
            f'<svg class="plot" viewBox="0 0 {o.width} {o.height}" width="{o.width}" height="{o.height}" role="img" '
            f'aria-label="{esc(o.title)}">{"".join(parts)}</svg>'
            + (f'<ul class="legend">{legend}</ul>' if legend else "") + "</figure>")
