import json
import math
import statistics

import optuna
import pytest

from eve_search.dashboard import (
    PAPER_ADULT_SWEEPS,
    _data,
    build,
    dashboard_data,
    read_store,
    register_kind,
    safe_url,
)
from eve_search.analysis.ranking import agreement
from eve_search.engine.store import StoreError
from tests.dashboard.conftest import add_generic, add_sweep, url_of


def _section(data, view="sha-sweeps"):
    return next(s for s in data["sections"] if s["view"] == view)


def _sweep(data, name):
    return next(s for s in _section(data)["sweeps"] if s["name"] == name)


def test_ladder_follows_the_recorded_halving(sweep_store):
    url, expected = sweep_store
    data = dashboard_data(url)
    for (optimizer, seed), truth in expected.items():
        sweep = _sweep(data, truth["name"])
        assert (sweep["optimizer"], sweep["seed"], sweep["space"], sweep["task"]) == (optimizer, seed, "hp", "adult")
        assert sweep["finished"] and sweep["rungs"] == [100, 300, 900]
        members = truth["members"]
        assert [r["trained"] for r in sweep["ladder"]] == [len(m) for m in members] == [9, 3, 1]
        assert [r["planned"] for r in sweep["ladder"]] == [9, 3, 1]
        assert [r["promoted_indices"] for r in sweep["ladder"][:-1]] == members[1:]
        assert [r["stopped"] for r in sweep["ladder"]] == [6, 2, 0]
        assert sweep["ladder"][-1]["completed"] == 1 and sweep["ladder"][-1]["winner_here"]
        assert sweep["winner"]["index"] == truth["winner"]
        assert sweep["wall_seconds"] == pytest.approx(truth["wall_seconds"])
        # Best validation score found at any rung, with the rung it was found at.
        best = max((r["score"], -b, i) for i, rungs in truth["results"].items() for b, r in rungs.items())
        assert (sweep["best"]["score"], -sweep["best"]["budget"], sweep["best"]["index"]) == best
        curves = {t["index"]: [(r["budget"], r["score"], r["charged_units"], r["wall_seconds"]) for r in t["rungs"]]
                  for t in sweep["trials"]}
        assert curves == {i: [(b, r["score"], r["charged_units"], r["wall_seconds"]) for b, r in sorted(rungs.items())]
                          for i, rungs in truth["results"].items()}


def test_a_sweep_cut_short_shows_its_undecided_rung(tmp_path):
    url = url_of(tmp_path / "r.db")
    truth = add_sweep(url, optimizer="eve", seed=0, stop_after=2)
    sweep = _sweep(dashboard_data(url), truth["name"])
    assert not sweep["finished"] and sweep["winner"] is None
    first, second, third = sweep["ladder"]
    assert (first["trained"], first["promoted"], first["stopped"], first["waiting"]) == (9, 3, 6, 0)
    assert (second["trained"], second["promoted"], second["stopped"], second["waiting"]) == (3, 0, 0, 3)
    assert (third["trained"], third["planned"]) == (0, 1)
    states = {t["index"]: t["state"] for t in sweep["trials"]}
    assert sorted(i for i, s in states.items() if s == "RUNNING") == truth["members"][1]


def test_time_against_best_is_mean_and_std_over_seeds_beside_the_paper(sweep_store):
    url, expected = sweep_store
    panel = _section(dashboard_data(url))["time_vs_best"][0]
    assert panel["space"] == "hp"
    for row in panel["ours"]:
        runs = [expected[(row["optimizer"], s)] for s in (0, 1)]
        bests = [max(r["score"] for rungs in run["results"].values() for r in rungs.values()) for run in runs]
        assert row["seeds"] == [0, 1]
        assert row["wall_seconds"] == pytest.approx(statistics.fmean(r["wall_seconds"] for r in runs))
        assert row["wall_seconds_std"] == pytest.approx(statistics.stdev(r["wall_seconds"] for r in runs))
        assert (row["best"], row["best_std"]) == pytest.approx((statistics.fmean(bests), statistics.stdev(bests)))
    paper = {row["optimizer"]: row for row in panel["paper"]}
    assert (paper["eve"]["wall_seconds"], paper["eve"]["best"]) == (21.8, 0.8544)
    assert set(paper) == set(PAPER_ADULT_SWEEPS["hp"])


