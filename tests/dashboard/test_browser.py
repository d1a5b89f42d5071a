"""The page in a real browser (headless Chromium through chromedriver, both from Debian packages)."""

import shutil
from pathlib import Path

import pytest

from eve_search.dashboard import dashboard_data, render_page, start_server
from tests.dashboard.conftest import XSS, XSS_ATTR, add_generic

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# A page that reloads between finding its body and reading it leaves a stale element: the wait asks again.
RELOADED = (StaleElementReferenceException,)


@pytest.fixture(scope="module", autouse=True)
def _chromium_is_installed():
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("the Debian packages chromium and chromium-driver are not installed; `make test` installs them")


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _open(driver, address):
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(address)
    WebDriverWait(driver, 120, ignored_exceptions=RELOADED).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")


def _errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _no_alert(driver):
    try:
        WebDriverWait(driver, 1).until(expected_conditions.alert_is_present())
    except TimeoutException:
        return True
    driver.switch_to.alert.dismiss()
    return False


CHART_FACTS = """
document.querySelectorAll("details").forEach(function (d) { d.open = true; });
return Array.from(document.querySelectorAll("figure.chart")).map(function (figure) {
  var svg = figure.querySelector("svg.plot");
  var area = (svg.querySelector(".plot-area") || svg).getBoundingClientRect();
  var points = Array.from(svg.querySelectorAll(".point"));
  var inside = points.filter(function (p) {
    var r = p.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
    return r.width > 0 && x >= area.left - 1 && x <= area.right + 1 && y >= area.top - 1 && y <= area.bottom + 1;
  }).length;
  return {id: figure.id, expected: Number(figure.dataset.points), drawn: points.length, inside: inside};
});
"""

COLUMN = """
var table = document.getElementById(arguments[0]), column = arguments[1];
return Array.from(table.tBodies[0].rows).filter(function (r) { return !r.hidden; }).map(function (r) {
  var cell = r.cells[column]; var v = cell.getAttribute("data-value");
  return v === null ? cell.textContent : Number(v);
});
"""


def test_dashboard_in_chromium(browser, sweep_store, tmp_path):
    url, _ = sweep_store
    data = dashboard_data(url)
    page = tmp_path / "report.html"
    page.write_text(render_page(data))
    _open(browser, page.as_uri())
    assert _no_alert(browser)

    charts = {c["id"]: c for c in browser.execute_script(CHART_FACTS)}
    assert all(c["drawn"] == c["expected"] == c["inside"] > 0 for c in charts.values()), charts
    section = data["sections"][0]
    assert charts["task-adult-time-hp"]["drawn"] == len(section["time_vs_best"][0]["ours"]) + 9
    assert charts["task-adult-rank-hp"]["drawn"] == len(section["ranking"][0]["rank_points"]) == 18
    for sweep in section["sweeps"]:
        prefix = f"task-adult-sweep-{sweep['name']}"
        assert charts[f"{prefix}-units"]["drawn"] == sum(len(t["rungs"]) for t in sweep["trials"])
        assert charts[f"{prefix}-seconds"]["drawn"] == sum(len(t["rungs"]) for t in sweep["trials"])
        assert f"{prefix}-ladder" in charts
    assert "kind-synthetic-benchmark-0-curves" in charts

    # Sorting: a click sorts a numeric column ascending, a second click descending; missing values last.
    headers = browser.find_elements(By.CSS_SELECTOR, "#configurations thead th")
    labels = [h.text for h in headers]
    best = labels.index("best score")
    headers[best].click()
    values = browser.execute_script(COLUMN, "configurations", best)
    assert len(values) == 36 and values == sorted(values)
    assert headers[best].get_attribute("aria-sort") == "ascending"
    headers[best].click()
    assert browser.execute_script(COLUMN, "configurations", best) == sorted(values, reverse=True)
    optimizer = labels.index("optimizer")
    headers[optimizer].click()
    names = browser.execute_script(COLUMN, "configurations", optimizer)
    assert names == sorted(names) and names[0] == "adam"

    # Filtering: every word must match.
    browser.find_element(By.ID, "configurations-filter").send_keys("eve PRUNED")
    rows = browser.execute_script(COLUMN, "configurations", labels.index("state"))
    assert len(rows) == sum(t["state"] == "PRUNED" for s in section["sweeps"] if s["optimizer"] == "eve"
                            for t in s["trials"]) > 0
    assert set(rows) == {"PRUNED"}
    assert browser.find_element(By.ID, "configurations-count").text == f"{len(rows)} of 36 rows"

    assert _errors(browser) == []
    shot = tmp_path / "dashboard.png"
    browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_store_markup_stays_text_in_chromium(browser, xss_store, tmp_path):
    page = tmp_path / "xss.html"
    page.write_text(render_page(dashboard_data(xss_store)))
    _open(browser, page.as_uri())
    assert _no_alert(browser)
    assert browser.find_element(By.CSS_SELECTOR, "section.task h2").text == XSS
    summaries = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "details.study > summary")]
    assert any(text.startswith(XSS) for text in summaries)
    assert any(text.startswith(f"generic {XSS}") for text in summaries)
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 2
    body = browser.find_element(By.TAG_NAME, "body").text
    assert XSS_ATTR in body
    assert _errors(browser) == []  # a blocked injection would log a policy violation here
    browser.save_screenshot(str(tmp_path / "xss.png"))


def test_served_page_reloads_when_the_store_changes(browser, sweep_store, tmp_path):
    url, _ = sweep_store
    server, _ = start_server(url, 0, interval=1)
    server.cache_seconds = 0
    try:
        _open(browser, server.url)
        before = browser.find_element(By.TAG_NAME, "body").get_attribute("data-fingerprint")
        assert "arrived-later" not in browser.page_source
        add_generic(url, "arrived-later", "synthetic-benchmark", trials=2)

        def reloaded(driver):
            body = driver.find_element(By.TAG_NAME, "body")
            return body.get_attribute("data-ready") == "1" and body.get_attribute("data-fingerprint") != before

        # Generous: a busy machine slows every redraw.
        WebDriverWait(browser, 300, ignored_exceptions=RELOADED).until(reloaded)
        assert "arrived-later" in browser.page_source
        assert _errors(browser) == []
        browser.save_screenshot(str(tmp_path / "live.png"))
    finally:
        server.shutdown()
        server.server_close()
