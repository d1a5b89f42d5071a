import copy
import os
import pickle

import pytest
import torch

from eve_search.optim import budget
from eve_search.engine.checkpoint import CheckpointError, load_state, save_atomically
from eve_search.engine.trial import Trial, evaluate_checkpoint, trial_seeds

CONFIG = {"lr": 3e-3, "weight_decay": 1e-4, "width": 32, "depth": 2}


def make(optimizer="eve", **kwargs):
    options = {"seed": 0, "index": 3, "cost_mode": "calibrated", "backward_ratio": 2.0} | kwargs
    return Trial("tiny", CONFIG, optimizer, **options)


@pytest.mark.parametrize("optimizer", ["eve", "adam", "lookahead"])
def test_train_to_reaches_the_budget_and_continues_without_restarting(optimizer):
    trial = make(optimizer)
    trial.train_to(60)
    first = trial.charged_units
    assert 60 <= first < 60 + 15
    before = trial.evaluate()["accuracy"]
    trial.train_to(400)
    assert trial.charged_units >= 400 and trial.budget == 400
    after = trial.evaluate()["accuracy"]
    assert after >= before - 0.02 and after > 0.8


@pytest.mark.parametrize("optimizer", ["eve", "adam", "sgd_momentum", "lookahead", "adabelief"])
def test_bytes_round_trip_continues_bit_for_bit(optimizer):
    uninterrupted = make(optimizer)
    uninterrupted.train_to(80)
    saved = uninterrupted.to_bytes()
    uninterrupted.train_to(250)

    resumed = make(optimizer)
    resumed.load_bytes(saved)
    resumed.train_to(250)
    for a, b in zip(uninterrupted.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    assert uninterrupted.charged_units == resumed.charged_units
    assert uninterrupted.evaluate() == resumed.evaluate()


def test_a_file_round_trip_continues_bit_for_bit(tmp_path):
    trial = make("eve")
    trial.train_to(50)
    trial.save(tmp_path / "t.pt")
    copy_ = make("eve")
    copy_.load(tmp_path / "t.pt")
    trial.train_to(120)
    copy_.train_to(120)
    assert trial.evaluate() == copy_.evaluate() and trial.charged_units == copy_.charged_units


def test_every_optimizer_starts_from_the_same_weights_and_batches_at_a_seed():
    eve, adam = make("eve"), make("adam")
    for a, b in zip(eve.model.parameters(), adam.model.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(eve.stream.next()[0], adam.stream.next()[0])
    other_seed = make("adam", seed=1)
    assert not torch.equal(next(other_seed.model.parameters()), next(adam.model.parameters()))
    assert trial_seeds(0, 3) != trial_seeds(0, 4) != trial_seeds(1, 3)


def test_eve_is_evaluated_at_its_best_member():
    trial = make("eve")
    trial.train_to(150)
    population = trial.optimizer.population
    best = population.z[population.best_index]
    expected = torch.addcmul(population.lower, best, population.upper - population.lower)
    weights = torch.cat([p.detach().flatten() for p in trial.model.parameters()])
    assert torch.equal(weights, expected)


@pytest.mark.parametrize(("budget_", "message"), [
    (20, "Invalid budget: 20 .*must be >= its current budget 50"),
    (60.5, "Invalid budget: 60.5 .*whole number"),
])
def test_bad_budgets_are_refused(budget_, message):
    trial = make()
    trial.train_to(50)
    with pytest.raises(ValueError, match=message):
        trial.train_to(budget_)


def test_calibration_measures_a_throwaway_copy_and_leaves_the_trial_alone():
    trial = make("eve")
    trial.train_to(30)
    before = copy.deepcopy(trial.state_dict())
    trial.calibrate(units=60)
    after = trial.state_dict()
    assert all(torch.equal(a, b) for a, b in zip(before["model"].values(), after["model"].values()))
    assert after["meter"] == before["meter"] and after["stream"]["position"] == before["stream"]["position"]


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_calibration_keeps_the_median_chunk_so_one_stall_does_not_move_the_ratio(optimizer, monkeypatch):
    readings = iter(range(10**9))

    def clock():  # every pass lasts exactly 1 s, except one that stalls for 100 s more
        reading = next(readings)
        return reading + (100 if reading >= 41 else 0)

    defaults = dict(budget.CostMeter.__init__.__kwdefaults__, clock=clock)
    monkeypatch.setattr(budget.CostMeter.__init__, "__kwdefaults__", defaults)
    assert make(optimizer).calibrate(units=100) == 1.0


@pytest.mark.parametrize(("change", "differ"), [
    ({"optimizer": "adam"}, "optimizer_name"), ({"seed": 1}, "seed"), ({"owner": "another-sweep"}, "owner")])
def test_a_checkpoint_of_another_trial_or_sweep_is_refused(change, differ):
    state = make("eve").to_bytes()
    optimizer = change.pop("optimizer", "eve")
    with pytest.raises(CheckpointError, match=f"checkpoint belongs to another trial \\({differ} differ\\)"):
        make(optimizer, **change).load_bytes(state)


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_a_checkpoint_evaluates_as_its_trial_without_building_the_optimizer(optimizer, monkeypatch):
    trial = make(optimizer)
    trial.train_to(90)
    saved = trial.to_bytes()
    expected = {split: trial.evaluate(split) for split in ("val", "test")}
    monkeypatch.setattr("eve_search.engine.trial.make_optimizer", lambda *a, **k: pytest.fail("built an optimizer"))
    for split in ("val", "test"):
        assert evaluate_checkpoint(trial.task, CONFIG, saved, split, seed=0, index=3, data=trial.data) == expected[split]


def test_evaluating_a_checkpoint_at_another_budget_than_asked_is_refused():
    trial = make("eve")
    trial.train_to(40)
    saved = trial.to_bytes()
    options = {"seed": 0, "index": 3, "data": trial.data}
    assert evaluate_checkpoint(trial.task, CONFIG, saved, "test", budget=40, **options) == trial.evaluate("test")
    with pytest.raises(CheckpointError, match="at budget 40, not 120"):
        evaluate_checkpoint(trial.task, CONFIG, saved, "test", budget=120, **options)


@pytest.mark.parametrize(("change", "differ"), [({"index": 4}, "index"), ({"seed": 1}, "seed"),
                                                 ({"config": CONFIG | {"width": 16}}, "config")])
def test_evaluating_another_trials_checkpoint_is_refused(change, differ):
    trial = make("eve")
    options = {"config": CONFIG, "seed": 0, "index": 3} | change
    with pytest.raises(CheckpointError, match=f"belongs to another trial \\({differ} differ\\)"):
        evaluate_checkpoint(trial.task, options.pop("config"), trial.to_bytes(), data=trial.data, **options)


class RunsCode:
    """What an attacker would plant: unpickling it calls os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_crafted_checkpoint_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "trial-0000.pt"
    torch.save({"format": "eve-search-trial/1", "model": RunsCode(marker)}, path)
    with pytest.raises(CheckpointError, match="refused: .*never loaded"):
        make().load(path)
    assert not marker.exists()
    path.write_bytes(pickle.dumps(RunsCode(marker), protocol=2))  # a bare pickle: not even looked into
    with pytest.raises(CheckpointError, match="unreadable \\(not an eve-search checkpoint"):
        make().load(path)
    assert not marker.exists()


def test_corrupt_and_truncated_checkpoints_are_one_line_errors(tmp_path):
    trial = make()
    trial.train_to(30)
    path = tmp_path / "t.pt"
    trial.save(path)
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: unreadable") as error:
        make().load(path)
    assert "\n" not in str(error.value)
    path.write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="unreadable"):
        make().load(path)
    with pytest.raises(CheckpointError, match="no such file"):
        make().load(tmp_path / "missing.pt")
    save_atomically({"format": "eve-search-trial/0"}, path)
    with pytest.raises(CheckpointError, match="format 'eve-search-trial/0'"):
        make().load(path)
    assert load_state(path) == {"format": "eve-search-trial/0"}


def test_a_trial_takes_a_task_object_or_name(tiny_task):
    assert make().task is tiny_task
    with pytest.raises(ValueError, match="Unknown task: 'nope'"):
        Trial("nope", CONFIG, "eve", seed=0, index=0, backward_ratio=2.0)
    with pytest.raises(ValueError, match="Invalid seed: -1"):
        make(seed=-1)


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_calibration_on_a_busy_machine_reads_the_quiet_ratio(optimizer, monkeypatch):
    # forwards take 1 s and backwards 2 s, but every third pass is slowed 5 to 50-fold by other processes
    readings, now, count = iter(range(10**9)), [0.0], [0]

    def clock():
        reading = next(readings)
        if reading % 2:  # the end of a pass
            count[0] += 1
            slow = 1 + (count[0] % 3 == 0) * (5 + count[0] % 45)
            now[0] += slow * clock.duration
        return now[0]

    clock.duration = 1.0
    defaults = dict(budget.CostMeter.__init__.__kwdefaults__, clock=clock)
    monkeypatch.setattr(budget.CostMeter.__init__, "__kwdefaults__", defaults)
    trial = make(optimizer)
    ratio = trial.calibrate(units=100)
    assert ratio == 1.0  # every pass lasts 1 s when not slowed; the mean ratio would follow the stalls
    assert trial.last_calibration["reliable"]


def test_a_ratio_outside_the_sane_range_is_measured_again_and_flagged(monkeypatch):
    readings = iter(range(10**9))
    passes = []

    def clock():  # backward passes (timed alone) take 20x a forward: outside [0.5, 8]
        reading = next(readings)
        return reading * 1.0

    defaults = dict(budget.CostMeter.__init__.__kwdefaults__, clock=clock)
    monkeypatch.setattr(budget.CostMeter.__init__, "__kwdefaults__", defaults)
    original = budget.CostMeter.charge_backward
    monkeypatch.setattr(budget.CostMeter, "charge_backward",
                        lambda self, seconds: (passes.append(1), original(self, 20 * seconds))[1])
    trial = make("adam")
    ratio = trial.calibrate(units=60, attempts=3)
    assert ratio == pytest.approx(20.0)
    assert trial.last_calibration["reliable"] is False and len(trial.last_calibration["estimates"]) == 3
