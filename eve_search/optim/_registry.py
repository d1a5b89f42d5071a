"""The optimizers a search can train with, by name: EvE and the paper's eight baselines (paper, Section "Experimental Setup").

Every entry returns an object whose ``step(closure)`` runs one charged training step: the closure
returns the loss on the step's minibatch and never calls ``backward`` itself. Baselines are wrapped
in :class:`MeteredOptimizer` (one forward plus one backward per step, both charged to the same
:class:`~eve_search.optim.budget.CostMeter` EvE reports to). Each baseline gets its fastest stock
implementation for its parameters' device (fused or multi-tensor kernels) so that no baseline is
made slower than it has to be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

from eve_search._checks import InputError
from eve_search.optim.budget import CostMeter
from eve_search.optim._closure import charged_backward, charged_forward, loss_value
from eve_search.optim._eve import EvE

__all__ = [
    "MeteredOptimizer",
    "TrainingOptimizer",
    "make_optimizer",
    "optimizer_names",
    "register_optimizer",
]


class TrainingOptimizer(Protocol):
    """What a trial needs: a charged ``step(closure)`` and a state that round-trips.

    A structural type (``typing.Protocol``): any object with these three methods is one, without
    inheriting from it. :class:`~eve_search.optim.EvE` and :class:`MeteredOptimizer` are.

    Attributes:
        step: ``step(closure)`` makes one charged step; returns the loss it saw, or None.
        state_dict: ``state_dict()`` returns everything needed to continue bit for bit.
        load_state_dict: ``load_state_dict(state)`` restores what ``state_dict`` returned.

    Example:
        >>> import torch
        >>> from eve_search import CostMeter, MeteredOptimizer
        >>> meter = CostMeter(10, mode="calibrated", backward_ratio=2.0)
        >>> opt: TrainingOptimizer = MeteredOptimizer(torch.optim.SGD(torch.nn.Linear(2, 1).parameters()), meter)
        >>> all(callable(getattr(opt, name)) for name in ("step", "state_dict", "load_state_dict"))
        True
    """

    def step(self, closure: Callable[[], Any]) -> float | None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class MeteredOptimizer:
    """A gradient optimizer whose ``step(closure)`` is one forward and one backward, both charged.

    Args:
        optimizer: any ``torch.optim.Optimizer`` (or compatible, e.g. pytorch-optimizer's Lookahead).
        meter: the cost meter; a step is skipped once it is exhausted.

    Example:
        >>> import torch
        >>> from eve_search import CostMeter, MeteredOptimizer
        >>> model = torch.nn.Linear(2, 1)
        >>> meter = CostMeter(budget=30, mode="calibrated", backward_ratio=2.0)
        >>> opt = MeteredOptimizer(torch.optim.Adam(model.parameters()), meter)
        >>> x, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> while not meter.exhausted:
        ...     _ = opt.step(lambda: torch.nn.functional.mse_loss(model(x), y))
        >>> meter.cost
        30.0
    """

    def __init__(self, optimizer: torch.optim.Optimizer, meter: CostMeter | None = None) -> None:
        if meter is not None and not isinstance(meter, CostMeter):
            raise TypeError(f"Invalid meter: {meter!r} (expected a CostMeter or None)")
        self.optimizer = optimizer
        self.meter = meter

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def step(self, closure: Callable[[], Any]) -> float | None:
        """Forward, backward and update on the closure's batch; None when the budget is spent."""
        meter = self.meter
        if meter is not None and meter.exhausted:
            return None
        self.optimizer.zero_grad(set_to_none=True)
        loss = charged_forward(closure, meter, graph=True)
        value = loss_value(loss)
        charged_backward(loss, meter)
        self.optimizer.step()
        return value

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)


Factory = Callable[..., TrainingOptimizer]
_REGISTRY: dict[str, Factory] = {}


def register_optimizer(name: str, factory: Factory) -> None:
    """Add (or replace) an optimizer by name.

    ``factory(params, *, lr, weight_decay, meter, seed)`` returns an object with a charged
    ``step(closure)``, ``state_dict`` and ``load_state_dict`` (wrap a plain gradient optimizer in
    :class:`MeteredOptimizer`).

    Args:
        name: the registry key (non-empty, lower case), as ``--optimizer`` and :func:`make_optimizer` take it.
        factory: builds the optimizer, as above.

    Example:
        >>> import torch
        >>> from eve_search.optim import MeteredOptimizer
        >>> def plain_sgd(params, *, lr, weight_decay, meter, seed):
        ...     return MeteredOptimizer(torch.optim.SGD(params, lr=lr, weight_decay=weight_decay), meter)
        >>> register_optimizer("plain-sgd", plain_sgd)
        >>> "plain-sgd" in optimizer_names()
        True
        >>> _ = _REGISTRY.pop("plain-sgd")  # this example leaves the registry as it found it
    """
    if not isinstance(name, str) or not name or name != name.strip().lower():
        raise InputError(f"Invalid name: {name!r} (expected a non-empty lower-case string)")
    if not callable(factory):
        raise TypeError(f"Invalid factory for {name!r}: {factory!r} is not callable")
    _REGISTRY[name] = factory


