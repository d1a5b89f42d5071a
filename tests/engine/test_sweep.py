import pytest

from eve_search.engine.store import StoreError
from eve_search.engine.sweep import SweepSettings, prepare_sweep
from eve_search.engine.trial import Trial


def settings(**kwargs):
    return SweepSettings(**({"task": "tiny", "space": "tiny", "optimizer": "eve", "configs": 6, "rungs": (30, 60),
                             "backward_ratio": 2.0} | kwargs))


def test_a_prepared_sweep_runs_and_summarizes(tmp_path):
    sweep = prepare_sweep(settings(), storage=f"sqlite:///{tmp_path / 'r.db'}", checkpoint_dir=tmp_path)
    phases = []
    result = sweep.run(lambda phase, rung, done, total, best: phases.append((phase, rung, done, total)))
    assert phases[0] == ("calibrating", 0, 0, 0)
    assert [p[1:] for p in phases[1:]] == [(0, k, 6) for k in range(1, 7)] + [(1, k, 2) for k in range(1, 3)]
    assert result.task == "tiny" and result.metric == "accuracy" and result.trained == 8
    assert [r["trials"] for r in result.rungs] == [6, 2]
    assert result.winner["index"] in [t["index"] for t in result.trials if "60" in t["scores"]]
    assert set(result.backward_ratios.values()) == {2.0}
    assert sweep.store.get("winner")["index"] == result.winner["index"]


def _tested(sweep):
    details = sweep.store.rung_details()
    return {(budget, index): d["test"] for index, rungs in details.items() for budget, d in rungs.items()
            if d.get("test") is not None}


@pytest.mark.parametrize("jobs", [None, 2])
def test_the_test_set_is_scored_once_for_the_best_result_found(tmp_path, evaluated_splits, jobs):
    splits = evaluated_splits
    sweep = prepare_sweep(settings(configs=9), storage=f"sqlite:///{tmp_path / 'r.db'}", checkpoint_dir=tmp_path)
    result = sweep.run(jobs=jobs)
    assert splits.count("test") == 2  # the best result found, and the winner
    best = (result.best["budget"], result.best["index"])
    assert list(_tested(sweep)) == [best]
    # The test metrics are those of the weights that scored best, retrained here from nothing (with one
    # thread, as the --jobs workers train).
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1 if jobs else threads)
    try:
        replayed = Trial("tiny", result.best["config"], "eve", seed=0, index=best[1], backward_ratio=2.0)
        for budget in (30, 60):
            if budget <= best[0]:
                replayed.train_to(budget)
        test = replayed.evaluate("test")
    finally:
        torch.set_num_threads(threads)
    assert result.best["test"] == _tested(sweep)[best] == test


def test_a_killed_sweep_scores_the_best_result_on_the_test_set_by_replaying_it(tmp_path, monkeypatch):
    reference = prepare_sweep(settings(), storage=f"sqlite:///{tmp_path / 'a.db'}", checkpoint_dir=tmp_path / "a").run()
    url = f"sqlite:///{tmp_path / 'b.db'}"
    sweep = prepare_sweep(settings(), storage=url, checkpoint_dir=tmp_path / "b")

    class Killed(Exception):
        pass

    def killed(index, budget):  # the process ends before the best's test metrics are taken
        raise Killed

    monkeypatch.setattr(type(sweep), "test_best", lambda self: killed(0, 0))
    with pytest.raises(Killed):
        sweep.run()
    monkeypatch.undo()
    resumed = prepare_sweep(settings(), storage=url, checkpoint_dir=tmp_path / "b", resume=True).run()
    assert resumed.trained == 0  # every result came from the store; the best was retrained only for its test
    assert resumed.best == reference.best and resumed.winner == reference.winner


