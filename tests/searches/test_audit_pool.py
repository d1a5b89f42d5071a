"""searches/audit_pool.py: the proxy audit of a pool file, as the results page shows it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from eve_search.engine.pool import RecordedPool, TrainerRecord, save_pool

SCRIPT = Path(__file__).resolve().parents[2] / "searches" / "audit_pool.py"
spec = importlib.util.spec_from_file_location("audit_pool", SCRIPT)
audit_pool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(audit_pool)

# Six configurations: Adam at full budget ranks them 5 > 4 > ... > 0; a good proxy agrees from its first
# budget, a bad one ranks them backwards until the end.
TRUTH = [[0.1 * k, 0.1 * k + 0.05] for k in range(6)]
BACKWARDS = [[0.6 - 0.1 * k, 0.1 * k] for k in range(6)]
SECONDS = [[1.0, 3.0]] * 6


def _pool(tmp_path) -> Path:
    pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(10, 30),
                        configs=[{"k": k} for k in range(6)], referee="adam",
                        trainers={"adam": TrainerRecord(score=TRUTH, test=TRUTH, seconds=SECONDS),
                                  "sgd": TrainerRecord(score=BACKWARDS, test=BACKWARDS, seconds=SECONDS)})
    path = tmp_path / "pool.json.gz"
    save_pool(pool, path)
    return path


def test_the_table_says_where_each_trainer_keeps_the_true_best(tmp_path, capsys):
    out = tmp_path / "audit.json"
    assert audit_pool.main(["--pool", str(_pool(tmp_path)), "--proxies", "adam,sgd", "--resamples", "50",
                            "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| adam | 10 | 6 | 1.000 [1.000, 1.000] |" in text and "| sgd | 10 | 6 | -1.000 [-1.000, -1.000] |" in text
    assert "- adam: the cheapest budget at which the true best is in its top third: 10 units (6 s for all configurations)." in text
    assert "- sgd: the cheapest budget at which the true best is in its top third: 30 units (18 s for all configurations)." in text
    report = json.loads(out.read_text())
    assert report["configs"] == 6 and report["truth_runs"]["0"]["best_config"] == {"k": 5}


def test_a_trainer_the_pool_lacks_is_one_line_and_exit_2(tmp_path, capsys):
    assert audit_pool.main(["--pool", str(_pool(tmp_path)), "--proxies", "eve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Invalid proxies: 'eve'" in err


def test_a_tampered_pool_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "pool.json"
    path.write_text('{"kind": "not a pool"}')
    assert audit_pool.main(["--pool", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
