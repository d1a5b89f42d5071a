"""``eve_search.benchmarks.peers_sim``: Optuna's pruners and Ray's ASHA replayed over a recorded pool in
simulated time are pure functions of their inputs, keep the budget rule, and decide as their own code
documents."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search.benchmarks.peers_sim import simulate_optuna, simulate_ray_asha
from eve_search.engine.ledger import rank_order
from eve_search.engine.pool import RecordedPool, TrainerRecord

optuna = pytest.importorskip("optuna")
pytest.importorskip("ray.tune")

RUNGS = (1, 3, 9, 27)


def make_pool(scores: list[list[float]], seconds: list[list[float]], budgets=RUNGS, mode: str = "max") -> RecordedPool:
    return RecordedPool(task="toy", space="toy", metric="accuracy", mode=mode, budgets=tuple(budgets),
                        configs=[{"k": k} for k in range(len(scores))], referee="adam",
                        trainers={"adam": TrainerRecord(score=scores, test=scores, seconds=seconds)})


def synthetic_pool(configs: int = 16, seed: int = 0, even: bool = False) -> RecordedPool:
    """Learning curves that rise to a final score at their own pace; seconds in proportion to the budget,
    at a speed of its own per configuration (the same for all with ``even``)."""
    rng = random.Random(seed)
    scores, seconds = [], []
    for _ in range(configs):
        final, pace, speed = rng.uniform(0.6, 0.9), rng.uniform(2, 20), 1.0 if even else rng.uniform(0.5, 2.0)
        scores.append([final * (1 - math.exp(-b / pace)) for b in RUNGS])
        seconds.append([speed * b for b in RUNGS])
    return make_pool(scores, seconds)


def sha():
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=RUNGS[0], reduction_factor=3)


def hyperband():
    return optuna.pruners.HyperbandPruner(min_resource=RUNGS[0], max_resource=RUNGS[-1], reduction_factor=3)


PEERS = {
    "optuna-sha": lambda pool, **kw: simulate_optuna(pool, "adam", pruner=sha(), **kw),
    "optuna-hyperband": lambda pool, **kw: simulate_optuna(pool, "adam", pruner=hyperband(), **kw),
    "ray-asha": lambda pool, **kw: simulate_ray_asha(pool, "adam", **kw),
}


def trials_at(result, rung: int) -> list[int]:
    """The search positions that reported at ``rung``."""
    decision = next((d for _, d in result.decisions if d.rung == rung), None)
    return [] if decision is None else sorted(decision.promoted + decision.stopped)


# The hand-worked case: 4 configurations, rungs (1, 3), one worker (so the trials run one after the other).
HAND_SCORES = [[0.5, 0.55], [0.7, 0.5], [0.6, 0.65], [0.65, 0.9]]
HAND_POOL = make_pool(HAND_SCORES, [[1.0, 3.0]] * 4, budgets=(1, 3))


def hand_sha():
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)


def test_optuna_sha_by_hand():
    # Optuna's documented rule (SuccessiveHalvingPruner, reduction factor 3, min_resource 1): at step
    # 1 * 3**k a trial goes on iff its value is among the top len(competing) // 3 of all values recorded at
    # that rung so far, itself included, and at least the best while fewer than 3 compete.
    #   position 0, step 1: [0.5]                  -> best, on;   step 3: [0.55]      -> best, completes
    #   position 1, step 1: [0.5, 0.7]             -> best, on;   step 3: [0.55, 0.5] -> pruned at 3
    #   position 2, step 1: [0.5, 0.7, 0.6]        -> top 1 is 0.7: pruned at 1
    #   position 3, step 1: [0.5, 0.7, 0.6, 0.65]  -> top 4 // 3 = 1 is 0.7: pruned at 1
    # Two trials reached budget 3 (0: 0.55, 1: 0.5): 0 is picked.
    result = simulate_optuna(HAND_POOL, "adam", pruner=hand_sha(), workers=1, rungs=(1, 3), units=100)
    assert result.decision_summary() == [(0, 0, (1, 0), (2, 3)), (0, 1, (), (0, 1))]
    assert result.winner == 0
    assert (result.units, result.trained, result.wall) == (4 * 1 + 2 * 2, 6, 8.0)


def test_ray_asha_by_hand():
    # Ray's ASHA (reduction factor 3, grace period 1, max_t 3): at the milestone 1 a trial stops iff its
    # score is below the 2/3 quantile (linear interpolation) of the scores recorded there before it; a
    # result at max_t ends the trial.
    #   position 0: nothing recorded -> on;  position 1: 0.7 >= q([0.5]) = 0.5 -> on
    #   position 2: 0.6 < q([0.5, 0.7]) = 0.633 -> stopped;  position 3: 0.65 >= q([0.5, 0.6, 0.7]) = 0.633 -> on
    # Budget 3: 0 (0.55), 1 (0.5), 3 (0.9): 3 is picked, a trial Optuna's rule pruned at budget 1.
    result = simulate_ray_asha(HAND_POOL, "adam", workers=1, rungs=(1, 3), units=100)
    assert result.decision_summary() == [(0, 0, (1, 3, 0), (2,)), (0, 1, (), (0, 1, 3))]
    assert result.winner == 3
    assert (result.units, result.trained, result.wall) == (10.0, 7, 10.0)


def test_two_workers_by_hand():
    # Workers 0 and 1 take positions 0 and 1 at t=0; both reach budget 1 at t=1 (0 reports first: its work
    # started first) and go on, to t=3; there 0 completes and 1 is pruned, and the freed workers take 2
    # and 3, both pruned at t=4 against [0.5, 0.7, ...]. Same decisions as one worker, half the wall.
    result = simulate_optuna(HAND_POOL, "adam", pruner=hand_sha(), workers=2, rungs=(1, 3), units=100)
    assert result.decision_summary() == [(0, 0, (1, 0), (2, 3)), (0, 1, (), (0, 1))]
    assert (result.winner, result.wall, result.busy) == (0, 4.0, [4.0, 4.0])


@pytest.mark.parametrize(("units", "trials", "spent"),
                         [(1, [0], 1.0), (3, [0], 3.0), (3.5, [0, 1], 4.0), (6, [0, 1], 6.0), (6.5, [0, 1, 2], 7.0)])
def test_the_budget_stops_every_segment_once_spent(units, trials, spent):
    # One worker: position 0 starts (0 units started) and goes on to budget 3 only while fewer than `units`
    # were started (1 < units: 3 started); position 1 starts only while 3 < units, and goes on only while
    # 4 < units; and so on. A trial the budget stops keeps the rung it reached.
    result = simulate_optuna(HAND_POOL, "adam", pruner=hand_sha(), workers=1, rungs=(1, 3), units=units)
    assert trials_at(result, 0) == trials
    assert result.units == spent


def test_two_workers_start_two_trials_on_a_budget_of_two_units():
    # Positions 0 and 1 start (0, then 1 < 2 units started); with 2 units started, neither goes on.
    result = simulate_optuna(HAND_POOL, "adam", pruner=hand_sha(), workers=2, rungs=(1, 3), units=2)
    assert (trials_at(result, 0), trials_at(result, 1), result.units) == ([0, 1], [], 2.0)


def test_a_trial_that_completes_is_told_so():
    # Optuna's SuccessiveHalvingPruner with min_resource="auto" prunes nothing until a trial is COMPLETE
    # (it then takes max(last step // 100, 1) = 1), and its default reduction factor is 4:
    #   0: no trial complete yet at steps 1 and 3 -> completes;  1: step 1: [0.7] -> on; step 3 < 4 -> completes
    #   2: step 1: [0.7, 0.6] -> pruned;  3: step 1: [0.7, 0.6, 0.65] -> pruned
    result = simulate_optuna(HAND_POOL, "adam", pruner=optuna.pruners.SuccessiveHalvingPruner(), workers=1,
                             rungs=(1, 3), units=100)
    assert result.decision_summary() == [(0, 0, (1, 0), (2, 3)), (0, 1, (), (0, 1))]


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_with_one_worker_jitter_changes_the_clock_not_the_decisions(peer):
    pool = synthetic_pool(12, seed=4)
    plain = PEERS[peer](pool, workers=1, rungs=RUNGS, units=150)
    jittered = PEERS[peer](pool, workers=1, rungs=RUNGS, units=150, jitter=0.5, jitter_seed=3)
    assert jittered.decisions == plain.decisions and jittered.winner == plain.winner
    assert jittered.wall != plain.wall and jittered.wall == pytest.approx(jittered.work)


def test_order_maps_search_positions_to_configurations():
    order = [3, 1, 0, 2]
    reordered = make_pool([HAND_SCORES[k] for k in order], [[1.0, 3.0]] * 4, budgets=(1, 3))
    for run in (lambda pool, **kw: simulate_ray_asha(pool, "adam", **kw),
                lambda pool, **kw: simulate_optuna(pool, "adam", pruner=hand_sha(), **kw)):
        assert run(HAND_POOL, workers=2, rungs=(1, 3), units=100, order=order) == \
            run(reordered, workers=2, rungs=(1, 3), units=100)


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_the_same_inputs_give_the_same_run(peer):
    pool = synthetic_pool(16, seed=1)
    kwargs = {"workers": 3, "rungs": RUNGS, "units": 150, "jitter": 0.3, "jitter_seed": 7}
    first = PEERS[peer](pool, **kwargs)
    assert PEERS[peer](pool, **kwargs) == first
    assert first.winner is not None and first.trained > 0


def test_a_pruner_is_not_changed_by_a_run():
    pool = synthetic_pool(16, seed=2)
    pruner = hyperband()
    first = simulate_optuna(pool, "adam", pruner=pruner, workers=2, rungs=RUNGS, units=200)
    # Hyperband makes its brackets on its first prune (a private attribute of Optuna 5.0): this object never pruned
    assert pruner._pruners == []
    assert simulate_optuna(pool, "adam", pruner=pruner, workers=2, rungs=RUNGS, units=200) == first


def test_ray_asha_leaves_numpys_global_generator_as_it_was():
    import numpy as np

    np.random.seed(5)
    expected = np.random.random()
    np.random.seed(5)
    simulate_ray_asha(synthetic_pool(8), "adam", workers=2, rungs=RUNGS, units=100)
    assert np.random.random() == expected


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_minimizing_the_negated_scores_decides_alike(peer):
    pool = synthetic_pool(16, seed=3)
    record = pool.trainers["adam"]
    negated = make_pool([[-s for s in row] for row in record.score], record.seconds, mode="min")
    kwargs = {"workers": 4, "rungs": RUNGS, "units": 200}
    assert PEERS[peer](negated, **kwargs) == PEERS[peer](pool, **kwargs)


@settings(max_examples=60, deadline=None)
@given(peer=st.sampled_from(sorted(PEERS)), seed=st.integers(0, 10**6), configs=st.integers(1, 12),
       workers=st.integers(1, 6), units=st.integers(1, 400), jitter=st.sampled_from([0.0, 0.5]),
       shuffle=st.booleans())
def test_a_run_keeps_the_budget_rule_and_its_books(peer, seed, configs, workers, units, jitter, shuffle):
    pool = synthetic_pool(configs, seed=seed)
    order = random.Random(seed).sample(range(configs), configs) if shuffle else None
    result = PEERS[peer](pool, workers=workers, rungs=RUNGS, units=units, order=order, jitter=jitter, jitter_seed=seed)
    increments = [b - a for a, b in zip((0, *RUNGS[:-1]), RUNGS)]
    reports = {d.rung: len(d.promoted) + len(d.stopped) for _, d in result.decisions}
    # every segment started was trained and used, and counted once
    assert result.units == sum(n * increments[r] for r, n in reports.items())
    assert result.trained == sum(reports.values())
    assert (result.dropped, result.dropped_units) == (0.0, 0.0)
    # new trials start only below the budget: the excess is at most what the trials in flight still had to train
    started = reports[0]
    assert result.units < units + workers * RUNGS[-1]
    assert started == configs or result.units >= units
    assert started <= configs
    # time
    assert sum(result.busy) == pytest.approx(result.work)
    assert result.utilisation <= 1 + 1e-9
    if workers == 1:
        assert result.wall == pytest.approx(result.work)
    # the pick: the best score at the highest budget reached, ties to the lower position
    top = max(reports)
    reached = trials_at(result, top)
    scores = {p: pool.score("adam", (order or list(range(configs)))[p], top) for p in reached}
    assert result.winner == rank_order(scores, "max")[0]


@pytest.mark.parametrize("peer", sorted(PEERS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_more_workers_never_make_a_simple_pool_much_slower(peer, seed):
    # Asynchronous decisions depend on the order in which results arrive, so more workers can change what
    # is trained; where every configuration trains at the same speed the change is small. (With uneven
    # speeds it is not: 4 workers can take longer than 2.)
    pool = synthetic_pool(24, seed=seed, even=True)
    walls = [PEERS[peer](pool, workers=w, rungs=RUNGS, units=150).wall for w in (1, 2, 4, 8, 16)]
    assert all(wall <= walls[0] for wall in walls)
    assert all(later <= 1.2 * earlier for earlier, later in zip(walls, walls[1:]))


GOOD = {"workers": 2, "rungs": (1, 3), "units": 10}
BAD = [
    ("pool", "pool.json"), ("trainer", "sgd"), ("trainer", None),
    ("workers", 0), ("workers", True), ("workers", 1.5),
    ("rungs", (3, 1)), ("rungs", (1, 9)), ("rungs", ()),
    ("units", 0), ("units", -1), ("units", float("nan")), ("units", "10"), ("units", True),
    ("order", [4]), ("order", [-1]), ("order", "01"), ("order", [True]), ("order", 3),
    ("jitter", -0.1), ("jitter", 11), ("jitter", True),
    ("jitter_seed", "0"), ("jitter_seed", 1.5), ("jitter_seed", True),
]


@pytest.mark.parametrize("peer", ["optuna", "ray"])
@pytest.mark.parametrize(("name", "value"), BAD)
def test_bad_arguments_give_one_line_value_errors(peer, name, value):
    args = {"pool": HAND_POOL, "trainer": "adam", **GOOD, name: value}
    pool, trainer = args.pop("pool"), args.pop("trainer")
    run = (lambda: simulate_optuna(pool, trainer, pruner=sha(), **args)) if peer == "optuna" else \
        (lambda: simulate_ray_asha(pool, trainer, **args))
    with pytest.raises(ValueError, match=f"^Invalid {name}: ") as error:
        run()
    assert "\n" not in str(error.value)
    assert "expected" in str(error.value) or name == "rungs"


@pytest.mark.parametrize("pruner", [None, "sha", object()])
def test_a_pruner_must_be_an_optuna_pruner(pruner):
    with pytest.raises(ValueError, match=r"^Invalid pruner: .* \(expected an optuna.pruners.BasePruner") as error:
        simulate_optuna(HAND_POOL, "adam", pruner=pruner, **GOOD)
    assert "\n" not in str(error.value)
