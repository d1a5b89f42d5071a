"""EvE as a closure-based ``torch.optim.Optimizer`` (like ``torch.optim.LBFGS``).

One ``step(closure)`` is one EvE iteration (Algorithm 1, lines 5-24). The closure returns the loss
of the module's current weights on this iteration's minibatch and does NOT call ``backward``:
EvE decides which evaluations need a gradient (only the Adam fallback does), and times and charges
each pass itself. Draw a new batch before each ``step`` so that every evaluation of the iteration
shares it (common random numbers).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import torch

from eve_search.budget import CostMeter
from eve_search.optim._closure import charged_backward, charged_forward, loss_value
from eve_search.optim._init import INITIALIZATIONS, initial_population, make_generators
from eve_search.optim._population import (
    EvEHyperparameters,
    Population,
    check_hyperparameters,
)

__all__ = ["EvE", "kaiming_bounds"]

Bounds = None | float | tuple[float, float] | Sequence[tuple[Any, Any]]


def kaiming_bounds(params: Sequence[torch.Tensor]) -> list[float]:
    """Per-tensor half-widths sqrt(6 / fan_in), the Kaiming-uniform range (paper, Appendix "MLP/MNIST: Architecture and Hyperparameters").

    A 1-D tensor right after a weight with as many output rows is that weight's bias and uses its
    fan_in; any other tensor of fewer than 2 dimensions (a norm scale, a scalar) uses fan_in = 1.
    """
    half_widths = []
    previous: torch.Tensor | None = None
    for p in params:
        if p.dim() >= 2:
            fan_in = p.shape[1] * math.prod(p.shape[2:])
        elif p.dim() == 1 and previous is not None and previous.dim() >= 2 and previous.shape[0] == p.shape[0]:
            fan_in = previous.shape[1] * math.prod(previous.shape[2:])
        else:
            fan_in = 1
        half_widths.append(math.sqrt(6.0 / fan_in))
        previous = p
    return half_widths


def _as_bound(value: Any, p: torch.Tensor, what: str, index: int) -> torch.Tensor:
    """One parameter's bound: a 0-dim tensor when it is one number for the whole tensor (stored once,
    not per weight), else the flattened per-weight vector."""
    try:
        bound = torch.as_tensor(value, dtype=p.dtype, device=p.device)
        if bound.numel() == 1:
            return bound.reshape(())
        return bound.expand_as(p).reshape(-1)
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"Invalid bounds: {what} bound of parameter {index} cannot be broadcast to "
                         f"its shape {tuple(p.shape)} ({error})") from None


def _flat_bounds(bounds: Bounds, params: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Lower and upper bounds per parameter (0-dim when one number covers the tensor), validated
    lower < upper everywhere."""
    if bounds is None:
        pairs = [(-b, b) for b in kaiming_bounds(params)]
    elif isinstance(bounds, (int, float)) and not isinstance(bounds, bool):
        if not bounds > 0:
            raise ValueError(f"Invalid bounds: {bounds} (a single number is a half-width and must be > 0)")
        pairs = [(-bounds, bounds)] * len(params)
    elif (isinstance(bounds, tuple) and len(bounds) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bounds)):
        pairs = [bounds] * len(params)
    elif isinstance(bounds, Sequence) and len(bounds) == len(params):
        pairs = list(bounds)
    else:
        raise ValueError(f"Invalid bounds: {bounds!r} (expected None, a half-width, a (lower, upper) pair, "
                         f"or one (lower, upper) pair per parameter: {len(params)} here)")
    lowers, uppers = [], []
    for index, (p, pair) in enumerate(zip(params, pairs)):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"Invalid bounds: entry {index} is {pair!r} (expected a (lower, upper) pair)")
        low, high = _as_bound(pair[0], p, "lower", index), _as_bound(pair[1], p, "upper", index)
        bad = ~(low < high).expand(p.numel())
        if bool(bad.any()):
            k = int(bad.nonzero()[0])
            first_low, first_high = low.expand(p.numel())[k], high.expand(p.numel())[k]
            raise ValueError(f"Invalid bounds: lower {float(first_low)} >= upper {float(first_high)} at element {k} "
                             f"of parameter {index} (expected lower < upper)")
        if low.dim() != high.dim():  # one per-weight, one a number: store both per weight
            low, high = low.expand(p.numel()), high.expand(p.numel())
        lowers.append(low)
        uppers.append(high)
    return lowers, uppers


