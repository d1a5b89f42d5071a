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

from eve_search._checks import InputError
from eve_search.optim.budget import CostMeter
from eve_search.optim._closure import charged_backward, charged_forward, loss_value
from eve_search.optim._init import INITIALIZATIONS, initial_population, make_generators
from eve_search.optim._population import (
    EvEHyperparameters,
    Layout,
    Population,
    check_hyperparameters,
)

__all__ = ["EvE", "kaiming_bounds"]

Bounds = None | float | tuple[float, float] | Sequence[tuple[Any, Any]]


def kaiming_bounds(params: Sequence[torch.Tensor]) -> list[float]:
    """Per-tensor half-widths sqrt(6 / fan_in), the Kaiming-uniform range (paper, Appendix "MLP/MNIST: Architecture and Hyperparameters").

    A 1-D tensor right after a weight with as many output rows is that weight's bias and uses its
    fan_in; any other tensor of fewer than 2 dimensions (a norm scale, a scalar) uses fan_in = 1.

    Args:
        params: the model's parameters in order (``list(model.parameters())``).

    Returns:
        One half-width b per tensor: EvE searches each weight in [-b, b] by default.

    Example:
        >>> import torch
        >>> [round(b, 4) for b in kaiming_bounds(list(torch.nn.Linear(6, 3).parameters()))]
        [1.0, 1.0]
        >>> kaiming_bounds([torch.zeros(())])
        [2.449489742783178]
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
        raise InputError(f"Invalid bounds: {what} bound of parameter {index} cannot be broadcast to "
                         f"its shape {tuple(p.shape)} ({error})") from None


def _flat_bounds(bounds: Bounds, params: Sequence[torch.Tensor],
                 keep: Sequence[bool]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Lower and upper bounds per kept parameter (0-dim when one number covers the tensor), validated
    lower < upper everywhere. ``params`` are all the optimizer's parameters, ``keep`` marks the ones
    EvE evolves (those that require grad); a per-parameter ``bounds`` lists either all of them or the
    kept ones."""
    kept = sum(keep)
    if bounds is None:
        pairs = [(-b, b) for b in kaiming_bounds(params)]
    elif isinstance(bounds, (int, float)) and not isinstance(bounds, bool):
        if not bounds > 0:
            raise InputError(f"Invalid bounds: {bounds} (a single number is a half-width and must be > 0)")
        pairs = [(-bounds, bounds)] * len(params)
    elif (isinstance(bounds, tuple) and len(bounds) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bounds)):
        pairs = [bounds] * len(params)
    elif isinstance(bounds, Sequence) and len(bounds) == len(params):
        pairs = list(bounds)
    elif isinstance(bounds, Sequence) and len(bounds) == kept:
        given = iter(bounds)
        pairs = [next(given) if k else None for k in keep]
    else:
        counted = f"{len(params)} here" if kept == len(params) else f"{len(params)} here, or {kept} trainable"
        raise InputError(f"Invalid bounds: {bounds!r} (expected None, a half-width, a (lower, upper) pair, "
                         f"or one (lower, upper) pair per parameter: {counted})")
    lowers, uppers = [], []
    for index, (p, pair, k) in enumerate(zip(params, pairs, keep)):
        if not k:
            continue
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise InputError(f"Invalid bounds: entry {index} is {pair!r} (expected a (lower, upper) pair)")
        low, high = _as_bound(pair[0], p, "lower", index), _as_bound(pair[1], p, "upper", index)
        if not bool((low < high).all()):  # (NaN bounds fail too)
            bad = ~(low < high).expand(p.numel())
            k = int(bad.nonzero()[0])
            first_low, first_high = low.expand(p.numel())[k], high.expand(p.numel())[k]
            raise InputError(f"Invalid bounds: lower {float(first_low)} >= upper {float(first_high)} at element {k} "
                             f"of parameter {index} (expected lower < upper)")
        if low.dim() != high.dim():  # one per-weight, one a number: store both per weight
            low, high = low.expand(p.numel()), high.expand(p.numel())
        lowers.append(low)
        uppers.append(high)
    return lowers, uppers


