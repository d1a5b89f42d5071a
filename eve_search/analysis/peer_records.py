"""The record format of the peer comparison (``searches/peers.py``): what a run and a referee score
hold, so that the script that writes them and the dashboard that reads them agree on one definition.

Records are Optuna study user attributes on the comparison's results store.

* A **run** is one study whose ``kind`` is :data:`RUN_KIND`: one search by one tool on one problem
  (task, space, budget multiple) with one search seed. :data:`RUN_FIELDS` lists the fields a reader may
  rely on, with what each means; a writer may store more (settings, event logs), which readers ignore.
  A run counts once ``status`` is ``"done"``; its ``referee`` is ``None`` until the referee has judged
  its pick.
* A **referee score** is one trial of a study whose ``kind`` is :data:`REFEREE_KIND`: one
  configuration trained by the referee (Adam) under one referee seed. :data:`REFEREE_FIELDS` lists its
  trial user attributes.

:func:`check_run` is the writer's side: it raises :class:`~eve_search.InputError` naming the first
field that does not match the format. :func:`read_run` and :func:`read_referee_score` are the
reader's: a record that does not match (an unfinished run, a tampered value) reads as ``None`` and is
never drawn from.

Example:
    >>> attrs = {"kind": "peer-run", "status": "done", "task": "adult", "space": "hp", "tool": "random",
    ...          "seed": 0, "multiplier": 1, "charged_units": 99.0, "wall_seconds": 2.0,
    ...          "referee": {"test": 0.85, "val": 0.86}, "rank": 3, "rank_of": 48,
    ...          "anytime": [{"fraction": 1.0, "wall": 2.0, "units": 99.0, "test": 0.85}]}
    >>> check_run(attrs)
    >>> run = read_run(attrs)
    >>> run.tool, run.test, run.rank, run.anytime[0].units
    ('random', 0.85, 3, 99.0)
    >>> read_run({**attrs, "wall_seconds": float("nan")}) is None
    True
    >>> check_run({**attrs, "seed": "zero"})
    Traceback (most recent call last):
    ...
    eve_search.InputError: peer run field 'seed' is 'zero'; expected an integer
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eve_search._checks import InputError, finite_number

__all__ = ["REFEREE_FIELDS", "REFEREE_KIND", "RUN_FIELDS", "RUN_KIND", "AnytimePoint", "PeerRun",
           "RefereeScore", "check_run", "read_referee_score", "read_run"]

RUN_KIND = "peer-run"
REFEREE_KIND = "peer-run-referee"  # sorts after "peer-run": the comparison comes first

#: The fields of a run that readers rely on: name -> (kind, required, meaning).
RUN_FIELDS: dict[str, tuple[str, bool, str]] = {
    "kind": ("text", True, f'"{RUN_KIND}"'),
    "status": ("text", True, '"done" once the run and its trials are stored; anything else is unfinished'),
    "task": ("text", True, "the task's registry name, e.g. adult or fashion-mnist"),
    "space": ("text", True, "the declared space's name"),
    "tool": ("text", True, "the search tool's key, e.g. eve-sha-eve, optuna-tpe-sh, ray-asha"),
    "seed": ("integer", True, "the search seed"),
    "multiplier": ("number", True, "the budget as a multiple of the reference search's charged units"),
    "charged_units": ("number", True, "evaluation-cost units the search spent (the paper's cost rule)"),
    "wall_seconds": ("number", True, "wall time of the search"),
    "cpu_seconds": ("number", False, "CPU time of the search's whole process tree"),
    "budget_units": ("number", False, "the budget the tool was given, in charged units"),
    "referee": ("mapping", False, "the referee's verdict on the pick: test and val accuracy (means over "
                                  "referee seeds); null until judged"),
    "rank": ("integer", False, "the pick's rank among the reference configurations, by referee test accuracy"),
    "rank_of": ("integer", False, "how many reference configurations were ranked"),
    "anytime": ("list", False, "points of the anytime curve, each with fraction (of the budget), wall, "
                               "units and test"),
    "problem": ("mapping", False, "the problem's settings; configs and max_units are read"),
    "cpus": ("integer", False, "CPUs each search was given"),
    "signature": ("text", False, "a digest of the problem's settings: runs compare only within one"),
    "versions": ("mapping", False, "package name -> version of what ran"),
    "pick_note": ("text", False, "how the tool chose its pick, when that needs saying"),
}

#: The user attributes of a referee-score trial: name -> (kind, required, meaning).
REFEREE_FIELDS: dict[str, tuple[str, bool, str]] = {
    "config_key": ("text", True, "the configuration's canonical key"),
    "referee_seed": ("integer", True, "the referee's training seed"),
    "val": ("number", True, "validation accuracy at the full budget"),
    "test": ("number", True, "test accuracy at the full budget"),
}


@dataclass(frozen=True)
class AnytimePoint:
    """The referee's test accuracy of the best configuration so far, at a share of the budget.

    Attributes:
        fraction: the share of the run's budget spent, in (0, 1].
        wall: wall seconds of the search by then.
        units: charged units by then.
        test: the referee's test accuracy of the best configuration so far.

    Example:
        >>> AnytimePoint(fraction=0.5, wall=20.0, units=600.0, test=0.8).units
        600.0
    """

    fraction: float
    wall: float
    units: float
    test: float


@dataclass(frozen=True)
class PeerRun:
    """One finished run, as :func:`read_run` reads it.

    Attributes:
        task, space, tool, seed, multiplier, charged_units, wall_seconds, cpu_seconds, budget_units, rank,
            rank_of, signature, versions: the fields of :data:`RUN_FIELDS` of these names.
        test, val: the referee's verdict on the pick (``referee``), None until judged.
        anytime: the anytime curve's points.
        configs, max_units: from the run's ``problem``.
        cpus: CPUs each search was given.
        note: the run's ``pick_note``.

    Example:
        >>> PeerRun(task="adult", space="hp", tool="random", seed=0, multiplier=1.0, charged_units=99.0,
        ...         wall_seconds=2.0).test is None
        True
    """

    task: str
    space: str
    tool: str
    seed: int
    multiplier: float
    charged_units: float
    wall_seconds: float
    cpu_seconds: float | None = None
    budget_units: float | None = None
    test: float | None = None
    val: float | None = None
    rank: int | None = None
    rank_of: int | None = None
    anytime: tuple[AnytimePoint, ...] = ()
    configs: int | None = None
    max_units: int | None = None
    cpus: int | None = None
    signature: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class RefereeScore:
    """One configuration trained by the referee under one seed.

    Attributes:
        config_key: the configuration's canonical key.
        referee_seed: the referee's training seed.
        val: validation accuracy at the full budget.
        test: test accuracy at the full budget.

    Example:
        >>> RefereeScore(config_key="k", referee_seed=0, val=0.86, test=0.85).test
        0.85
    """

    config_key: str
    referee_seed: int
    val: float
    test: float


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fits(kind: str, value: Any, required: bool) -> bool:
    if kind == "text":
        return isinstance(value, str) and (value != "" or not required)
    if kind == "integer":
        return _integer(value) is not None
    if kind == "number":
        return finite_number(value) is not None
    if kind == "mapping":
        return isinstance(value, Mapping)
    return isinstance(value, list)


def _anytime(value: Any) -> tuple[AnytimePoint, ...] | None:
    if not isinstance(value, list):
        return None
    points = []
    for point in value:
        if not isinstance(point, Mapping):
            return None
        numbers = {k: finite_number(point.get(k)) for k in ("fraction", "wall", "units", "test")}
        if any(v is None for v in numbers.values()):
            return None
        points.append(AnytimePoint(**numbers))
    return tuple(points)


def _mismatch(fields: Mapping[str, tuple[str, bool, str]], attrs: Mapping[str, Any]) -> str | None:
    """The first field of ``attrs`` that does not match ``fields``, as a message, or None."""
    expected = {"text": "a non-empty string", "integer": "an integer", "number": "a finite number",
                "mapping": "a mapping", "list": "a list"}
    for name, (kind, required, _) in fields.items():
        if name not in attrs or attrs[name] is None:
            if required:
                return f"field {name!r} is missing; expected {expected[kind]}"
            continue
        if not _fits(kind, attrs[name], required):
            wanted = expected[kind] if required or kind != "text" else "a string"
            return f"field {name!r} is {attrs[name]!r}; expected {wanted}"
    return None


def check_run(attrs: Mapping[str, Any]) -> None:
    """Raise :class:`~eve_search.InputError` unless ``attrs`` is a run in the documented format (of any
    ``status``: a writer checks a run before it marks it done).

    Args:
        attrs: a run's study user attributes.

    Raises:
        InputError: naming the first field of :data:`RUN_FIELDS` that is missing or of the wrong kind.

    Example:
        >>> check_run({"kind": "peer-run", "status": "done", "task": "adult", "space": "hp"})
        Traceback (most recent call last):
        ...
        eve_search.InputError: peer run field 'tool' is missing; expected a non-empty string
    """
    problem = _mismatch(RUN_FIELDS, attrs)
    if problem is None and attrs["kind"] != RUN_KIND:
        problem = f"field 'kind' is {attrs['kind']!r}; expected {RUN_KIND!r}"
    if problem is None and attrs.get("anytime") is not None and _anytime(attrs["anytime"]) is None:
        problem = "field 'anytime' has a point without finite fraction, wall, units and test"
    if problem is not None:
        raise InputError(f"peer run {problem}")


def read_run(attrs: Mapping[str, Any]) -> PeerRun | None:
    """A finished run in the documented format.

    Args:
        attrs: a run's study user attributes, as stored (possibly tampered with).

    Returns:
        The run, or None when it is unfinished or not in the format.

    Example:
        >>> read_run({"kind": "peer-run", "status": "running"}) is None
        True
    """
    try:
        check_run(attrs)
    except InputError:
        return None
    if attrs["status"] != "done":
        return None
    referee = attrs.get("referee") or {}
    problem = attrs.get("problem") or {}
    return PeerRun(
        task=attrs["task"], space=attrs["space"], tool=attrs["tool"], seed=attrs["seed"],
        multiplier=float(attrs["multiplier"]), charged_units=float(attrs["charged_units"]),
        wall_seconds=float(attrs["wall_seconds"]), cpu_seconds=finite_number(attrs.get("cpu_seconds")),
        budget_units=finite_number(attrs.get("budget_units")), test=finite_number(referee.get("test")),
        val=finite_number(referee.get("val")), rank=_integer(attrs.get("rank")), rank_of=_integer(attrs.get("rank_of")),
        anytime=_anytime(attrs.get("anytime")) or (), configs=_integer(problem.get("configs")),
        max_units=_integer(problem.get("max_units")), cpus=_integer(attrs.get("cpus")),
        signature=str(attrs.get("signature", "")),
        versions={str(k): str(v) for k, v in (attrs.get("versions") or {}).items()},
        note=str(attrs.get("pick_note", "")))


def read_referee_score(attrs: Mapping[str, Any]) -> RefereeScore | None:
    """A referee score in the documented format.

    Args:
        attrs: a referee-score trial's user attributes, as stored.

    Returns:
        The score, or None when ``attrs`` is not in the format of :data:`REFEREE_FIELDS`.

    Example:
        >>> read_referee_score({"config_key": "k", "referee_seed": 0, "val": 0.86, "test": 0.85}).val
        0.86
        >>> read_referee_score({"config_key": "k", "referee_seed": 0, "val": float("inf"), "test": 0.85}) is None
        True
    """
    if _mismatch(REFEREE_FIELDS, attrs) is not None:
        return None
    return RefereeScore(config_key=attrs["config_key"], referee_seed=attrs["referee_seed"],
                        val=float(attrs["val"]), test=float(attrs["test"]))
