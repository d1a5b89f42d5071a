import base64
import hashlib
import json
import re

import pytest

from eve_search.dashboard import (
    _render,
    build,
    dashboard_data,
    register_view,
    render_page,
)
from eve_search.dashboard._render import asset
from tests.dashboard.conftest import XSS, XSS_ATTR, XSS_VALUE, add_generic, url_of


def _embedded(page):
    return re.search(r'<script type="application/json" id="dashboard-data">(.*?)</script>', page, re.DOTALL).group(1)


def test_the_page_is_self_contained_and_allows_only_its_own_code(sweep_store):
    url, _ = sweep_store
    page = render_page(dashboard_data(url))
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert asset("dashboard.js") in page and asset("dashboard.css") in page
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)
    for text in (asset("dashboard.js"), asset("dashboard.css")):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"sha256-{digest}" in policy.replace("&#x27;", "'")
    assert "default-src &#x27;none&#x27;" in policy
    assert ' style="' not in page  # inline style attributes would need 'unsafe-inline'


def test_embedded_document_is_the_data(sweep_store):
    url, _ = sweep_store
    data = dashboard_data(url)
    assert json.loads(_embedded(render_page(data))) == data


def test_every_chart_draws_every_point(sweep_store):
    url, expected = sweep_store
    data = dashboard_data(url)
    page = render_page(data)
    figures = re.findall(r'<figure class="chart[^"]*" id="([^"]+)" data-points="(\d+)">(.*?)</figure>', page, re.DOTALL)
    counts = {ident: (int(n), body.count('class="point"') + body.count('class="bar point"')) for ident, n, body in figures}
    assert all(n == drawn and n > 0 for n, drawn in counts.values()), counts
    truth = expected[("eve", 0)]
    prefix = "task-adult-sweep-adult-hp-eve-seed0"
    rung_results = sum(len(r) for r in truth["results"].values())
    assert counts[f"{prefix}-units"][0] == counts[f"{prefix}-seconds"][0] == rung_results == 13
    assert counts["task-adult-time-hp"][0] == 2 + 9  # ours (eve, adam) beside the paper's nine
    assert counts["task-adult-rank-hp"][0] == 18
    # The ladder: rung 100 promoted + stopped, rung 300 promoted + stopped, rung 900 the finalist.
    assert counts[f"{prefix}-ladder"][0] == 5


def test_store_strings_are_text_everywhere(xss_store):
    data = dashboard_data(xss_store)
    page = render_page(data)
    for payload in (XSS, XSS_VALUE, XSS_ATTR):
        assert payload not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(3)&gt;" in page
    embedded = _embedded(page)
    assert "<" not in embedded and ">" not in embedded
    assert json.loads(embedded) == data
    # Exactly the page's own two script elements, and no element the store put there.
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert "<img" not in page


def test_the_served_page_polls_and_the_file_does_not(sweep_store):
    url, _ = sweep_store
    data = dashboard_data(url)
    assert 'data-live="0"' in render_page(data)
    live = render_page(data, live=True, interval=2)
    assert 'data-live="1"' in live and 'data-interval="2"' in live
    assert f'data-fingerprint="{data["fingerprint"]}"' in live


def test_an_empty_store_says_so():
    page = render_page(build([]))
    assert "holds no studies" in page and "<figure" not in page


def test_custom_views_and_unknown_views(monkeypatch, tmp_path):
    url = url_of(tmp_path / "r.db")
    add_generic(url, "s", "synthetic-benchmark")
    data = dashboard_data(url)
    data["sections"].append({"title": "Mine <b>", "view": "mine", "n": 3})
    data["sections"].append({"title": "Nobody's", "view": "nobody", "secret": "<i>"})
    monkeypatch.setattr(_render, "_VIEWS", {})
    register_view("mine", lambda section: f"<section id='mine'>{section['n']} things</section>")
    page = render_page(data)
    assert "<section id='mine'>3 things</section>" in page
    assert "No view named nobody" in page and "&lt;i&gt;" in page
    with pytest.raises(ValueError, match="built in"):
        register_view("trials", lambda section: "")
