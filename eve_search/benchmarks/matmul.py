"""``eve-search bench matmul``: which matrix library PyTorch's ``Linear`` uses on this CPU, and what
the other one would give.

For the single-precision ``Linear`` shapes the project trains (the Adult MLP's layers and the paper's
MNIST MLP, batch 256) and one large square product, it times a training step of one layer (forward,
then backward for the input and the weight gradients, through autograd) on three paths:

* ``default``: what every optimizer here trains with: PyTorch's own choice (on an x86 build with MKL,
  MKL's ``sgemm``);
* ``onednn``: the same step with ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``, the one
  public PyTorch switch that sends single-precision ``mm``/``addmm`` (forward and backward alike, so
  every optimizer alike) to oneDNN. It permits bfloat16 arithmetic inside oneDNN; the printed
  difference from ``default`` says whether this CPU used it (bfloat16 inputs change a 1024-wide
  product by about 1e-2, single-precision reordering by about 1e-6);
* ``onednn-forward``: oneDNN's single-precision linear kernel (``torch.ops.aten.mkldnn_linear`` on
  oneDNN tensors), forward only: it has no autograd backward for dense tensors, so it cannot train.

Each figure is the best of five timing blocks (GFLOP/s counts 2*m*k*n per product: one forward, two
backward). Nothing here changes how eve-search trains; it answers whether a faster path exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["SHAPES", "measure_shape"]

# (label, batch m, in features k, out features n)
SHAPES: tuple[tuple[str, int, int, int], ...] = (
    ("adult input 108->256", 256, 108, 256),
    ("adult hidden 256->128", 256, 256, 128),
    ("mnist input 784->1024", 256, 784, 1024),
    ("mnist hidden 1024->1024", 256, 1024, 1024),
    ("square 2048", 2048, 2048, 2048),
)


def _rate(step: Callable[[], Any], flops: float, seconds: float) -> float:
    """GFLOP/s of ``step``: the best of five blocks, each about ``seconds`` / 5 long."""
    step()
    step()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < seconds / 5 or calls == 0:
        step()
        calls += 1
    best = float("inf")
    for _ in range(5):
        block = time.perf_counter()
        for _ in range(calls):
            step()
        best = min(best, (time.perf_counter() - block) / calls)
    return flops / best / 1e9


def measure_shape(m: int, k: int, n: int, *, seconds: float = 0.5, seed: int = 0) -> dict[str, Any]:
    """One layer's training step on each path: GFLOP/s, and the largest difference from the default
    path's forward output and weight gradient (0.0 means bit for bit the same).

    Args:
        m: the batch size (rows of the layer's input).
        k: the layer's input features.
        n: the layer's output features.
        seconds: the timing time of each path (five blocks of about ``seconds`` / 5).
        seed: the seed of the random input, weights and upstream gradient.

    Returns:
        ``shape`` ([m, k, n]); ``gflops`` per path (``default``, ``onednn``, ``onednn_forward``);
        ``max_difference`` of each oneDNN output and gradient from the default path's.

    Example:
        >>> result = measure_shape(8, 4, 2, seconds=0.01)
        >>> result["shape"], sorted(result["gflops"])
        ([8, 4, 2], ['default', 'onednn', 'onednn_forward'])
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=generator).requires_grad_()  # a hidden layer's input: its gradient too
    weight = (torch.randn(n, k, generator=generator) / k**0.5).requires_grad_()
    bias = torch.zeros(n, requires_grad=True)
    upstream = torch.randn(m, n, generator=generator)
    step_flops, forward_flops = 6.0 * m * k * n, 2.0 * m * k * n

    def train_step() -> tuple[torch.Tensor, torch.Tensor]:
        x.grad = weight.grad = bias.grad = None
        out = F.linear(x, weight, bias)
        out.backward(upstream)
        return out.detach(), weight.grad

    matmul = torch.backends.mkldnn.matmul
    before = matmul.fp32_precision
    try:
        matmul.fp32_precision = "ieee"
        reference_out, reference_grad = (t.clone() for t in train_step())
        default = _rate(train_step, step_flops, seconds)
        matmul.fp32_precision = "bf16"
        onednn_out, onednn_grad = (t.clone() for t in train_step())
        onednn = _rate(train_step, step_flops, seconds)
    finally:
        matmul.fp32_precision = before
    dense = (x.detach().to_mkldnn(), weight.detach().to_mkldnn(), bias.detach().to_mkldnn())
    kernel_out = torch.ops.aten.mkldnn_linear(*dense).to_dense()
    kernel = _rate(lambda: torch.ops.aten.mkldnn_linear(*dense).to_dense(), forward_flops, seconds)
    return {
        "shape": [m, k, n],
        "gflops": {"default": default, "onednn": onednn, "onednn_forward": kernel},
        "max_difference": {"onednn_forward_output": float((onednn_out - reference_out).abs().max()),
                           "onednn_weight_gradient": float((onednn_grad - reference_grad).abs().max()),
                           "onednn_forward_kernel_output": float((kernel_out - reference_out).abs().max())},
    }


def _onednn_linear_trains() -> str:
    """Whether oneDNN's linear module (torch.utils.mkldnn) can be trained: the error, if not."""
    import warnings

    with warnings.catch_warnings():  # torch.utils.mkldnn is built on the deprecated torch.jit.script_method
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.utils import mkldnn

        layer = mkldnn.to_mkldnn(torch.nn.Linear(8, 4))
    try:
        layer(torch.randn(2, 8).to_mkldnn()).to_dense().sum().backward()
    except RuntimeError as error:
        return f"no: {str(error).splitlines()[0]}"
    return "yes"


