"""searches/busy_machine.py at tiny size: one sweep beside spinning processes (the new thread policy then
runs one thread per CPU they leave free), and the table it prints. Timings are not checked: they are
the script's output, measured on a quiet machine (searches/README.md)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "searches" / "busy_machine.py"
spec = importlib.util.spec_from_file_location("busy_machine", SCRIPT)
busy_machine = importlib.util.module_from_spec(spec)
spec.loader.exec_module(busy_machine)


def test_a_sweep_beside_spinning_processes_runs_one_thread_and_is_tabled(tmp_path, capsys):
    cpus = len(os.sched_getaffinity(0))
    out = tmp_path / "runs.json"
    assert busy_machine.main(["--loads", str(cpus), "--policies", "new", "--repeats", "1", "--optimizers", "adam",
                              "--configs", "3", "--rungs", "10", "--json", str(out)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert run["spinners"] == cpus and run["policy"] == "new" and run["threads"] == 1
    assert run["runnable"] >= cpus and run["training"]["adam"] > 0
    assert run["results"]["adam"]["winner"]["index"] in range(3)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3].startswith("| spinning processes | policy | threads | runnable (mean) | load 1-min (end) |")
    assert lines[-1].startswith(f"| {cpus} | new | 1 | ") and lines[-1].endswith(" | yes |")  # no quiet run: no ratio


def test_the_table_shows_each_load_and_policy_against_its_quiet_run():
    def row(spinners, policy, threads, eve, winner=0):
        return {"spinners": spinners, "policy": policy, "threads": threads, "runnable": spinners + 1.0,
                "load_1min": spinners + 0.5, "training": {"eve": eve}, "results": {"eve": {"winner": winner}}}

    rows = [row(0, "old", 2, 2.0), row(0, "new", 2, 2.0), row(3, "old", 2, 20.0), row(3, "new", 1, 5.0, winner=1)]
    lines = busy_machine.table(rows, ["eve"]).splitlines()
    assert lines[2:] == ["| 0 | old | 2 | 1.0 | 0.5 | 2.00 (1.0x) | yes |",
                         "| 0 | new | 2 | 1.0 | 0.5 | 2.00 (1.0x) | yes |",
                         "| 3 | old | 2 | 4.0 | 3.5 | 20.00 (10.0x) | yes |",
                         "| 3 | new | 1 | 4.0 | 3.5 | 5.00 (2.5x) | no |"]
