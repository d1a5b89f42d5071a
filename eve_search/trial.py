"""One configuration's training run: the unit every search driver shares.

A :class:`Trial` owns its model, its optimizer (EvE or a baseline from the registry), its
:class:`~eve_search.budget.CostMeter`, its minibatch stream and every random generator, all derived
from (training seed, configuration index). ``train_to(budget)`` raises the budget and trains until
the meter reaches it; calling it again with a larger budget continues, never restarts.
``state_dict`` captures everything, so save, load and continue equals never stopping, bit for bit.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from eve_search.batches import BatchStream
from eve_search.budget import CostMeter
from eve_search.models import mlp
from eve_search.optim import make_optimizer
from eve_search.spaces import Config, hidden_layers

__all__ = ["Evaluation", "Splits", "Trial", "trial_seeds"]

BATCH_SIZE = 256


class Splits(Protocol):
    """Train/validation/test tensors (``eve_search.data.AdultSplits`` is one)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass(frozen=True)
class Evaluation:
    accuracy: float
    loss: float


def trial_seeds(seed: int, index: int) -> tuple[int, int, int]:
    """(model initialization, batch order, optimizer) seeds of configuration ``index`` under training seed ``seed``.

    They depend on the training seed and the configuration, not on the optimizer, so every method
    trains a configuration from the same initial weights on the same batches (pairing by seed).
    """
    states = np.random.SeedSequence([int(seed), int(index)]).generate_state(3, dtype=np.uint64)
    return tuple(int(s) for s in states)  # type: ignore[return-value]


class Trial:
    """Train one configuration with one optimizer under an evaluation-cost budget.

    Args:
        config: a configuration of a search space (``lr``, ``weight_decay``, ``width``, ``depth``).
        data: the splits; the model has as many inputs as ``data.x_train`` has columns.
        optimizer: a registry name (``eve``, ``adam``, ...).
        seed: the training seed; ``index``: the configuration's index in its sweep.
        cost_mode, backward_ratio: see :class:`~eve_search.budget.CostMeter`.

    Example:
        >>> from eve_search.data import load_adult
        >>> from eve_search.trial import Trial
        >>> config = {"lr": 3e-3, "weight_decay": 5e-4, "width": 64, "depth": 1}
        >>> trial = Trial(config, load_adult(), "eve", seed=0, index=0, cost_mode="calibrated",
        ...               backward_ratio=2.0)
        >>> trial.train_to(100)
        >>> trial.charged_units >= 100, 0.5 < trial.evaluate().accuracy <= 1.0
        (True, True)
    """

    def __init__(self, config: Config, data: Splits, optimizer: str, *, seed: int, index: int,
                 cost_mode: str = "calibrated", backward_ratio: float | None = None,
                 batch_size: int = BATCH_SIZE) -> None:
        self.config = dict(config)
        self.data = data
        self.optimizer_name = optimizer
        self.seed = seed
        self.index = index
        init_seed, batch_seed, optimizer_seed = trial_seeds(seed, index)
        classes = int(max(data.y_train.max(), data.y_val.max())) + 1
        self.model = mlp(data.x_train.shape[1], hidden_layers(config), classes,
                         generator=torch.Generator().manual_seed(init_seed))
        self.meter = CostMeter(mode=cost_mode, backward_ratio=backward_ratio)
        self.optimizer = make_optimizer(optimizer, self.model.parameters(), lr=float(config["lr"]),
                                        weight_decay=float(config["weight_decay"]), meter=self.meter,
                                        seed=optimizer_seed)
        self.stream = BatchStream(data.x_train, data.y_train, batch_size,
                                  generator=torch.Generator().manual_seed(batch_seed))
        self.budget = 0.0
        self.wall_seconds = 0.0

    @property
    def charged_units(self) -> float:
        return self.meter.cost

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.model(x), y)

    def train_to(self, budget: float) -> None:
        """Raise the budget to ``budget`` units and train until the meter reaches it."""
        if not budget >= self.budget:
            raise ValueError(f"Invalid budget: {budget} (a trial resumes, so it must be >= its current "
                             f"budget {self.budget})")
        self.meter.set_budget(budget)
        self.budget = float(budget)
        start = time.perf_counter()
        while not self.meter.exhausted:
            x, y = self.stream.next()
            self.optimizer.step(lambda: self._loss(x, y))
        self.wall_seconds += time.perf_counter() - start

    @torch.inference_mode()
    def evaluate(self, split: str = "val") -> Evaluation:
        """Accuracy and mean cross-entropy on ``split`` (EvE: its member with the lowest recorded value,
        which the module holds after every step)."""
        if split not in ("val", "test"):
            raise ValueError(f"Invalid split: {split!r} (expected 'val' or 'test')")
        x, y = (self.data.x_val, self.data.y_val) if split == "val" else (self.data.x_test, self.data.y_test)
        logits = self.model(x)
        loss = torch.nn.functional.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(dim=1) == y).double().mean().item()
        return Evaluation(accuracy=accuracy, loss=loss)

    def calibrate(self, units: float = 200.0, chunks: int = 5) -> float:
        """The backward/forward ratio this trial's training loop is charged on average under the
        measured rule, from a throwaway copy trained for ``units`` (this trial is not touched).

        Measuring the real loop, not an isolated pass, times forwards exactly as this optimizer
        performs them (EvE mostly scores without a graph; a baseline records one) and in the same
        company (cache and threads after an optimizer update), so the frozen ratio is the one the
        paper's rule would have charged. The run is cut into ``chunks`` equal parts and the median
        of their ratios is kept: one scheduler hiccup during a few passes of a small network would
        otherwise move the ratio of the whole run by a third or more.
        """
        probe = Trial(self.config, self.data, self.optimizer_name, seed=self.seed, index=self.index,
                      cost_mode="measured", batch_size=self.stream.batch_size)
        meter = probe.meter
        ratios = []
        for k in range(1, chunks + 1):
            before = meter.pass_totals()
            probe.train_to(units * k / chunks)
            if meter.backward_passes > before.backward_passes and meter.forward_points > before.forward_points:
                ratios.append(meter.measured_ratio(since=before))
        return statistics.median(ratios) if ratios else meter.measured_ratio()

    def state_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "optimizer_name": self.optimizer_name,
            "seed": self.seed,
            "index": self.index,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "meter": self.meter.state_dict(),
            "stream": self.stream.state_dict(),
            "budget": self.budget,
            "wall_seconds": self.wall_seconds,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mismatch = [key for key in ("config", "optimizer_name", "seed", "index") if state[key] != getattr(self, key)]
        if mismatch:
            raise ValueError(f"checkpoint belongs to another trial: {', '.join(mismatch)} differ")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.meter.load_state_dict(state["meter"])
        self.stream.load_state_dict(state["stream"])
        self.budget = float(state["budget"])
        self.wall_seconds = float(state["wall_seconds"])
