import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from eve_search.cli import main
from eve_search.dashboard import dashboard_data, start_server
from tests.dashboard.conftest import add_generic
from tests.hostile import default_sigint


def test_writes_the_page_and_the_json(sweep_store, tmp_path, capsys):
    url, _ = sweep_store
    out, exported = tmp_path / "out" / "report.html", tmp_path / "data.json"
    assert main(["dashboard", "--storage", url, "--out", str(out), "--json", str(exported)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "adult-hp-eve-seed0" in page
    exported_data = json.loads(exported.read_text())
    assert (exported_data.pop("schema"), exported_data.pop("schema_version")) == ("eve-search/dashboard", 1)
    assert exported_data == dashboard_data(url)
    assert "wrote" in capsys.readouterr().err


def test_default_output_is_report_html_in_the_working_directory(sweep_store, tmp_path, monkeypatch):
    url, _ = sweep_store
    monkeypatch.chdir(tmp_path)
    assert main(["dashboard", "--storage", url]) == 0
    assert (tmp_path / "report.html").is_file()


def test_without_storage_it_reads_the_default_work_directory_and_takes_no_workdir(sweep_store, tmp_path, capsys,
                                                                                   monkeypatch):
    from eve_search.cli.args import DEFAULT_WORKDIR, default_storage_url

    url, _ = sweep_store
    run = tmp_path / "run"
    (run / DEFAULT_WORKDIR).mkdir(parents=True)
    shutil.copyfile(tmp_path / "results.db", run / DEFAULT_WORKDIR / "results.db")
    monkeypatch.chdir(run)
    assert main(["dashboard", "--json", "data.json", "--out", "page.html"]) == 0
    exported = json.loads((run / "data.json").read_text())
    assert exported["sweeps"] == dashboard_data(url)["sweeps"] == dashboard_data(default_storage_url())["sweeps"]
    capsys.readouterr()
    assert main(["dashboard", "--workdir", str(run)]) == 2  # it only reads a store: nothing to create
    assert "unrecognized arguments: --workdir" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--storage", "sqlite:///{tmp}/absent.db"], "--storage 'sqlite:///{tmp}/absent.db': no results store there"),
    (["--out", "{tmp}"], "argument --out: '{tmp}' is a directory"),
    (["--json", "{tmp}"], "argument --json: '{tmp}' is a directory"),
    (["--port", "70000"], "argument --port: '70000' is not a port"),
    (["--port", "9000"], "argument --port: 9000 only applies with --serve"),
    (["--serve", "--interval", "0"], "argument --interval: '0' must be >= 0.5"),
])
def test_bad_input_is_one_line_and_exit_2(sweep_store, tmp_path, capsys, argv, message):
    url, _ = sweep_store
    argv = [a.format(tmp=tmp_path) for a in argv]
    if "--storage" not in argv:
        argv = ["--storage", url, *argv]
    assert main(["dashboard", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("eve-search dashboard") and message.format(tmp=tmp_path) in err


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def test_server_redraws_from_the_store(sweep_store):
    url, _ = sweep_store
    server, thread = start_server(url, 0, interval=1)
    server.cache_seconds = 0
    try:
        status, kind, page = _get(server.url)
        assert status == 200 and kind.startswith("text/html") and 'data-live="1"' in page
        _, kind, body = _get(server.url + "data.json")
        first = json.loads(body)
        assert kind == "application/json" and first == dashboard_data(url)
        add_generic(url, "arrived-later", "synthetic-benchmark", trials=1)
        second = json.loads(_get(server.url + "data.json")[2])
        assert second["fingerprint"] != first["fingerprint"] and second["studies"] == first["studies"] + 1
        with pytest.raises(urllib.error.HTTPError) as missing:
            _get(server.url + "etc/passwd")
        assert missing.value.code == 404
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()
    thread.join(5)
    assert not thread.is_alive()


def test_serve_command_runs_until_interrupted(sweep_store, tmp_path):
    url, _ = sweep_store
    process = subprocess.Popen([sys.executable, "-m", "eve_search.cli", "dashboard", "--storage", url, "--serve",
                                "--port", "0"], stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                               preexec_fn=default_sigint)
    try:
        line = process.stderr.readline()
        while line and not line.startswith("serving"):  # anything a dependency warns first
            line = process.stderr.readline()
        assert line.startswith("serving http://127.0.0.1:"), line
        address = line.split()[1]
        assert _get(address)[0] == 200
        assert not (tmp_path / "report.html").exists()  # --serve writes a file only when --out asks
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        process.stderr.close()


def test_serve_on_a_taken_port_is_a_usage_error(sweep_store, capsys):
    url, _ = sweep_store
    server, _ = start_server(url, 0)
    try:
        port = str(server.server_address[1])
        assert main(["dashboard", "--storage", url, "--serve", "--port", port]) == 2
        assert f"argument --port: {port} is in use" in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()


# Recorded pools (--pool) -----------------------------------------------------------------------------------


def _pool_file(tmp_path):
    from eve_search.engine.pool import RecordedPool, TrainerRecord, save_pool

    truth = [[0.1 * k, 0.1 * k + 0.05] for k in range(6)]  # Adam ranks the six configurations 5 > 4 > ... > 0
    backwards = [[0.6 - 0.1 * k, 0.1 * k] for k in range(6)]  # another trainer, backwards until the last budget
    pool = RecordedPool(task="toy<b>", space="toy", metric="accuracy", mode="max", budgets=(10, 30),
                        configs=[{"k": k} for k in range(6)], referee="adam",
                        trainers={"adam": TrainerRecord(score=truth, test=truth, seconds=[[1.0, 3.0]] * 6),
                                  "sgd": TrainerRecord(score=backwards, test=backwards, seconds=[[1.0, 3.0]] * 6)})
    path = tmp_path / "pool.json.gz"
    save_pool(pool, path)
    return path


def test_a_recorded_pool_is_drawn_as_an_audit_beside_the_store(sweep_store, tmp_path, capsys):
    url, _ = sweep_store
    out, exported = tmp_path / "page.html", tmp_path / "page.json"
    assert main(["dashboard", "--storage", url, "--pool", str(_pool_file(tmp_path)), "--out", str(out),
                 "--json", str(exported)]) == 0
    assert "1 pools" in capsys.readouterr().err
    page = out.read_text()
    assert "adult-hp-eve-seed0" in page and 'id="kind-pool-audit"' in page and 'id="pool-audit-tau-toy<b>' not in page
    assert "toy&lt;b&gt; / toy: truth = adam at 30 units" in page  # the pool's strings are escaped too
    (section,) = [s for s in json.loads(exported.read_text())["sections"] if s.get("source") == "pools"]
    (audit,) = section["audits"]
    rows = audit["proxies"]["sgd"]["budgets"]
    assert audit["trainers"] == ["adam", "sgd"]
    assert rows["10"]["tau"]["mean"] == pytest.approx(-1.0) and rows["30"]["tau"]["mean"] == pytest.approx(1.0)


def test_pools_alone_need_no_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no eve-search-runs/ here: the default store is not read
    assert main(["dashboard", "--pool", str(_pool_file(tmp_path)), "--out", "pools.html"]) == 0
    assert not (tmp_path / "eve-search-runs").exists() and 'id="kind-pool-audit"' in (tmp_path / "pools.html").read_text()


@pytest.mark.parametrize("content, argv_tail, message", [
    (b'{"kind": "not a pool"}', [], "argument --pool: Invalid pool"),
    (None, ["--serve"], "argument --pool:"),
    (None, ["--out", "{pool}"], "is the --pool file"),
])
def test_a_bad_pool_is_one_line_exit_2_and_nothing_is_written(tmp_path, capsys, content, argv_tail, message):
    pool = _pool_file(tmp_path)
    if content is not None:
        pool.write_bytes(content)
    before = pool.read_bytes()
    argv = [a.replace("{pool}", str(pool)) for a in argv_tail]
    out = [] if "--out" in argv else ["--out", str(tmp_path / "page.html")]
    assert main(["dashboard", "--pool", str(pool), *out, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert pool.read_bytes() == before and not (tmp_path / "page.html").exists()
