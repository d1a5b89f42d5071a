"""``eve_search.benchmarks.sweep``: each sweep it times runs the code it was told to run."""

from __future__ import annotations

from pathlib import Path

from eve_search.benchmarks.sweep import overhead_once

ROOT = Path(__file__).resolve().parents[2]


def test_a_sweep_runs_the_source_it_names_whatever_package_the_working_directory_holds(tmp_path, monkeypatch):
    # ``python -m`` puts the working directory first on sys.path: a folder named like the package there
    # must not be what the timed sweep runs (it was, when the benchmark was started from a checkout).
    decoy = tmp_path / "eve_search"
    decoy.mkdir()
    marker = tmp_path / "decoy-imported"
    (decoy / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    row = overhead_once("hp", "adam", 3, (10, 30), 2.0, "local", source=ROOT)
    assert not marker.exists()
    assert row["trial_rungs"] == 4 and row["configs"] == 3 and set(row["scores"]) == {"0", "1", "2"}
