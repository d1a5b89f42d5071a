"""A recorded pool: configurations of one search space, each trained once along one trajectory per
trainer, with its score at every rung budget and the seconds it took to get there.

A pool is what a scheduler needs to be replayed without training (Syne Tune calls the same idea a
blackbox repository, and its simulator backend replays one in simulated time): the simulator
(:mod:`eve_search.engine.simulator`) runs the real scheduling core over it, and the scale and peer
benchmarks compare schedulers on it at 1 to 256 simulated workers in seconds. Because every
trajectory is continuous (``train_to`` at each budget, never restarted), the score of a
configuration at budget ``b`` is exactly what any scheduler that trains it to ``b`` would see, and
the seconds between two budgets are what that stretch of training cost.

The file is JSON (gzip-compressed when its name ends in ``.gz``): only numbers, strings and lists,
so loading one never runs code. :func:`load_pool` checks every field and answers a damaged or
tampered file with one line that names it.

Format (version 1)::

    {"format": "eve-search-pool", "version": 1, "task": "adult", "space": "arch", "metric": "accuracy",
     "mode": "max", "budgets": [100, 300, ...], "config_seed": 0, "seed": 0, "backward_ratio": 2.0,
     "referee": "adam", "recorded": {...free-form notes: date, machine, load...},
     "configs": [{"width": 64, ...}, ...],
     "trainers": {"adam": {"score": [[...per budget] per config], "test": [[...]], "seconds": [[...]]},
                  "eve": {...}}}

``seconds`` are cumulative training wall seconds at each budget. ``referee`` names the trainer
whose test score at the last budget judges a search's pick (a held-out score that no scheduler saw).

Example:
    >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1, 3),
    ...                     configs=[{"lr": 0.1}, {"lr": 0.01}], referee="adam",
    ...                     trainers={"adam": TrainerRecord(score=[[0.5, 0.6], [0.7, 0.8]],
    ...                                                     test=[[0.5, 0.6], [0.7, 0.75]],
    ...                                                     seconds=[[0.1, 0.3], [0.2, 0.5]])})
    >>> pool.segment_seconds("adam", 1, 1, 0), pool.referee_score(1)
    (0.3, 0.75)
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eve_search._checks import InputError
from eve_search.engine.ledger import check_rungs

__all__ = ["POOL_FORMAT", "PoolError", "RecordedPool", "TrainerRecord", "load_pool", "save_pool"]

POOL_FORMAT = "eve-search-pool"
POOL_VERSION = 1
MAX_POOL_CONFIGS = 1_000_000


class PoolError(InputError):
    """A pool file that cannot be read or is not a valid pool (the message names the file and field)."""


@dataclass
class TrainerRecord:
    """One trainer's trajectories: per configuration, per budget, the validation score, the test score
    and the cumulative training seconds.

    Attributes:
        score: ``score[k][b]``, configuration k's validation score at budget number b.
        test: the test scores, alike.
        seconds: the cumulative training seconds, alike.

    Example:
        >>> TrainerRecord(score=[[0.5, 0.6]], test=[[0.5, 0.6]], seconds=[[0.1, 0.3]]).seconds[0][-1]
        0.3
    """

    score: list[list[float]]
    test: list[list[float]]
    seconds: list[list[float]]


@dataclass
class RecordedPool:
    """A recorded pool (see the module's docstring for the file format).

    Attributes:
        task, space, metric, mode: what was trained and how a score ranks (``"max"`` or ``"min"``).
        budgets: the recorded budgets, increasing.
        configs: the configurations, in sampling order.
        trainers: each trainer's :class:`TrainerRecord`.
        referee: the trainer whose test score at the last budget judges a pick.
        config_seed, seed, backward_ratio: how the configurations were drawn and trained.
        recorded: free-form notes (date, machine, load).

    Example:
        >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1,),
        ...                     configs=[{}], referee="adam", trainers={"adam": TrainerRecord([[0.5]], [[0.4]], [[0.1]])})
        >>> pool.size, pool.referee_score(0)
        (1, 0.4)
    """

    task: str
    space: str
    metric: str
    mode: str
    budgets: tuple[int, ...]
    configs: list[dict[str, Any]]
    trainers: dict[str, TrainerRecord]
    referee: str
    config_seed: int = 0
    seed: int = 0
    backward_ratio: float | None = None
    recorded: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.budgets = check_rungs(self.budgets)
        if self.mode not in ("max", "min"):
            raise PoolError(f"Invalid mode: {self.mode!r} (expected 'max' or 'min')")
        if self.referee not in self.trainers:
            raise PoolError(f"Invalid referee: {self.referee!r} (expected one of the pool's trainers: "
                            f"{', '.join(sorted(self.trainers)) or 'none'})")
        for name, record in self.trainers.items():
            for part in ("score", "test", "seconds"):
                rows = getattr(record, part)
                if len(rows) != len(self.configs):
                    raise PoolError(f"Invalid pool: trainer {name!r} has {len(rows)} {part} rows for "
                                    f"{len(self.configs)} configurations")
                for k, row in enumerate(rows):
                    if len(row) != len(self.budgets):
                        raise PoolError(f"Invalid pool: trainer {name!r}, configuration {k}: {len(row)} {part} "
                                        f"values for {len(self.budgets)} budgets")
            for k, row in enumerate(record.seconds):
                if any(not math.isfinite(s) or s < 0 for s in row) or any(b < a for a, b in zip(row, row[1:])):
                    raise PoolError(f"Invalid pool: trainer {name!r}, configuration {k}: seconds {row} (expected "
                                    "finite, non-negative and non-decreasing cumulative seconds)")

    @property
    def size(self) -> int:
        return len(self.configs)

    def rung_positions(self, rungs: Sequence[int]) -> list[int]:
        """Where each rung budget is among the pool's budgets (a search can replay only recorded budgets)."""
        missing = [r for r in rungs if r not in self.budgets]
        if missing:
            raise InputError(f"Invalid rungs: {', '.join(map(str, rungs))} (the pool recorded budgets "
                             f"{', '.join(map(str, self.budgets))}; {', '.join(map(str, missing))} is not among them)")
        return [self.budgets.index(r) for r in rungs]

    def score(self, trainer: str, index: int, position: int) -> float:
        """The validation score of configuration ``index`` at the pool's budget number ``position``."""
        return self.trainers[trainer].score[index][position]

    def segment_seconds(self, trainer: str, index: int, position: int, previous: int | None = None) -> float:
        """Seconds to train configuration ``index`` from budget number ``previous`` (None: from the
        start) to budget number ``position``."""
        seconds = self.trainers[trainer].seconds[index]
        return seconds[position] - (0.0 if previous is None else seconds[previous])

    def referee_score(self, index: int) -> float:
        """The referee's held-out test score of configuration ``index`` at the last budget."""
        return self.trainers[self.referee].test[index][-1]

    def as_dict(self) -> dict[str, Any]:
        return {"format": POOL_FORMAT, "version": POOL_VERSION, "task": self.task, "space": self.space,
                "metric": self.metric, "mode": self.mode, "budgets": list(self.budgets),
                "config_seed": self.config_seed, "seed": self.seed, "backward_ratio": self.backward_ratio,
                "referee": self.referee, "recorded": self.recorded, "configs": self.configs,
                "trainers": {name: {"score": r.score, "test": r.test, "seconds": r.seconds}
                             for name, r in self.trainers.items()}}


