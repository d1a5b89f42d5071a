"""searches/peers.py at tiny size, with the tools of the test environment (eve-search, Optuna, Ray Tune,
random search): every run goes to the store, the referee scores every pick, the table and the page are
produced, a second call trains nothing, and bad input is one line. DEHB and Syne Tune need virtual
environments of their own and are not run here (see searches/README.md)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "searches" / "peers.py"
spec = importlib.util.spec_from_file_location("peers_script", SCRIPT)
peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peers)

from _peers.cpu import LostChildren  # noqa: E402 (importable once the script is loaded)
from _peers.problem import Problem, coerce, config_key, ray_param_space  # noqa: E402
from _peers.store import PeerStore  # noqa: E402

from eve_search import InputError  # noqa: E402
from eve_search.dashboard import build, render_page  # noqa: E402
from eve_search.dashboard._peers import goal, peers_section  # noqa: E402
from eve_search.tasks.spaces import get_space  # noqa: E402

pytestmark = pytest.mark.slow  # minutes in all: `make test` starts this file first
TOOLS = ["eve-sha-eve", "eve-run-sha-tpe2", "optuna-tpe-sh", "ray-asha", "random"]
TINY = ["--spaces", "hp", "--seeds", "0", "--budget-multipliers", "1", "--configs", "2", "--max-units", "40",
        "--min-units", "20", "--referee-seeds", "1", "--anytime-points", "2", "--cpus", "1", "--run-timeout", "240"]


def _runs(url: str) -> dict[str, dict]:
    storage = optuna.storages.RDBStorage(url)
    try:
        return {s.study_name: dict(s.user_attrs) for s in storage.get_all_studies()
                if s.user_attrs.get("kind") == "peer-run"}
    finally:
        storage.engine.dispose()


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("peers")
    html = workdir / "peers.html"
    from io import StringIO
    from contextlib import redirect_stdout

    out = StringIO()
    with redirect_stdout(out):
        code = peers.main([*TINY, "--tools", ",".join(TOOLS), "--workdir", str(workdir), "--report-html", str(html)])
    return {"code": code, "out": out.getvalue(), "workdir": workdir, "html": html,
            "url": f"sqlite:///{workdir / 'peers.db'}"}


def test_every_tool_runs_spends_its_budget_and_its_pick_is_judged(comparison):
    assert comparison["code"] == 0, comparison["out"]
    runs = {a["tool"]: a for a in _runs(comparison["url"]).values()}
    assert sorted(runs) == sorted(TOOLS)
    budget = runs["eve-sha-eve"]["charged_units"]
    # 2 configurations at 20 units, the better one on to 40: 3 x 20, each less than a rung over it.
    assert 60 <= budget < 60 + 3 * 20
    # Every result of the search is in its event log: SHA's 2 configurations at the first rung and one at
    # the second; run_sha + TPE in two cohorts of 1 configuration, each at both rungs.
    for tool, results in (("eve-sha-eve", 3), ("eve-run-sha-tpe2", 4)):
        assert len(runs[tool]["events"]) == results, (tool, runs[tool]["events"])
    assert runs["eve-run-sha-tpe2"]["settings"]["cohorts"] == 2
    for tool, run in runs.items():
        assert run["status"] == "done" and run["seed"] == 0 and run["multiplier"] == 1.0
        assert 0.5 < run["referee"]["test"] <= 1.0 and 0.5 < run["referee"]["val"] <= 1.0, tool
        assert run["referee"]["key"] == config_key(coerce(get_space("hp"), run["pick"]))
        assert 1 <= run["rank"] <= 3 and run["rank_of"] == 2
        assert run["wall_seconds"] > 0 and run["cpu_seconds"] > 0
        assert run["anytime"][-1]["fraction"] == 1.0 and run["anytime"][-1]["test"] == run["referee"]["test"]
        if not tool.startswith("eve-"):  # stopped by the budget: at it, at most one report step past it
            assert run["budget_units"] == budget and run["budget_enforced"]
            assert budget <= run["charged_units"] <= budget + 25, (tool, run["charged_units"])
        # The event log adds up: the last report's running total is the run's charge.
        assert run["events"][-1][1] == pytest.approx(run["charged_units"], abs=1e-3)
    assert runs["ray-asha"]["versions"]["ray"] and runs["optuna-tpe-sh"]["versions"]["optuna"]
    assert runs["ray-asha"]["settings"]["scheduler"].startswith("ASHAScheduler(time_attr=step, max_t=2")


def test_the_table_has_a_row_per_tool_and_the_goal_line(comparison):
    lines = comparison["out"].splitlines()
    assert any(line.startswith("Goal ") for line in lines)
    for label in ("eve-search sync SHA, EvE", "Optuna TPE + SuccessiveHalvingPruner", "Ray Tune ASHAScheduler",
                  "random search, full budget"):
        row = next(line for line in lines if line.startswith(label))
        assert float(row[40:].split()[1]) > 0.5  # the referee's test accuracy of the pick
    page = comparison["html"].read_text(encoding="utf-8")
    assert 'id="kind-peers"' in page and "Ray Tune ASHAScheduler" in page
    assert page.count('class="chart"') >= 3


def test_eve_search_dashboard_draws_the_stored_comparison(comparison, tmp_path):
    from eve_search.cli import main as cli

    out = tmp_path / "report.html"
    assert cli(["dashboard", "--storage", comparison["url"], "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.index('id="kind-peers"') < page.index('id="kind-peers-referee"')
    assert all(f'id="peers-0-adult-hp-x1-{kind}"' in page for kind in ("cost", "anytime-wall", "anytime-units"))
    assert "Optuna TPE + SuccessiveHalvingPruner" in page and "Goal " in page


def test_a_second_call_trains_nothing_and_keeps_every_run(comparison, capsys, monkeypatch):
    before = _runs(comparison["url"])

    def refuse(*args, **kwargs):
        raise AssertionError(f"a run process was started: {args[0] if args else kwargs}")

    monkeypatch.setattr(peers.subprocess, "Popen", refuse)  # every run is a process: none may start
    assert peers.main([*TINY, "--tools", ",".join(TOOLS), "--workdir", str(comparison["workdir"])]) == 0
    assert _runs(comparison["url"]) == before
    assert "Ray Tune ASHAScheduler" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "words"), [
    (["--tools", "optuna,bogus"], ["--tools", "'optuna'", "or 'all'"]),
    (["--tools", "synetune-dehb"], ["--tools", "Syne Tune 0.16 ships no DEHB"]),
    (["--seeds", "3-1"], ["--seeds", "not a seed list"]),
    (["--budget-multipliers", "1,0"], ["--budget-multipliers", "'0'", "(0, 100]"]),
    (["--spaces", "nope"], ["--spaces", "unknown space"]),
    (["--task", "nope"], ["--task", "'nope'", "fashion-mnist"]),
    (["--task", "fashion-mnist", "--spaces", "hp"], ["--spaces", "'hp'", "fashion-mnist", "fashion-hp"]),
    (["--min-units", "100", "--max-units", "60"], ["--min-units", "100", "--max-units 60"]),
    (["--configs", "0"], ["--configs", "'0'"]),
    (["--storage", "nosuchdb://x"], ["--storage"]),
    (["--run-timeout", "0"], ["--run-timeout", "'0'"]),
])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys, tmp_path):
    assert peers.main([*argv, "--workdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert all(word in err for word in words), err


def test_a_workdir_that_is_a_file_is_one_line(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    assert peers.main(["--workdir", str(tmp_path / "file"), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--workdir" in err and "file" in err


def test_coerce_brings_every_tool_back_to_the_declared_types():
    import numpy as np

    arch = get_space("arch")
    raw = {"width": np.int64(128), "depth": "2", "lr": np.float64(1.5e-2), "weight_decay": 0.3}
    config = coerce(arch, raw)
    assert config == {"width": 128, "depth": 2, "lr": 1e-2, "weight_decay": 5e-4}  # clipped, fixed value kept
    assert type(config["width"]) is int and type(config["lr"]) is float
    assert config_key(config) == config_key(coerce(arch, {**raw, "depth": 2}))
    with pytest.raises(ValueError, match="'width'=3|width=3"):
        coerce(arch, {**raw, "width": 3})
    with pytest.raises(ValueError, match="no value for 'lr'"):
        coerce(arch, {"width": 64, "depth": 1})


def test_ray_space_is_generated_from_the_declaration():
    from ray.tune.search.sample import Categorical, Float

    for name in ("hp", "arch"):
        space = get_space(name)
        translated = ray_param_space(space)
        assert list(translated) == [p.name for p in space.parameters]
        for p in space.parameters:
            domain = translated[p.name]
            if hasattr(p, "value"):
                assert domain == p.value
            elif hasattr(p, "choices"):
                assert isinstance(domain, Categorical) and list(domain.categories) == list(p.choices)
            else:
                assert isinstance(domain, Float) and (domain.lower, domain.upper) == (p.low, p.high)
                samples = [domain.sample() for _ in range(200)]
                assert all(p.low <= s <= p.high for s in samples)
                assert sum(s < math.sqrt(p.low * p.high) for s in samples) > 60  # log-uniform: half below the middle


def test_problem_rungs_and_steps_match_each_tool_vocabulary():
    problem = Problem(space="hp")
    assert problem.rungs == (100, 300, 900, 2700, 3000)
    assert problem.steps == 30 and problem.units_at(30) == 3000 and problem.units_at(2) == 200
    assert [problem.level(u) for u in (100.4, 299.9, 300.2, 3000.7)] == [1, 2, 3, 30]
    with pytest.raises(ValueError, match="min_units"):
        Problem(min_units=200, max_units=100)


def test_anytime_points_follow_the_furthest_trained_best():
    problem = Problem(space="hp", max_units=300, min_units=100)
    # [wall, total, trial, trial units, score]: trial 1 scores best early, trial 0 goes further.
    events = [[1.0, 100, 0, 100, 0.80], [2.0, 200, 1, 100, 0.85], [3.0, 300, 0, 200, 0.82],
              [4.0, 400, 0, 300, 0.83], [5.0, 500, 2, 100, None]]
    points = peers.anytime_points(events, 400.0, problem, 4, 6.0, 500.0)
    assert [(p["fraction"], p["wall"], p["trial"]) for p in points] == [(0.25, 1.0, 0), (0.5, 2.0, 1), (0.75, 3.0, 0)]
    late = peers.anytime_points(events[:2], 400.0, problem, 4, 9.0, 200.0)
    assert [(p["fraction"], p["wall"]) for p in late] == [(0.25, 1.0), (0.5, 2.0), (0.75, 9.0)]


def _record(tool, seed, test, wall, **extra):
    attrs = {"kind": "peer-run", "status": "done", "task": "adult", "space": "hp", "tool": tool, "seed": seed,
             "multiplier": 1.0, "budget_units": 100.0, "charged_units": 101.0, "wall_seconds": wall,
             "cpu_seconds": 2 * wall, "referee": {"test": test, "val": test}, "rank": 2, "rank_of": 48,
             "signature": "s", "problem": {"configs": 48, "max_units": 3000}, "cpus": 2,
             "anytime": [{"fraction": 0.5, "wall": wall / 2, "units": 50.0, "test": test - 0.01},
                         {"fraction": 1.0, "wall": wall, "units": 101.0, "test": test}], **extra}
    return {"name": f"{tool}-{seed}", "directions": ["maximize"], "user_attrs": attrs, "trials": []}


def test_goal_is_quality_within_one_sd_at_most_six_tenths_of_the_wall_time():
    records = [_record("eve-sha-eve", s, t, 10.0) for s, t in ((0, 0.850), (1, 0.852))]
    records += [_record("optuna-tpe-sh", s, t, 20.0) for s, t in ((0, 0.851), (1, 0.855))]
    section = peers_section(records)
    (group,) = section["groups"]
    verdict = group["goal"]
    assert verdict["best"] == "optuna-tpe-sh" and verdict["within"] and verdict["wall_ratio"] == pytest.approx(0.5)
    assert verdict["met"]
    slower = peers_section(records[:2] + [_record("optuna-tpe-sh", s, t, 12.0) for s, t in ((0, 0.851), (1, 0.855))])
    assert not slower["groups"][0]["goal"]["met"] and slower["groups"][0]["goal"]["within"]
    worse = [r for r in group["rows"] if r["tool"] == "eve-sha-eve"]
    assert worse[0]["test_mean"] == pytest.approx(0.851) and worse[0]["seeds"] == [0, 1]
    assert goal([r for r in group["rows"] if r["tool"] != "eve-sha-eve"]) is None
    # eve-search's own searches (another trainer, another sampler) are not the tools it is judged against.
    own = records + [_record(tool, s, 0.9, 30.0) for tool in ("eve-sha-adam", "eve-run-sha-tpe") for s in (0, 1)]
    assert peers_section(own)["groups"][0]["goal"] == verdict


def test_every_accuracy_bar_ends_within_0_and_1():
    # Two seeds that land far apart (a chance-level pick and a near-perfect one): mean 0.575, sd 0.53.
    records = [_record("random", s, t, 10.0) for s, t in ((0, 0.2), (1, 0.95))]
    page = render_page(build(records))
    figures = re.findall(r'<figure[^>]*id="peers-.*?</figure>', page, flags=re.S)
    assert len(figures) == 3
    for figure in figures:
        assert "cut at 0 and 1" in figure
        # The y axis's ticks give the map from accuracy to pixels; every bar's ends map back into [0, 1].
        ticks = [(float(value), float(y) - 4) for y, value in
                 re.findall(r'<text class="tick" x="[^"]*" y="([^"]*)" text-anchor="end">([-0-9.]+)</text>', figure)]
        (v0, y0), (v1, y1) = ticks[0], ticks[-1]
        bars = re.findall(r'<line class="errorbar" x1="([^"]*)" y1="([^"]*)" x2="([^"]*)" y2="([^"]*)"', figure)
        vertical = [(float(a), float(b)) for x1, a, x2, b in bars if x1 == x2]
        assert vertical
        values = [v0 + (pixel - y0) * (v1 - v0) / (y1 - y0) for ends in vertical for pixel in ends]
        assert min(values) >= -1e-3 and max(values) <= 1 + 1e-3, values  # pixels are rounded to 0.1


def test_stored_values_are_checked_and_every_string_escaped():
    hostile = _record("<script>alert(1)</script>", 0, 0.85, 5.0)
    broken = _record("random", 0, 0.85, 5.0)
    broken["user_attrs"]["wall_seconds"] = "fast"
    page = render_page(build([hostile, broken, _record("eve-sha-eve", 0, 0.84, 2.0)]))
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "1 stored run(s) left out" in page


def test_cpu_of_processes_the_kernel_reaps_unseen_is_sampled():
    # The child ignores SIGCHLD (as Ray's raylet does), so its busy grandchild's CPU never reaches
    # getrusage; the sampler sees it.
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
            "busy = subprocess.Popen([sys.executable, '-c', 'import time\\nend = time.process_time() + 1.0\\n"
            "while time.process_time() < end: pass']); busy.wait()")
    process = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    lost = LostChildren(process.pid, interval=0.05)
    try:
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert 0.7 <= lost.stop() <= 2.0


def test_an_interrupted_run_is_run_again_and_a_finished_one_kept(tmp_path):
    store = PeerStore(f"sqlite:///{tmp_path / 'peers.db'}")
    problem = Problem(space="hp", configs=2, max_units=40, min_units=20)
    name = store.run_name(problem, "random", 0, 1.0)
    half = optuna.create_study(study_name=name, storage=store.storage)
    half.set_user_attr("kind", "peer-run")  # what a killed parent leaves: no status
    assert store.done_run(name) is None
    assert name not in {s.study_name for s in store.storage.get_all_studies()}
    config = {"lr": 1e-3, "weight_decay": 1e-5, "width": 256, "depth": 2}
    trial = {"key": "0", "config": config, "reports": {20: 0.8, 40: 0.81}, "units": 40.5, "score": 0.81,
             "complete": True}
    run = {"kind": "peer-run", "task": "adult", "tool": "random", "space": "hp", "seed": 0, "multiplier": 1.0,
           "charged_units": 40.5, "wall_seconds": 1.0, "referee": None}
    with pytest.raises(InputError, match="peer run field 'charged_units' is nan; expected a finite number"):
        store.save_run(name, {**run, "charged_units": float("nan")}, [trial], get_space("hp"))  # refused first
    assert store.done_run(name) is None
    store.save_run(name, run, [trial], get_space("hp"))
    assert store.done_run(name)["status"] == "done"
    (frozen,) = optuna.load_study(study_name=name, storage=store.storage).trials
    assert frozen.params == config and frozen.value == 0.81 and frozen.intermediate_values == {20: 0.8, 40: 0.81}