def test_everything_that_can_fail_fails_before_training(tmp_path, monkeypatch):
    def must_not_train(self, budget):
        raise AssertionError("trained")

    monkeypatch.setattr(Trial, "train_to", must_not_train)
    with pytest.raises(StoreError, match="cannot open the results store"):
        prepare_sweep(settings(), storage="nosuchdb://x", checkpoint_dir=tmp_path)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    prepare_sweep(settings(), storage=url, checkpoint_dir=tmp_path)
    with pytest.raises(StoreError, match=r"other settings \(rungs\)"):
        prepare_sweep(settings(rungs=(30, 90)), storage=url, checkpoint_dir=tmp_path, resume=True)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rungs": (30.5, 60)}, "Invalid rungs: 30.5, 60"),
    ({"fraction": 0}, "Invalid fraction: 0"),
    ({"optimizer": "adamq"}, "Invalid optimizer: 'adamq'"),
    ({"space": "zzz"}, "Unknown space: 'zzz'"),
    ({"seed": -2}, "Invalid seed: -2"),
    ({"configs": 0}, "Invalid configs: 0"),
    ({"cost_mode": "measured"}, "only the calibrated cost mode takes a frozen ratio"),
    ({"backward_ratio": float("nan")}, "Invalid backward_ratio: nan"),
])
def test_settings_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        settings(**kwargs)


def test_a_ratio_calibrated_on_noisy_timings_is_frozen_with_one_line_that_names_its_spread_and_the_fix(
        tmp_path, monkeypatch, capsys):
    # A busy machine, as calibration sees it: three attempts whose interleaved halves never agree.
    def noisy(self, units=200.0, chunks=2, attempts=3):
        self.last_calibration = {"ratio": 2.4, "reliable": False, "estimates": [1.9, 2.4, 3.3], "spread": 0.38}
        return 2.4

    monkeypatch.setattr(Trial, "calibrate", noisy)
    sweep = prepare_sweep(settings(backward_ratio=None), storage=f"sqlite:///{tmp_path / 'r.db'}",
                          checkpoint_dir=tmp_path)
    ratios = sweep.calibrate()
    assert set(ratios.values()) == {2.4} and sweep.store.get("backward_ratios") == ratios  # frozen, and said so
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == len(ratios) == len(sweep.calibration_notes)
    for line in lines:
        assert line.startswith("eve-search: calibration of ") and "froze backward/forward ratio 2.4" in line
        assert "3 measurements 1.9, 2.4, 3.3; their halves disagreed by 38% at best, expected within 15%" in line
        assert "Pin --backward-ratio 2.4" in line and "measure again on a quiet machine" in line


def test_a_resume_that_would_join_a_sweep_running_in_another_live_process_is_refused_in_one_line(tmp_path):
    import subprocess
    import sys

    from eve_search.engine.sweep import RUNNING_KEY, _process_start, this_process

    url = f"sqlite:///{tmp_path / 'r.db'}"
    sweep = prepare_sweep(settings(), storage=url, checkpoint_dir=tmp_path)
    result = sweep.run()
    assert sweep.store.get(RUNNING_KEY) is None  # a run that ended says so
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        running = {**this_process(), "pid": other.pid, "start": _process_start(other.pid)}
        sweep.store.set(RUNNING_KEY, running)  # as the other process would have written it
        with pytest.raises(StoreError, match=rf"Invalid --resume: sweep '.*' is running now in process {other.pid} "):
            prepare_sweep(settings(), storage=url, checkpoint_dir=tmp_path, resume=True)
    finally:
        other.communicate(b"")
    # Once that process is gone (ended, or killed without a word), the sweep resumes as if nothing ran.
    again = prepare_sweep(settings(), storage=url, checkpoint_dir=tmp_path, resume=True).run()
    assert again.winner == result.winner and again.rungs == result.rungs
    reused = {**this_process(), "pid": 1, "start": "another boot:0"}  # the number of a later, other process
    for tampered in ("pid 1", {"host": "elsewhere", "pid": 1}, {"pid": -3}, [1, 2], reused):
        sweep.store.set(RUNNING_KEY, tampered)  # nothing this machine can check: not a live sweep of its own
        prepare_sweep(settings(), storage=url, checkpoint_dir=tmp_path, resume=True)
