import itertools
import json
import math
import re
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search import CostMeter, InputError, minimize
from eve_search.optim import MinimizeOptions


def sphere(x):
    return ((x - 0.5) ** 2).sum(dim=1)


def rastrigin(x):
    y = x * 10.24 - 5.12
    return 10 * x.shape[1] + (y**2 - 10 * torch.cos(2 * math.pi * y)).sum(dim=1)


def ackley(x):
    y = x * 65.536 - 32.768
    n = x.shape[1]
    return (-20 * torch.exp(-0.2 * torch.sqrt((y**2).sum(dim=1) / n))
            - torch.exp(torch.cos(2 * math.pi * y).sum(dim=1) / n) + 20 + math.e)


def rosenbrock(x):
    y = x * 4.096 - 2.048
    if x.shape[1] == 1:
        return (y[:, 0] - 1) ** 2
    return (100 * (y[:, 1:] - y[:, :-1] ** 2) ** 2 + (1 - y[:, :-1]) ** 2).sum(dim=1)


PROBLEMS = {"sphere": sphere, "rastrigin": rastrigin, "ackley": ackley, "rosenbrock": rosenbrock}


def fixed_meter(budget):
    # Calibrated charges make the stopping point independent of timing noise.
    return CostMeter(budget, mode="calibrated", backward_ratio=2.0)


@settings(max_examples=25, deadline=None)
@given(problem=st.sampled_from(sorted(PROBLEMS)), dim=st.integers(1, 30), seed=st.integers(0, 10_000),
       pm=st.booleans(), init=st.sampled_from(["lhs", "proximity"]))
def test_best_so_far_never_increases_on_a_deterministic_objective(problem, dim, seed, pm, init):
    result = minimize(PROBLEMS[problem], 0.0, 1.0, dim=dim, budget=150, seed=seed, polynomial_mutation=pm,
                      init=init, meter=fixed_meter(150))
    history = result.best_so_far
    assert all(later <= earlier for earlier, later in itertools.pairwise(history))
    assert result.fun == history[-1]
    assert float(PROBLEMS[problem](result.x.unsqueeze(0))[0]) == pytest.approx(result.fun, rel=1e-5, abs=1e-6)


def test_minimize_improves_on_the_paper_defaults():
    result = minimize(sphere, 0.0, 1.0, dim=10, budget=2000, seed=0, meter=fixed_meter(2000))
    start = minimize(sphere, 0.0, 1.0, dim=10, budget=4, seed=0, meter=fixed_meter(4))
    assert result.fun < 1e-3 < start.fun
    assert bool(((result.x >= 0) & (result.x <= 1)).all())


def test_stops_the_first_time_cost_reaches_the_budget():
    costs = []

    class RecordingMeter(CostMeter):
        def charge_forward(self, points, seconds):
            super().charge_forward(points, seconds)
            costs.append(self.cost)

        def charge_backward(self, seconds):
            super().charge_backward(seconds)
            costs.append(self.cost)

    meter = RecordingMeter(300, mode="calibrated", backward_ratio=2.0)
    result = minimize(rastrigin, 0.0, 1.0, dim=5, budget=300, seed=3, meter=meter)
    assert costs[-1] >= 300 and all(c < 300 for c in costs[:-1])
    assert result.cost == costs[-1]
    assert costs == sorted(costs)


