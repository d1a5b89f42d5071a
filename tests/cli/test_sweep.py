"""`eve-search adult` and `eve-search sweep`: in-process on the tiny task, one real SIGKILL subprocess test."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eve_search.cli import main
from eve_search.engine.trial import Trial

pytestmark = pytest.mark.slow  # minutes in all: `make test` starts this file first
TINY = ["sweep", "--task", "tiny", "--configs", "9", "--rungs", "30,90,180", "--backward-ratio", "2", "--quiet"]
FIXTURES = Path(__file__).parents[1] / "fixtures"


def strip_timing(document):
    """The result of a sweep without its wall-clock figures (which differ run to run by nature)."""
    document = json.loads(json.dumps(document))
    document.pop("storage")
    document.pop("eve_over_adam_time")
    for result in document["optimizers"].values():
        for key in ("wall_seconds", "training_seconds", "trained"):
            result.pop(key)
    return document


def test_a_user_task_runs_through_sha_store_and_json(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main([*TINY, "--optimizer", "eve,adam", "--workdir", str(tmp_path), "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["schema"] == "eve-search/sweep" and document["schema_version"] == 1
    assert document["task"] == "tiny" and document["space"] == "tiny" and document["metric"] == "accuracy"
    assert set(document["optimizers"]) == {"eve", "adam"}
    for sweep in document["optimizers"].values():
        assert [r["trials"] for r in sweep["rungs"]] == [9, 3, 1]
        assert [r["promoted"] for r in sweep["rungs"]] == [3, 1, 0]
        seen = max(score for t in sweep["trials"] for score in t["scores"].values())
        assert sweep["best"]["score"] == seen and 0 < sweep["best"]["test"]["accuracy"] <= 1
        finalists = [t["index"] for t in sweep["trials"] if "180" in t["scores"]]
        assert finalists == [sweep["winner"]["index"]]
        assert sum(len(t["scores"]) for t in sweep["trials"]) == 13
        assert sweep["charged_units"] >= 30 * 9 + 60 * 3 + 90
        assert set(sweep["backward_ratios"].values()) == {2.0}
        assert sweep["trained"] == 13
    # The same configurations for both optimizers.
    assert [t["config"] for t in document["optimizers"]["eve"]["trials"]] == \
           [t["config"] for t in document["optimizers"]["adam"]["trials"]]


def test_an_interrupted_user_task_resumes_to_exactly_the_uninterrupted_result(tmp_path, monkeypatch, capsys):
    reference = tmp_path / "reference"
    assert main([*TINY, "--workdir", str(reference), "--json", str(reference / "out.json")]) == 0
    calls = {"n": 0}
    original = Trial.train_to

    def interrupted(self, budget):
        calls["n"] += 1
        if calls["n"] == 11:  # inside rung 2
            raise KeyboardInterrupt
        original(self, budget)

    killed = tmp_path / "killed"
    monkeypatch.setattr(Trial, "train_to", interrupted)
    assert main([*TINY, "--workdir", str(killed)]) == 130
    assert "continue with --resume" in capsys.readouterr().err
    monkeypatch.setattr(Trial, "train_to", original)
    assert main([*TINY, "--workdir", str(killed), "--resume", "--json", str(killed / "out.json")]) == 0
    resumed = json.loads((killed / "out.json").read_text())
    assert strip_timing(resumed) == strip_timing(json.loads((reference / "out.json").read_text()))
    assert 0 < resumed["optimizers"]["eve"]["trained"] < 13
    # Once more: nothing to train, the same report.
    assert main([*TINY, "--workdir", str(killed), "--resume", "--json", str(killed / "again.json")]) == 0
    again = json.loads((killed / "again.json").read_text())
    assert again["optimizers"]["eve"]["trained"] == 0 and strip_timing(again) == strip_timing(resumed)


def test_the_table_names_the_metric_and_the_winner(tmp_path, capsys):
    assert main([*TINY[:-1], "--optimizer", "eve,adam", "--workdir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "task tiny, space tiny" in printed and "best val acc found" in printed
    assert "EvE/Adam time ratio" in printed and "calibrated cost, backward/forward ratio" in printed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--optimizer", "adamx"], "argument --optimizer: unknown optimizer 'adamx' (expected a comma-separated list"),
        (["--optimizer", "eve,eve"], "argument --optimizer: 'eve,eve' names an optimizer twice"),
        (["--rungs", "300,100"], "argument --rungs: '300,100': Invalid rungs: 300, 100"),
        (["--rungs", "20.5,41"], "argument --rungs: '20.5,41': Invalid rungs: 20.5, 41 (expected positive whole"),
        (["--rungs", "a,b"], "argument --rungs: 'a,b' is not a comma-separated list of budgets"),
        (["--fraction", "1.5"], "argument --fraction: '1.5' is not a number in (0, 1]"),
        (["--space", "lr"], "argument --space: invalid choice 'lr'"),
        (["--seed", "-1"], "argument --seed: '-1' must be >= 0"),
        (["--cost-mode", "measured"], "--backward-ratio: only the calibrated cost mode"),
        (["--storage", "nosuchdb://x"], "--storage 'nosuchdb://x': cannot open the results store"),
        (["--json", "/dev/null/out.json"], "argument --json: '/dev/null/out.json': '/dev/null' is not a directory"),
        (["--json", "."], "argument --json: '.' is a directory"),
        (["--address", "auto"], "argument --address: only --backend ray takes a cluster address"),
        (["--workers", "2"], "argument --workers: only --backend optuna runs worker processes"),
        (["--plugin", "no_such_module_xyz"], "argument --plugin: 'no_such_module_xyz' could not be imported"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_trains(tmp_path, capsys, monkeypatch, args, message):
    def must_not_train(self, budget):
        raise AssertionError("trained before checking the arguments")

    monkeypatch.setattr(Trial, "train_to", must_not_train)
    assert main([*TINY, "--workdir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err


def test_an_unknown_task_is_one_line(tmp_path, capsys):
    assert main(["sweep", "--task", "nope", "--workdir", str(tmp_path), "--quiet"]) == 2
    assert "argument --task: 'nope' is not a registered task" in capsys.readouterr().err


def test_an_existing_sweep_is_not_overwritten_without_resume(tmp_path, capsys):
    common = [*TINY, "--workdir", str(tmp_path), "--configs", "3", "--rungs", "20"]
    assert main(common) == 0
    assert main(common) == 2 and "pass --resume to continue it" in capsys.readouterr().err
    assert main([*common, "--resume", "--seed", "0", "--optimizer", "adam,eve"]) == 0  # adam is new: trained


def test_a_second_store_in_the_same_workdir_does_not_load_the_first_ones_checkpoints(tmp_path, capsys):
    """Two sweeps with the same settings and different --storage used to share checkpoint files and crash."""
    common = [*TINY, "--workdir", str(tmp_path)]
    assert main([*common, "--storage", f"sqlite:///{tmp_path / 'one.db'}", "--json", str(tmp_path / "1.json")]) == 0
    assert main([*common, "--storage", f"sqlite:///{tmp_path / 'two.db'}", "--json", str(tmp_path / "2.json")]) == 0
    one, two = (json.loads((tmp_path / f"{k}.json").read_text()) for k in (1, 2))
    assert strip_timing(one | {"storage": 0}) == strip_timing(two | {"storage": 0})


def test_a_corrupt_checkpoint_is_replayed_on_resume_without_a_traceback(tmp_path, monkeypatch, capsys):
    calls = {"n": 0}
    original = Trial.train_to

    def interrupted(self, budget):
        calls["n"] += 1
        if calls["n"] == 11:
            raise KeyboardInterrupt
        original(self, budget)

    monkeypatch.setattr(Trial, "train_to", interrupted)
    assert main([*TINY, "--workdir", str(tmp_path)]) == 130
    monkeypatch.setattr(Trial, "train_to", original)
    checkpoints = list((tmp_path / "checkpoints").glob("*/trial-*.pt"))
    assert checkpoints
    for path in checkpoints:
        path.write_bytes(b"garbage" * 10)
    assert main([*TINY, "--workdir", str(tmp_path), "--resume", "--json", str(tmp_path / "out.json")]) == 0
    reference = tmp_path / "reference"
    assert main([*TINY, "--workdir", str(reference), "--json", str(reference / "out.json")]) == 0
    assert strip_timing(json.loads((tmp_path / "out.json").read_text())) == \
        strip_timing(json.loads((reference / "out.json").read_text()))


def test_corrupt_adult_data_is_one_line_and_exit_code_2(tmp_path, capsys):
    (tmp_path / "adult.data").write_text("39, State-gov, 77516\n")
    (tmp_path / "adult.test").write_text("|1x3 Cross validator\n")
    assert main(["adult", "--space", "hp", "--workdir", str(tmp_path), "--data-dir", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not match the official file" in err
    assert main(["adult", "--space", "hp", "--workdir", str(tmp_path), "--data-dir", "/nonexistent", "--quiet"]) == 2
    assert "data_dir '/nonexistent' is not a directory" in capsys.readouterr().err


# The numeric environment the recorded run used. Matrix products (MKL) and PyTorch's own kernels choose
# their code, and so their rounding, by the CPU and the thread count. Pinned to MKL's COMPATIBLE branch
# (the one branch MKL keeps reproducible on Intel and other processors alike; an Intel-only branch such as
# AVX2 is ignored elsewhere, without a word), PyTorch's AVX2 kernels and two threads, the same run gives the
# same bits on any x86-64 machine with AVX2.
RECORDED_ENVIRONMENT = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2"}


def test_adult_hp_sweep_reproduces_the_recorded_rungs_scores_and_winner(tmp_path):
    """`eve-search adult --space hp --optimizer eve --backward-ratio 2 --seed 0`: every rung, promotion and
    validation accuracy equals the recorded run (tests/fixtures), so a change of engine, task or store that
    alters any result fails here. It runs in a process of its own, in the recorded numeric environment.

    The recorded run also holds Adam's sweep (`--optimizer eve,adam`); the suite reproduces EvE's, the
    trainer eve-search ships, at half the time. Adam goes through the same trial, engine and store, which
    other tests compare bit for bit across backends and worker counts."""
    out = tmp_path / "out.json"
    command = [sys.executable, "-m", "eve_search.cli", "adult", "--space", "hp", "--optimizer", "eve",
               "--backward-ratio", "2", "--seed", "0", "--workdir", str(tmp_path), "--quiet", "--json", str(out)]
    done = subprocess.run(command, env={**os.environ, **RECORDED_ENVIRONMENT}, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads((FIXTURES / "adult_hp_seed0_ratio2.json").read_text())["optimizers"]
    document = json.loads(out.read_text())["optimizers"]
    for optimizer in ("eve",):
        ours, before = document[optimizer], recorded[optimizer]
        assert [(r["trials"], r["promoted"]) for r in ours["rungs"]] == \
               [(r["trials"], r["promoted"]) for r in before["rungs"]]
        assert [int(r["budget"]) for r in ours["rungs"]] == [100, 300, 900, 2700, 3000]
        assert {str(t["index"]): t["scores"] for t in ours["trials"]} == before["scores"]
        assert ours["winner"]["index"] == before["winner"]
        assert ours["charged_units"] == before["charged_units"]


# The one real subprocess test: SIGKILL at a random moment of the main job, then --resume.

SMALL = ["--configs", "9", "--rungs", "100,300"]


def _checkpoints(workdir):
    return list((workdir / "checkpoints").glob("adult-hp-eve-seed0-*/trial-*.pt"))


def test_the_main_job_killed_by_sigkill_resumes_to_exactly_the_uninterrupted_result(tmp_path):
    common = [sys.executable, "-m", "eve_search.cli", "adult", "--space", "hp", "--quiet", "--backward-ratio", "2",
              *SMALL]
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    subprocess.run([*common, "--workdir", str(reference), "--json", str(reference / "out.json")], check=True,
                   capture_output=True, timeout=900)
    process = subprocess.Popen([*common, "--workdir", str(killed)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while len(_checkpoints(killed)) < 3:
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    result = subprocess.run([*common, "--workdir", str(killed), "--resume", "--json", str(killed / "out.json")],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert strip_timing(json.loads((killed / "out.json").read_text())) == \
        strip_timing(json.loads((reference / "out.json").read_text()))
