"""The Optuna integration on real studies: the synchronous SHA pruner and the multi-worker driver."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from eve_search.integrations.optuna import (
    CohortStalledError,
    PartialRungWarning,
    ShaOptions,
    SynchronousSHAPruner,
    decision_key,
    run_sha,
    run_sweep_on_optuna,
    worker_storage,
)
from eve_search.engine.ledger import promote_top_fraction
from eve_search.engine.sweep import SweepSettings, prepare_sweep
from tests.load import hang_guard
from tests.integrations.tiny_tasks import (
    GATE_VARIABLE,
    TINY_WORKERS_TASK,  # registers tiny-workers and tiny-slow
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.slow  # minutes in all: `make test` starts this file first
REPO = Path(__file__).resolve().parents[2]


# The pruner ---------------------------------------------------------------------------------------


def _study(direction="maximize", storage=None, **pruner_kwargs):
    pruner_kwargs.setdefault("poll_interval", 0.01)
    pruner = SynchronousSHAPruner(**pruner_kwargs)
    return optuna.create_study(direction=direction, storage=storage, pruner=pruner,
                               sampler=optuna.samplers.RandomSampler(seed=0))


def test_nine_threads_keep_nine_three_one_and_the_best():
    def objective(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        for step in range(1, 901):  # a learning curve whose ranking changes after the first rung
            value = x * (1 - math.exp(-step / 100)) + (1.0 if trial.number == 0 and step < 300 else 0.0)
            if step in (100, 300, 900):
                trial.report(value, step)
                if trial.should_prune():
                    raise optuna.TrialPruned()
        return value

    study = _study(rungs=(100, 300, 900), cohort_size=9)
    study.optimize(objective, n_trials=9, n_jobs=9)
    trials = study.trials
    assert [sum(1 for t in trials if step in t.intermediate_values) for step in (100, 300, 900)] == [9, 3, 1]
    assert sorted(t.state for t in trials).count(TrialState.PRUNED) == 8
    for step, key in ((100, decision_key(0, 100)), (300, decision_key(0, 300))):
        scores = {t.number: t.intermediate_values[step] for t in trials if step in t.intermediate_values}
        assert study.user_attrs[key]["promoted"] == promote_top_fraction(scores, 1 / 3)
    # Trial 0 leads the first rung whatever x it drew (threads draw in any order; the others stay below
    # 0.64 there) with a bonus that vanishes later: synchronous SHA judges it at 300
    # against its real cohort, and the survivor is the best configuration.
    assert 0 in study.user_attrs[decision_key(0, 100)]["promoted"]
    assert study.best_trial.params["x"] == max(t.params["x"] for t in trials)


def test_a_report_between_rungs_decides_nothing():
    study = _study(rungs=(100, 300), cohort_size=3)
    trials = [study.ask() for _ in range(3)]
    trials[0].report(0.9, 50)
    assert trials[0].should_prune() is False  # below the first rung: no wait, no decision
    assert decision_key(0, 100) not in study.user_attrs
    for trial, value in zip(trials, (0.9, 0.5, 0.1)):
        trial.report(value, 100)
    assert [t.should_prune() for t in trials] == [False, True, True]
    trials[0].report(0.95, 150)  # between rungs, after its promotion: nothing to decide
    assert trials[0].should_prune() is False
    assert decision_key(0, 300) not in study.user_attrs
    trials[0].report(0.97, 320)  # at or past a rung's budget: counts for it
    assert trials[0].should_prune() is False
    assert study.user_attrs[decision_key(0, 300)]["scores"] == {str(trials[0].number): 0.97}


@pytest.mark.parametrize("direction,values,kept", [("maximize", (float("nan"), 0.1, 0.2), 2),
                                                   ("minimize", (float("nan"), 0.7, 0.5), 2),
                                                   ("minimize", (0.3, float("nan"), 0.3), 0)])
def test_nan_ranks_last_and_ties_go_to_the_lower_number(direction, values, kept):
    study = _study(direction, rungs=(10, 20), cohort_size=3)
    trials = [study.ask() for _ in values]
    for trial, value in zip(trials, values):
        trial.report(value, 10)
    assert [t.should_prune() for t in trials] == [k != kept for k in range(3)]


def test_a_failed_trial_does_not_block_its_cohort():
    study = _study(rungs=(10, 20), cohort_size=3)
    trials = [study.ask() for _ in range(3)]
    trials[0].report(0.4, 10)
    study.tell(trials[1], state=TrialState.FAIL)
    trials[2].report(0.6, 10)
    assert [trials[0].should_prune(), trials[2].should_prune()] == [True, False]
    assert study.user_attrs[decision_key(0, 10)]["stopped"] == [trials[0].number]


def test_too_few_workers_is_one_error_naming_the_fix():
    # All three threads wait at rung 10 for six trials no thread is free to start: refused when that happens
    # (no stall timer); the trials already running end in the cohort closed with them.
    study = _study(rungs=(10, 20), cohort_size=9)

    def objective(trial):
        trial.report(trial.number, 10)
        return 0.0 if not trial.should_prune() else 1.0

    with pytest.raises(CohortStalledError, match=r"n_jobs=9.*cohort_size.*timeout") as error, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialRungWarning)
        study.optimize(objective, n_trials=9, n_jobs=3)
    assert "\n" not in str(error.value) and len(study.trials) == 3


def test_a_sequential_worker_told_of_other_workers_warns_then_stops_at_the_guard(tmp_path):
    # workers=2: on RDB storage another worker process could still start the cohort's trials, so the pruner
    # waits; it says so once, and stall_seconds (a last guard, here short) ends the wait in one line.
    study = _study(storage=f"sqlite:///{tmp_path / 'alone.db'}", rungs=(10, 20), cohort_size=3, stall_seconds=0.5,
                   workers=2)

    def objective(trial):
        trial.report(trial.suggest_float("x", 0.0, 1.0), 10)
        return 0.0 if not trial.should_prune() else 1.0

    with pytest.warns(RuntimeWarning, match="on shared storage only other worker processes can start them"), \
            pytest.raises(CohortStalledError, match=r"waited stall_seconds=0.5 s for 2 trial\(s\) that have not "
                                                    r"started.*start more worker processes"):
        study.optimize(objective, n_trials=3)
    assert [t.state for t in study.trials] == [TrialState.FAIL]


def test_timeout_decides_without_trials_that_did_not_report():
    study = _study(rungs=(10, 20), cohort_size=3, timeout=0.3)
    first = study.ask()
    first.report(0.5, 10)
    assert first.should_prune() is False  # alone after the timeout: promoted
    late = study.ask()
    late.report(0.9, 10)
    assert late.should_prune() is True  # the rung was decided without it
    assert study.user_attrs[decision_key(0, 10)]["promoted"] == [first.number]


def test_pruner_rejects_bad_arguments():
    with pytest.raises(ValueError, match="cohort_size: 0"):
        SynchronousSHAPruner(cohort_size=0)
    with pytest.raises(ValueError, match="timeout: -1"):
        SynchronousSHAPruner(timeout=-1)
    with pytest.raises(ValueError, match="rungs"):
        SynchronousSHAPruner(rungs=(300, 100))
    study = optuna.create_study(pruner=SynchronousSHAPruner(rungs=(10,)))
    trial = study.ask()
    trial.report(1.0, 10)
    with pytest.raises(ValueError, match="cohort_size: None"):
        trial.should_prune()


_SLEEPER = """
import sys, time, optuna
from eve_search.integrations.optuna import SynchronousSHAPruner
storage = optuna.storages.RDBStorage(sys.argv[1], heartbeat_interval=1, grace_period=2)
study = optuna.load_study(study_name="killed", storage=storage,
                          pruner=SynchronousSHAPruner(rungs=(10, 20), cohort_size=3))
