"""The Ray Tune scheduler and trainable on a real local Ray (2 CPUs), a killed driver, a killed actor, a
simulated multi-node cluster, and the ``--backend ray`` sweep against the local engine."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import ray
from ray import tune
from ray.tune.execution import class_cache

from eve_search import InputError
from eve_search.integrations._ray_sweep import _tune_settings
from eve_search.integrations.ray import (
    STATE_FILE,
    EveTrainable,
    SynchronousSHAScheduler,
    SynchronousSHAWarning,
    load_scheduler_state,
    run_sweep_on_ray,
)
from eve_search.engine.ledger import RungLedger
from eve_search.engine.sweep import SweepSettings, prepare_sweep
from eve_search.engine.trial import Trial
from tests.integrations.ray_dropin_trainables import EnvironmentTrainable, NoCostTrainable
from tests.integrations.ray_helpers import (
    CONFIGS,
    RAY_TINY,
    MarkedTrainable,
    UserEveTrainable,
    param_space,
)

pytestmark = pytest.mark.slow  # minutes in all: `make test` starts this file first
ROOT = Path(__file__).resolve().parents[2]
TUNE_DEFAULT_ENV = dict(class_cache.DEFAULT_ENV_VARS)  # what Tune gives every trainable actor, as imported
RUNGS = (100, 300, 900)


@pytest.fixture(scope="module")
def ray_address():
    ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


class Collect(tune.Callback):
    """Every result of every trial, in arrival order, on the driver."""

    def __init__(self):
        self.results = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results.append((int(trial.config["trial_index"]), dict(result)))


def sweep_tuner(storage: Path, name: str, *, collect=None, max_failures=0, **trainable_kwargs) -> tune.Tuner:
    trainable = tune.with_parameters(MarkedTrainable, task=RAY_TINY, rungs=RUNGS, backward_ratio=2.0,
                                     **trainable_kwargs)
    return tune.Tuner(
        trainable, param_space=param_space(),
        tune_config=tune.TuneConfig(metric="accuracy", mode="max", reuse_actors=True,
                                    scheduler=SynchronousSHAScheduler(time_attr="eval_cost", rungs=RUNGS)),
        run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=0,
                                  callbacks=[collect] if collect is not None else [],
                                  failure_config=tune.FailureConfig(max_failures=max_failures)))


def outcome(grid, experiment: Path) -> dict:
    """What a sweep ends with: each configuration's last result and status, and every rung's decision
    by configuration index."""
    index = {r.metrics["trial_id"]: int(r.config["trial_index"]) for r in grid}
    state = load_scheduler_state(experiment)
    ledger = RungLedger(RUNGS)
    ledger.load_state_dict(state["ledger"])
    return {
        "final": {int(r.config["trial_index"]): (r.metrics["budget"], r.metrics["eval_cost"], r.metrics["accuracy"],
                                                  r.metrics["training_iteration"], r.error is None) for r in grid},
        "decisions": [(d.budget, [index[t] for t in d.promoted], sorted(index[t] for t in d.stopped))
                      for d in ledger.decisions()],
        "scores": {index[t]: [ledger.score(t, k) for k in range(len(RUNGS))] for t in ledger.members},
    }


@pytest.fixture(scope="module")
def uninterrupted(ray_address, tmp_path_factory):
    """The 9-trial sweep run once, without faults. It also scores the test split of every result that can be
    the best (``test_metrics="best"``), which changes nothing of the training: the sweeps that are killed,
    restored or spread over nodes, run without it, must end exactly as this one."""
    storage = tmp_path_factory.mktemp("ray-uninterrupted")
    collect = Collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid = sweep_tuner(storage, "sweep", collect=collect, test_metrics="best").fit()
    assert [str(w.message) for w in caught if issubclass(w.category, SynchronousSHAWarning)] == []
    return outcome(grid, storage / "sweep"), collect.results


def test_nine_trials_three_rungs_pause_and_resume(uninterrupted):
    result, history = uninterrupted
    decisions = result["decisions"]
    assert [(budget, len(promoted) + len(stopped), len(promoted)) for budget, promoted, stopped in decisions] == \
        [(100, 9, 3), (300, 3, 1), (900, 1, 0)]
    winners_0, winner_1 = decisions[0][1], decisions[1][1][0]
    # Each trial stops at its rung: losers of rung 100 never trained past it.
    for index, (budget, cost, _, iterations, ok) in result["final"].items():
        assert ok
        expected = 900 if index == winner_1 else 300 if index in winners_0 else 100
        assert budget == expected and expected <= cost < expected + 5
        assert iterations == RUNGS.index(expected) + 1
    # Paused and resumed from checkpoints, never restarted: the eval_cost of every trial only grows,
    # and each result equals a trial trained without stopping.
    for index in range(len(CONFIGS)):
        reports = [r for i, r in history if i == index]
        costs = [r["eval_cost"] for r in reports]
        assert costs == sorted(costs) and costs[0] >= 100
        straight = Trial(RAY_TINY, CONFIGS[index], "eve", seed=0, index=index, backward_ratio=2.0)
        for report in reports:
            straight.train_to(report["budget"])
            assert report["eval_cost"] == straight.charged_units
            assert report["accuracy"] == straight.evaluate()["accuracy"]
    assert sorted(decisions[0][1], key=lambda i: -result["scores"][i][0]) == decisions[0][1]


def test_bad_arguments_name_the_argument():
    with pytest.raises(InputError, match=r"Invalid rungs: 300, 100"):
        SynchronousSHAScheduler(rungs=(300, 100))
    with pytest.raises(InputError, match=r"Invalid fraction: 0 "):
        SynchronousSHAScheduler(fraction=0)
    with pytest.raises(InputError, match=r"Invalid fraction: 1.5"):
        SynchronousSHAScheduler(fraction=1.5)
    with pytest.raises(InputError, match=r"Invalid mode: 'best'"):
        SynchronousSHAScheduler(mode="best")
    with pytest.raises(InputError, match=r"Invalid time_attr: ''"):
        SynchronousSHAScheduler(time_attr="")


def test_no_metric_and_results_without_time_attr_are_refused(ray_address, tmp_path):
    tuner = tune.Tuner(tune.with_parameters(EveTrainable, task=RAY_TINY, rungs=RUNGS, backward_ratio=2.0),
                       param_space=param_space(CONFIGS[:2]),
                       tune_config=tune.TuneConfig(
                           scheduler=SynchronousSHAScheduler(time_attr="eval_cost", rungs=RUNGS)),
                       run_config=tune.RunConfig(name="nometric", storage_path=str(tmp_path), verbose=0))
    with pytest.raises(Exception, match=r"Invalid metric: None \(expected SynchronousSHAScheduler\(metric=\.\.\.\)"):
        tuner.fit()
    tuner = tune.Tuner(NoCostTrainable, param_space={"x": tune.grid_search([1, 2])},
                       tune_config=tune.TuneConfig(metric="accuracy", mode="max",
                                                   scheduler=SynchronousSHAScheduler(time_attr="eval_cost",
                                                                                     rungs=RUNGS)),
                       run_config=tune.RunConfig(name="nocost", storage_path=str(tmp_path), verbose=0))
    with pytest.raises(Exception, match=r"reported no 'eval_cost' \(the scheduler's time_attr\)"):
        tuner.fit()


def test_a_users_own_trainable_with_eve_and_a_cost_meter(ray_address, tmp_path):
    rungs = (100, 200, 400)
    collect = Collect()
    scheduler = SynchronousSHAScheduler(time_attr="cost", rungs=rungs, metric="accuracy", mode="max")
    space = {"trial_index": tune.grid_search(list(range(6))), "seed": tune.sample_from(lambda c: c["trial_index"]),
             "width": tune.sample_from(lambda c: 8 + 4 * (c["trial_index"] % 3)),
             "lr": tune.sample_from(lambda c: 0.01 + 0.005 * c["trial_index"])}
    tuner = tune.Tuner(UserEveTrainable, param_space=space,
                       tune_config=tune.TuneConfig(scheduler=scheduler, reuse_actors=True),
                       run_config=tune.RunConfig(name="user", storage_path=str(tmp_path), verbose=0, callbacks=[collect]))
    grid = tuner.fit()
    assert not grid.errors
    assert [len(d.promoted) + len(d.stopped) for d in scheduler.decisions()] == [6, 2, 1]
    for index in range(6):  # 50 units a step, across pauses: the meter continues, never restarts
        costs = [r["cost"] for i, r in collect.results if i == index]
        assert costs[0] < 60 and all(0 < b - a < 60 for a, b in itertools.pairwise(costs))
    final = sorted(r.metrics["cost"] for r in grid)
    assert [c // 100 for c in final] == [1, 1, 1, 1, 2, 4]  # stopped at rungs 100 (x4), 200, done at 400


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import ray
    from tests.integrations.test_ray import sweep_tuner
    ray.init(address={address!r}, log_to_driver=False)
    sweep_tuner(__import__("pathlib").Path({storage!r}), "sweep", marks={marks!r}, delay=0.3).fit()
""")