def save_pool(pool: RecordedPool, path: Path) -> None:
    """Write ``pool`` as JSON (gzip when the name ends in ``.gz``), atomically: a reader sees the old
    file or the new one, never a part.

    Args:
        pool: the pool.
        path: the file to write.

    Example:
        >>> import pathlib, tempfile
        >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1,),
        ...                     configs=[{}], referee="adam", trainers={"adam": TrainerRecord([[0.5]], [[0.4]], [[0.1]])})
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "toy.json.gz"
        >>> save_pool(pool, path)
        >>> load_pool(path).trainers["adam"].score
        [[0.5]]
    """
    from eve_search.engine.checkpoint import save_atomically

    text = json.dumps(pool.as_dict(), separators=(",", ":"), allow_nan=True).encode()
    save_atomically(gzip.compress(text, mtime=0) if str(path).endswith(".gz") else text, Path(path))


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(value)
    return float(value)


def _rows(value: Any, where: str) -> list[list[float]]:
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise PoolError(f"{where} is not a list of lists of numbers")
    try:
        return [[_number(x) for x in row] for row in value]
    except TypeError as error:
        raise PoolError(f"{where} holds {error.args[0]!r} (expected numbers)") from None


def load_pool(path: Path | str) -> RecordedPool:
    """Read a pool file written by :func:`save_pool` (or by hand), checking every field.

    Args:
        path: the file (JSON, gzip-compressed or not).

    Returns:
        The :class:`RecordedPool`.

    Raises:
        PoolError: the file is missing, unreadable, not JSON, or not a valid pool (one line, naming it).

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "bad.json"
        >>> _ = path.write_text('{"format": "eve-search-pool", "version": 1, "configs": [], "trainers": {}}')
        >>> load_pool(path)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        eve_search.engine.pool.PoolError: Invalid pool '...bad.json': trainers is not a non-empty object
    """
    path = Path(path)
    where = f"Invalid pool {str(path)!r}"
    try:
        content = path.read_bytes()
        if content[:2] == b"\x1f\x8b":
            content = gzip.decompress(content)
        data = json.loads(content)
    except (OSError, EOFError, ValueError, RecursionError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error) or type(error).__name__
        raise PoolError(f"{where}: {reason.splitlines()[0]}") from None
    if not isinstance(data, dict) or data.get("format") != POOL_FORMAT:
        raise PoolError(f"{where}: not an eve-search pool (expected \"format\": \"{POOL_FORMAT}\")")
    if data.get("version") != POOL_VERSION:
        raise PoolError(f"{where}: version {data.get('version')!r} (this eve-search reads version {POOL_VERSION})")
    try:
        configs = data["configs"]
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            raise PoolError(f"{where}: configs is not a list of objects")
        if len(configs) > MAX_POOL_CONFIGS:
            raise PoolError(f"{where}: {len(configs)} configurations (at most {MAX_POOL_CONFIGS:,})")
        trainers = data["trainers"]
        if not isinstance(trainers, Mapping) or not trainers:
            raise PoolError(f"{where}: trainers is not a non-empty object")
        records = {}
        for name, record in trainers.items():
            if not isinstance(record, Mapping):
                raise PoolError(f"{where}: trainer {name!r} is not an object")
            records[str(name)] = TrainerRecord(
                *(_rows(record.get(part), f"{where}: trainer {name!r}, {part}") for part in ("score", "test", "seconds")))
        for key in ("task", "space", "metric", "referee"):
            if not isinstance(data.get(key), str):
                raise PoolError(f"{where}: {key} is {data.get(key)!r} (expected a string)")
        ratio = data.get("backward_ratio")
        recorded = data.get("recorded", {})
        return RecordedPool(task=data["task"], space=data["space"], metric=data["metric"], mode=data.get("mode"),
                            budgets=tuple(data["budgets"]) if isinstance(data.get("budgets"), list) else (),
                            configs=configs, trainers=records, referee=data["referee"],
                            config_seed=int(_number(data.get("config_seed", 0))), seed=int(_number(data.get("seed", 0))),
                            backward_ratio=None if ratio is None else _number(ratio),
                            recorded=recorded if isinstance(recorded, dict) else {})
    except PoolError as error:
        if str(error).startswith(where):
            raise
        raise PoolError(f"{where}: {error}") from None
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        detail = f"missing {error.args[0]!r}" if isinstance(error, KeyError) else str(error).splitlines()[0]
        raise PoolError(f"{where}: {detail}") from None
