"""Minibatches drawn by index from tensors already in memory, resumable to the exact batch."""

from __future__ import annotations

from typing import Any

import torch

from eve_search._checks import InputError

__all__ = ["BatchStream"]


class BatchStream:
    """Endless minibatches: each epoch is one random permutation cut into full batches.

    Each epoch draws one permutation of row indices; a batch gathers its rows from the shared
    tensors (``index_select``), so every trial's stream holds its indices, never its own shuffled
    copy of the training set (the rows are the ones a shuffled copy would slice, bit for bit). The last partial batch of an epoch is dropped, so every batch has
    ``batch_size`` rows. The stream's state is the generator state at the start of the current
    epoch and the position inside it: a loaded stream yields exactly the batches the saved one
    would have.

    Args:
        x: the training inputs, one row per example (shared, never copied).
        y: the targets, as many rows as ``x``.
        batch_size: rows per batch, an int from 1 to the number of rows.
        generator: the stream's own random generator (its state is saved with the stream).

    Example:
        >>> import torch
        >>> stream = BatchStream(torch.arange(10.0)[:, None], torch.arange(10), 4,
        ...                      generator=torch.Generator().manual_seed(0))
        >>> [len(stream.next()[1]) for _ in range(3)]
        [4, 4, 4]
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, *, generator: torch.Generator) -> None:
        if x.shape[0] != y.shape[0]:
            raise InputError(f"Invalid data: x has {x.shape[0]} rows but y has {y.shape[0]}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or not 1 <= batch_size <= x.shape[0]:
            raise InputError(f"Invalid batch_size: {batch_size!r} (expected an int in [1, {x.shape[0]}])")
        self.x, self.y, self.batch_size, self.generator = x, y, batch_size, generator
        self._batches_per_epoch = x.shape[0] // batch_size
        self._start_epoch()

    def _start_epoch(self) -> None:
        self._epoch_state = self.generator.get_state()
        self._order = torch.randperm(self.x.shape[0], generator=self.generator)
        self._position = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (inputs, targets) batch."""
        if self._position == self._batches_per_epoch:
            self._start_epoch()
        start = self._position * self.batch_size
        self._position += 1
        rows = self._order[start:start + self.batch_size]
        return self.x.index_select(0, rows), self.y.index_select(0, rows)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_generator_state": self._epoch_state, "position": self._position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["epoch_generator_state"])
        self._start_epoch()
        self._position = int(state["position"])
