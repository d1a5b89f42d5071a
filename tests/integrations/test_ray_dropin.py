"""SynchronousSHAScheduler swapped into scripts written the way Ray Tune's own examples are: function
trainables with and without checkpoints, a class Trainable that saves only its model, OptunaSearch
behind a ConcurrencyLimiter, max_concurrent_trials, an endless search with a time budget, and
searchers that wait or run out. Each run is small, is never timed (a watchdog ends the process if a
run hangs, so CI fails instead of stalling) and checks that every decided rung promoted exactly the top
fraction of its cohort."""

from __future__ import annotations

import faulthandler
import json
import math
import time
import warnings

from pathlib import Path

import pytest
import ray
from hypothesis import given, settings
from hypothesis import strategies as st
from ray import tune
from ray.tune.search import ConcurrencyLimiter

from eve_search import InputError
from eve_search.integrations.ray import PAPER_RUNGS, SynchronousSHAScheduler, SynchronousSHAWarning
from tests.integrations.ray_dropin_trainables import (
    LazySearcher,
    SlowSearcher,
    objective_checkpointing_at_its_end,
    objective_with_checkpoint,
    objective_with_sparse_metric,
    objective_without_checkpoint,
)

pytestmark = pytest.mark.slow  # minutes in all: `make test` starts this file first
# The hang guard, not a time budget: past this, the process dumps every thread's stack and exits, so CI fails
# instead of stalling. A run is never timed: a test may take minutes on a busy machine, and must still pass.
WATCHDOG_S = 1200
QUALITIES = [0.9, 0.8, 0.3, 0.5, 0.4, 0.6]  # the best two start first, so they are paused, not left idle


def _start_local_ray():
    ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)


@pytest.fixture(scope="module")
def local_ray():
    _start_local_ray()
    yield
    ray.shutdown()


@pytest.fixture
def fresh_ray(local_ray):
    """A new local Ray instance with both CPUs free, for a test whose two trials must train at once.

    Ray 2.60 can leak a placement-group bundle that was being prepared when Tune removed the group at
    the end of an earlier experiment (ray-project/ray#64693): the shared instance then has one CPU
    fewer, and a test that needs both waits forever. The new instance stays up for the tests after.
    """
    _start_local_ray()
    yield


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class Collect(tune.Callback):
    """Every result of every trial, in arrival order, on the driver."""

    def __init__(self):
        self.results = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results.append((trial.trial_id, dict(result)))

    def of(self, trial_id, key):
        return [r[key] for t, r in self.results if t == trial_id]


def fit(tmp_path, trainable, scheduler, param_space=None, stop=None, **tune_config):
    """Run one small experiment (``stop``: a tune.Stopper); returns (grid, collected results,
    SynchronousSHAWarnings, seconds)."""
    collect = Collect()
    tune_config.setdefault("reuse_actors", True)
    tuner = tune.Tuner(trainable, param_space=param_space or {},
                       tune_config=tune.TuneConfig(scheduler=scheduler, **tune_config),
                       run_config=tune.RunConfig(name="run", storage_path=str(tmp_path), verbose=0,
                                                 callbacks=[collect], stop=stop))
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid = tuner.fit()
    seconds = time.monotonic() - start
    ours = [str(w.message) for w in caught if issubclass(w.category, SynchronousSHAWarning)]
    return grid, collect, ours, seconds


def grid_space(qualities=QUALITIES, steps=3, **extra):
    return {"quality": tune.grid_search(list(qualities)), "steps": steps, **extra}


def check_rungs(scheduler, collect, metric="score", complete_only=False):
    """Every decided rung promoted exactly the best ceil(cohort / reduction_factor) by the score the
    trial reported at that rung (none at the last rung), and stopped the rest; returns the ledgers
    whose every rung was decided."""
    complete = []
    for ledger in scheduler.ledgers:
        decisions = ledger.decisions()
        if complete_only and len(decisions) < len(scheduler.rungs):
            continue
        assert len(decisions) == len(scheduler.rungs), f"a cohort was left undecided: {scheduler.debug_string()}"
        for decision in decisions:
            cohort = decision.promoted + decision.stopped
            scores = {}
            for trial_id in cohort:
                reached = [r[metric] for t, r in collect.results
                           if t == trial_id and r[scheduler.time_attr] == decision.budget]
                scores[trial_id] = reached[0]
            last = decision.rung == len(scheduler.rungs) - 1
            best = sorted(cohort, key=lambda t: -scores[t])
            expected = [] if last else best[: max(1, math.ceil(len(cohort) * scheduler.fraction - 1e-9))]
            assert decision.promoted == expected
            assert sorted(decision.stopped) == sorted(set(cohort) - set(expected))
            if decision.rung + 1 < len(scheduler.rungs):  # the promoted trials are next rung's cohort
                assert sorted(ledger.cohort(decision.rung + 1)) == sorted(expected)
        complete.append(ledger)
    return complete


