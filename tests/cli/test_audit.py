"""``eve-search audit adult --task tiny`` end to end in this process: runs, store, resume, bad input."""

import json

import optuna
import pytest

from eve_search.experiments.audit import AUDIT_KIND, AuditStore, prepare_audit, run_audit
from eve_search.cli import main
from eve_search.tasks.spaces import get_space
from eve_search.engine.trial import Trial

AUDIT = ["audit", "adult", "--task", "tiny", "--seeds", "0-1", "--configs", "4", "--budgets", "10,30",
         "--backward-ratio", "2", "--resamples", "100", "--quiet"]
TRAINERS = ("eve", "adam", "sgd_momentum")


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """One finished audit: its folder and JSON document."""
    folder = tmp_path_factory.mktemp("audit")
    assert main([*AUDIT, "--workdir", str(folder), "--json", str(folder / "audit.json")]) == 0
    return folder, json.loads((folder / "audit.json").read_text())


def _studies(folder):
    url = f"sqlite:///{folder / 'results.db'}"
    return {summary.study_name: optuna.load_study(study_name=summary.study_name, storage=url)
            for summary in optuna.get_all_study_summaries(url)}


def test_every_trainer_trains_every_configuration_once_per_seed(audited):
    folder, document = audited
    assert document["trained_runs"] == len(TRAINERS) * 2 * 4
    studies = _studies(folder)
    assert set(studies) == {f"audit-tiny-tiny-{t}-seed{s}" for t in TRAINERS for s in (0, 1)}
    for study in studies.values():
        assert study.user_attrs["kind"] == AUDIT_KIND and study.user_attrs["truth"] == "adam"
        assert study.user_attrs["settings"]["budgets"] == [10, 30] and study.user_attrs["wall_seconds"] > 0
        for trial in study.get_trials():
            assert trial.state == optuna.trial.TrialState.COMPLETE
            assert sorted(trial.intermediate_values) == [10, 30]
            first, last = trial.user_attrs["rung_10"], trial.user_attrs["rung_30"]
            assert 10 <= first["charged_units"] < last["charged_units"] and last["charged_units"] >= 30
            assert 0 < first["wall_seconds"] <= last["wall_seconds"]
            assert {"val", "test", "score", "backward_passes"} <= set(last)
            assert trial.value == last["score"] == last["val"]["accuracy"]
    assert not list((folder / "checkpoints").rglob("*.pt"))  # a finished run keeps no checkpoint


def test_grid_points_lie_on_one_trajectory(audited):
    folder, _ = audited
    config = get_space("tiny").sample(4, 0)[2]
    trial = Trial("tiny", config, "eve", seed=1, index=2, backward_ratio=2.0)
    trial.train_to(10)
    at_10 = trial.evaluate()["accuracy"]
    trial.train_to(30)  # continued, not restarted
    recorded = _studies(folder)["audit-tiny-tiny-eve-seed1"].get_trials()[2].user_attrs
    assert recorded["rung_10"]["score"] == at_10
    assert recorded["rung_30"]["score"] == trial.evaluate()["accuracy"]
    assert recorded["rung_30"]["charged_units"] == trial.charged_units


def test_report_measures_each_proxy_against_the_truth(audited):
    _, document = audited
    report = document["spaces"]["tiny"]
    assert report["seeds"] == [0, 1] and report["incomplete_seeds"] == []
    assert report["truth"] == "adam" and report["truth_budget"] == 30 and report["regret_unit"] == "points"
    assert list(report["proxies"]) == list(TRAINERS)
    adam_final = report["proxies"]["adam"]["budgets"]["30"]  # the truth's own runs
    assert adam_final["tau"]["mean"] == pytest.approx(1.0) and adam_final["regret"]["mean"] == 0.0
    assert adam_final["keep"]["kept"] == 2
    for proxy in TRAINERS:
        rows = report["proxies"][proxy]["budgets"]
        assert set(rows) == {"10", "30"}
        assert 0 < rows["10"]["wall_seconds"]["mean"] < rows["30"]["wall_seconds"]["mean"]
        for row in rows.values():
            assert -1 <= row["tau"]["mean"] <= 1 and row["regret"]["mean"] >= 0
            assert row["regret"]["interval"][0] <= row["regret"]["interval"][1]
        assert set(report["proxies"][proxy]["verdict"]) >= {"keeps_best", "regret_under", "both"}
    assert report["proxies"]["adam"]["verdict"]["both"]["budget"] in (10, 30)
    assert report["noise_floor"]["pairs"] == [[0, 1], [1, 0]]
    for seed in ("0", "1"):
        assert set(report["truth_runs"][seed]) >= {"best_index", "best_config", "best_score", "best_test"}


