"""The scheduling core: a stream of cohorts decides as one synchronous sweep per cohort, whatever the
number of workers, the order results arrive in, their timing, or speculation."""

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search.engine.ledger import RungLedger, rung_sizes
from eve_search.engine.simulator import simulate
from eve_search.engine.stream import CohortStream, Work, cohort_units, cohorts_within


def score_of(seed):
    """Scores as a fixed function of (index, rung), with ties and NaNs."""
    def score(index, rung):
        value = random.Random(seed * 1_000_003 + index * 101 + rung).choice([0.1, 0.2, 0.3, 0.4, 0.5, math.nan,
                                                                              random.Random(index).random()])
        return value
    return score


def reference(configs, cohort_size, rungs, score):
    """Each cohort decided alone by its ledger, every rung in order: synchronous SHA per cohort."""
    decisions, completed = [], {}
    size = configs if cohort_size is None else cohort_size
    for k, start in enumerate(range(0, configs, size)):
        ledger = RungLedger(rungs, trials=range(start, min(start + size, configs)))
        for rung in range(len(rungs)):
            for index in ledger.cohort(rung):
                ledger.report(index, rung, score(index, rung))
            d = ledger.decide(rung)
            decisions.append((k, d.rung, tuple(d.promoted), tuple(d.stopped)))
        completed.update((i, ledger.scores(len(rungs) - 1)[i]) for i in ledger.decide(len(rungs) - 1).stopped)
    return sorted(decisions), completed


searches = st.tuples(st.integers(1, 40), st.one_of(st.none(), st.integers(1, 12)),
                     st.lists(st.integers(1, 50), min_size=1, max_size=4, unique=True).map(sorted),
                     st.integers(0, 10_000))


@settings(max_examples=60, deadline=None)
@given(searches, st.integers(1, 64), st.floats(0, 2), st.booleans())
def test_any_workers_timing_and_speculation_decide_as_one_sweep_per_cohort(search, workers, jitter, speculate):
    configs, cohort_size, rungs, seed = search
    score = score_of(seed)
    expected, completed = reference(configs, cohort_size, tuple(rungs), score)
    stream = CohortStream(configs, cohort_size, rungs=rungs, speculate=speculate)
    durations = random.Random(seed)
    result = simulate(stream, workers=workers, duration=lambda work: durations.uniform(0.01, 3.0),
                      score=score, jitter=jitter, jitter_seed=seed)
    assert result.decision_summary() == expected
    assert stream.finished
    assert stream.completed() == dict(sorted(completed.items()))
    winner = stream.winner()
    assert winner == (None if not completed else min(
        completed, key=lambda i: (-completed[i] if not math.isnan(completed[i]) else math.inf, i)))
    assert result.work + result.dropped == pytest.approx(sum(result.busy))
    assert result.utilisation <= 1 + 1e-9
    if not speculate:
        assert result.dropped == 0 and result.units == sum(
            n * (b - a) for cohort in range(stream.cohorts)
            for n, b, a in zip(rung_sizes(len(stream.members(cohort)), rungs), rungs, (0, *rungs[:-1])))


@settings(max_examples=40, deadline=None)
@given(searches, st.integers(0, 2**32))
def test_results_in_any_order_give_the_same_decisions(search, order_seed):
    """An executor that hands out work and reports it back in a random order (late reports included)."""
    configs, cohort_size, rungs, seed = search
    rng = random.Random(order_seed)
    score = score_of(seed)
    expected, _ = reference(configs, cohort_size, tuple(rungs), score)
    stream = CohortStream(configs, cohort_size, rungs=rungs)
    running, made = [], []
    while True:
        for _ in range(rng.randint(0, 5)):
            work = stream.next_work()
            if work is None:
                break
            assert stream.next_work() == work  # asking has no side effects
            stream.start(work)
            running.append(work)
        if not running:
            if stream.next_work() is None:
                break
            continue
        work = running.pop(rng.randrange(len(running)))
        made.extend(stream.report(work.index, work.rung, score(work.index, work.rung)))
    assert sorted((c, d.rung, tuple(d.promoted), tuple(d.stopped)) for c, d in made) == expected