def check_ended_at_their_rung(grid, scheduler):
    """Each trial stopped at the rung it lost (or completed the last rung): nothing left PAUSED."""
    for ledger in scheduler.ledgers:
        for decision in ledger.decisions():
            for trial_id in decision.stopped:
                result = next(r for r in grid if r.metrics.get("trial_id") == trial_id)
                assert result.metrics[scheduler.time_attr] == decision.budget
    assert {r.metrics.get("trial_id") for r in grid} >= {t for ledger in scheduler.ledgers for t in ledger.members}


# Arguments -------------------------------------------------------------------------------------------


def test_asha_vocabulary_derives_the_rungs():
    assert SynchronousSHAScheduler().rungs == (1, 3, 9, 27, 81, 100)  # grace_period=1, reduction_factor=3, max_t=100
    assert SynchronousSHAScheduler().time_attr == "training_iteration"
    scheduler = SynchronousSHAScheduler(time_attr="epoch", grace_period=2, reduction_factor=2, max_t=20)
    assert scheduler.rungs == (2, 4, 8, 16, 20) and scheduler.fraction == 0.5 and scheduler.reduction_factor == 2
    assert SynchronousSHAScheduler(max_t=1).rungs == (1,)
    assert SynchronousSHAScheduler(time_attr="eval_cost").rungs == PAPER_RUNGS == (100, 300, 900, 2700, 3000)
    assert SynchronousSHAScheduler(time_attr="eval_cost", grace_period=50, max_t=450).rungs == (50, 150, 450)
    assert SynchronousSHAScheduler(rungs=(5, 10), fraction=0.5).rungs == (5, 10)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rungs": (1, 3), "max_t": 9}, r"Invalid rungs: \(1, 3\) \(expected either rungs=\.\.\. or grace_period/max_t"),
    ({"fraction": 0.5, "reduction_factor": 3}, r"Invalid fraction: 0\.5 \(expected 1 / reduction_factor = 0\.3333"),
    ({"reduction_factor": 1}, r"Invalid reduction_factor: 1 \(expected a number above 1\)"),
    ({"grace_period": 0}, r"Invalid grace_period: 0 \(expected a positive whole number of steps\)"),
    ({"max_t": 2.5}, r"Invalid max_t: 2\.5 \(expected a positive whole number of steps\)"),
    ({"grace_period": 10, "max_t": 5}, r"Invalid max_t: 5 \(expected at least grace_period, 10\)"),
    ({"cohort_size": 1}, r"Invalid cohort_size: 1 \(expected a whole number of trials, at least 2\)"),
    ({"fraction": 1}, r"Invalid fraction: 1\.0 \(rungs from grace_period and max_t need a reduction_factor"),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    with pytest.raises(InputError, match=message):
        SynchronousSHAScheduler(**kwargs)


@settings(max_examples=60, deadline=None)
@given(grace=st.integers(1, 40), factor=st.sampled_from([1.5, 2, 2.5, 3, 4]), span=st.integers(0, 500))
def test_derived_rungs_start_at_grace_period_end_at_max_t_and_grow_geometrically(grace, factor, span):
    rungs = SynchronousSHAScheduler(grace_period=grace, reduction_factor=factor, max_t=grace + span).rungs
    assert rungs[0] == grace and rungs[-1] == grace + span
    assert all(b > a for a, b in zip(rungs, rungs[1:]))
    assert all(b <= math.ceil(a * factor) for a, b in zip(rungs, rungs[1:]))  # no rung is skipped
    assert len(rungs) <= 2 + math.log(max(1, span + grace) / grace, factor)


# Errors at the earliest moment ------------------------------------------------------------------------


def test_no_cohort_for_an_endless_search_or_no_metric_fails_at_setup(local_ray, tmp_path):
    with pytest.raises(InputError, match=r"Invalid cohort_size: None \(num_samples=-1 is an endless search"):
        fit(tmp_path, objective_with_checkpoint, SynchronousSHAScheduler(max_t=3),
            {"quality": tune.uniform(0, 1), "steps": 3}, metric="score", mode="max", num_samples=-1, time_budget_s=30)
    with pytest.raises(InputError, match=r"Invalid metric: None \(expected SynchronousSHAScheduler\(metric=\.\.\.\)"):
        fit(tmp_path, objective_with_checkpoint, SynchronousSHAScheduler(max_t=3), grid_space())
    assert not list(tmp_path.glob("run/objective_*"))  # no trial was started


def test_a_missing_time_attr_or_metric_is_named_at_the_first_result(local_ray, tmp_path):
    scheduler = SynchronousSHAScheduler(time_attr="epoch", max_t=3)
    with pytest.raises(Exception, match=r"reported no 'epoch' \(the scheduler's time_attr\); it reported: ended, "
                                        r"score, started, step \(and Tune's training_iteration"):
        fit(tmp_path / "a", objective_with_checkpoint, scheduler, grid_space(QUALITIES[:2]), metric="score",
            mode="max")
    scheduler = SynchronousSHAScheduler(max_t=3, metric="accuracy", mode="max")  # Tune checks the metric itself
    with pytest.raises(Exception, match=r"did not include the specified metric\(s\) `accuracy` that "
                                        r"`SynchronousSHAScheduler` expects"):
        fit(tmp_path / "b", objective_with_checkpoint, scheduler, grid_space(QUALITIES[:2]))


# Function trainables ------------------------------------------------------------------------------------


def test_a_function_trainable_without_checkpoints_is_warned_and_still_halved(local_ray, tmp_path):
    scheduler = SynchronousSHAScheduler(max_t=3)  # rungs 1 and 3: 6 trials, 2 go on
    grid, collect, warned, seconds = fit(tmp_path, objective_without_checkpoint, scheduler, grid_space(),
                                         metric="score", mode="max")
    assert not grid.errors
    assert check_rungs(scheduler, collect) == scheduler.ledgers and len(scheduler.ledgers) == 1
    assert [(d.budget, len(d.promoted), len(d.stopped)) for d in scheduler.decisions()] == [(1, 2, 4), (3, 0, 2)]
    check_ended_at_their_rung(grid, scheduler)
    # The promoted trials were paused without a checkpoint, so they started over: one warning says so
    # and names the fix.
    restarted = [t for t in scheduler.decisions()[0].promoted if collect.of(t, "step")[:2] == [1, 1]]
    assert restarted
    assert len([w for w in warned if "after a pause at rung 1: it started over instead of resuming" in w]) == 1
    assert any("tune.get_checkpoint()" in w and "checkpoint=" in w for w in warned)


def test_a_function_trainable_with_get_checkpoint_resumes_without_warnings(local_ray, tmp_path):
    scheduler = SynchronousSHAScheduler(max_t=3)
    grid, collect, warned, seconds = fit(tmp_path, objective_with_checkpoint, scheduler, grid_space(),
                                         metric="score", mode="max")
    assert not grid.errors and warned == []
    check_rungs(scheduler, collect)
    check_ended_at_their_rung(grid, scheduler)
    for trial_id in scheduler.decisions()[0].promoted:  # paused at rung 1, resumed at step 2
        assert collect.of(trial_id, "step") == [1, 2, 3] == collect.of(trial_id, "training_iteration")


def test_a_trial_that_ends_before_the_first_rung_is_warned_about(local_ray, tmp_path):
    scheduler = SynchronousSHAScheduler(grace_period=3, max_t=9)  # the script stops at 2 steps
    grid, collect, warned, seconds = fit(tmp_path, objective_with_checkpoint, scheduler,
                                         grid_space(QUALITIES[:3], steps=2), metric="score", mode="max")
    assert not grid.errors
    assert scheduler.decisions() == []
    assert len(warned) == 1 and "before the first rung (3), so successive halving never applied" in warned[0]


def test_a_metric_reported_every_second_step_is_judged_at_its_first_report_past_each_rung(local_ray, tmp_path,
                                                                                           monkeypatch):
    # Tune's own advice for a trainable that reports its metric only on some steps; the scheduler takes the
    # results without it between rungs. Rungs 1, 3 and 9 fall on steps without the metric: each is judged by
    # the trial's next result that has it (steps 2, 4 and 10), as ASHA counts a result past its milestone.
    monkeypatch.setenv("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    scheduler = SynchronousSHAScheduler(grace_period=1, reduction_factor=3, max_t=9)
    grid, collect, warned, seconds = fit(tmp_path, objective_with_sparse_metric, scheduler, grid_space(steps=10),
                                         metric="score", mode="max")
    assert not grid.errors
    assert [(d.budget, len(d.promoted), len(d.stopped)) for d in scheduler.decisions()] == [(1, 2, 4), (3, 1, 1),
                                                                                            (9, 0, 1)]
    for decision in scheduler.decisions():
        cohort = decision.promoted + decision.stopped
        judged_at = {t: next(r for i, r in collect.results if i == t and "score" in r
                             and r["training_iteration"] >= decision.budget) for t in cohort}
        assert {r["training_iteration"] for r in judged_at.values()} == {decision.budget + 1}
        best = sorted(cohort, key=lambda t: -judged_at[t]["score"])
        if decision.rung < len(scheduler.rungs) - 1:
            assert decision.promoted == best[: math.ceil(len(cohort) / 3)]
    winner = scheduler.decisions()[-1].stopped[0]
    assert collect.of(winner, "step") == list(range(1, 11))  # resumed after each pause, never restarted
    assert len(warned) == 1 and "passed rung 1 (training_iteration=1) with a result without the metric 'score'" \
        in warned[0]


# Checkpoints of the winner and the losers -----------------------------------------------------------------


def test_every_trial_keeps_the_checkpoint_it_reported_last_through_pauses_and_stops(local_ray, tmp_path):
    # A checkpoint with every report, cohorts of three: losers are stopped while other cohorts train, and
    # the winners complete beside them. No trial may be stopped while its latest checkpoint is being saved
    # (Tune would drop it): each result's checkpoint is the one its trial reported last.
    scheduler = SynchronousSHAScheduler(max_t=9, cohort_size=3)
    qualities = [0.9, 0.2, 0.5, 0.7, 0.3, 0.8, 0.4, 0.6, 0.1]
    grid, collect, warned, seconds = fit(tmp_path, objective_with_checkpoint, scheduler,
                                         grid_space(qualities, steps=9, sleep=0.05), metric="score", mode="max")
    assert not grid.errors and warned == []
    check_rungs(scheduler, collect)
    for result in grid:
        assert result.checkpoint is not None, result.metrics["trial_id"]
        with result.checkpoint.as_directory() as folder:
            assert json.loads((Path(folder) / "state.json").read_text())["step"] == result.metrics["step"]
    best = grid.get_best_result()
    assert best.checkpoint is not None and best.metrics["trial_id"] == scheduler.winner()


def test_a_trainable_that_checkpoints_at_its_end_gives_the_winner_with_its_checkpoint(local_ray, tmp_path):
    # Ray's LightGBM example checkpoints only after its last round. The winner trains to the end and keeps
    # that checkpoint; the losers never reported one. Here the metric falls with training, so a loser's last
    # (early) score beats the winner's final one and results.get_best_result() would return it, without a
    # checkpoint: the scheduler says so at the end of the run, and best_result() gives the winner.
    scheduler = SynchronousSHAScheduler(max_t=3)
    grid, collect, warned, seconds = fit(tmp_path, objective_checkpointing_at_its_end, scheduler, grid_space(),
                                         metric="score", mode="max")
    assert not grid.errors
    winner = scheduler.best_result(grid)
    assert winner.metrics["trial_id"] == scheduler.winner() and winner.config["quality"] == max(QUALITIES)
    with winner.checkpoint.as_directory() as folder:
        assert json.loads((Path(folder) / "model.json").read_text()) == {"step": 3, "quality": max(QUALITIES)}
    fooled = grid.get_best_result()
    assert fooled.metrics["step"] == 1 and fooled.checkpoint is None  # a loser stopped at rung 1
    best = [w for w in warned if w.startswith("results.get_best_result() ranks each trial by its last result")]
    assert len(best) == 1 and f"return trial {fooled.metrics['trial_id']}" in best[0] \
        and "no checkpoint" in best[0] and "scheduler.best_result(results)" in best[0]


# A class Trainable ------------------------------------------------------------------------------------


def test_a_class_trainable_that_saves_only_its_model(local_ray, tmp_path):
    from tests.integrations.ray_helpers import ModelOnlyTrainable

    scheduler = SynchronousSHAScheduler(max_t=3)
    space = {"seed": tune.grid_search([0, 1, 2]), "lr": 0.05}
    grid, collect, warned, seconds = fit(tmp_path, ModelOnlyTrainable, scheduler, space, metric="accuracy",
                                         mode="max", reuse_actors=False)  # no reset_config, as in Ray's example
    assert not grid.errors and warned == []
    check_rungs(scheduler, collect, metric="accuracy")
    check_ended_at_their_rung(grid, scheduler)
    assert [(d.budget, len(d.promoted), len(d.stopped)) for d in scheduler.decisions()] == [(1, 1, 2), (3, 0, 1)]
    [promoted] = scheduler.decisions()[0].promoted
    # Whether it waited paused at rung 1 (restored in a new actor) or on its actor, Tune kept the
    # iteration count with the model.
    assert collect.of(promoted, "training_iteration") == [1, 2, 3]


class SaveWatch(tune.Callback):
    """Signals ``decided`` once the scheduler has decided a rung; takes a while over each save (as a
    callback that uploads checkpoints does) and records when it was done with each."""

    def __init__(self, scheduler, signals):
        self.scheduler, self.signals, self.saved = scheduler, signals, {}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if self.scheduler.decisions():
            (self.signals / "decided").touch()

    def on_trial_save(self, iteration, trials, trial, **info):
        time.sleep(0.2)
        self.saved.setdefault(trial.trial_id, []).append(time.time())


def test_a_trial_promoted_while_its_checkpoint_is_saved_trains_after_the_save(fresh_ray, tmp_path):
    # The leader waits at its rung, idle on its actor, with its first checkpoint still being saved when
    # the closer's result decides the cohort. Its next step must start only once Tune has processed that
    # save (here the driver is done with a save 0.2 s after it starts on it): Tune takes ready futures in
    # random order, and a step started earlier could be taken first, leaving the trial RUNNING with no
    # work (a hang, seen once in CI).
    from tests.integrations.ray_dropin_trainables import SlowSavingTrainable

    signals = tmp_path / "signals"
    signals.mkdir()
    scheduler = SynchronousSHAScheduler(max_t=3)
    watch = SaveWatch(scheduler, signals)
    space = {"role": tune.grid_search(["leader", "closer"]), "signals": str(signals),
             "quality": tune.sample_from(lambda spec: 0.9 if spec.config.role == "leader" else 0.2)}
    collect = Collect()
    tuner = tune.Tuner(SlowSavingTrainable, param_space=space,
                       tune_config=tune.TuneConfig(scheduler=scheduler, metric="score", mode="max"),
                       run_config=tune.RunConfig(name="run", storage_path=str(tmp_path), verbose=0,
                                                 callbacks=[collect, watch]))
    grid = tuner.fit()
    assert not grid.errors
    check_rungs(scheduler, collect)
    leader = next(r.metrics["trial_id"] for r in grid if r.config["role"] == "leader")
    assert scheduler.decisions()[0].promoted == [leader]
    assert collect.of(leader, "training_iteration") == [1, 2, 3]
    assert collect.of(leader, "started")[1] > watch.saved[leader][0]


# Search algorithms and concurrency limits ---------------------------------------------------------------


def test_optuna_search_behind_a_concurrency_limiter(local_ray, tmp_path):
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    searcher = OptunaSearch(sampler=optuna.samplers.TPESampler(seed=0))
    scheduler = SynchronousSHAScheduler(max_t=3)
    grid, collect, warned, seconds = fit(
        tmp_path, objective_with_checkpoint, scheduler, {"quality": tune.uniform(0.1, 1.0), "steps": 3},
        metric="score", mode="max", search_alg=ConcurrencyLimiter(searcher, max_concurrent=4), num_samples=8)
    assert not grid.errors and warned == []
    # One cohort of all eight trials, although at most four were live at once for the limiter.
    assert [len(ledger.members) for ledger in scheduler.ledgers] == [8] and scheduler.partial_cohorts() == []
    check_rungs(scheduler, collect)
    check_ended_at_their_rung(grid, scheduler)
    # Optuna heard of every trial's end (a paused trial's slot was handed back, never lost).
    states = [t.state for t in searcher._ot_study.get_trials()]
    assert len(states) == 8 and optuna.trial.TrialState.RUNNING not in states


def test_max_concurrent_trials_limits_training_not_the_cohort(local_ray, tmp_path):
    scheduler = SynchronousSHAScheduler(max_t=3)
    grid, collect, warned, seconds = fit(tmp_path, objective_with_checkpoint, scheduler,
                                         grid_space(QUALITIES[:5], sleep=0.05), metric="score", mode="max",
                                         max_concurrent_trials=1)
    assert not grid.errors and warned == []
    assert [len(ledger.members) for ledger in scheduler.ledgers] == [5]
    check_rungs(scheduler, collect)
    # One trial trained at a time: no two steps of different trials overlap.
    steps = sorted((r["started"], r["ended"], t) for t, r in collect.results)
    for (_, end, first), (start, _, second) in zip(steps, steps[1:]):
        assert first == second or start >= end


class AfterCohorts(tune.Stopper):
    """Ends the experiment from outside once the first ``count`` cohorts are decided, as Tune's time budget
    does (``time_budget_s`` is a stopper's ``stop_all()`` too), but on an event instead of the clock."""

    def __init__(self, scheduler, count):
        self.scheduler, self.count = scheduler, count

    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        first = self.scheduler.ledgers[: self.count]
        return len(first) == self.count and all(len(ledger.decisions()) == len(self.scheduler.rungs)
                                                for ledger in first)


def test_an_endless_search_with_a_time_budget_decides_cohort_after_cohort(local_ray, tmp_path):
    scheduler = SynchronousSHAScheduler(max_t=3, cohort_size=4)
    grid, collect, warned, seconds = fit(tmp_path, objective_with_checkpoint, scheduler,
                                         {"quality": tune.uniform(0.1, 1.0), "steps": 3}, metric="score",
                                         mode="max", num_samples=-1, stop=AfterCohorts(scheduler, 2))
    complete = check_rungs(scheduler, collect, complete_only=True)
    assert scheduler.ledgers[:2] == complete[:2], scheduler.debug_string()  # what ended the run
    assert all(len(ledger.members) == 4 for ledger in complete)
    # Cohorts in flight when the run ended (which, and how many, depends on the machine's timing: a later
    # cohort may finish before an earlier one whose trial started late) are cut, never decided partially.
    assert scheduler.partial_cohorts() == []


def test_a_searcher_that_waits_then_runs_out(local_ray, tmp_path):
    # Three suggestions, then none until those three have ended; six in all (num_samples allows 20).
    scheduler = SynchronousSHAScheduler(max_t=3)
    grid, collect, warned, seconds = fit(tmp_path, objective_with_checkpoint, scheduler, {},
                                         metric="score", mode="max", num_samples=20,
                                         search_alg=LazySearcher(QUALITIES, batch=3))
    assert not grid.errors
    assert [len(ledger.members) for ledger in scheduler.ledgers] == [3, 3]
    check_rungs(scheduler, collect)
    check_ended_at_their_rung(grid, scheduler)
    partial = scheduler.partial_cohorts()
    assert [(p["cohort"], p["trials"]) for p in partial] == [(0, 3), (1, 3)]
    assert "no new trial could start" in partial[0]["reason"] and "the search ended" in partial[1]["reason"]
    assert any("cohort 0 is decided with 3 trials: no new trial could start" in w for w in warned)


# A stream of cohorts, closed on events ----------------------------------------------------------------


def decided(scheduler, collect):
    """Each cohort's decisions as (rung budget, promoted qualities, stopped qualities), and the best
    quality that completed the last rung: what a seed must fix, whatever the timing."""
    quality = {t: r["config"]["quality"] for t, r in collect.results}
    cohorts = [[(d.budget, [quality[t] for t in d.promoted], sorted(quality[t] for t in d.stopped))
                for d in ledger.decisions()] for ledger in scheduler.ledgers]
    completed = [quality[t] for ledger in scheduler.ledgers for t in ledger.decisions()[-1].stopped]
    return cohorts, max(completed)


def test_the_same_seed_gives_the_same_decisions_with_one_or_two_trials_at_a_time(local_ray, tmp_path):
    from ray.tune.search import BasicVariantGenerator

    outcomes = []
    for concurrent in (1, 2):  # 2 CPUs: two trials train at once, with a cohort's barrier in between
        scheduler = SynchronousSHAScheduler(max_t=3, cohort_size=3)  # rungs 1 and 3, cohorts of 3, 3 and 1
        grid, collect, warned, seconds = fit(
            tmp_path / f"at-once-{concurrent}", objective_with_checkpoint, scheduler,
            {"quality": tune.uniform(0.1, 1.0), "steps": 3}, metric="score", mode="max", num_samples=7,
            search_alg=BasicVariantGenerator(random_state=7, max_concurrent=concurrent))
        assert not grid.errors
        assert [len(ledger.members) for ledger in scheduler.ledgers] == [3, 3, 1]
        check_rungs(scheduler, collect)
        check_ended_at_their_rung(grid, scheduler)
        assert [(p["cohort"], p["trials"]) for p in scheduler.partial_cohorts()] == [(2, 1)]
        assert "the search ended with 1 of its 3 trials" in scheduler.partial_cohorts()[0]["reason"]
        if concurrent == 1:  # one trial trained at a time: no two steps of different trials overlap
            steps = sorted((r["started"], r["ended"], t) for t, r in collect.results)
            assert all(a == b or start >= end for (_, end, a), (start, _, b) in zip(steps, steps[1:]))
        outcomes.append(decided(scheduler, collect))
    assert outcomes[0] == outcomes[1]
    cohorts, best = outcomes[0]
    assert [[(budget, len(promoted), len(stopped)) for budget, promoted, stopped in cohort] for cohort in cohorts] \
        == [[(1, 1, 2), (3, 0, 1)]] * 2 + [[(1, 1, 0), (3, 0, 1)]]
    assert best == max(quality for cohort in cohorts for quality in cohort[0][1])  # the best first-rung winner


def test_a_slow_searcher_and_late_reports_close_no_cohort_early(local_ray, tmp_path):
    # Every suggestion takes 0.7 s and every third trial sleeps 1.5 s before each report, so trials
    # wait at their first rung while nothing new arrives for seconds: only events close a cohort.
    scheduler = SynchronousSHAScheduler(max_t=3, cohort_size=3)
    searcher = SlowSearcher(seed=3, total=6, seconds=0.7)
    grid, collect, warned, seconds = fit(tmp_path, objective_with_checkpoint, scheduler, {}, metric="score",
                                         mode="max", num_samples=6, search_alg=searcher)
    assert not grid.errors and warned == []
    assert [len(ledger.members) for ledger in scheduler.ledgers] == [3, 3]
    assert scheduler.partial_cohorts() == []
    check_rungs(scheduler, collect)
    check_ended_at_their_rung(grid, scheduler)
    late = [t for t, r in collect.results if r["config"]["sleep"] > 0]
    assert late and all(r["ended"] - r["started"] >= 1.5 for t, r in collect.results if t in late)


def test_the_last_guard_raises_rather_than_hangs(local_ray, tmp_path, monkeypatch):
    """A scheduler that loses the event that cuts a cohort (three trials wait at their first rung and
    the searcher proposes none until they end) would wait forever: the guard ends the run."""
    from eve_search.integrations._ray import _closing

    class LostEvent(SynchronousSHAScheduler):
        def _cut_if_nothing_comes(self, tune_controller):
            return False

    monkeypatch.setattr(_closing, "GUARD_SECONDS", 3.0)  # (60 s in a real run)
    with pytest.raises(Exception, match=r"SynchronousSHAScheduler cannot go on: for 3 s no trial trained or "
                                        r"started while trials .* waited"):
        fit(tmp_path, objective_with_checkpoint, LostEvent(max_t=3), {}, metric="score", mode="max", num_samples=20,
            search_alg=LazySearcher(QUALITIES, batch=3))