def objective(trial):
    trial.set_user_attr("training", True)  # its heartbeat thread has started by now
    time.sleep(600)  # "training" towards the first rung when it is killed
study.optimize(objective, n_trials=1)
"""


def test_a_worker_killed_mid_rung_is_detected_by_heartbeat(tmp_path):
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    storage = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(study_name="killed", storage=storage, direction="maximize",
                                pruner=SynchronousSHAPruner(rungs=(10, 20), cohort_size=3, poll_interval=0.05))
    study.enqueue_trial({"x": 0.0})  # trial 0 goes to the worker that will die
    worker = subprocess.Popen([sys.executable, "-c", _SLEEPER, url], cwd=REPO)
    try:
        deadline = time.monotonic() + 600  # a hang guard, sized for a machine ten times slower
        while not any("training" in t.user_attrs for t in study.get_trials(states=(TrialState.RUNNING,))):
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.1)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()

        def objective(trial):
            trial.report(trial.suggest_float("x", 0.0, 1.0), 10)
            return 0.0 if not trial.should_prune() else 1.0

        study.optimize(objective, n_trials=2, n_jobs=2)
    finally:
        worker.kill()
    states = [t.state for t in study.trials]
    assert states[0] == TrialState.FAIL
    decision = study.user_attrs[decision_key(0, 10)]
    assert sorted(decision["promoted"] + decision["stopped"]) == [1, 2]


# The driver ---------------------------------------------------------------------------------------


def _settings(task, configs, rungs=(10, 30, 90), cohort_size=None):
    return SweepSettings(task=task, space="tiny", optimizer="eve", seed=0, configs=configs, rungs=rungs,
                         backward_ratio=2.0, cohort_size=cohort_size)


def _fresh_database(postgres_url, name):
    """A new, empty database on the session's PostgreSQL server; its URL."""
    from sqlalchemy import create_engine, text

    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return postgres_url.replace("/eve?", f"/{name}?")


