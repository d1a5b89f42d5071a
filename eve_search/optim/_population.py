"""The EvE population and its steady-state iteration (paper, Algorithm 1), shared by both shapes.

:class:`Population` holds the slots, their values, the per-slot Adam moments, the iteration
counter and the step generator, and runs one iteration against an :class:`Evaluator`. The
evaluator is the only part that differs between the flat-vector minimizer (a batched function of
rows) and the ``torch.optim.Optimizer`` (a closure over a module's parameters); it also charges
every pass to the cost meter and says when the budget is spent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.optim.adam import adam

from eve_search._checks import InputError, check_int
from eve_search.optim._operators import (
    de_child,
    jittered_weight,
    polynomial_mutation_delta,
    sanitize,
)

__all__ = ["EvEHyperparameters", "Evaluator", "Layout", "Population", "check_hyperparameters"]


@dataclass(frozen=True)
class EvEHyperparameters:
    """Every number Algorithm 1 depends on (defaults: the paper's network setting)."""

    lr: float = 1e-3
    n_adam: int = 3
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    F: float = 0.5
    gamma: float = 1e-4
    sigma: float = 0.1
    polynomial_mutation: bool = False
    eta: float = 20.0
    population_size: int = 4


@dataclass(frozen=True)
class Layout:
    """How a :class:`Population`'s flat vector splits: ``segments``, the lengths that each have their own
    bounds (None: one segment), and ``groups``, the lengths that each step the Adam fallback with their
    own (lr, weight_decay) (None: one group).

    Example:
        >>> Layout(segments=[3, 2]).groups is None
        True
    """

    segments: list[int] | None = None
    groups: list[int] | None = None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_hyperparameters(h: EvEHyperparameters) -> None:
    """Raise InputError/TypeError naming the argument, its value and what is expected."""
    if not isinstance(h.population_size, int) or isinstance(h.population_size, bool):
        raise TypeError(f"Invalid population_size: {h.population_size!r} (expected an int >= 4)")
    if h.population_size < 4:
        raise InputError(f"Invalid population_size: {h.population_size} (rand-to-pbest/1 needs the "
                         "target plus three distinct donors, so at least 4)")
    if not _is_number(h.lr) or h.lr < 0:
        raise InputError(f"Invalid learning rate: {h.lr!r} (expected a finite number >= 0)")
    check_int("n_adam", h.n_adam, 0, detail="; 0 turns the fallback off")
    if not _is_number(h.weight_decay) or h.weight_decay < 0:
        raise InputError(f"Invalid weight_decay: {h.weight_decay!r} (expected a finite number >= 0)")
    if len(h.betas) != 2 or not all(_is_number(b) and 0.0 <= b < 1.0 for b in h.betas):
        raise InputError(f"Invalid betas: {h.betas!r} (expected two numbers in [0, 1))")
    if not _is_number(h.eps) or h.eps <= 0:
        raise InputError(f"Invalid eps: {h.eps!r} (expected a number > 0)")
    if not _is_number(h.F) or not 0.0 < h.F <= 2.0:
        raise InputError(f"Invalid F: {h.F!r} (expected a DE weight in (0, 2])")
    if not _is_number(h.gamma) or not 0.0 <= h.gamma < 2.0:
        raise InputError(f"Invalid gamma: {h.gamma!r} (expected a jitter in [0, 2))")
    if not _is_number(h.sigma) or h.sigma <= 0:
        raise InputError(f"Invalid sigma: {h.sigma!r} (expected a number > 0)")
    if not _is_number(h.eta) or h.eta < 0:
        raise InputError(f"Invalid eta: {h.eta!r} (expected a PM distribution index >= 0)")


class Evaluator(Protocol):
    """What an iteration needs from the objective. Implementations charge the cost meter."""

    def exhausted(self) -> bool:
        """True once the budget is spent: the iteration stops before its next evaluation."""

    def score(self, rows: torch.Tensor) -> list[float]:
        """Forward-only values of the points ``rows`` (shape (r, n), unit-cube coordinates)."""

    def gradient(self, x: torch.Tensor) -> tuple[float | None, torch.Tensor]:
        """Value (if known) at real-coordinate point ``x`` and the gradient there."""

    def score_work(self) -> float:
        """Forward-only value of the population's real-coordinate work point."""


class Population:
    """Slots, values, per-slot Adam moments, the iteration counter and the step generator.

    ``z`` is (population_size, n) in the unit cube. The real box is given per segment of the flat
    vector: ``lower``/``upper`` are either two (n,) vectors (one segment), or, with ``segments``
    (the segment lengths, summing to n), one bound per segment, each a 0-dim tensor (the same
    bound for the whole segment, e.g. a parameter tensor's Kaiming range, stored as one number) or
    a vector of that segment's length. Values start at +inf and are filled by the first iteration,
    which scores every slot on the first batch (line 2 of Algorithm 1); from then on, when
    ``refresh`` is true (a minibatch objective), the challenged slot is re-scored on each new batch
    first (line 6). ``layout`` (:class:`Layout`) holds ``segments`` and ``groups``: ``groups``
    (contiguous lengths summing to n) splits the Adam fallback into
    parameter groups, each stepping with its own (lr, weight_decay) from ``group_settings``, as
    ``torch.optim.Adam`` steps its groups; DE and selection see one vector.

    Storage: the population (4n), the per-slot moments (8n) and the child (n); the mutant (n) only
    when polynomial mutation is on. The child is dead once the Adam fallback starts (only its value
    is used after it has been mapped to the work point), so an evaluator may take its gradients into
    :attr:`scratch` instead of holding a gradient buffer of its own.
    """

    def __init__(self, z: torch.Tensor, lower: torch.Tensor | list[torch.Tensor],
                 upper: torch.Tensor | list[torch.Tensor], hyper: EvEHyperparameters,
                 step_generator: torch.Generator, *, refresh: bool, work: torch.Tensor,
                 layout: Layout = Layout()) -> None:
        size, n = z.shape
        segments, groups = layout.segments, layout.groups
        self.z = z
        if segments is None:
            segments, lower, upper = [n], [lower], [upper]
        if sum(segments) != n or len(lower) != len(segments) or len(upper) != len(segments):
            raise ValueError(f"Invalid segments: {len(segments)} segments of {sum(segments)} values, "
                             f"{len(lower)} lower and {len(upper)} upper bounds, for vectors of {n} values")
        self._segments = list(segments)
        self._lower = list(lower)
        self._upper = list(upper)
        self._span = [high - low for low, high in zip(self._lower, self._upper)]
        # A bound that is one number for its segment is also kept as a Python float: PyTorch's kernels take
        # a scalar operand on their vectorized path (two 0-dim tensor operands do not), which makes the
        # maps below 2-5x faster. For float32 and float64 the results are the same bits (a fused
        # multiply-add either way, tested); reduced precisions keep the tensor form, whose rounding differs.
        # (to_unit gains nothing this way: a subtraction and a division take one scalar operand each.)
        exact = z.dtype in (torch.float32, torch.float64)
        self._scalars = [(float(low), float(high), float(span)) if exact and low.dim() == 0 and high.dim() == 0
                         else None for low, high, span in zip(self._lower, self._upper, self._span)]
        self.generator = step_generator
        self.refresh = refresh
        self.values = [math.inf] * size
        self.scored = False
        self.iteration = 0
        # The fallback's real-coordinate point: the evaluator takes gradients there (for a module it
        # is the flat parameter buffer itself, so a fallback step copies nothing).
        self.work = work
        # Per-slot Adam moments (m, v, t) that persist for the whole run (Section "Adam fallback").
        self.exp_avg = torch.zeros_like(z)
        self.exp_avg_sq = torch.zeros_like(z)
        self.adam_steps = [torch.zeros((), dtype=torch.float32, device=z.device) for _ in range(size)]
        # PyTorch's fused kernel does Equation 4 (L2 folded into the gradient) in one pass.
        self._fused = z.device.type in ("cpu", "cuda")
        self.hyper = hyper
        # Work buffers, allocated once: an iteration allocates nothing of size n. The mutant exists
        # only while polynomial mutation is on (allocated at its first use).
        self._child = torch.empty(n, dtype=z.dtype, device=z.device)
        self._mutant: torch.Tensor | None = None
        # Parameter groups of the fallback (contiguous lengths summing to n), each with its own
        # (lr, weight_decay) in ``group_settings``; one group uses ``hyper``'s lr and weight decay.
        groups = [n] if groups is None else [int(g) for g in groups]
        if sum(groups) != n or any(g < 0 for g in groups):
            raise ValueError(f"Invalid groups: lengths {groups} do not split vectors of {n} values")
        self.groups = groups
        self.group_settings: list[tuple[float, float]] = [(hyper.lr, hyper.weight_decay)] * len(groups)
        self._group_step = torch.zeros((), dtype=torch.float32, device=z.device) if len(groups) > 1 else None

    @property
    def size(self) -> int:
        return self.z.shape[0]

    @property
    def scratch(self) -> torch.Tensor:
        """The child's buffer (n,): free for the evaluator's gradients during the Adam fallback."""
        return self._child

    def _full(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([part.expand(size) for part, size in zip(parts, self._segments)])

    @property
    def lower(self) -> torch.Tensor:
        """The lower bounds as one (n,) vector (built on request; the population stores them per segment)."""
        return self._full(self._lower)

    @property
    def upper(self) -> torch.Tensor:
        """The upper bounds as one (n,) vector (built on request)."""
        return self._full(self._upper)

    @property
    def span(self) -> torch.Tensor:
        """upper - lower as one (n,) vector (built on request)."""
        return self._full(self._span)

    def to_unit(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """z = clamp((x - x_l) / (x_u - x_l), 0, 1): a real point back into the unit cube."""
        for x_part, out_part, low, span in zip(x.split(self._segments, -1), out.split(self._segments, -1),
                                               self._lower, self._span):
            torch.sub(x_part, low, out=out_part).div_(span)
        return out.clamp_(0.0, 1.0)

    def clamp_to_box(self, x: torch.Tensor) -> torch.Tensor:
        """Clamp the real point ``x`` into [x_l, x_u] in place."""
        for part, low, high, scalars in zip(x.split(self._segments, -1), self._lower, self._upper, self._scalars):
            if scalars is None:
                torch.clamp(part, min=low, max=high, out=part)
            else:
                part.clamp_(scalars[0], scalars[1])
        return x

    @property
    def best_index(self) -> int:
        return min(range(self.size), key=self.values.__getitem__)

    @property
    def best_value(self) -> float:
        return min(self.values)

    def to_real(self, z: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """x = x_l + z * (x_u - x_l) (``z`` one point (n,) or rows (r, n))."""
        for z_part, out_part, low, span, scalars in zip(z.split(self._segments, -1), out.split(self._segments, -1),
                                                        self._lower, self._span, self._scalars):
            if scalars is None:
                torch.addcmul(low, z_part, span, out=out_part)
            else:
                torch.add(low, z_part, alpha=scalars[2], out=out_part)
        return out

    def iterate(self, evaluator: Evaluator) -> None:
        """One iteration of Algorithm 1 (lines 5-24). Stops early, consistently, when the budget runs out."""
        h = self.hyper
        if evaluator.exhausted():
            return  # a spent budget starts no iteration
        if not self.scored:
            self.values = [sanitize(v) for v in evaluator.score(self.z)]
            self.scored = True
            fresh = True  # every slot was just scored on this batch
        else:
            fresh = False
        i = self.iteration % self.size
        self.iteration += 1
        if self.refresh and not fresh:
            self.values[i] = sanitize(evaluator.score(self.z[i:i + 1])[0])

        others = [k for k in range(self.size) if k != i]
        picks = torch.randperm(len(others), generator=self.generator)[:3].tolist()
        a, b, c = (others[k] for k in picks)
        u = torch.rand((), generator=self.generator).item()
        F_t = jittered_weight(h.F, h.gamma, u)
        child = de_child(self.z, a, b, c, self.best_index, h.F, F_t, out=self._child)

        if h.polynomial_mutation:
            gene = int(torch.randint(child.numel(), (), generator=self.generator))
            r = torch.rand((), generator=self.generator).item()
            if self._mutant is None:
                self._mutant = torch.empty_like(child)
            mutant = self._mutant
            mutant.copy_(child)
            gene_value = float(child[gene])
            mutant[gene] = min(1.0, max(0.0, gene_value + polynomial_mutation_delta(gene_value, r, h.eta)))
            if evaluator.exhausted():
                return
            # Algorithm 1, lines 9 and 11: the child and then the mutant, each its own forward
            # evaluation (so each is timed as the algorithm performs it); a budget spent by the
            # child's evaluation leaves the mutant unscored.
            child_value = sanitize(evaluator.score(child.unsqueeze(0))[0])
            if not evaluator.exhausted():
                mutant_value = sanitize(evaluator.score(mutant.unsqueeze(0))[0])
                if mutant_value < child_value:  # PM's own gate: keep the mutant only if strictly better
                    child.copy_(mutant)
                    child_value = mutant_value
        else:
            if evaluator.exhausted():
                return
            child_value = sanitize(evaluator.score(child.unsqueeze(0))[0])

        if child_value < self.values[i] or h.n_adam == 0:
            if child_value < self.values[i]:  # strict greedy selection (Section "Selection")
                self.z[i].copy_(child)
                self.values[i] = child_value
            return
        # Here child_value >= values[i]: the child itself can no longer be accepted, so only its value
        # is needed from now on, and the burst may reuse its buffer (see ``scratch``).
        refined_value = self._adam_fallback(i, child, evaluator)
        if refined_value is None:
            return  # the budget ran out inside the burst
        if refined_value < child_value and refined_value < self.values[i]:
            # Only now map the refined point back to the unit cube (Algorithm 1, line 22).
            self.to_unit(self.work, out=self.z[i])
            self.values[i] = refined_value

    def _adam_fallback(self, i: int, child: torch.Tensor, evaluator: Evaluator) -> float | None:
        """n_adam Adam steps from the child in real coordinates with slot i's own moments.

        Returns the value of the refined point, which stays in ``self.work``; +inf when no step could
        be taken; None when the budget ran out before the burst ended.
        """
        h, work = self.hyper, self.work
        self.to_real(child, out=work)
        steps_taken = 0
        for _ in range(h.n_adam):
            if evaluator.exhausted():
                return None
            value, grad = evaluator.gradient(work)
            if value is not None and not math.isfinite(value):
                self._heal_moments(i)
                break
            if self._group_step is None:
                adam(params=[work], grads=[grad], exp_avgs=[self.exp_avg[i]], exp_avg_sqs=[self.exp_avg_sq[i]],
                     max_exp_avg_sqs=[], state_steps=[self.adam_steps[i]], fused=self._fused, foreach=False,
                     amsgrad=False, beta1=h.betas[0], beta2=h.betas[1], lr=h.lr, weight_decay=h.weight_decay,
                     eps=h.eps, maximize=False)
            else:
                self._grouped_adam(i, grad)
            self.clamp_to_box(work)
            steps_taken += 1
        if steps_taken == 0:
            return math.inf
        if evaluator.exhausted():
            return None
        value = sanitize(evaluator.score_work())
        if value == math.inf:
            self._heal_moments(i)
        return value

    def _grouped_adam(self, i: int, grad: torch.Tensor) -> None:
        """One Adam step of slot i with each parameter group's own lr and weight decay (like
        ``torch.optim.Adam`` with several groups): the groups share the slot's step count t."""
        h, step = self.hyper, self._group_step
        parts = zip(self.work.split(self.groups), grad.split(self.groups), self.exp_avg[i].split(self.groups),
                    self.exp_avg_sq[i].split(self.groups), self.group_settings)
        for work, g, m, v, (lr, weight_decay) in parts:
            if work.numel() == 0:
                continue
            step.copy_(self.adam_steps[i])  # every group takes step t + 1 from the same t
            adam(params=[work], grads=[g], exp_avgs=[m], exp_avg_sqs=[v], max_exp_avg_sqs=[], state_steps=[step],
                 fused=self._fused, foreach=False, amsgrad=False, beta1=h.betas[0], beta2=h.betas[1], lr=lr,
                 weight_decay=weight_decay, eps=h.eps, maximize=False)
        self.adam_steps[i].add_(1)

    def restart(self, z: torch.Tensor) -> None:
        """Start the population afresh from the slots ``z`` (unit cube): values +inf (the next
        iteration scores every slot on its batch, Algorithm 1, line 2) and every slot's Adam moments
        zero (a new trajectory). The iteration counter and the step generator run on."""
        if tuple(z.shape) != tuple(self.z.shape):
            raise ValueError(f"population shape {tuple(z.shape)} does not match {tuple(self.z.shape)}")
        self.z.copy_(z)
        self.values = [math.inf] * self.size
        self.scored = False
        self.exp_avg.zero_()
        self.exp_avg_sq.zero_()
        for step in self.adam_steps:
            step.zero_()

    def _heal_moments(self, i: int) -> None:
        """Restart slot i's Adam moments if a non-finite gradient reached them.

        A non-finite gradient makes the stepped point NaN, so the next value the burst computes is
        not finite: checking only then keeps the test off the hot path, and a poisoned slot never
        stays blocked from the fallback.
        """
        if not bool(torch.isfinite(self.exp_avg[i]).all() and torch.isfinite(self.exp_avg_sq[i]).all()):
            self.exp_avg[i].zero_()
            self.exp_avg_sq[i].zero_()
            self.adam_steps[i].zero_()

    def state_dict(self) -> dict[str, Any]:
        return {
            "z": self.z,
            "values": torch.tensor(self.values, dtype=torch.float64),
            "scored": self.scored,
            "iteration": self.iteration,
            "exp_avg": self.exp_avg,
            "exp_avg_sq": self.exp_avg_sq,
            "adam_steps": torch.stack(self.adam_steps),
            "step_generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; ValueError (naming the entry) when any entry does not fit this
        population, checked before anything is changed (``copy_`` would broadcast a smaller tensor)."""
        expected = {"z": tuple(self.z.shape), "exp_avg": tuple(self.z.shape), "exp_avg_sq": tuple(self.z.shape),
                    "adam_steps": (self.size,)}
        for key, shape in expected.items():
            value = state[key]
            found = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            if found != shape:
                raise ValueError(f"population {key} of shape {found} does not match this optimizer's {shape}")
        values = [float(v) for v in state["values"]]
        if len(values) != self.size:
            raise ValueError(f"population values: {len(values)} values for {self.size} slots")
        scored, iteration = bool(state["scored"]), int(state["iteration"])
        torch.Generator().set_state(state["step_generator"])  # refused here, before anything changes
        self.z.copy_(state["z"])
        self.values = values
        self.scored, self.iteration = scored, iteration
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
        for step, saved in zip(self.adam_steps, state["adam_steps"], strict=True):
            step.copy_(saved)
        self.generator.set_state(state["step_generator"])
