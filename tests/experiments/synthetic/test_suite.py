import math

import pytest
import torch

from eve_search.engine.store import StoreError
from eve_search.experiments.synthetic import _suite
from eve_search.experiments.synthetic import SuiteStore, run_adam, run_eve, run_suite
from eve_search.experiments.synthetic._suite import run_key


@pytest.fixture()
def counted_runners(monkeypatch):
    """The real runners, counting the recorded (non-warm-up) runs by key."""
    calls = []

    def counting(runner):
        def run(function, n, seed, budget, clock):
            if budget != 50.0:  # the warm-up runs use 50 units
                calls.append(run_key(function, n, runner.__name__.removeprefix("run_"), seed))
            return runner(function, n, seed, budget, clock)
        return run

    monkeypatch.setattr(_suite, "RUNNERS", {"eve": counting(run_eve), "adam": counting(run_adam)})
    return calls


def test_runs_are_recorded_as_they_finish_and_a_new_suite_skips_them(tmp_path, counted_runners):
    storage = f"sqlite:///{tmp_path / 'runs.db'}"
    store = SuiteStore(storage, budget=40)
    records, ran = run_suite(store, ["sphere"], [2], [0, 1])
    assert ran == 4 and len(records) == 4
    assert sorted(counted_runners) == sorted(run_key("sphere", 2, m, s) for m in ("eve", "adam") for s in (0, 1))
    # Another process, a wider selection: only the missing seed runs.
    counted_runners.clear()
    again = SuiteStore(storage, budget=40)
    records, ran = run_suite(again, ["sphere"], [2], [0, 1, 2])
    assert ran == 2 and len(records) == 6
    assert sorted(counted_runners) == [run_key("sphere", 2, "adam", 2), run_key("sphere", 2, "eve", 2)]
    stored = again.records()[run_key("sphere", 2, "eve", 0)]
    assert stored == records[run_key("sphere", 2, "eve", 0)]
    assert stored.units >= 40 and stored.iterations > 0 and stored.wall_seconds > 0
    # Reporting only runs nothing.
    counted_runners.clear()
    _, ran = run_suite(again, ["sphere"], [2], [0, 1, 2, 3], run=False)
    assert ran == 0 and counted_runners == []


def test_a_store_recorded_with_other_settings_is_refused(tmp_path, monkeypatch):
    storage = f"sqlite:///{tmp_path / 'runs.db'}"
    SuiteStore(storage, budget=40)
    monkeypatch.setattr(_suite, "ADAM_LR", 0.01)
    with pytest.raises(StoreError, match="other settings \\(adam_lr\\); use another store"):
        SuiteStore(storage, budget=40)


def test_each_method_spends_the_budget_and_stays_in_the_box():
    eve = run_eve("rastrigin", 5, seed=3, budget=120)
    adam = run_adam("rastrigin", 5, seed=3, budget=120)
    for run in (eve, adam):
        assert 120 <= run.units and math.isfinite(run.value) and run.value >= 0
        assert run.forward_points > 0 and run.backward_passes > 0
    # Adam: one forward of one point and one backward per step.
    assert adam.forward_points == adam.backward_passes == adam.iterations


def test_adam_starts_from_the_first_point_of_eves_latin_hypercube(monkeypatch):
    starts = []
    real = _suite.charged_gradient

    def spy(f, point, meter, grad_output):
        if not starts:
            starts.append(point.detach().clone())
        return real(f, point, meter, grad_output)

    monkeypatch.setattr(_suite, "charged_gradient", spy)
    run_adam("sphere", 4, seed=7, budget=5)
    from eve_search.optim._init import initial_population, make_generators

    generator, _ = make_generators(7, torch.device("cpu"))
    z = initial_population("lhs", 4, 4, generator, sigma=0.1, anchor=None, dtype=torch.float32,
                           device=torch.device("cpu"))
    torch.testing.assert_close(starts[0], z[0])  # sphere's box is [0, 1], so x = z