def _comparable(result):
    values = result.as_dict()
    for key in ("wall_seconds", "training_seconds", "trained"):
        values.pop(key)
    return values


def _check_study(url, name, configs):
    """Exactly one live trial per configuration, ended; every FAIL trial retried by a later one."""
    study = optuna.load_study(study_name=name, storage=url)
    by_index: dict[int, list] = {}
    for trial in study.trials:
        by_index.setdefault(trial.user_attrs["config_index"], []).append(trial)
    assert sorted(by_index) == list(range(configs))  # none lost
    failed = 0
    for chain in by_index.values():
        live = [t for t in chain if t.state != TrialState.FAIL]
        assert len(live) == 1 and live[0].state in (TrialState.PRUNED, TrialState.COMPLETE)  # none duplicated
        failed += len(chain) - 1
        for dead in chain[:-1]:
            assert dead.state == TrialState.FAIL and chain[-1].system_attrs["failed_trial"] == chain[0].number
    return study, failed


def test_one_worker_equals_the_local_engine(tmp_path):
    settings = _settings("tiny-workers", 12)
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'local.db'}", checkpoint_dir=tmp_path / "a").run()
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    sweep = prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "b")
    result = run_sweep_on_optuna(sweep, workers=1, heartbeat_interval=1)
    assert _comparable(result) == _comparable(local)
    assert result.trained == 12 + 4 + 2
    study, failed = _check_study(url, settings.name, 12)
    assert failed == 0
    assert [t.state for t in study.trials].count(TrialState.COMPLETE) == 2
    # Resuming a finished sweep trains nothing and reports the same result.
    again = run_sweep_on_optuna(prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "b", resume=True))
    assert again.trained == 0 and _comparable(again) == _comparable(local)


def test_through_optunas_own_calls_one_worker_still_equals_the_local_engine(tmp_path, monkeypatch):
    """The calls a storage other than SQLite or PostgreSQL gets (a claim, a result, a rung's endings, one
    Optuna call each) give the same sweep as the transactions that replace them."""
    import eve_search.engine._stores as stores
    from eve_search.integrations._optuna_driver import _backend, _worker

    settings = _settings("tiny-workers", 12)
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'local.db'}", checkpoint_dir=tmp_path / "a").run()
    monkeypatch.setattr(_worker, "claim_at_once", lambda *args, **kwargs: None)
    monkeypatch.setattr(_worker, "end_waiting_at_once", lambda *args, **kwargs: None)
    monkeypatch.setattr(_backend, "requeue_at_once", lambda *args, **kwargs: False)
    monkeypatch.setattr(stores, "_fast_path", None)  # every other write through Optuna's public calls
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    result = run_sweep_on_optuna(prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "b"), workers=1,
                                 heartbeat_interval=1)
    assert _comparable(result) == _comparable(local)
    study, failed = _check_study(url, settings.name, 12)
    assert failed == 0 and [t.state for t in study.trials].count(TrialState.COMPLETE) == 2


