"""The Optuna pruner, the Optuna driver and the Ray Tune scheduler on a busy machine (issue 41).

Each test runs while processes spin on every CPU (the ``busy_machine`` fixture of tests/conftest.py) and
with latency where the host calls eve-search: a sampler or searcher that takes a while to suggest,
reports that arrive late, a store whose writes are slow (tests/load.py). Each must finish, reach the
decisions the same search reaches on a quiet machine (computed first, before anything spins, or known
in advance from the scores), and lose no live worker's trial. No time is asserted: a run's time budget
is only the hang guard, sized for a machine ten times slower (``HANG_GUARD_S``).
"""

from __future__ import annotations

import faulthandler
import math
import time

import optuna
import pytest
from optuna.trial import TrialState

from eve_search.engine.sweep import SweepSettings, prepare_sweep
from eve_search.integrations.optuna import SynchronousSHAPruner, optimize_in_cohorts, run_sweep_on_optuna
from tests.integrations.test_optuna_dropin import CONFIGS, check_decisions, make_objective, within
from tests.integrations.tiny_tasks import TINY_WORKERS_TASK  # noqa: F401  (registers tiny-workers)

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = [pytest.mark.load, pytest.mark.slow]  # slow: `make test` starts this file first
HANG_GUARD_S = 600  # a run that takes this long hangs (each takes seconds to a minute on a busy 2-core machine)


