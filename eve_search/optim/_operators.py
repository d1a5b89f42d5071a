"""EvE's variation operators as pure tensor functions (paper, Section "Method").

Everything here works in the unit cube z in [0, 1]^n (the Adam fallback of Equation 4, which works
in real coordinates, is PyTorch's own functional Adam, driven from ``_population.py``). Functions
take their randomness as arguments or from an explicit ``torch.Generator``, so that the
bookkeeping in ``_population.py`` decides what is drawn and when.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "de_child",
    "de_weights",
    "jittered_weight",
    "latin_hypercube",
    "polynomial_mutation_delta",
    "proximity_population",
    "sanitize",
]


def sanitize(value: float) -> float:
    """A value that is not finite becomes +inf: never accepted, always replaceable (not in the paper; see docs/how-it-works.md, "EvE")."""
    return value if math.isfinite(value) else math.inf


def latin_hypercube(size: int, dim: int, generator: torch.Generator, *, dtype=torch.float32,
                    device=None) -> torch.Tensor:
    """``size`` points in [0,1]^dim, exactly one per stratum [k/size, (k+1)/size) per coordinate.

    The strata of each coordinate are permuted independently (argsort of uniform keys gives an
    independent random permutation per column), then each point is placed uniformly inside its
    stratum.
    """
    keys = torch.rand(size, dim, generator=generator, dtype=dtype, device=device)
    strata = keys.argsort(dim=0).to(dtype)
    offsets = torch.rand(size, dim, generator=generator, dtype=dtype, device=device)
    # (k + u) / size can round up to exactly 1.0 in float32; keep it inside the box.
    return strata.add_(offsets).div_(size).clamp_(0.0, 1.0)


def proximity_population(anchor: torch.Tensor, size: int, sigma: float,
                         generator: torch.Generator) -> torch.Tensor:
    """Equation 1: the anchor plus ``size - 1`` Gaussian jitters of it, clamped to [0, 1]."""
    population = anchor.unsqueeze(0).repeat(size, 1)
    noise = torch.randn(size - 1, anchor.numel(), generator=generator, dtype=anchor.dtype,
                        device=anchor.device)
    population[1:].add_(noise, alpha=sigma).clamp_(0.0, 1.0)
    return population


def jittered_weight(F: float, gamma: float, u: float) -> float:
    """F_t = F (1 + gamma (u - 0.5)): the per-iteration jitter of the difference term (Eq. 2)."""
    return F * (1.0 + gamma * (u - 0.5))


def de_weights(size: int, a: int, b: int, c: int, best: int, F: float, F_t: float) -> list[float]:
    """Equation 2 expanded: z_child = sum_k w_k z_k before clamping, with
    w_a += 1 - F, w_best += F, w_b += F_t, w_c -= F_t (a may equal best).
    """
    weights = [0.0] * size
    weights[a] += 1.0 - F
    weights[best] += F
    weights[b] += F_t
    weights[c] -= F_t
    return weights


def de_child(z: torch.Tensor, a: int, b: int, c: int, best: int, F: float, F_t: float, *,
             out: torch.Tensor) -> torch.Tensor:
    """Equation 2, rand-to-pbest/1: clamp(z_a + F_t (z_b - z_c) + F (z_best - z_a), 0, 1).

    Computed as one weighted sum of the population's rows (a single matrix-vector product that
    reads each slot once) into ``out``, so that no evaluation allocates a vector of size n.
    """
    weights = torch.tensor(de_weights(z.shape[0], a, b, c, best, F, F_t), dtype=z.dtype, device=z.device)
    torch.mv(z.t(), weights, out=out)
    return out.clamp_(0.0, 1.0)


def polynomial_mutation_delta(z: float, r: float, eta: float, lower: float = 0.0,
                              upper: float = 1.0) -> float:
    """Equation 3: the bounded polynomial-mutation step delta_q of one gene (NSGA-II's PM).

    The mutated gene is ``z + delta_q * (upper - lower)``; it never leaves [lower, upper].
    """
    span = upper - lower
    delta_1 = (z - lower) / span
    delta_2 = (upper - z) / span
    power = 1.0 / (eta + 1.0)
    if r <= 0.5:
        base = 2.0 * r + (1.0 - 2.0 * r) * (1.0 - delta_1) ** (eta + 1.0)
        return base ** power - 1.0
    base = 2.0 * (1.0 - r) + 2.0 * (r - 0.5) * (1.0 - delta_2) ** (eta + 1.0)
    return 1.0 - base ** power
