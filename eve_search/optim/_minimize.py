"""EvE as a flat-vector minimizer of a batched black-box function over a box.

``f`` maps a (r, n) tensor of points to r values; one call that scores r points costs r units
(paper, Appendix "Evaluation-Cost Accounting"). The Adam fallback takes gradients by autograd
through ``f`` unless a ``gradient`` function is given, and each gradient is charged as one forward
plus one backward pass (a supplied ``gradient`` is charged as one backward pass of its own time).

Passes are timed the way Algorithm 1 performs them: the initial population is one call of four
points; after that the child, the mutant and the refined point are each a forward call of one point;
a gradient is a forward call of one point that records the graph, then a backward pass. A forward's
timed span covers entering the grad mode and the call of ``f``; a backward's covers the backward pass
alone (:func:`charged_gradient`, which the synthetic suite's Adam baseline also uses).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch

from eve_search._checks import InputError, check_int, options_or_keywords
from eve_search.optim.budget import CostMeter
from eve_search.optim._init import INITIALIZATIONS, initial_population, make_generators
from eve_search.optim._population import (
    EvEHyperparameters,
    Population,
    check_hyperparameters,
)

__all__ = ["MinimizeOptions", "MinimizeResult", "charged_gradient", "charged_values", "minimize"]

Objective = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class MinimizeOptions:
    """The algorithm settings of :func:`minimize`, checked once; defaults are the paper's synthetic setting.

    :func:`minimize` takes this object or its fields as keywords, not both.

    Args:
        lr: the Adam fallback's learning rate (>= 0).
        n_adam: Adam steps per iteration when the child loses (0 turns the fallback off).
        weight_decay: the Adam fallback's L2 weight decay (>= 0).
        polynomial_mutation: whether the child is also tried with polynomial mutation.
        eta: the polynomial mutation's distribution index (>= 0).
        F: the differential-evolution weight, in (0, 2].
        gamma: the jitter of ``F``, in [0, 2).
        sigma: the spread of a proximity initialization (> 0).
        betas, eps: the Adam fallback's moment coefficients and denominator term.
        population_size: slots in the population (>= 4).
        init: the initialization, ``"lhs"`` (Latin hypercube) or ``"proximity"`` (around ``x0``).

    Raises:
        InputError: one line naming the argument, its value and what was expected.

    Example:
        >>> import torch
        >>> from eve_search.optim import MinimizeOptions, minimize
        >>> options = MinimizeOptions(n_adam=0, polynomial_mutation=False)
        >>> sphere = lambda x: ((x - 0.5) ** 2).sum(dim=1)
        >>> result = minimize(sphere, 0.0, 1.0, dim=4, budget=200, options=options)
        >>> result.meter.backward_passes, result.cost >= 200
        (0, True)
        >>> MinimizeOptions(F=0.0)
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid F: 0.0 (expected a DE weight in (0, 2])
    """

    lr: float = 0.05
    n_adam: int = 7
    weight_decay: float = 1e-4
    polynomial_mutation: bool = True
    eta: float = 20.0
    F: float = 0.5
    gamma: float = 1e-4
    sigma: float = 0.1
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    population_size: int = 4
    init: str = "lhs"

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))
        object.__setattr__(self, "polynomial_mutation", bool(self.polynomial_mutation))
        check_hyperparameters(self.hyperparameters())
        if self.init not in INITIALIZATIONS:
            raise InputError(f"Invalid init: {self.init!r} (expected one of {', '.join(INITIALIZATIONS)})")

    def hyperparameters(self) -> EvEHyperparameters:
        """The numbers Algorithm 1 runs with (every field but ``init``)."""
        return EvEHyperparameters(**{f.name: getattr(self, f.name) for f in fields(EvEHyperparameters)})


@dataclass
class MinimizeResult:
    """Outcome of :func:`minimize`.

    Attributes:
        x: the best point found, in real coordinates.
        fun: its value.
        cost: evaluation units charged.
        iterations: EvE iterations run (the last one may have stopped early at the budget).
        best_so_far: the best recorded value after each iteration.
        meter: the cost meter (forward/backward counts and seconds, mode, ratio).

    Example:
        >>> sphere = lambda x: (x ** 2).sum(dim=1)
        >>> result = minimize(sphere, -1.0, 1.0, dim=3, budget=100, seed=0)
        >>> result.fun == min(result.best_so_far), result.cost >= 100, tuple(result.x.shape)
        (True, True, (3,))
        >>> all(a >= b for a, b in zip(result.best_so_far, result.best_so_far[1:]))  # never worse
        True
    """

    x: torch.Tensor
    fun: float
    cost: float
    iterations: int
    best_so_far: list[float] = field(repr=False)
    meter: CostMeter = field(repr=False)


def charged_values(f: Objective, points: torch.Tensor, meter: CostMeter) -> list[float]:
    """Score the (r, n) ``points`` with ``f`` in one forward call charged ``r`` units to ``meter``.

    The timed span is the call of ``f`` under ``torch.no_grad`` (entering the mode included).
    """
    count = points.shape[0]
    with meter.forward(count), torch.no_grad():
        values = f(points)
    if not isinstance(values, torch.Tensor) or values.shape != (count,):
        shape = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        raise TypeError(f"f returned {shape} for {count} points (expected a tensor of shape ({count},): "
                        "one value per row)")
    return values.tolist()


def charged_gradient(f: Objective, point: torch.Tensor, meter: CostMeter,
                     grad_output: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Value and gradient of ``f`` at the leaf ``point`` (n,), charged as one forward of one point
    (the call of ``f`` on the 1-row batch, recording the graph) and one backward pass (the
    backward alone: ``grad_output``, a preallocated ``ones(1)``, seeds it, so no reduction is timed).

    Example:
        >>> meter = CostMeter()
        >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> value, grad = charged_gradient(lambda r: (r ** 2).sum(dim=1), x, meter, torch.ones(1))
        >>> value, grad.tolist(), meter.forward_points, meter.backward_passes
        (5.0, [2.0, 4.0], 1, 1)
    """
    with meter.forward(1), torch.enable_grad():
        value = f(point.unsqueeze(0))
    if not isinstance(value, torch.Tensor) or value.shape != (1,) or not value.requires_grad:
        raise TypeError("f must be differentiable by autograd for the Adam fallback; pass gradient= "
                        "or n_adam=0")
    with meter.backward():
        (grad,) = torch.autograd.grad(value, point, grad_outputs=grad_output)
    return float(value.detach()), grad


