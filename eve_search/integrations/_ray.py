"""Ray Tune integration: synchronous successive halving that pauses and resumes trials.

Ray's own early-stopping schedulers do not run the paper's search (Appendix "UCI Adult"): ASHA
never pauses a trial, so there is no cohort and a promoted trial is never resumed at a rung;
HyperBand runs several brackets with its own geometric milestones; and ``Tuner.restore`` rebuilds a
scheduler from the pickle written when the run started, without the state it gathered since.

:class:`SynchronousSHAScheduler` pauses a trial (Tune checkpoints it) when its ``time_attr`` reaches
a rung, waits until every live trial of the rung's cohort has reached it or ended, then lets
:class:`~eve_search.engine.ledger.RungLedger` decide: the losers are stopped, the winners resumed from their
checkpoints. The ledger is written beside Tune's experiment state (the driver staging folder that
Tune syncs to ``storage_path``), so a restored run continues it exactly.

:class:`EveTrainable` is a ``tune.Trainable`` over :class:`~eve_search.engine.trial.Trial`: each ``step()``
trains to the next rung budget and reports ``eval_cost``, the task's validation metrics and
``wall_seconds``; its checkpoint is the whole trial (model, optimizer with EvE's population and
moments, cost meter, batch stream, generators), so a paused or restored trial continues bit for bit.

Example (a Ray Tune script; see ``searches/ray_tune_example.py`` for a user's own model)::

    from ray import tune
    from eve_search.integrations.ray import EveTrainable, SynchronousSHAScheduler

    tuner = tune.Tuner(
        tune.with_parameters(EveTrainable, task="adult", rungs=(100, 300, 900), backward_ratio=2.0),
        param_space={"lr": tune.loguniform(1e-4, 1e-2), "weight_decay": 1e-4,
                     "width": tune.choice([64, 256]), "depth": 2},
        tune_config=tune.TuneConfig(metric="accuracy", mode="max", num_samples=27, reuse_actors=True,
                                    scheduler=SynchronousSHAScheduler(rungs=(100, 300, 900))),
    )
    results = tuner.fit()
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eve_search._imports import require
from eve_search.engine.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    RungDecision,
    RungLedger,
    check_fraction,
    check_rungs,
)

require("ray", "ray")
require("ray.tune", "ray")

from ray import tune
from ray.tune.experiment import Trial as TuneTrial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

if TYPE_CHECKING:
    from eve_search.tasks import Task
    from eve_search.engine.trial import Trial

__all__ = ["INDEX_KEY", "STATE_FILE", "EveTrainable", "SynchronousSHAScheduler", "config_index", "load_scheduler_state"]

logger = logging.getLogger(__name__)

STATE_FILE = "eve_sha_scheduler.json"
INDEX_KEY = "trial_index"
MODES = ("max", "min")


def _write_json_atomically(value: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(value, handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_scheduler_state(experiment_path: str | os.PathLike) -> dict[str, Any]:
    """The scheduler state a run saved under ``experiment_path`` (Tune's experiment folder on local
    storage): ``{"ledger": RungLedger.state_dict(), "early": ..., "trials": {trial_id: tag}}``."""
    path = Path(experiment_path) / STATE_FILE
    if not path.exists():
        raise ValueError(f"Invalid experiment_path: {str(experiment_path)!r} (no {STATE_FILE} there)")
    return json.loads(path.read_text())


class SynchronousSHAScheduler(FIFOScheduler):
    """Synchronous successive halving for Ray Tune: pause at each rung, decide when the cohort is in,
    stop the losers, resume the winners from their checkpoints.

    Args:
        time_attr: the cumulative result key that measures training (default ``"eval_cost"``, the
            charged evaluation units of :class:`~eve_search.optim.budget.CostMeter`); a trial reaches a rung
            when ``result[time_attr] >= rung``.
        rungs: cumulative budgets in ``time_attr`` units, whole numbers, strictly increasing.
        fraction: the promoted share of each rung, in (0, 1] (ceil, at least one).
        metric, mode: the ranked result key and ``"max"``/``"min"``; from here or from
            ``tune.TuneConfig(metric=..., mode=...)``, as with Ray's own schedulers.

    Every configuration must be added before the first rung is decided (a finite ``num_samples``);
    the first rung is decided only once the search algorithm has produced all of them. Don't cap
    concurrency with ``max_concurrent_trials``: a paused trial counts as running there, so the
    cohort would never fill.
    """

    _supports_buffered_results = False

    def __init__(self, time_attr: str = "eval_cost", rungs: Sequence[int] = DEFAULT_RUNGS,
                 fraction: float = PROMOTED_FRACTION, metric: str | None = None, mode: str | None = None) -> None:
        super().__init__()
        if not isinstance(time_attr, str) or not time_attr:
            raise ValueError(f"Invalid time_attr: {time_attr!r} (expected a result key)")
        if metric is not None and (not isinstance(metric, str) or not metric):
            raise ValueError(f"Invalid metric: {metric!r} (expected a result key)")
        if mode is not None and mode not in MODES:
            raise ValueError(f"Invalid mode: {mode!r} (expected 'max' or 'min')")
        self._time_attr = time_attr
        self._rungs = check_rungs(rungs)
        self._fraction = check_fraction(fraction)
        self._metric = metric
        self._mode = mode
        self._reset()

    def _reset(self) -> None:
        self._ledger: RungLedger | None = None
        self._early: dict[str, float] = {}  # first-rung scores held until every trial was added
        self._tags: dict[str, str] = {}  # trial id -> Tune's experiment tag (for people reading the state)
        self._trials: dict[str, TuneTrial] = {}
        self._hold: set[str] = set()  # restored trials to park as PAUSED before they start
        self._recovering: set[str] = set()
        self._idle: set[str] = set()  # trials left RUNNING without work on their actor (NOOP)
        self._served: set[str] = set()  # pending trials an idle actor was freed for
        self._state_path: Path | None = None
        self._version = 0  # bumped whenever the ledger or the held scores change
        self._cached: tuple[int, dict[str, str]] = (-1, {})

    # Properties -----------------------------------------------------------------------------------

    @property
    def rungs(self) -> tuple[int, ...]:
        return self._rungs

    @property
    def fraction(self) -> float:
        return self._fraction

    @property
    def mode(self) -> str | None:
        return self._mode

    @property
    def time_attr(self) -> str:
        return self._time_attr

    @property
    def ledger(self) -> RungLedger | None:
        """The rung ledger of the current run (trial ids as keys); None before the first trial."""
        return self._ledger

    def decisions(self) -> list[RungDecision]:
        """Every rung decided so far (trial ids)."""
        return [] if self._ledger is None else self._ledger.decisions()

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        if self._metric and metric and metric != self._metric:
            return False
        if self._mode and mode and mode != self._mode:
            return False
        if mode is not None and mode not in MODES:
            raise ValueError(f"Invalid mode: {mode!r} (expected 'max' or 'min')")
        self._metric = metric or self._metric
        self._mode = mode or self._mode
        return True

    # State on disk --------------------------------------------------------------------------------

    def _open(self, trial: TuneTrial) -> RungLedger:
        """The ledger of ``trial``'s experiment: loaded from the state a previous driver saved there
        (``Tuner.restore``), or new."""
        if self._metric is None:
            raise ValueError("Invalid metric: None (expected SynchronousSHAScheduler(metric=...) or "
                             "tune.TuneConfig(metric=...))")
        if self._mode is None:
            raise ValueError("Invalid mode: None (expected SynchronousSHAScheduler(mode=...) or "
                             "tune.TuneConfig(mode=...), 'max' or 'min')")
        path = Path(trial.storage.experiment_driver_staging_path) / STATE_FILE
        if self._ledger is not None and path == self._state_path:
            return self._ledger
        self._reset()
        self._state_path = path
        self._ledger = RungLedger(self._rungs, self._fraction, self._mode)
        if path.exists():
            state = json.loads(path.read_text())
            if state.get("time_attr") != self._time_attr or state.get("metric") != self._metric:
                raise ValueError(f"Invalid scheduler: time_attr {self._time_attr!r} and metric {self._metric!r} "
                                 f"differ from the restored run's ({state.get('time_attr')!r}, "
                                 f"{state.get('metric')!r})")
            self._ledger.load_state_dict(state["ledger"])
            self._version += 1
            self._early = {str(k): float(v) for k, v in state["early"].items()}
            self._tags = dict(state.get("trials", {}))
            logger.info("SynchronousSHAScheduler: restored %d trials, %d rungs decided, from %s",
                        len(self._ledger.members), len(self._ledger.decisions()), path)
        return self._ledger

    def _save(self) -> None:
        if self._ledger is None or self._state_path is None:
            return
        _write_json_atomically({"time_attr": self._time_attr, "metric": self._metric,
                                "ledger": self._ledger.state_dict(), "early": self._early,
                                "trials": self._tags}, self._state_path)

    # Feeding the ledger ---------------------------------------------------------------------------

    def _searcher_finished(self, tune_controller: Any) -> bool:
        try:
            return bool(tune_controller.search_alg.is_finished())
        except AttributeError:  # an older controller without the property: assume the trials are in
            return True

    def _flush_early(self, tune_controller: Any) -> bool:
        """Hand the first rung's held scores to the ledger once no more trials can join."""
        if not self._early or not self._searcher_finished(tune_controller):
            return False
        assert self._ledger is not None
        for trial_id in self._ledger.members:  # joining order
            if trial_id in self._early and trial_id in self._ledger.cohort(0):
                self._ledger.report(trial_id, 0, self._early[trial_id])
                self._version += 1
        self._early.clear()
        self._version += 1
        return True

    def _record(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> None:
        """Report every rung that ``result`` reaches and the ledger expects from this trial."""
        ledger = self._ledger
        assert ledger is not None
        if self._time_attr not in result:
            shown = ", ".join(sorted(k for k in result if not k.startswith("config/")))
            raise ValueError(f"Invalid result: trial {trial.trial_id} reported no {self._time_attr!r} "
                             f"(the scheduler's time_attr); it reported: {shown}")
        elapsed = float(result[self._time_attr])
        trial_id = trial.trial_id
        while True:
            if trial_id in self._early:
                return
            rung = ledger.next_rung(trial_id)
            if rung is None or elapsed < self._rungs[rung]:
                return
            if self._metric not in result:
                raise ValueError(f"Invalid result: trial {trial_id} reached rung {self._rungs[rung]} "
                                 f"({self._time_attr}={elapsed:g}) without the metric {self._metric!r}")
            score = float(result[self._metric])
            if rung == 0 and not self._searcher_finished(tune_controller):
                self._early[trial_id] = score
                self._version += 1
                return
            ledger.report(trial_id, rung, score)
            self._version += 1

    def _status(self, trial_id: str) -> str:
        """The ledger's status of a trial ("wait" while its first-rung score is held), computed once
        per change of the ledger: Tune asks for it on every step."""
        assert self._ledger is not None
        if self._cached[0] != self._version:
            self._cached = (self._version, {})
        statuses = self._cached[1]
        if trial_id not in statuses:
            statuses[trial_id] = "wait" if trial_id in self._early else self._ledger.status(trial_id)
        return statuses[trial_id]

    def _reached(self, trial_id: str) -> int:
        """The budget of the highest rung this trial has reported (0: none)."""
        assert self._ledger is not None
        if trial_id in self._early:
            return self._rungs[0]
        reported = [self._rungs[k] for k in range(len(self._rungs)) if self._ledger.score(trial_id, k) is not None]
        return max(reported, default=0)

    def _paused_winners(self) -> list[TuneTrial]:
        return [t for tid, t in self._trials.items()
                if t.status == TuneTrial.PAUSED and tid not in self._hold and self._status(tid) == "train"]

    def _runnable(self, tune_controller: Any, exclude: TuneTrial) -> bool:
        """Whether another trial could use ``exclude``'s actor now."""
        return any(t is not exclude and t.status == TuneTrial.PENDING and t.trial_id not in self._hold
                   for t in tune_controller.get_trials()) or bool(self._paused_winners())

    def _act(self, tune_controller: Any, current: TuneTrial | None = None) -> None:
        """Carry out the ledger's decisions on every trial but ``current`` (it gets the return value)."""
        assert self._ledger is not None
        for trial_id in self._ledger.members:
            trial = self._trials.get(trial_id)
            if trial is None or trial is current:
                continue
            status = self._status(trial_id)
            if trial_id in self._idle:
                if trial.status != TuneTrial.RUNNING:
                    self._idle.discard(trial_id)
                elif status == "train":
                    self._idle.discard(trial_id)
                    self._resume(tune_controller, trial)
                elif status != "wait" and not self._paused_winners():
                    self._idle.discard(trial_id)
                    tune_controller.stop_trial(trial)
                continue
            if status in ("stopped", "complete", "failed"):
                parked = trial.status == TuneTrial.PAUSED or trial.is_saving
                if parked or (trial.status == TuneTrial.PENDING and trial_id in self._hold):
                    self._hold.discard(trial_id)
                    tune_controller.stop_trial(trial)

    @staticmethod
    def _resume(tune_controller: Any, trial: TuneTrial) -> None:
        """Train an idle trial (its actor kept its state) on to its next rung."""
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        train = getattr(controller, "_schedule_trial_train", None)
        if train is not None:
            train(trial)
        else:  # a controller without the hook: checkpoint, pause, and let choose_trial_to_run resume it
            tune_controller.pause_trial(trial)

    def _action(self, tune_controller: Any, trial: TuneTrial) -> str:
        """What ``trial`` does after its result. A trial that must wait (or has lost) while no other
        trial could take its actor stays idle on it (NOOP) rather than pausing: Tune would otherwise
        shut the actor down, and the next trial would pay a new one's start-up (seconds: a Python
        process importing torch) for a fraction of a second of training."""
        status = self._status(trial.trial_id)
        if status == "train":
            return TrialScheduler.CONTINUE
        if status == "wait":
            if self._runnable(tune_controller, trial):
                return TrialScheduler.PAUSE
            self._idle.add(trial.trial_id)
            return TrialScheduler.NOOP
        if self._paused_winners():  # hand its actor to a winner once one is waiting for an actor
            self._idle.add(trial.trial_id)
            return TrialScheduler.NOOP
        return TrialScheduler.STOP

    # Tune's callbacks ---------------------------------------------------------------------------------

    def on_trial_add(self, tune_controller: Any, trial: TuneTrial) -> None:
        ledger = self._open(trial)
        trial_id = trial.trial_id
        self._trials[trial_id] = trial
        recovering = trial_id in self._recovering
        self._recovering.discard(trial_id)
        if trial_id not in ledger.members:
            if ledger.decide(0) is not None:
                raise ValueError(f"Invalid trial: {trial_id} was added after rung {self._rungs[0]} was decided "
                                 "(add every configuration up front: a finite num_samples)")
            ledger.add(trial_id)
            self._version += 1
            self._tags[trial_id] = str(trial.experiment_tag)
            self._save()
            return
        # A trial the ledger knows: restored by Tuner.restore, or requeued after its actor failed. It
        # restarts from its latest checkpoint; if that already holds every rung it reported, and it
        # must wait or stop, it is parked instead of training past its rung.
        if trial.status not in (TuneTrial.PENDING, TuneTrial.PAUSED):
            return
        checkpoint = trial.latest_checkpoint_result
        restored = float(checkpoint.metrics.get(self._time_attr, 0.0)) if checkpoint is not None else 0.0
        if self._status(trial_id) != "train" and restored >= self._reached(trial_id):
            self._hold.add(trial_id)
        elif recovering:
            logger.info("SynchronousSHAScheduler: trial %s rejoins its rung from %s=%g", trial_id,
                        self._time_attr, restored)

    def on_trial_result(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> str:
        self._open(trial)
        self._record(tune_controller, trial, result)
        self._flush_early(tune_controller)
        self._act(tune_controller, current=trial)
        self._save()
        return self._action(tune_controller, trial)

    def on_trial_complete(self, tune_controller: Any, trial: TuneTrial, result: dict[str, Any]) -> None:
        ledger = self._open(trial)
        trial_id = trial.trial_id
        if result and self._time_attr in result:
            self._record(tune_controller, trial, result)
            self._flush_early(tune_controller)
        status = self._status(trial_id)
        # A trial that ends on its own (done, or a Tune stopper) before its rung leaves the cohort; one
        # that ended at the last rung keeps its place there.
        last_rung_reported = ledger.score(trial_id, len(self._rungs) - 1) is not None
        if status == "train" or (status == "wait" and not last_rung_reported):
            self._early.pop(trial_id, None)
            ledger.fail(trial_id)
            self._version += 1
        self._act(tune_controller, current=trial)
        self._save()

    def on_trial_remove(self, tune_controller: Any, trial: TuneTrial) -> None:
        ledger = self._open(trial)
        if self._status(trial.trial_id) in ("train", "wait"):  # stopped by someone else
            self._early.pop(trial.trial_id, None)
            ledger.fail(trial.trial_id)
            self._version += 1
            self._act(tune_controller, current=trial)
            self._save()

    def on_trial_error(self, tune_controller: Any, trial: TuneTrial) -> None:
        ledger = self._open(trial)
        if trial.status == TuneTrial.ERROR and trial.should_recover():
            # Tune is requeueing it (FailureConfig(max_failures)): it restores from its last checkpoint
            # and is added again.
            self._recovering.add(trial.trial_id)
            return
        if self._status(trial.trial_id) in ("train", "wait"):
            self._early.pop(trial.trial_id, None)
            ledger.fail(trial.trial_id)
            self._version += 1
            self._act(tune_controller, current=trial)
            self._save()

    def choose_trial_to_run(self, tune_controller: Any) -> TuneTrial | None:
        if self._ledger is None:
            return super().choose_trial_to_run(tune_controller)
        changed = self._flush_early(tune_controller)
        for trial_id in sorted(self._hold):
            trial = self._trials.get(trial_id)
            if trial is not None and trial.status == TuneTrial.PENDING:
                tune_controller._set_trial_status(trial, TuneTrial.PAUSED)
                if self._status(trial_id) == "wait":
                    self._hold.discard(trial_id)
            elif trial is None or trial.status != TuneTrial.PAUSED:
                self._hold.discard(trial_id)
        # A trial that ended without the ledger hearing of it (an error while pending, a requeue that
        # never came) leaves the cohort, so the others never wait for it.
        for trial_id in self._ledger.members:
            trial = self._trials.get(trial_id)
            if trial is None or trial.status not in (TuneTrial.TERMINATED, TuneTrial.ERROR):
                continue
            status = self._status(trial_id)
            if status == "train" or (status == "wait" and trial.status == TuneTrial.ERROR):
                self._early.pop(trial_id, None)
                self._ledger.fail(trial_id)
                self._version += 1
                changed = True
        trials = tune_controller.get_trials()
        for trial_id in list(self._served):
            if self._trials[trial_id].status != TuneTrial.PENDING:
                self._served.discard(trial_id)
        for trial_id in sorted(self._idle):
            if self._trials[trial_id].status != TuneTrial.RUNNING:
                self._idle.discard(trial_id)
        # A trial waiting for an actor takes an idle one's: stopping (a loser) or pausing (a trial that
        # waits for its rung) it while the other is staged lets Tune hand the actor over.
        needers = [t for t in trials if t.status == TuneTrial.PENDING and t.trial_id not in self._hold
                   and t.trial_id not in self._served]
        idle = sorted(self._idle, key=lambda tid: self._status(tid) == "wait")  # losers first
        for needer, trial_id in zip(needers, idle):
            self._served.add(needer.trial_id)
            self._idle.discard(trial_id)
            if self._status(trial_id) == "wait":
                tune_controller.pause_trial(self._trials[trial_id])
            else:
                tune_controller.stop_trial(self._trials[trial_id])
        self._act(tune_controller)
        if changed:
            self._save()
        for trial in trials:
            if trial.status == TuneTrial.PENDING and trial.trial_id not in self._hold:
                return trial
        for trial in trials:
            if (trial.status == TuneTrial.PAUSED and trial.trial_id in self._trials
                    and trial.trial_id not in self._hold and self._status(trial.trial_id) == "train"):
                return trial
        return None

    def debug_string(self) -> str:
        if self._ledger is None:
            return "Using synchronous successive halving (no trials yet)."
        parts = []
        for rung, budget in enumerate(self._rungs):
            cohort = self._ledger.cohort(rung)
            if not cohort and rung > 0:
                break
            reported = len(self._ledger.scores(rung)) + (len(self._early) if rung == 0 else 0)
            parts.append(f"{budget:g}: {reported}/{len(cohort)}")
        return f"Synchronous SHA ({self._time_attr} rungs, reported/cohort): {', '.join(parts)}"

    def save(self, checkpoint_path: str) -> None:
        _write_json_atomically({"ledger": None if self._ledger is None else self._ledger.state_dict(),
                                "early": self._early}, Path(checkpoint_path))

    def restore(self, checkpoint_path: str) -> None:
        state = json.loads(Path(checkpoint_path).read_text())
        if state["ledger"] is not None:
            self._ledger = RungLedger(self._rungs, self._fraction, self._mode or "max")
            self._ledger.load_state_dict(state["ledger"])
            self._version += 1
        self._early = dict(state["early"])


# The trainable ----------------------------------------------------------------------------------------


def config_index(config: dict[str, Any]) -> int:
    """A configuration's index for its seeds: ``config[INDEX_KEY]`` when the sweep gives one, else a
    stable hash of the configuration (the same configuration gets the same weights and batches)."""
    if INDEX_KEY in config:
        return int(config[INDEX_KEY])
    text = json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, default=repr)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF


class EveTrainable(tune.Trainable):
    """A Ray Tune trainable over :class:`~eve_search.engine.trial.Trial`, for any registered task.

    Pass the settings with ``tune.with_parameters(EveTrainable, task=..., rungs=..., ...)``; the
    trial's ``config`` is the configuration (``lr``, ``weight_decay`` and the task's model keys).

    Args (keywords of ``setup``):
        task: a :class:`~eve_search.tasks.Task` (it travels to the actor without its data) or a
            registered task name.
        optimizer: ``"eve"`` or a baseline name; ``seed``: the training seed.
        rungs: where ``step()`` stops: each step trains to the next rung budget.
        cost_mode: ``"calibrated"`` or ``"measured"`` (see :class:`~eve_search.optim.budget.CostMeter`).
        backward_ratio: one frozen backward/forward ratio for every configuration, or
            ``backward_ratios``: one per ``task.cost_key(config)`` (a sweep measures them once, before
            training); with neither, calibrated mode measures this trial's own ratio in ``setup``.
        data_dir: the task's data folder on the worker (None: its default data).
        owner: the sweep a checkpoint belongs to (a checkpoint of another sweep is refused).
        test_metrics: also report the task's metrics on the test split, as ``test`` (for a driver
            that records the test score of the best configuration).

    The configuration's seeds come from ``config["trial_index"]`` when present (a sweep's
    configuration index; the key is not passed to the model), else from a hash of the configuration.
    """

    def setup(self, config: dict[str, Any], task: Task | str = "adult", optimizer: str = "eve",
              rungs: Sequence[int] = DEFAULT_RUNGS, seed: int = 0, cost_mode: str = "calibrated",
              backward_ratio: float | None = None, backward_ratios: dict[str, float] | None = None,
              data_dir: str | None = None, owner: str = "", test_metrics: bool = False) -> None:
        from eve_search.tasks import get_task

        self._task = get_task(task) if isinstance(task, str) else task
        self._settings = {"optimizer": optimizer, "seed": seed, "cost_mode": cost_mode, "owner": owner}
        self._rungs = check_rungs(rungs)
        self._backward_ratio = backward_ratio
        self._backward_ratios = dict(backward_ratios or {})
        self._data_dir = data_dir
        self._test_metrics = bool(test_metrics)
        self.trial = self._build(config)

    def _build(self, config: dict[str, Any]) -> Trial:
        from eve_search.engine.trial import Trial

        params = {k: v for k, v in config.items() if k != INDEX_KEY}
        s = self._settings
        index = config_index(config)
        data = self._task.data(self._data_dir)
        ratio = None
        if s["cost_mode"] == "calibrated":
            ratio = self._backward_ratios.get(self._task.cost_key(params), self._backward_ratio)
            if ratio is None:
                ratio = Trial(self._task, params, s["optimizer"], seed=s["seed"], index=index, cost_mode="measured",
                              data=data).calibrate()
        return Trial(self._task, params, s["optimizer"], seed=s["seed"], index=index, cost_mode=s["cost_mode"],
                     backward_ratio=ratio, data=data, owner=s["owner"])

    def _metrics(self) -> dict[str, Any]:
        trial = self.trial
        val = trial.evaluate("val")
        result: dict[str, Any] = {"eval_cost": trial.charged_units, "budget": trial.budget, **val, "val": val,
                                  "wall_seconds": trial.wall_seconds, "backward_passes": trial.meter.backward_passes}
        if self._test_metrics:
            result["test"] = trial.evaluate("test")
        result["done"] = trial.budget >= self._rungs[-1]
        return result

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
