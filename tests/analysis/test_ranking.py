import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from eve_search.analysis.ranking import (
    _tau_b_rows,
    agreement,
    final_ordering,
    kendall_tau_b,
    top_config,
    top_config_rank,
    verdict,
)
from eve_search.experiments.ranking import Comparison, comparisons


def as_scores(values):
    return dict(enumerate(values))


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        # C=3, D=1, one tie in x, one tie in y: (3 - 1) / sqrt((6 - 1) * (6 - 1)) = 0.4
        ([1, 2, 2, 3], [1, 3, 2, 2], 0.4),
        # C=1, D=1, two ties in each: 0
        ([1, 1, 2, 2], [1, 2, 1, 2], 0.0),
        # perfect and reversed orders
        ([0.1, 0.2, 0.3], [5, 6, 7], 1.0),
        ([0.1, 0.2, 0.3], [7, 6, 5], -1.0),
        # C=2, D=0, the two tied-in-x pairs drop out of the x side: 2 / sqrt(2 * 3)
        ([1, 1, 2], [1, 2, 3], 2 / math.sqrt(6)),
    ],
)
def test_tau_b_matches_hand_computed_values_with_ties(x, y, expected):
    assert kendall_tau_b(as_scores(x), as_scores(y)) == pytest.approx(expected)


def test_tau_b_uses_only_the_configurations_both_scored():
    assert kendall_tau_b({0: 1, 1: 2, 2: 3, 7: 0}, {0: 1, 1: 2, 2: 3, 9: 5}) == pytest.approx(1.0)
    assert math.isnan(kendall_tau_b({0: 1}, {0: 1, 1: 2}))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=30))
def test_the_vectorized_bootstrap_tau_equals_scipy_even_with_heavy_ties(pairs):
    x = np.array([p[0] for p in pairs], dtype=float)
    y = np.array([p[1] for p in pairs], dtype=float)
    ours = _tau_b_rows(x[None], y[None])[0]
    reference = stats.kendalltau(x, y, variant="b").statistic
    if math.isnan(reference):
        assert math.isnan(ours)
    else:
        assert ours == pytest.approx(reference)


def test_top_config_and_its_rank_under_the_reference():
    method = {0: 0.80, 1: 0.86, 2: 0.86, 3: 0.70}
    assert top_config(method) == 1  # tie with 2 goes to the lower index
    reference = {0: 0.90, 1: 0.85, 2: 0.95, 3: 0.85}
    assert top_config_rank(method, reference) == 3  # 0.90 and 0.95 are strictly higher than 0.85
    assert top_config_rank(reference, reference) == 1


def test_agreement_pairs_by_seed_and_reports_mean_std_and_an_interval():
    method = {0: as_scores([1, 2, 3, 4, 5]), 1: as_scores([5, 4, 3, 2, 1])}
    reference = {0: as_scores([1, 2, 3, 4, 5]), 1: as_scores([1, 2, 3, 4, 5])}
    same = agreement(method, reference, [(0, 0), (1, 1)], resamples=200)
    assert same.taus == pytest.approx([1.0, -1.0])
    assert same.mean == pytest.approx(0.0) and same.std == pytest.approx(math.sqrt(2))
    assert same.top_ranks == [1, 5]
    crossed = agreement(method, reference, [(0, 1)], resamples=200)
    assert crossed.taus == pytest.approx([1.0])
    assert crossed.interval == pytest.approx((1.0, 1.0))
    with pytest.raises(ValueError, match="Invalid pairs: \\[\\]"):
        agreement(method, reference, [])


def test_the_reference_against_itself_pairs_each_seed_with_the_next():
    assert Comparison("adam", "adam", "next").pairs([0, 1, 2, 3, 4]) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)]
    assert Comparison("eve", "adam", "same").pairs([3, 4]) == [(3, 3), (4, 4)]
    labels = [c.label for c in comparisons("adam")]
    assert labels == ["eve vs adam", "eve vs adamw", "adam vs adam (different training seeds)", "adam vs adamw"]


def test_final_ordering_ranks_later_rungs_first_then_by_accuracy():
    rungs = {100.0: {0: 0.9, 1: 0.8, 2: 0.7, 3: 0.6}, 300.0: {1: 0.85, 2: 0.84}}
    ordering = final_ordering(rungs)
    assert sorted(ordering, key=ordering.get, reverse=True) == [1, 2, 0, 3]


def test_verdict_reads_the_intervals():
    method = {0: as_scores(list(range(30))), 1: as_scores(list(range(30)))}
    noisy = {0: as_scores(list(np.random.default_rng(0).permutation(30))),
             1: as_scores(list(np.random.default_rng(1).permutation(30)))}
    perfect = agreement(method, method, [(0, 0), (1, 1)], resamples=200)
    weak = agreement(method, noisy, [(0, 0), (1, 1)], resamples=200)
    assert "better than adam agrees with itself" in verdict(perfect, weak, "EvE", "adam")
    assert "less well than" in verdict(weak, perfect, "EvE", "adam")
    assert "about as well as" in verdict(weak, weak, "EvE", "adam")
