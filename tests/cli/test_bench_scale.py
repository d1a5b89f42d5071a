"""`eve-search bench scale`: the simulated table over a recorded pool, and its bad input in one line."""

import json
import random

import pytest

from eve_search.cli import main
from eve_search.engine.pool import RecordedPool, TrainerRecord, save_pool


@pytest.fixture
def pool_file(tmp_path):
    rng = random.Random(0)
    budgets = (10, 30, 90)
    rows = [[rng.random() for _ in budgets] for _ in range(40)]
    speed = [rng.choice([0.001, 0.004]) for _ in rows]
    pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=budgets,
                        configs=[{"k": k} for k in range(40)], referee="adam",
                        trainers={"adam": TrainerRecord(score=rows, test=rows,
                                                        seconds=[[b * s for b in budgets] for s in speed])})
    path = tmp_path / "pool.json.gz"
    save_pool(pool, path)
    return path


def test_the_table_the_json_and_the_chart(pool_file, tmp_path, capsys):
    assert main(["bench", "scale", "--pool", str(pool_file), "--cohort-size", "9", "--cohorts", "4",
                 "--workers", "1,4,16", "--seeds", "0,1", "--json", str(tmp_path / "s.json"),
                 "--svg", str(tmp_path / "s.svg")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| method | workers |") and len(table) == 2 + 8 * 3
    document = json.loads((tmp_path / "s.json").read_text())
    assert document["schema"] == "eve-search/bench-scale"
    rows = {(row["method"], row["workers"]): row for row in document["rows"]}
    for method in ("sha", "sha+spec", "stream", "stream+spec", "sha-all"):
        assert all(rows[(method, w)]["same_decisions"] for w in (1, 4, 16))
        assert rows[(method, 1)]["utilisation"]["mean"] == pytest.approx(1.0)
    assert rows[("stream", 16)]["utilisation"]["mean"] > rows[("sha-all", 16)]["utilisation"]["mean"]
    assert (tmp_path / "s.svg").read_text().startswith("<svg")


def test_a_stream_longer_than_the_pool_draws_with_replacement(pool_file, tmp_path, capsys):
    assert main(["bench", "scale", "--pool", str(pool_file), "--cohort-size", "9", "--cohorts", "8",
                 "--with-replacement", "--workers", "1,16", "--seeds", "0", "--methods", "stream",
                 "--json", str(tmp_path / "s.json")]) == 0
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert [row["units"]["mean"] for row in rows] == [rows[0]["units"]["mean"]] * 2
    assert all(row["same_decisions"] for row in rows) and rows[0]["utilisation"]["mean"] == pytest.approx(1.0)


@pytest.mark.parametrize(("argv", "words"), [
    (["--pool", "missing.json"], ["--pool", "missing.json"]),
    (["--cohorts", "100"], ["--cohorts", "the pool holds 40"]),
    (["--trainer", "sgd"], ["--trainer", "'sgd'"]),
    (["--workers", "0"], ["--workers"]),
    (["--workers", "1,1"], ["--workers", "twice"]),
    (["--methods", "fast"], ["--methods", "fast"]),
    (["--jitter", "nan"], ["--jitter", "nan"]),
])
def test_bad_arguments_are_one_line_and_exit_2(pool_file, tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    if argv[0] != "--pool":
        argv = ["--pool", str(pool_file), *argv]
    assert main(["bench", "scale", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(word in err for word in words), err


def test_no_output_may_overwrite_the_pool(pool_file, capsys):
    before = pool_file.read_bytes()
    assert main(["bench", "scale", "--pool", str(pool_file), "--json", str(pool_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--json" in err and "is the --pool file" in err, err
    assert pool_file.read_bytes() == before


def test_a_tampered_pool_is_one_line(tmp_path, capsys):
    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"format": "eve-search-pool", "version": 1, "configs": [{}], "budgets": [1],
                                "trainers": {"adam": {"score": [[0.5]], "test": [[0.5]], "seconds": [[-1]]}},
                                "task": "t", "space": "s", "metric": "accuracy", "mode": "max", "referee": "adam"}))
    assert main(["bench", "scale", "--pool", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "seconds" in err


def test_a_stream_of_cohorts_gives_the_same_sweep_with_one_or_two_worker_processes(tmp_path):
    results = []
    for jobs in (1, 2):
        out = tmp_path / f"jobs-{jobs}.json"
        assert main(["sweep", "--task", "tiny", "--plugin", "tests.tiny_task", "--configs", "12", "--cohort-size", "4",
                     "--rungs", "20,60,120", "--backward-ratio", "2", "--optimizer", "adam", "--jobs", str(jobs),
                     "--workdir", str(tmp_path / f"runs-{jobs}"), "--json", str(out), "--quiet"]) == 0
        document = json.loads(out.read_text())
        (result,) = document["optimizers"].values() if isinstance(document["optimizers"], dict) else \
            document["optimizers"]
        results.append(result)
    one, two = results
    assert one["trials"] == two["trials"] and one["winner"] == two["winner"]
    assert [r["trials"] for r in one["rungs"]] == [12, 6, 3]  # three cohorts of 4: 2 promoted each, then 1
