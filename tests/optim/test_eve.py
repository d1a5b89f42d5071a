import io
import json
import math
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from eve_search import CostMeter, EvE
from eve_search.optim import kaiming_bounds
from eve_search.optim._population import EvEHyperparameters, Layout, Population


def regression(seed=0, rows=128):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 5, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0], [3.0]]) + 0.1
    return x, y


def small_model(seed=0):
    torch.manual_seed(seed)  # only to build the module; EvE itself never touches the global RNG
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def mse(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def test_eve_lowers_the_loss_of_a_module_through_a_closure():
    x, y = regression()
    model = small_model()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    start = mse(model, x, y).item()
    for _ in range(200):
        best = opt.step(lambda: mse(model, x, y))
    assert best < 0.5 * start
    # After a step the module holds the population's best member.
    assert mse(model, x, y).item() == pytest.approx(best, rel=1e-6)


def test_parameters_become_views_of_one_flat_buffer():
    model = small_model()
    before = [p.detach().clone() for p in model.parameters()]
    opt = EvE(model.parameters())
    flat = opt._flat
    offset = 0
    for p in model.parameters():
        assert p.data_ptr() == flat.data_ptr() + offset * flat.element_size()
        offset += p.numel()
    # Construction only rebinds storage: the module keeps its exact weights (slot 0's anchor).
    for p, old in zip(model.parameters(), before):
        assert torch.equal(p.detach(), old)


def test_default_bounds_are_kaiming_per_tensor_and_a_bias_uses_its_weight_fan_in():
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    assert kaiming_bounds(list(model.parameters())) == pytest.approx(
        [math.sqrt(1.0), math.sqrt(1.0), math.sqrt(1.5), math.sqrt(1.5)])
    conv = torch.nn.Conv2d(3, 8, kernel_size=3)
    assert kaiming_bounds(list(conv.parameters())) == pytest.approx([math.sqrt(6 / 27)] * 2)
    opt = EvE(model.parameters())
    population = opt.population
    assert population.upper[:24].unique().tolist() == pytest.approx([1.0])
    assert population.upper[-3:].unique().tolist() == pytest.approx([math.sqrt(1.5)])
    assert torch.equal(population.lower, -population.upper)


def _train(model, opt, x, y, steps, batch_seed):
    g = torch.Generator().manual_seed(batch_seed)
    for _ in range(steps):
        idx = torch.randint(0, x.shape[0], (32,), generator=g)
        xb, yb = x[idx], y[idx]
        opt.step(lambda: mse(model, xb, yb))


def test_state_dict_save_load_continue_equals_never_stopping_bit_for_bit():
    x, y = regression()
    meter_kwargs = {"mode": "calibrated", "backward_ratio": 2.0}
    model_a = small_model()
    opt_a = EvE(model_a.parameters(), lr=1e-2, seed=5, meter=CostMeter(**meter_kwargs))
    _train(model_a, opt_a, x, y, 30, batch_seed=1)
    buffer = io.BytesIO()
    torch.save({"model": model_a.state_dict(), "opt": opt_a.state_dict(), "meter": opt_a.meter.state_dict()},
               buffer)
    _train(model_a, opt_a, x, y, 40, batch_seed=2)

    buffer.seek(0)
    saved = torch.load(buffer, weights_only=False)
    model_b = small_model(seed=99)  # different weights and a different seed: everything must come back
    opt_b = EvE(model_b.parameters(), lr=1e-2, seed=123, meter=CostMeter(**meter_kwargs))
    model_b.load_state_dict(saved["model"])
    opt_b.load_state_dict(saved["opt"])
    opt_b.meter.load_state_dict(saved["meter"])
    _train(model_b, opt_b, x, y, 40, batch_seed=2)

    for p_a, p_b in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(p_a, p_b)
    assert torch.equal(opt_a.population.z, opt_b.population.z)
    assert opt_a.population.values == opt_b.population.values
    assert opt_a.population.iteration == opt_b.population.iteration == 70
    for name in ("exp_avg", "exp_avg_sq", "adam_steps"):
        assert torch.equal(opt_a.population.state_dict()[name], opt_b.population.state_dict()[name])
    assert opt_a.meter.cost == opt_b.meter.cost
    assert opt_a.meter.backward_passes == opt_b.meter.backward_passes


def test_a_state_loaded_before_the_first_step_gives_the_trajectory_of_the_eve_that_saved_it():
    # The initial population is drawn at its first use; whether that is the first step, a state_dict()
    # or reading .population, and whether a saved state replaces it first, the run is the same.
    x, y = regression()
    runs = []
    for how in ("step", "state_dict", "population", "loaded"):
        model = small_model()
        opt = EvE(model.parameters(), lr=1e-2, seed=5)
        if how == "state_dict":
            opt.state_dict()
        elif how == "population":
            assert opt.population.z.shape == (4, sum(p.numel() for p in model.parameters()))
        elif how == "loaded":
            fresh_model = small_model()
            fresh = EvE(fresh_model.parameters(), lr=1e-2, seed=5)
            saved = {"model": fresh_model.state_dict(), "opt": fresh.state_dict()}
            model = small_model(seed=99)
            opt = EvE(model.parameters(), lr=1e-2, seed=123)
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
        _train(model, opt, x, y, 15, batch_seed=1)
        runs.append((opt.population.z.clone(), list(opt.population.values),
                     torch.cat([p.detach().flatten() for p in model.parameters()])))
    for z, values, weights in runs[1:]:
        assert torch.equal(z, runs[0][0]) and values == runs[0][1] and torch.equal(weights, runs[0][2])


@pytest.mark.parametrize("key, bad, message", [
    ("exp_avg", torch.zeros(1), r"population exp_avg of shape \(1,\) does not match this optimizer's \(4, 113\)"),
    ("exp_avg_sq", torch.zeros(4, 5), r"population exp_avg_sq of shape \(4, 5\) does not match"),
    ("z", torch.zeros(3, 113), r"population z of shape \(3, 113\) does not match"),
    ("adam_steps", torch.zeros(()), r"population adam_steps of shape \(\) does not match this optimizer's \(4,\)"),
    ("values", torch.zeros(2, dtype=torch.float64), r"population values: 2 values for 4 slots"),
    ("step_generator", torch.zeros(3, dtype=torch.uint8), r"."),
])
def test_a_tampered_population_state_is_refused_by_name_before_anything_changes(key, bad, message):
    x, y = regression()
    model = small_model()
    opt = EvE(model.parameters(), lr=1e-2, seed=5)
    _train(model, opt, x, y, 5, batch_seed=1)
    saved = opt.state_dict()
    saved = {**saved, "state": {**saved["state"], "eve": {**saved["state"]["eve"], key: bad}}}
    target_model = small_model(seed=3)
    target = EvE(target_model.parameters(), lr=1e-2, seed=9)
    _train(target_model, target, x, y, 3, batch_seed=2)
    before = target.population.state_dict()
    before = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in before.items()}
    with pytest.raises((ValueError, RuntimeError), match=message):
        target.load_state_dict(saved)
    after = target.population.state_dict()
    for name, value in before.items():
        assert torch.equal(after[name], value) if isinstance(value, torch.Tensor) else after[name] == value, name


