"""The audit's measures on hand-made scores: regret, top-third inclusion, the table per budget, the verdict."""

import math

import pytest

from eve_search.experiments.audit import (
    audit_measures,
    budget_table,
    keeps_true_best,
    top1_regret,
    verdict,
)
from eve_search.analysis.ranking import kendall_tau_b

TRUTH = {0: 0.80, 1: 0.86, 2: 0.83, 3: 0.70, 4: 0.85, 5: 0.60}  # best: 1, then 4, 2, 0, 3, 5


def test_regret_is_the_truth_gap_between_the_true_best_and_the_proxy_pick():
    assert top1_regret({0: 0.1, 1: 0.9, 2: 0.2, 3: 0.0, 4: 0.3, 5: 0.0}, TRUTH) == 0.0
    assert top1_regret({0: 0.1, 1: 0.2, 2: 0.9, 3: 0.0, 4: 0.3, 5: 0.0}, TRUTH) == pytest.approx(0.03)
    assert top1_regret({0: 0.1, 1: 0.2, 2: 0.9, 3: 0.0, 4: 0.3, 5: 0.0}, TRUTH, scale=100) == pytest.approx(3.0)
    # a tie at the top goes to the lower configuration index (the promotion tie-break)
    assert top1_regret({0: 0.5, 1: 0.2, 2: 0.2, 3: 0.5, 4: 0.1, 5: 0.1}, TRUTH) == pytest.approx(0.06)
    # only configurations both scorings hold count
    assert top1_regret({2: 0.9, 3: 0.1}, TRUTH) == 0.0


def test_regret_when_lower_is_better_and_when_the_pick_diverged():
    losses = {0: 0.3, 1: 0.1, 2: 0.2}
    assert top1_regret({0: 0.0, 1: 0.5, 2: 0.4}, losses, mode="min") == pytest.approx(0.2)
    assert top1_regret({0: 0.0, 1: 0.5, 2: 0.4}, {0: math.nan, 1: 0.1, 2: 0.2}, mode="min") == pytest.approx(0.1)
    assert math.isnan(top1_regret({7: 1.0}, TRUTH))


def test_the_true_best_must_be_in_the_proxy_top_third():
    # 6 configurations: SHA keeps ceil(6/3) = 2
    second = {0: 0.1, 1: 0.8, 2: 0.9, 3: 0.0, 4: 0.3, 5: 0.0}
    third = {0: 0.1, 1: 0.5, 2: 0.9, 3: 0.0, 4: 0.7, 5: 0.0}
    assert keeps_true_best(second, TRUTH)
    assert not keeps_true_best(third, TRUTH)
    assert keeps_true_best(third, TRUTH, fraction=0.5)
    # a tie at the cut goes to the lower index: 1 beats 2 but loses to 0
    assert keeps_true_best({0: 0.9, 1: 0.5, 2: 0.5, 3: 0.0, 4: 0.0, 5: 0.0}, TRUTH)
    assert not keeps_true_best({0: 0.5, 1: 0.5, 2: 0.9, 3: 0.0, 4: 0.0, 5: 0.0}, TRUTH)
    # lower is better: the true best is 1 (0.1); the proxy keeps its single lowest
    assert keeps_true_best({0: 2.0, 1: 1.0, 2: 3.0}, {0: 0.5, 1: 0.1, 2: 0.9}, mode="min")
    assert not keeps_true_best({0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.5, 1: 0.1, 2: 0.9}, mode="min")


def test_budget_table_of_a_perfect_and_of_a_reversed_proxy():
    truth = {0: TRUTH, 1: {k: v + 0.01 * k for k, v in TRUTH.items()}}
    perfect = budget_table(truth, truth, [0, 1], scale=100, resamples=200)
    assert perfect["tau"]["mean"] == pytest.approx(1.0) and perfect["tau"]["interval"] == [1.0, 1.0]
    assert perfect["regret"] == {"mean": 0.0, "per_seed": [0.0, 0.0], "interval": [0.0, 0.0]}
    assert perfect["keep"]["rate"] == 1.0 and perfect["keep"]["kept"] == 2 and perfect["keep"]["interval"] == [1, 1]
    reversed_ = {s: {k: -v for k, v in scores.items()} for s, scores in truth.items()}
    worst = budget_table(reversed_, truth, [0, 1], scale=100, resamples=200)
    assert worst["tau"]["mean"] == pytest.approx(-1.0)
    assert worst["regret"]["per_seed"] == pytest.approx([26.0, 24.0])  # picks config 5: 86 - 60, 89 - 65
    assert worst["keep"]["rate"] == 0.0
    low, high = worst["regret"]["interval"]
    assert 0 <= low <= high <= 26.0


