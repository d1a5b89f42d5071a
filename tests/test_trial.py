import copy

import pytest
import torch

from eve_search import budget
from eve_search.trial import Trial, trial_seeds

CONFIG = {"lr": 3e-3, "weight_decay": 1e-4, "width": 32, "depth": 2}


def make(splits, optimizer="eve", **kwargs):
    options = {"seed": 0, "index": 3, "cost_mode": "calibrated", "backward_ratio": 2.0} | kwargs
    return Trial(CONFIG, splits, optimizer, **options)


@pytest.mark.parametrize("optimizer", ["eve", "adam", "lookahead"])
def test_train_to_reaches_the_budget_and_continues_without_restarting(tiny_splits, optimizer):
    trial = make(tiny_splits, optimizer)
    trial.train_to(60)
    first = trial.charged_units
    assert 60 <= first < 60 + 15
    before = trial.evaluate()
    trial.train_to(400)
    assert trial.charged_units >= 400
    after = trial.evaluate()
    assert after.accuracy >= before.accuracy - 0.02 and after.accuracy > 0.8


@pytest.mark.parametrize("optimizer", ["eve", "adam", "sgd_momentum"])
def test_save_load_continue_equals_never_stopping_bit_for_bit(tiny_splits, optimizer):
    uninterrupted = make(tiny_splits, optimizer)
    uninterrupted.train_to(80)
    saved = copy.deepcopy(uninterrupted.state_dict())
    uninterrupted.train_to(250)

    resumed = make(tiny_splits, optimizer)
    resumed.load_state_dict(saved)
    resumed.train_to(250)
    for a, b in zip(uninterrupted.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    assert uninterrupted.charged_units == resumed.charged_units
    assert uninterrupted.evaluate() == resumed.evaluate()


def test_every_optimizer_starts_from_the_same_weights_and_batches_at_a_seed(tiny_splits):
    eve, adam = make(tiny_splits, "eve"), make(tiny_splits, "adam")
    for a, b in zip(eve.model.parameters(), adam.model.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(eve.stream.next()[0], adam.stream.next()[0])
    other_seed = make(tiny_splits, "adam", seed=1)
    assert not torch.equal(next(other_seed.model.parameters()), next(adam.model.parameters()))
    assert trial_seeds(0, 3) != trial_seeds(0, 4) != trial_seeds(1, 3)


def test_eve_is_evaluated_at_its_best_member(tiny_splits):
    trial = make(tiny_splits, "eve")
    trial.train_to(150)
    population = trial.optimizer.population
    best = population.z[population.best_index]
    expected = torch.addcmul(population.lower, best, population.upper - population.lower)
    weights = torch.cat([p.detach().flatten() for p in trial.model.parameters()])
    assert torch.equal(weights, expected)


def test_a_budget_below_the_current_one_is_refused(tiny_splits):
    trial = make(tiny_splits)
    trial.train_to(50)
    with pytest.raises(ValueError, match="Invalid budget: 20 .*must be >= its current budget 50.0"):
        trial.train_to(20)


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_calibration_measures_a_throwaway_copy_and_leaves_the_trial_alone(tiny_splits, optimizer):
    trial = make(tiny_splits, optimizer)
    trial.train_to(30)
    before = copy.deepcopy(trial.state_dict())
    ratio = trial.calibrate(units=60)
    assert 0.1 < ratio < 50
    after = trial.state_dict()
    assert all(torch.equal(a, b) for a, b in zip(before["model"].values(), after["model"].values()))
    assert after["meter"] == before["meter"] and after["stream"]["position"] == before["stream"]["position"]


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_calibration_keeps_the_median_chunk_so_one_stall_does_not_move_the_ratio(tiny_splits, optimizer,
                                                                                monkeypatch):
    readings = iter(range(10**9))

    def clock():  # every pass lasts exactly 1 s, except one that stalls for 100 s more
        reading = next(readings)
        return reading + (100 if reading >= 41 else 0)

    defaults = dict(budget.CostMeter.__init__.__kwdefaults__, clock=clock)
    monkeypatch.setattr(budget.CostMeter.__init__, "__kwdefaults__", defaults)
    assert make(tiny_splits, optimizer).calibrate(units=100) == 1.0


def test_a_checkpoint_of_another_trial_is_refused(tiny_splits):
    state = make(tiny_splits, "eve").state_dict()
    with pytest.raises(ValueError, match="checkpoint belongs to another trial: optimizer_name differ"):
        make(tiny_splits, "adam").load_state_dict(state)
