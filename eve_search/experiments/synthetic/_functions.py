"""The seven scalable test functions of the paper's synthetic benchmarks (Section "Synthetic Scalable
Benchmarks", Appendix "Synthetic Benchmarks: Parameters and Detailed Analysis").

Every function takes a batch of rows, an (r, n) tensor, and returns r values, so that one call
scores several points (a call of r points costs r units, Appendix "Evaluation-Cost Accounting").
The paper names the functions and their original papers but not the boxes they are searched in; the
boxes below are the customary ones listed by Surjanovic & Bingham's Virtual Library of Simulation
Experiments (Simon Fraser University, https://www.sfu.ca/~ssurjano/optimization.html) and, for
Zakharov, by Jamil & Yang (2013), the survey the paper cites for it. Rosenbrock has two customary
boxes, [-5, 10] and De Jong's (1975) [-2.048, 2.048]; we use the latter because it reproduces the
paper's Adam column (median 0.019 / 3.11 / 94.6 at n = 2 / 10 / 100 against the paper's 0.0082 / 5.00
/ 93.9; on [-5, 10]: 2.96 / 178 / 2,290; ``searches/synthetic_adam_column.py``):

============  =====================  ============================  ================================
function      box (every x_i)        minimum                       definition from
============  =====================  ============================  ================================
ackley        [-32.768, 32.768]      0 at x = 0                    Ackley (1987); a=20, b=0.2, c=2pi
griewank      [-600, 600]            0 at x = 0                    Griewank (1981)
rastrigin     [-5.12, 5.12]          0 at x = 0                    Rastrigin (1974)
rosenbrock    [-2.048, 2.048]        0 at x = 1                    Rosenbrock (1960); box De Jong
schwefel      [-500, 500]            ~0 at x = 420.9687            Schwefel (1981)
sphere        [0, 1]                 0 at x = 0.5                  De Jong (1975), recentred
zakharov      [-5, 10]               0 at x = 0                    Jamil & Yang (2013)
============  =====================  ============================  ================================

Sphere is the paper's recentred variant, sum (x_i - 0.5)^2 on [0, 1]^n, so its optimum is interior
to the box (paper, Appendix "Synthetic Benchmarks"). Schwefel's constant 418.9829 leaves about
1.3e-5 per coordinate at its minimiser.

:func:`objective` builds a function for one dimension, with its constant vectors (Griewank's
1/sqrt(i), Zakharov's 0.5 i) made once, so that an evaluation allocates only the temporaries of its
own arithmetic.

Example:
    >>> import torch
    >>> sphere = objective("sphere", 3)
    >>> sphere(torch.tensor([[0.5, 0.5, 0.5], [0.0, 0.5, 1.0]]))
    tensor([0.0000, 0.5000])
    >>> FUNCTIONS["rastrigin"].lower, FUNCTIONS["rastrigin"].upper
    (-5.12, 5.12)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from eve_search._checks import InputError, check_int

__all__ = ["FUNCTIONS", "TestFunction", "function_names", "objective"]

Objective = Callable[[torch.Tensor], torch.Tensor]

_TWO_PI = 2.0 * math.pi


def _ackley(n: int, dtype: torch.dtype, device: torch.device | None) -> Objective:
    def f(x: torch.Tensor) -> torch.Tensor:
        root_mean_square = x.square().mean(dim=1).sqrt()
        mean_cosine = torch.cos(x * _TWO_PI).mean(dim=1)
        return 20.0 + math.e - 20.0 * torch.exp(-0.2 * root_mean_square) - torch.exp(mean_cosine)
    return f


def _griewank(n: int, dtype: torch.dtype, device: torch.device | None) -> Objective:
    inverse_root_index = torch.arange(1, n + 1, dtype=dtype, device=device).rsqrt()

    def f(x: torch.Tensor) -> torch.Tensor:
        return 1.0 + x.square().sum(dim=1) / 4000.0 - torch.cos(x * inverse_root_index).prod(dim=1)
    return f


def _rastrigin(n: int, dtype: torch.dtype, device: torch.device | None) -> Objective:
    def f(x: torch.Tensor) -> torch.Tensor:
        return 10.0 * n + (x.square() - 10.0 * torch.cos(x * _TWO_PI)).sum(dim=1)
    return f


def _rosenbrock(n: int, dtype: torch.dtype, device: torch.device | None) -> Objective:
    def f(x: torch.Tensor) -> torch.Tensor:
        head, tail = x[:, :-1], x[:, 1:]
        return (100.0 * (tail - head.square()).square() + (head - 1.0).square()).sum(dim=1)
    return f


def _schwefel(n: int, dtype: torch.dtype, device: torch.device | None) -> Objective:
    def f(x: torch.Tensor) -> torch.Tensor:
        return 418.9829 * n - (x * torch.sin(x.abs().sqrt())).sum(dim=1)
    return f


def _sphere(n: int, dtype: torch.dtype, device: torch.device | None) -> Objective:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x - 0.5).square().sum(dim=1)
    return f


def _zakharov(n: int, dtype: torch.dtype, device: torch.device | None) -> Objective:
    half_index = torch.arange(1, n + 1, dtype=dtype, device=device) * 0.5

    def f(x: torch.Tensor) -> torch.Tensor:
        weighted = x @ half_index  # sum_i 0.5 i x_i, one matrix-vector product
        return x.square().sum(dim=1) + weighted.square() + weighted.square().square()
    return f


@dataclass(frozen=True)
class TestFunction:
    """One benchmark: its box, its known minimiser (the same value in every coordinate) and minimum,
    where its definition and box come from, and a builder of the batched objective for a dimension.

    Attributes:
        name: the function's name (a key of ``FUNCTIONS``).
        lower, upper: the box searched, the same in every coordinate.
        argmin: the minimiser's value in every coordinate.
        minimum: the function's minimum.
        min_dim: the smallest dimension it is defined in.
        source: where its definition and box come from.
        build: ``build(n, dtype, device)`` makes the batched objective (use :func:`objective`).

    Example:
        >>> import torch
        >>> rosenbrock = FUNCTIONS["rosenbrock"]
        >>> rosenbrock.min_dim, rosenbrock.argmin
        (2, 1.0)
        >>> rosenbrock.build(2, torch.float64, None)(torch.ones(1, 2, dtype=torch.float64))
        tensor([0.], dtype=torch.float64)
    """

    __test__ = False  # not a pytest test class

    name: str
    lower: float
    upper: float
    argmin: float
    minimum: float
    min_dim: int
    source: str
    build: Callable[[int, torch.dtype, torch.device | None], Objective]


_SFU = "Surjanovic & Bingham, Virtual Library of Simulation Experiments (SFU)"

FUNCTIONS: dict[str, TestFunction] = {
    f.name: f for f in (
        TestFunction("ackley", -32.768, 32.768, 0.0, 0.0, 1, f"Ackley (1987); box: {_SFU}", _ackley),
        TestFunction("griewank", -600.0, 600.0, 0.0, 0.0, 1, f"Griewank (1981); box: {_SFU}", _griewank),
        TestFunction("rastrigin", -5.12, 5.12, 0.0, 0.0, 1, f"Rastrigin (1974); box: {_SFU}", _rastrigin),
        TestFunction("rosenbrock", -2.048, 2.048, 1.0, 0.0, 2,
                     f"Rosenbrock (1960); box: De Jong (1975), listed by {_SFU}", _rosenbrock),
        TestFunction("schwefel", -500.0, 500.0, 420.9687, 0.0, 1, f"Schwefel (1981); box: {_SFU}", _schwefel),
        TestFunction("sphere", 0.0, 1.0, 0.5, 0.0, 1,
                     "De Jong (1975), recentred to [0, 1]^n as in the paper's Appendix", _sphere),
        TestFunction("zakharov", -5.0, 10.0, 0.0, 0.0, 1, "Jamil & Yang (2013), with its box",
                     _zakharov),
    )
}


def function_names() -> list[str]:
    """The benchmark names, in the paper's order.

    Returns:
        The keys of ``FUNCTIONS``.

    Example:
        >>> function_names()
        ['ackley', 'griewank', 'rastrigin', 'rosenbrock', 'schwefel', 'sphere', 'zakharov']
    """
    return list(FUNCTIONS)


def objective(name: str, n: int, *, dtype: torch.dtype = torch.float32,
              device: torch.device | str | None = None) -> Objective:
    """The batched objective ``name`` in dimension ``n``: (r, n) rows -> r values.

    Args:
        name: the function (one of :func:`function_names`).
        n: the dimension, at least the function's ``min_dim``.
        dtype: the dtype of its constant vectors (and of the rows it expects).
        device: where those constants live.

    Returns:
        The objective, a function of an (r, n) tensor returning r values.

    Raises:
        InputError: an unknown ``name``, or ``n`` below the function's smallest dimension.

    Example:
        >>> import torch
        >>> objective("rastrigin", 2)(torch.zeros(3, 2))
        tensor([0., 0., 0.])
    """
    if name not in FUNCTIONS:
        raise InputError(f"Invalid function: {name!r} (expected one of {', '.join(FUNCTIONS)})")
    spec = FUNCTIONS[name]
    check_int("n", n, spec.min_dim, detail=f" for {name}")
    return spec.build(n, dtype, None if device is None else torch.device(device))
