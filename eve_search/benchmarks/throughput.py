"""Throughput benchmark: charged evaluation units per second of EvE and Adam against the compute floor.

All methods train the Adult-sized MLP (107-256-256-2, batch 256) on random data drawn by index
from in-memory tensors, charged by the same :class:`~eve_search.optim.budget.CostMeter` rule
(``measured`` mode, the paper's). Four loops run in rounds, side by side in one process:

* ``floor``: a tight forward-only loop (inference mode), one unit per forward: the compute floor;
* ``passes``: forward + backward with no update, charged like a baseline step: the most any
  method that interleaves gradients could reach on this machine;
* ``eve``: EvE steps; ``adam``: Adam steps (PyTorch's fused kernel), each via the registry.

Each round gives every loop the same wall time; the figures are medians over rounds, and every
ratio is taken within a round before the median, so slow drifts of the machine cancel.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from eve_search._checks import InputError, check_int
from eve_search.engine.batches import BatchStream
from eve_search.optim.budget import CostMeter
from eve_search.tasks.models import mlp
from eve_search.optim import make_optimizer

__all__ = ["ThroughputReport", "throughput"]

LOOPS = ("floor", "passes", "eve", "adam")


@dataclass
class ThroughputReport:
    """Medians over rounds: units per second per loop, floor/loop ratios, and the share of each loop's
    wall time spent inside its charged passes (the rest is bookkeeping: updates, batches, Python).

    Attributes:
        units_per_second: charged units per second of each loop (``floor``, ``passes``, ``eve``, ``adam``).
        floor_ratio: the floor's rate over each loop's (1.0 for the floor itself).
        time_in_passes: the share of each loop's wall time spent inside its charged passes.
        eve_over_adam: EvE's rate over Adam's.
        eve_fallback_rate: the share of EvE's iterations that took the Adam fallback.
        rounds: the rounds measured.
        seconds_per_loop: the wall time each loop got per round.
        threads: torch's intra-op threads during the measurement.

    Example:
        >>> report = ThroughputReport({"floor": 900.0, "adam": 300.0}, {"floor": 1.0, "adam": 3.0},
        ...                           {"floor": 0.9, "adam": 0.6}, eve_over_adam=1.1, eve_fallback_rate=0.2,
        ...                           rounds=5, seconds_per_loop=2.0, threads=1)
        >>> report.as_dict()["floor_ratio"]
        {'floor': 1.0, 'adam': 3.0}
    """

    units_per_second: dict[str, float]
    floor_ratio: dict[str, float]
    time_in_passes: dict[str, float]
    eve_over_adam: float
    eve_fallback_rate: float
    rounds: int
    seconds_per_loop: float
    threads: int

    def as_dict(self) -> dict:
        return asdict(self)


def _loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])


def _timed(seconds: float, step: Callable[[], None]) -> float:
    """Run ``step`` until ``seconds`` of wall time have passed; return the wall time used."""
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        step()
    return time.perf_counter() - start


def _setup(name: str, x: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[Any, ...]:
    """Loop ``name``'s (model, batch stream, meter, optimizer); no optimizer for ``floor`` and ``passes``."""
    generator = torch.Generator().manual_seed(seed)
    model = mlp(107, [256, 256], 2, generator=generator)
    stream = BatchStream(x, y, 256, generator=generator)
    meter = CostMeter()
    optimizer = None if name in ("floor", "passes") else make_optimizer(
        name, model.parameters(), lr=1e-3, meter=meter, seed=seed)
    return model, stream, meter, optimizer


def _step(name: str, model: torch.nn.Module, stream: BatchStream, meter: CostMeter, optimizer: Any
          ) -> Callable[[], None]:
    """One step of loop ``name``: a charged forward pass (``floor``), a forward and a backward pass
    (``passes``), or an optimizer step."""
    if name == "floor":
        def run() -> None:
            batch = stream.next()
            with torch.inference_mode(), meter.forward(1):
                _loss(model, batch)
    elif name == "passes":
        def run() -> None:
            batch = stream.next()
            with meter.forward(1):
                loss = _loss(model, batch)
            with meter.backward():
                loss.backward()
    else:
        def run() -> None:
            batch = stream.next()
            optimizer.step(lambda: _loss(model, batch))
    return run


def throughput(seconds: float = 2.0, rounds: int = 5, *, seed: int = 0, rows: int = 16384) -> ThroughputReport:
    """Measure the four loops; see the module docstring.

    Args:
        seconds: the wall time each loop gets per round, > 0.
        rounds: the rounds, an int >= 1 (the figures are medians over them).
        seed: the seed of the data, the models and the optimizers.
        rows: the rows of the random data set drawn from.

    Returns:
        The medians, as a :class:`ThroughputReport`.

    Raises:
        InputError: ``seconds`` is not > 0, or ``rounds`` is not an int >= 1.

    Example:
        >>> report = throughput(seconds=0.01, rounds=1, rows=512)
        >>> sorted(report.units_per_second), report.floor_ratio["floor"], report.rounds
        (['adam', 'eve', 'floor', 'passes'], 1.0, 1)
    """
    if not seconds > 0:
        raise InputError(f"Invalid seconds: {seconds!r} (expected > 0)")
    check_int("rounds", rounds, 1)
    data_generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 107, generator=data_generator)
    y = torch.randint(0, 2, (rows,), generator=data_generator)
    loops = {name: _setup(name, x, y, seed) for name in LOOPS}
    steps = {name: _step(name, *loops[name]) for name in LOOPS}
    for name in LOOPS:  # warm-up: first-call allocations, EvE's initial scoring
        _timed(min(0.3, seconds), steps[name])

    rates: dict[str, list[float]] = {name: [] for name in LOOPS}
    ratios: dict[str, list[float]] = {name: [] for name in LOOPS}
    walls = {name: 0.0 for name in LOOPS}
    pass_seconds = {name: 0.0 for name in LOOPS}
    eve_over_adam: list[float] = []
    eve_meter = loops["eve"][2]
    eve_iterations_before = loops["eve"][3].population.iteration
    eve_backward_before = eve_meter.backward_passes
    for _ in range(rounds):
        round_rates = {}
        for name in LOOPS:
            meter = loops[name][2]
            cost_before = meter.cost
            passes_before = meter.forward_seconds + meter.backward_seconds
            wall = _timed(seconds, steps[name])
            round_rates[name] = (meter.cost - cost_before) / wall
            walls[name] += wall
            pass_seconds[name] += meter.forward_seconds + meter.backward_seconds - passes_before
        for name in LOOPS:
            rates[name].append(round_rates[name])
            ratios[name].append(round_rates["floor"] / round_rates[name])
        eve_over_adam.append(round_rates["eve"] / round_rates["adam"])
    iterations = loops["eve"][3].population.iteration - eve_iterations_before
    fallbacks = (eve_meter.backward_passes - eve_backward_before) / 3  # n_adam = 3 backward passes per fallback
    return ThroughputReport(
        units_per_second={name: statistics.median(values) for name, values in rates.items()},
        floor_ratio={name: statistics.median(values) for name, values in ratios.items()},
        time_in_passes={name: pass_seconds[name] / walls[name] for name in LOOPS},
        eve_over_adam=statistics.median(eve_over_adam),
        eve_fallback_rate=fallbacks / max(iterations, 1),
        rounds=rounds,
        seconds_per_loop=seconds,
        threads=torch.get_num_threads(),
    )
