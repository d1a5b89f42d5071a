"""The closure contract shared by EvE and the metered baselines.

A closure returns the loss of the module's current weights on the step's minibatch and never calls
``backward``: the optimizer decides which passes it needs, and times and charges each one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from eve_search.budget import CostMeter

__all__ = ["charged_backward", "charged_forward", "loss_value"]


def loss_value(loss: Any) -> float:
    """The closure's loss as a float, or a TypeError saying what was returned instead."""
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1:
            raise TypeError(f"closure returned a tensor of shape {tuple(loss.shape)} (expected a scalar loss)")
        return float(loss.detach())
    if isinstance(loss, (int, float)) and not isinstance(loss, bool):
        return float(loss)
    raise TypeError(f"closure returned {type(loss).__name__} (expected a scalar loss tensor or a float)")


def charged_forward(closure: Callable[[], Any], meter: CostMeter | None, *, graph: bool) -> Any:
    """Call the closure as one forward pass charged to ``meter``: recording the autograd graph for
    a gradient, or under ``torch.inference_mode`` when only the value is needed."""
    mode = torch.enable_grad() if graph else torch.inference_mode()
    with mode, nullcontext() if meter is None else meter.forward(1):
        return closure()


def charged_backward(loss: Any, meter: CostMeter | None) -> None:
    """Backpropagate the closure's loss as one backward pass charged to ``meter``."""
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        raise TypeError("closure returned a loss without a graph; a gradient step needs a tensor computed from "
                        "the parameters (do not detach it or call .item())")
    with nullcontext() if meter is None else meter.backward():
        loss.backward()
