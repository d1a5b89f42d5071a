"""`--jobs N`: a rung's trials trained on worker processes (one thread each), recorded in rung order."""

import pytest

from eve_search.engine._workers import check_jobs
from eve_search.engine.sweep import SweepSettings, prepare_sweep


def settings(**kwargs):
    return SweepSettings(**({"task": "tiny", "space": "tiny", "optimizer": "eve", "configs": 9, "rungs": (30, 90, 120),
                             "backward_ratio": 2.0} | kwargs))


def run(tmp_path, name, jobs, **kwargs):
    sweep = prepare_sweep(settings(**kwargs), storage=f"sqlite:///{tmp_path / name}.db",
                          checkpoint_dir=tmp_path / name)
    result = sweep.run(jobs=jobs).as_dict()
    details = {index: {budget: {k: v for k, v in d.items() if k != "wall_seconds"} for budget, d in rungs.items()}
               for index, rungs in sweep.store.rung_details().items()}
    states = {t.number: (t.state, t.value, t.intermediate_values) for t in sweep.store.study.get_trials()}
    for key in ("wall_seconds", "training_seconds"):
        result.pop(key)
    return result, details, states


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_one_and_two_workers_give_the_same_sweep_bit_for_bit(tmp_path, optimizer):
    one = run(tmp_path, "one", 1, optimizer=optimizer)
    two = run(tmp_path, "two", 2, optimizer=optimizer)
    assert one == two
    result, details, _ = two
    assert [r["trials"] for r in result["rungs"]] == [9, 3, 1]
    assert any("test" in d for rungs in details.values() for d in rungs.values())  # new bests were tested


def test_the_parent_of_workers_never_builds_a_trial(tmp_path, monkeypatch):
    """It records, decides and tests new bests from the workers' checkpoints, model only: no optimizer
    (whose first use imports torch._dynamo), no optimizer state."""
    from eve_search.engine.sweep import Sweep

    monkeypatch.setattr(Sweep, "make_trial", lambda self, index: pytest.fail(f"the parent built trial {index}"))
    result, details, _ = run(tmp_path, "parent", 2)
    assert "test" in result["winner"] and any("test" in d for rungs in details.values() for d in rungs.values())


def test_workers_calibrate_where_the_trials_train(tmp_path):
    result, _, _ = run(tmp_path, "calibrated", 2, backward_ratio=None)
    assert len(result["backward_ratios"]) >= 1 and all(r > 0 for r in result["backward_ratios"].values())


def test_a_sweep_interrupted_with_workers_resumes_to_the_uninterrupted_result(tmp_path):
    reference = run(tmp_path, "reference", 2)
    storage, checkpoints = f"sqlite:///{tmp_path / 'killed'}.db", tmp_path / "killed"
    results = []

    def progress(phase, rung, done, total, best):
        if phase == "training":
            results.append(rung)
            if len(results) == 11:  # in the second rung
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare_sweep(settings(), storage=storage, checkpoint_dir=checkpoints).run(progress, jobs=2)
    sweep = prepare_sweep(settings(), storage=storage, checkpoint_dir=checkpoints, resume=True)
    result = sweep.run(jobs=2).as_dict()
    assert 0 < result["trained"] < 13
    for key in ("wall_seconds", "training_seconds", "trained"):
        result.pop(key)
        reference[0].pop(key, None)
    assert result == reference[0]


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True])
def test_bad_jobs_are_named(jobs):
    with pytest.raises(ValueError, match="Invalid jobs"):
        check_jobs(jobs)


def test_a_sweep_with_workers_killed_by_sigkill_resumes_exactly_and_leaves_no_worker(tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    common = [sys.executable, "-m", "eve_search.cli", "sweep", "--task", "tiny", "--plugin", "tests.tiny_task",
              "--configs", "9", "--rungs", "30,90,180", "--backward-ratio", "2", "--quiet", "--jobs", "2"]

    def summary(path):
        document = json.loads(path.read_text())["optimizers"]["eve"]
        return {k: v for k, v in document.items() if k not in ("wall_seconds", "training_seconds", "trained")}

    reference, killed = tmp_path / "reference", tmp_path / "killed"
    subprocess.run([*common, "--workdir", str(reference), "--json", str(reference / "out.json")], check=True,
                   capture_output=True, timeout=600, cwd=root)
    process = subprocess.Popen([*common, "--workdir", str(killed)], cwd=root, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while len(list((killed / "checkpoints").glob("*/trial-*.pt"))) < 3:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    def descendants(pid):
        children = [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, check=False,
                                                   text=True).stdout.split()]
        return children + [grandchild for child in children for grandchild in descendants(child)]

    workers = descendants(process.pid)  # the fork server, the workers forked from it, the resource tracker
    assert len(workers) >= 3
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 30

    def alive(pid):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            return stat.rsplit(")", 1)[1].split()[0] != "Z" and "multiprocessing" in Path(
                f"/proc/{pid}/cmdline").read_text(errors="ignore")
        except OSError:
            return False

    while any(alive(pid) for pid in workers):
        assert time.monotonic() < deadline, "a worker outlived its killed parent"
        time.sleep(0.1)
    subprocess.run([*common, "--workdir", str(killed), "--resume", "--json", str(killed / "out.json")], check=True,
                   capture_output=True, timeout=600, cwd=root)
    assert summary(killed / "out.json") == summary(reference / "out.json")


def test_workers_that_keep_their_trials_give_the_sweep_of_workers_that_send_every_checkpoint(tmp_path,
                                                                                            monkeypatch):
    import functools

    from eve_search.engine import sweep as module
    from eve_search.engine.store import SweepStore

    checkpoints = []
    record = SweepStore.record
    monkeypatch.setattr(SweepStore, "record", lambda self, index, budget, details, checkpoint: (
        checkpoints.append(checkpoint is not None), record(self, index, budget, details, checkpoint))[1])
    kept = run(tmp_path, "kept", 2)
    assert checkpoints and not any(checkpoints)  # every trial stayed with its worker; only promoted ones were saved
    monkeypatch.setattr(module, "TrialWorkers", functools.partial(module.TrialWorkers, keep_bytes=0))
    checkpoints.clear()
    sent = run(tmp_path, "sent", 2)
    assert checkpoints and all(checkpoints)
    assert kept == sent
