"""The train/validation/test tensors every data set is turned into (one type for every task)."""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, fields

import torch

from eve_search._checks import InputError

__all__ = ["Splits", "splits_checksum"]

_CHECKSUMS: dict[int, str] = {}  # id(splits) -> checksum, while that object lives


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
            raise InputError(f"Invalid split: {name!r} (expected 'train', 'val' or 'test')")
        return getattr(self, f"x_{name}"), getattr(self, f"y_{name}")


def splits_checksum(data: Splits) -> str:
    """The sha256 of every tensor of ``data`` (each one's name, dtype, shape and bytes, in field order):
    the data's identity, which a sweep stores so that ``--resume`` on other data is refused. Computed
    once per object.

    Args:
        data: the splits (a subclass's extra fields that are not tensors are left out).

    Returns:
        64 hexadecimal digits.

    Example:
        >>> a = Splits(*[torch.zeros(2, 1)] * 6)
        >>> b = Splits(*[torch.zeros(2, 1)] * 5, torch.ones(2, 1))
        >>> splits_checksum(a) == splits_checksum(Splits(*[torch.zeros(2, 1)] * 6))
        True
        >>> splits_checksum(a) == splits_checksum(b)
        False
    """
    key = id(data)
    if key in _CHECKSUMS:
        return _CHECKSUMS[key]
    digest = hashlib.sha256()
    for field in fields(data):
        tensor = getattr(data, field.name)
        if not isinstance(tensor, torch.Tensor):
            continue
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"\0{field.name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    _CHECKSUMS[key] = checksum = digest.hexdigest()
    weakref.finalize(data, _CHECKSUMS.pop, key, None)
    return checksum
