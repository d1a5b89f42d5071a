import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search.sha import (
    DEFAULT_RUNGS,
    SynchronousSuccessiveHalving,
    check_rungs,
    promote_top_fraction,
    promotion_count,
    rung_sizes,
)
from eve_search.trial import Trial


def test_the_paper_rungs_hold_48_16_6_2_1_trials():
    assert DEFAULT_RUNGS == (100, 300, 900, 2700, 3000)
    assert rung_sizes(48, DEFAULT_RUNGS) == [48, 16, 6, 2, 1]


@pytest.mark.parametrize(("survivors", "kept"), [(48, 16), (16, 6), (6, 2), (2, 1), (1, 1), (3, 1), (4, 2)])
def test_top_third_is_ceil_and_at_least_one(survivors, kept):
    assert promotion_count(survivors) == kept


def test_ties_are_broken_by_the_lower_index_and_nan_ranks_last():
    scores = {5: 0.8, 2: 0.9, 7: 0.9, 1: float("nan"), 3: 0.7, 4: 0.9}
    assert promote_top_fraction(scores, 0.5) == [2, 4, 7]
    assert promote_top_fraction({0: float("nan"), 1: 0.1}, 0.5) == [1]


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.integers(0, 200), st.floats(0, 1), min_size=1, max_size=60))
def test_promotion_keeps_exactly_the_best_and_ignores_insertion_order(scores):
    promoted = promote_top_fraction(scores)
    assert len(promoted) == max(1, math.ceil(len(scores) / 3))
    worst_kept = min(scores[k] for k in promoted)
    assert all(scores[k] <= worst_kept for k in scores if k not in promoted)
    reordered = dict(reversed(list(scores.items())))
    assert promote_top_fraction(reordered) == promoted


def test_invalid_rungs_and_fractions_are_named():
    with pytest.raises(ValueError, match="Invalid rungs: 300, 100"):
        check_rungs([300, 100])
    with pytest.raises(ValueError, match="Invalid rungs: 0, 100"):
        check_rungs([0, 100])
    with pytest.raises(ValueError, match=r"Invalid rungs: \(\)"):
        check_rungs([])
    with pytest.raises(ValueError, match="Invalid fraction: 0"):
        promotion_count(10, 0)


class MemoryStore:
    """A RungStore in memory, keeping deep copies of checkpoints like the real one keeps files."""

    def __init__(self):
        self.results, self.checkpoints, self.eliminated, self.finished = {}, {}, {}, {}

    def recorded(self, index, budget):
        return self.results.get((index, budget))

    def checkpoint(self, index):
        return copy.deepcopy(self.checkpoints.get(index))

    def record(self, index, budget, evaluation, trial):
        self.checkpoints[index] = copy.deepcopy(trial.state_dict())
        self.results[(index, budget)] = evaluation.accuracy

    def eliminate(self, indices, budget):
        for index in indices:
            self.eliminated[index] = budget
            self.checkpoints.pop(index, None)

    def finish(self, index, budget, accuracy):
        self.finished[index] = (budget, accuracy)


CONFIGS = [{"lr": lr, "weight_decay": 1e-4, "width": 16, "depth": 1}
           for lr in (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 2e-4, 5e-3, 2e-2)]
RUNGS = (30, 90, 180)


def factory(splits, optimizer, made=None):
    def make_trial(index):
        trial = Trial(CONFIGS[index], splits, optimizer, seed=0, index=index, cost_mode="calibrated",
                      backward_ratio=2.0)
        if made is not None:
            made.append(index)
        return trial
    return make_trial


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_engine_trains_rungs_9_3_1_and_resumes_promoted_trials(tiny_splits, optimizer):
    made, budgets = [], {}
    store = MemoryStore()
    original = Trial.train_to

    def spy(self, budget):
        budgets.setdefault(self.index, []).append((self.charged_units, budget))
        original(self, budget)

    Trial.train_to = spy
    try:
        reports = SynchronousSuccessiveHalving(9, factory(tiny_splits, optimizer, made), store, rungs=RUNGS).run()
    finally:
        Trial.train_to = original
    assert [len(r.trials) for r in reports] == [9, 3, 1]
    assert sorted(made) == list(range(9))  # each trial built once: promoted trials are resumed in memory
    winner = reports[-1].trials[0]
    # The winner's budget rose rung by rung, and each call started from the cost already charged.
    assert [b for _, b in budgets[winner]] == [30, 90, 180]
    assert all(start >= prev for (start, _), prev in zip(budgets[winner][1:], (30, 90)))
    assert set(store.eliminated) == set(range(9)) - {winner}
    assert store.finished[winner][0] == 180
    assert reports[1].trials == reports[0].promoted


def test_a_killed_sweep_resumes_to_exactly_the_uninterrupted_result(tiny_splits):
    uninterrupted = SynchronousSuccessiveHalving(9, factory(tiny_splits, "eve"), MemoryStore(), rungs=RUNGS).run()

    store = MemoryStore()

    class Killed(Exception):
        pass

    seen = []

    def kill_mid_rung(rung, index, accuracy, resumed):
        seen.append((rung, index))
        if rung == 1 and len([s for s in seen if s[0] == 1]) == 2:
            raise Killed

    with pytest.raises(Killed):
        SynchronousSuccessiveHalving(9, factory(tiny_splits, "eve"), store, rungs=RUNGS, on_result=kill_mid_rung).run()
    made = []
    resumed = SynchronousSuccessiveHalving(9, factory(tiny_splits, "eve", made), store, rungs=RUNGS).run()
    assert [r.scores for r in resumed] == [r.scores for r in uninterrupted]
    assert [r.promoted for r in resumed] == [r.promoted for r in uninterrupted]
    # Rung 1 came entirely from the store; only rung-2 trials without a result were rebuilt.
    assert len(made) < 9


def test_a_lost_checkpoint_is_replayed_into_the_same_state(tiny_splits):
    uninterrupted = SynchronousSuccessiveHalving(9, factory(tiny_splits, "eve"), MemoryStore(), rungs=RUNGS).run()

    class Killed(Exception):
        pass

    def kill_after_rung_1(rung, index, accuracy, resumed):
        if rung == 1:
            raise Killed

    store = MemoryStore()
    with pytest.raises(Killed):
        SynchronousSuccessiveHalving(9, factory(tiny_splits, "eve"), store, rungs=RUNGS,
                                     on_result=kill_after_rung_1).run()
    store.checkpoints.clear()  # every checkpoint lost (say, to an OS crash); the results survived
    resumed = SynchronousSuccessiveHalving(9, factory(tiny_splits, "eve"), store, rungs=RUNGS).run()
    assert [r.scores for r in resumed] == [r.scores for r in uninterrupted]
