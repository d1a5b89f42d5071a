"""The dashboard's audit section: built from a store's audit studies, drawn with every string escaped."""

import copy
import re

import pytest

from eve_search.dashboard._audit import audit_section, render_audit_section
from eve_search.cli import main
from eve_search.dashboard import build, read_store, render_page

AUDIT = ["audit", "adult", "--task", "tiny", "--seeds", "0-1", "--configs", "4", "--budgets", "10,30",
         "--backward-ratio", "2", "--resamples", "50", "--proxies", "eve,sgd_momentum", "--quiet"]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audit-view")
    assert main([*AUDIT, "--workdir", str(folder)]) == 0
    return read_store(f"sqlite:///{folder / 'results.db'}")


def test_audit_studies_get_their_own_section(records):
    data = build(records)
    assert [(s["title"], s["view"]) for s in data["sections"]] == [("Proxy audits", "audit")]
    (audit,) = data["sections"][0]["audits"]
    assert (audit["task"], audit["space"], audit["truth"], audit["seeds"]) == ("tiny", "tiny", "adam", [0, 1])
    assert set(audit["proxies"]) == {"adam", "eve", "sgd_momentum"}
    rows = audit["proxies"]["eve"]["budgets"]
    assert set(rows) == {"10", "30"} and rows["10"]["wall_seconds"]["mean"] < rows["30"]["wall_seconds"]["mean"]
    assert audit["proxies"]["adam"]["budgets"]["30"]["regret"]["mean"] == 0.0
    page = render_page(data)
    assert 'id="kind-audit"' in page and "Kendall tau-b against the truth" in page and "Top-1 regret" in page
    assert page.count('class="series"') >= 2 * 3  # a curve per trainer in both charts


def test_a_seed_with_unfinished_runs_is_left_out(records):
    changed = copy.deepcopy(records)
    for record in changed:
        if record["name"] == "audit-tiny-tiny-eve-seed1":
            record["trials"][0]["state"] = "RUNNING"
    (audit,) = audit_section(changed)["audits"]
    assert audit["seeds"] == [0] and audit["noise_floor"] is None
    for record in changed:
        if record["name"].endswith("seed0") and "eve" in record["name"]:
            record["trials"][1]["state"] = "RUNNING"
    (audit,) = audit_section(changed)["audits"]
    assert audit["seeds"] == [] and "no seed has finished" in audit["note"]
    assert "no seed has finished" in render_audit_section(audit_section(changed))


def test_every_shown_string_is_escaped(records):
    hostile = "<script>alert(1)</script>"
    changed = copy.deepcopy(records)
    for record in changed:
        record["user_attrs"]["settings"]["space"] = hostile
        if "-eve-" in record["name"]:
            record["user_attrs"]["settings"]["optimizer"] = hostile
    page = render_page(build(changed))
    assert hostile not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page



def test_each_bar_spans_its_bootstrap_interval_which_need_not_be_centred(records):
    # A regret's interval is [0, high] around a small mean: a bar of mean +- the larger half-width would
    # reach below zero, a regret no configuration can have.
    section = copy.deepcopy(audit_section(records))
    (audit,) = section["audits"]
    audit["proxies"]["eve"]["budgets"]["10"]["regret"].update(mean=0.5, interval=[0.0, 8.0])
    page = render_audit_section(section)
    regret = page[page.index('id="audit-regret-'):]
    series = re.search(r'<g class="series" data-series="eve".*?</g>', regret[:regret.index("</svg>")], re.S).group()
    low, high = (float(v) for v in re.search(r'<line class="errorbar" x1="[-0-9.]+" y1="([-0-9.]+)" '
                                             r'x2="[-0-9.]+" y2="([-0-9.]+)"', series).groups())
    marker = float(re.search(r'<circle class="point" cx="[-0-9.]+" cy="([-0-9.]+)"', series).group(1))
    # In pixels (y grows downwards): the mean sits 0.5/8 of the bar's length above its lower end, 0.
    assert (low - marker) / (low - high) == pytest.approx(0.5 / 8, abs=0.01)
