import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search.engine.ledger import (
    DEFAULT_RUNGS,
    RungLedger,
    check_fraction,
    check_rungs,
    promote_top_fraction,
    promotion_count,
    rank_order,
    rung_sizes,
)


def test_the_paper_rungs_hold_48_16_6_2_1_trials():
    assert DEFAULT_RUNGS == (100, 300, 900, 2700, 3000)
    assert rung_sizes(48, DEFAULT_RUNGS) == [48, 16, 6, 2, 1]


@pytest.mark.parametrize(("survivors", "kept"), [(48, 16), (16, 6), (6, 2), (2, 1), (1, 1), (3, 1), (4, 2)])
def test_top_third_is_ceil_and_at_least_one(survivors, kept):
    assert promotion_count(survivors) == kept


def test_ties_go_to_the_trial_that_joined_first_and_nan_ranks_last():
    scores = {5: 0.8, 2: 0.9, 7: 0.9, 1: float("nan"), 3: 0.7, 4: 0.9}
    assert promote_top_fraction(scores, 0.5) == [2, 7, 4]  # mapping order is the joining order
    assert promote_top_fraction(dict(sorted(scores.items())), 0.5) == [2, 4, 7]
    assert promote_top_fraction({0: float("nan"), 1: 0.1}, 0.5) == [1]
    assert rank_order({"a": 0.3, "b": 0.1, "c": float("nan")}, mode="min") == ["b", "a", "c"]


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.integers(0, 200), st.floats(0, 1), min_size=1, max_size=60))
def test_promotion_keeps_exactly_the_best(scores):
    promoted = promote_top_fraction(dict(sorted(scores.items())))
    assert len(promoted) == max(1, math.ceil(len(scores) / 3))
    worst_kept = min(scores[k] for k in promoted)
    assert all(scores[k] <= worst_kept for k in scores if k not in promoted)


@pytest.mark.parametrize(("rungs", "message"), [
    ([300, 100], "Invalid rungs: 300, 100 .*strictly increasing"),
    ([0, 100], "Invalid rungs: 0, 100 .*positive whole numbers"),
    ([20.5, 41], "Invalid rungs: 20.5, 41 .*whole numbers"),
    ([], r"Invalid rungs: \(\)"),
    (["a"], "Invalid rungs: 'a'"),
])
def test_invalid_rungs_are_named(rungs, message):
    with pytest.raises(ValueError, match=message):
        check_rungs(rungs)


def test_rungs_are_integers():
    assert check_rungs([100.0, 300]) == (100, 300)
    assert all(isinstance(r, int) for r in check_rungs([100.0, 300.0]))


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5, float("nan"), True])
def test_invalid_fractions_are_named(fraction):
    with pytest.raises(ValueError, match="Invalid fraction"):
        check_fraction(fraction)


def report_all(ledger, rung, scores):
    for trial, score in scores.items():
        ledger.report(trial, rung, score)


def test_a_rung_decides_only_once_its_whole_cohort_reported():
    ledger = RungLedger(rungs=(100, 300, 900), trials=range(9))
    for trial in range(8):
        ledger.report(trial, 0, trial / 10)
        assert ledger.decide(0) is None
    assert ledger.waiting_for(0) == [8]
    assert ledger.next_rung(0) is None and ledger.status(0) == "wait"
    ledger.report(8, 0, 0.05)
    decision = ledger.decide(0)
    assert decision.promoted == [7, 6, 5] and sorted(decision.stopped) == [0, 1, 2, 3, 4, 8]
    assert ledger.cohort(1) == [7, 6, 5] and ledger.next_rung(7) == 1 and ledger.status(0) == "stopped"
    report_all(ledger, 1, {7: 0.5, 6: 0.9, 5: 0.1})
    assert ledger.decide(1).promoted == [6]
    ledger.report(6, 2, 0.95)
    assert ledger.decide(2).promoted == [] and ledger.decide(2).stopped == [6]
    assert ledger.status(6) == "complete" and ledger.finished
    assert [len(d.stopped) + len(d.promoted) for d in ledger.decisions()] == [9, 3, 1]


def test_a_trial_that_failed_for_good_leaves_the_cohort():
    ledger = RungLedger(rungs=(10, 20), trials="abcd")
    report_all(ledger, 0, {"a": 0.1, "b": 0.2, "c": 0.3})
    ledger.fail("d")
    decision = ledger.decide(0)
    assert decision is not None and decision.promoted == ["c"] and "d" not in decision.stopped
    assert ledger.status("d") == "failed"
    ledger.fail("c")  # the only promoted trial dies: the last rung has nobody, the sweep still ends
    assert ledger.decide(1).stopped == [] and ledger.finished
    assert ledger.decide(0).promoted == ["c"]  # decisions are final


