"""The memory bench's accounting: what EvE and Adam hold, counted by storage, in units of the weights."""

from __future__ import annotations

import json

import torch

from eve_search.benchmarks.memory import THEORY, measure, training_state_bytes
from eve_search.optim.budget import CostMeter
from eve_search.cli import main
from eve_search.tasks.models import mlp
from eve_search.optim import EvE, make_optimizer


def trained(optimizer_name, steps=30, **eve_options):
    g = torch.Generator().manual_seed(0)
    model = mlp(40, [64], 10, generator=g)  # 3,274 weights
    x, y = torch.randn(64, 40, generator=g), torch.randint(0, 10, (64,), generator=g)
    if optimizer_name == "eve":
        opt = EvE(model.parameters(), lr=1e-2, seed=0, **eve_options)
    else:
        opt = make_optimizer(optimizer_name, model.parameters(), lr=1e-2, meter=CostMeter(mode="calibrated",
                                                                                              backward_ratio=2.0))
    for _ in range(steps):
        opt.step(lambda: torch.nn.functional.cross_entropy(model(x), y))
    return model, opt


def test_eve_holds_13x_the_weights_beside_them_14x_in_all():
    model, opt = trained("eve")
    assert sum(float(s) for s in opt.population.adam_steps) > 0  # the fallback ran: gradients were taken
    params = list(model.parameters())
    counts = training_state_bytes(params, opt)
    weights = sum(p.numel() * p.element_size() for p in params)
    assert counts["weights"] == weights
    assert counts["gradients"] == 0 and all(p.grad is None for p in params)  # the gradient lives in the child
    assert counts["optimizer_buffers"] == 13 * weights  # population 4 + moments 8 + child 1
    assert counts["optimizer_scalars"] < 1024  # per-tensor bounds and step counters: one element each
    assert THEORY["eve"]["here"] * weights <= counts["total"] < THEORY["eve"]["here"] * weights + 1024


def test_polynomial_mutation_adds_exactly_one_buffer():
    model, opt = trained("eve", polynomial_mutation=True)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert training_state_bytes(list(model.parameters()), opt)["optimizer_buffers"] == 14 * weights


def test_per_weight_bounds_are_stored_per_weight_only_when_given_so():
    g = torch.Generator().manual_seed(0)
    model = mlp(40, [64], 10, generator=g)
    bounds = [(-torch.ones_like(p), torch.ones_like(p)) for p in model.parameters()]
    opt = EvE(model.parameters(), bounds=bounds, seed=0)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    # lower, upper and their span per weight: the three vectors the default per-tensor bounds avoid
    assert training_state_bytes(list(model.parameters()), opt)["optimizer_buffers"] == 16 * weights


def test_adam_holds_4x_the_weights():
    model, opt = trained("adam")
    params = list(model.parameters())
    counts = training_state_bytes(params, opt)
    weights = sum(p.numel() * p.element_size() for p in params)
    assert counts["gradients"] == weights and counts["optimizer_buffers"] == 2 * weights
    assert THEORY["adam"]["here"] * weights <= counts["total"] < THEORY["adam"]["here"] * weights + 1024


def test_measure_reports_state_and_peak_of_the_mnist_mlp():
    result = measure("mnist-mlp", "eve", iterations=2)
    assert result["trained_weights"] == 1_863_690
    assert result["state"]["weights"] == 4 * 1_863_690
    assert result["state"]["optimizer_buffers"] == 13 * result["state"]["weights"]
    assert result["peak_above_baseline_bytes"] >= 0 and len(result["fallback_steps_per_slot"]) == 4


def test_bench_memory_command_measures_each_optimizer_in_a_fresh_process(tmp_path, capsys):
    out = tmp_path / "memory.json"
    assert main(["bench", "memory", "--model", "mnist-mlp", "--iterations", "2", "--threads", "1",
                 "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert [(r["model"], r["optimizer"]) for r in results] == [("mnist-mlp", "eve"), ("mnist-mlp", "adam")]
    by_name = {r["optimizer"]: r for r in results}
    assert by_name["eve"]["state"]["total"] > 3 * by_name["adam"]["state"]["total"]
    assert "13x" in capsys.readouterr().out
