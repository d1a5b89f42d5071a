"""The one search problem every tool solves, and its declared space in each tool's own format.

The problem: a task of eve-search (UCI Adult), one of its declared spaces (:mod:`eve_search.tasks.spaces`),
configurations trained as :class:`eve_search.engine.trial.Trial` under the calibrated cost rule with a pinned
backward/forward ratio (so a unit costs the same for every tool), at most ``max_units`` charged units
per configuration, a first fidelity of ``min_units`` and a reduction factor of ``reduction_factor``.

Every translation of the declared space lives here, generated from the declaration (never retyped):
Ray Tune's ``param_space``, ConfigSpace (DEHB), Syne Tune's ``config_space``; Optuna uses the space's
own :meth:`~eve_search.tasks.spaces.SearchSpace.suggest`. :func:`coerce` brings whatever a tool hands back
(NumPy scalars, strings from a command line, a float a hair outside its range) to the declared types,
so that a configuration means the same thing to the referee whichever tool proposed it.

This module imports only the standard library and eve-search at import time: it also runs inside the
tools' own virtual environments, and each tool's library is imported by the function that needs it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from eve_search.engine.ledger import rungs_from_geometric
from eve_search.tasks.spaces import Categorical, Fixed, Float, Int, SearchSpace, get_space

__all__ = ["Problem", "coerce", "config_key", "configspace", "ray_param_space", "syne_tune_space"]


@dataclass(frozen=True)
class Problem:
    """What every tool is given: the task, the declared space and the training and fidelity rules.

    Args:
        task: an eve-search task name (``adult``).
        space: one of the task's declared spaces (``hp``, ``arch``).
        configs: configurations of eve-search's synchronous SHA, whose spend sets every tool's budget
            (48, the paper's sweep).
        max_units: charged units one configuration trains at most (the last rung, the referee's budget).
        min_units: the first fidelity (SHA's first rung, ASHA's grace period, Optuna's min_resource,
            DEHB's min_fidelity); tools that count in steps report every ``min_units`` units.
        reduction_factor: eta of every successive-halving rule.
        backward_ratio: the pinned backward/forward ratio of the calibrated cost rule.
    """

    task: str = "adult"
    space: str = "hp"
    configs: int = 48
    max_units: int = 3000
    min_units: int = 100
    reduction_factor: int = 3
    backward_ratio: float = 2.0

    def __post_init__(self) -> None:
        for name in ("configs", "max_units", "min_units", "reduction_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Invalid {name}: {value!r} (expected an int >= 1)")
        if self.min_units > self.max_units:
            raise ValueError(f"Invalid min_units: {self.min_units} (expected at most max_units, {self.max_units})")
        if self.reduction_factor < 2:
            raise ValueError(f"Invalid reduction_factor: {self.reduction_factor} (expected an int >= 2)")
        if not (isinstance(self.backward_ratio, (int, float)) and math.isfinite(self.backward_ratio)
                and self.backward_ratio > 0):
            raise ValueError(f"Invalid backward_ratio: {self.backward_ratio!r} (expected a finite number > 0)")

    @property
    def declared(self) -> SearchSpace:
        return get_space(self.space)

    @property
    def rungs(self) -> tuple[int, ...]:
        """SHA's rungs: min_units * eta**k below max_units, then max_units (100, 300, 900, 2700, 3000)."""
        return rungs_from_geometric(self.min_units, self.max_units, self.reduction_factor)

    @property
    def steps(self) -> int:
        """Report points of the step-counting tools: every ``min_units`` units up to ``max_units`` (30)."""
        return math.ceil(self.max_units / self.min_units)

    def units_at(self, step: int) -> int:
        """The cumulative budget of report point ``step`` (1-based)."""
        return min(step * self.min_units, self.max_units)

    def level(self, units: float) -> int:
        """How far a trial got, in whole first fidelities (charged units overshoot a budget a little)."""
        return int(units // self.min_units) if units < self.max_units else self.steps

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def signature(self) -> str:
        """A short digest of everything that changes what a search finds (part of stored run names)."""
        text = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]


# Configurations --------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A NumPy scalar (or anything with ``item()``) as the Python number it holds."""
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, (str, bytes)) else value


def coerce(space: SearchSpace, raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` (a configuration as a tool hands it back) in the declared types and ranges.

    Fixed parameters take their declared value whatever ``raw`` says (tools that do not search them may
    leave them out); a categorical value must equal one of its choices (also as text: a command line
    turns 256 into '256'); numbers are clipped to their range (a tool's float arithmetic may step a
    hair outside it). A missing or unknown value raises ValueError naming the parameter.
    """
    config: dict[str, Any] = {}
    for p in space.parameters:
        if isinstance(p, Fixed):
            config[p.name] = p.value
            continue
        if p.name not in raw:
            raise ValueError(f"Invalid configuration: no value for {p.name!r} (got {sorted(raw)})")
        value = _plain(raw[p.name])
        if isinstance(p, Categorical):
            matches = [c for c in p.choices if c == value or str(c) == str(value)]
            if not matches:
                raise ValueError(f"Invalid configuration: {p.name}={value!r} (expected one of {list(p.choices)})")
            config[p.name] = matches[0]
        elif isinstance(p, Int):
            number = float(value)
            config[p.name] = min(p.high, max(p.low, int(round(number))))
        else:
            number = float(value)
            if not math.isfinite(number):
                raise ValueError(f"Invalid configuration: {p.name}={value!r} (expected a finite number)")
            config[p.name] = min(p.high, max(p.low, number))
    return config


def config_key(config: Mapping[str, Any]) -> str:
    """A canonical text of a configuration: equal for equal configurations (the referee's cache key)."""
    return json.dumps({k: _plain(v) for k, v in config.items()}, sort_keys=True)


# The declared space in each tool's format ---------------------------------------------------------------


def ray_param_space(space: SearchSpace) -> dict[str, Any]:
    """Ray Tune's ``param_space``: ``tune.loguniform``/``uniform``, ``tune.lograndint``/``randint`` (their
    upper bound is exclusive), ``tune.choice``; a fixed value as itself."""
    from ray import tune

    out: dict[str, Any] = {}
    for p in space.parameters:
        if isinstance(p, Float):
            out[p.name] = tune.loguniform(p.low, p.high) if p.log else tune.uniform(p.low, p.high)
        elif isinstance(p, Int):
            out[p.name] = tune.lograndint(p.low, p.high + 1) if p.log else tune.randint(p.low, p.high + 1)
        elif isinstance(p, Categorical):
            out[p.name] = tune.choice(list(p.choices))
        else:
            out[p.name] = p.value
    return out


def configspace(space: SearchSpace, seed: int | None = None) -> Any:
    """A ``ConfigSpace.ConfigurationSpace`` (DEHB's format): uniform floats and integers with their log
    flag, categoricals, constants."""
    import ConfigSpace as CS

    cs = CS.ConfigurationSpace(seed=seed)
    hyperparameters = []
    for p in space.parameters:
        if isinstance(p, Float):
            hyperparameters.append(CS.UniformFloatHyperparameter(p.name, p.low, p.high, log=p.log))
        elif isinstance(p, Int):
            hyperparameters.append(CS.UniformIntegerHyperparameter(p.name, p.low, p.high, log=p.log))
        elif isinstance(p, Categorical):
            hyperparameters.append(CS.CategoricalHyperparameter(p.name, list(p.choices)))
        else:
            hyperparameters.append(CS.Constant(p.name, p.value))
    if hasattr(cs, "add"):  # ConfigSpace 1.x
        cs.add(hyperparameters)
    else:
        cs.add_hyperparameters(hyperparameters)
    return cs


def syne_tune_space(space: SearchSpace) -> dict[str, Any]:
    """Syne Tune's ``config_space``: ``loguniform``/``uniform``, ``lograndint``/``randint`` (inclusive),
    ``choice``; a fixed value as itself (Syne Tune passes constants to the training script too)."""
    from syne_tune.config_space import choice, loguniform, lograndint, randint, uniform

    out: dict[str, Any] = {}
    for p in space.parameters:
        if isinstance(p, Float):
            out[p.name] = loguniform(p.low, p.high) if p.log else uniform(p.low, p.high)
        elif isinstance(p, Int):
            out[p.name] = lograndint(p.low, p.high) if p.log else randint(p.low, p.high)
        elif isinstance(p, Categorical):
            out[p.name] = choice(list(p.choices))
        else:
            out[p.name] = p.value
    return out