def _check_options(hyper: EvEHyperparameters, init: str, anchor: str, meter: Any) -> None:
    """EvE's optimizer-wide settings, checked before anything is built (one line naming the argument)."""
    check_hyperparameters(hyper)
    if init not in INITIALIZATIONS:
        raise InputError(f"Invalid init: {init!r} (expected one of {', '.join(INITIALIZATIONS)})")
    if anchor not in ("weights", "uniform"):
        raise InputError(f"Invalid anchor: {anchor!r} (expected 'weights' or 'uniform')")
    if meter is not None and not isinstance(meter, CostMeter):
        raise TypeError(f"Invalid meter: {meter!r} (expected a CostMeter or None)")


def _check_param(p: torch.Tensor, index: int, first: torch.Tensor | None) -> None:
    """One line for a parameter EvE cannot evolve: sparse, complex, not floating point, or of another
    dtype or device than the first one."""
    if p.layout != torch.strided:
        raise InputError(f"Invalid params: parameter {index} has layout {p.layout} (EvE evolves dense tensors; "
                         "sparse parameters are not supported)")
    if p.is_complex():
        raise InputError(f"Invalid params: parameter {index} is {p.dtype} (EvE evolves real weights; complex "
                         "parameters are not supported: store the real and imaginary parts as a real parameter)")
    if not p.is_floating_point():
        raise InputError(f"Invalid params: parameter {index} is {p.dtype} (EvE needs floating-point parameters)")
    if first is not None and (p.dtype != first.dtype or p.device != first.device):
        raise InputError(f"Invalid params: parameter {index} is {p.dtype} on {p.device} beside {first.dtype} on "
                         f"{first.device} (EvE needs all its parameters in one dtype on one device)")


# Options a param group may not set: EvE's own, which hold for the whole population, and the Adam
# options a group copied from a torch optimizer could carry, which EvE's fallback would ignore.
_GLOBAL_OPTIONS = ("betas", "eps", "n_adam", "F", "gamma", "sigma", "polynomial_mutation", "eta",
                   "population_size", "init", "anchor", "bounds", "seed", "meter", "amsgrad", "maximize")

