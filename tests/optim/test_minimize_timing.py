"""The cost rule times the passes the way Algorithm 1 performs them (paper, Appendix "Evaluation-Cost
Accounting"): the initial population is one forward of 4 points; every later evaluation (child,
mutant, refined point) is its own forward of 1 point; a gradient is a forward of 1 point that
records the graph, then a backward; and a timed span holds exactly one call of f or one backward."""

import re

import pytest
import torch

from eve_search import CostMeter, minimize


class _LoggedIdentity(torch.autograd.Function):
    """Identity whose backward writes to the log and takes 2 s of the fake clock."""

    log = None  # set by _run
    clock = None

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        _LoggedIdentity.log.append("backward")
        _LoggedIdentity.clock.now += 2.0
        return grad


class _Clock:
    def __init__(self, log):
        self.log, self.now = log, 0.0

    def __call__(self):
        self.log.append("clock")
        return self.now


def _run(budget, **kwargs):
    log = []
    clock = _Clock(log)
    _LoggedIdentity.log, _LoggedIdentity.clock = log, clock

    def f(rows):  # the recentred sphere; one call takes 1 s of the fake clock
        log.append(f"f{rows.shape[0]}{'g' if torch.is_grad_enabled() else ''}")
        clock.now += 1.0
        return ((_LoggedIdentity.apply(rows) - 0.5) ** 2).sum(dim=1)

    charges = []

    class RecordingMeter(CostMeter):
        def charge_forward(self, points, seconds):
            charges.append(f"F{points}:{seconds:g}")
            super().charge_forward(points, seconds)

        def charge_backward(self, seconds):
            charges.append(f"B:{seconds:g}")
            super().charge_backward(seconds)

    meter = RecordingMeter(budget, clock=clock)
    result = minimize(f, 0.0, 1.0, dim=3, budget=budget, seed=0, meter=meter, **kwargs)
    return log, charges, result


def test_each_pass_is_timed_as_its_own_span_around_one_call():
    log, charges, result = _run(400)
    # Between two clock readings there is exactly one call of f (no grad for scores, grad for a
    # gradient's forward) or one backward pass, and nothing outside a span calls f.
    spans = " ".join(log)
    assert re.fullmatch(r"(clock (f4|f1|f1g|backward) clock ?)+", spans), spans[:300]
    # The fake clock gives every forward 1 s and every backward 2 s: nothing else was timed.
    assert all(c in ("F4:1", "F1:1", "B:2") for c in charges)
    meter = result.meter
    assert meter.backward_passes > 0
    assert meter.backward_seconds == 2.0 * meter.backward_passes
    assert meter.forward_seconds == sum(1 for c in charges if c.startswith("F"))
    # Replay the charges: every backward costs 2 s over the mean forward time so far (C_f climbs
    # from 0.25 s after the 4-point call towards 1 s as 1-point forwards of 1 s accumulate).
    points = seconds = expected = 0.0
    for charge in charges:
        kind, _ = charge.split(":")
        if kind == "B":
            expected += 2.0 / (seconds / points)
        else:
            points, seconds, expected = points + int(kind[1:]), seconds + 1.0, expected + int(kind[1:])
    assert result.cost == pytest.approx(expected, rel=1e-12)


def test_the_sequence_of_charges_follows_algorithm_1():
    _, charges, result = _run(600)
    sequence = " ".join(c.split(":")[0] for c in charges)
    # Initial population: one call of 4 points. Then per iteration: the child (F1), the mutant
    # (F1), and when the child fails, n_adam = 7 gradient steps (F1 B) and the refined point (F1).
    iteration = r"F1 F1( (F1 B ){7}F1)?"
    # The last iteration may stop anywhere the budget runs out.
    assert re.fullmatch(rf"F4 ({iteration} )*F1( F1( (F1 B ?)*(F1)?)?)?", sequence.strip()), sequence[-200:]
    fallbacks = sequence.count("F1 B F1 B F1 B F1 B F1 B F1 B F1 B F1")
    assert fallbacks > 0 and result.iterations > fallbacks


def test_without_mutation_the_child_is_the_only_forward_before_the_fallback():
    _, charges, _ = _run(300, polynomial_mutation=False)
    sequence = " ".join(c.split(":")[0] for c in charges)
    assert re.fullmatch(r"F4 (F1( (F1 B ){7}F1)? )*F1( (F1 B ?)*(F1)?)?", sequence.strip()), sequence[-200:]
