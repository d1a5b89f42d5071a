"""Results store: every sweep is an Optuna study on RDB storage; trial checkpoints are files beside it.

One study per sweep (task, search space, optimizer, training seed), one Optuna trial per
configuration (the configuration as the trial's parameters, with the space's real distributions),
the ranked validation score reported at each rung with ``step`` = the integer rung budget, and per
rung the validation metrics, charged units and wall seconds as the user attribute ``rung_{budget}``.
Eliminated trials end PRUNED, the final survivors COMPLETE. Any SQLAlchemy URL works (SQLite file by
default, PostgreSQL for teams), so ``optuna-dashboard`` can open any sweep.

Only Optuna's public API is used: studies and trials are created through ``create_study`` and
``add_trials``, and results are written to a running trial through the storage's documented
``BaseStorage`` methods (or a fast path an integration registers, which writes the same rows: see
:mod:`eve_search.engine._stores`). Every read goes to the storage, never to a cache another process could
make stale.

Trial checkpoints belong to one sweep in one store: they live in a folder named after the study and
the sweep's id (a random id the store draws when it creates the study), and each checkpoint records
that id, so two stores never share or mix checkpoint files. A checkpoint is always written before
the result that depends on it.

A store is a file anyone with access can change, so what is read back is checked before it is used
(when a sweep is opened, before any work): the sweep id is the 32 hex digits the store draws and
the checkpoint folder it names resolves inside the checkpoint root; every trial holds a config
index in range, one trial per index (a failed trial's retries aside) with the configuration the
sweep samples there; every ``rung_{budget}`` record has the shape :meth:`SweepStore.record`
writes, at a budget of the sweep's rungs; ``settings``, ``kind``, ``wall_seconds``,
``backward_ratios`` and ``winner`` have theirs. Anything else is :class:`StoreError`, one line
naming the sweep, the trial, the key, the value and what was expected.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import uuid
from pathlib import Path
from typing import Any

from eve_search._checks import InputError
from eve_search.engine._stores import (
    add_trials,
    create_storage,
    describe_failure,
    end_running_at_once,
    in_memory,
    known_trial_id,
    record_results,
    redact,
    rung_key,
    safe_url,
    storage_problem,
)
from eve_search.engine.checkpoint import remove_checkpoint, save_atomically
from eve_search.engine.ledger import rank_order
from eve_search.tasks.spaces import SearchSpace

__all__ = ["StoreError", "SweepStore", "open_storage", "rung_key", "study_name"]

KIND = "sha-sweep"


class StoreError(InputError):
    """The store cannot be opened, or holds a sweep that this run must not overwrite or mix with."""


def study_name(task: str, space: str, optimizer: str, seed: int, config_seed: int = 0) -> str:
    """The Optuna study name of a sweep: what ``--resume`` finds it by in a store.

    Args:
        task: the task's registry name.
        space: the search space's name.
        optimizer: the optimizer's registry name.
        seed: the training seed.
        config_seed: the seed the configurations were sampled from (named only when not 0).

    Returns:
        ``task-space-optimizer-seedN``, with ``-configsM`` appended for ``config_seed`` M > 0.

    Example:
        >>> study_name("adult", "hp", "eve", 0)
        'adult-hp-eve-seed0'
        >>> study_name("adult", "hp", "adam", 1, config_seed=2)
        'adult-hp-adam-seed1-configs2'
    """
    suffix = "" if config_seed == 0 else f"-configs{config_seed}"
    return f"{task}-{space}-{optimizer}-seed{seed}{suffix}"


# Reading stored values ----------------------------------------------------------------------------
#
# A store is a file (or a database) anyone with access can change, so every value read back is
# checked before it is used: a changed one gives StoreError, one line naming the sweep, the trial,
# the key, the value and what was expected, never a TypeError deep in the engine, a silently
# different result, or a path outside the work directory.

_SWEEP_ID = re.compile(r"[0-9a-f]{32}")  # what the store draws: uuid.uuid4().hex
_RUNG_KEY = re.compile(r"rung_(0|[1-9][0-9]*)")
ALTERED = "the store was changed outside eve-search (restore it from a copy, or use another --storage)"


class _Missing:
    def __repr__(self) -> str:
        return "nothing"


_MISSING = _Missing()


def _show(value: Any, limit: int = 80) -> str:
    """``value``'s repr on one line, shortened: a tampered value may be long."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def altered(sweep: str, key: str, value: Any, expected: str, trial: Any = None) -> StoreError:
    """The one-line error for a stored value that is not what eve-search writes there."""
    where = f"sweep {sweep!r}" + ("" if trial is None else f", trial {trial}")
    holds = "is missing" if value is _MISSING else f"holds {_show(value)}"
    return StoreError(f"results store: {where}: key {key!r} {holds} (expected {expected}); {ALTERED}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_sweep_id(sweep: str, value: Any) -> str:
    """The stored ``sweep_id`` of ``sweep``, or StoreError: it names the checkpoint folder, so only what
    the store draws (32 lowercase hex digits) is accepted."""
    if not isinstance(value, str) or not _SWEEP_ID.fullmatch(value):
        raise altered(sweep, "sweep_id", value, "32 hexadecimal digits, as the store draws it")
    return value


def checkpoint_folder(root: str | os.PathLike, sweep: str, sweep_id: Any) -> Path:
    """The folder under ``root`` that holds the checkpoints of study ``sweep`` with id ``sweep_id``.

    Both come from a store, so both are checked: the id is hex (:func:`check_sweep_id`), the study
    name is one folder name (no separators, no NUL), and the folder, resolved, lies directly in
    ``root``, resolved (so a planted symbolic link cannot lead elsewhere either). Otherwise StoreError.
    """
    check_sweep_id(sweep, sweep_id)
    if (not isinstance(sweep, str) or not sweep or any(c in sweep for c in "/\\\x00")
            or len(f"{sweep}-{sweep_id[:12]}".encode()) > 255):
        raise StoreError(f"results store: study name {_show(sweep)} cannot name a checkpoint folder (expected one "
                         "folder name: no '/', '\\' or NUL, at most 242 bytes)")
    folder = Path(root) / f"{sweep}-{sweep_id[:12]}"
    if folder.resolve().parent != Path(root).resolve():
        raise StoreError(f"results store: sweep {sweep!r}: its checkpoint folder {str(folder)!r} leads outside "
                         f"{str(root)!r} (a symbolic link?); remove it and run again")
    return folder


def _metrics(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is_number(v) for k, v in value.items())


def _non_negative(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value) and value >= 0


def check_rung(sweep: str, trial: str, key: str, value: Any, budgets: frozenset[int] | None = None) -> int:
    """The budget of the rung record ``value`` stored under ``key`` (``rung_{budget}``), or StoreError.

    A record is what :meth:`SweepStore.record` writes: an int ``budget`` equal to the key's (and one of
    ``budgets`` when given), a number ``score`` (NaN when training diverged), ``val`` (and optionally
    ``test``) metrics, finite ``charged_units`` and ``wall_seconds`` >= 0, and ``backward_passes`` an
    int >= 0 when present.
    """
    match = _RUNG_KEY.fullmatch(key)
    if match is None:
        raise altered(sweep, key, value, "rung records under keys rung_<budget>", trial)
    if not isinstance(value, dict):
        raise altered(sweep, key, value, "a dict of one rung's results", trial)
    budget = value.get("budget")
    if not _is_int(budget) or budget != int(match.group(1)):
        raise altered(sweep, f"{key}.budget", budget, f"the int {match.group(1)}", trial)
    if budgets is not None and budget not in budgets:
        raise altered(sweep, key, budget, f"a budget of the sweep's rungs {', '.join(map(str, sorted(budgets)))}",
                      trial)
    checks = (("score", _is_number, "a number"),
              ("val", _metrics, "a dict of metric names to numbers"),
              ("charged_units", _non_negative, "a finite number >= 0"),
              ("wall_seconds", _non_negative, "a finite number >= 0"))
    for field, check, expected in checks:
        if not check(value.get(field)):
            raise altered(sweep, f"{key}.{field}", value.get(field, _MISSING), expected, trial)
    if value.get("test") is not None and not _metrics(value["test"]):
        raise altered(sweep, f"{key}.test", value["test"], "a dict of metric names to numbers, or none", trial)
    if "backward_passes" in value and not (_is_int(value["backward_passes"]) and value["backward_passes"] >= 0):
        raise altered(sweep, f"{key}.backward_passes", value["backward_passes"], "an int >= 0", trial)
    return budget


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_storage(url: str) -> Any:
    """An Optuna RDB storage for ``url``, or :class:`StoreError` naming the URL in one line.

    Args:
        url: an SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg2://...``).

    Returns:
        An ``optuna.storages.RDBStorage`` whose schema exists.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage = open_storage(f"sqlite:///{folder}/results.db")
        ...     print(type(storage).__name__, storage.get_all_studies())
        ...     storage.engine.dispose()
        RDBStorage []
        >>> open_storage("nosuchdb://x")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        eve_search.engine.store.StoreError: --storage 'nosuchdb://x': ...
    """
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        # The schema of a new store is created under a lock (and retried when another process created
        # it at the same moment); the engine is tracked so every command leaves the store whole
        # (see eve_search.engine._stores).
        return create_storage(url)
    except Exception as error:  # noqa: BLE001 SQLAlchemy raises many kinds; the user needs one line of any
        reason = describe_failure(error, opening=True) or \
            f"cannot open the results store ({redact(_first_line(error))})"
        raise StoreError(f"--storage {safe_url(url)!r}: {reason}") from None


def write_ahead(storage: Any, url: str) -> None:
    """SQLite in write-ahead-log mode with ``synchronous=NORMAL``: a commit is one append to the log,
    not an fsync of the database, and it survives a killed process (a power loss may undo the last
    commits, which the deterministic engine recomputes exactly on ``--resume``). Set on every new
    connection through SQLAlchemy's public ``connect`` event; other databases are left alone. The log
    (``-wal``, with its index ``-shm``) is copied into the main file when the command ends, however it
    ends (:func:`eve_search.engine._stores.close_stores`), so the file alone then holds every result."""
    if not url.startswith("sqlite"):
        return
    import sqlalchemy

    def configure(connection: Any, record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    sqlalchemy.event.listen(storage.engine, "connect", configure)
    storage.engine.dispose()  # connections opened from now on get the settings


class SweepStore:
    """The results and checkpoints of one sweep, on an Optuna study.

    Args:
        storage: an SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg2://...``).
        name: the study name (see :func:`study_name`).
        configs: the sweep's configurations, index = position.
        space: the search space they were drawn from (its distributions go into the study).
        checkpoint_dir: the folder under which this sweep's checkpoint folder lives.
        settings: everything that defines the sweep; resuming with different settings is refused.
        direction: ``"maximize"`` or ``"minimize"`` (the task's mode).
        resume: continue an existing sweep of this name (a missing one starts fresh).
        data: the identity of the data the sweep trains on, ``{"sha256": ..., "data_dir": ...}`` (see
            :func:`~eve_search.data.splits_checksum`): stored with a new sweep, and a resumed one whose
            stored checksum differs is refused (a sweep stored without one gets it now); None: not checked.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from eve_search.engine.sweep import SweepSettings, prepare_sweep
        >>> settings = SweepSettings(space="hp", optimizer="eve", configs=3, rungs=(100, 300), backward_ratio=2.0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     store = prepare_sweep(settings, storage=f"sqlite:///{folder}/results.db",
        ...                           checkpoint_dir=Path(folder) / "checkpoints").store
        ...     print(store.name, store.rung_details(), store.checkpoint_path(2).name)
        adult-hp-eve-seed0 {0: {}, 1: {}, 2: {}} trial-0002.pt
    """

    kind = KIND  # the study's ``kind`` user attribute; a subclass storing another kind of run sets its own

    def __init__(self, storage: str, name: str, configs: list[dict[str, Any]], space: SearchSpace,
                 checkpoint_dir: Path, settings: dict[str, Any], *, direction: str = "maximize",
                 resume: bool, data: dict[str, Any] | None = None) -> None:
        import optuna
        self._optuna = optuna
        self.url = storage
        self.name = name
        self.configs = configs
        self.space = space
        self.direction = direction
        if in_memory(storage):  # workers, --resume and the dashboard reopen a sweep's store
            raise StoreError(f"--storage {storage_problem(storage)}")
        self.storage = open_storage(storage)
        write_ahead(self.storage, storage)
        try:
            existing = name in optuna.get_all_study_names(self.storage)
            if existing and not resume:
                raise StoreError(f"--storage {safe_url(storage)!r} already holds sweep {name!r}; pass --resume to "
                                 "continue it, or choose another --storage")
            if not existing:
                try:
                    self.study = optuna.create_study(study_name=name, storage=self.storage, direction=direction)
                    self.study.set_user_attr("kind", self.kind)
                    self.study.set_user_attr("settings", settings)
                    self.study.set_user_attr("sweep_id", uuid.uuid4().hex)
                except optuna.exceptions.DuplicatedStudyError:
                    existing = True  # created by another process a moment ago
            if existing:
                self.study = optuna.load_study(study_name=name, storage=self.storage)
                attrs = self.study.user_attrs
                saved = attrs.get("settings")
                kind = attrs.get("kind", KIND)
                if not isinstance(kind, str):
                    raise altered(name, "kind", kind, f"the study's kind, {self.kind!r}")
                if kind != self.kind or saved is None:
                    raise StoreError(f"--storage {safe_url(storage)!r}: study {name!r} is not an eve-search sweep")
                if not isinstance(saved, dict):
                    raise altered(name, "settings", saved, "a dict of the sweep's settings")
                if saved != settings:
                    different = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
                    raise StoreError(f"sweep {name!r} was started with other settings ({', '.join(different)}); "
                                     "resume it with the same arguments or use another --storage")
            if data is not None:
                self._check_data(data)
            # Checked before anything is written or trained: the id names the checkpoint folder.
            self.sweep_id = check_sweep_id(name, self.study.user_attrs.get("sweep_id", _MISSING))
            self.checkpoint_dir = checkpoint_folder(checkpoint_dir, name, self.sweep_id)
            rungs = settings.get("rungs", settings.get("budgets"))
            self._budgets = (frozenset(rungs) if isinstance(rungs, (list, tuple)) and all(map(_is_int, rungs))
                             else None)
            self._settings = settings
            self.study_id = self.storage.get_study_id_from_name(name)
            self._ids: dict[int, int] = {}
            self._numbers = self._ensure_trials()
            self._last_scores: dict[int, float] = {}  # index -> its latest score recorded by this process
            if existing:  # everything the engine reads back later is checked now, before any work
                self.rung_details()
                for key in ("wall_seconds", "backward_ratios", "winner"):
                    self.get(key)
        except StoreError:
            raise
        except Exception as error:  # noqa: BLE001 a broken or unreachable database: one line, not a traceback
            reason = describe_failure(error) or redact(_first_line(error))
            raise StoreError(f"--storage {safe_url(storage)!r}: {reason}") from None

    def _check_data(self, data: dict[str, Any]) -> None:
        """Refuse to continue a sweep on other data than it started on (its rungs would be decided on
        one data set and the next ones trained on another); record the identity of a sweep without one."""
        stored = self.study.user_attrs.get("data")
        if stored is None:
            self.study.set_user_attr("data", data)
            return
        if not isinstance(stored, dict) or not isinstance(stored.get("sha256"), str):
            raise altered(self.name, "data", stored, "the checksum of the data the sweep trains on")
        if stored["sha256"] != data.get("sha256"):
            def source(identity: dict[str, Any]) -> str:
                where = identity.get("data_dir")
                return "the task's default data" if where is None else f"--data-dir {where!r}"

            raise StoreError(f"sweep {self.name!r} was started on other data: {source(stored)} (sha256 "
                             f"{stored['sha256'][:12]}...), not {source(data)} (sha256 "
                             f"{str(data.get('sha256'))[:12]}...); resume it with the data it started on, or use "
                             "another --storage")

    def _ensure_trials(self) -> dict[int, int]:
        """One RUNNING Optuna trial per configuration (the sweep is its only writer), index -> number."""
        optuna = self._optuna
        current = self._indexed(configs=True)
        missing = [index for index in range(len(self.configs)) if index not in current]
        if missing:
            # Optuna numbers a new trial by the study's trial count: with a row deleted outside eve-search
            # that number is already taken, and the store would hold two trials of one number (Optuna then
            # reads back only one of them). Such a store is refused instead of re-adding the trial. (Trials
            # missing at the end of the numbers are added: a sweep stopped while it created them.)
            numbers = sorted(frozen.number for frozen in self.study.get_trials(deepcopy=False))
            gap = next((n for n, number in enumerate(numbers) if number != n), None)
            if gap is not None:
                raise StoreError(f"results store: sweep {self.name!r}: configuration {missing[0]} has no trial and "
                                 f"trial #{gap} is missing (expected trials numbered from 0 to {numbers[-1]} without a "
                                 f"gap: a row was deleted); {ALTERED}")
            distributions = self.space.distributions()
            trials = [
                optuna.trial.create_trial(
                    state=optuna.trial.TrialState.RUNNING,
                    params={key: self.configs[index][key] for key in distributions},
                    distributions=distributions,
                    user_attrs={"config_index": index, "config": self.configs[index]},
                )
                for index in missing
            ]
            add_trials(self.storage, self.study, self.study_id, trials)
            current = self._indexed(configs=True)
        # Where the registered fast path knows a trial's storage id without a query, it is kept here: it
        # spares one query per trial when its first result is written (else asked for, see _id_of).
        self._ids.update({index: known for index, frozen in current.items()
                          if (known := known_trial_id(frozen)) is not None})
        return {index: frozen.number for index, frozen in current.items()}

    def _indexed(self, configs: bool = False) -> dict[int, Any]:
        """Per configuration index, its current Optuna trial (one query), every stored index checked.

        Each trial holds an int ``config_index`` in range, one trial per index, except retries: a
        worker that died leaves its trial FAIL and Optuna re-queues a copy that names the original in
        the system attribute ``failed_trial``; the last of such a chain is current. With ``configs``,
        the stored configuration and parameters must also be the ones the sweep samples at that index.
        """
        count = len(self.configs)
        chains: dict[int, list[Any]] = {}
        for frozen in self.study.get_trials(deepcopy=False):
            index = frozen.user_attrs.get("config_index", _MISSING)
            if not _is_int(index) or not 0 <= index < count:
                raise altered(self.name, "config_index", index, f"an int in [0, {count - 1}]", f"#{frozen.number}")
            chains.setdefault(index, []).append(frozen)
        fail = self._optuna.trial.TrialState.FAIL
        for index, chain in chains.items():
            chain.sort(key=lambda t: t.number)
            first = chain[0].number
            if any(t.state != fail for t in chain[:-1]) or any(t.system_attrs.get("failed_trial") != first
                                                               for t in chain[1:]):
                numbers = " and ".join(f"#{t.number}" for t in chain[:2])
                raise StoreError(f"results store: sweep {self.name!r}: trials {numbers} both hold config_index "
                                 f"{index} (expected one trial per configuration, or retries of a failed one); "
                                 f"{ALTERED}")
        current = {index: chain[-1] for index, chain in sorted(chains.items())}
        if configs:
            distributions = self.space.distributions()
            for index, frozen in current.items():
                expected = json.loads(json.dumps(self.configs[index]))
                where = f"#{frozen.number} (configuration {index})"
                config = frozen.user_attrs.get("config", _MISSING)
                if config != expected:
                    if not isinstance(config, dict):
                        raise altered(self.name, "config", config, f"the configuration the sweep samples at index "
                                      f"{index}, {_show(expected)}", where)
                    key = next(k for k in sorted(set(config) | set(expected)) if config.get(k) != expected.get(k))
                    raise altered(self.name, f"config.{key}", config.get(key, _MISSING),
                                  f"{_show(expected.get(key, _MISSING))}, the value the sweep samples at index {index}",
                                  where)
                for key in distributions:
                    value = frozen.params.get(key, _MISSING)
                    if value is _MISSING or json.loads(json.dumps(value)) != expected.get(key):
                        raise altered(self.name, f"params.{key}", value, _show(expected.get(key)), where)
        return current

    def _id_of(self, index: int) -> int:
        if index not in self._ids:  # a trial's id never changes: one query per trial and process
            self._ids[index] = self.storage.get_trial_id_from_study_id_trial_number(self.study_id,
                                                                                    self._numbers[index])
        return self._ids[index]

    def checkpoint_path(self, index: int) -> Path:
        """Where configuration ``index``'s latest checkpoint lives (in :attr:`checkpoint_dir`)."""
        if not isinstance(index, numbers.Integral) or isinstance(index, bool) or not 0 <= index < len(self.configs):
            raise InputError(f"Invalid index: {index!r} (expected an int in [0, {len(self.configs) - 1}])")
        return self.checkpoint_dir / f"trial-{index:04d}.pt"

    # Reading ---------------------------------------------------------------------------------------

    def rung_details(self) -> dict[int, dict[int, dict[str, Any]]]:
        """Per configuration, per rung budget: the details recorded there (one query)."""
        details: dict[int, dict[int, dict[str, Any]]] = {}
        for index, frozen in self._indexed().items():
            where = f"#{frozen.number} (configuration {index})"
            details[index] = {check_rung(self.name, where, k, v, self._budgets): v
                              for k, v in frozen.user_attrs.items() if k.startswith("rung_")}
        best = self.study.user_attrs.get("best_test")
        if best is not None:  # the test metrics of the best result, taken when its trial had ended
            record = details.get(best.get("index"), {}).get(best.get("budget")) if isinstance(best, dict) else None
            if record is None or not _metrics(best.get("test")):
                raise altered(self.name, "best_test", best, "the index and budget of a recorded result and its "
                              "test metrics")
            if record.get("test") is None:
                record["test"] = best["test"]
        return details

    def finished(self) -> set[int]:
        """Configurations whose Optuna trial has ended (PRUNED, COMPLETE or FAIL)."""
        return {index for index, frozen in self._indexed().items() if frozen.state.is_finished()}

    def get(self, key: str, default: Any = None) -> Any:
        """A study attribute; the ones the engine reads back (``wall_seconds``, ``backward_ratios``,
        ``winner``) are checked: StoreError when one is not what eve-search writes there."""
        attrs = self.study.user_attrs
        if key not in attrs:
            return default
        value = attrs[key]
        count = len(self.configs)
        if key == "wall_seconds" and not _non_negative(value):
            raise altered(self.name, key, value, "a finite number of seconds >= 0")
        if key == "backward_ratios":
            pinned = self._settings.get("backward_ratio")
            if not (isinstance(value, dict) and all(isinstance(k, str) and _is_number(v) and math.isfinite(v)
                                                    and v > 0 for k, v in value.items())):
                raise altered(self.name, key, value, "a dict of model shapes to finite ratios > 0")
            if _is_number(pinned) and any(v != pinned for v in value.values()):
                raise altered(self.name, key, value, f"the pinned --backward-ratio {pinned} for every shape")
        if key == "winner" and not (isinstance(value, dict) and _is_int(value.get("index"))
                                    and 0 <= value["index"] < count and _is_number(value.get("score"))
                                    and (value.get("test") is None or _metrics(value["test"]))):
            raise altered(self.name, key, value, f"a dict of an int index in [0, {count - 1}], a number score "
                          "and test metrics")
        return value

    def best_found(self, details: dict[int, dict[int, dict[str, Any]]], mode: str = "max") -> dict[str, Any]:
        """The best validation score recorded at any rung, with its trial, budget and test metrics
        (ties: the earliest rung, then the configuration sampled first)."""
        candidates = {(index, budget): d["score"] for index in sorted(details)
                      for budget, d in sorted(details[index].items(), key=lambda item: item[0])}
        # rank_order breaks ties by position: order candidates by budget first, then index.
        ordered = dict(sorted(candidates.items(), key=lambda item: (item[0][1], item[0][0])))
        index, budget = rank_order(ordered, mode)[0]
        best = details[index][budget]
        return {"index": index, "budget": budget, "score": best["score"], "val": best["val"],
                "test": best.get("test")}

    # Writing ---------------------------------------------------------------------------------------

    def record(self, index: int, budget: int, details: dict[str, Any], checkpoint: bytes | None) -> None:
        """Save the trial's checkpoint (atomically), then its result at rung ``budget``.

        The intermediate value is the commit point: a result counts as recorded only once everything it
        depends on (checkpoint, details) is stored. ``checkpoint`` None: the driver keeps trial states
        elsewhere (Ray Tune's checkpoints under its ``storage_path``).
        """
        self.record_many([(index, budget, details, checkpoint)])

    def record_many(self, results: list[tuple[int, int, dict[str, Any], bytes | None]]) -> None:
        """:meth:`record` for several results, ``(index, budget, details, checkpoint)`` each, in order:
        every checkpoint first, then every result in one transaction (one commit point for the batch;
        a result lost with a killed process is recomputed on ``--resume``, exactly)."""
        for index, _, _, checkpoint in results:
            if checkpoint is not None:
                self.save_checkpoint(index, checkpoint)
        record_results(self.storage, [(self._id_of(index), budget, details) for index, budget, details, _ in results])
        for index, _, details, _ in results:
            self._last_scores[index] = float(details["score"])

    def save_checkpoint(self, index: int, checkpoint: bytes) -> None:
        """Save configuration ``index``'s latest state (atomically): the engine writes a kept trial's
        checkpoint once its rung has promoted it, after the result (a result without the checkpoint of
        its rung is replayed exactly on resume, see :class:`~eve_search.engine.sha.SynchronousSuccessiveHalving`)."""
        save_atomically(checkpoint, self.checkpoint_path(index))

    def add_test(self, index: int, budget: int, test: dict[str, float]) -> None:
        """The test metrics ``test`` of configuration ``index``'s result at rung ``budget`` (the best
        validation result of the sweep, scored on the test set once, when its trial may have ended):
        kept as the study attribute ``best_test`` and read back into that record by :meth:`rung_details`."""
        self.study.set_user_attr("best_test", {"index": int(index), "budget": int(budget), "test": dict(test)})

    def eliminate(self, indices: list[int]) -> None:
        """These trials stopped at a rung: PRUNED, checkpoint deleted (a pruned trial never trains again)."""
        pruned = self._optuna.trial.TrialState.PRUNED
        ends = []
        for index in indices:
            # As Optuna's own ``study.tell(state=PRUNED)``: the last intermediate value, when it is a
            # number, becomes the trial's value.
            score = self._last_score(index)
            ends.append((index, pruned, None if score is None or math.isnan(score) else [score]))
        if not end_running_at_once(self.storage, [(self._id_of(index), state, values)
                                                  for index, state, values in ends]):
            for index, state, values in ends:  # one by one (a resumed sweep's may have ended already)
                self._finish(index, state, values)
        for index in indices:
            remove_checkpoint(self.checkpoint_path(index))

    def complete(self, index: int, score: float) -> None:
        """This trial completed the last rung with ``score`` (FAIL when it is not finite)."""
        states = self._optuna.trial.TrialState
        if math.isfinite(score):
            self._finish(index, states.COMPLETE, [float(score)])
        else:
            self._finish(index, states.FAIL, None)

    def _finish(self, index: int, state: Any, values: list[float] | None) -> None:
        """End configuration ``index``'s trial in one storage call; one that has already ended (a resumed
        sweep's) is left as it is."""
        try:
            self.storage.set_trial_state_values(self._id_of(index), state, values)
        except self._optuna.exceptions.UpdateFinishedTrialError:
            pass

    def _last_score(self, index: int) -> float | None:
        """The score of the trial's latest recorded rung (this process's record, else the storage's)."""
        if index in self._last_scores:
            return self._last_scores[index]
        frozen = self.storage.get_trial(self._id_of(index))
        return None if frozen.last_step is None else float(frozen.intermediate_values[frozen.last_step])

    def set(self, key: str, value: Any) -> None:
        self.study.set_user_attr(key, value)
