"""The main job end to end, in subprocesses: `eve-search adult`, its JSON, resume after SIGKILL, bad input."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

SMALL = ["--configs", "9", "--rungs", "100,300"]


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "eve_search.cli", *args], check=False, capture_output=True, text=True,
                          timeout=timeout)


def strip_timing(document):
    """The result of a sweep without its wall-clock figures (which differ run to run by nature)."""
    document = json.loads(json.dumps(document))
    document.pop("storage")
    document.pop("eve_over_adam_time")
    for result in document["optimizers"].values():
        result.pop("wall_seconds")
        result.pop("training_seconds")
        result.pop("trained")
    return document


def test_two_optimizers_side_by_side_write_the_documented_json(tmp_path):
    out = tmp_path / "out.json"
    result = run("adult", "--space", "arch", "--optimizer", "eve,adam", "--workdir", str(tmp_path), "--json",
                 str(out), "--backward-ratio", "2.0", *SMALL)
    assert result.returncode == 0, result.stderr
    assert "EvE/Adam time ratio" in result.stdout and "best val acc found" in result.stdout
    document = json.loads(out.read_text())
    assert set(document["optimizers"]) == {"eve", "adam"}
    assert document["eve_over_adam_time"]["wall_seconds"] > 0
    for sweep in document["optimizers"].values():
        assert {"wall_seconds", "charged_units", "best", "rungs", "trials"} <= set(sweep)
        assert [r["trials"] for r in sweep["rungs"]] == [9, 3]
        assert [r["promoted"] for r in sweep["rungs"]] == [3, 0]
        assert set(sweep["best"]) >= {"config", "val_acc", "test_acc", "budget"}
        assert 0.7 < sweep["best"]["val_acc"] <= 1 and 0.7 < sweep["best"]["test_acc"] <= 1
        # The best found is the highest validation accuracy recorded at any rung; the winner is the
        # configuration SHA kept to the end.
        seen = max(acc for t in sweep["trials"] for acc in t["val_acc"].values())
        assert sweep["best"]["val_acc"] == seen
        assert sweep["winner"]["index"] in [t["index"] for t in sweep["trials"] if "300" in t["val_acc"]]
        assert 0.7 < sweep["winner"]["test_acc"] <= 1
        assert len(sweep["trials"]) == 9
        assert sum(len(t["val_acc"]) for t in sweep["trials"]) == 12
        assert sweep["charged_units"] >= 9 * 100 + 3 * 200
        assert sweep["backward_ratios"] and set(sweep["backward_ratios"].values()) == {2.0}
    # Same configurations for both optimizers.
    assert [t["config"] for t in document["optimizers"]["eve"]["trials"]] == \
           [t["config"] for t in document["optimizers"]["adam"]["trials"]]


def _checkpoints(workdir):
    folder = workdir / "checkpoints" / "adult-hp-eve-seed0"
    return list(folder.glob("trial-*.pt")) if folder.exists() else []


def _kill_mid_rung(args, workdir):
    process = subprocess.Popen([sys.executable, "-m", "eve_search.cli", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while len(_checkpoints(workdir)) < 3:
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done = len(_checkpoints(workdir))
    assert 3 <= done < 9, f"the kill should land inside rung 1 ({done} of 9 trials done)"
    return done


def test_a_sweep_killed_mid_rung_resumes_to_exactly_the_uninterrupted_result(tmp_path):
    common = ["adult", "--space", "hp", "--quiet", "--backward-ratio", "2.0", *SMALL]
    reference, resumed = tmp_path / "reference", tmp_path / "killed"
    assert run(*common, "--workdir", str(reference), "--json", str(reference / "out.json")).returncode == 0
    _kill_mid_rung([*common, "--workdir", str(resumed)], resumed)
    result = run(*common, "--workdir", str(resumed), "--resume", "--json", str(resumed / "out.json"))
    assert result.returncode == 0, result.stderr
    expected = strip_timing(json.loads((reference / "out.json").read_text()))
    assert strip_timing(json.loads((resumed / "out.json").read_text())) == expected
    # Running it once more trains nothing and reports the same.
    again = run(*common, "--workdir", str(resumed), "--resume", "--json", str(resumed / "again.json"))
    assert strip_timing(json.loads((resumed / "again.json").read_text())) == expected
    assert again.returncode == 0


def test_a_calibrated_sweep_keeps_its_measured_ratio_across_a_kill(tmp_path):
    common = ["adult", "--space", "hp", "--quiet", *SMALL]
    killed = tmp_path / "killed"
    _kill_mid_rung([*common, "--workdir", str(killed)], killed)
    result = run(*common, "--workdir", str(killed), "--resume", "--json", str(killed / "out.json"))
    assert result.returncode == 0, result.stderr
    document = json.loads((killed / "out.json").read_text())
    (ratio,) = document["optimizers"]["eve"]["backward_ratios"].values()
    # A fresh sweep pinned to the ratio measured before the kill ends identically.
    fresh = tmp_path / "fresh"
    assert run(*common, "--workdir", str(fresh), "--backward-ratio", repr(ratio), "--json",
               str(fresh / "out.json")).returncode == 0
    assert strip_timing(json.loads((fresh / "out.json").read_text())) == strip_timing(document)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--optimizer", "adamx"], "argument --optimizer: unknown optimizer 'adamx' (expected a comma-separated list"),
        (["--optimizer", "eve,eve"], "argument --optimizer: 'eve,eve' names an optimizer twice"),
        (["--rungs", "300,100"], "argument --rungs: '300,100': Invalid rungs: 300, 100"),
        (["--space", "lr"], "argument --space: invalid choice: 'lr'"),
        (["--seed", "-1"], "argument --seed: '-1' must be >= 0"),
        (["--cost-mode", "measured", "--backward-ratio", "2"], "--backward-ratio: only the calibrated cost mode"),
        (["--storage", "nosuchdb://x"], "--storage 'nosuchdb://x': cannot open the results store"),
        (["--data-dir", "/nonexistent/adult"], "data_dir '/nonexistent/adult' is not a directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, args, message):
    if "--space" not in args:
        args = ["--space", "hp", *args]
    result = run("adult", "--workdir", str(tmp_path), "--quiet", *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_corrupt_data_is_one_line_and_exit_code_2(tmp_path):
    (tmp_path / "adult.data").write_text("39, State-gov, 77516\n")
    (tmp_path / "adult.test").write_text("|1x3 Cross validator\n")
    result = run("adult", "--space", "hp", "--workdir", str(tmp_path), "--data-dir", str(tmp_path), "--quiet")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "does not match the official file" in result.stderr


def test_an_existing_sweep_is_not_overwritten_without_resume(tmp_path):
    common = ["adult", "--space", "hp", "--quiet", "--workdir", str(tmp_path), "--configs", "3", "--rungs", "20",
              "--backward-ratio", "2"]
    assert run(*common).returncode == 0
    result = run(*common)
    assert result.returncode == 2 and "pass --resume to continue it" in result.stderr


def test_a_missing_optuna_names_the_extra_to_install(tmp_path):
    script = ("import sys; sys.modules['optuna'] = None; from eve_search.cli import main; "
              f"sys.exit(main(['adult', '--space', 'hp', '--quiet', '--workdir', {str(tmp_path)!r}]))")
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True)
    assert result.returncode == 2
    assert "pip install 'eve-search[optuna]'" in result.stderr and result.stderr.count("\n") == 1


def test_import_eve_search_loads_no_optional_dependency():
    script = ("import sys, eve_search; heavy = [m for m in ('optuna', 'ray', 'sqlalchemy', 'matplotlib') "
              "if m in sys.modules]; print(heavy)")
    assert subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True).stdout.strip() == "[]"
