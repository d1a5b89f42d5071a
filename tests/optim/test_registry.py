import copy

import pytest
import torch

from eve_search import (
    CostMeter,
    MeteredOptimizer,
    make_optimizer,
    optimizer_names,
    register_optimizer,
)

PAPER_OPTIMIZERS = ["adabelief", "adam", "adamw", "amsgrad", "eve", "lookahead", "nadam", "radam", "sgd_momentum"]


def problem():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = (x[:, :2].sum(dim=1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.3, 0.3, generator=g)
    return model, x, y


def loss_of(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def test_the_registry_holds_eve_and_the_eight_paper_baselines():
    assert optimizer_names() == PAPER_OPTIMIZERS


@pytest.mark.parametrize("name", PAPER_OPTIMIZERS)
def test_every_optimizer_lowers_a_small_models_loss_within_the_budget(name):
    model, x, y = problem()
    meter = CostMeter(600, mode="calibrated", backward_ratio=2.0)
    lr = 0.05 if name == "sgd_momentum" else 0.01
    opt = make_optimizer(name, model.parameters(), lr=lr, weight_decay=1e-4, meter=meter, seed=0)
    start = loss_of(model, x, y).item()
    g = torch.Generator().manual_seed(1)
    while not meter.exhausted:
        idx = torch.randint(0, 256, (64,), generator=g)
        opt.step(lambda: loss_of(model, x[idx], y[idx]))
    assert meter.cost >= 600
    assert loss_of(model, x, y).item() < 0.7 * start, name


@pytest.mark.parametrize("name", PAPER_OPTIMIZERS)
def test_every_optimizer_continues_bit_for_bit_after_a_state_dict_round_trip(name):
    model_a, x, y = problem()
    opt_a = make_optimizer(name, model_a.parameters(), lr=0.01, weight_decay=1e-4, seed=3)

    def train(model, opt, steps, seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            idx = torch.randint(0, 256, (32,), generator=g)
            opt.step(lambda: loss_of(model, x[idx], y[idx]))

    train(model_a, opt_a, 12, seed=1)
    saved_model, saved_opt = copy.deepcopy(model_a.state_dict()), copy.deepcopy(opt_a.state_dict())
    train(model_a, opt_a, 12, seed=2)

    model_b, _, _ = problem()
    opt_b = make_optimizer(name, model_b.parameters(), lr=0.01, weight_decay=1e-4, seed=3)
    model_b.load_state_dict(saved_model)
    opt_b.load_state_dict(saved_opt)
    train(model_b, opt_b, 12, seed=2)
    for p_a, p_b in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(p_a, p_b), name


def test_a_baseline_step_is_one_forward_and_one_backward_charged_to_the_meter():
    model, x, y = problem()
    meter = CostMeter(mode="calibrated", backward_ratio=2.5)
    opt = make_optimizer("adam", model.parameters(), lr=1e-3, meter=meter)
    value = opt.step(lambda: loss_of(model, x, y))
    assert isinstance(value, float)
    assert (meter.forward_points, meter.backward_passes, meter.cost) == (1, 1, 3.5)


def test_a_spent_budget_skips_the_step():
    model, x, y = problem()
    meter = CostMeter(1, mode="calibrated", backward_ratio=1.0)
    opt = make_optimizer("sgd_momentum", model.parameters(), lr=0.1, meter=meter)
    opt.step(lambda: loss_of(model, x, y))
    before = [p.clone() for p in model.parameters()]
    assert opt.step(lambda: loss_of(model, x, y)) is None
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_weight_decay_is_decoupled_for_adamw_and_l2_for_sgd():
    model, _, _ = problem()
    assert type(make_optimizer("adamw", model.parameters(), lr=1e-3, weight_decay=0.1).optimizer).__name__ == "AdamW"
    sgd = make_optimizer("sgd_momentum", model.parameters(), lr=1e-3, weight_decay=0.1).optimizer
    assert sgd.param_groups[0]["momentum"] == 0.9 and sgd.param_groups[0]["nesterov"] is False
    amsgrad = make_optimizer("amsgrad", model.parameters(), lr=1e-3).optimizer
    assert type(amsgrad).__name__ == "Adam" and amsgrad.param_groups[0]["amsgrad"] is True


def test_unknown_names_are_answered_with_the_sorted_valid_list():
    with pytest.raises(ValueError, match="Unknown optimizer: 'adamx' \\(expected one of adabelief, adam, adamw"):
        make_optimizer("adamx", problem()[0].parameters(), lr=1e-3)


def test_user_code_can_register_an_optimizer():
    register_optimizer("adagrad_test", lambda params, *, lr, weight_decay, meter, seed: MeteredOptimizer(
        torch.optim.Adagrad(params, lr=lr, weight_decay=weight_decay), meter))
    try:
        assert "adagrad_test" in optimizer_names()
        model, x, y = problem()
        opt = make_optimizer("adagrad_test", model.parameters(), lr=0.1)
        assert opt.step(lambda: loss_of(model, x, y)) > 0
    finally:
        from eve_search.optim import _registry

        del _registry._REGISTRY["adagrad_test"]
    with pytest.raises(ValueError, match="Invalid name: 'Bad Name'"):
        register_optimizer("Bad Name", lambda *a, **k: None)
