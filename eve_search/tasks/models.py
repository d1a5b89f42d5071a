"""The networks a search trains: plain MLPs with Kaiming-uniform weights drawn from a generator."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

from eve_search._checks import InputError

__all__ = ["SeededDropout", "architecture_key", "hidden_layers", "mlp"]

# A dropout layer's mask seed is split in two 32-bit halves: the layer's seed, then the count of its calls.
_CALLS = 1 << 32


class SeededDropout(nn.Module):
    """Dropout whose masks depend only on its own seed and on how often it has run in training mode.

    ``torch.nn.Dropout`` draws its masks from the global random generator, so the masks of a trial
    would depend on every other draw in the process (another trial on a ``--jobs`` worker, a data
    loader), and a trial resumed from a checkpoint would draw other masks than an uninterrupted
    one. This layer draws the mask of its n-th training call from a generator seeded with
    ``(seed, n)``; ``seed`` and the count ``calls`` are buffers, so they travel in the model's
    ``state_dict`` (and so in every checkpoint). In evaluation mode it is the identity.

    Args:
        p: the probability that a unit is zeroed, in [0, 1); kept units are scaled by 1 / (1 - p).
        seed: the layer's seed, in [0, 2**31).

    Example:
        >>> import torch
        >>> layer = SeededDropout(0.5, seed=7)
        >>> x = torch.ones(2, 4)
        >>> first = layer(x)
        >>> sorted(set(first.flatten().tolist())) == [0.0, 2.0], int(layer.calls)
        (True, 1)
        >>> copy = SeededDropout(0.5, seed=0)
        >>> _ = copy.load_state_dict(layer.state_dict())
        >>> torch.equal(copy(x), layer(x))  # the same seed and count: the same next mask
        True
        >>> torch.equal(layer.eval()(x), x)
        True
    """

    def __init__(self, p: float, seed: int) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise InputError(f"Invalid dropout: {p!r} (expected a probability in [0, 1))")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 31:
            raise InputError(f"Invalid seed: {seed!r} (expected an int in [0, 2**31))")
        self.p = float(p)
        self.register_buffer("seed", torch.tensor(seed, dtype=torch.int64))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        generator = torch.Generator().manual_seed(int(self.seed) * _CALLS + int(self.calls) % _CALLS)
        self.calls.add_(1)
        keep = torch.rand(x.shape, generator=generator, dtype=x.dtype) >= self.p
        return x * keep / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def mlp(in_features: int, hidden: Sequence[int], out_features: int, *, generator: torch.Generator,
        dropout: float = 0.0) -> nn.Sequential:
    """A ReLU MLP whose weights are U(-b, b), b = sqrt(6 / fan_in), and whose biases start at zero.

    b is the same bound EvE uses by default for its search box (paper, Appendix "MLP/MNIST",
    "Initialization and bounds"), so every optimizer starts from weights inside that box; drawing
    from ``generator`` keeps the global RNG untouched and makes one seed give one network.

    Args:
        in_features: inputs per example.
        hidden: the width of each hidden layer (empty: a linear model).
        out_features: outputs (classes).
        generator: the random generator the weights are drawn from.
        dropout: above 0, a :class:`SeededDropout` of this probability follows each hidden ReLU; the
            layers' seeds are drawn from ``generator`` after every weight (so the weights are those of
            the same network without dropout).

    Returns:
        ``Linear, ReLU, ..., Linear`` as an ``nn.Sequential`` (``Linear, ReLU, SeededDropout, ...`` with
        dropout).

    Example:
        >>> import torch
        >>> net = mlp(107, [256, 256], 2, generator=torch.Generator().manual_seed(0))
        >>> sum(p.numel() for p in net.parameters())
        93954
    """
    widths = [in_features, *hidden, out_features]
    if any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in widths):
        raise InputError(f"Invalid layer widths: {widths} (expected positive ints)")
    layers: list[nn.Module] = []
    hidden_ends = []
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
        layers.append(_linear(fan_in, fan_out, generator))
        if index < len(widths) - 2:
            layers.append(nn.ReLU())
            hidden_ends.append(len(layers))
    if dropout:
        seeds = [int(torch.randint(1 << 31, (), generator=generator)) for _ in hidden_ends]
        for end, seed in zip(reversed(hidden_ends), reversed(seeds)):
            layers.insert(end, SeededDropout(dropout, seed))
    return nn.Sequential(*layers)


def _linear(fan_in: int, fan_out: int, generator: torch.Generator) -> nn.Linear:
    """An ``nn.Linear(fan_in, fan_out)`` holding weights U(-b, b) drawn from ``generator`` and a zero bias.

    The layer is assembled from its tensors: ``nn.Linear``'s constructor would first draw its own
    initialization from the global RNG, and ``nn.utils.skip_init``, which avoids that by building the
    layer on the meta device and then allocating it, made a ``107-256-256-2`` network take 0.88-0.91 ms
    to build, against 0.33-0.37 ms this way (2026-11-26, 7 x 200 builds, load below 0.5). The result is
    the same module with the same attributes, holding the weights drawn after ``skip_init`` (the draws
    come in the same order: each layer's weight, layer after layer).
    """
    bound = math.sqrt(6.0 / fan_in)
    weight = torch.empty(fan_out, fan_in).uniform_(-bound, bound, generator=generator)
    layer = nn.Linear.__new__(nn.Linear)
    nn.Module.__init__(layer)
    layer.in_features, layer.out_features = fan_in, fan_out
    layer.weight = nn.Parameter(weight)
    layer.bias = nn.Parameter(torch.zeros(fan_out))
    return layer


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


def architecture_key(config: dict) -> str:
    """``"{width}x{depth}"``: configurations with the same key train the same-shaped MLP.

    Args:
        config: a configuration with ``width`` and ``depth``.

    Returns:
        The key (the task's ``cost_key``: one calibrated backward/forward ratio per shape).

    Example:
        >>> architecture_key({"lr": 1e-3, "width": 64, "depth": 2})
        '64x2'
    """
    return f"{int(config['width'])}x{int(config['depth'])}"