@settings(max_examples=30, deadline=None)
@given(searches, st.integers(0, 200))
def test_a_restored_stream_continues_exactly(search, stop_after):
    configs, cohort_size, rungs, seed = search
    score = score_of(seed)
    expected, _ = reference(configs, cohort_size, tuple(rungs), score)
    stream = CohortStream(configs, cohort_size, rungs=rungs)
    for _ in range(stop_after):
        work = stream.next_work()
        if work is None:
            break
        stream.start(work)
        stream.report(work.index, work.rung, score(work.index, work.rung))
    restored = CohortStream(configs, cohort_size, rungs=rungs)
    restored.load_state_dict(stream.state_dict())
    while (work := restored.next_work()) is not None:
        restored.start(work)
        restored.report(work.index, work.rung, score(work.index, work.rung))
    got = sorted((c, d.rung, tuple(d.promoted), tuple(d.stopped))
                 for c in range(restored.opened) for d in restored.decisions(c))
    assert got == expected and restored.finished


def test_promoted_work_of_an_older_cohort_goes_before_a_new_cohort():
    stream = CohortStream(6, 3, rungs=(1, 2))
    for _ in range(4):
        stream.start(stream.next_work())  # cohort 0 and the first of cohort 1
    for index, score in [(0, 0.1), (1, 0.9), (2, 0.5)]:
        stream.report(index, 0, score)
    assert stream.next_work() == Work(1, 1)
    stream.start(Work(1, 1))
    assert stream.next_work() == Work(4, 0)


def test_a_cost_hint_orders_work_and_never_decides():
    costs = {0: 1.0, 1: 5.0, 2: 3.0}
    stream = CohortStream(3, rungs=(1,), cost=costs.__getitem__)
    order = []
    while (work := stream.next_work()) is not None:
        stream.start(work)
        order.append(work.index)
    assert order == [1, 2, 0]


def test_a_search_of_unknown_length_closes_its_last_cohort_when_it_ends():
    stream = CohortStream(None, 3, rungs=(1, 2))
    for _ in range(4):
        stream.start(stream.next_work())
    for index in range(4):
        stream.report(index, 0, float(index))
    made = stream.end(4)  # the searcher is finished: cohort 1 holds trial 3 alone
    assert [(c, d.promoted) for c, d in made] == [(1, [3])]
    with pytest.raises(ValueError, match=r"Invalid configs: 2 \(configuration 3 has already started\)"):
        stream.end(2)


def test_speculation_keeps_the_work_of_a_promoted_trial_and_drops_the_rest():
    stream = CohortStream(3, rungs=(1, 2), speculate=True)
    for _ in range(3):
        stream.start(stream.next_work())
    stream.report(0, 0, 0.9)
    stream.report(1, 0, 0.1)
    ahead = stream.next_work()  # trial 2 still trains: the leader so far goes on, from a copy
    assert ahead == Work(0, 1, speculative=True)
    stream.start(ahead)
    assert stream.report(0, 1, 0.95) == []  # held until rung 0 is decided
    made = stream.report(2, 0, 0.95)  # 2 leads after all: 0's work ahead is dropped
    assert [d.promoted for _, d in made] == [[2]]
    assert stream.dropped == [Work(0, 1, True)]


def test_cohort_budget_and_bad_arguments():
    assert cohort_units(48) == 15500
    assert cohorts_within(155_000, 48) == 10
    assert cohorts_within(1, 48) == 1
    for bad in (0, -1, math.nan, math.inf, True):
        with pytest.raises(ValueError, match="Invalid units"):
            cohorts_within(bad, 48)
    with pytest.raises(ValueError, match="Invalid configs"):
        CohortStream(0)
    with pytest.raises(ValueError, match="Invalid cohort_size"):
        CohortStream(None)
    with pytest.raises(ValueError, match="Invalid cohort_size"):
        CohortStream(4, 0)
    with pytest.raises(ValueError, match="Invalid workers"):
        simulate(CohortStream(2), workers=0, duration=lambda w: 1.0, score=lambda i, r: 0.0)
    with pytest.raises(ValueError, match="Invalid jitter"):
        simulate(CohortStream(2), workers=1, duration=lambda w: 1.0, score=lambda i, r: 0.0, jitter=math.nan)


def test_work_a_worker_cannot_take_is_skipped_for_the_next_ready_work():
    stream = CohortStream(6, 3, rungs=(1, 2))
    for _ in range(3):
        stream.start(stream.next_work())
    for index, score in [(0, 0.1), (1, 0.9), (2, 0.5)]:
        stream.report(index, 0, score)
    assert stream.next_work() == Work(1, 1)
    assert stream.next_work(skip={1}) == Work(3, 0)  # the next cohort's first rung
    assert stream.next_work() == Work(1, 1)  # asking changed nothing
