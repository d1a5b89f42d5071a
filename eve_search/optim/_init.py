"""Seeding and the two population initializations (paper, Section "Proximity initialization").

One integer seed gives two generators, drawn once and never reseeded (paper, "Reproducibility"):
an initialization generator on the population's device and a CPU step generator for every donor
draw, jitter and mutation afterwards.
"""

from __future__ import annotations

import numpy as np
import torch

from eve_search._checks import InputError, check_int
from eve_search.optim._operators import latin_hypercube, proximity_population

__all__ = ["INITIALIZATIONS", "initial_population", "make_generators"]

INITIALIZATIONS = ("proximity", "lhs")


def make_generators(seed: int, device: torch.device) -> tuple[torch.Generator, torch.Generator]:
    """The (initialization, step) generator pair of one run, derived from one integer seed."""
    check_int("seed", seed, 0, types=(int, np.integer))
    # Independent streams from one seed, so the two generators never share a sequence.
    init_seed, step_seed = np.random.SeedSequence(int(seed)).generate_state(2, dtype=np.uint64)
    init_generator = torch.Generator(device=device)
    init_generator.manual_seed(int(init_seed))
    step_generator = torch.Generator()
    step_generator.manual_seed(int(step_seed))
    return init_generator, step_generator


def initial_population(init: str, size: int, dim: int, generator: torch.Generator, *,
                       sigma: float, anchor: torch.Tensor | None, dtype: torch.dtype,
                       device: torch.device) -> torch.Tensor:
    """(size, dim) unit-cube population: Latin hypercube, or proximity around ``anchor``.

    A proximity population without an anchor draws it uniformly (Algorithm 1, line 1).
    """
    if init == "lhs":
        return latin_hypercube(size, dim, generator, dtype=dtype, device=device)
    if init == "proximity":
        if anchor is None:
            anchor = torch.rand(dim, generator=generator, dtype=dtype, device=device)
        return proximity_population(anchor, size, sigma, generator)
    raise InputError(f"Invalid init: {init!r} (expected one of {', '.join(INITIALIZATIONS)})")