def test_reports_are_idempotent_and_checked():
    ledger = RungLedger(rungs=(10, 20), trials=[0, 1, 2])
    ledger.report(0, 0, 0.5)
    ledger.report(0, 0, 0.9)  # a replayed or duplicated report keeps the first score
    assert ledger.score(0, 0) == 0.5
    with pytest.raises(ValueError, match="Invalid trial: 7 is not in the cohort"):
        ledger.report(7, 0, 0.1)
    with pytest.raises(ValueError, match=r"Invalid rung: 5 \(expected an index in \[0, 1\]\)"):
        ledger.report(0, 5, 0.1)
    with pytest.raises(ValueError, match="not in the cohort of rung 1"):
        ledger.report(1, 1, 0.1)
    report_all(ledger, 0, {1: 0.1, 2: 0.2})
    with pytest.raises(ValueError, match="cannot join after the first rung was decided"):
        ledger.add(3)


def test_rung_of_maps_a_budget_to_the_rung_it_reached():
    ledger = RungLedger(rungs=(100, 300))
    assert [ledger.rung_of(b) for b in (99.9, 100, 250, 300, 1e6)] == [None, 0, 0, 1, 1]


def test_minimizing_promotes_the_lowest_scores():
    ledger = RungLedger(rungs=(1, 2), mode="min", trials=range(3))
    report_all(ledger, 0, {0: 0.5, 1: 0.2, 2: float("nan")})
    assert ledger.decide(0).promoted == [1]


def test_state_dict_round_trips_mid_sweep():
    ledger = RungLedger(rungs=(10, 20, 30), trials=["t0", "t1", "t2", "t3"])
    report_all(ledger, 0, {"t0": 0.3, "t1": 0.4, "t2": 0.1, "t3": 0.2})
    ledger.decide(0)
    ledger.report("t1", 1, 0.7)
    ledger.fail("t2")
    restored = RungLedger(rungs=(10, 20, 30))
    restored.load_state_dict(ledger.state_dict())
    assert restored.state_dict() == ledger.state_dict()
    assert restored.waiting_for(1) == ledger.waiting_for(1) == ["t0"]
    with pytest.raises(ValueError, match="differ from this ledger's"):
        RungLedger(rungs=(10, 20)).load_state_dict(ledger.state_dict())


def _answers(ledger: RungLedger, trials: int) -> str:
    """Everything a driver can ask, as one string (decisions of a fresh and a used ledger compare)."""
    out = []
    for trial in range(trials):
        try:
            out.append((ledger.status(trial), ledger.next_rung(trial)))
        except ValueError as error:
            out.append(str(error))
    for rung in range(len(ledger.rungs)):
        out.append((ledger.cohort(rung), ledger.scores(rung), ledger.waiting_for(rung), ledger.decide(rung)))
    out.append((ledger.decisions(), ledger.finished, ledger.state_dict()))
    return repr(out)


_OPERATION = st.tuples(st.sampled_from(["report", "fail", "add", "ask"]), st.integers(0, 9), st.integers(0, 2),
                       st.sampled_from([0.1, 0.5, 0.9]))


@settings(max_examples=300, deadline=None)
@given(trials=st.integers(0, 8), operations=st.lists(_OPERATION, max_size=40), mode=st.sampled_from(["max", "min"]),
       fraction=st.sampled_from([0.25, 1 / 3, 0.5, 1.0]))
def test_a_ledger_answers_as_one_rebuilt_from_its_state_whatever_it_was_asked_before(trials, operations, mode,
                                                                                      fraction):
    # The ledger keeps derived views (cohorts, outcomes) between questions; none may go stale.
    ledger = RungLedger((1, 3, 9), fraction, mode, trials=range(trials))
    for kind, trial, rung, score in operations:
        try:
            if kind == "report":
                ledger.report(trial, rung, score + trial / 100)
            elif kind == "fail":
                ledger.fail(trial)
            elif kind == "add":
                ledger.add(trial)
            else:
                ledger.status(trial) if trial < trials else ledger.decide(rung)
        except ValueError:
            pass
        fresh = RungLedger((1, 3, 9), fraction, mode)
        fresh.load_state_dict(ledger.state_dict())
        assert _answers(ledger, 10) == _answers(fresh, 10)
