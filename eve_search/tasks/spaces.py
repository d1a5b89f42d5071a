"""Declared search spaces: named parameters with a kind, a range, a log scale, choices or a fixed value.

A space is a list of parameters, so the same declaration serves three readers: :meth:`SearchSpace.sample`
draws configurations from a configuration seed with the space's own generator (every optimizer and
every training seed sees exactly the same ones); :meth:`SearchSpace.suggest` lets an Optuna sampler
(TPE, random, QMC...) propose them; :meth:`SearchSpace.distributions` gives the results store real
Optuna distributions. A configuration is a plain dict with one key per parameter, any keys its task
needs. The built-in spaces are the paper's UCI Adult spaces (Appendix "UCI Adult"), ``hp`` and ``arch``,
and two Fashion-MNIST spaces in which configurations really differ, ``fashion-hp`` and ``fashion-arch``.

Example:
    >>> from eve_search.tasks.spaces import get_space
    >>> configs = get_space("arch").sample(48, seed=0)
    >>> len(configs), sorted(configs[0])
    (48, ['depth', 'lr', 'weight_decay', 'width'])
    >>> [p.name for p in get_space("hp").parameters]
    ['lr', 'weight_decay', 'width', 'depth']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from eve_search._checks import MAX_CONFIGS, WHY_CONFIGS, InputError, check_int
from eve_search.tasks._task import Config
from eve_search.tasks.models import hidden_layers

__all__ = [
    "Categorical",
    "Fixed",
    "Float",
    "Int",
    "Parameter",
    "SearchSpace",
    "get_space",
    "hidden_layers",
    "register_space",
    "space_names",
]


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True)
class Float:
    """A real parameter, uniform on [low, high] (``log=True``: uniform in log space, low > 0).

    Args:
        name: the configuration key.
        low: the smallest value (finite; > 0 with ``log=True``).
        high: the largest value (finite, > ``low``).
        log: draw uniformly in log space, as for learning rates.

    Example:
        >>> import torch
        >>> lr = Float("lr", 1e-4, 1e-1, log=True)
        >>> 1e-4 <= lr.draw(torch.Generator().manual_seed(0)) <= 1e-1
        True
        >>> lr.describe()
        'lr log-uniform [0.0001, 0.1]'
    """

    name: str
    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        if not (_number(self.low) and _number(self.high) and self.low < self.high):
            raise InputError(f"Invalid range for {self.name!r}: [{self.low!r}, {self.high!r}] (expected finite "
                             "low < high)")
        if self.log and self.low <= 0:
            raise InputError(f"Invalid low for log-scaled {self.name!r}: {self.low!r} (expected > 0)")

    def draw(self, generator: torch.Generator) -> float:
        u = torch.rand((), generator=generator, dtype=torch.float64).item()
        if self.log:
            return math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        return self.low + u * (self.high - self.low)

    def suggest(self, trial: Any) -> float:
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def distribution(self) -> Any:
        from optuna.distributions import FloatDistribution

        return FloatDistribution(self.low, self.high, log=self.log)

    def describe(self) -> str:
        return f"{self.name} {'log-' if self.log else ''}uniform [{self.low:g}, {self.high:g}]"


@dataclass(frozen=True)
class Int:
    """An integer parameter, uniform on {low, ..., high} (``log=True``: uniform in log space).

    Args:
        name: the configuration key.
        low: the smallest value (an int; >= 1 with ``log=True``).
        high: the largest value (an int >= ``low``).
        log: draw uniformly in log space.

    Example:
        >>> import torch
        >>> depth = Int("depth", 1, 4)
        >>> depth.draw(torch.Generator().manual_seed(0)) in {1, 2, 3, 4}
        True
    """

    name: str
    low: int
    high: int
    log: bool = False

    def __post_init__(self) -> None:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (self.low, self.high)) or \
                self.low > self.high:
            raise InputError(f"Invalid range for {self.name!r}: [{self.low!r}, {self.high!r}] (expected ints, "
                             "low <= high)")
        if self.log and self.low < 1:
            raise InputError(f"Invalid low for log-scaled {self.name!r}: {self.low!r} (expected >= 1)")

    def draw(self, generator: torch.Generator) -> int:
        if self.log:
            u = torch.rand((), generator=generator, dtype=torch.float64).item()
            value = math.exp(math.log(self.low - 0.5) + u * (math.log(self.high + 0.5) - math.log(self.low - 0.5)))
            return min(self.high, max(self.low, round(value)))
        return self.low + int(torch.randint(self.high - self.low + 1, (), generator=generator))

    def suggest(self, trial: Any) -> int:
        return trial.suggest_int(self.name, self.low, self.high, log=self.log)

    def distribution(self) -> Any:
        from optuna.distributions import IntDistribution

        return IntDistribution(self.low, self.high, log=self.log)

    def describe(self) -> str:
        return f"{self.name} {'log-' if self.log else ''}int [{self.low}, {self.high}]"


@dataclass(frozen=True)
class Categorical:
    """One of ``choices``, each equally likely.

    Args:
        name: the configuration key.
        choices: the values (at least one; any values an Optuna categorical accepts).

    Example:
        >>> import torch
        >>> Categorical("width", (64, 256)).draw(torch.Generator().manual_seed(0)) in (64, 256)
        True
    """

    name: str
    choices: tuple[Any, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(self.choices))
        if not self.choices:
            raise InputError(f"Invalid choices for {self.name!r}: () (expected at least one)")

    def draw(self, generator: torch.Generator) -> Any:
        return self.choices[int(torch.randint(len(self.choices), (), generator=generator))]

    def suggest(self, trial: Any) -> Any:
        return trial.suggest_categorical(self.name, list(self.choices))

    def distribution(self) -> Any:
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution(self.choices)

    def describe(self) -> str:
        return f"{self.name} in {{{', '.join(map(str, self.choices))}}}"


@dataclass(frozen=True)
class Fixed:
    """A constant: part of every configuration, drawn from nothing.

    Args:
        name: the configuration key.
        value: the value every configuration gets.

    Example:
        >>> import torch
        >>> Fixed("weight_decay", 1e-4).draw(torch.Generator())
        0.0001
    """

    name: str
    value: Any

    def draw(self, generator: torch.Generator) -> Any:
        return self.value

    def suggest(self, trial: Any) -> Any:
        # A one-choice categorical keeps the whole configuration in the Optuna trial's parameters.
        return trial.suggest_categorical(self.name, [self.value])

    def distribution(self) -> Any:
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution((self.value,))

    def describe(self) -> str:
        return f"{self.name} {self.value:g}" if _number(self.value) else f"{self.name} {self.value}"


Parameter = Float | Int | Categorical | Fixed


@dataclass(frozen=True)
class SearchSpace:
    """A named list of parameters, drawn in the order they are declared.

    Args:
        name: registry key.
        parameters: the declared parameters (names unique).
        description: one line for ``--help`` and reports (default: made from the parameters).

    Example:
        >>> space = SearchSpace("demo", (Categorical("width", (16, 64)), Float("lr", 1e-4, 1e-1, log=True)))
        >>> space.sample(2, seed=0) == space.sample(2, seed=0)
        True
        >>> sorted(space.sample(1)[0])
        ['lr', 'width']
        >>> space.description
        'width in {16, 64}; lr log-uniform [0.0001, 0.1]'
    """

    name: str
    parameters: tuple[Parameter, ...]
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", tuple(self.parameters))
        if not self.parameters:
            raise InputError(f"Invalid parameters for space {self.name!r}: () (expected at least one)")
        if not all(isinstance(p, (Float, Int, Categorical, Fixed)) for p in self.parameters):
            raise TypeError(f"Invalid parameters for space {self.name!r}: expected Float, Int, Categorical or Fixed")
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise InputError(f"Invalid parameters for space {self.name!r}: names repeat ({names})")
        if not self.description:
            object.__setattr__(self, "description", "; ".join(p.describe() for p in self.parameters))

    def draw(self, generator: torch.Generator) -> Config:
        """One configuration from ``generator``."""
        return {p.name: p.draw(generator) for p in self.parameters}

    def sample(self, count: int = 48, seed: int = 0) -> list[Config]:
        """``count`` configurations from configuration seed ``seed`` (the same every time); ``count`` is at
        most :data:`~eve_search._checks.MAX_CONFIGS` (InputError before anything is drawn)."""
        check_int("count", count, 1)
        if count > MAX_CONFIGS:
            raise InputError(f"Invalid count: {count!r} (expected at most {MAX_CONFIGS:,} configurations: "
                             f"{WHY_CONFIGS})")
        check_int("seed", seed, 0)
        generator = torch.Generator().manual_seed(seed)
        return [self.draw(generator) for _ in range(count)]

    def suggest(self, trial: Any) -> Config:
        """A configuration proposed by an Optuna trial's sampler (``trial.suggest_*`` per parameter)."""
        return {p.name: p.suggest(trial) for p in self.parameters}

    def distributions(self) -> dict[str, Any]:
        """The parameters as Optuna distributions (fixed values as one-choice categoricals)."""
        return {p.name: p.distribution() for p in self.parameters}


