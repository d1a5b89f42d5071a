import math

import numpy as np
import pytest

from eve_search.experiments.synthetic import (
    PAPER_WIN_TIE_LOSS,
    analyse,
    classify,
    holm,
    holm_adjusted,
    one_sided_wilcoxon,
    win_tie_loss,
)
from eve_search.experiments.synthetic._stats import paired_differences


def test_holm_matches_a_hand_computed_example():
    p = [0.01, 0.04, 0.03, 0.005]
    # Sorted: 0.005 * 4 = 0.02 (reject), 0.01 * 3 = 0.03 (reject), 0.03 * 2 = 0.06 (stop: keep it and the rest).
    assert holm(p, alpha=0.05) == [True, False, False, True]
    assert holm_adjusted(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # Step-down: a later p below alpha is not rejected once an earlier one was kept.
    assert holm([0.02, 0.03], alpha=0.05) == [True, True]
    assert holm([0.03, 0.04, 0.001], alpha=0.05) == [False, False, True]


def test_the_classification_of_a_cell():
    assert classify(eve_better=True, adam_better=False) == "win"
    assert classify(eve_better=False, adam_better=True) == "loss"
    assert classify(eve_better=False, adam_better=False) == "tie"
    with pytest.raises(ValueError, match="both one-sided tests"):
        classify(True, True)


def test_one_sided_wilcoxon_in_both_directions():
    eve = np.arange(1.0, 11.0)
    adam = eve + np.arange(1.0, 11.0)  # EvE lower on every one of 10 seeds
    less, greater = one_sided_wilcoxon(eve, adam)
    assert less == pytest.approx(1 / 2**10)  # exact null: only one sign pattern is this extreme
    assert greater == pytest.approx(1.0)
    assert one_sided_wilcoxon(adam, eve) == pytest.approx((1.0, 1 / 2**10))
    assert one_sided_wilcoxon([1.0, 2.0], [1.0, 2.0]) == (1.0, 1.0)


def test_infinite_values_are_worse_than_every_finite_value():
    d = paired_differences([1.0, math.inf, math.inf, 5.0], [2.0, 3.0, math.inf, math.inf])
    assert d[0] == -1.0 and d[2] == 0.0
    assert d[1] > abs(d[0]) and d[3] == -d[1]  # larger than every finite difference, ties in size
    less, _ = one_sided_wilcoxon([1.0] * 6, [math.inf] * 6)
    assert less == pytest.approx(1 / 2**6)
    with pytest.raises(ValueError, match="NaN"):
        paired_differences([math.nan], [1.0])


def test_analyse_corrects_over_every_test_and_counts_per_function():
    seeds = range(10)
    cells = {
        ("sphere", 2): {s: (1.0 + s, 2.0 + 2 * s) for s in seeds},  # EvE lower everywhere
        ("sphere", 10): {s: (5.0 + s, 1.0 + s) for s in seeds},  # Adam lower everywhere
        ("ackley", 2): {s: (1.0 + s, 1.0 + s + (-1) ** s * 0.5) for s in seeds},  # mixed
    }
    results = analyse(cells, alpha=0.05)
    assert [r.verdict for r in results] == ["win", "loss", "tie"]
    # Six tests: the two smallest p (1/1024 each) become 6/1024 and max(6/1024, 5/1024): Holm is monotone.
    assert results[0].p_eve_better_holm == pytest.approx(6 / 1024)
    assert results[1].p_adam_better_holm == pytest.approx(6 / 1024)
    assert results[0].eve == {"min": 1.0, "median": 5.5, "max": 10.0}
    assert win_tie_loss(results) == {"sphere": (1, 0, 1), "ackley": (0, 1, 0)}


def test_the_paper_counts_add_up_to_its_totals():
    totals = [sum(counts[k] for counts in PAPER_WIN_TIE_LOSS.values()) for k in range(3)]
    assert totals == [33, 20, 17]
    assert all(sum(counts) == 10 for counts in PAPER_WIN_TIE_LOSS.values())