class _FunctionEvaluator:
    __slots__ = ("_f", "_grad_output", "_gradient", "_meter", "_point", "_population", "_rows")

    def __init__(self, f: Objective, gradient: Objective | None, meter: CostMeter, population: Population,
                 rows: torch.Tensor) -> None:
        self._f, self._gradient, self._meter, self._population, self._rows = f, gradient, meter, population, rows
        # The fallback's leaf point and the backward's seed, allocated once for the whole run.
        self._point = torch.empty_like(population.work).requires_grad_(True)
        self._grad_output = torch.ones(1, dtype=population.work.dtype, device=population.work.device)

    def exhausted(self) -> bool:
        return self._meter.exhausted

    def score(self, rows: torch.Tensor) -> list[float]:
        return charged_values(self._f, self._population.to_real(rows, out=self._rows[: rows.shape[0]]), self._meter)

    def score_work(self) -> float:
        return charged_values(self._f, self._population.work.unsqueeze(0), self._meter)[0]

    def gradient(self, x: torch.Tensor) -> tuple[float | None, torch.Tensor]:
        if self._gradient is not None:
            with self._meter.backward(), torch.no_grad():
                grad = self._gradient(x)
            return None, grad.detach().clone()
        with torch.no_grad():
            self._point.copy_(x)
        return charged_gradient(self._f, self._point, self._meter, self._grad_output)


