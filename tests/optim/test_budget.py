import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search.optim.budget import CostMeter


class FakeClock:
    """A clock whose k-th reading is the sum of the first k scripted durations."""

    def __init__(self, durations):
        self.durations = list(durations)
        self.now = 0.0

    def __call__(self):
        self.now += self.durations.pop(0)
        return self.now


def test_forward_costs_one_per_scored_point():
    meter = CostMeter()
    meter.charge_forward(points=4, seconds=0.01)
    meter.charge_forward(points=1, seconds=0.0025)
    assert meter.cost == 5
    assert meter.forward_points == 5
    assert meter.mean_forward_seconds == pytest.approx(0.0125 / 5)


def test_measured_backward_is_its_time_over_the_mean_forward_time():
    meter = CostMeter()
    meter.charge_forward(points=2, seconds=0.004)  # C_f = 2 ms
    meter.charge_backward(seconds=0.005)  # 2.5 units
    assert meter.cost == pytest.approx(4.5)
    meter.charge_forward(points=2, seconds=0.012)  # C_f = 16 ms / 4 = 4 ms
    meter.charge_backward(seconds=0.002)  # 0.5 units, earlier charges untouched
    assert meter.cost == pytest.approx(4.5 + 2 + 0.5)


def test_calibrated_backward_charges_the_frozen_ratio_whatever_it_took():
    meter = CostMeter(mode="calibrated", backward_ratio=2.25)
    meter.charge_forward(points=1, seconds=0.001)
    meter.charge_backward(seconds=0.5)
    meter.charge_backward(seconds=0.0)
    assert meter.cost == pytest.approx(1 + 2 * 2.25)


def test_context_managers_time_with_the_injected_clock_and_synchronize_first():
    calls = []
    clock = FakeClock([0.0, 0.002, 0.0, 0.006])  # forward takes 2 ms, backward 6 ms
    meter = CostMeter(clock=clock, synchronize=lambda: calls.append("sync"))
    with meter.forward(1):
        pass
    with meter.backward():
        pass
    assert calls == ["sync"] * 4
    assert meter.forward_seconds == pytest.approx(0.002)
    assert meter.cost == pytest.approx(1 + 3)


def test_a_pass_that_raises_is_not_charged():
    meter = CostMeter()
    with pytest.raises(RuntimeError), meter.forward(1):
        raise RuntimeError("boom")
    assert meter.cost == 0 and meter.forward_points == 0


def test_training_stops_the_first_time_cost_reaches_the_budget():
    # Each step: forward 1 ms (1 unit) then backward 1.5 ms (1.5 units) -> 2.5 units per step.
    clock = FakeClock([0.0, 0.001, 0.0, 0.0015] * 100)
    meter = CostMeter(budget=10.0, clock=clock)
    costs = []
    while not meter.exhausted:
        with meter.forward(1):
            pass
        with meter.backward():
            pass
        costs.append(meter.cost)
    assert costs == pytest.approx([2.5, 5.0, 7.5, 10.0])
    assert all(c < 10.0 for c in costs[:-1]) and costs[-1] >= 10.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5), st.floats(0.0, 1.0)), min_size=1, max_size=50))
def test_cost_never_decreases(charges):
    meter = CostMeter()
    meter.charge_forward(1, 0.001)
    last = meter.cost
    for is_forward, points, seconds in charges:
        if is_forward:
            meter.charge_forward(points, seconds)
        else:
            meter.charge_backward(seconds)
        assert meter.cost >= last
        last = meter.cost


def test_budget_can_be_raised_and_charging_continues():
    meter = CostMeter(budget=2, mode="calibrated", backward_ratio=1.0)
    meter.charge_forward(2, 0.0)
    assert meter.exhausted
    meter.set_budget(5)
    assert not meter.exhausted and meter.cost == 2


def test_state_dict_round_trips():
    meter = CostMeter(budget=7, mode="calibrated", backward_ratio=1.7)
    meter.charge_forward(3, 0.01)
    meter.charge_backward(0.02)
    other = CostMeter()
    other.load_state_dict(meter.state_dict())
    assert other.state_dict() == meter.state_dict()
    assert other.mode == "calibrated" and other.backward_ratio == 1.7


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": 0}, "Invalid budget: 0"),
        ({"budget": -3.5}, "Invalid budget: -3.5"),
        ({"mode": "wallclock"}, "Invalid mode: 'wallclock'"),
        ({"mode": "calibrated"}, "Invalid backward_ratio: None"),
        ({"mode": "calibrated", "backward_ratio": -1.0}, "Invalid backward_ratio: -1.0"),
        ({"mode": "calibrated", "backward_ratio": math.nan}, "Invalid backward_ratio: nan"),
        ({"backward_ratio": 2.0}, "Invalid backward_ratio: 2.0"),
    ],
)
def test_invalid_arguments_name_the_argument_and_value(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        CostMeter(**kwargs)


def test_backward_before_any_forward_is_an_error_in_measured_mode():
    with pytest.raises(RuntimeError, match="no forward pass"):
        CostMeter().charge_backward(0.01)


def test_measured_ratio_is_mean_backward_over_mean_forward_time():
    meter = CostMeter()
    meter.charge_forward(points=3, seconds=0.003)  # 1 ms per point
    meter.charge_backward(seconds=0.002)
    meter.charge_backward(seconds=0.004)
    assert meter.measured_ratio() == pytest.approx(3.0)
    with pytest.raises(RuntimeError, match="no backward pass"):
        CostMeter().measured_ratio()


def test_measured_ratio_since_a_snapshot_covers_only_the_later_passes():
    meter = CostMeter()
    meter.charge_forward(points=3, seconds=0.003)
    meter.charge_backward(seconds=0.030)  # a stall before the snapshot
    snapshot = meter.pass_totals()
    meter.charge_forward(points=2, seconds=0.004)  # 2 ms per point
    meter.charge_backward(seconds=0.004)
    assert meter.measured_ratio(since=snapshot) == pytest.approx(2.0)
    assert meter.measured_ratio() == pytest.approx((0.034 / 2) / (0.007 / 5))
    with pytest.raises(RuntimeError, match="no backward pass"):
        meter.measured_ratio(since=meter.pass_totals())