# What the module's flat buffer holds between steps, so that a change made outside step() shows:
# "best": the population's best member (after any evaluation); "anchor": weights whose unit-cube
# image is slot 0 (built, or re-anchored, around the module's weights, not yet evaluated); "free":
# weights the population does not depend on (init="lhs" or anchor="uniform", not yet evaluated).
_HOLDS = ("best", "anchor", "free")

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN equals the same NaN; -0.0 differs from 0.0): the check that says whether
    the module still holds exactly what EvE wrote. Two flat buffers whose bytes split into 8-byte words
    are compared as those words (half as many elements as float32 words: 1.7x faster)."""
    size = a.element_size()
    if (a.dim() == 1 and a.is_contiguous() and b.is_contiguous() and (a.numel() * size) % 8 == 0
            and a.data_ptr() % 8 == 0 and b.data_ptr() % 8 == 0):
        kind = torch.int64
    else:
        kind = _SAME_SIZE_INT[size]
    return torch.equal(a.view(kind), b.view(kind))


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

    The closure contract: ``closure()`` computes and returns the loss of the module's current weights
    on this step's batch, and never calls ``zero_grad`` or ``backward``. EvE calls it under
    ``torch.inference_mode()`` to score population members, and with gradients enabled for each
    Adam fallback step, after which EvE calls ``backward()`` on the returned loss itself. Every call
    of one step starts from the same global random state (CPU, and the parameters' CUDA device), so
    dropout masks, like the batch, are common to all of a step's evaluations; afterwards the random
    state is where one call of the closure leaves it. The module's train/eval mode is the caller's.

    Weights changed outside ``step``: between steps the module holds the population's best member.
    When ``step`` finds other weights there (``model.load_state_dict`` of a model-only checkpoint, a
    weight copy, ``p.data = ...`` of the same dtype, device and shape, a reused Ray Tune actor), it
    re-anchors: the population is initialized afresh by proximity around those weights (slot 1 is
    them, mapped to the unit cube; Equation 1 places the other slots, from the initialization
    generator), every slot's Adam moments restart, and the step scores all slots on its batch, as
    the first step does. Loading ``state_dict()`` together with the model restores everything
    instead, and the run continues bit for bit.

    Args:
        params: the tensors to optimize, or parameter groups (dicts) as for ``torch.optim``. EvE
            evolves every trainable parameter as one vector; a group may set its own ``lr`` and
            ``weight_decay`` for the Adam fallback (read at every step, so LR schedulers work).
            Parameters with ``requires_grad=False`` are left untouched, as ``torch.optim`` leaves
            them. Groups cannot be added after construction.
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
        bounds: None, a half-width, a ``(lower, upper)`` pair, or one pair per parameter (all of
            them, or only the trainable ones).
        seed: the one integer every random draw of this optimizer derives from.
        meter: a :class:`~eve_search.optim.budget.CostMeter` charged for every pass; a step stops at the
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
        _check_options(hyper, init, anchor, meter)
        self._built = False
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
        self._hyper = hyper
        self.meter = meter
        everything, keep = self._checked_params()
        params = [p for p, k in zip(everything, keep) if k]
        self._indices = [index for index, k in enumerate(keep) if k]  # positions among all parameters
        self._frozen = [p for p in everything if not p.requires_grad]
        lower, upper = _flat_bounds(bounds, everything, keep)
        self._params = params
        self._settings = self._group_settings()
        self._flat = torch.cat([p.detach().reshape(-1) for p in params])
        self._views = self._rebind(self._flat)
        self._pointers = [p.data_ptr() for p in params]

        # The initial population is drawn when first needed (the first step, state_dict(), .population):
        # a trial about to load a saved state never draws one it would overwrite. The draw is the same
        # either way (nothing else uses the initialization generator before it). Until then slot 0
        # holds the anchor's image (which the draw keeps there, Equation 1), and nothing else is held.
        z = torch.empty(population_size, self._flat.numel(), dtype=self._flat.dtype, device=self._flat.device)
        anchored = init == "proximity" and anchor == "weights"
        if anchored:
            outside = _unit_anchor(self._flat, z[0], lower, upper, [p.numel() for p in params])
            if outside:
                warnings.warn(f"{outside} of {self._flat.numel()} weights lie outside EvE's bounds and were "
                              "clamped into them for the population; pass bounds= to keep them", stacklevel=2)
        self._init_generator, step_generator = make_generators(seed, self._flat.device)
        self._undrawn: tuple[str, bool, float] | None = (init, anchored, sigma)
        trainable = set(map(id, params))
        groups = [sum(p.numel() for p in group["params"] if id(p) in trainable) for group in self.param_groups]
        self._population = Population(z, lower, upper, hyper, step_generator, refresh=True, work=self._flat,
                                      layout=Layout(segments=[p.numel() for p in params], groups=groups))
        self._population.group_settings = list(self._settings)
        self._lower, self._upper = lower, upper
        # The fallback's gradients go into the child's buffer (free during a burst; see Population.scratch).
        self._grad_views = [g.view_as(p) for g, p in zip(self._split(self._population.scratch), params)]
        # The module keeps its exact weights until the first step writes the best member into it.
        self._initial_holds = "anchor" if anchored else "free"
        self._holds = self._initial_holds
        self._reanchors = 0
        self._last_reanchor = -2
        self._warned_repeated_reanchor = False
        self._built = True

    def _checked_params(self) -> tuple[list[torch.Tensor], list[bool]]:
        """Every parameter of the groups, and whether each is trained (requires grad), once the groups
        set only per-group options and the trained parameters can share one flat vector."""
        for index, group in enumerate(self.param_groups):
            fixed = [key for key in _GLOBAL_OPTIONS if key in group]
            if fixed:
                raise InputError(f"Invalid param group {index}: {fixed[0]}={group[fixed[0]]!r} (a group may set "
                                 "only lr and weight_decay; EvE's other options are one per optimizer)")
        everything = [p for group in self.param_groups for p in group["params"]]
        keep = [p.requires_grad for p in everything]
        if not any(keep):
            raise InputError(f"Invalid params: none of the {len(everything)} parameters requires grad "
                             "(nothing for EvE to optimize)")
        first: torch.Tensor | None = None
        for index, (p, k) in enumerate(zip(everything, keep)):
            if k:
                _check_param(p, index, first)
                first = p if first is None else first
        return everything, keep

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Refused once EvE is built: its population is one vector over the parameters it was built
        with (construction itself adds its groups here, as ``torch.optim.Optimizer`` does)."""
        if getattr(self, "_built", False):
            raise InputError("EvE cannot add a parameter group after construction (its population is one vector "
                             "over the parameters it was built with); pass every group to EvE(...)")
        super().add_param_group(param_group)

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
        self._holds = "best"

    def _draw_initial_population(self) -> None:
        """Draw the initial population (Algorithm 1, line 1) unless it is drawn or loaded already."""
        if self._undrawn is None:
            return
        init, anchored, sigma = self._undrawn
        population = self._population
        population.z.copy_(initial_population(init, population.size, self._flat.numel(), self._init_generator,
                                              sigma=sigma, anchor=population.z[0] if anchored else None,
                                              dtype=self._flat.dtype, device=self._flat.device))
        self._undrawn = None

    @property
    def population(self) -> Population:
        """The live population (slots in unit-cube coordinates, their values, moments)."""
        self._draw_initial_population()
        return self._population

    @property
    def best_value(self) -> float:
        """The lowest recorded value in the population (+inf before the first step)."""
        return self._population.best_value

    @property
    def reanchors(self) -> int:
        """How many times a step found weights changed outside ``step`` and re-anchored the population."""
        return self._reanchors

    def _group_settings(self) -> list[tuple[float, float]]:
        settings = [(group["lr"], group["weight_decay"]) for group in self.param_groups]
        for index, (lr, weight_decay) in enumerate(settings):
            try:
                check_hyperparameters(replace(self._hyper, lr=lr, weight_decay=weight_decay))
            except ValueError as error:
                if len(settings) == 1:
                    raise
                raise InputError(f"param group {index}: {error}") from None
        return settings

    def _sync_hyperparameters(self) -> None:
        # Learning-rate schedulers and users edit param_groups; the population reads its copy.
        settings = [(group["lr"], group["weight_decay"]) for group in self.param_groups]
        if settings != self._settings:
            self._settings = self._group_settings()
            lr, weight_decay = settings[0]
            self._hyper = replace(self._hyper, lr=lr, weight_decay=weight_decay)
            self._population.hyper = self._hyper
            self._population.group_settings = list(settings)

    def _check_weights(self) -> None:
        """Make the next iteration start from the module's weights: re-bind parameters whose storage was
        replaced (``p.data = ...``), refuse what cannot be continued, and re-anchor the population when
        the weights are not what EvE left there (see the class docstring)."""
        for k, (p, pointer) in enumerate(zip(self._params, self._pointers)):
            if p.data_ptr() != pointer:
                self._adopt(k)
            if not p.requires_grad:
                raise InputError(f"parameter {self._indices[k]} was frozen (requires_grad=False) after EvE was "
                                 "built; EvE evolves the parameters trainable at construction: build a new EvE")
        for p in self._frozen:
            if p.requires_grad:
                raise InputError("a parameter that was frozen (requires_grad=False) when EvE was built now requires "
                                 "grad; EvE evolves the parameters trainable at construction: build a new EvE")
        if self._weights_changed():
            self._reanchor()

    def _weights_changed(self) -> bool:
        """Whether the module's weights differ, bit for bit, from what EvE left there (O(n), no allocation)."""
        population = self._population
        reference = population.scratch  # the child's buffer: free between steps
        if self._holds == "best":
            population.to_real(population.z[population.best_index], out=reference)
            return not _same_bits(reference, self._flat)
        if self._holds == "anchor":
            population.to_unit(self._flat, out=reference)
            return not _same_bits(reference, population.z[0])
        return False

    def _adopt(self, k: int) -> None:
        """Parameter k no longer views the flat buffer (``p.data`` was replaced): copy its new value in
        and view it again, or refuse a new dtype, device or shape in one line."""
        p, view = self._params[k], self._views[k]
        index = self._indices[k]
        if p.dtype != view.dtype or p.device != view.device:
            raise InputError(f"parameter {index} is now {p.dtype} on {p.device}, but EvE was built for {view.dtype} "
                             f"on {view.device}; move or cast the model (model.to(...)) before building EvE")
        if p.shape != view.shape:
            raise InputError(f"parameter {index} changed shape from {tuple(view.shape)} to {tuple(p.shape)} after "
                             "EvE was built; build a new EvE")
        view.copy_(p.detach())
        p.data = view
        self._pointers[k] = p.data_ptr()

    def _reanchor(self) -> None:
        """Initialize the population afresh around the module's current weights (proximity, Equation 1)."""
        population = self._population
        anchor = population.scratch
        outside = _unit_anchor(self._flat, anchor, self._lower, self._upper, [p.numel() for p in self._params])
        z = initial_population("proximity", population.size, anchor.numel(), self._init_generator,
                               sigma=self._hyper.sigma, anchor=anchor, dtype=anchor.dtype, device=anchor.device)
        population.restart(z)
        self._holds = "anchor"
        self._reanchors += 1
        if outside:
            warnings.warn(f"{outside} of {anchor.numel()} weights lie outside EvE's bounds and were clamped into "
                          "them for the re-anchored population; pass bounds= to keep them", stacklevel=3)
        if population.iteration - self._last_reanchor <= 1 and not self._warned_repeated_reanchor:
            self._warned_repeated_reanchor = True
            warnings.warn("EvE re-anchored its population at two consecutive steps: something changes the weights "
                          "between steps (a weight clamp or copy?), and each change restarts the population; "
                          "make such changes inside the closure's computation or only before a restart",
                          stacklevel=3)
        self._last_reanchor = population.iteration

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> float:  # type: ignore[override]
        """Run one EvE iteration on the closure's batch; return the best recorded value.

        Args:
            closure: returns the loss of the module's current weights on this step's batch, without
                calling ``zero_grad`` or ``backward`` (see the class docstring).

        Returns:
            The lowest value in the population after the iteration.
        """
        if closure is None or not callable(closure):
            raise TypeError("EvE.step needs a closure that returns the loss on this iteration's batch, e.g. "
                            "opt.step(lambda: loss_fn(model(x), y)) (like torch.optim.LBFGS, but without "
                            "zero_grad() or backward(): EvE computes the gradients it needs)")
        self._sync_hyperparameters()
        self._draw_initial_population()
        self._check_weights()
        evaluator = _ModuleEvaluator(self, closure)
        try:
            self._population.iterate(evaluator)
        finally:
            # The gradient views alias the child's buffer: never leave them on the parameters, where the
            # next iteration's child would show through.
            for p, g in zip(self._params, self._grad_views):
                if p.grad is g:
                    p.grad = None
            if evaluator.touched:  # even after an error, the module holds the best member
                self._load_best()
        return self._population.best_value

    def state_dict(self) -> dict[str, Any]:
        # "weights_changed": the module's weights were changed outside step() since the last step, so
        # the next step re-anchors around them; a resumed run (model loaded with this state) does too.
        self._draw_initial_population()
        self.state["eve"] = {**self._population.state_dict(),
                             "init_generator": self._init_generator.get_state(),
                             "holds": self._holds,
                             "weights_changed": (any(p.data_ptr() != pointer for p, pointer in
                                                     zip(self._params, self._pointers))
                                                 or self._weights_changed()),
                             "reanchors": self._reanchors}
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "eve" not in state_dict.get("state", {}):
            raise InputError("state_dict has no EvE population (was it saved by another optimizer?)")
        super().load_state_dict(state_dict)
        saved = self.state["eve"]
        self._population.load_state_dict(saved)
        self._undrawn = None  # the saved population, drawn with the generator state restored below
        self._init_generator.set_state(saved["init_generator"])
        self._reanchors = int(saved.get("reanchors", 0))
        holds = saved.get("holds")
        if holds not in _HOLDS:  # saved before "holds" existed
            holds = "best" if self._population.scored else self._initial_holds
        self.state["eve"] = {}  # the live tensors are the population's; state_dict() refreshes this
        self._sync_hyperparameters()
        self._holds = holds
        # The module gets the best member unless the saved module held weights changed outside step():
        # those come with the model's own state, and the next step re-anchors around them. Before the
        # first step the module keeps its own exact weights.
        if holds == "best" and not saved.get("weights_changed", False):
            self._load_best()


