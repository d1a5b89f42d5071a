"""The networks a search trains: plain MLPs with Kaiming-uniform weights drawn from a generator."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["hidden_layers", "mlp"]


def mlp(in_features: int, hidden: Sequence[int], out_features: int, *, generator: torch.Generator) -> nn.Sequential:
    """A ReLU MLP whose weights are U(-b, b), b = sqrt(6 / fan_in), and whose biases start at zero.

    b is the same bound EvE uses by default for its search box (paper, Appendix "MLP/MNIST",
    "Initialization and bounds"), so every optimizer starts from weights inside that box; drawing
    from ``generator`` keeps the global RNG untouched and makes one seed give one network.

    Args:
        in_features: inputs per example.
        hidden: the width of each hidden layer (empty: a linear model).
        out_features: outputs (classes).
        generator: the random generator the weights are drawn from.

    Returns:
        ``Linear, ReLU, ..., Linear`` as an ``nn.Sequential``.

    Example:
        >>> import torch
        >>> net = mlp(107, [256, 256], 2, generator=torch.Generator().manual_seed(0))
        >>> sum(p.numel() for p in net.parameters())
        93954
    """
    widths = [in_features, *hidden, out_features]
    if any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in widths):
        raise ValueError(f"Invalid layer widths: {widths} (expected positive ints)")
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
        # Built without PyTorch's own initialization (drawn from the global RNG, then overwritten here):
        # cheaper, and the global RNG is left untouched.
        linear = nn.utils.skip_init(nn.Linear, fan_in, fan_out)
        bound = math.sqrt(6.0 / fan_in)
        with torch.no_grad():
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.zero_()
        layers.append(linear)
        if index < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def hidden_layers(config: dict) -> list[int]:
    """The hidden widths of an MLP configuration: ``depth`` layers of ``width`` units.

    Args:
        config: a configuration with ``width`` and ``depth`` (other keys are ignored).

    Returns:
        ``depth`` copies of ``width``, for :func:`mlp`'s ``hidden``.

    Example:
        >>> hidden_layers({"width": 256, "depth": 2, "lr": 1e-3})
        [256, 256]
    """
    return [int(config["width"])] * int(config["depth"])
