"""Results store: every sweep is an Optuna study on RDB storage, checkpoints are files beside it.

One study per sweep (search space, optimizer, training seed), one Optuna trial per configuration
(its configuration as the trial's parameters), the validation accuracy reported at each rung with
``step`` = the rung budget, and per-rung charged units, wall seconds and validation loss as user
attributes. Eliminated trials end PRUNED, the final survivor COMPLETE. Any SQLAlchemy URL works
(SQLite file by default, PostgreSQL for teams), so ``optuna-dashboard`` can open any sweep.

Model checkpoints (the whole trial state) are written atomically, one file per trial, replaced at
each rung boundary; a checkpoint is always written before the result that depends on it.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from eve_search._imports import require
from eve_search.trial import Evaluation, Trial

__all__ = ["StoreError", "SweepStore", "study_name"]


class StoreError(ValueError):
    """The store cannot be opened, or holds a sweep that this run must not overwrite or mix with."""


def study_name(dataset: str, space: str, optimizer: str, seed: int, config_seed: int = 0) -> str:
    suffix = "" if config_seed == 0 else f"-configs{config_seed}"
    return f"{dataset}-{space}-{optimizer}-seed{seed}{suffix}"


def _rung_key(budget: float) -> str:
    return f"rung_{budget:g}"


def save_atomically(state: dict[str, Any], path: Path) -> None:
    """Write ``state`` to ``path`` so that a killed process leaves either the old file or the new one.

    No fsync: a checkpoint lost to an operating-system crash is recomputed exactly on resume
    (training is deterministic and the engine replays every rung budget in order), so paying a
    disk flush per trial per rung would buy nothing.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getbuffer())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class SweepStore:
    """The :class:`~eve_search.sha.RungStore` of one sweep, on an Optuna study.

    Args:
        storage: an SQLAlchemy URL (``sqlite:///path.db``, ``postgresql://...``).
        name: the study name (see :func:`study_name`).
        configs: the sweep's configurations, index = position.
        checkpoint_dir: where this sweep's trial checkpoints live.
        settings: everything that defines the sweep (space, optimizer, seeds, rungs, cost mode...);
            resuming with different settings is refused.
        resume: continue an existing sweep of this name (a missing one starts fresh).
    """

    def __init__(self, storage: str, name: str, configs: list[dict[str, Any]], checkpoint_dir: Path,
                 settings: dict[str, Any], *, resume: bool) -> None:
        optuna = require("optuna", "optuna")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.name = name
        self.configs = configs
        self.checkpoint_dir = Path(checkpoint_dir) / name
        try:
            existing = name in optuna.get_all_study_names(storage)
        except Exception as error:  # noqa: BLE001 SQLAlchemy raises many kinds; the user needs one line of any
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise StoreError(f"--storage {storage!r}: cannot open the results store ({first_line})") from None
        if existing and not resume:
            raise StoreError(f"--storage {storage!r} already holds sweep {name!r}; pass --resume to continue "
                                   "it, or choose another --storage")
        self.study = optuna.create_study(study_name=name, storage=storage, direction="maximize",
                                         load_if_exists=True)
        if existing:
            saved = self.study.user_attrs.get("settings")
            if saved is not None and saved != settings:
                different = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
                raise StoreError(f"sweep {name!r} was started with other settings ({', '.join(different)}); "
                                 "resume it with the same arguments or use another --storage")
        self.study.set_user_attr("settings", settings)
        self._numbers: dict[int, int] = {}
        self._trial_ids: dict[int, int] = {}
        self._results: dict[int, dict[float, float]] = {}
        self._finished: set[int] = set()
        for frozen in self.study.get_trials(deepcopy=False):
            index = frozen.user_attrs.get("config_index")
            if index is None:
                continue
            self._numbers[index] = frozen.number
            self._trial_ids[index] = frozen._trial_id
            self._results[index] = {float(step): value for step, value in frozen.intermediate_values.items()}
            if frozen.state.is_finished():
                self._finished.add(index)
        self._best_val_acc = max((a for values in self._results.values() for a in values.values()), default=-math.inf)
        missing = [index for index in range(len(configs)) if index not in self._numbers]
        if missing:
            self._create_trials(missing)

    def _create_trials(self, indices: list[int]) -> None:
        """One RUNNING Optuna trial per configuration, its configuration as the trial's parameters."""
        optuna = self._optuna
        distributions = {
            "lr": optuna.distributions.FloatDistribution(1e-12, 1e12, log=True),
            "weight_decay": optuna.distributions.FloatDistribution(0.0, 1e12),
            "width": optuna.distributions.IntDistribution(1, 1 << 20),
            "depth": optuna.distributions.IntDistribution(1, 1 << 10),
        }
        self.study.add_trials([
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.RUNNING,
                params={key: self.configs[index][key] for key in distributions},
                distributions=distributions,
                user_attrs={"config_index": index, "config": self.configs[index]},
            )
            for index in indices
        ])
        for frozen in self.study.get_trials(deepcopy=False):
            index = frozen.user_attrs["config_index"]
            if index in indices:
                self._numbers[index] = frozen.number
                self._trial_ids[index] = frozen._trial_id
                self._results[index] = {}

    def _trial(self, index: int):
        # Ask-and-tell across processes: a running trial is reopened by its id to report more rungs.
        return self._optuna.trial.Trial(self.study, self._trial_ids[index])

    def _checkpoint_path(self, index: int) -> Path:
        return self.checkpoint_dir / f"trial-{index:04d}.pt"

    # RungStore -----------------------------------------------------------------------------------

    def recorded(self, index: int, budget: float) -> float | None:
        return self._results.get(index, {}).get(float(budget))

    def checkpoint(self, index: int) -> dict[str, Any] | None:
        path = self._checkpoint_path(index)
        if not path.exists():
            return None
        return torch.load(path, weights_only=False)

    def record(self, index: int, budget: float, evaluation: Evaluation, trial: Trial) -> None:
        save_atomically(trial.state_dict(), self._checkpoint_path(index))
        details = {
            "budget": budget,
            "val_acc": evaluation.accuracy,
            "val_loss": evaluation.loss,
            "charged_units": trial.charged_units,
            "wall_seconds": trial.wall_seconds,
            "backward_passes": trial.meter.backward_passes,
        }
        if evaluation.accuracy > self._best_val_acc:
            # The best validation accuracy found so far: its test accuracy is taken now, while these
            # weights exist (an eliminated trial's checkpoint is deleted). Only strict improvements
            # are scored, so the test set is touched a handful of times per sweep.
            details["test_acc"] = trial.evaluate("test").accuracy
            self._best_val_acc = evaluation.accuracy
        optuna_trial = self._trial(index)
        optuna_trial.set_user_attr(_rung_key(budget), details)
        # The report is the commit point: a result counts as recorded only once everything it
        # depends on (checkpoint, details) is stored.
        optuna_trial.report(evaluation.accuracy, step=int(budget))
        self._results[index][float(budget)] = evaluation.accuracy

    def eliminate(self, indices: list[int], budget: float) -> None:
        for index in indices:
            if index not in self._finished:
                self.study.tell(self._numbers[index], state=self._optuna.trial.TrialState.PRUNED)
                self._finished.add(index)
            # A pruned trial never trains again; its result stays in the study.
            self._checkpoint_path(index).unlink(missing_ok=True)

    def finish(self, index: int, budget: float, accuracy: float) -> None:
        if index not in self._finished:
            self.study.tell(self._numbers[index], accuracy)
            self._finished.add(index)

    # Sweep-level facts ---------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        return self.study.user_attrs.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.study.set_user_attr(key, value)

    def rung_details(self) -> dict[int, dict[float, dict[str, Any]]]:
        """Per trial, per rung budget: accuracy, loss, charged units, wall seconds (one query)."""
        details: dict[int, dict[float, dict[str, Any]]] = {}
        for frozen in self.study.get_trials(deepcopy=False):
            index = frozen.user_attrs.get("config_index")
            if index is not None:
                details[index] = {float(v["budget"]): v for k, v in frozen.user_attrs.items() if k.startswith("rung_")}
        return details

    def best_found(self, details: dict[int, dict[float, dict[str, Any]]] | None = None) -> dict[str, Any]:
        """The highest validation accuracy recorded at any rung, with its trial, budget and test accuracy
        (ties: the one recorded first, which is the one whose test accuracy was taken)."""
        details = self.rung_details() if details is None else details
        val_acc, _, _, _, index, best = max((d["val_acc"], "test_acc" in d, -budget, -index, index, d)
                                            for index, rungs in details.items() for budget, d in rungs.items())
        return {"index": index, "budget": best["budget"], "val_acc": val_acc, "test_acc": best.get("test_acc")}