def _box(lower: float | torch.Tensor, upper: float | torch.Tensor,
         dim: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Both bounds as vectors of one length n, validated lower < upper everywhere."""
    if dim is not None:
        check_int("dim", dim, 1)
    low, high = (torch.as_tensor(b) if isinstance(b, torch.Tensor) else torch.as_tensor(b, dtype=torch.float32)
                 for b in (lower, upper))
    lengths = {t.numel() for t in (low, high) if t.dim() > 0}
    if dim is None:
        if len(lengths) != 1:
            raise InputError(f"Invalid bounds: lower {tuple(low.shape)} and upper {tuple(high.shape)} do not give "
                             "one dimension (pass vectors of equal length, or scalars with dim=)")
        dim = lengths.pop()
    vectors = []
    for name, t in (("lower", low), ("upper", high)):
        if t.dim() > 1 or (t.dim() == 1 and t.numel() != dim):
            raise InputError(f"Invalid {name}: shape {tuple(t.shape)} (expected a scalar or a vector of length {dim})")
        vectors.append(t.to(dtype=low.dtype if low.is_floating_point() else torch.float32).expand(dim).clone())
    low, high = vectors
    high = high.to(low.device)
    bad = ~(low < high)
    if bool(bad.any()):
        k = int(bad.nonzero()[0])
        raise InputError(f"Invalid bounds: lower {float(low[k])} >= upper {float(high[k])} at coordinate {k} "
                         "(expected lower < upper)")
    return low, high


def _anchor(x0: torch.Tensor | None, init: str, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor | None:
    """``x0`` in unit-cube coordinates (clamped into the box), checked against ``init`` and the dimension."""
    if x0 is None:
        return None
    if init != "proximity":
        raise InputError(f"Invalid x0: an anchor only applies to init='proximity' (got init={init!r})")
    x0 = torch.as_tensor(x0, dtype=low.dtype, device=low.device).reshape(-1)
    if x0.numel() != low.numel():
        raise InputError(f"Invalid x0: {x0.numel()} coordinates (expected {low.numel()})")
    return ((x0 - low) / (high - low)).clamp_(0.0, 1.0)


def minimize(
    f: Objective,
    lower: float | torch.Tensor,
    upper: float | torch.Tensor,
    *,
    budget: float,
    dim: int | None = None,
    seed: int = 0,
    x0: torch.Tensor | None = None,
    options: MinimizeOptions | None = None,
    gradient: Objective | None = None,
    resample: Callable[[], None] | None = None,
    meter: CostMeter | None = None,
    callback: Callable[[int, float], None] | None = None,
    **keywords: object,
) -> MinimizeResult:
    """Minimize ``f`` over the box [lower, upper] with EvE until ``budget`` units are charged.

    Defaults are the paper's synthetic-benchmark setting (:class:`MinimizeOptions`: n_adam=7,
    lr=0.05, weight decay 1e-4, polynomial mutation on, Latin hypercube initialization).

    Args:
        f: maps a (r, n) tensor of points to a (r,) tensor of values.
        lower, upper: the box, as vectors of length n or scalars with ``dim``.
        budget: evaluation units (ignored when ``meter`` is given: its budget applies).
        dim: the dimension n when both bounds are scalars.
        seed: seeds the initialization and every random draw of the run.
        x0: anchor of a proximity initialization (``init="proximity"``); uniform when None.
        options: the algorithm settings (:class:`MinimizeOptions`; default: its defaults).
        gradient: maps a point (n,) to the gradient of f there; default: autograd through f.
        resample: for a stochastic f (a minibatch loss), called at the start of every iteration to
            draw the new batch; the challenged slot is then re-scored on it before anything else.
        meter: a :class:`~eve_search.optim.budget.CostMeter` to charge (default: a new measured one).
        callback: called after every iteration with (iteration, best value so far).
        **keywords: fields of :class:`MinimizeOptions` (``lr=``, ``n_adam=``, ``init=``...) instead of
            ``options`` (both together are an InputError); any other keyword is a TypeError.

    Returns:
        A :class:`MinimizeResult`: the best point ``x`` and its value ``fun``, the units charged
        (``cost``) and the iteration count.

    Example:
        >>> import torch
        >>> from eve_search import minimize
        >>> from eve_search.optim.budget import CostMeter
        >>> sphere = lambda x: ((x - 0.5) ** 2).sum(dim=1)
        >>> result = minimize(sphere, 0.0, 1.0, dim=10, budget=500, seed=0)  # backward charged by wall time
        >>> result.cost >= 500
        True
        >>> pinned = CostMeter(500, mode="calibrated", backward_ratio=2.0)  # the same run on any machine
        >>> result = minimize(sphere, 0.0, 1.0, dim=10, budget=500, seed=0, meter=pinned)
        >>> result.fun < 1e-4, result.cost
        (True, 502.0)
    """
    opts = options_or_keywords("minimize", MinimizeOptions, options, keywords)
    if meter is None:
        meter = CostMeter(budget)
    elif not isinstance(meter, CostMeter):
        raise TypeError(f"Invalid meter: {meter!r} (expected a CostMeter)")
    low, high = _box(lower, upper, dim)
    n, like = low.numel(), {"dtype": low.dtype, "device": low.device}
    init_generator, step_generator = make_generators(seed, low.device)
    z = initial_population(opts.init, opts.population_size, n, init_generator, sigma=opts.sigma,
                           anchor=_anchor(x0, opts.init, low, high), **like)
    population = Population(z, low, high, opts.hyperparameters(), step_generator, refresh=resample is not None,
                            work=torch.empty(n, **like))
    evaluator = _FunctionEvaluator(f, gradient, meter, population, torch.empty(opts.population_size, n, **like))
    history: list[float] = []
    while not meter.exhausted:
        if resample is not None:
            resample()
        population.iterate(evaluator)
        history.append(population.best_value)
        if callback is not None:
            callback(population.iteration, population.best_value)
    best = population.best_index
    value = population.values[best]
    return MinimizeResult(x=population.to_real(population.z[best], out=torch.empty(n, **like)),
                          fun=value if math.isfinite(value) else math.inf, cost=meter.cost,
                          iterations=population.iteration, best_so_far=history, meter=meter)
