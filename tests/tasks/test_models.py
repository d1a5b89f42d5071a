"""The networks a search trains: the same weights for the same generator, drawn without the global RNG."""

import copy
import math
import pickle

import pytest
import torch
from torch import nn

from eve_search.tasks.models import SeededDropout, mlp


def _drawn_the_documented_way(widths, seed):
    # The construction of eve-search 0.2.0 (skip_init, then the draw): the weights every stored
    # checkpoint and every recorded result were made from.
    generator = torch.Generator().manual_seed(seed)
    weights = []
    for fan_in, fan_out in zip(widths, widths[1:]):
        linear = nn.utils.skip_init(nn.Linear, fan_in, fan_out)
        bound = math.sqrt(6.0 / fan_in)
        with torch.no_grad():
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.zero_()
        weights += [linear.weight, linear.bias]
    return weights


@pytest.mark.parametrize("widths", [[107, 256, 256, 2], [5, 3], [784, 64, 10]])
def test_one_seed_gives_the_weights_of_the_documented_draw_and_leaves_the_global_rng_alone(widths):
    before = torch.get_rng_state()
    net = mlp(widths[0], widths[1:-1], widths[-1], generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), before)
    expected = _drawn_the_documented_way(widths, 7)
    assert len(list(net.parameters())) == len(expected)
    for got, want in zip(net.parameters(), expected):
        assert got.requires_grad and got.dtype == want.dtype and torch.equal(got, want)
    other = mlp(widths[0], widths[1:-1], widths[-1], generator=torch.Generator().manual_seed(8))
    assert not torch.equal(next(net.parameters()), next(other.parameters()))


def test_its_layers_are_ordinary_linear_modules():
    net = mlp(4, [3], 2, generator=torch.Generator().manual_seed(0))
    first = net[0]
    assert isinstance(first, nn.Linear) and (first.in_features, first.out_features) == (4, 3)
    assert repr(first) == "Linear(in_features=4, out_features=3, bias=True)"
    assert list(net.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    expected = nn.functional.linear(torch.relu(nn.functional.linear(x, first.weight, first.bias)),
                                    net[2].weight, net[2].bias)
    assert torch.equal(net(x), expected)
    # It copies, pickles, converts and loads a state like any module.
    for twin in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        assert torch.equal(twin(x), net(x))
    fresh = mlp(4, [3], 2, generator=torch.Generator().manual_seed(1))
    fresh.load_state_dict(net.state_dict())
    assert torch.equal(fresh(x), net(x))
    assert net.double()(x.double()).dtype == torch.float64
    net(x.double()).sum().backward()
    assert first.weight.grad is not None and first.weight.grad.shape == (3, 4)


@pytest.mark.parametrize("widths", [[0, 2], [3, -1], [2.5, 2], [True, 2]])
def test_bad_widths_are_named(widths):
    with pytest.raises(ValueError, match="Invalid layer widths"):
        mlp(widths[0], [], widths[-1], generator=torch.Generator())


def test_dropout_keeps_the_weights_of_the_same_network_without_it_and_the_global_rng():
    before = torch.get_rng_state()
    plain = mlp(784, [64, 64], 10, generator=torch.Generator().manual_seed(3))
    dropped = mlp(784, [64, 64], 10, generator=torch.Generator().manual_seed(3), dropout=0.3)
    assert torch.equal(torch.get_rng_state(), before)
    assert [type(m).__name__ for m in dropped] == ["Linear", "ReLU", "SeededDropout", "Linear", "ReLU",
                                                   "SeededDropout", "Linear"]
    for a, b in zip(plain.parameters(), dropped.parameters()):
        assert torch.equal(a, b)
    seeds = [int(m.seed) for m in dropped if isinstance(m, SeededDropout)]
    assert len(set(seeds)) == 2


def test_a_dropout_network_restored_from_its_state_dict_draws_the_masks_an_uninterrupted_one_draws():
    x = torch.randn(32, 20)
    net = mlp(20, [16, 16], 3, generator=torch.Generator().manual_seed(0), dropout=0.5)
    net(x), net(x)
    resumed = mlp(20, [16, 16], 3, generator=torch.Generator().manual_seed(99), dropout=0.5)
    resumed.load_state_dict(copy.deepcopy(net.state_dict()))
    for _ in range(3):
        assert torch.equal(net(x), resumed(x))
    torch.manual_seed(123)  # the global RNG plays no part
    assert torch.equal(net(x), resumed(x))
    assert torch.equal(net.eval()(x), resumed.eval()(x))


def test_dropout_scales_kept_units_and_is_the_identity_when_evaluating():
    layer = SeededDropout(0.25, seed=5)
    out = layer(torch.ones(400, 50))
    assert set(out.unique().tolist()) <= {0.0, torch.tensor(1 / 0.75).item()}
    assert abs((out == 0).float().mean().item() - 0.25) < 0.02
    with torch.inference_mode():
        assert torch.equal(layer.eval()(torch.ones(3, 3)), torch.ones(3, 3))


@pytest.mark.parametrize("p", [-0.1, 1.0, float("nan"), True, "0.5"])
def test_dropout_refuses_a_probability_outside_0_1(p):
    with pytest.raises(ValueError, match=r"Invalid dropout: .* \(expected a probability in \[0, 1\)\)"):
        mlp(4, [4], 2, generator=torch.Generator(), dropout=p) if p is not True else SeededDropout(p, 0)
