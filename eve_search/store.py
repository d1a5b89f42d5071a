"""Results store: every sweep is an Optuna study on RDB storage; trial checkpoints are files beside it.

One study per sweep (task, search space, optimizer, training seed), one Optuna trial per
configuration (the configuration as the trial's parameters, with the space's real distributions),
the ranked validation score reported at each rung with ``step`` = the integer rung budget, and per
rung the validation metrics, charged units and wall seconds as the user attribute ``rung_{budget}``.
Eliminated trials end PRUNED, the final survivors COMPLETE. Any SQLAlchemy URL works (SQLite file by
default, PostgreSQL for teams), so ``optuna-dashboard`` can open any sweep.

Only Optuna's public API is used: studies and trials are created through ``create_study`` and
``add_trials``, and results are written to a running trial through the storage's documented
``BaseStorage`` methods. Every read goes to the storage, never to a cache another process could
make stale.

Trial checkpoints belong to one sweep in one store: they live in a folder named after the study and
the sweep's id (a random id the store draws when it creates the study), and each checkpoint records
that id, so two stores never share or mix checkpoint files. A checkpoint is always written before
the result that depends on it.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any

from eve_search._imports import require
from eve_search.checkpoint import save_atomically
from eve_search.ledger import rank_order
from eve_search.spaces import SearchSpace

__all__ = ["StoreError", "SweepStore", "open_storage", "rung_key", "study_name"]

KIND = "sha-sweep"


class StoreError(ValueError):
    """The store cannot be opened, or holds a sweep that this run must not overwrite or mix with."""


def study_name(task: str, space: str, optimizer: str, seed: int, config_seed: int = 0) -> str:
    suffix = "" if config_seed == 0 else f"-configs{config_seed}"
    return f"{task}-{space}-{optimizer}-seed{seed}{suffix}"


def rung_key(budget: int) -> str:
    """The user-attribute key of a trial's details at rung ``budget``."""
    return f"rung_{int(budget)}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_storage(url: str) -> Any:
    """An Optuna RDB storage for ``url``, or :class:`StoreError` naming the URL in one line."""
    optuna = require("optuna", "optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as error:  # noqa: BLE001 SQLAlchemy raises many kinds; the user needs one line of any
        raise StoreError(f"--storage {url!r}: cannot open the results store ({_first_line(error)})") from None


def write_ahead(storage: Any, url: str) -> None:
    """SQLite in write-ahead-log mode with ``synchronous=NORMAL``: a commit is one append to the log,
    not an fsync of the database, and it survives a killed process (a power loss may undo the last
    commits, which the deterministic engine recomputes exactly on ``--resume``). Set on every new
    connection through SQLAlchemy's public ``connect`` event; other databases are left alone."""
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
    """

    kind = KIND  # the study's ``kind`` user attribute; a subclass storing another kind of run sets its own

    def __init__(self, storage: str, name: str, configs: list[dict[str, Any]], space: SearchSpace,
                 checkpoint_dir: Path, settings: dict[str, Any], *, direction: str = "maximize",
                 resume: bool) -> None:
        optuna = require("optuna", "optuna")
        self._optuna = optuna
        self.url = storage
        self.name = name
        self.configs = configs
        self.space = space
        self.direction = direction
        self.storage = open_storage(storage)
        write_ahead(self.storage, storage)
        try:
            existing = name in optuna.get_all_study_names(self.storage)
            if existing and not resume:
                raise StoreError(f"--storage {storage!r} already holds sweep {name!r}; pass --resume to continue "
                                 "it, or choose another --storage")
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
                if attrs.get("kind", KIND) != self.kind or saved is None:
                    raise StoreError(f"--storage {storage!r}: study {name!r} is not an eve-search sweep")
                if saved != settings:
                    different = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
                    raise StoreError(f"sweep {name!r} was started with other settings ({', '.join(different)}); "
                                     "resume it with the same arguments or use another --storage")
            self.sweep_id = str(self.study.user_attrs["sweep_id"])
            self._study_id = self.storage.get_study_id_from_name(name)
            self._numbers = self._ensure_trials()
            self._ids: dict[int, int] = {}
        except StoreError:
            raise
        except Exception as error:  # noqa: BLE001 a broken or unreachable database: one line, not a traceback
            raise StoreError(f"--storage {storage!r}: {_first_line(error)}") from None
        self.checkpoint_dir = Path(checkpoint_dir) / f"{name}-{self.sweep_id[:12]}"

    def _ensure_trials(self) -> dict[int, int]:
        """One RUNNING Optuna trial per configuration (the sweep is its only writer), index -> number."""
        optuna = self._optuna
        numbers = {frozen.user_attrs["config_index"]: frozen.number
                   for frozen in self.study.get_trials(deepcopy=False) if "config_index" in frozen.user_attrs}
        missing = [index for index in range(len(self.configs)) if index not in numbers]
        if missing:
            distributions = self.space.distributions()
            self.study.add_trials([
                optuna.trial.create_trial(
                    state=optuna.trial.TrialState.RUNNING,
                    params={key: self.configs[index][key] for key in distributions},
                    distributions=distributions,
                    user_attrs={"config_index": index, "config": self.configs[index]},
                )
                for index in missing
            ])
            numbers = {frozen.user_attrs["config_index"]: frozen.number
                       for frozen in self.study.get_trials(deepcopy=False) if "config_index" in frozen.user_attrs}
        return numbers

    def _trial_id(self, index: int) -> int:
        if index not in self._ids:  # a trial's id never changes: one query per trial and process
            self._ids[index] = self.storage.get_trial_id_from_study_id_trial_number(self._study_id,
                                                                                    self._numbers[index])
        return self._ids[index]

    def checkpoint_path(self, index: int) -> Path:
        return self.checkpoint_dir / f"trial-{index:04d}.pt"

    # Reading ---------------------------------------------------------------------------------------

    def rung_details(self) -> dict[int, dict[int, dict[str, Any]]]:
        """Per configuration, per rung budget: the details recorded there (one query)."""
        details: dict[int, dict[int, dict[str, Any]]] = {}
        for frozen in self.study.get_trials(deepcopy=False):
            index = frozen.user_attrs.get("config_index")
            if index is not None:
                details[index] = {int(v["budget"]): v for k, v in frozen.user_attrs.items() if k.startswith("rung_")}
        return details

    def finished(self) -> set[int]:
        """Configurations whose Optuna trial has ended (PRUNED or COMPLETE)."""
        return {frozen.user_attrs["config_index"] for frozen in self.study.get_trials(deepcopy=False)
                if "config_index" in frozen.user_attrs and frozen.state.is_finished()}

    def get(self, key: str, default: Any = None) -> Any:
        return self.study.user_attrs.get(key, default)

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
        if checkpoint is not None:
            save_atomically(checkpoint, self.checkpoint_path(index))
        trial_id = self._trial_id(index)
        self.storage.set_trial_user_attr(trial_id, rung_key(budget), {"budget": int(budget), **details})
        self.storage.set_trial_intermediate_value(trial_id, int(budget), float(details["score"]))

    def eliminate(self, indices: list[int]) -> None:
        """These trials stopped at a rung: PRUNED, checkpoint deleted (a pruned trial never trains again)."""
        finished = self.finished()
        for index in indices:
            if index not in finished:
                self.study.tell(self._numbers[index], state=self._optuna.trial.TrialState.PRUNED)
            self.checkpoint_path(index).unlink(missing_ok=True)

    def complete(self, index: int, score: float) -> None:
        """This trial completed the last rung with ``score``."""
        if index not in self.finished():
            value = score if math.isfinite(score) else None
            if value is None:
                self.study.tell(self._numbers[index], state=self._optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(self._numbers[index], value)

    def set(self, key: str, value: Any) -> None:
        self.study.set_user_attr(key, value)