def optimizer_names() -> list[str]:
    """Registered names, sorted.

    Returns:
        The names :func:`make_optimizer` accepts (the built-in ones: EvE and the baselines).

    Example:
        >>> {"adam", "eve", "sgd_momentum"} <= set(optimizer_names())
        True
    """
    return sorted(_REGISTRY)


def make_optimizer(name: str, params: Iterable[torch.Tensor], *, lr: float, weight_decay: float = 0.0,
                   meter: CostMeter | None = None, seed: int = 0) -> TrainingOptimizer:
    """Build the optimizer registered as ``name`` for ``params``, charging ``meter``.

    Args:
        name: a name from :func:`optimizer_names`.
        params: the parameters to train.
        lr: the learning rate.
        weight_decay: the weight decay (default 0).
        meter: the :class:`~eve_search.optim.budget.CostMeter` every pass is charged to (None: the
            factory's own).
        seed: seeds the optimizer's own randomness (EvE's population).

    Returns:
        A :class:`TrainingOptimizer`: ``step(closure)``, ``state_dict``, ``load_state_dict``.

    Raises:
        InputError: no optimizer has that name (the message lists those that do).

    Example:
        >>> import torch
        >>> from eve_search import make_optimizer
        >>> opt = make_optimizer("adamw", torch.nn.Linear(4, 2).parameters(), lr=1e-3, weight_decay=1e-2)
        >>> type(opt.optimizer).__name__
        'AdamW'
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        raise InputError(f"Unknown optimizer: {name!r} (expected one of {', '.join(optimizer_names())})")
    return factory(list(params), lr=lr, weight_decay=weight_decay, meter=meter, seed=seed)


def _fast_kernel(params: list[torch.Tensor], kind: str) -> dict[str, bool]:
    """``fused`` (Adam, AdamW, SGD) or ``foreach`` for float parameters on CPU or CUDA, else the default."""
    if params and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params):
        if kind == "fused":
            return {"fused": True}
        if all(p.device.type == "cuda" for p in params):
            return {"foreach": True}
    return {}


def _baseline(build: Callable[[list[torch.Tensor], float, float], torch.optim.Optimizer]) -> Factory:
    def factory(params: list[torch.Tensor], *, lr: float, weight_decay: float, meter: CostMeter | None,
                seed: int) -> MeteredOptimizer:
        del seed  # deterministic given the batch stream and the initial weights
        return MeteredOptimizer(build(params, lr, weight_decay), meter)

    return factory


def _eve(params: list[torch.Tensor], *, lr: float, weight_decay: float, meter: CostMeter | None,
         seed: int) -> EvE:
    return EvE(params, lr=lr, weight_decay=weight_decay, meter=meter, seed=seed)


def _pytorch_optimizer(name: str) -> Any:
    import pytorch_optimizer

    return getattr(pytorch_optimizer, name)


register_optimizer("eve", _eve)
register_optimizer("adam", _baseline(lambda p, lr, wd: torch.optim.Adam(
    p, lr=lr, weight_decay=wd, **_fast_kernel(p, "fused"))))
register_optimizer("adamw", _baseline(lambda p, lr, wd: torch.optim.AdamW(
    p, lr=lr, weight_decay=wd, **_fast_kernel(p, "fused"))))
register_optimizer("nadam", _baseline(lambda p, lr, wd: torch.optim.NAdam(
    p, lr=lr, weight_decay=wd, **_fast_kernel(p, "foreach"))))
register_optimizer("radam", _baseline(lambda p, lr, wd: torch.optim.RAdam(
    p, lr=lr, weight_decay=wd, **_fast_kernel(p, "foreach"))))
register_optimizer("amsgrad", _baseline(lambda p, lr, wd: torch.optim.Adam(
    p, lr=lr, weight_decay=wd, amsgrad=True, **_fast_kernel(p, "fused"))))
register_optimizer("sgd_momentum", _baseline(lambda p, lr, wd: torch.optim.SGD(
    p, lr=lr, momentum=0.9, weight_decay=wd, **_fast_kernel(p, "fused"))))
# AdaBelief decouples weight decay by default in pytorch-optimizer; kept as the library ships it.
register_optimizer("adabelief", _baseline(lambda p, lr, wd: _pytorch_optimizer("AdaBelief")(
    p, lr=lr, weight_decay=wd)))
register_optimizer("lookahead", _baseline(lambda p, lr, wd: _pytorch_optimizer("Lookahead")(
    torch.optim.Adam(p, lr=lr, weight_decay=wd, **_fast_kernel(p, "fused")), k=5, alpha=0.5)))