class EvE(torch.optim.Optimizer):
    """EvE: steady-state differential evolution over 4 copies of the weights, with an Adam fallback.

    The population lives in the unit cube of the box ``bounds`` (default: +-sqrt(6/fan_in) per
    tensor) and starts, by default, as the module's current weights plus three Gaussian jitters
    (proximity initialization). After every ``step`` the parameters hold the population's best
    member, so the module can be evaluated directly.

    The parameters are rebound as views into one flat buffer, so that writing a candidate into the
    model is one fused operation and no evaluation allocates. Storage beyond the weights: the
    population (4x the weights), its per-slot Adam moments (8x) and the DE child (1x), whose buffer
    also receives the fallback's gradients (the child is no longer needed once the fallback starts;
    ``p.grad`` views it only during a fallback burst and is None after ``step``); the bounds are
    stored once per tensor when they are one number per tensor (the default). With the weights
    that is 14x in all; the paper's count of 13x (Appendix "Vectorized Updates and Memory Cost")
    leaves out the one gradient buffer the fallback needs, which its 4x for Adam includes. Polynomial
    mutation adds one more buffer (the mutant).

    Args:
        params: the tensors to optimize (one parameter group: EvE treats them as one vector).
        lr: the Adam fallback's learning rate.
        n_adam: Adam steps per fallback burst (0 turns the fallback off).
        weight_decay: L2 penalty folded into the fallback's gradient (PyTorch ``Adam`` style).
        betas, eps: the fallback's Adam constants.
        F, gamma: DE weight and the jitter of its difference term (Equation 2).
        sigma: proximity initialization's jitter (Equation 1).
        polynomial_mutation, eta: gated polynomial mutation (Equation 3) and its index.
        population_size: number of slots (the paper uses 4).
        init: ``"proximity"`` or ``"lhs"`` (Latin hypercube).
        anchor: for proximity, ``"weights"`` (the module's current weights) or ``"uniform"``.
        bounds: None, a half-width, a ``(lower, upper)`` pair, or one pair per parameter.
        seed: the one integer every random draw of this optimizer derives from.
        meter: a :class:`~eve_search.budget.CostMeter` charged for every pass; a step stops at the
            first evaluation that finds it exhausted.

    Example:
        >>> import torch
        >>> from eve_search import EvE
        >>> model = torch.nn.Linear(3, 1)
        >>> x, y = torch.randn(64, 3), torch.randn(64, 1)
        >>> opt = EvE(model.parameters(), lr=1e-2, seed=0)
        >>> for _ in range(20):
        ...     best = opt.step(lambda: torch.nn.functional.mse_loss(model(x), y))
        >>> best <= torch.nn.functional.mse_loss(model(x), y).item() + 1e-6
        True
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        *,
        n_adam: int = 3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        F: float = 0.5,
        gamma: float = 1e-4,
        sigma: float = 0.1,
        polynomial_mutation: bool = False,
        eta: float = 20.0,
        population_size: int = 4,
        init: str = "proximity",
        anchor: str = "weights",
        bounds: Bounds = None,
        seed: int = 0,
        meter: CostMeter | None = None,
    ) -> None:
        hyper = EvEHyperparameters(lr=lr, n_adam=n_adam, weight_decay=weight_decay, betas=tuple(betas),
                                   eps=eps, F=F, gamma=gamma, sigma=sigma,
                                   polynomial_mutation=bool(polynomial_mutation), eta=eta,
                                   population_size=population_size)
        check_hyperparameters(hyper)
        if init not in INITIALIZATIONS:
            raise ValueError(f"Invalid init: {init!r} (expected one of {', '.join(INITIALIZATIONS)})")
        if anchor not in ("weights", "uniform"):
            raise ValueError(f"Invalid anchor: {anchor!r} (expected 'weights' or 'uniform')")
        if meter is not None and not isinstance(meter, CostMeter):
            raise TypeError(f"Invalid meter: {meter!r} (expected a CostMeter or None)")
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
        if len(self.param_groups) != 1:
            raise ValueError(f"Invalid params: {len(self.param_groups)} parameter groups (EvE evolves all "
                             "parameters as one vector; pass a single group)")
        self._hyper = hyper
        self.meter = meter
        params = self.param_groups[0]["params"]
        first = params[0]
        for p in params:
            if not p.is_floating_point() or p.dtype != first.dtype or p.device != first.device:
                raise ValueError(f"Invalid params: EvE needs floating-point parameters of one dtype and device; "
                                 f"got {p.dtype} on {p.device} beside {first.dtype} on {first.device}")
        lower, upper = _flat_bounds(bounds, params)
        self._params = params
        self._flat = torch.cat([p.detach().reshape(-1) for p in params])
        self._views = self._rebind(self._flat)

        anchor_z = None
        if init == "proximity" and anchor == "weights":
            anchor_z = torch.empty_like(self._flat)
            for x, z_part, low, high in zip(self._split(self._flat), self._split(anchor_z), lower, upper):
                torch.sub(x, low, out=z_part).div_(high - low)
            outside = int(((anchor_z < 0) | (anchor_z > 1)).sum())
            if outside:
                warnings.warn(f"{outside} of {self._flat.numel()} weights lie outside EvE's bounds and were "
                              "clamped into them for the population; pass bounds= to keep them", stacklevel=2)
            anchor_z.clamp_(0.0, 1.0)
        self._init_generator, step_generator = make_generators(seed, self._flat.device)
        z = initial_population(init, population_size, self._flat.numel(), self._init_generator,
                               sigma=sigma, anchor=anchor_z, dtype=self._flat.dtype, device=self._flat.device)
        self._population = Population(z, lower, upper, hyper, step_generator, refresh=True, work=self._flat,
                                      segments=[p.numel() for p in params])
        # The fallback's gradients go into the child's buffer (free during a burst; see Population.scratch).
        self._grad_views = [g.view_as(p) for g, p in zip(self._split(self._population.scratch), params)]
        # The module keeps its exact weights until the first step writes the best member into it.

    def _split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return list(flat.split([p.numel() for p in self._params]))

    def _rebind(self, flat: torch.Tensor) -> list[torch.Tensor]:
        views = [v.view_as(p) for v, p in zip(self._split(flat), self._params)]
        for p, view in zip(self._params, views):
            p.data = view
        return views

    def _load_best(self) -> None:
        population = self._population
        population.to_real(population.z[population.best_index], out=self._flat)

    @property
    def population(self) -> Population:
        """The live population (slots in unit-cube coordinates, their values, moments)."""
        return self._population

    @property
    def best_value(self) -> float:
        """The lowest recorded value in the population (+inf before the first step)."""
        return self._population.best_value

    def _sync_hyperparameters(self) -> None:
        # Learning-rate schedulers and users edit param_groups; the population reads its copy.
        group = self.param_groups[0]
        if group["lr"] != self._hyper.lr or group["weight_decay"] != self._hyper.weight_decay:
            self._hyper = replace(self._hyper, lr=group["lr"], weight_decay=group["weight_decay"])
            check_hyperparameters(self._hyper)
            self._population.hyper = self._hyper

    @torch.no_grad()
    def step(self, closure: Callable[[], Any]) -> float:  # type: ignore[override]
        """Run one EvE iteration on the closure's batch; return the best recorded value."""
        if closure is None or not callable(closure):
            raise TypeError("EvE.step needs a closure that returns the loss on this iteration's batch "
                            "(like torch.optim.LBFGS, but without calling backward)")
        self._sync_hyperparameters()
        try:
            self._population.iterate(_ModuleEvaluator(self, closure))
        finally:
            # The gradient views alias the child's buffer: never leave them on the parameters, where the
            # next iteration's child would show through.
            for p, g in zip(self._params, self._grad_views):
                if p.grad is g:
                    p.grad = None
        self._load_best()
        return self._population.best_value

    def state_dict(self) -> dict[str, Any]:
        self.state["eve"] = {**self._population.state_dict(),
                             "init_generator": self._init_generator.get_state()}
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "eve" not in state_dict.get("state", {}):
            raise ValueError("state_dict has no EvE population (was it saved by another optimizer?)")
        super().load_state_dict(state_dict)
        saved = self.state["eve"]
        self._population.load_state_dict(saved)
        self._init_generator.set_state(saved["init_generator"])
        self.state["eve"] = {}  # the live tensors are the population's; state_dict() refreshes this
        self._sync_hyperparameters()
        if self._population.scored:  # before the first step the module keeps its own exact weights
            self._load_best()