def test_a_finished_audit_is_read_back_without_training(audited, capsys):
    folder, document = audited
    args = [a for a in AUDIT if a != "--quiet"]
    assert main([*args, "--workdir", str(folder), "--json", str(folder / "again.json")]) == 0
    printed = capsys.readouterr().out
    assert "Proxy audit, tiny/tiny" in printed and "sgd_momentum" in printed and "runs trained now: 0" in printed
    again = json.loads((folder / "again.json").read_text())
    assert again["trained_runs"] == 0 and again["spaces"] == document["spaces"]


def test_a_killed_audit_continues_and_ends_as_an_uninterrupted_one(audited, tmp_path, monkeypatch):
    _, document = audited
    calls = {"n": 0}
    original = AuditStore.record

    def dies_on_the_eighth_record(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 8:  # the second grid point of a run: its first is recorded with a checkpoint
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AuditStore, "record", dies_on_the_eighth_record)
    assert main([*AUDIT, "--workdir", str(tmp_path)]) == 130
    assert list((tmp_path / "checkpoints").rglob("*.pt"))  # the interrupted run's checkpoint at 10 units
    monkeypatch.setattr(AuditStore, "record", original)
    assert main([*AUDIT, "--workdir", str(tmp_path), "--json", str(tmp_path / "resumed.json")]) == 0
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed["trained_runs"] == len(TRAINERS) * 2 * 4 - 3  # three runs had finished before the kill
    for proxy in TRAINERS:
        for budget in ("10", "30"):
            ours, theirs = resumed["spaces"]["tiny"]["proxies"][proxy]["budgets"][budget], \
                document["spaces"]["tiny"]["proxies"][proxy]["budgets"][budget]
            assert ours["tau"] == theirs["tau"] and ours["regret"] == theirs["regret"]
            assert ours["charged_units"] == theirs["charged_units"]


def test_run_audit_reports_progress_and_skips_finished_runs(audited):
    folder, _ = audited
    prepared = prepare_audit("tiny", "tiny", ["eve", "adam"], [0], storage=f"sqlite:///{folder / 'results.db'}",
                             checkpoint_dir=folder / "checkpoints", budgets=(10, 30), configs=4, backward_ratio=2.0)
    seen = []
    assert run_audit(prepared, lambda *args: seen.append(args)) == 0
    assert [(trainer, index) for _, _, trainer, index, _, _ in seen] == [(t, i) for i in range(4) for t in ("eve", "adam")]
    assert seen[-1][-2:] == (8, 8)


@pytest.mark.parametrize(("args", "message"), [
    (["--truth", "eve,adam"], "argument --truth: expected one reference trainer"),
    (["--budgets", "30"], "argument --budgets: 30 (expected at least one cheaper budget"),
    (["--budgets", "30,10"], "argument --budgets: '30,10'"),
    (["--budgets", "ten"], "argument --budgets: 'ten' is not a comma-separated list"),
    (["--proxies", "eve,nope"], "unknown optimizer 'nope'"),
    (["--seeds", "x"], "'x' is not a seed list"),
    (["--task", "nope"], "argument --task: 'nope' is not a registered task"),
    (["--space", "nope"], "unknown space 'nope'"),
    (["--regret-threshold", "-1"], "argument --regret-threshold"),
    (["--cost-mode", "measured"], "argument --backward-ratio: only the calibrated cost mode"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main([*AUDIT, "--workdir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "results.db").exists()  # refused before the store is opened


def test_output_path_and_store_are_checked_before_training(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    assert main([*AUDIT, "--workdir", str(tmp_path), "--json", str(tmp_path / "out")]) == 2
    assert "argument --json" in capsys.readouterr().err and not (tmp_path / "results.db").exists()
    assert main([*AUDIT, "--workdir", str(tmp_path), "--seeds", "0", "--budgets", "5,10"]) == 0
    # the same studies with another grid: refused before any run trains
    assert main([*AUDIT, "--workdir", str(tmp_path), "--seeds", "0", "--budgets", "5,20"]) == 2
    err = capsys.readouterr().err
    assert "other settings (budgets)" in err and err.count("\n") == 1
    assert main([*AUDIT, "--workdir", str(tmp_path), "--storage", "nosuchdb://x"]) == 2
    assert "--storage 'nosuchdb://x'" in capsys.readouterr().err