def test_budget_table_pairs_seeds_and_matches_the_ranking_module():
    proxy = {0: {0: 0.1, 1: 0.5, 2: 0.9, 3: 0.0, 4: 0.7, 5: 0.2}, 1: {0: 0.3, 1: 0.9, 2: 0.1, 3: 0.2, 4: 0.8, 5: 0.0}}
    truth = {0: TRUTH, 1: TRUTH}
    row = budget_table(proxy, truth, [0, 1], resamples=300, seed=1)
    assert row["tau"]["per_seed"] == pytest.approx([kendall_tau_b(proxy[0], TRUTH), kendall_tau_b(proxy[1], TRUTH)])
    assert row["regret"]["per_seed"] == pytest.approx([0.03, 0.0])
    assert row["keep"]["per_seed"] == [False, True] and row["keep"]["rate"] == 0.5
    assert row["tau"]["interval"][0] <= row["tau"]["mean"] <= row["tau"]["interval"][1]
    assert 0.0 <= row["keep"]["interval"][0] <= row["keep"]["interval"][1] <= 1.0
    # explicit pairs: seed 0 of the proxy against seed 1 of the truth
    crossed = budget_table(proxy, {0: TRUTH, 1: {k: -v for k, v in TRUTH.items()}}, [0], pairs=[(0, 1)])
    assert crossed["tau"]["per_seed"] == pytest.approx([-kendall_tau_b(proxy[0], TRUTH)])


def _rows(*entries):
    return {budget: {"keep": {"rate": keep}, "regret": {"mean": regret}, "wall_seconds": {"mean": wall}}
            for budget, keep, regret, wall in entries}


def test_verdict_takes_the_cheapest_budget_in_wall_seconds():
    rows = _rows((30, 0.6, 0.5, 2.0), (100, 0.8, 0.3, 6.0), (300, 1.0, 0.05, 18.0), (900, 1.0, 0.0, 50.0))
    v = verdict(rows)
    assert v["keeps_best"] == {"budget": 100, "wall_seconds": 6.0}
    assert v["regret_under"] == {"budget": 300, "wall_seconds": 18.0}
    assert v["both"] == {"budget": 300, "wall_seconds": 18.0}
    # cheapest in seconds, not the smallest budget: a slower machine moment at 100 units
    swapped = _rows((100, 1.0, 0.0, 40.0), (300, 1.0, 0.0, 20.0))
    assert verdict(swapped)["both"] == {"budget": 300, "wall_seconds": 20.0}


def test_verdict_says_none_when_no_budget_qualifies():
    rows = _rows((30, 0.6, 0.5, 2.0), (100, 0.79, 0.1, 6.0))  # 0.1 is not under 0.1
    v = verdict(rows)
    assert v["keeps_best"] is None and v["regret_under"] is None and v["both"] is None
    assert verdict(rows, keep_rate=0.6, regret_threshold=0.2)["both"] == {"budget": 100, "wall_seconds": 6.0}


def _details(scores_by_budget, wall_per_unit=0.01):
    return {index: {budget: {"score": scores[index], "wall_seconds": wall_per_unit * budget, "charged_units": budget}
                    for budget, scores in scores_by_budget.items()} for index in next(iter(scores_by_budget.values()))}


def test_audit_measures_on_hand_made_runs():
    cheap = {0: 0.5, 1: 0.4, 2: 0.3}  # proxy's cheap ordering: wrong
    truth0, truth1 = {0: 0.80, 1: 0.85, 2: 0.83}, {0: 0.80, 1: 0.84, 2: 0.86}
    details = {("adam", 0): _details({10: cheap, 30: truth0}), ("adam", 1): _details({10: cheap, 30: truth1}),
               ("eve", 0): _details({10: truth0, 30: cheap}, 0.02), ("eve", 1): _details({10: truth1, 30: cheap}, 0.02)}
    report = audit_measures(details, [0, 1], ["eve", "adam"], "adam", [10, 30], scale=100, fraction=1 / 3,
                            resamples=100)
    eve = report["proxies"]["eve"]["budgets"]
    assert eve["10"]["tau"]["mean"] == pytest.approx(1.0) and eve["10"]["regret"]["mean"] == 0.0
    assert eve["10"]["wall_seconds"] == {"mean": pytest.approx(0.6), "per_seed": [pytest.approx(0.6)] * 2}
    assert eve["10"]["charged_units"] == 30
    assert eve["30"]["regret"]["per_seed"] == pytest.approx([5.0, 6.0])
    assert report["proxies"]["eve"]["verdict"]["both"] == {"budget": 10, "wall_seconds": pytest.approx(0.6)}
    adam = report["proxies"]["adam"]["budgets"]
    assert adam["30"]["tau"]["mean"] == pytest.approx(1.0) and adam["10"]["keep"]["rate"] == 0.0
    assert report["truth_runs"]["0"]["best_index"] == 1 and report["truth_runs"]["1"]["best_index"] == 2
    floor = report["noise_floor"]
    assert floor["pairs"] == [(0, 1), (1, 0)]
    # seed 0's pick (1) under seed 1: 0.86 - 0.84; seed 1's pick (2) under seed 0: 0.85 - 0.83
    assert floor["regret"]["per_seed"] == pytest.approx([2.0, 2.0])