_SPACES: dict[str, SearchSpace] = {}


def register_space(space: SearchSpace) -> None:
    """Add (or replace) a space under ``space.name``; user code can extend the registry.

    Args:
        space: the space to register.

    Raises:
        TypeError: ``space`` is not a :class:`SearchSpace`.

    Example:
        >>> register_space(SearchSpace("demo-lr", (Float("lr", 1e-3, 1e-1, log=True),)))
        >>> get_space("demo-lr").parameters[0].name
        'lr'
        >>> _ = _SPACES.pop("demo-lr")  # this example leaves the registry as it found it
    """
    if not isinstance(space, SearchSpace):
        raise TypeError(f"Invalid space: {space!r} (expected a SearchSpace)")
    _SPACES[space.name] = space


def space_names() -> list[str]:
    """The names of every registered space, sorted.

    Returns:
        The names :func:`get_space` accepts.

    Example:
        >>> {"arch", "hp"} <= set(space_names())
        True
    """
    return sorted(_SPACES)


def get_space(name: str) -> SearchSpace:
    """The registered space called ``name``.

    Args:
        name: a name from :func:`space_names`.

    Returns:
        The :class:`SearchSpace`.

    Raises:
        InputError: no space has that name (the message lists those that do).

    Example:
        >>> get_space("arch").name
        'arch'
    """
    try:
        return _SPACES[name]
    except KeyError:
        raise InputError(f"Unknown space: {name!r} (expected one of {', '.join(space_names())})") from None