def _unit_anchor(weights: torch.Tensor, out: torch.Tensor, lower: list[torch.Tensor], upper: list[torch.Tensor],
                 sizes: list[int]) -> int:
    """Map the flat weights into the unit cube (per tensor of ``sizes`` values) into ``out``, clamped;
    return how many lay outside."""
    for x, z, low, high in zip(weights.split(sizes), out.split(sizes), lower, upper):
        torch.sub(x, low, out=z).div_(high - low)
    outside = int(torch.logical_or(out < 0, out > 1).sum())
    out.clamp_(0.0, 1.0)
    return outside


class _ModuleEvaluator:
    """Scores candidates by writing them into the module's flat buffer and calling the closure.

    Every call of the closure in one step starts from the global random state the step began with
    (common random numbers for dropout and anything else the closure draws); ``touched`` says
    whether the flat buffer was written.
    """

    __slots__ = ("_calls", "_closure", "_cpu_rng", "_cuda_rng", "_device", "_meter", "_opt", "touched")

    def __init__(self, opt: EvE, closure: Callable[[], Any]) -> None:
        self._opt = opt
        self._closure = closure
        self._meter = opt.meter
        self.touched = False
        self._calls = 0
        self._device = opt._flat.device
        self._cpu_rng = torch.get_rng_state()
        self._cuda_rng = torch.cuda.get_rng_state(self._device) if self._device.type == "cuda" else None

    def _call(self, graph: bool) -> Any:
        if self._calls:
            torch.set_rng_state(self._cpu_rng)
            if self._cuda_rng is not None:
                torch.cuda.set_rng_state(self._cuda_rng, self._device)
        self._calls += 1
        return charged_forward(self._closure, self._meter, graph=graph)

    def exhausted(self) -> bool:
        return self._meter is not None and self._meter.exhausted

    def score(self, rows: torch.Tensor) -> list[float]:
        opt = self._opt
        values = []
        for row in rows:
            self.touched = True
            opt._population.to_real(row, out=opt._flat)
            values.append(loss_value(self._call(graph=False)))
        return values

    def score_work(self) -> float:
        # The work point is the flat parameter buffer: the module already holds it.
        return loss_value(self._call(graph=False))

    def gradient(self, x: torch.Tensor) -> tuple[float, torch.Tensor]:
        opt = self._opt
        self.touched = True
        if x is not opt._flat:  # the population's work point is the flat parameter buffer itself
            opt._flat.copy_(x)
        # zero_grad(set_to_none=True) elsewhere may have dropped our gradient views; restore them.
        for p, g in zip(opt._params, opt._grad_views):
            if p.grad is not g:
                p.grad = g
        gradient = opt._population.scratch  # the child's buffer: free during the burst
        gradient.zero_()
        loss = self._call(graph=True)
        value = loss_value(loss)
        charged_backward(loss, self._meter)
        for p, g in zip(opt._params, opt._grad_views):
            if p.grad is not g:  # the closure called zero_grad(set_to_none=True): take what backward left
                if p.grad is not None:
                    g.copy_(p.grad.to_dense() if p.grad.is_sparse else p.grad)
                p.grad = g
        return value, gradient