def test_ranking_agreement_is_the_ranking_modules_and_the_scatter_ranks_every_configuration(sweep_store):
    url, expected = sweep_store
    panel = _section(dashboard_data(url))["ranking"][0]
    rows = {row["label"]: row for row in panel["comparisons"]}
    assert set(rows) == {"eve vs adam", "adam vs adam (different training seeds)"}  # no adamw sweeps here
    scores = {(o, s): {i: rungs[100]["score"] for i, rungs in expected[(o, s)]["results"].items()}
              for o in ("eve", "adam") for s in (0, 1)}
    first = rows["eve vs adam"]["per_rung"][0]
    reference = agreement({s: scores[("eve", s)] for s in (0, 1)}, {s: scores[("adam", s)] for s in (0, 1)},
                          [(0, 0), (1, 1)])
    assert first["budget"] == 100 and first["mean"] == pytest.approx(reference.mean)
    assert first["taus"] == pytest.approx(reference.taus) and first["interval"] == pytest.approx(reference.interval)
    assert rows["eve vs adam"]["paper_first_rung"] == [0.663, 0.093]
    assert rows["adam vs adam (different training seeds)"]["per_rung"][0]["pairs"] == [[0, 1], [1, 0]]
    points = panel["rank_points"]
    assert len(points) == 2 * 9
    for seed in (0, 1):
        mine = [p for p in points if p["seed"] == seed]
        assert sorted(p["eve_rank"] for p in mine) == list(range(1, 10))
        best_eve = max(scores[("eve", seed)], key=scores[("eve", seed)].get)
        assert next(p for p in mine if p["index"] == best_eve)["eve_rank"] == 1


def test_no_ranking_without_both_trainers(tmp_path):
    url = url_of(tmp_path / "r.db")
    add_sweep(url, optimizer="eve", seed=0)
    assert _section(dashboard_data(url))["ranking"] == []


def test_studies_dispatch_on_their_kind(sweep_store, monkeypatch):
    url, _ = sweep_store
    data = dashboard_data(url)
    others = [s for s in data["sections"] if s["view"] == "trials"]
    assert [(s["title"], [st["name"] for st in s["studies"]]) for s in others] == [
        ("Other studies", ["scratch"]), ("Other studies: synthetic-benchmark", ["rosenbrock-d10-eve-seed0"])]
    study = others[1]["studies"][0]
    assert study["columns"][:3] == ["number", "state", "value"] and len(study["rows"]) == 3
    assert study["rows"][1][:3] == [1, "COMPLETE", 0.5]
    assert study["curves"][0]["points"] == [[1.0, 2.0], [2.0, 1.0]]
    assert study["user_attrs"] == {"kind": "synthetic-benchmark", "settings": '{"dim": 10}'}

    monkeypatch.setattr(_data, "_KINDS", {})
    register_kind("synthetic-benchmark", lambda records: {"title": "Synthetic", "view": "synthetic",
                                                         "names": [r["name"] for r in records]})
    section = next(s for s in dashboard_data(url)["sections"] if s.get("kind") == "synthetic-benchmark")
    assert section == {"title": "Synthetic", "view": "synthetic", "names": ["rosenbrock-d10-eve-seed0"],
                       "kind": "synthetic-benchmark"}
    with pytest.raises(ValueError, match="sha-sweep"):
        register_kind("sha-sweep", lambda records: {})


def test_sweeps_group_by_task_into_sections(tmp_path):
    url = url_of(tmp_path / "r.db")
    add_sweep(url, optimizer="eve", seed=0, task="mnist", space="lr")
    add_sweep(url, optimizer="eve", seed=0)
    titles = [s["title"] for s in dashboard_data(url)["sections"]]
    assert titles == ["UCI Adult", "MNIST"]
    mnist = dashboard_data(url)["sections"][1]
    assert mnist["time_vs_best"][0]["paper"] == []  # the paper's figures are Adult's only


def test_a_minimized_metric_keeps_the_lowest(tmp_path):
    url = url_of(tmp_path / "r.db")
    truth = add_sweep(url, optimizer="eve", seed=0, mode="min")
    sweep = _sweep(dashboard_data(url), truth["name"])
    lowest = min(r["score"] for rungs in truth["results"].values() for r in rungs.values())
    assert sweep["mode"] == "min" and sweep["best"]["score"] == lowest
    assert sweep["winner"]["index"] == truth["winner"]


