"""The trainable: a ``tune.Trainable`` over :class:`~eve_search.engine.trial.Trial`, for any registered task.

Each ``step()`` trains to the next rung budget and reports ``eval_cost``, the task's validation metrics
and ``wall_seconds``; its checkpoint is the whole trial (model, optimizer with EvE's population and
moments, cost meter, batch stream, generators), so a paused or restored trial continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray import tune

from eve_search._checks import InputError
from eve_search._openmp import (
    THREADS_VARIABLE,
    available_cpus,
    cpus_taken_now,
    intra_op_threads,
)
from eve_search.engine.ledger import DEFAULT_RUNGS, check_rungs

if TYPE_CHECKING:
    from eve_search.engine.trial import Trial
    from eve_search.tasks import Task

__all__ = ["INDEX_KEY", "EveTrainable", "config_index"]

INDEX_KEY = "trial_index"

# The best validation score this process has reported, per (owner, task, metric): test_metrics="best" reads it.
_BEST_REPORTED: dict[tuple[str, str, str], float] = {}


def config_index(config: dict[str, Any]) -> int:
    """A configuration's index for its seeds: ``config[INDEX_KEY]`` when the sweep gives one, else a
    stable hash of the configuration (the same configuration gets the same weights and batches).

    Args:
        config: a trial's configuration.

    Returns:
        An int in [0, 2**31).

    Example:
        >>> config_index({"lr": 1e-3, "width": 64, INDEX_KEY: 7})
        7
        >>> config_index({"lr": 1e-3, "width": 64}) == config_index({"width": 64, "lr": 1e-3})
        True
    """
    if INDEX_KEY in config:
        return int(config[INDEX_KEY])
    text = json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, default=repr)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF


def _follow_ray_threads() -> int | None:
    """Run PyTorch on the threads Ray gave this actor: one per CPU it was given (``OMP_NUM_THREADS``),
    fewer where other processes take the machine's CPUs, by the rule of the ``eve-search`` command
    (:func:`~eve_search._openmp.intra_op_threads`: one thread per CPU the others leave free, at least
    one; ``EVE_SEARCH_THREADS=torch`` keeps Ray's count whatever the load).

    Ray sets ``OMP_NUM_THREADS`` before the actor runs, but PyTorch reads it only when it is first
    imported: in a worker that imported PyTorch earlier (Ray's preloaded modules, a setup hook) every
    actor would run one thread per core, and two such actors on two cores crawl.

    Returns:
        The thread count set, or None where Ray gave no usable count (PyTorch's choice stands).
    """
    import torch

    wanted = os.environ.get("OMP_NUM_THREADS", "")
    if not (wanted.isdigit() and int(wanted) > 0):
        return None
    threads = int(wanted)
    if os.environ.get(THREADS_VARIABLE, "").strip() != "torch":
        taken = cpus_taken_now()
        threads = intra_op_threads(taken, cpus=available_cpus(), default=threads)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


@dataclasses.dataclass(frozen=True)
class _Settings:
    """:class:`EveTrainable`'s settings, the keywords of its ``setup`` (see its Args), checked."""

    task: Any = "adult"
    optimizer: str = "eve"
    rungs: Sequence[int] = DEFAULT_RUNGS
    seed: int = 0
    cost_mode: str = "calibrated"
    backward_ratio: float | None = None
    backward_ratios: dict[str, float] | None = None
    data_dir: str | None = None
    owner: str = ""
    test_metrics: bool | str = False

    @classmethod
    def of(cls, keywords: dict[str, Any]) -> _Settings:
        names = [field.name for field in dataclasses.fields(cls)]
        for name in keywords:
            if name not in names:
                raise TypeError(f"EveTrainable.setup() got an unexpected keyword argument {name!r} (expected "
                                f"some of: {', '.join(names)})")
        settings = cls(**keywords)
        if settings.test_metrics not in (True, False, "best"):
            raise InputError(f"Invalid test_metrics: {settings.test_metrics!r} (expected True, False or 'best')")
        return dataclasses.replace(settings, rungs=check_rungs(settings.rungs),
                                   backward_ratios=dict(settings.backward_ratios or {}))


class EveTrainable(tune.Trainable):
    """A Ray Tune trainable over :class:`~eve_search.engine.trial.Trial`, for any registered task.

    Pass the settings with ``tune.with_parameters(EveTrainable, task=..., rungs=..., ...)``; the
    trial's ``config`` is the configuration (``lr``, ``weight_decay`` and the task's model keys).
    Schedule it with ``SynchronousSHAScheduler(time_attr="eval_cost", rungs=...)`` and the same rungs:
    each ``step()`` trains to the next rung budget, and ``eval_cost`` counts the evaluation units charged.

    The settings are keywords of ``setup`` (passed through ``tune.with_parameters``).

    Args:
        task: a :class:`~eve_search.tasks.Task` (it travels to the actor without its data) or a
            registered task name.
        optimizer: ``"eve"`` or a baseline name; ``seed``: the training seed.
        rungs: where ``step()`` stops: each step trains to the next rung budget.
        cost_mode: ``"calibrated"`` or ``"measured"`` (see :class:`~eve_search.optim.budget.CostMeter`).
        backward_ratio: one frozen backward/forward ratio for every configuration, or
            ``backward_ratios``: one per ``task.cost_key(config)`` (a sweep measures them once, before
            training); with neither, calibrated mode measures this trial's own ratio in ``setup`` (a
            ratio measured on noisy timings is frozen all the same, and said so on the actor's stderr,
            as the ``eve-search`` command does).
        data_dir: the task's data folder on the worker (None: its default data).
        owner: the sweep a checkpoint belongs to (a checkpoint of another sweep is refused).
        test_metrics: also report the task's metrics on the test split, as ``test`` (for a driver
            that records the test score of the best configuration): ``True`` with every result;
            ``"best"`` only with the results that can be the search's best or its winner (a
            validation score at least as good as every one this actor process has reported for the
            same ``owner``, and every result at the last rung), which always includes the best one
            whatever the order the actors finish in; ``False`` (default) never.

    The configuration's seeds come from ``config["trial_index"]`` when present (a sweep's
    configuration index; the key is not passed to the model), else from a hash of the configuration.

    Example (needs a Ray runtime and trains, so not run as a doctest; tests/integrations runs it):
        >>> from ray import tune  # doctest: +SKIP
        >>> from eve_search.integrations.ray import EveTrainable, SynchronousSHAScheduler
        >>> rungs = (100, 300)
        >>> tuner = tune.Tuner(  # doctest: +SKIP
        ...     tune.with_parameters(EveTrainable, task="adult", rungs=rungs, backward_ratio=2.0),
        ...     param_space={"lr": tune.loguniform(1e-4, 1e-2), "width": 64, "depth": 1},
        ...     tune_config=tune.TuneConfig(num_samples=6, scheduler=SynchronousSHAScheduler(
        ...         time_attr="eval_cost", rungs=rungs, metric="accuracy", mode="max")))
        >>> best = tuner.fit().get_best_result()  # doctest: +SKIP
    """

    def setup(self, config: dict[str, Any], **settings: Any) -> None:
        from eve_search.tasks import get_task

        s = _Settings.of(settings)
        _follow_ray_threads()
        self._task: Task = get_task(s.task) if isinstance(s.task, str) else s.task
        self._settings = s
        self._rungs = s.rungs
        self.calibration_note: str | None = None  # set when this trial's ratio was measured on noisy timings
        self.trial = self._build(config)

    def _build(self, config: dict[str, Any]) -> Trial:
        from eve_search.engine.trial import Trial

        params = {k: v for k, v in config.items() if k != INDEX_KEY}
        s = self._settings
        index = config_index(config)
        data = self._task.data(s.data_dir)
        ratio = None
        if s.cost_mode == "calibrated":
            ratio = s.backward_ratios.get(self._task.cost_key(params), s.backward_ratio)
            if ratio is None:
                probe = Trial(self._task, params, s.optimizer, seed=s.seed, index=index, cost_mode="measured",
                              data=data)
                ratio = probe.calibrate()
                self._tell_calibration(params, ratio, probe.last_calibration)
        return Trial(self._task, params, s.optimizer, seed=s.seed, index=index, cost_mode=s.cost_mode,
                     backward_ratio=ratio, data=data, owner=s.owner)

    def _tell_calibration(self, params: dict[str, Any], ratio: float, report: dict[str, Any] | None) -> None:
        """A ratio frozen from noisy timings is said in one line on the actor's stderr (Ray shows it on the
        driver's terminal), as the local engine says it (:func:`~eve_search.engine.sweep.calibration_note`)."""
        if report is None or report.get("reliable", True):
            return
        from eve_search.engine.sweep import calibration_note

        self.calibration_note = calibration_note(self._task.cost_key(params), ratio, report)
        print(f"eve-search: {self.calibration_note}", file=sys.stderr)

    def _metrics(self) -> dict[str, Any]:
        trial = self.trial
        val = trial.evaluate("val")
        result: dict[str, Any] = {"eval_cost": trial.charged_units, "budget": trial.budget, **val, "val": val,
                                  "wall_seconds": trial.wall_seconds, "backward_passes": trial.meter.backward_passes}
        result["done"] = trial.budget >= self._rungs[-1]
        tests = self._settings.test_metrics
        if tests is True or (tests == "best" and self._may_be_best(val, result["done"])):
            result["test"] = trial.evaluate("test")
        return result

    def _may_be_best(self, val: dict[str, float], last: bool) -> bool:
        """Whether this result could be the search's best (or its winner), as far as this process has
        seen: a score at least as good as the best this process has reported for the same owner (ties
        included: the tie-break is the driver's; NaN never), and every result at the last rung (the
        winner is one of them, even where every score there is NaN)."""
        score = self.trial.score(val)
        if math.isnan(score):
            return last
        key = (self._settings.owner, self._task.name, self._task.metric)
        best = _BEST_REPORTED.get(key)
        sign = 1.0 if self._task.mode == "max" else -1.0
        if best is None or sign * score >= sign * best:
            _BEST_REPORTED[key] = score
            return True
        return last

    def step(self) -> dict[str, Any]:
        later = [rung for rung in self._rungs if rung > self.trial.budget]
        if later:
            self.trial.train_to(later[0])
        return self._metrics()

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.trial.save(Path(checkpoint_dir) / "trial.pt")

    def load_checkpoint(self, checkpoint: str | dict | None) -> None:
        if isinstance(checkpoint, str):
            self.trial.load(Path(checkpoint) / "trial.pt")

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.trial = self._build(new_config)
        return True
