import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search.optim._operators import (
    de_child,
    de_weights,
    jittered_weight,
    latin_hypercube,
    polynomial_mutation_delta,
    proximity_population,
    sanitize,
)


@settings(max_examples=50, deadline=None)
@given(size=st.integers(4, 12), dim=st.integers(1, 40), seed=st.integers(0, 2**31 - 1))
def test_latin_hypercube_puts_exactly_one_point_in_each_stratum_of_each_coordinate(size, dim, seed):
    points = latin_hypercube(size, dim, torch.Generator().manual_seed(seed))
    assert points.shape == (size, dim)
    assert bool(((points >= 0) & (points <= 1)).all())
    strata = (points * size).floor().clamp_(max=size - 1).long()
    for column in strata.t():
        assert sorted(column.tolist()) == list(range(size))


def test_latin_hypercube_permutes_strata_independently_per_coordinate():
    points = latin_hypercube(4, 200, torch.Generator().manual_seed(0))
    orders = {tuple((points[:, d] * 4).floor().long().tolist()) for d in range(200)}
    assert len(orders) > 12  # 24 possible orders; identical orders everywhere would mean no permutation


# Values of Equation 3 worked out by hand (40-digit decimal arithmetic), bounds [0, 1].
@pytest.mark.parametrize(
    ("z", "r", "eta", "expected"),
    [
        (0.3, 0.2, 20.0, -0.0426564950247165086),
        (0.3, 0.9, 20.0, 0.0737766739655867727),
        (0.95, 0.75, 20.0, 0.0188700940390163869),
        (0.5, 0.5, 20.0, 0.0),
        (0.1, 0.01, 5.0, -0.0973741977244150465),
        (0.0, 0.3, 20.0, 0.0),  # at the lower bound, r <= 0.5 cannot move it below
        (1.0, 0.8, 20.0, 0.0),  # at the upper bound, r > 0.5 cannot move it above
    ],
)
def test_polynomial_mutation_matches_equation_3(z, r, eta, expected):
    assert polynomial_mutation_delta(z, r, eta) == pytest.approx(expected, abs=1e-15)


@settings(max_examples=200, deadline=None)
@given(z=st.floats(0.0, 1.0), r=st.floats(0.0, 1.0), eta=st.floats(0.0, 100.0))
def test_polynomial_mutation_never_leaves_the_box(z, r, eta):
    mutated = z + polynomial_mutation_delta(z, r, eta)
    assert -1e-12 <= mutated <= 1.0 + 1e-12


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 50), F=st.floats(0.05, 2.0),
       u=st.floats(0.0, 1.0), order=st.permutations([0, 1, 2, 3]), best=st.integers(0, 3))
def test_de_child_matches_equation_2(seed, dim, F, u, order, best):
    z = torch.rand(4, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    a, b, c = order[:3]
    F_t = jittered_weight(F, 1e-4, u)
    child = de_child(z, a, b, c, best, F, F_t, out=torch.empty(dim, dtype=torch.float64))
    expected = (z[a] + F_t * (z[b] - z[c]) + F * (z[best] - z[a])).clamp(0.0, 1.0)
    torch.testing.assert_close(child, expected, rtol=0, atol=1e-12)


def test_de_weights_are_an_affine_combination():
    weights = de_weights(4, a=2, b=0, c=3, best=2, F=0.5, F_t=0.50001)
    assert weights == pytest.approx([0.50001, 0.0, 1.0, -0.50001])
    assert sum(weights) == pytest.approx(1.0)


def test_jitter_only_scales_the_difference_weight_within_gamma():
    assert jittered_weight(0.5, 1e-4, 0.5) == 0.5
    assert jittered_weight(0.5, 1e-4, 0.0) == pytest.approx(0.5 * (1 - 0.5e-4))
    assert jittered_weight(0.5, 1e-4, 1.0) == pytest.approx(0.5 * (1 + 0.5e-4))


def test_proximity_population_keeps_the_anchor_and_jitters_the_rest_by_sigma():
    anchor = torch.full((20000,), 0.5)
    population = proximity_population(anchor, 4, 0.1, torch.Generator().manual_seed(0))
    assert torch.equal(population[0], anchor)
    jitter = population[1:] - anchor
    assert jitter.std().item() == pytest.approx(0.1, rel=0.02)
    edge = proximity_population(torch.zeros(1000), 4, 0.1, torch.Generator().manual_seed(0))
    assert bool((edge >= 0).all()) and bool((edge <= 1).all())


def test_sanitize_turns_every_non_finite_value_into_plus_infinity():
    assert sanitize(1.5) == 1.5
    assert sanitize(float("nan")) == float("inf")
    assert sanitize(float("-inf")) == float("inf")
    assert sanitize(float("inf")) == float("inf")
