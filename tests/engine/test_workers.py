"""`--jobs N`: a rung's trials trained on worker processes (one thread each), recorded in rung order."""

import dataclasses

import pytest

from eve_search.engine._workers import check_jobs
from eve_search.engine.sweep import SweepSettings, prepare_sweep

pytestmark = pytest.mark.slow  # minutes in all: `make test` starts this file first


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


@pytest.mark.parametrize("beside", [False, True])
def test_a_sweep_interrupted_with_workers_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, beside):
    import functools

    from eve_search.engine import sweep as module

    monkeypatch.setattr(module, "TrialWorkers", functools.partial(module.TrialWorkers, beside=beside))
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


@pytest.mark.parametrize("jobs", [1, 2])  # (one worker on two CPUs or more evaluates beside its training)
def test_a_sweep_with_workers_killed_by_sigkill_resumes_exactly_and_leaves_no_worker(tmp_path, jobs):
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    common = [sys.executable, "-m", "eve_search.cli", "sweep", "--task", "tiny", "--plugin", "tests.tiny_task",
              "--configs", "9", "--rungs", "30,90,180", "--backward-ratio", "2", "--quiet", "--jobs", str(jobs)]

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


def where_evaluated(model, x, y):
    """The tiny task's metrics, and whether they were computed on the worker's main thread."""
    import threading

    from eve_search.tasks import classification_metrics

    return {**classification_metrics(model, x, y),
            "on_main_thread": float(threading.current_thread() is threading.main_thread())}


def tiny_jobs(configs):
    from eve_search.engine._workers import TrialJob

    return [TrialJob(index=index, config=config, optimizer="adam", seed=0, cost_mode="calibrated",
                     backward_ratio=2.0, owner="", checkpoint=None, budgets=(30, 60))
            for index, config in enumerate(configs)]


def answers_of(futures):
    """Each future's answer, or the type and text of what it raised."""
    settled = []
    for future in futures:
        try:
            settled.append(future.result(timeout=120))
        except Exception as error:  # noqa: BLE001
            settled.append((type(error).__name__, str(error)))
    return settled


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_workers_that_evaluate_beside_their_training_give_the_same_sweep_bit_for_bit(tmp_path, monkeypatch,
                                                                                   optimizer):
    import functools

    from eve_search.engine import sweep as module

    workers = module.TrialWorkers
    sweeps = {}
    for name, jobs, beside in [("one-beside", 1, True), ("one-inline", 1, False), ("two-beside", 2, True),
                               ("two-inline", 2, False)]:
        monkeypatch.setattr(module, "TrialWorkers", functools.partial(workers, beside=beside))
        sweeps[name] = run(tmp_path, name, jobs, optimizer=optimizer)
    reference = sweeps.pop("two-inline")
    assert all(sweep == reference for sweep in sweeps.values())
    assert [r["trials"] for r in reference[0]["rungs"]] == [9, 3, 1]


def test_a_worker_evaluates_each_trial_on_its_second_thread_while_the_next_trains_and_answers_them_all():
    import tests.tiny_task  # noqa: F401 registers the tiny space's task
    from eve_search.engine._workers import TrialWorkers
    from eve_search.tasks import get_task

    task = dataclasses.replace(get_task("tiny"), metrics=where_evaluated, _cache={})
    configs = [{"width": width, "depth": 1, "lr": lr, "weight_decay": 1e-4}
               for width, lr in [(8, 1e-2), (16, 3e-3), (8, 2e-2), (16, 1e-2), (8, 5e-3)]]
    results = {}
    for beside in (True, False):
        with TrialWorkers(task, 1, beside=beside) as workers:
            assert workers.beside is beside
            results[beside] = answers_of(workers.train_all([(job, 0) for job in tiny_jobs(configs)]))
    assert {metrics["on_main_thread"] for _, metrics, *_ in results[True]} == {0.0}
    assert {metrics["on_main_thread"] for _, metrics, *_ in results[False]} == {1.0}

    def without_thread(answer):
        score, metrics, charged, _wall, backward, checkpoint = answer
        return score, {k: v for k, v in metrics.items() if k != "on_main_thread"}, charged, backward, checkpoint

    assert [without_thread(a) for a in results[True]] == [without_thread(a) for a in results[False]]
    assert all(checkpoint is None for *_, checkpoint in results[True])  # every trial kept by its worker


def test_a_failing_job_fails_alone_and_the_answers_evaluated_beside_it_still_come_back():
    import tests.tiny_task  # noqa: F401
    from eve_search.engine._workers import TrialWorkers
    from eve_search.tasks import get_task

    good = {"width": 8, "depth": 1, "lr": 1e-2, "weight_decay": 1e-4}
    jobs = tiny_jobs([good, {"depth": 1, "lr": 1e-2, "weight_decay": 1e-4}, good])
    with TrialWorkers(get_task("tiny"), 1, beside=True) as workers:
        first, broken, third = answers_of(workers.train_all([(job, 0) for job in jobs]))
        after = answers_of([workers.train(tiny_jobs([good])[0], 0)])[0]
        saved = workers.save(0, 0).result(timeout=120)
    assert broken == ("KeyError", "'width'")
    assert len(first) == len(third) == 6 and 0 < third[0] <= 1
    assert after == first  # trial 0 again: kept at that budget, so only evaluated again
    assert saved is not None  # and its state comes back on request


def test_answers_still_owed_when_a_worker_dies_or_the_workers_close_never_leave_a_waiter_hanging():
    import os
    import signal
    import time

    import tests.tiny_task  # noqa: F401
    from eve_search.engine._workers import TrialWorkers
    from eve_search.tasks import get_task

    config = {"width": 16, "depth": 1, "lr": 1e-2, "weight_decay": 1e-4}
    long_jobs = [dataclasses.replace(job, budgets=(100_000,)) for job in tiny_jobs([config] * 4)]
    with TrialWorkers(get_task("tiny"), 1, beside=True) as workers:
        workers.wait_until_ready()
        futures = workers.train_all([(job, 0) for job in long_jobs])
        time.sleep(0.2)
        os.kill(workers._started[0].result(), signal.SIGKILL)
        settled = answers_of(futures)
    assert [name for name, _ in settled] == ["BrokenProcessPool"] * 4
    workers = TrialWorkers(get_task("tiny"), 1, beside=True)
    futures = workers.train_all([(dataclasses.replace(job, budgets=(2000,)), 0) for job in tiny_jobs([config] * 4)])
    workers.close()  # cancels what has not started; what runs ends first
    assert all(future.done() for future in futures)
    assert any(future.cancelled() for future in futures)
