import math

import pytest
import torch

from eve_search.experiments.synthetic import FUNCTIONS, function_names, objective


def _value(name, point):
    x = torch.tensor([point], dtype=torch.float64)
    return float(objective(name, len(point), dtype=torch.float64)(x)[0])


@pytest.mark.parametrize("name", function_names())
@pytest.mark.parametrize("n", [2, 7])
def test_each_function_takes_its_minimum_at_its_known_minimiser(name, n):
    spec = FUNCTIONS[name]
    assert spec.lower <= spec.argmin <= spec.upper
    value = _value(name, [spec.argmin] * n)
    # Schwefel's 418.9829 leaves ~1.3e-5 per coordinate at x_i = 420.9687.
    assert value == pytest.approx(spec.minimum, abs=2e-5 * n if name == "schwefel" else 1e-12)


@pytest.mark.parametrize(
    ("name", "point", "expected"),
    [
        ("sphere", [0.0, 1.0], 0.5),
        ("rastrigin", [1.0, 0.5], 20 + (1 - 10) + (0.25 + 10)),
        ("ackley", [1.0, 1.0], 20 * (1 - math.exp(-0.2))),  # rms = 1, mean cos = 1
        ("griewank", [1.0, 2.0], 1 + 5 / 4000 - math.cos(1.0) * math.cos(2 / math.sqrt(2))),
        ("rosenbrock", [0.0, 1.0], 100 * 1 + 1),
        ("rosenbrock", [0.0, 0.0, 0.0], 2.0),
        ("schwefel", [0.0, 0.0], 2 * 418.9829),
        ("schwefel", [100.0, -100.0], 2 * 418.9829),  # x sin(sqrt|x|) is even, so the two cancel
        ("zakharov", [1.0, 2.0], 5 + 2.5**2 + 2.5**4),  # S = 0.5*1*1 + 0.5*2*2
    ],
)
def test_values_at_hand_computed_points(name, point, expected):
    assert _value(name, point) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", function_names())
def test_rows_are_scored_independently_in_float32(name):
    spec = FUNCTIONS[name]
    rows = spec.lower + torch.rand(5, 6, generator=torch.Generator().manual_seed(0)) * (spec.upper - spec.lower)
    f = objective(name, 6)
    batched = f(rows)
    assert batched.dtype == torch.float32 and batched.shape == (5,)
    one_by_one = torch.cat([f(rows[k:k + 1]) for k in range(5)])
    torch.testing.assert_close(batched, one_by_one, rtol=1e-5, atol=1e-3)


def test_gradients_flow_by_autograd():
    x = torch.full((1, 3), 0.25, requires_grad=True)
    objective("sphere", 3)(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((1, 3), -0.5))


def test_invalid_name_or_dimension_is_named():
    with pytest.raises(ValueError, match="Invalid function: 'sphre'"):
        objective("sphre", 3)
    with pytest.raises(ValueError, match="Invalid n: 1 .*rosenbrock"):
        objective("rosenbrock", 1)
