"""LoRA adapters under EvE and the baselines: only adapters train, B moves, state round-trips."""

from __future__ import annotations

import math

import pytest
import torch

from eve_search.tasks.lora import (
    adapter_parameters,
    add_lora,
    base_parameters,
    lora_task,
    small_qwen2,
)
from eve_search.optim import EvE, kaiming_bounds
from eve_search.engine.trial import Trial

TASK = lora_task()


@pytest.fixture(scope="module")
def data():
    return TASK.data()


def _trial(data, optimizer: str, lr: float = 1e-2, seed: int = 0) -> Trial:
    return Trial(TASK, {"lr": lr, "weight_decay": 5e-4}, optimizer, seed=seed, index=0, backward_ratio=1.0, data=data)


def _lora_b(model) -> list[torch.Tensor]:
    return [p for name, p in model.named_parameters() if "lora_B" in name]


def test_fresh_adapter_is_a_no_op_on_the_base(data):
    base = small_qwen2()
    model = add_lora(small_qwen2(), rank=8, alpha=16, generator=torch.Generator().manual_seed(3))
    x = data.x_val[:4]
    with torch.no_grad():
        assert torch.equal(base(input_ids=x).logits, model(input_ids=x).logits)


def test_adapter_initialization_comes_from_the_generator_only(data):
    state = torch.get_rng_state()
    first = add_lora(small_qwen2(), rank=8, alpha=16, generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG was neither used nor moved
    again = add_lora(small_qwen2(), rank=8, alpha=16, generator=torch.Generator().manual_seed(1))
    other = add_lora(small_qwen2(), rank=8, alpha=16, generator=torch.Generator().manual_seed(2))
    pairs = list(zip(adapter_parameters(first), adapter_parameters(again), adapter_parameters(other)))
    assert all(torch.equal(a, b) for a, b, _ in pairs)
    assert any(not torch.equal(a, c) for a, _, c in pairs)


def test_only_adapter_weights_reach_the_optimizer(data):
    eve = _trial(data, "eve")
    adapters = adapter_parameters(eve.model)
    assert all("lora_" in name for name, p in eve.model.named_parameters() if p.requires_grad)
    assert eve.optimizer.population.z.shape == (4, sum(p.numel() for p in adapters))
    assert sum(p.numel() for p in adapters) < sum(p.numel() for p in base_parameters(eve.model))
    adam = _trial(data, "adam")
    assert [id(p) for p in adam.optimizer.param_groups[0]["params"]] == [id(p) for p in adapter_parameters(adam.model)]


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_base_weights_unchanged_by_training(data, optimizer):
    trial = _trial(data, optimizer)
    before = {name: p.detach().clone() for name, p in trial.model.named_parameters() if not p.requires_grad}
    adapters_before = [p.detach().clone() for p in adapter_parameters(trial.model)]
    trial.train_to(30)
    after = {name: p for name, p in trial.model.named_parameters() if not p.requires_grad}
    assert before.keys() == after.keys()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert any(not torch.equal(a, p) for a, p in zip(adapters_before, adapter_parameters(trial.model)))


def test_b_box_is_the_kaiming_range_of_rank_fan_in_centred_on_the_zero_anchor(data):
    trial = _trial(data, "eve")
    named = [(name, p) for name, p in trial.model.named_parameters() if p.requires_grad]
    half_widths = kaiming_bounds([p for _, p in named])
    population = trial.optimizer.population
    offset = 0
    for (name, p), half_width in zip(named, half_widths):
        if "lora_B" in name:
            assert half_width == pytest.approx(math.sqrt(6 / 8))  # fan_in = rank 8
            anchor = population.z[0, offset:offset + p.numel()]  # proximity: slot 0 is the anchor
            assert torch.allclose(anchor, torch.full_like(anchor, 0.5))
        else:
            assert half_width == pytest.approx(math.sqrt(6 / p.shape[1]))
            assert p.abs().max() <= half_width  # peft's A range lies inside the box: nothing clamped
        offset += p.numel()


def test_eve_lowers_the_loss_and_moves_b_away_from_zero(data):
    trial = _trial(data, "eve", lr=1e-3)
    start = trial.evaluate("val")["loss"]
    assert all(float(b.detach().abs().max()) == 0.0 for b in _lora_b(trial.model))
    trial.train_to(300)  # the paper's LoRA budget
    assert trial.evaluate("val")["loss"] < start - 0.2
    moved = [float(b.detach().abs().max()) for b in _lora_b(trial.model)]
    assert min(moved) > 1e-3  # every B matrix left zero, not just one


def test_eve_state_round_trip_continues_exactly(data):
    trial = _trial(data, "eve")
    trial.train_to(40)
    copy = _trial(data, "eve")
    copy.load_bytes(trial.to_bytes())
    trial.train_to(80)
    copy.train_to(80)
    assert all(torch.equal(a, b) for a, b in zip(adapter_parameters(trial.model), adapter_parameters(copy.model)))
    assert copy.evaluate("val") == trial.evaluate("val")
    state = trial.optimizer.state_dict()
    fresh = EvE(adapter_parameters(_trial(data, "eve").model), lr=1e-2)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.population.z, trial.optimizer.population.z)