_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_eve import regression, small_model, _train
from eve_search import EvE
x, y = regression()
model = small_model()
opt = EvE(model.parameters(), lr=1e-2, seed=7)
_train(model, opt, x, y, 25, batch_seed=3)
weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
print(json.dumps({{"values": opt.population.values, "weights": weights}}))
"""


def test_the_same_seed_gives_the_same_trajectory_in_another_process():
    x, y = regression()
    model = small_model()
    opt = EvE(model.parameters(), lr=1e-2, seed=7)
    _train(model, opt, x, y, 25, batch_seed=3)
    script = _SCRIPT.format(tests=str(__import__("pathlib").Path(__file__).parent))
    there = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                      check=True).stdout)
    assert there["values"] == opt.population.values
    assert there["weights"] == torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def test_eve_never_touches_the_global_rng():
    x, y = regression()
    model = small_model()
    state = torch.get_rng_state()
    opt = EvE(model.parameters(), seed=1)
    _train(model, opt, x, y, 10, batch_seed=0)
    assert torch.equal(torch.get_rng_state(), state)


def test_the_budget_stops_a_step_and_a_raised_budget_continues_it():
    x, y = regression()
    model = small_model()
    meter = CostMeter(7, mode="calibrated", backward_ratio=2.0)
    opt = EvE(model.parameters(), meter=meter)
    while not meter.exhausted:
        opt.step(lambda: mse(model, x, y))
    assert 7 <= meter.cost < 7 + 3  # the last charge crossed the budget
    iteration = opt.population.iteration
    opt.step(lambda: mse(model, x, y))
    assert opt.population.iteration == iteration  # an exhausted meter means no new iteration
    meter.set_budget(40)
    while not meter.exhausted:
        opt.step(lambda: mse(model, x, y))
    assert opt.population.iteration > iteration


def test_non_finite_losses_are_never_accepted():
    x, y = regression()
    model = small_model()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    first = model[0].weight

    def poisoned():
        loss = mse(model, x, y)
        # Any candidate whose first weight is positive yields NaN.
        return torch.where(first[0, 0] > 0, torch.full_like(loss, float("nan")), loss)

    for _ in range(100):
        opt.step(poisoned)
    assert all(not math.isnan(v) for v in opt.population.values)
    finite = [v for v in opt.population.values if math.isfinite(v)]
    assert finite, "a NaN slot must be replaceable by a finite candidate"
    assert model[0].weight[0, 0].item() <= 0


def test_zero_grad_between_steps_does_not_break_the_fallback():
    x, y = regression()
    model = small_model()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    for _ in range(20):
        opt.zero_grad(set_to_none=True)
        opt.step(lambda: mse(model, x, y))
    assert sum(float(step) for step in opt.population.adam_steps) > 0


def test_learning_rate_set_in_param_groups_reaches_the_fallback():
    model = small_model()
    opt = EvE(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = regression()
    opt.step(lambda: mse(model, x, y))
    scheduler.step()
    opt.step(lambda: mse(model, x, y))
    assert opt.population.hyper.lr == pytest.approx(5e-3)


class _LargeAllocations(TorchDispatchMode):
    """Records every op that returns a new tensor with at least `numel` elements."""

    def __init__(self, numel):
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        existing = {t.untyped_storage().data_ptr() for t in inputs}
        for t in torch.utils._pytree.tree_leaves(out):
            # A view or an in-place/out= result shares an input's storage: not an allocation.
            if isinstance(t, torch.Tensor) and t.numel() >= self.numel \
                    and t.untyped_storage().data_ptr() not in existing:
                self.ops.append(str(func))
        return out


def test_an_iteration_allocates_nothing_the_size_of_the_weights():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    n = sum(p.numel() for p in model.parameters())
    x, y = torch.randn(8, 64), torch.randn(8, 1)
    opt = EvE(model.parameters(), lr=1e-3, meter=CostMeter())
    for _ in range(8):  # every slot's Adam state exists after a few fallbacks
        opt.step(lambda: mse(model, x, y))
    with _LargeAllocations(n) as recorder:
        for _ in range(8):
            opt.step(lambda: mse(model, x, y))
    assert recorder.ops == []


class _ScriptedEvaluator:
    """f(x) = |x|^2 in real coordinates; the DE child always 'fails' so every iteration falls back."""

    def __init__(self, population):
        self.population = population

    def exhausted(self):
        return False

    def score(self, rows):
        return [0.0] * rows.shape[0] if rows.shape[0] == 4 else [math.inf] * rows.shape[0]

    def score_work(self):
        return float((self.population.work ** 2).sum())

    def gradient(self, x):
        return float((x ** 2).sum()), 2 * x


def test_each_slot_keeps_one_continuous_adam_trajectory():
    n = 3
    z = torch.rand(4, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lower, upper = -torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64)
    population = Population(z, lower, upper, EvEHyperparameters(lr=0.1, n_adam=2), torch.Generator().manual_seed(0),
                            refresh=False, work=torch.empty(n, dtype=torch.float64))
    for _ in range(5):  # slot 0 is challenged at iterations 1 and 5, the others once
        population.iterate(_ScriptedEvaluator(population))
    steps = [int(step) for step in population.adam_steps]
    assert steps == [4, 2, 2, 2]  # slot 0's second burst continued its first: moments were not reset


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_box_maps_give_the_bits_of_their_formulas(dtype):
    """Segments bounded by one number each (Kaiming's default) and a segment bounded per weight: to_real
    is x_l + z (x_u - x_l) rounded once (what torch.addcmul gives), and clamp_to_box clamps exactly."""
    g = torch.Generator().manual_seed(0)
    segments = [37, 1, 64, 5]
    lower = [torch.tensor(-0.3, dtype=dtype), torch.tensor(-2.0, dtype=dtype),
             -torch.rand(64, generator=g).to(dtype) - 0.1, torch.tensor(0.25, dtype=dtype)]
    upper = [torch.tensor(0.3, dtype=dtype), torch.tensor(1.5, dtype=dtype),
             torch.rand(64, generator=g).to(dtype) + 0.1, torch.tensor(0.75, dtype=dtype)]
    n = sum(segments)
    z = torch.rand(4, n, generator=g).to(dtype)
    population = Population(z, lower, upper, EvEHyperparameters(), torch.Generator().manual_seed(0), refresh=True,
                            work=torch.empty(n, dtype=dtype), layout=Layout(segments=segments))
    expected = torch.cat([torch.addcmul(low, part, high - low) for part, low, high in
                          zip(z.split(segments, -1), lower, upper)], -1)
    rows = population.to_real(z, out=torch.empty_like(z))
    assert torch.equal(rows, expected)
    one = population.to_real(z[2], out=torch.empty(n, dtype=dtype))
    assert torch.equal(one, expected[2])
    x = torch.randn(n, generator=g).to(dtype)
    clamped = torch.cat([torch.clamp(part, min=low, max=high) for part, low, high in
                         zip(x.split(segments), lower, upper)])
    assert torch.equal(population.clamp_to_box(x.clone()), clamped)


def test_one_fallback_step_matches_equation_4_by_hand():
    n, lr, wd = 3, 0.1, 0.01
    z = torch.tensor([[0.6, 0.7, 0.8], [0.5, 0.5, 0.5], [0.9, 0.2, 0.4], [0.3, 0.3, 0.9]], dtype=torch.float64)
    lower, upper = -torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64)
    hyper = EvEHyperparameters(lr=lr, n_adam=1, weight_decay=wd, F=0.5, gamma=0.0)
    population = Population(z.clone(), lower, upper, hyper, torch.Generator().manual_seed(0), refresh=False,
                            work=torch.empty(n, dtype=torch.float64))
    population.iterate(_ScriptedEvaluator(population))
    # With gamma = 0 the child is z_a + F (z_b - z_c) + F (z_best - z_a); every slot scored 0.0, so
    # best = slot 0. Recover which donors were drawn from the step generator's first draw.
    picks = torch.randperm(3, generator=torch.Generator().manual_seed(0))[:3].tolist()
    a, b, c = ([1, 2, 3][k] for k in picks)
    child = (z[a] + 0.5 * (z[b] - z[c]) + 0.5 * (z[0] - z[a])).clamp(0, 1)
    x = lower + child * (upper - lower)
    g = 2 * x + wd * x  # gradient of |x|^2 plus the folded L2 term
    m = 0.1 * g
    v = 0.001 * g * g
    m_hat, v_hat = m / (1 - 0.9), v / (1 - 0.999)
    x_new = (x - lr * m_hat / (v_hat.sqrt() + 1e-8)).clamp(-1, 1)
    torch.testing.assert_close(population.work, x_new, rtol=1e-12, atol=1e-12)
    # Slot 0 scored 0.0 and |x_new|^2 > 0, so strict selection leaves it untouched.
    assert torch.equal(population.z[0], z[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"lr": -1.0}, ValueError, "Invalid learning rate: -1.0"),
        ({"population_size": 3}, ValueError, "Invalid population_size: 3"),
        ({"population_size": 4.5}, TypeError, "Invalid population_size: 4.5"),
        ({"F": 2.5}, ValueError, "Invalid F: 2.5"),
        ({"eta": -1.0}, ValueError, "Invalid eta: -1.0"),
        ({"n_adam": 1.5}, ValueError, "Invalid n_adam: 1.5"),
        ({"betas": (0.9, 1.0)}, ValueError, r"Invalid betas: \(0.9, 1.0\)"),
        ({"bounds": (1.0, 1.0)}, ValueError, "Invalid bounds: lower 1.0 >= upper 1.0 at element 0 of parameter 0"),
        ({"bounds": -2.0}, ValueError, "Invalid bounds: -2.0"),
        ({"init": "sobol"}, ValueError, "Invalid init: 'sobol'"),
        ({"anchor": "zeros"}, ValueError, "Invalid anchor: 'zeros'"),
        ({"seed": -4}, ValueError, "Invalid seed: -4"),
        ({"meter": 3}, TypeError, "Invalid meter: 3"),
    ],
)
def test_invalid_arguments_are_named_with_their_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        EvE(small_model().parameters(), **kwargs)


def test_a_param_group_may_not_set_what_eve_takes_once():
    # Several groups work (tests/optim/test_eve_dropin.py); only lr and weight_decay may differ.
    model = small_model()
    with pytest.raises(ValueError, match=r"Invalid param group 1: betas=\(0.5, 0.9\)"):
        EvE([{"params": model[0].parameters()}, {"params": model[2].parameters(), "betas": (0.5, 0.9)}])


def test_closure_contract_errors():
    model = small_model()
    x, y = regression()
    opt = EvE(model.parameters())
    with pytest.raises(TypeError, match="needs a closure"):
        opt.step(None)
    with pytest.raises(TypeError, match=r"closure returned a tensor of shape \(128, 1\)"):
        opt.step(lambda: (model(x) - y) ** 2)
    with pytest.raises(TypeError, match="closure returned str"):
        opt.step(lambda: "loss")
    with pytest.raises(TypeError, match="without a graph"):
        for _ in range(20):  # a float loss works until the fallback needs a gradient
            opt.step(lambda: mse(model, x, y).item())


def test_weights_outside_the_bounds_are_clamped_with_a_warning():
    model = small_model()
    with torch.no_grad():
        model[0].weight[0, 0] = 50.0
    with pytest.warns(UserWarning, match="1 of 113 weights lie outside"):
        EvE(model.parameters())


def test_a_non_finite_gradient_never_poisons_a_slots_moments():
    x, y = regression()
    model = small_model()
    opt = EvE(model.parameters(), lr=1e-2, seed=0)
    w = model[0].weight

    def nan_gradient():
        # Finite value, but d/dw sqrt(|w - w|) is infinite, times 0 gives a NaN gradient.
        return mse(model, x, y) + 0.0 * (w[0, 0] - w[0, 0].detach()).abs().sqrt()

    for _ in range(40):
        opt.step(nan_gradient)
    population = opt.population
    assert bool(torch.isfinite(population.exp_avg).all()) and bool(torch.isfinite(population.exp_avg_sq).all())
    assert all(math.isfinite(v) for v in population.values)