_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_minimize import rastrigin, fixed_meter
from eve_search import minimize
r = minimize(rastrigin, 0.0, 1.0, dim=8, budget=400, seed=11, meter=fixed_meter(400))
print(json.dumps({{"history": r.best_so_far, "x": r.x.tolist(), "iterations": r.iterations}}))
"""


def test_the_same_seed_gives_the_same_trajectory_in_another_process():
    here = minimize(rastrigin, 0.0, 1.0, dim=8, budget=400, seed=11, meter=fixed_meter(400))
    script = _SCRIPT.format(tests=str(__import__("pathlib").Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    there = json.loads(out)
    assert there["history"] == here.best_so_far
    assert there["x"] == here.x.tolist()
    other_seed = minimize(rastrigin, 0.0, 1.0, dim=8, budget=400, seed=12, meter=fixed_meter(400))
    assert other_seed.best_so_far != here.best_so_far


def test_non_finite_values_are_never_accepted_and_never_block_a_slot():
    calls = {"n": 0}

    def flaky(x):
        calls["n"] += 1
        values = sphere(x)
        if calls["n"] == 1:  # the initial scoring of all four slots is NaN
            return torch.full_like(values, float("nan"))
        # half of the box is poisoned
        return torch.where(x[:, 0] > 0.8, torch.full_like(values, float("nan")), values)

    result = minimize(flaky, 0.0, 1.0, dim=3, budget=600, seed=0, meter=fixed_meter(600), n_adam=0)
    assert math.isfinite(result.fun)
    assert result.x[0] <= 0.8


def test_resample_rescores_the_challenged_slot_every_iteration():
    batches = []

    def resample():
        batches.append(len(batches))

    result = minimize(sphere, 0.0, 1.0, dim=4, budget=60, seed=0, meter=fixed_meter(60), resample=resample,
                      n_adam=0, polynomial_mutation=False)
    # Per iteration: refresh (1) + child (1); the first scores all 4 slots instead of refreshing, and
    # the last may stop after its refresh when that reaches the budget.
    assert len(batches) == result.iterations
    full = 4 + 1 + 2 * (result.iterations - 1)
    assert result.cost in (full, full - 1)


def test_a_supplied_gradient_replaces_autograd():
    seen = []

    def gradient(x):
        seen.append(x.clone())
        return 2 * (x - 0.5)

    result = minimize(lambda x: sphere(x).detach(), 0.0, 1.0, dim=5, budget=200, seed=0, gradient=gradient,
                      meter=fixed_meter(200))
    assert seen and result.fun < sphere(torch.full((1, 5), 0.9)).item()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"population_size": 3}, ValueError, "Invalid population_size: 3"),
        ({"F": 0.0}, ValueError, "Invalid F: 0.0"),
        ({"eta": -1.0}, ValueError, "Invalid eta: -1.0"),
        ({"lr": -0.1}, ValueError, "Invalid learning rate: -0.1"),
        ({"n_adam": -2}, ValueError, "Invalid n_adam: -2"),
        ({"budget": 0}, ValueError, "Invalid budget: 0"),
        ({"init": "sobol"}, ValueError, "Invalid init: 'sobol'"),
        ({"seed": -1}, ValueError, "Invalid seed: -1"),
    ],
)
def test_invalid_arguments_are_named_with_their_value(kwargs, error, message):
    options = {"dim": 3, "budget": 10} | kwargs
    with pytest.raises(error, match=message):
        minimize(sphere, 0.0, 1.0, **options)


def test_bounds_must_be_ordered_and_consistent():
    with pytest.raises(ValueError, match=r"lower 1.0 >= upper 1.0 at coordinate 2"):
        minimize(sphere, torch.tensor([0.0, 0.0, 1.0]), torch.ones(3), budget=10)
    with pytest.raises(ValueError, match="Invalid lower: shape"):
        minimize(sphere, torch.zeros(2), torch.ones(3), budget=10, dim=3)
    with pytest.raises(ValueError, match="pass vectors of equal length, or scalars with dim="):
        minimize(sphere, 0.0, 1.0, budget=10)


def test_f_must_return_one_value_per_row():
    with pytest.raises(TypeError, match=r"f returned \(4, 3\) for 4 points"):
        minimize(lambda x: x, 0.0, 1.0, dim=3, budget=10)


# The options object -----------------------------------------------------------------------------

EVERY_OPTION = {"lr": 0.1, "n_adam": 2, "weight_decay": 0.0, "polynomial_mutation": False, "eta": 5.0, "F": 0.8,
                "gamma": 0.0, "sigma": 0.3, "betas": (0.8, 0.99), "eps": 1e-6, "population_size": 6,
                "init": "proximity"}


def _run(budget=150, **kwargs):
    result = minimize(rastrigin, 0.0, 1.0, dim=5, budget=budget, seed=4, meter=fixed_meter(budget), **kwargs)
    return result.best_so_far, result.x.tolist(), result.iterations, result.meter.backward_passes


def test_every_option_as_a_keyword_runs_exactly_as_the_options_object():
    assert set(EVERY_OPTION) == set(MinimizeOptions.__dataclass_fields__)  # every field is exercised
    x0 = torch.full((5,), 0.3)
    by_keywords = _run(x0=x0, **EVERY_OPTION)
    assert by_keywords == _run(x0=x0, options=MinimizeOptions(**EVERY_OPTION))
    assert by_keywords != _run()
    assert _run() == _run(options=MinimizeOptions())


def test_the_options_object_is_used_and_keywords_with_it_are_one_line_naming_them():
    options = MinimizeOptions(n_adam=0, polynomial_mutation=False)
    without_adam = _run(options=options)
    assert without_adam[3] == 0  # no gradient was taken
    assert without_adam == _run(n_adam=0, polynomial_mutation=False)
    message = ("Invalid options: given with n_adam= (minimize() takes a MinimizeOptions or its fields as "
               "keywords, not both)")
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        _run(options=options, n_adam=3)
    assert options.n_adam == 0  # the object itself is left as it was


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"population_size": 3}, ("Invalid population_size: 3 (rand-to-pbest/1 needs the target plus three "
                                  "distinct donors, so at least 4)")),
        ({"n_adam": -2}, "Invalid n_adam: -2 (expected an int >= 0; 0 turns the fallback off)"),
        ({"F": 2.5}, "Invalid F: 2.5 (expected a DE weight in (0, 2])"),
        ({"betas": (0.9, 1.0)}, "Invalid betas: (0.9, 1.0) (expected two numbers in [0, 1))"),
        ({"sigma": 0.0}, "Invalid sigma: 0.0 (expected a number > 0)"),
        ({"init": "sobol"}, "Invalid init: 'sobol' (expected one of proximity, lhs)"),
    ],
)
def test_a_bad_option_is_one_line_naming_it_whether_object_or_keyword(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        MinimizeOptions(**kwargs)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        minimize(sphere, 0.0, 1.0, dim=3, budget=10, **kwargs)


def test_an_unknown_keyword_or_a_foreign_options_object_is_a_type_error():
    with pytest.raises(TypeError, match=r"^minimize\(\) got an unexpected keyword argument 'learning_rate'$"):
        minimize(sphere, 0.0, 1.0, dim=3, budget=10, learning_rate=0.1)
    with pytest.raises(TypeError, match=r"^Invalid options: \{'lr': 0.1\} \(expected a MinimizeOptions or None\)$"):
        minimize(sphere, 0.0, 1.0, dim=3, budget=10, options={"lr": 0.1})