def test_the_driver_scores_the_test_set_as_often_as_the_local_engine(tmp_path, evaluated_splits):
    splits = evaluated_splits
    settings = _settings("tiny-workers", 12)
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'local.db'}", checkpoint_dir=tmp_path / "a").run()
    by_local = splits.count("test")
    splits.clear()
    sweep = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'optuna.db'}", checkpoint_dir=tmp_path / "b")
    result = run_sweep_on_optuna(sweep, workers=1, heartbeat_interval=1)
    assert _comparable(result) == _comparable(local)
    # The best result found and the winner, each scored once (not every improvement on the way).
    assert splits.count("test") == by_local == 2
    assert [(budget, index) for index, rungs in sweep.store.rung_details().items() for budget, d in rungs.items()
            if d.get("test") is not None] == [(result.best["budget"], result.best["index"])]


@pytest.mark.parametrize("damaged", [False, True])
def test_a_resumed_driver_scores_the_best_from_the_checkpoint_that_holds_it(tmp_path, monkeypatch, damaged):
    """A best whose state this process did not keep (another worker trained it, or the process ended
    before scoring it) is scored from its checkpoint when that holds its rung, without retraining; a
    damaged checkpoint is replayed into the same test metrics."""
    from eve_search.engine.sweep import Sweep
    from eve_search.engine.trial import Trial

    settings = _settings("tiny-workers", 12)
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'local.db'}", checkpoint_dir=tmp_path / "a").run()
    assert local.best["budget"] == 90  # this sweep's best is at its last rung, whose checkpoints the driver keeps
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    sweep = prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "b")
    monkeypatch.setattr(Sweep, "test_best", lambda self: None)  # ended before the best's test set is scored
    run_sweep_on_optuna(sweep, workers=1, heartbeat_interval=1)
    monkeypatch.undo()
    if damaged:
        sweep.store.checkpoint_path(local.best["index"]).write_bytes(b"not a checkpoint")
    trained = []
    train_to = Trial.train_to
    monkeypatch.setattr(Trial, "train_to", lambda self, budget: (trained.append(budget), train_to(self, budget))[1])
    resumed = run_sweep_on_optuna(prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "b", resume=True))
    assert trained == ([10, 30, 90] if damaged else [])
    assert _comparable(resumed) == _comparable(local)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_optuna_dashboard_serves_the_driven_study(tmp_path):
    settings = _settings("tiny-workers", 6, rungs=(10, 30))
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    run_sweep_on_optuna(prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "c"), workers=1)
    port = _free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "optuna-dashboard"), url, "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600  # a hang guard, sized for a machine ten times slower
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as response:
                    studies = json.load(response)["study_summaries"]
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.3)
        (summary,) = [s for s in studies if s["study_name"] == settings.name]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}",
                                    timeout=10) as response:
            detail = json.load(response)
    finally:
        server.terminate()
        server.wait(timeout=30)
    trials = detail["trials"]
    assert len(trials) == 6
    steps = sorted({v["step"] for t in trials for v in t["intermediate_values"]})
    assert steps == [10, 30]
    assert sorted(t["state"] for t in trials) == ["Complete", "Complete"] + ["Pruned"] * 4
    assert all(any(a["key"] == "rung_10" for a in t["user_attrs"]) for t in trials)


def test_run_sha_with_the_study_sampler_and_queued_configurations(tmp_path):
    url = f"sqlite:///{tmp_path / 'sha.db'}"
    storage = worker_storage(url, heartbeat_interval=1)
    study = optuna.create_study(study_name="sha", storage=storage, direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=3))
    queued = {"width": 16, "depth": 1, "lr": 0.02, "weight_decay": 1e-4}
    study.enqueue_trial(queued)
    report = run_sha(study, TINY_WORKERS_TASK, 6, space="tiny", storage=storage, checkpoint_dir=tmp_path / "ck",
                     rungs=(10, 30))
    trials = sorted(study.trials, key=lambda t: t.user_attrs["config_index"])
    assert trials[0].params == queued and trials[0].user_attrs["config"] == queued
    assert len({t.params["lr"] for t in trials}) == 6
    assert [t.state for t in trials].count(TrialState.COMPLETE) == 2
    assert report.trained == 6 + 2 and report.pruned == 4 and report.completed == 2
    assert study.best_value == max(t.intermediate_values[30] for t in trials if 30 in t.intermediate_values)
    # As Optuna's study.tell leaves them: a pruned trial's value is its last reported score.
    assert all(t.value == t.intermediate_values[t.last_step] for t in trials if t.state == TrialState.PRUNED)
    assert len(list((tmp_path / "ck").glob("*/trial-*.pt"))) == 2  # pruned trials' checkpoints are deleted
    with pytest.raises(ValueError, match="other settings"):
        run_sha(study, TINY_WORKERS_TASK, 6, space="tiny", storage=storage, checkpoint_dir=tmp_path / "ck",
                rungs=(10, 40))


