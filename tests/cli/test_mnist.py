"""The paper's MNIST protocol end to end on tiny generated IDX data, through the command line."""

from __future__ import annotations

import json
import math

import optuna
import pytest

from eve_search.cli import main
from eve_search.data import FASHION_MNIST_DIR
from tests.data.test_idx import write_dataset



def command(tmp_path, *extra):
    return ["mnist", "--data-dir", str(tmp_path / "idx"), "--width", "16", "--depth", "1", "--budget", "30",
            "--eval-every", "10", "--backward-ratio", "2", "--optimizer", "eve,adam", "--lrs", "1e-3,1e-2",
            "--workdir", str(tmp_path / "work"), "--quiet", *extra]


@pytest.fixture
def idx(tmp_path):
    write_dataset(tmp_path / "idx", train=600, test=100)
    return tmp_path


def load_json(path):
    return json.loads(path.read_text())


def test_protocol_runs_every_optimizer_lr_and_seed_and_keeps_the_best_validation_snapshot(idx, capsys):
    out = idx / "out.json"
    assert main(command(idx, "--seeds", "0", "--json", str(out))) == 0
    summary = load_json(out)
    assert summary["dataset"].startswith("unidentified MNIST-format data in")  # never called MNIST
    assert summary["task"] == "mnist" and summary["trained_now"] == 4
    runs = summary["runs"]
    assert sorted((r["optimizer"], r["lr"]) for r in runs) == [("adam", 1e-3), ("adam", 1e-2), ("eve", 1e-3),
                                                                ("eve", 1e-2)]
    for run in runs:
        assert run["charged_units"] >= 30 and run["wall_seconds"] > 0
        assert [round(units) >= mark for (units, _, _), mark in zip(run["curve"], (10, 20, 30))] == [True] * 3
        losses = [loss for _, loss, _ in run["curve"]]
        kept = losses.index(min(losses))
        assert run["val"]["loss"] == min(losses) and run["kept_units"] == run["curve"][kept][0]
        assert 0.0 <= run["test"]["accuracy"] <= 1.0 and math.isfinite(run["test"]["loss"])
    for method in ("eve", "adam"):
        info = summary["methods"][method]
        by_lr = info["by_lr"]
        best = max(by_lr, key=lambda lr: by_lr[lr]["val"])
        assert f"{info['lr_by_val']:g}" == best
    assert summary["backward_ratios"] == {"eve": 2.0, "adam": 2.0}

    storage = optuna.storages.RDBStorage(f"sqlite:///{idx / 'work' / 'results.db'}")
    study = optuna.load_study(study_name="mnist-protocol-B30", storage=storage)
    assert study.user_attrs["kind"] == "protocol"
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert sorted((t.params["optimizer"], t.params["lr"], t.params["seed"]) for t in trials) == sorted(
        (r["optimizer"], r["lr"], r["seed"]) for r in runs)
    assert all(t.value == t.user_attrs["run"]["val"]["accuracy"] for t in trials)


def test_resume_skips_finished_runs_and_the_grid_may_grow(idx, capsys):
    first, second, fresh = idx / "1.json", idx / "2.json", idx / "3.json"
    assert main(command(idx, "--seeds", "0", "--json", str(first))) == 0
    capsys.readouterr()
    assert main(command(idx, "--seeds", "0-1")) == 2  # the store already holds it: --resume is required
    assert "pass --resume" in capsys.readouterr().err
    assert main(command(idx, "--seeds", "0-1", "--resume", "--json", str(second))) == 0
    grown = load_json(second)
    assert grown["trained_now"] == 4 and grown["runs_finished"] == 8
    before = {(r["optimizer"], r["lr"], r["seed"]): r for r in load_json(first)["runs"]}
    after = {(r["optimizer"], r["lr"], r["seed"]): r for r in grown["runs"]}
    assert all(after[key] == {**run} for key, run in before.items())  # stored records, not retrained
    assert main(command(idx, "--seeds", "0-1", "--resume", "--json", str(fresh))) == 0
    assert load_json(fresh)["trained_now"] == 0
    # a resumed protocol must keep its defining settings
    assert main([*command(idx, "--seeds", "0", "--resume"), "--weight-decay", "0"]) == 2
    assert "other settings (weight_decay)" in capsys.readouterr().err


def test_report_only_trains_nothing_and_compares_only_rates_run_for_every_seed(idx, capsys):
    assert main(command(idx, "--report-only")) == 2  # nothing stored yet: one line, exit 2
    assert "holds no protocol 'mnist-protocol-B30' to report" in capsys.readouterr().err
    # A reduced grid: both rates at seed 0, then more seeds at 1e-2 only.
    assert main(command(idx, "--seeds", "0")) == 0
    assert main(command(idx, "--seeds", "1-2", "--lrs", "1e-2", "--resume")) == 0
    out = idx / "report.json"
    assert main(command(idx, "--seeds", "0-2", "--report-only", "--json", str(out))) == 0
    report = load_json(out)
    assert report["trained_now"] == 0 and report["runs_finished"] == 8  # of 12 requested
    for method in ("eve", "adam"):
        info = report["methods"][method]
        assert info["by_lr"]["0.01"]["seeds"] == [0, 1, 2] and info["by_lr"]["0.001"]["seeds"] == [0]
        assert info["lr_by_val"] == 0.01 and info["all_seeds"]  # the 1-seed rate does not compete


def test_one_seed_gives_one_result(idx, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(command(idx, "--seeds", "3", "--optimizer", "eve", "--lrs", "1e-2", "--json", str(a))) == 0
    assert main([*command(idx, "--seeds", "3", "--optimizer", "eve", "--lrs", "1e-2", "--json", str(b)),
                 "--workdir", str(tmp_path / "other")]) == 0
    ra, rb = load_json(a)["runs"][0], load_json(b)["runs"][0]
    assert (ra["test"], ra["val"], ra["curve"]) == (rb["test"], rb["val"], rb["curve"])


@pytest.mark.parametrize("extra, message", [
    (["--subset", "100"], "argument --subset: 100 (expected at least one batch, 256)"),
    (["--lrs", "0"], "argument --lrs"),
    (["--optimizer", "adamx"], "unknown optimizer 'adamx'"),
    (["--cost-mode", "measured"], "only the calibrated cost mode takes a frozen ratio"),
])
def test_bad_input_is_one_line_and_exit_2(idx, capsys, extra, message):
    assert main([*command(idx, "--seeds", "0"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_broken_data_folder_is_one_line(tmp_path, capsys):
    write_dataset(tmp_path / "idx")
    (tmp_path / "idx" / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08")
    assert main(command(tmp_path, "--seeds", "0")) == 2
    err = capsys.readouterr().err.strip()
    assert "t10k-labels-idx1-ubyte: truncated" in err and "\n" not in err


def test_fashion_mnist_is_never_called_mnist(tmp_path, capsys):
    args = ["mnist", "--data-dir", str(FASHION_MNIST_DIR), "--dataset-name", "MNIST", "--workdir", str(tmp_path),
            "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--dataset-name: 'MNIST', but the checksums" in err and err.strip().endswith("are those of Fashion-MNIST")