def test_a_killed_driver_restores_and_ends_identically(uninterrupted, ray_address, tmp_path):
    storage, marks = tmp_path / "storage", tmp_path / "marks"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(root=str(ROOT), address=ray_address, storage=str(storage), marks=str(marks)))
    env = {**os.environ, "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    driver = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600  # a hang guard, sized for a machine ten times slower
    while time.monotonic() < deadline and driver.poll() is None:
        done = list(marks.glob("step-*")) if marks.exists() else []
        if len(done) >= 11:  # rung 100 decided, rung 300 under way
            break
        time.sleep(0.2)
    assert driver.poll() is None, "the driver ended before it could be killed"
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert (storage / "sweep" / STATE_FILE).exists()
    trainable = tune.with_parameters(MarkedTrainable, task=RAY_TINY, rungs=RUNGS, backward_ratio=2.0)
    grid = tune.Tuner.restore(str(storage / "sweep"), trainable=trainable).fit()
    assert outcome(grid, storage / "sweep") == uninterrupted[0]


def test_an_actor_killed_mid_rung_recovers_and_a_failed_trial_leaves_the_cohort(uninterrupted, ray_address,
                                                                               tmp_path):
    baseline = uninterrupted[0]
    dies, fails = baseline["decisions"][0][1][:2]  # two winners of rung 100
    grid = sweep_tuner(tmp_path, "faults", max_failures=1, marks=str(tmp_path / "marks"), die_at=(dies, 300),
                       fail_at=(fails, 300)).fit()
    assert (tmp_path / "marks" / f"died-{dies}-300").exists()
    result = outcome(grid, tmp_path / "faults")
    # The killed trial restored its rung-100 checkpoint and reported exactly what it would have.
    assert result["scores"][dies][:2] == baseline["scores"][dies][:2]
    assert result["final"][fails][-1] is False and result["scores"][fails][1] is None
    rung_300 = result["decisions"][1]
    assert fails not in rung_300[1] + rung_300[2] and len(rung_300[1] + rung_300[2]) == 2
    assert len(result["decisions"]) == 3  # the sweep finished, nothing hung PAUSED


def test_local_and_ray_backends_agree(ray_address, tmp_path):
    settings = SweepSettings(task="ray-tiny", space="tiny", optimizer="eve", seed=0, configs=9, rungs=RUNGS,
                             backward_ratio=2.0)
    local_sweep = prepare_sweep(settings, storage=f"sqlite:///{tmp_path}/local.db", checkpoint_dir=tmp_path / "local")
    local = local_sweep.run().as_dict()
    ray_sweep = prepare_sweep(settings, storage=f"sqlite:///{tmp_path}/ray.db", checkpoint_dir=tmp_path / "ray")
    steps = []
    remote = run_sweep_on_ray(ray_sweep, progress=lambda *args: steps.append(args)).as_dict()
    timing = ("wall_seconds", "training_seconds")
    assert {k: v for k, v in remote.items() if k not in timing} == {k: v for k, v in local.items() if k not in timing}
    assert remote["trained"] == 13 and steps[0][0] == "calibrating" and steps[-1][1:4] == (2, 1, 1)

    def records(sweep):
        return {i: {b: {k: v for k, v in d.items() if k != "wall_seconds"} for b, d in rungs.items()}
                for i, rungs in sweep.store.rung_details().items()}

    assert records(ray_sweep) == records(local_sweep)
    assert ray_sweep.store.finished() == local_sweep.store.finished() == set(range(9))
    assert ray_sweep.store.get("winner") == local_sweep.store.get("winner")
    # The store holds every result: Tune wrote no per-result logs of its own, and its switches are put back.
    trials = list((tmp_path / "ray").glob("*/ray/EveTrainable_*"))
    assert len(trials) == 9 and not [path for path in trials if list(path.glob("result.json"))]
    assert not [path for path in trials if list(path.glob("progress.csv")) or list(path.glob("events.out.tfevents*"))]
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in os.environ and "RAY_AIR_NEW_OUTPUT" not in os.environ
    assert class_cache.DEFAULT_ENV_VARS == TUNE_DEFAULT_ENV


def test_local_and_ray_backends_agree_on_a_stream_of_cohorts(ray_address, tmp_path):
    settings = SweepSettings(task="ray-tiny", space="tiny", optimizer="eve", seed=0, configs=9, rungs=RUNGS,
                             backward_ratio=2.0, cohort_size=3)
    local = prepare_sweep(settings, storage=f"sqlite:///{tmp_path}/local.db", checkpoint_dir=tmp_path / "local")
    expected = local.run().as_dict()
    ray_sweep = prepare_sweep(settings, storage=f"sqlite:///{tmp_path}/ray.db", checkpoint_dir=tmp_path / "ray")
    remote = run_sweep_on_ray(ray_sweep).as_dict()
    timing = ("wall_seconds", "training_seconds")
    assert {k: v for k, v in remote.items() if k not in timing} == {k: v for k, v in expected.items() if k not in timing}
    assert [r["trials"] for r in remote["rungs"]] == [9, 3, 3]  # three cohorts of three: one promoted each
    assert ray_sweep.store.get("winner") == local.store.get("winner")
    assert ray_sweep.store.finished() == local.store.finished() == set(range(9))


def test_the_sweeps_actors_get_no_tune_environment_and_tune_keeps_its_own(ray_address, tmp_path):
    def actor_variable(name):
        tuner = tune.Tuner(EnvironmentTrainable, run_config=tune.RunConfig(name=name, storage_path=str(tmp_path),
                                                                           verbose=0))
        [result] = tuner.fit()
        return result.metrics["pl_disable_fork"]

    with _tune_settings():
        assert class_cache.DEFAULT_ENV_VARS == {}
        assert actor_variable("plain") == ""
    assert class_cache.DEFAULT_ENV_VARS == TUNE_DEFAULT_ENV
    assert actor_variable("tune") == TUNE_DEFAULT_ENV["PL_DISABLE_FORK"]  # another Tune run keeps Tune's own
    with pytest.raises(KeyboardInterrupt), _tune_settings():
        raise KeyboardInterrupt
    assert class_cache.DEFAULT_ENV_VARS == TUNE_DEFAULT_ENV


def test_test_metrics_best_come_with_every_result_that_can_be_the_best_and_no_other(uninterrupted):
    history = uninterrupted[1]
    results = [r for _, r in history]
    seen: dict[int, float] = {}  # the best accuracy each actor process reported so far
    for result in results:
        best = seen.get(result["pid"])
        # (at the last rung, not "done": Tune marks done a result after which the scheduler stops a loser)
        expected = best is None or result["accuracy"] >= best or result["budget"] >= RUNGS[-1]
        assert ("test" in result) == expected, result
        seen[result["pid"]] = result["accuracy"] if best is None else max(best, result["accuracy"])
    top = max(r["accuracy"] for r in results)
    assert all("test" in r for r in results if r["accuracy"] == top or r["budget"] >= RUNGS[-1])
    assert sum("test" not in r for r in results) >= 3  # most results skip the test split
    index, first = next((i, r) for i, r in history if "test" in r)
    straight = Trial(RAY_TINY, CONFIGS[index], "eve", seed=0, index=index, backward_ratio=2.0)
    straight.train_to(first["budget"])
    test = straight.evaluate("test")  # the same weights' test metrics
    assert first["test"]["accuracy"] == test["accuracy"] and first["test"]["loss"] == pytest.approx(test["loss"])


def test_test_metrics_takes_true_false_or_best():
    trainable = EveTrainable.__new__(EveTrainable)
    with pytest.raises(InputError, match=r"Invalid test_metrics: 'always' \(expected True, False or 'best'\)"):
        trainable.setup(CONFIGS[0], task=RAY_TINY, test_metrics="always")


def test_a_sweep_on_a_multi_node_cluster(uninterrupted, ray_address, tmp_path):
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        collect = Collect()
        grid = sweep_tuner(tmp_path, "cluster", collect=collect, marks=str(tmp_path / "marks"), actors=2).fit()
        nodes = {r["node_id"] for _, r in collect.results}
        assert len(nodes) == 2  # both worker nodes trained trials; paused trials moved through storage_path
        assert outcome(grid, tmp_path / "cluster") == uninterrupted[0]
    finally:
        ray.shutdown()
        cluster.shutdown()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # the module's instance, for teardown


def test_a_trainable_trains_on_the_threads_ray_gave_it_even_when_torch_came_first(monkeypatch):
    """Ray gives an actor its CPU count as OMP_NUM_THREADS, which PyTorch reads only when first imported:
    in a worker that imported PyTorch before (Ray's preload_python_modules, a setup hook), each actor would
    otherwise train on one thread per core, and two actors on two cores crawl."""
    import torch

    from eve_search.integrations._ray import _follow_ray_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        _follow_ray_threads()
        assert torch.get_num_threads() == 1
        for unset in ("", "0", "two"):  # nothing (or nothing usable) from Ray: PyTorch's choice stands
            torch.set_num_threads(2)
            monkeypatch.setenv("OMP_NUM_THREADS", unset)
            _follow_ray_threads()
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_an_actor_given_two_cpus_on_a_busy_machine_trains_on_the_threads_the_others_leave_free(monkeypatch):
    """The rule of the eve-search command (eve_search._openmp.intra_op_threads) holds in a Ray actor too:
    one thread per CPU other processes leave free, within the CPUs Ray gave it, at least one; and
    EVE_SEARCH_THREADS=torch keeps Ray's count whatever the load."""
    import torch

    from eve_search.integrations._ray import _trainable

    before = torch.get_num_threads()
    monkeypatch.setattr(_trainable, "available_cpus", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("EVE_SEARCH_THREADS", raising=False)
    try:
        for load, threads in ((0.2, 2), (3.3, 1)):  # quiet: Ray's two; busy: one
            monkeypatch.setattr(_trainable, "cpus_taken_now", lambda load=load: load)
            torch.set_num_threads(4)
            assert _trainable._follow_ray_threads() == threads and torch.get_num_threads() == threads
        monkeypatch.setenv("EVE_SEARCH_THREADS", "torch")
        assert _trainable._follow_ray_threads() == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


class _FakeTrial:
    def __init__(self, trial_id, status, saving=False):
        self.trial_id, self.status, self.is_saving = trial_id, status, saving


class _FakeController:
    """What the scheduler reads of Tune's controller to decide whether a waiting trial should give up its
    actor: the trials, those Tune is handing a free actor to, and how many free actors it holds."""

    def __init__(self, trials, cached=0):
        self._tune_controller = self
        self.search_alg = None
        self._resetting_trials = set()
        self._actor_cache = type("Cache", (), {"num_cached_objects": cached})()
        self._trials = trials

    def get_trials(self):
        return list(self._trials)


def test_a_waiting_trial_gives_up_its_actor_only_to_a_pending_trial_no_free_actor_will_serve():
    """Two actors reach the end of a rung together while one trial is still pending: only one of them may
    pause (the other's actor would be one too many in Tune's cache, Tune would end it, and the next rungs
    would start replacement actors and run on one actor). A pause counts as soon as it is decided, while
    the paused trial's checkpoint is still being saved."""
    from ray.tune.experiment import Trial as TuneTrial

    scheduler = SynchronousSHAScheduler(time_attr="eval_cost", rungs=(10, 30), metric="accuracy", mode="max")
    me, other = _FakeTrial("a", TuneTrial.RUNNING), _FakeTrial("b", TuneTrial.RUNNING, saving=True)
    pending = _FakeTrial("c", TuneTrial.PENDING)
    controller = _FakeController([me, other, pending])
    assert scheduler._runnable(controller, me)  # "b" is only saving, not pausing: "c" needs an actor
    scheduler._paused.add("b")  # "b" was told to pause: its actor goes to "c"
    assert not scheduler._runnable(controller, me)
    other.is_saving, other.status = False, TuneTrial.PAUSED
    assert not scheduler._runnable(_FakeController([me, other, pending], cached=1), me)  # its actor is free
    assert scheduler._runnable(_FakeController([me, other, pending, _FakeTrial("d", TuneTrial.PENDING)], cached=1),
                               me)
    controller = _FakeController([me, pending])
    controller._resetting_trials.add(pending)  # "c" is taking a free actor already
    assert not scheduler._runnable(controller, me)


def test_an_idle_trial_keeps_its_actor_when_every_pending_trial_has_a_free_actor_already():
    """Between two results Tune asks whom to run next: a trial idle on its actor hands it over only to a
    pending trial that no free actor will serve. Paused for one that Tune was already handing a cached
    actor, its actor was one too many, Tune ended it, and the next rungs started replacement actors
    that never trained (the demo sweep took 13-17 s through Ray instead of 10)."""
    from ray.tune.experiment import Trial as TuneTrial

    scheduler = SynchronousSHAScheduler(time_attr="eval_cost", rungs=(10, 30), metric="accuracy", mode="max")
    idle, pending = _FakeTrial("a", TuneTrial.RUNNING), _FakeTrial("c", TuneTrial.PENDING)
    scheduler._status = lambda trial_id: "wait"
    scheduler._idle, scheduler._trials = {"a"}, {"a": idle, "c": pending}
    assert scheduler._handovers(_FakeController([idle, pending])) == [(pending, "a")]
    controller = _FakeController([idle, pending])
    controller._resetting_trials.add(pending)
    assert scheduler._handovers(controller) == []
    assert scheduler._handovers(_FakeController([idle, pending], cached=1)) == []
    pausing = _FakeTrial("b", TuneTrial.RUNNING, saving=True)
    scheduler._paused.add("b")  # told to pause earlier: its actor will serve "c"
    assert scheduler._handovers(_FakeController([idle, pausing, pending])) == []
    later = _FakeTrial("d", TuneTrial.PENDING)
    scheduler._served.add("c")  # "c" was promised "b"'s actor; "d" still needs one
    assert scheduler._handovers(_FakeController([idle, pausing, later, pending])) == [(later, "a")]


def test_a_trial_whose_actor_is_being_constructed_is_not_chosen_to_take_a_free_one():
    """Tune gives the trial it is told to run a free actor and ends the one it was constructing for it.
    Chosen while its actor was still starting, a sweep's second trial lost that actor, then each
    replacement in turn, and the whole sweep ran on one actor."""
    from ray.tune.experiment import Trial as TuneTrial

    scheduler = SynchronousSHAScheduler(time_attr="eval_cost", rungs=(10, 30), metric="accuracy", mode="max")
    starting, waiting, ready = (_FakeTrial(name, TuneTrial.PENDING) for name in "abc")
    controller = _FakeController([starting, waiting, ready])
    constructing, requested, started = object(), object(), object()
    controller._trial_to_actor = {starting: constructing, waiting: requested, ready: started}
    controller._started_actors = {started}
    controller._actor_manager = type("Manager", (), {
        "is_actor_started": staticmethod(lambda actor: actor in (constructing, started))})()
    assert scheduler._actor_starting(controller, starting)
    assert not scheduler._actor_starting(controller, waiting)  # only asked for: nothing is lost
    assert not scheduler._actor_starting(controller, ready)
    assert not scheduler._actor_starting(_FakeController([waiting]), waiting)  # a controller without them


def test_the_guard_counts_a_pending_trial_whose_actor_is_starting_as_progress():
    """The last guard raises only when nothing can move: a pending trial whose actor Tune is starting
    (or reusing) moves; one that waits for the cluster's resources is stalled only while this run's
    own idle trials hold actors."""
    from ray.tune.experiment import Trial as TuneTrial

    scheduler = SynchronousSHAScheduler(time_attr="eval_cost", rungs=(10, 30), metric="accuracy", mode="max")
    starting, waiting, paused = (_FakeTrial(name, status) for name, status in
                                 (("a", TuneTrial.PENDING), ("b", TuneTrial.PENDING), ("c", TuneTrial.PAUSED)))
    constructing, requested = object(), object()
    manager = type("Manager", (), {"is_actor_started": staticmethod(lambda actor: actor is constructing)})()
    controller = _FakeController([starting, waiting, paused])
    controller._trial_to_actor, controller._actor_manager = {starting: constructing, waiting: requested}, manager
    assert scheduler._has_actor(controller, starting) and not scheduler._has_actor(controller, waiting)
    assert not scheduler._stalled(controller)  # "a"'s actor is starting
    controller = _FakeController([waiting, paused])
    controller._trial_to_actor, controller._actor_manager = {waiting: requested}, manager
    assert not scheduler._stalled(controller)  # "b" waits for the cluster, no actor of this run is idle
    idle = _FakeTrial("d", TuneTrial.RUNNING)
    scheduler._idle.add("d")
    controller = _FakeController([waiting, paused, idle])
    controller._trial_to_actor, controller._actor_manager = {waiting: requested}, manager
    assert scheduler._stalled(controller)  # "d" holds an actor that "b" could use: a bug, the guard's
    assert scheduler._stalled(_FakeController([paused]))  # every trial waits, and nothing can start


def test_the_scheduler_never_leaves_a_temporary_file_in_the_folder_tune_copies_to_storage(tmp_path, monkeypatch):
    """Tune copies its driver staging folder to storage from another thread while the driver goes on. A
    temporary file of the scheduler's state that the copy listed, renamed away before the copy read it,
    failed the copy with a traceback on the user's terminal (seen once in the demo sweep). Every save
    writes its temporary file beside that folder, so the folder only ever holds the whole state file."""
    from ray.tune.experiment import Trial as TuneTrial

    staging = tmp_path / "experiment" / "driver_artifacts"
    staging.mkdir(parents=True)
    seen = []
    replace = os.replace

    def watched_replace(source, target):
        seen.append((Path(source).parent, sorted(p.name for p in staging.iterdir())))
        replace(source, target)

    monkeypatch.setattr(os, "replace", watched_replace)
    scheduler = SynchronousSHAScheduler(time_attr="eval_cost", rungs=(10, 30), metric="accuracy", mode="max")
    trials = []
    for name in "abc":
        trial = _FakeTrial(name, TuneTrial.RUNNING)
        trial.storage = type("Storage", (), {"experiment_driver_staging_path": str(staging)})()
        trial.config, trial.last_result, trial.experiment_tag = {}, None, f"tag_{name}"
        trials.append(trial)
        scheduler.on_trial_add(_FakeController(trials), trial)
    controller = _FakeController(trials)
    for score, trial in zip((0.5, 0.75), trials):  # the rung waits for the third
        scheduler.on_trial_result(controller, trial, {"eval_cost": 10.0, "accuracy": score, "training_iteration": 1})
    assert seen  # the state was saved
    assert all(folder == staging.parent for folder, _ in seen)
    assert all(names in ([], [STATE_FILE]) for _, names in seen)
    assert sorted(p.name for p in staging.iterdir()) == [STATE_FILE]
    assert sorted(p.name for p in staging.parent.iterdir()) == ["driver_artifacts"]
    assert load_scheduler_state(staging)["trials"].keys() == {"a", "b", "c"}


def test_a_state_saved_before_the_cohorts_ran_as_a_stream_is_restored(tmp_path):
    """The state file of a run saved by the scheduler before cohorts ran as a CohortStream (ledgers of
    trial ids, first-rung scores of an open cohort held in "early") restores the same decisions, and
    the open cohort goes on."""
    from ray.tune.experiment import Trial as TuneTrial

    staging = tmp_path / "experiment" / "driver_artifacts"
    staging.mkdir(parents=True)
    closed = RungLedger((10, 30), 1 / 3, "max", trials=["a", "b", "c"])
    for trial_id, score in zip("abc", (0.5, 0.75, 0.25)):
        closed.report(trial_id, 0, score)
    closed.decide(0)
    still_open = RungLedger((10, 30), 1 / 3, "max", trials=["d", "e"])
    (staging / STATE_FILE).write_text(json.dumps({
        "time_attr": "eval_cost", "metric": "accuracy", "rungs": [10, 30], "cohort_size": 3,
        "cohorts": [closed.state_dict(), still_open.state_dict()], "ledger": closed.state_dict(),
        "closed": [True, False], "partial": [], "early": {"d": 0.5}, "trials": {}}))
    scheduler = SynchronousSHAScheduler(time_attr="eval_cost", rungs=(10, 30), metric="accuracy", mode="max",
                                        cohort_size=3)
    trial = _FakeTrial("b", TuneTrial.RUNNING)
    trial.storage = type("Storage", (), {"experiment_driver_staging_path": str(staging)})()
    scheduler.on_trial_add(_FakeController([trial]), trial)
    assert scheduler.decisions() == closed.decisions()
    assert [scheduler._status(t) for t in "abcde"] == ["stopped", "train", "stopped", "wait", "train"]
    assert [ledger.members for ledger in scheduler.ledgers] == [["a", "b", "c"], ["d", "e"]]
    state = scheduler._state()
    assert state["early"] == {"d": 0.5} and state["closed"] == [True, False]


class _Searcher:
    """A search algorithm that has proposed its trials and is not finished (it may propose more)."""

    def __init__(self):
        self.finished = False

    def is_finished(self):
        return self.finished


class _Controller(_FakeController):
    """A controller that pauses a trial at once (Tune saves its checkpoint first) and stops it at once."""

    def __init__(self, trials):
        super().__init__(trials)
        self.search_alg = _Searcher()

    def pause_trial(self, trial, should_checkpoint=True):
        trial.status = "PAUSED"

    def stop_trial(self, trial):
        trial.status = "TERMINATED"


def _three_trials(tmp_path, scores):
    """A scheduler with three trials, of which the first ``len(scores)`` report their first rung with
    these scores; the others still train."""
    from ray.tune.experiment import Trial as TuneTrial

    staging = tmp_path / "experiment" / "driver_artifacts"
    staging.mkdir(parents=True, exist_ok=True)
    scheduler = SynchronousSHAScheduler(time_attr="eval_cost", rungs=(10, 30), metric="accuracy", mode="max")
    trials = []
    controller = _Controller(trials)
    for name in "abc":
        trial = _FakeTrial(name, TuneTrial.RUNNING)
        trial.storage = type("Storage", (), {"experiment_driver_staging_path": str(staging)})()
        trial.config, trial.last_result, trial.experiment_tag = {}, None, f"tag_{name}"
        trials.append(trial)
        scheduler.on_trial_add(controller, trial)
    actions = [scheduler.on_trial_result(controller, trial, {"eval_cost": 10.0, "accuracy": score,
                                                             "training_iteration": 1})
               for score, trial in zip(scores, trials)]
    return scheduler, controller, trials, actions, staging


def _report_the_last(scheduler, controller, trials):
    """The third trial reports its first rung: every trial now waits, paused (as Tune does on PAUSE)."""
    from ray.tune.experiment import Trial as TuneTrial

    action = scheduler.on_trial_result(controller, trials[2], {"eval_cost": 10.0, "accuracy": 0.25,
                                                               "training_iteration": 1})
    assert action == "PAUSE"
    trials[2].status = TuneTrial.PAUSED
    assert {t.status for t in trials} == {TuneTrial.PAUSED}


def _everything(scheduler, trials, staging):
    """What choose_trial_to_run could change: the trials' statuses, the scheduler's state (its saved
    state, its working sets, its guard's clock) and the state file."""
    saved = staging / STATE_FILE
    return ({t.trial_id: t.status for t in trials}, json.dumps(scheduler._state(), sort_keys=True),
            [sorted(s) for s in (scheduler._idle, scheduler._paused, scheduler._pausing, scheduler._served,
                                 scheduler._handing, scheduler._stopping)],
            list(scheduler._queue), scheduler._version, scheduler._last_event,
            saved.read_text() if saved.exists() else None)


def test_choose_trial_to_run_changes_nothing_when_asked_again(tmp_path):
    """Ray documents choose_trial_to_run as idempotent: asked twice in a row, it returns the same trial
    and changes no trial and no state in between. It changes nothing at all unless a cohort closes
    without a callback (the search algorithm proposes no trial while every trial waits): that cut is
    recorded once, changes no trial's status (the winner is a paused trial Tune then resumes), and the
    loser is stopped at the next callback."""
    from ray.tune.experiment import Trial as TuneTrial

    scheduler, controller, trials, actions, staging = _three_trials(tmp_path, (0.5, 0.75))
    assert actions == ["NOOP", "NOOP"]  # "a" and "b" wait on their actors while "c" trains
    before = _everything(scheduler, trials, staging)
    assert scheduler.choose_trial_to_run(controller) is None
    assert _everything(scheduler, trials, staging) == before  # nothing due: nothing changed at all
    assert scheduler.choose_trial_to_run(controller) is None
    assert _everything(scheduler, trials, staging) == before

    _report_the_last(scheduler, controller, trials)
    before = _everything(scheduler, trials, staging)
    with pytest.warns(SynchronousSHAWarning, match="cohort 0 is decided with 3 trials: no new trial could start"):
        chosen = scheduler.choose_trial_to_run(controller)  # the cut, recorded
    assert chosen is trials[1] and [(d.promoted, d.stopped) for d in scheduler.decisions()] == [(["b"], ["a", "c"])]
    after = _everything(scheduler, trials, staging)
    assert after[0] == before[0]  # no trial's status changed
    assert after[1:] != before[1:] and load_scheduler_state(staging)["partial"] != []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert scheduler.choose_trial_to_run(controller) is chosen  # asked again: the same trial
    assert _everything(scheduler, trials, staging) == after  # and nothing changed in between

    trials[1].status = TuneTrial.RUNNING  # Tune resumes the winner; its next result stops the losers
    assert scheduler.on_trial_result(controller, trials[1], {"eval_cost": 30.0, "accuracy": 0.8,
                                                             "training_iteration": 2}) == "STOP"
    assert [t.status for t in trials] == [TuneTrial.TERMINATED, TuneTrial.RUNNING, TuneTrial.TERMINATED]


def test_choose_trial_to_run_records_the_end_of_the_search_once(tmp_path):
    """The other event without a callback: the search algorithm is finished. The open cohort ends with
    the trials it has, once; asking again changes nothing."""
    from ray.tune.experiment import Trial as TuneTrial

    scheduler, controller, trials, _, staging = _three_trials(tmp_path, (0.5, 0.75))
    _report_the_last(scheduler, controller, trials)
    controller.search_alg.finished = True
    chosen = scheduler.choose_trial_to_run(controller)
    assert chosen is trials[1] and {t.status for t in trials} == {TuneTrial.PAUSED}
    after = _everything(scheduler, trials, staging)
    assert scheduler.choose_trial_to_run(controller) is chosen
    assert _everything(scheduler, trials, staging) == after
    assert scheduler.partial_cohorts() == []  # the whole search, as meant


def test_a_ratio_calibrated_on_noisy_timings_in_an_actor_is_said_as_the_local_engine_says_it(capsys):
    """EveTrainable measures a trial's backward/forward ratio in its actor when the sweep gives none: a
    ratio frozen from noisy timings is said in the local engine's line (calibration_note), on the actor's
    stderr, which Ray shows on the driver's terminal."""
    from eve_search.engine.sweep import calibration_note

    trainable = EveTrainable.__new__(EveTrainable)
    trainable._task = RAY_TINY
    trainable._tell_calibration(CONFIGS[0], 2.0, {"ratio": 2.0, "reliable": True, "estimates": [2.0, 2.01]})
    assert capsys.readouterr().err == ""
    noisy = {"ratio": 2.31, "reliable": False, "estimates": [1.8, 2.31, 3.1], "spread": 0.41}
    trainable._tell_calibration(CONFIGS[0], 2.31, noisy)
    note = calibration_note(RAY_TINY.cost_key(CONFIGS[0]), 2.31, noisy)
    assert trainable.calibration_note == note and "froze backward/forward ratio 2.31 from noisy timings" in note
    assert capsys.readouterr().err == f"eve-search: {note}\n"


def test_every_internal_of_tune_is_read_in_the_compatibility_module_only():
    """The scheduler needs a few private parts of Ray Tune; they live in _ray/_compat.py alone, which checks
    the Ray version at import: outside the declared range it refuses, on an untested one it warns."""
    import re

    from packaging.version import Version

    from eve_search.integrations._ray._compat import TESTED_RAY, check_ray_version, supported_ray

    internals = re.compile(r"_set_trial_status|_schedule_trial_train|_started_actors|_live_trials|_limit_concurrency|"
                           r"_pending_trials|_resetting_trials|_actor_cache|_trial_to_actor|_actor_manager|"
                           r"_tune_controller|_supports_buffered_results")
    package = ROOT / "eve_search"
    found = sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                   if internals.search(path.read_text()))
    assert found == ["integrations/_ray/_compat.py"]
    assert check_ray_version(f"{TESTED_RAY[-1]}.0") is None
    with pytest.raises(ImportError, match=r"supports ray\[tune\].* \(tested: 2\.60\); this is Ray 1\.13\.0"):
        check_ray_version("1.13.0")
    if Version("2.99.0") in supported_ray():
        with pytest.warns(RuntimeWarning, match=r"tested on Ray 2\.60 only.*pin ray\[tune\]==2\.60\.\*"):
            assert "that Ray 2.99.0 may have changed" in check_ray_version("2.99.0")
    else:
        with pytest.raises(ImportError, match="this is Ray 2.99.0"):
            check_ray_version("2.99.0")