def test_run_sha_takes_sha_options_and_the_same_settings_as_keywords(tmp_path):
    storage = worker_storage(f"sqlite:///{tmp_path / 'sha.db'}", heartbeat_interval=1)
    study = optuna.create_study(study_name="sha", storage=storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    options = ShaOptions(rungs=[10, 30], fraction=0.5, backward_ratio=2.0, poll_interval=0.05)
    report = run_sha(study, TINY_WORKERS_TASK, 4, space="tiny", storage=storage, checkpoint_dir=tmp_path / "ck",
                     options=options)
    assert report.trained == 4 + 2 and report.pruned == 2 and report.completed == 2
    assert study.user_attrs["sha_settings"] == {
        "task": TINY_WORKERS_TASK.name, "n_trials": 4, "optimizer": "eve", "seed": 0, "rungs": [10, 30],
        "fraction": 0.5, "cost_mode": "calibrated", "backward_ratio": 2.0}
    # The same settings as keywords are the same study: nothing is left to train.
    again = run_sha(study, TINY_WORKERS_TASK, 4, space="tiny", storage=storage, checkpoint_dir=tmp_path / "ck",
                    rungs=(10, 30), fraction=0.5, backward_ratio=2.0, poll_interval=0.05)
    assert again.trained == again.pruned == again.completed == 0
    # An options object or its fields as keywords, not both: one line, before the study is touched.
    with pytest.raises(ValueError, match=r"^Invalid options: ShaOptions\(.*\) together with the keywords fraction "
                                         r"\(expected options= or its fields as keywords, not both\)$"):
        run_sha(None, TINY_WORKERS_TASK, 4, space="tiny", storage=None, checkpoint_dir=tmp_path / "ck",
                options=options, fraction=1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rungs": (30, 10)}, "Invalid rungs: 30, 10 (expected strictly increasing cumulative budgets)"),
        ({"fraction": 0}, "Invalid fraction: 0 (expected a number in (0, 1])"),
        ({"optimizer": "no-such-optimizer"}, "Invalid optimizer: 'no-such-optimizer' (expected one of "),
        ({"seed": -1}, "Invalid seed: -1 (expected an int >= 0)"),
        ({"cost_mode": "wall"}, "Invalid cost_mode: 'wall' (expected 'calibrated' or 'measured')"),
        ({"backward_ratio": 0.0}, "Invalid backward_ratio: 0.0 (expected a finite number > 0, or None)"),
        ({"cost_mode": "measured", "backward_ratio": 2.0},
         "Invalid backward_ratio: 2.0 (expected None: only the calibrated cost mode takes a frozen ratio)"),
        ({"data_dir": 3}, "Invalid data_dir: 3 (expected a path or None)"),
        ({"poll_interval": 0}, "Invalid poll_interval: 0 (expected a finite number of seconds > 0)"),
        ({"cohort_size": 0}, "Invalid cohort_size: 0 (expected an int >= 1 of configurations, or None)"),
    ],
)
def test_run_sha_refuses_a_bad_option_in_one_line_before_touching_the_study(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        ShaOptions(**kwargs)
    assert "\n" not in str(error.value)
    # Checked first: no study or storage is needed to be told.
    with pytest.raises(ValueError, match=re.escape(message)):
        run_sha(None, TINY_WORKERS_TASK, 3, space="tiny", storage=None, checkpoint_dir="unused", **kwargs)


def test_run_sha_refuses_an_unknown_keyword_as_python_does():
    with pytest.raises(TypeError, match=r"^run_sha\(\) got an unexpected keyword argument 'workers'$"):
        run_sha(None, TINY_WORKERS_TASK, 3, space="tiny", storage=None, checkpoint_dir="unused", workers=2)
    with pytest.raises(TypeError, match=r"^Invalid options: 'fast' \(expected a ShaOptions or None\)$"):
        run_sha(None, TINY_WORKERS_TASK, 3, space="tiny", storage=None, checkpoint_dir="unused", options="fast")


def test_four_postgres_workers_equal_local_even_when_one_is_killed(tmp_path, postgres_url, monkeypatch):
    settings = _settings("tiny-slow", 48)
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'local.db'}", checkpoint_dir=tmp_path / "a").run()
    expected = _comparable(local)

    # Four workers, nobody killed.
    url = _fresh_database(postgres_url, "workers4")
    # A generous grace period: on a starved machine a live worker's heartbeat can be late, and its trial
    # would then be failed and retried (correctly, but this run is the one without failures).
    result = run_sweep_on_optuna(prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "b"), workers=4,
                                 heartbeat_interval=1, grace_period=30)
    assert _comparable(result) == expected
    _, failed = _check_study(url, settings.name, 48)
    assert failed == 0

    # Four workers, one SIGKILLed while it holds a configuration (training it towards a rung). The gate of
    # tiny_tasks (events, no clock) catches one worker process in its training and holds it there; worker 0
    # trains only once it has.
    url = _fresh_database(postgres_url, "killed")
    sweep = prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "c")
    gate = tmp_path / "gate"
    monkeypatch.setenv(GATE_VARIABLE, str(gate))  # before the workers are spawned: they inherit it
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(result=run_sweep_on_optuna(
        sweep, workers=4, heartbeat_interval=1, grace_period=3)))
    runner.start()
    with hang_guard():  # the runner cannot end before a worker reaches the gate: only a hang is guarded
        while not gate.exists():
            assert runner.is_alive(), "the sweep ended before a worker trained"
            time.sleep(0.02)
    pid = int(gate.read_text())
    study = optuna.load_study(study_name=settings.name, storage=url)
    held = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if str(t.user_attrs.get("worker", "")).rpartition(":")[2] == str(pid)]
    assert held, "the worker caught training holds no trial"
    os.kill(pid, signal.SIGKILL)
    runner.join(timeout=600)  # a hang guard, sized for a machine ten times slower
    assert not runner.is_alive()
    assert _comparable(outcome["result"]) == expected
    study, failed = _check_study(url, settings.name, 48)
    assert failed >= 1 and all(study.trials[number].state == TrialState.FAIL for number in held)