def _declare(name: str, parameters: Sequence[Parameter], description: str) -> None:
    register_space(SearchSpace(name, tuple(parameters), description))


# The paper's two UCI Adult spaces (Appendix "UCI Adult"). The declaration order is the draw order,
# which fixes the 48 configurations of configuration seed 0.
_declare("hp", [Float("lr", 1e-4, 1e-2, log=True), Float("weight_decay", 1e-6, 1e-2, log=True),
                Fixed("width", 256), Fixed("depth", 2)],
         "MLP 2x256; lr log-uniform [1e-4, 1e-2]; weight decay log-uniform [1e-6, 1e-2]")
_declare("arch", [Categorical("width", (64, 128, 256, 512)), Categorical("depth", (1, 2)),
                  Float("lr", 1e-4, 1e-2, log=True), Fixed("weight_decay", 5e-4)],
         "width {64,128,256,512} x depth {1,2}; lr log-uniform [1e-4, 1e-2]; weight decay 5e-4")


# Two Fashion-MNIST spaces (task "fashion-mnist"), made so that the choice of configuration matters:
# the learning rate spans five decades, so its worst values train to chance accuracy and its best to
# the high 80s (searches/README.md, "Fashion-MNIST", measures how much they discriminate).
_declare("fashion-hp", [Float("lr", 1e-5, 1.0, log=True), Float("weight_decay", 1e-6, 1e-1, log=True),
                        Float("dropout", 0.0, 0.8), Fixed("width", 256), Fixed("depth", 2)],
         "MLP 2x256; lr log-uniform [1e-5, 1]; weight decay log-uniform [1e-6, 0.1]; dropout uniform [0, 0.8]")
_declare("fashion-arch", [Categorical("width", (32, 64, 128, 256, 512)), Categorical("depth", (1, 2, 3)),
                          Float("lr", 1e-5, 1.0, log=True), Fixed("weight_decay", 0.0)],
         "width {32,64,128,256,512} x depth {1,2,3}; lr log-uniform [1e-5, 1]; no weight decay")