@pytest.fixture(autouse=True)
def watchdog():
    """Past the guard, the process dumps every thread's stack and exits: CI fails, never stalls."""
    faulthandler.dump_traceback_later(HANG_GUARD_S + 60, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# The Optuna pruner: cohorts of threads -------------------------------------------------------------------


def _cohort_study(storage):
    """The twelve configurations of test_optuna_dropin, queued: trial n trains configuration n (seeded by n),
    so its scores do not depend on which thread trains it, or when."""
    study = optuna.create_study(direction="maximize", storage=storage,
                                pruner=SynchronousSHAPruner(cohort_size=6, poll_interval=0.02),
                                sampler=optuna.samplers.RandomSampler(seed=0))
    for params in CONFIGS:
        study.enqueue_trial(params)
    return study


def _decided(study):
    """Every rung decision (promoted, stopped) and the best trial: what the search decided."""
    decisions = check_decisions(study)
    return {key: (d["promoted"], d["stopped"]) for key, d in sorted(decisions.items())}, study.best_trial.number


@pytest.fixture(scope="module")
def quiet_cohorts(tmp_path_factory):
    """The same search on the machine as it is (before any test of this file makes it busy)."""
    study = _cohort_study(f"sqlite:///{tmp_path_factory.mktemp('quiet') / 'cohorts.db'}")
    within(HANG_GUARD_S, lambda: optimize_in_cohorts(study, make_objective(), n_trials=12, n_jobs=3))
    return _decided(study)


def test_optuna_cohorts_decide_as_quietly_with_a_slow_sampler_late_reports_and_a_slow_store(
        quiet_cohorts, busy_machine, latency, tmp_path):
    study = _cohort_study(f"sqlite:///{tmp_path / 'busy.db'}")
    asked = latency(study.sampler, "before_trial", 0.2)  # a sampler that takes a while to suggest
    written = latency(optuna.storages.RDBStorage, "set_trial_intermediate_value", 0.03)  # every report's write

    def late(trial, epoch):  # every third trial's reports arrive late
        if trial.number % 3 == 1:
            time.sleep(0.1)

    within(HANG_GUARD_S, lambda: optimize_in_cohorts(study, make_objective(before_report=late), n_trials=12,
                                                     n_jobs=3))
    assert len(asked) == 12 and written
    assert _decided(study) == quiet_cohorts  # check_decisions also holds every trial ended, judged right
    assert [t.state for t in study.trials].count(TrialState.FAIL) == 0


# The Optuna driver: worker processes on one study ----------------------------------------------------------


def _driver_settings():
    return SweepSettings(task="tiny-workers", space="tiny", optimizer="eve", seed=0, configs=12, rungs=(10, 30, 90),
                         backward_ratio=2.0)


def _comparable(result):
    values = result.as_dict()
    for key in ("wall_seconds", "training_seconds", "trained"):
        values.pop(key)
    return values


@pytest.fixture(scope="module")
def quiet_local(tmp_path_factory):
    """The local engine's result of the same sweep, on the machine as it is: what every driver run must equal."""
    folder = tmp_path_factory.mktemp("local")
    sweep = prepare_sweep(_driver_settings(), storage=f"sqlite:///{folder / 'local.db'}",
                          checkpoint_dir=folder / "checkpoints")
    return _comparable(sweep.run())


def test_the_optuna_driver_equals_the_local_engine_and_loses_no_live_trial_on_a_busy_machine_with_a_slow_store(
        quiet_local, busy_machine, latency, tmp_path):
    from eve_search.engine import _stores
    from eve_search.integrations._optuna_driver import _worker

    # This process is worker 0: its claims and its results are written slowly (the spawned worker's are not).
    claims = latency(_worker, "claim_at_once", 0.1)
    results = latency(_stores, "record_results", 0.3)
    settings = _driver_settings()
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    sweep = prepare_sweep(settings, storage=url, checkpoint_dir=tmp_path / "checkpoints")
    result = within(HANG_GUARD_S, lambda: run_sweep_on_optuna(sweep, workers=2))  # the documented heartbeats
    assert claims and results
    assert _comparable(result) == quiet_local
    study = optuna.load_study(study_name=settings.name, storage=url)
    assert [t.state for t in study.trials].count(TrialState.FAIL) == 0  # no live worker's trial taken as dead
    assert sorted(t.user_attrs["config_index"] for t in study.trials) == list(range(12))


# The Ray Tune scheduler: a slow searcher and late reports --------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_cohorts_decide_by_their_scores_with_a_slow_searcher_and_late_reports_on_a_busy_machine(
        local_ray, busy_machine, tmp_path):
    from ray import tune

    from eve_search.integrations.ray import SynchronousSHAScheduler
    from tests.integrations.ray_dropin_trainables import SlowSearcher, objective_with_checkpoint, score_at

    class Collect(tune.Callback):
        def __init__(self):
            self.results = []

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.results.append((trial.trial_id, dict(result)))

    # Every suggestion takes 0.5 s; every third trial sleeps 0.5 s before each of its reports.
    searcher = SlowSearcher(seed=3, total=6, seconds=0.5, late_seconds=0.5)
    scheduler = SynchronousSHAScheduler(max_t=3, cohort_size=3)
    collect = Collect()
    tuner = tune.Tuner(objective_with_checkpoint, param_space={},
                       tune_config=tune.TuneConfig(scheduler=scheduler, search_alg=searcher, metric="score",
                                                   mode="max", num_samples=6, reuse_actors=True,
                                                   time_budget_s=HANG_GUARD_S),
                       run_config=tune.RunConfig(name="busy", storage_path=str(tmp_path), verbose=0,
                                                 callbacks=[collect]))
    grid = tuner.fit()
    assert not grid.errors
    quality = {t: r["config"]["quality"] for t, r in collect.results}
    # The decisions a quiet run reaches, known from the scores: the searcher's qualities in the order it
    # suggested them, three to a cohort, the best of each promoted at rung 1 and the last rung stopping all.
    expected = []
    for first in (0, 3):
        cohort = searcher.qualities[first:first + 3]
        expected.append([(1, [max(cohort)], sorted(set(cohort) - {max(cohort)})), (3, [], [max(cohort)])])
    decided = [[(d.budget, [quality[t] for t in d.promoted], sorted(quality[t] for t in d.stopped))
                for d in ledger.decisions()] for ledger in scheduler.ledgers]
    assert decided == expected and scheduler.partial_cohorts() == []
    for trial_id, result in collect.results:  # each result's score is the one its step gives: nothing lost
        assert result["score"] == score_at(result["config"], result["step"])
    # No trial lost: every trial ended at the rung it lost, the winners at the last one.
    ended = {r.metrics["trial_id"]: r.metrics["training_iteration"] for r in grid}
    assert len(ended) == 6 and sorted(ended.values()) == [1, 1, 1, 1, 3, 3]
    assert math.isclose(max(quality.values()), max(searcher.qualities))