def test_a_stream_of_cohorts_gives_the_same_decisions_and_winner_for_one_two_and_four_workers(tmp_path, postgres_url,
                                                                                              monkeypatch):
    # Three cohorts of four configurations: a worker whose cohort waits at a rung for a trial another worker
    # trains takes the next cohort's first rung; each cohort is decided on its own, as the local engine does.
    from eve_search.engine.sha import SynchronousSuccessiveHalving
    from eve_search.integrations._optuna_driver import ShaWorker

    settings = _settings("tiny-workers", 12, rungs=(10, 30), cohort_size=4)
    trained = {"local": [], "optuna": []}
    local_train, worker_train = SynchronousSuccessiveHalving._train, ShaWorker._train
    monkeypatch.setattr(SynchronousSuccessiveHalving, "_train", lambda self, index, rung: (
        trained["local"].append((index, rung)), local_train(self, index, rung))[1])
    monkeypatch.setattr(ShaWorker, "_train", lambda self, index, rung, *args: (
        trained["optuna"].append((index, rung)), worker_train(self, index, rung, *args))[1])
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'local.db'}", checkpoint_dir=tmp_path / "a").run()
    expected = _comparable(local)
    assert [r["trials"] for r in expected["rungs"]] == [12, 6]  # 4 -> 2 in each cohort
    for workers, url in ((1, f"sqlite:///{tmp_path / 'one.db'}"), (2, f"sqlite:///{tmp_path / 'two.db'}"),
                         (4, _fresh_database(postgres_url, "stream4"))):
        sweep = prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / f"w{workers}")
        # A grace period for a loaded machine: a live worker's late heartbeat must not fail its trial here.
        result = run_sweep_on_optuna(sweep, workers=workers, heartbeat_interval=1, grace_period=30)
        assert _comparable(result) == expected, workers
        if workers == 1:  # one worker takes the work in the stream's order, the local engine's
            assert trained["optuna"] == trained["local"]
            assert trained["local"][4:7] == [(1, 1), (2, 1), (4, 0)]  # cohort 0's promoted, then cohort 1
        study, failed = _check_study(url, settings.name, 12)
        assert failed == 0
        assert [t.state for t in study.trials].count(TrialState.COMPLETE) == 2 * 3  # each cohort's last rung


def _count_writes(monkeypatch):
    from eve_search.integrations._optuna_driver import _worker

    writes = []
    save = _worker.save_atomically
    monkeypatch.setattr(_worker, "save_atomically", lambda data, path: (writes.append(path.name), save(data, path)))
    return writes


