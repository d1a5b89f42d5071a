"""Search spaces: how configurations are sampled and what network each one trains (SPEC 4).

A configuration is a plain dict with four keys, every one present in every space so that results
print and store alike: ``lr``, ``weight_decay``, ``width`` and ``depth`` (hidden layers of ``width``
units). Configurations are sampled once from a configuration seed with the space's own generator,
so every optimizer and every training seed sees exactly the same ones.

Example:
    >>> from eve_search.spaces import get_space
    >>> configs = get_space("arch").sample(48, seed=0)
    >>> len(configs), sorted(configs[0])
    (48, ['depth', 'lr', 'weight_decay', 'width'])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["SearchSpace", "get_space", "hidden_layers", "register_space", "space_names"]

Config = dict[str, Any]


def _log_uniform(generator: torch.Generator, low: float, high: float) -> float:
    u = torch.rand((), generator=generator, dtype=torch.float64).item()
    return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))


def _choice(generator: torch.Generator, options: tuple) -> Any:
    return options[int(torch.randint(len(options), (), generator=generator))]


@dataclass(frozen=True)
class SearchSpace:
    """A named way to draw one configuration from a generator.

    Args:
        name: registry key.
        description: one line for ``--help`` and reports.
        draw: draws one configuration (all four keys) from the generator.
    """

    name: str
    description: str
    draw: Callable[[torch.Generator], Config]

    def sample(self, count: int = 48, seed: int = 0) -> list[Config]:
        """``count`` configurations from configuration seed ``seed`` (the same every time)."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"Invalid count: {count!r} (expected an int >= 1)")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"Invalid seed: {seed!r} (expected an int >= 0)")
        generator = torch.Generator().manual_seed(seed)
        configs = []
        for _ in range(count):
            config = self.draw(generator)
            missing = {"lr", "weight_decay", "width", "depth"} - set(config)
            if missing:
                raise ValueError(f"space {self.name!r} drew a configuration without {sorted(missing)}")
            configs.append(config)
        return configs


def hidden_layers(config: Config) -> list[int]:
    """The hidden widths of a configuration's MLP."""
    return [int(config["width"])] * int(config["depth"])


def _draw_hp(generator: torch.Generator) -> Config:
    lr = _log_uniform(generator, 1e-4, 1e-2)
    weight_decay = _log_uniform(generator, 1e-6, 1e-2)
    return {"lr": lr, "weight_decay": weight_decay, "width": 256, "depth": 2}


def _draw_arch(generator: torch.Generator) -> Config:
    width = _choice(generator, (64, 128, 256, 512))
    depth = _choice(generator, (1, 2))
    lr = _log_uniform(generator, 1e-4, 1e-2)
    return {"lr": lr, "weight_decay": 5e-4, "width": width, "depth": depth}


_SPACES: dict[str, SearchSpace] = {}


def register_space(space: SearchSpace) -> None:
    """Add (or replace) a space under ``space.name``; user code can extend the registry."""
    if not isinstance(space, SearchSpace):
        raise TypeError(f"Invalid space: {space!r} (expected a SearchSpace)")
    _SPACES[space.name] = space


def space_names() -> list[str]:
    return sorted(_SPACES)


def get_space(name: str) -> SearchSpace:
    try:
        return _SPACES[name]
    except KeyError:
        raise ValueError(f"Unknown space: {name!r} (expected one of {', '.join(space_names())})") from None


register_space(SearchSpace("hp", "MLP 2x256; lr log-uniform [1e-4, 1e-2]; weight decay log-uniform [1e-6, 1e-2]",
                           _draw_hp))
register_space(SearchSpace("arch", "width {64,128,256,512} x depth {1,2}; lr log-uniform [1e-4, 1e-2]; "
                                   "weight decay 5e-4", _draw_arch))
