"""The closure contract shared by EvE and the metered baselines.

A closure returns the loss of the module's current weights on the step's minibatch and never calls
``backward``: the optimizer decides which passes it needs, and times and charges each one. A closure
written for ``torch.optim.LBFGS`` (``zero_grad(); loss.backward(); return loss``) breaks that contract;
the two ways it shows up (a ``backward`` inside a forward-only pass, a second ``backward`` of the same
graph) are reported with :data:`CLOSURE_CONTRACT` instead of PyTorch's autograd message.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from eve_search.optim.budget import CostMeter

__all__ = ["CLOSURE_CONTRACT", "ClosureContractError", "charged_backward", "charged_forward", "loss_value"]

CLOSURE_CONTRACT = (
    "the closure must only compute and return the loss on this step's batch: remove optimizer.zero_grad() and "
    "loss.backward() from it (the optimizer calls the closure under torch.inference_mode() to score weights, "
    "and with gradients enabled when it needs a gradient, then calls backward() on the returned loss itself)")


class ClosureContractError(RuntimeError):
    """A closure that calls ``backward`` itself (an LBFGS-style closure): one line stating the contract."""


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
    try:
        with mode, nullcontext() if meter is None else meter.forward(1):
            return closure()
    except RuntimeError as error:
        # Under inference mode nothing requires grad, so a backward() inside the closure fails with
        # autograd's "element 0 of tensors does not require grad": say what the closure must change.
        if not graph and "does not require grad" in str(error):
            raise ClosureContractError(f"closure called backward() during a forward-only evaluation: "
                                       f"{CLOSURE_CONTRACT}") from None
        raise


def charged_backward(loss: Any, meter: CostMeter | None) -> None:
    """Backpropagate the closure's loss as one backward pass charged to ``meter``."""
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        raise TypeError("closure returned a loss without a graph; a gradient step needs a tensor computed from "
                        "the parameters (do not detach it or call .item())")
    try:
        with nullcontext() if meter is None else meter.backward():
            loss.backward()
    except RuntimeError as error:
        # The closure already ran backward() on this graph (e.g. only when grad is enabled, as some
        # LBFGS closures do), which freed it.
        if "backward through the graph a second time" in str(error):
            raise ClosureContractError(f"closure already called backward() on the loss it returned: "
                                       f"{CLOSURE_CONTRACT}") from None
        raise