def test_older_stores_without_kind_are_read_as_sweeps(tmp_path):
    url = url_of(tmp_path / "r.db")
    study = optuna.create_study(study_name="adult-arch-eve-seed0", storage=url, direction="maximize")
    study.set_user_attr("settings", {"space": "arch", "optimizer": "eve", "seed": 0, "configs": 3,
                                     "rungs": [100.0, 300.0], "dataset": "adult"})
    study.set_user_attr("wall_seconds", 4.0)
    study.set_user_attr("winner_test_accuracy", 0.83)
    dist = {"width": optuna.distributions.IntDistribution(1, 1024)}
    for index, (state, rungs) in enumerate([("COMPLETE", {100: 0.80, 300: 0.84}), ("PRUNED", {100: 0.70}),
                                            ("PRUNED", {100: 0.60})]):
        attrs = {f"rung_{b}": {"budget": float(b), "val_acc": a, "val_loss": 1 - a, "charged_units": b,
                               "wall_seconds": b / 100, "backward_passes": 3} for b, a in rungs.items()}
        study.add_trial(optuna.trial.create_trial(
            state=getattr(optuna.trial.TrialState, state), value=0.84 if state == "COMPLETE" else None,
            params={"width": 64}, distributions=dist, intermediate_values=rungs,
            user_attrs={"config_index": index, "config": {"width": 64}, **attrs}))
    sweep = _sweep(dashboard_data(url), "adult-arch-eve-seed0")
    assert sweep["task"] == "adult" and sweep["best"]["score"] == 0.84
    assert sweep["trials"][0]["rungs"][0]["val"] == {"accuracy": 0.80, "loss": pytest.approx(0.2)}
    assert sweep["winner"] == {"index": 0, "score": 0.84, "test": {"accuracy": 0.83}}
    assert [(r["trained"], r["promoted"], r["stopped"]) for r in sweep["ladder"]] == [(3, 1, 2), (1, 0, 0)]


def test_document_is_strict_json_and_its_fingerprint_follows_the_store(sweep_store):
    url, _ = sweep_store
    first = dashboard_data(url)
    json.dumps(first, allow_nan=False)
    assert dashboard_data(url)["fingerprint"] == first["fingerprint"]
    add_generic(url, "one-more", "synthetic-benchmark", trials=1)
    assert dashboard_data(url)["fingerprint"] != first["fingerprint"]


def test_not_a_number_becomes_null():
    record = {"name": "n", "directions": ["maximize"], "user_attrs": {"x": math.nan},
              "trials": [{"number": 0, "state": "COMPLETE", "values": [math.inf], "params": {}, "user_attrs": {},
                          "intermediate_values": {1: math.nan}}]}
    data = build([record])
    json.dumps(data, allow_nan=False)
    study = data["sections"][0]["studies"][0]
    assert study["rows"][0][2] is None and study["curves"][0]["points"] == []


def test_configuration_table_has_a_row_per_trial(sweep_store):
    url, _ = sweep_store
    table = dashboard_data(url)["configurations"]
    keys = [c["key"] for c in table["columns"]]
    assert len(table["rows"]) == 4 * 9
    assert {"config.lr", "config.width", "best_score", "test.accuracy"} <= set(keys)
    numeric = {c["key"]: c["numeric"] for c in table["columns"]}
    assert numeric["config.lr"] and numeric["best_score"] and not numeric["optimizer"]
    winners = [row for row in table["rows"] if str(row[keys.index("state")]).endswith("(winner)")]
    assert len(winners) == 4 and all(row[keys.index("test.accuracy")] == 0.84 for row in winners)


def test_a_missing_store_is_an_error_and_is_not_created(tmp_path):
    path = tmp_path / "absent.db"
    with pytest.raises(StoreError, match="absent.db does not exist"):
        read_store(url_of(path))
    assert not path.exists()
    with pytest.raises(StoreError, match="not an SQLAlchemy URL"):
        read_store("no-such-scheme")


def test_passwords_are_not_shown():
    assert safe_url("postgresql://ann:hunter2@db:5432/runs") == "postgresql://ann:***@db:5432/runs"
    assert "hunter2" not in json.dumps(build([], "postgresql://ann:hunter2@db/runs"))


def test_an_empty_database_is_not_a_results_store(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(StoreError, match="not a results store"):
        read_store(url_of(path))
    assert path.stat().st_size == 0  # nothing was written to it


def test_reads_a_postgresql_store(postgres_url):
    truth = add_sweep(postgres_url, optimizer="eve", seed=7, name="dashboard-pg-eve-seed7")
    sweep = _sweep(dashboard_data(postgres_url), "dashboard-pg-eve-seed7")
    assert sweep["winner"]["index"] == truth["winner"] and [r["trained"] for r in sweep["ladder"]] == [9, 3, 1]