def _keeping(monkeypatch, keep_bytes):
    import dataclasses

    from eve_search.integrations._optuna_driver import ShaWorker

    original = ShaWorker.__init__
    monkeypatch.setattr(ShaWorker, "__init__", lambda self, study, storage, settings, **k: original(
        self, study, storage, dataclasses.replace(settings, keep_bytes=keep_bytes), **k))


@pytest.mark.parametrize(("keep_bytes", "writes"), [(None, 4 + 2 + 2), (0, 12 + 4 + 2)])
def test_a_worker_writes_the_checkpoints_of_promoted_trials_only_unless_it_keeps_none(tmp_path, monkeypatch,
                                                                                      keep_bytes, writes):
    settings = _settings("tiny-workers", 12)
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'local.db'}", checkpoint_dir=tmp_path / "a").run()
    if keep_bytes is not None:
        _keeping(monkeypatch, keep_bytes)
    written = _count_writes(monkeypatch)
    sweep = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'optuna.db'}", checkpoint_dir=tmp_path / "b")
    result = run_sweep_on_optuna(sweep, workers=1, heartbeat_interval=1)
    assert _comparable(result) == _comparable(local)
    # Kept in memory, the trials a rung stops are never written: the 4 promoted at the first rung, 2 at
    # the second, and the last rung's 2; keeping none, every result is written.
    assert len(written) == writes


def test_an_interrupted_worker_writes_what_it_kept_and_the_sweep_resumes_exactly(tmp_path, monkeypatch):
    settings = _settings("tiny-workers", 12)
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'local.db'}", checkpoint_dir=tmp_path / "a").run()
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    sweep = prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "b")
    seen = {}

    def interrupt(phase, rung, reported, cohort, best):
        if phase == "training" and rung == 1:  # the first rung decided, nothing of the second trained
            folder = sweep.store.checkpoint_dir
            seen["files"] = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep_on_optuna(sweep, workers=1, heartbeat_interval=1, progress=interrupt)
    assert seen["files"] == []  # every trial of the first rung was held in memory
    details = sweep.store.rung_details()
    scores = {i: done[settings.rungs[0]]["score"] for i, done in details.items()}
    promoted = promote_top_fraction(dict(sorted(scores.items())), settings.fraction)
    assert sorted(p.name for p in sweep.store.checkpoint_dir.iterdir()) == sorted(f"trial-{i:04d}.pt" for i in promoted)
    written = _count_writes(monkeypatch)
    resumed = run_sweep_on_optuna(prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "b", resume=True),
                                  workers=1, heartbeat_interval=1)
    assert _comparable(resumed) == _comparable(local)
    assert len(written) == 2 + 2  # continued from the four checkpoints, nothing replayed


@pytest.mark.parametrize(("value", "mode"), [(0.0, "calibrated"), (2.0, "measured"), (float("nan"), "calibrated")])
def test_every_caller_checks_a_backward_ratio_with_one_message(value, mode):
    from eve_search.engine.sweep import SweepSettings
    from eve_search.experiments.protocol import ProtocolSettings
    from eve_search.optim.budget import check_backward_ratio

    with pytest.raises(ValueError, match=r"^Invalid backward_ratio: ") as expected:
        check_backward_ratio(value, mode)
    for build in (lambda: SweepSettings(space="tiny", optimizer="eve", cost_mode=mode, backward_ratio=value),
                  lambda: ShaOptions(cost_mode=mode, backward_ratio=value),
                  lambda: ProtocolSettings("tiny", optimizers=("eve",), cost_mode=mode, backward_ratio=value)):
        with pytest.raises(ValueError) as error:
            build()
        assert str(error.value) == str(expected.value)


def test_sha_options_are_built_on_a_sweeps_settings():
    from eve_search.engine.sweep import SweepSettings

    settings = SweepSettings(space="tiny", optimizer="adam", seed=3, rungs=(10, 30), fraction=0.5, backward_ratio=2.0,
                             cohort_size=4)
    options = ShaOptions(**settings.search_fields(), poll_interval=0.05)
    assert (options.optimizer, options.seed, options.rungs, options.fraction, options.backward_ratio,
            options.cohort_size, options.poll_interval) == ("adam", 3, (10, 30), 0.5, 2.0, 4, 0.05)