class _ModuleEvaluator:
    """Scores candidates by writing them into the module's flat buffer and calling the closure."""

    __slots__ = ("_closure", "_meter", "_opt")

    def __init__(self, opt: EvE, closure: Callable[[], Any]) -> None:
        self._opt = opt
        self._closure = closure
        self._meter = opt.meter

    def exhausted(self) -> bool:
        return self._meter is not None and self._meter.exhausted

    def score(self, rows: torch.Tensor) -> list[float]:
        opt = self._opt
        values = []
        for row in rows:
            opt._population.to_real(row, out=opt._flat)
            values.append(loss_value(charged_forward(self._closure, self._meter, graph=False)))
        return values

    def score_work(self) -> float:
        # The work point is the flat parameter buffer: the module already holds it.
        return loss_value(charged_forward(self._closure, self._meter, graph=False))

    def gradient(self, x: torch.Tensor) -> tuple[float, torch.Tensor]:
        opt = self._opt
        if x is not opt._flat:  # the population's work point is the flat parameter buffer itself
            opt._flat.copy_(x)
        # zero_grad(set_to_none=True) elsewhere may have dropped our gradient views; restore them.
        for p, g in zip(opt._params, opt._grad_views):
            if p.grad is not g:
                p.grad = g
        gradient = opt._population.scratch  # the child's buffer: free during the burst
        gradient.zero_()
        loss = charged_forward(self._closure, self._meter, graph=True)
        value = loss_value(loss)
        charged_backward(loss, self._meter)
        return value, gradient
