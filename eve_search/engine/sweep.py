"""One sweep, end to end: sample the configurations, calibrate the cost, run SHA, summarize.

A sweep is (task, search space, optimizer, training seed): the same configurations for every
optimizer, the same initial weights and batches for every optimizer at a given training seed. Its
results and checkpoints live in a :class:`~eve_search.engine.store.SweepStore`, so a killed sweep resumes
and ends exactly as an uninterrupted one would.

:func:`prepare_sweep` does everything that can fail on bad input (the task's data, the store, the
settings) before any training; :meth:`Sweep.run` trains. Drivers other than the in-process engine
(Ray Tune, Optuna workers) take the same :class:`Sweep` and use its trials, store and result.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from eve_search._checks import InputError, check_int
from eve_search.engine._background import BackgroundStore
from eve_search.engine._workers import TrialJob, TrialWorkers, check_jobs
from eve_search.optim.budget import check_backward_ratio, check_cost_mode
from eve_search.engine.backend import finish
from eve_search.engine.ledger import (
    DEFAULT_RUNGS,
    PROMOTED_FRACTION,
    RungLedger,
    check_fraction,
    check_rungs,
    rung_sizes,
)
from eve_search.optim import optimizer_names
from eve_search.engine.sha import OnWorkers, RungReport, SynchronousSuccessiveHalving, one_torch_thread
from eve_search.tasks.spaces import Config, get_space
from eve_search.engine.store import StoreError, SweepStore, study_name
from eve_search.data import splits_checksum
from eve_search.tasks import Splits, Task, get_task
from eve_search.engine.checkpoint import CheckpointError
from eve_search.engine.trial import CALIBRATION_AGREEMENT, CALIBRATION_RANGE, Trial, evaluate_checkpoint, warm_up

__all__ = ["SearchSettings", "Sweep", "SweepResult", "SweepSettings", "calibration_note", "model_sizes",
           "prepare_sweep", "run_sweep", "warm_up"]


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """What every driver of a synchronous successive-halving search shares: how a trial trains (optimizer,
    seed, cost rule), the rung rule, and the cohorts. :class:`SweepSettings` and the Optuna driver's
    ``ShaOptions`` are built on it, so each field is declared and checked once; give them as keywords.

    Args:
        optimizer: a registered optimizer (:func:`~eve_search.optim.optimizer_names`).
        seed: the training seed (weights, batches, EvE's randomness), an int >= 0.
        rungs: the rung budgets in evaluation units, strictly increasing (default: the paper's).
        fraction: the share of each rung promoted to the next, in (0, 1].
        cost_mode: ``"calibrated"`` or ``"measured"`` (see :class:`~eve_search.optim.budget.CostMeter`).
        backward_ratio: the pinned backward/forward ratio (calibrated mode only), or None (measured once
            per model shape before training).
        cohort_size: run the configurations as a stream of cohorts of this size, each decided as one
            synchronous sweep of its configurations, in index order (see
            :class:`~eve_search.engine.stream.CohortStream`); None: one cohort of all.

    Raises:
        InputError: one line naming the field, its value and what was expected.

    Example:
        >>> SearchSettings(rungs=[10, 30], backward_ratio=2.0).rungs
        (10, 30)
        >>> SearchSettings(fraction=1.5)
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid fraction: 1.5 (expected a number in (0, 1])
    """

    optimizer: str = "eve"
    seed: int = 0
    rungs: tuple[int, ...] = DEFAULT_RUNGS
    fraction: float = PROMOTED_FRACTION
    cost_mode: str = "calibrated"
    backward_ratio: float | None = None
    cohort_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rungs", check_rungs(self.rungs))
        object.__setattr__(self, "fraction", check_fraction(self.fraction))
        if self.optimizer not in optimizer_names():
            raise InputError(f"Invalid optimizer: {self.optimizer!r} (expected one of {', '.join(optimizer_names())})")
        check_int("seed", self.seed, 0)
        check_cost_mode(self.cost_mode)
        check_backward_ratio(self.backward_ratio, self.cost_mode)
        if self.cohort_size is not None:
            check_int("cohort_size", self.cohort_size, 1, detail=" of configurations, or None")

    def search_fields(self) -> dict[str, Any]:
        """The fields of :class:`SearchSettings`, by name: what an options object built on it takes from
        these settings (e.g. ``ShaOptions(**settings.search_fields(), poll_interval=0.1)``).

        Example:
            >>> sorted(SweepSettings(space="hp", optimizer="adam").search_fields())
            ['backward_ratio', 'cohort_size', 'cost_mode', 'fraction', 'optimizer', 'rungs', 'seed']
        """
        return {f.name: getattr(self, f.name) for f in fields(SearchSettings)}


@dataclass(frozen=True, kw_only=True)
class SweepSettings(SearchSettings):
    """Everything that defines a sweep; resuming with other settings is refused.

    ``backward_ratio`` pins the calibrated ratio for every model shape (reproducible across
    machines and runs); None measures it once per shape (the task's ``cost_key``) at the start.

    Args:
        space: a registered search space (:func:`~eve_search.tasks.spaces.space_names`).
        optimizer: a registered optimizer (:func:`~eve_search.optim.optimizer_names`).
        config_seed: the seed the configurations are sampled from.
        configs: how many configurations enter the first rung.
        task: a registered task (:func:`~eve_search.tasks.task_names`).
        seed, rungs, fraction, cost_mode, backward_ratio, cohort_size: as for :class:`SearchSettings`.

    Example:
        >>> settings = SweepSettings(space="arch", optimizer="eve", configs=8, rungs=(100, 300))
        >>> settings.name
        'adult-arch-eve-seed0'
    """

    optimizer: str  # no default here: a sweep names its optimizer
    space: str
    config_seed: int = 0
    configs: int = 48
    task: str = "adult"

    def __post_init__(self) -> None:
        super().__post_init__()
        get_space(self.space)
        check_int("config_seed", self.config_seed, 0)
        check_int("configs", self.configs, 1)

    @property
    def name(self) -> str:
        return study_name(self.task, self.space, self.optimizer, self.seed, self.config_seed)

    def as_dict(self) -> dict[str, Any]:
        """The settings as the store keeps them (in this order), with the task's metric and mode."""
        values = {name: getattr(self, name) for name in _SETTINGS_ORDER}
        values["rungs"] = list(self.rungs)
        if self.cohort_size is None or self.cohort_size >= self.configs:  # one cohort: as stored before cohorts
            values.pop("cohort_size")
        task = get_task(self.task)
        values.update(metric=task.metric, mode=task.mode)
        return values


# The order of SweepSettings.as_dict, which the fields had before SearchSettings was split out of them.
_SETTINGS_ORDER = ("space", "optimizer", "seed", "config_seed", "configs", "rungs", "fraction", "cost_mode",
                   "backward_ratio", "task", "cohort_size")


@dataclass
class SweepResult:
    """A finished sweep, as printed and written by ``--json``.

    ``best`` is the best validation score found at any rung (the paper's "best validation accuracy
    found"), with its configuration, rung budget and test metrics; ``winner`` is the configuration
    SHA kept to the last rung, with its final validation score and test metrics.

    Attributes:
        task: the task's name.
        optimizer: the optimizer's name.
        space: the search space's name.
        seed: the training seed.
        metric: the validation metric ranked by (the task's).
        wall_seconds: the sweep's wall time, over every run of it.
        training_seconds: the trials' own training time, summed.
        charged_units: evaluation units charged, summed over the trials.
        cost_mode: ``"calibrated"`` or ``"measured"``.
        backward_ratios: the frozen backward/forward ratio of each model shape (calibrated mode).
        best: ``index``, ``config``, ``score``, ``budget`` and ``test`` of the best score found.
        winner: ``index``, ``config``, ``score`` and ``test`` of the configuration SHA kept.
        rungs: per rung, its ``budget``, how many ``trials`` it trained and how many it ``promoted``.
        trials: per configuration, its ``index``, ``config`` and ``scores`` by rung budget.
        trained: trial-rungs trained by this call (0 when every result came from the store).

    Example (trains: several seconds, so not run as a doctest; tests/engine runs sweeps):
        >>> result = run_sweep(SweepSettings(space="hp", optimizer="eve", backward_ratio=2.0),  # doctest: +SKIP
        ...                    storage="sqlite:///runs/results.db", checkpoint_dir=Path("runs/checkpoints"))
        >>> result.winner["config"], result.rungs[0]  # doctest: +SKIP
    """

    task: str
    optimizer: str
    space: str
    seed: int
    metric: str
    wall_seconds: float
    training_seconds: float
    charged_units: float
    cost_mode: str
    backward_ratios: dict[str, float]
    best: dict[str, Any]
    winner: dict[str, Any]
    rungs: list[dict[str, Any]]
    trials: list[dict[str, Any]] = field(repr=False)
    trained: int = 0  # trial-rungs trained by this call (0 when every result came from the store)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


WALL_TIME_INTERVAL = 1.0
"""Seconds between two writes of a running sweep's wall time to its store."""

ProgressCallback = Callable[[str, int, int, int, float | None], None]


class Sweep:
    """A prepared sweep: its task and data, configurations, store and the trials' factory.

    Build it with :func:`prepare_sweep`; :meth:`run` trains it in this process.

    Args:
        settings: what the sweep is.
        task: the task it trains.
        data: the task's loaded splits.
        configs: the sampled configurations, index = position.
        store: the sweep's results store (holds what an earlier run recorded).
        data_dir: where the data came from (None: the task's default), for worker processes.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> settings = SweepSettings(space="hp", optimizer="eve", configs=3, rungs=(100, 300), backward_ratio=2.0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     sweep = prepare_sweep(settings, storage=f"sqlite:///{folder}/results.db",
        ...                           checkpoint_dir=Path(folder) / "checkpoints")
        ...     ratios = sweep.calibrate()  # pinned by backward_ratio: nothing is measured
        ...     print(sorted(set(ratios.values())), sweep.make_trial(0).budget)
        [2.0] 0
        >>> result = sweep.run()  # trains every rung: not run here  # doctest: +SKIP
    """

    def __init__(self, settings: SweepSettings, task: Task, data: Splits, configs: list[Config],
                 store: SweepStore, data_dir: Path | None = None) -> None:
        self.settings = settings
        self.task = task
        self.data = data
        self.data_dir = data_dir  # where the data came from (None: the task's default), for other processes
        self.configs = configs
        self.store = store
        self.ratios: dict[str, float] = dict(store.get("backward_ratios") or {})
        self._started = time.perf_counter()
        self._elapsed_before = float(store.get("wall_seconds", 0.0))
        # The best validation result of this run so far: (score, (budget, index), checkpoint bytes or
        # None when it was recorded before this run), for the test metrics taken once at the end.
        self._best_seen: tuple[float, tuple[int, int], bytes | dict[str, float] | None] | None = None
        self.calibration_notes: list[str] = []  # ratios that could not be measured reliably (also on stderr)

    def start_clock(self) -> None:
        """Start (or restart) this run's share of the sweep's wall clock, e.g. once a backend is up."""
        self._started = time.perf_counter()

    def elapsed(self) -> float:
        """Wall seconds of this sweep, over every run of it (a resumed sweep adds to the stored time)."""
        return self._elapsed_before + time.perf_counter() - self._started

    def calibrate(self, workers: TrialWorkers | None = None) -> dict[str, float]:
        """One frozen backward/forward ratio per model shape, measured before any training (paper,
        Appendix "Evaluation-Cost Accounting"; see :class:`~eve_search.optim.budget.CostMeter`). With
        ``workers``, measured in a worker process, where the trials will train."""
        s = self.settings
        if s.cost_mode != "calibrated":
            return {}
        for index, config in enumerate(self.configs):
            key = self.task.cost_key(config)
            if key in self.ratios:
                continue
            if s.backward_ratio is not None:
                self.ratios[key] = s.backward_ratio
            else:
                if workers is not None:
                    self.ratios[key], report = workers.calibrate(self._job(index, None, ())).result()
                else:
                    probe = Trial(self.task, config, s.optimizer, seed=s.seed, index=index, cost_mode="measured",
                                  data=self.data)
                    self.ratios[key], report = probe.calibrate(), probe.last_calibration
                if report is not None and not report["reliable"]:
                    note = calibration_note(key, self.ratios[key], report)
                    self.calibration_notes.append(note)
                    print(f"eve-search: {note}", file=sys.stderr)
            self.store.set("backward_ratios", self.ratios)  # stored at once: a resumed sweep charges identically
        return self.ratios

    def _job(self, index: int, checkpoint: Path | None, budgets: tuple[int, ...]) -> TrialJob:
        s = self.settings
        config = self.configs[index]
        return TrialJob(index=index, config=config, optimizer=s.optimizer, seed=s.seed, cost_mode=s.cost_mode,
                        backward_ratio=self.ratios.get(self.task.cost_key(config)) if s.cost_mode == "calibrated"
                        else None, owner=self.store.sweep_id,
                        checkpoint=None if checkpoint is None else str(checkpoint), budgets=budgets)

    def _job_cost(self) -> Callable[[int], float]:
        """A trial's relative cost per unit: its model's parameter count (see :func:`model_sizes`)."""
        return model_sizes(self.task, self.data, self.configs)

    def make_trial(self, index: int) -> Trial:
        """A fresh trial of configuration ``index`` (calibrate first in calibrated mode)."""
        s = self.settings
        config = self.configs[index]
        return Trial(self.task, config, s.optimizer, seed=s.seed, index=index, cost_mode=s.cost_mode,
                     backward_ratio=self.ratios.get(self.task.cost_key(config)) if s.cost_mode == "calibrated"
                     else None, data=self.data, owner=self.store.sweep_id)

    def evaluate_checkpoint(self, index: int, content: bytes, split: str = "val", *,
                            budget: int | None = None) -> dict[str, float]:
        """Metrics of configuration ``index``'s model saved in ``content`` (at ``budget``, when given),
        without its optimizer (see :func:`~eve_search.engine.trial.evaluate_checkpoint`)."""
        return evaluate_checkpoint(self.task, self.configs[index], content, split, seed=self.settings.seed,
                                   index=index, data=self.data, budget=budget)

    def note_best(self, trial: Any, metrics: dict[str, float]) -> dict[str, Any]:
        """The in-process engine's ``details`` hook: keep the state of the best validation result so far
        (a serialized checkpoint, a handful per sweep), so that the test set is scored once, for the
        best result found (:meth:`test_best`), not at every improvement. Records nothing itself.

        "Best" is :meth:`~eve_search.engine.store.SweepStore.best_found`'s order: the higher score
        (lower in "min" mode), ties to the earlier rung, then the configuration sampled first; a score that is
        not finite (NaN, +-inf) never.
        """
        score = trial.score(metrics)
        if not math.isfinite(score):
            return {}
        key = (int(trial.budget), int(trial.index))
        if self._best_seen is None:  # after a restart: the best recorded so far, its state not at hand
            details = self.store.rung_details()
            best = self.store.best_found(details, self.task.mode) if any(details.values()) else None
            if best is not None and math.isfinite(best["score"]):
                self._best_seen = (best["score"], (best["budget"], best["index"]), None)
        if self._best_seen is not None:
            seen, seen_key, _ = self._best_seen
            sign = 1.0 if self.task.mode == "max" else -1.0
            if not (sign * score > sign * seen or (score == seen and key < seen_key)):
                return {}
        # (Asked in this order: a worker's trial builds itself when asked for any other attribute.)
        if hasattr(trial, "pending_checkpoint"):  # a worker's checkpoint: asked for now, waited for if tested
            state: bytes | dict[str, float] | Callable[[], bytes | None] | None = trial.pending_checkpoint()
        elif hasattr(trial, "test_metrics"):  # measured already (a Ray actor reports them with each result)
            state = trial.test_metrics()
        else:
            state = trial.to_bytes()
        self._best_seen = (score, key, state)
        return {}

    def test_best(self) -> None:
        """Score the test set once for the best validation result found (when its record has no test
        metrics yet) and add them to that record: from the state :meth:`note_best` kept, else from the
        configuration's checkpoint when it holds that rung's state (a resumed run, or a best another
        worker process trained, at the last rung), else from :meth:`replay`, the trial retrained to that
        rung budget exactly."""
        details = self.store.rung_details()
        if not any(details.values()):
            return
        best = self.store.best_found(details, self.task.mode)
        if best["test"] is not None or not math.isfinite(best["score"]):
            return
        index, budget = best["index"], best["budget"]
        kept = self._best_seen
        state = kept[2] if kept is not None and kept[1] == (budget, index) else None
        if callable(state):
            state = state()
        if isinstance(state, dict):
            test = state
        elif isinstance(state, bytes):
            test = self.evaluate_checkpoint(index, state, "test")
        else:
            test = self._test_from_checkpoint(index, budget)
            if test is None:
                test = self.replay(index, budget).evaluate("test")
        self.store.add_test(index, budget, test)

    def _test_from_checkpoint(self, index: int, budget: int) -> dict[str, float] | None:
        """Test metrics of configuration ``index`` from its checkpoint when that holds its state at
        ``budget`` (equal, bit for bit, to a replay's); None when it does not (missing, at another
        rung, unreadable, another trial's)."""
        try:
            return self.evaluate_checkpoint(index, Path(self.store.checkpoint_path(index)).read_bytes(), "test",
                                            budget=budget)
        except (OSError, CheckpointError):
            return None

    def replay(self, index: int, budget: int) -> Trial:
        """A fresh trial of configuration ``index`` trained through every rung budget up to ``budget``, in
        order: exactly the state it had when it reported at that rung (in this process, with its
        threads)."""
        trial = self.make_trial(index)
        for rung_budget in self.settings.rungs:
            if rung_budget <= budget:
                trial.train_to(rung_budget)
        return trial

    def run(self, progress: ProgressCallback | None = None, *, jobs: int | None = None) -> SweepResult:
        """Calibrate, train every rung not yet in the store, and summarize.

        ``jobs``: train each rung's trials on this many worker processes with one PyTorch thread
        each (results identical for every ``jobs``, but not always to the default in-process run,
        which uses PyTorch's default threads; see :mod:`eve_search.engine._workers`).
        """
        if jobs is None:
            return self._run(progress, None)
        workers = TrialWorkers(self.task, check_jobs(jobs), self.data_dir, optimizer=self.settings.optimizer)
        # The workers train; this process only records, decides and scores new bests on the test set
        # (one small forward each), so it runs one PyTorch thread: no waiting OpenMP threads of its own
        # compete with the workers for the CPUs.
        try:
            with one_torch_thread():
                workers.wait_until_ready()  # the sweep's clock starts once they are up, as after the in-process warm-up
                return self._run(progress, workers)
        finally:
            workers.close()

    def _run(self, progress: ProgressCallback | None, workers: TrialWorkers | None) -> SweepResult:
        refuse_if_running(self.store, self.settings.name)
        self.store.set(RUNNING_KEY, this_process())
        try:
            return self._train_all(progress, workers)
        finally:
            self.store.set(RUNNING_KEY, None)  # (also on Ctrl-C or an error; a killed run leaves a dead process)

    def _train_all(self, progress: ProgressCallback | None, workers: TrialWorkers | None) -> SweepResult:
        if workers is None:
            warm_up(self.settings.optimizer)
        self.start_clock()
        if progress is not None:
            progress("calibrating", 0, 0, 0, None)
        calibration_started = time.perf_counter()
        self.calibrate(workers)
        calibration_seconds = time.perf_counter() - calibration_started
        s = self.settings
        sizes = expected_rung_sizes(len(self.configs), s.cohort_size, s.rungs, s.fraction)
        done_at = [0] * len(s.rungs)
        state = {"done": 0, "rung": 0, "best": None, "trained": 0, "written": -math.inf}
        sign = 1.0 if self.task.mode == "max" else -1.0

        def on_result(rung: int, index: int, score: float, resumed: bool) -> None:
            if rung != state["rung"]:  # (with several cohorts, the count of the rung this result is at)
                state.update(rung=rung, done=done_at[rung])
            done_at[rung] += 1
            state["done"] = done_at[rung]
            if math.isfinite(score) and (state["best"] is None or sign * score > sign * state["best"]):
                state["best"] = score
            if not resumed:
                state["trained"] += 1
                # The sweep's wall time, kept for a resumed run to add to: written at most once a
                # second (a killed run loses at most that much of its count, never a result).
                now = time.perf_counter()
                if now - state["written"] >= WALL_TIME_INTERVAL:
                    state["written"] = now
                    self.store.set("wall_seconds", self.elapsed())
            if progress is not None:
                progress("training", rung, state["done"], sizes[rung], state["best"])

        # Store writes go to one background thread in the order they are issued (checkpoint before
        # result, results before the rung's decision), so the next trial trains meanwhile; a killed
        # sweep leaves a store an uninterrupted one also passed through (see eve_search.engine._background).
        store = self.store
        self.store = writer = BackgroundStore(store)
        try:
            on_workers = None if workers is None else OnWorkers(
                workers, lambda index, rung: self._job(index, writer.checkpoint_path(index), s.rungs[:rung + 1]),
                job_cost=self._job_cost(), evaluate_checkpoint=self.evaluate_checkpoint)
            engine = SynchronousSuccessiveHalving(
                len(self.configs), self.make_trial, writer, rungs=s.rungs, fraction=s.fraction, mode=self.task.mode,
                details=self.note_best, on_result=on_result, on_workers=on_workers, cohort_size=s.cohort_size)
            engine.run()
            result = finish(self, _LocalBackend(engine), trained=state["trained"])
        finally:
            self.store = store
            closing = time.perf_counter()
            writer.close()  # also on Ctrl-C: everything queued is written before the process ends
        # Where this run's wall time went (eve-search bench sweep reads it; not part of the results).
        store.set("run_seconds", {"calibration": calibration_seconds, **engine.seconds,
                                  "store": engine.seconds["store"] + time.perf_counter() - closing,
                                  "writer_cpu": writer.busy_seconds,
                                  "sweep": time.perf_counter() - self._started})
        return result

    def result(self, reports: list[RungReport], winner: dict[str, Any], trained: int) -> SweepResult:
        """The summary of a finished sweep from its rung reports and the store."""
        s = self.settings
        details = self.store.rung_details()
        best = self.store.best_found(details, self.task.mode)
        last_rung = {index: rungs[max(rungs)] for index, rungs in details.items() if rungs}
        return SweepResult(
            task=s.task, optimizer=s.optimizer, space=s.space, seed=s.seed, metric=self.task.metric,
            wall_seconds=float(self.store.get("wall_seconds", 0.0)),
            training_seconds=sum(d["wall_seconds"] for d in last_rung.values()),
            charged_units=sum(d["charged_units"] for d in last_rung.values()),
            cost_mode=s.cost_mode,
            backward_ratios=dict(self.ratios),
            best={**best, "config": self.configs[best["index"]]},
            winner={"index": winner["index"], "config": self.configs[winner["index"]],
                    "score": winner["score"], "test": winner["test"]},
            rungs=[{"budget": budget, "trials": sum(len(r.trials) for r in reports if r.budget == budget),
                    "promoted": sum(len(r.promoted) for r in reports if r.budget == budget)}
                   for budget in s.rungs if any(r.budget == budget for r in reports)],
            trials=[{"index": index, "config": self.configs[index],
                     "scores": {str(budget): d["score"] for budget, d in sorted(details.get(index, {}).items())}}
                    for index in range(len(self.configs))],
            trained=trained,
        )


class _LocalBackend:
    """The in-process engine as a :class:`~eve_search.engine.backend.SweepBackend`: its stream's ledgers
    (keyed by configuration index), and the winner scored from the trial the engine holds or its checkpoint."""

    def __init__(self, engine: SynchronousSuccessiveHalving) -> None:
        self._engine = engine

    def ledgers(self) -> list[RungLedger]:
        stream = self._engine.stream
        return [stream.ledger(k) for k in range(stream.opened)]

    def index_of(self, key: Any) -> int:
        return int(key)

    def winner_test(self, index: int) -> dict[str, float]:
        return self._engine.evaluate_trial(index, "test", self._engine.rungs[-1])


def calibration_note(key: str, ratio: float, report: dict[str, Any]) -> str:
    """The one line that says a frozen backward/forward ratio was measured on noisy timings: the ratio,
    the measurements and how far they disagreed, against what calibration expects, and what to do.

    Args:
        key: the model shape the ratio is for (:meth:`~eve_search.tasks.Task.cost_key`).
        ratio: the ratio frozen.
        report: the trial's ``last_calibration`` (``estimates``, and ``spread``: the disagreement of the
            closest attempt's interleaved halves, as a fraction).

    Returns:
        The line, without the ``eve-search:`` prefix.

    Example:
        >>> note = calibration_note("256x2", 2.31, {"estimates": [1.8, 2.31, 3.1], "spread": 0.41})
        >>> note.split(": other")[0]
        'calibration of 256x2: froze backward/forward ratio 2.31 from noisy timings (3 measurements 1.8, 2.31, 3.1; their halves disagreed by 41% at best, expected within 15%)'
        >>> note.split("CPUs. ")[1]
        'Pin --backward-ratio 2.3 for charges that do not depend on the machine, or measure again on a quiet machine (a new --workdir)'
    """
    estimates = ", ".join(f"{e:.3g}" for e in report.get("estimates", ()))
    spread = report.get("spread")
    low, high = CALIBRATION_RANGE
    if spread is not None and math.isfinite(spread) and spread <= CALIBRATION_AGREEMENT - 1:
        why = f"outside the expected [{low:g}, {high:g}]"
    elif spread is not None and math.isfinite(spread):
        why = (f"their halves disagreed by {spread:.0%} at best, expected within "
               f"{CALIBRATION_AGREEMENT - 1:.0%}")
    else:
        why = "too few passes to compare"
    count = len(report.get("estimates", ()))
    return (f"calibration of {key}: froze backward/forward ratio {ratio:.3g} from noisy timings ({count} "
            f"measurement{'' if count == 1 else 's'} {estimates}; {why}): other processes were probably using the CPUs. Pin "
            f"--backward-ratio {ratio:.2g} for charges that do not depend on the machine, or measure again on a "
            "quiet machine (a new --workdir)")


def model_sizes(task: Task, data: Splits, configs: list[Config]) -> Callable[[int], float]:
    """Each configuration's model size (its parameter count), the cost hint the stream of cohorts orders
    ready work by; one model is built per shape (the task's ``cost_key``), when first asked for.

    Args:
        task: the task.
        data: its loaded splits (a model's input size may come from them).
        configs: the configurations, index = position.

    Returns:
        ``cost(index)``.

    Example:
        >>> from eve_search.tasks import get_task
        >>> task = get_task("adult")
        >>> cost = model_sizes(task, task.data(None), [{"width": 8, "depth": 1, "lr": 1e-3, "weight_decay": 0.0}])
        >>> cost(0)  # 107 x 8 + 8, then 8 x 2 + 2
        882.0
    """
    sizes: dict[str, float] = {}

    def cost(index: int) -> float:
        key = task.cost_key(configs[index])
        if key not in sizes:
            model = task.new_model(configs[index], data, torch.Generator().manual_seed(0))
            sizes[key] = float(sum(p.numel() for p in model.parameters()))
        return sizes[key]

    return cost


def expected_rung_sizes(configs: int, cohort_size: int | None, rungs: tuple[int, ...], fraction: float) -> list[int]:
    """How many trials each rung trains over every cohort when none fails.

    Example:
        >>> expected_rung_sizes(96, 48, (100, 300, 900, 2700, 3000), 1 / 3)
        [96, 32, 12, 4, 2]
    """
    size = configs if cohort_size is None else cohort_size
    totals = [0] * len(rungs)
    for start in range(0, configs, size):
        for k, n in enumerate(rung_sizes(min(size, configs - start), rungs, fraction)):
            totals[k] += n
    return totals


def prepare_sweep(settings: SweepSettings, *, storage: str, checkpoint_dir: Path, resume: bool = False,
                  data_dir: Path | None = None, task: Task | None = None) -> Sweep:
    """Load the task's data and open the sweep's store: everything that can fail on bad input, before
    any training. ``task`` overrides the registry lookup of ``settings.task``.

    Args:
        settings: what the sweep is.
        storage: an SQLAlchemy URL of the results store (not in-memory: workers and ``--resume`` reopen it).
        checkpoint_dir: the folder under which the sweep keeps its trial checkpoints.
        resume: continue (or just report) a sweep of the same name already in the store.
        data_dir: passed to the task's data loader (None: its default data).
        task: the task to train instead of the registered ``settings.task``.

    Returns:
        A :class:`Sweep`; ``sweep.run(progress)`` trains it and returns its :class:`SweepResult`.

    Raises:
        StoreError: the store cannot be opened, or holds a sweep of that name with other settings, or one
            started on other data (the checksum of the loaded splits is stored with the sweep).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> settings = SweepSettings(space="hp", optimizer="eve", configs=4, rungs=(100, 300), backward_ratio=2.0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     sweep = prepare_sweep(settings, storage=f"sqlite:///{folder}/results.db",
        ...                           checkpoint_dir=Path(folder) / "checkpoints")
        ...     print(len(sweep.configs), sorted(sweep.configs[0]))
        4 ['depth', 'lr', 'weight_decay', 'width']
    """
    task = get_task(settings.task) if task is None else task
    data = task.data(data_dir)
    space = get_space(settings.space)
    configs = space.sample(settings.configs, settings.config_seed)
    identity = {"sha256": splits_checksum(data),
                "data_dir": None if data_dir is None else str(Path(data_dir).resolve())}
    store = SweepStore(storage, settings.name, configs, space, checkpoint_dir, settings.as_dict(),
                       direction="maximize" if task.mode == "max" else "minimize", resume=resume, data=identity)
    if resume:
        refuse_if_running(store, settings.name)
    return Sweep(settings, task, data, configs, store, data_dir=data_dir)


RUNNING_KEY = "running"
"""The store attribute that names the process running a sweep in the local engine (None: none)."""


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (Linux: its start time in clock ticks since boot, with the boot's id),
    which tells it from a later process that reuses its number; None where the system does not say."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return f"{handle.read().strip()}:{fields[19]}"
    except (OSError, IndexError):
        return None


def this_process() -> dict[str, Any]:
    """This process, as a running sweep records itself in its store (host, process id, start)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _process_start(os.getpid())}


def _still_running(owner: Any) -> bool:
    """Whether the process a store names as running its sweep is alive on this machine (a process on
    another machine, or a record this version did not write, cannot be checked: False)."""
    if not isinstance(owner, dict) or owner.get("host") != socket.gethostname():
        return False
    pid = owner.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        pass  # it exists (another user's), or the system will not say: as if alive, if it is the same start
    start = _process_start(pid)
    return start is None or owner.get("start") in (None, start)


def refuse_if_running(store: Any, name: str) -> None:
    """Refuse, in one line, to run or resume a sweep that a live process on this machine is running now:
    two processes training the same trials would each write the other's results.

    Raises:
        StoreError: the store names a live process as running the sweep.
    """
    owner = store.get(RUNNING_KEY)
    if _still_running(owner):
        raise StoreError(f"Invalid --resume: sweep {name!r} is running now in process {owner['pid']} on this "
                         "machine (wait for it to end, or stop it, then resume)")


def run_sweep(settings: SweepSettings, *, storage: str, checkpoint_dir: Path, resume: bool = False,
              data_dir: Path | None = None, progress: ProgressCallback | None = None) -> SweepResult:
    """Prepare and run (or resume, or just report) one sweep in this process.

    Args:
        settings, storage, checkpoint_dir, resume, data_dir: as for :func:`prepare_sweep`.
        progress: called as (phase, rung number, trials done in the rung, trials in the rung, best so far).

    Returns:
        The :class:`SweepResult`: the best score found, the winner, each rung, the time and units spent.

    Example (trains: several seconds, so not run as a doctest; tests/engine runs sweeps):
        >>> settings = SweepSettings(space="hp", optimizer="eve", backward_ratio=2.0)
        >>> result = run_sweep(settings, storage="sqlite:///runs/results.db",  # doctest: +SKIP
        ...                    checkpoint_dir=Path("runs/checkpoints"))
        >>> result.best["score"], result.winner["config"]  # doctest: +SKIP
    """
    return prepare_sweep(settings, storage=storage, checkpoint_dir=checkpoint_dir, resume=resume,
                         data_dir=data_dir).run(progress)
