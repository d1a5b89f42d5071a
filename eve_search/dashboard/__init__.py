"""Dashboards: every sweep of a results store as one self-contained HTML page of charts.

Data first, drawing second (the layout of Optuna's visualization modules): :func:`dashboard_data`
reads a store into one JSON-able document and is tested on its own; :func:`render_page` draws that
document as HTML with inline SVG charts; :func:`start_server` serves it live. The command is
``eve-search dashboard`` (see ``dashboards/README.md``).

New kinds of study (a study's ``kind`` user attribute) get their own section with
:func:`register_kind` (the data) and, if the generic trial tables do not suit them,
:func:`register_view` (the drawing); until then they show as tables of their trials.

Example:
    >>> from eve_search.dashboard import build, render_page
    >>> record = {"name": "<script>alert(1)</script>", "directions": ["minimize"], "user_attrs": {},
    ...           "trials": []}
    >>> page = render_page(build([record]))
    >>> "<script>alert(1)</script>" in page, "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    (False, True)
"""

from eve_search.dashboard._audit import pool_audit_section
from eve_search.dashboard._data import (
    PAPER_ADULT_SWEEPS,
    build,
    dashboard_data,
    fingerprint,
    read_store,
    register_kind,
    safe_url,
    sweep_view,
)
from eve_search.dashboard._render import register_view, render_page, script_json
from eve_search.dashboard._serve import DashboardServer, start_server
from eve_search.dashboard._svg import Point, Series, chart, esc

__all__ = [
    "PAPER_ADULT_SWEEPS",
    "DashboardServer",
    "Point",
    "Series",
    "build",
    "chart",
    "dashboard_data",
    "esc",
    "fingerprint",
    "pool_audit_section",
    "read_store",
    "register_kind",
    "register_view",
    "render_page",
    "safe_url",
    "script_json",
    "start_server",
    "sweep_view",
]
