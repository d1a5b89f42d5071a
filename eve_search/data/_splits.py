"""The train/validation/test tensors every data set is turned into (one type for every task)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Splits"]


@dataclass(frozen=True)
class Splits:
    """Train, validation and test tensors of a task (inputs ``x_*``, targets ``y_*``), shared
    read-only by every trial: minibatches are drawn from them by index.

    Attributes:
        x_train: training inputs, one row per example.
        y_train: training targets, one per row of ``x_train``.
        x_val: validation inputs (what rungs and rankings score).
        y_val: validation targets.
        x_test: test inputs (reported, never used to choose).
        y_test: test targets.

    Example:
        >>> import torch
        >>> data = Splits(torch.zeros(4, 2), torch.zeros(4), torch.ones(2, 2), torch.ones(2),
        ...               torch.ones(1, 2), torch.ones(1))
        >>> [tuple(t.shape) for t in data.split("val")]
        [(2, 2), (2,)]
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    def split(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of ``"train"``, ``"val"`` or ``"test"``."""
        if name not in ("train", "val", "test"):
            raise ValueError(f"Invalid split: {name!r} (expected 'train', 'val' or 'test')")
        return getattr(self, f"x_{name}"), getattr(self, f"y_{name}")
