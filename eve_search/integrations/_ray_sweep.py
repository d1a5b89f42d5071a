"""``eve-search ... --backend ray``: one prepared sweep run through Ray Tune.

The configurations, calibrated ratios, seeds and rung rule are the sweep's own, so with the same seed
and a pinned ``--backward-ratio`` the local engine and Ray give the same rungs, promotions and
scores. Trials run as :class:`~eve_search.integrations.ray.EveTrainable` actors under
:class:`~eve_search.integrations.ray.SynchronousSHAScheduler`; the driver writes every rung's
results into the sweep's results store once the rung is decided, in configuration order, exactly as
the in-process engine does. Trial checkpoints are Tune's, under ``storage_path`` (the sweep's
checkpoint folder by default; a shared folder or ``s3://...`` on a multi-node cluster), and a killed
driver continues with ``--resume`` through ``Tuner.restore``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eve_search._checks import InputError
from eve_search._imports import require
from eve_search.integrations._ray import (
    INDEX_KEY,
    STATE_FILE,
    EveTrainable,
    SynchronousSHAScheduler,
)
from eve_search.engine.backend import finish
from eve_search.engine.ledger import RungLedger

require("ray.tune", "ray")

from ray.tune import Callback

if TYPE_CHECKING:
    from eve_search.engine.sweep import Sweep, SweepResult

__all__ = ["run_sweep_on_ray"]

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[str, int, int, int, "float | None"], None]
EXPERIMENT = "ray"


class _Reported:
    """A trial whose metrics came back from a Ray actor, as :meth:`Sweep.note_best` reads one: it ranks
    by the task's metric, and its test metrics were measured by the actor at the same weights."""

    def __init__(self, metric: str, test: dict[str, float] | None, index: int = 0, budget: int = 0) -> None:
        self._metric = metric
        self._test = test
        self.index, self.budget = index, budget

    def test_metrics(self) -> dict[str, float] | None:
        """The test metrics the actor measured (None: none reported)."""
        return None if self._test is None else dict(self._test)

    def score(self, metrics: dict[str, float]) -> float:
        return metrics[self._metric]

    def evaluate(self, split: str = "val") -> dict[str, float]:
        if split != "test" or self._test is None:
            raise ValueError(f"Invalid split: {split!r} (the actor reported only its test metrics)")
        return dict(self._test)


_LIVE: dict[str, _SweepRecorder] = {}  # recorders of this process, by sweep: what a restored Tuner's pickled callback becomes


def _live_recorder(token: str) -> Any:
    """Unpickling a recorder gives this process's live one for the same sweep (``Tuner.restore``
    unpickles the callbacks it saved at the start), or an inert callback."""
    return _LIVE.get(token) or Callback()


class _SweepRecorder(Callback):
    """A Tune callback (driver side) that writes each decided rung into the sweep's store.

    It reads the scheduler's decisions from the state the scheduler saves beside Tune's experiment state
    (before Tune calls the callbacks), so it works with the scheduler of a restored run too. Tune pickles
    its callbacks with the experiment: unpickled, a recorder is this process's live one of the same sweep
    (:func:`_live_recorder`).

    Args:
        sweep: the prepared sweep whose store the rungs are written into.
        rungs: the sweep's rung budgets.
        progress: called as (phase, rung number, trials done in the rung, trials in the rung, best).
        on_record: called after each row is written to the store.
    """

    def __init__(self, sweep: Sweep, rungs: tuple[int, ...], progress: ProgressCallback | None,
                 on_record: Callable[[], None]) -> None:
        self._sweep = sweep
        self._store = sweep.store
        self._rungs = rungs
        self._progress = progress
        self._on_record = on_record
        self.token = self._store.sweep_id
        self.results: dict[tuple[int, int], dict[str, Any]] = {}
        self.index: dict[str, int] = {}
        self.flushed: set[tuple[int, int]] = set()  # (cohort, rung)
        self.recorded = {(index, budget) for index, done in self._store.rung_details().items() for budget in done}
        self.trained = 0
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eve-sweep-store")
        self.writes: list[Future] = []
        self.done = [0 for _ in rungs]
        self.best: float | None = None
        self.sign = 1.0 if sweep.task.mode == "max" else -1.0
        self.state_path: Path | None = None
        self.ledgers: list[RungLedger] = []

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_live_recorder, (self.token,))

    def read_ledgers(self) -> list[RungLedger]:
        """The scheduler's rung ledgers, one per cohort (trial ids as keys), as it last saved them."""
        if self.state_path is None or not self.state_path.exists():
            return self.ledgers
        state = json.loads(self.state_path.read_text())
        saved = state.get("cohorts") or ([] if state.get("ledger") is None else [state["ledger"]])
        ledgers = []
        for cohort in saved:
            ledger = RungLedger(self._rungs, self._sweep.settings.fraction, self._sweep.task.mode)
            ledger.load_state_dict(cohort)
            ledgers.append(ledger)
        self.ledgers = ledgers
        return ledgers

    def _seen(self, trial: Any, result: dict[str, Any]) -> None:
        self.state_path = Path(trial.storage.experiment_driver_staging_path) / STATE_FILE
        index = int(trial.config[INDEX_KEY])
        self.index[trial.trial_id] = index
        ledgers = self.read_ledgers()
        budget = result.get("budget")
        if budget in self._rungs and (index, int(budget)) not in self.results:
            self._count(index, int(budget), result, ledgers)
        self.flush()

    def _count(self, index: int, budget: int, result: dict[str, Any], ledgers: list[RungLedger]) -> None:
        """Keep a configuration's first result at a rung, and report the rung's progress."""
        self.results[(index, budget)] = result
        rung = self._rungs.index(budget)
        self.done[rung] += 1
        score = float(result["val"][self._sweep.task.metric])
        if not math.isnan(score) and (self.best is None or self.sign * score > self.sign * self.best):
            self.best = score
        if self._progress is not None:
            trials = sum(len(ledger.cohort(rung)) for ledger in ledgers)
            self._progress("training", rung, self.done[rung], max(trials, self.done[rung]), self.best)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self._seen(trial, result)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._seen(trial, trial.last_result)

    def flush(self, final: bool = False) -> None:
        """Record every newly decided rung, in configuration order, then its eliminations. The store
        writes run on one background thread, in order, so that Tune's loop (and the actors waiting on
        it) go on while the database is written; :meth:`wait` joins them.

        A rung can be decided before this callback hears of the result that decided it: the scheduler
        saves its state when Tune stops a parked trial from inside the scheduler's own call, and Tune
        tells the callbacks of that stop first. Such a rung waits for its results; only the ``final``
        flush, after Tune has delivered everything, records a rung with a result missing (lost with a
        killed driver)."""
        for cohort, ledger in enumerate(self.ledgers):
            for decision in ledger.decisions():
                if (cohort, decision.rung) in self.flushed:
                    continue
                ids = decision.promoted + decision.stopped
                if any(tid not in self.index for tid in ids):
                    break  # a restored trial this run has not heard from yet
                if not final and any((self.index[tid], decision.budget) not in self.recorded
                                     and (self.index[tid], decision.budget) not in self.results for tid in ids):
                    break  # a result on its way to this callback
                rows = self._new_rows(decision.budget, ids)
                last = decision.rung == len(self._rungs) - 1
                ended = [(self.index[tid], float(ledger.score(tid, decision.rung))) for tid in decision.stopped]
                self.writes.append(self.writer.submit(self._write, decision.budget, rows, ended, last))
                self.flushed.add((cohort, decision.rung))

    def _new_rows(self, budget: int, ids: list[str]) -> list[tuple[int, dict[str, Any]]]:
        """The results at ``budget`` of the trials ``ids`` that the store misses, in configuration order
        (each counted as trained, and as recorded from now on)."""
        rows = []
        for tid in sorted(ids, key=self.index.__getitem__):
            index = self.index[tid]
            if (index, budget) in self.recorded:
                continue
            result = self.results.get((index, budget))
            if result is None:
                logger.warning("the rung %d result of configuration %d was lost with the driver; "
                               "the store misses it", budget, index)
                continue
            rows.append((index, result))
            self.recorded.add((index, budget))
            self.trained += 1
        return rows

    def _write(self, budget: int, rows: list, ended: list, last: bool) -> None:
        sweep, store = self._sweep, self._store
        for index, result in rows:
            metrics = dict(result["val"])
            details = {"score": float(metrics[sweep.task.metric]), "val": metrics,
                       "charged_units": float(result["eval_cost"]), "wall_seconds": float(result["wall_seconds"]),
                       "backward_passes": int(result["backward_passes"])}
            details.update(sweep.note_best(_Reported(sweep.task.metric, result.get("test"), index, budget), metrics))
            store.record(index, budget, details, None)
            self._on_record()
        if last:
            for index, score in ended:
                store.complete(index, score)
        else:
            store.eliminate(sorted(index for index, _ in ended))

    def wait(self) -> None:
        """Every store write done (the first error raised)."""
        self.writer.shutdown(wait=True)
        for write in self.writes:
            write.result()


# Set while the sweep's tuner runs. Tune's console tables off (verbose=0 silences only the classic output),
# and its default loggers off: the JSON, CSV and TensorBoard files it writes for every result repeat what
# the results store records (0.4-0.8 s of the 10-11 s demo sweep on the 2-core machine).
_TUNE_ENVIRONMENT = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1"}


@contextlib.contextmanager
def _tune_settings() -> Iterator[None]:
    """The sweep's own settings of Tune while its tuner runs, all put back afterwards, whatever happens:
    :data:`_TUNE_ENVIRONMENT`, Tune's and Train's loggers at ``ERROR`` (the sweep's own progress and table
    replace Tune's notices), and no environment variables of Tune's own for its trainable actors.

    Tune's actor class cache adds ``PL_DISABLE_FORK=1`` (for PyTorch Lightning, which these actors never
    run: :class:`~eve_search.engine.trial.Trial` trains with its own loop) to every trainable actor's
    runtime environment. Ray starts workers ahead for an empty runtime environment only (two with two
    CPUs, as ``ray.init`` returns), so an actor with any runtime environment gets a fresh worker process
    instead, and waits for Python and Ray's imports again inside the sweep's clock. Without the variable
    the first actors take the workers Ray already started: on the 2-core machine they ran their first
    method 0.9-1.3 s after the clock started instead of 1.6-1.8 s.

    That dict is Tune's module-level ``DEFAULT_ENV_VARS``, emptied for the duration (a Tune run in another
    thread of this process at the same moment would miss the variable too). Variables Tune copies from
    this process's environment (cloud credentials) are untouched, and a runtime environment of the job
    (``ray.init(runtime_env=...)``) still applies. Where Tune has no such dict, it is left alone.
    """
    try:
        from ray.tune.execution import class_cache

        defaults = class_cache.DEFAULT_ENV_VARS
    except (ImportError, AttributeError):
        defaults = None
    if not isinstance(defaults, dict):
        defaults = {}  # nothing of Tune's to empty
    kept_defaults = dict(defaults)
    saved = {name: os.environ.get(name) for name in _TUNE_ENVIRONMENT}
    loggers = [logging.getLogger(name) for name in ("ray.tune", "ray.train")]
    levels = [log.level for log in loggers]
    os.environ.update(_TUNE_ENVIRONMENT)
    for log in loggers:
        log.setLevel(logging.ERROR)
    defaults.clear()
    try:
        yield
    finally:
        defaults.clear()
        defaults.update(kept_defaults)
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _recorder(sweep: Sweep, rungs: tuple[int, ...], progress: ProgressCallback | None,
              on_record: Callable[[], None]) -> _SweepRecorder:
    """A new :class:`_SweepRecorder`, registered as this process's live one for its sweep."""
    recorder = _SweepRecorder(sweep, rungs, progress, on_record)
    _LIVE[recorder.token] = recorder
    return recorder


def _connect(ray: Any, address: str | None, num_cpus: int) -> bool:
    """Start a local Ray instance (``address`` None) or join a cluster; True when this call started Ray."""
    if ray.is_initialized():
        return False
    if address is not None:
        _probe(address)
    try:
        if address is None:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        else:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"Invalid address: {address!r} (cannot start or reach a Ray cluster: {first})") from None
    return True


def _probe(address: str) -> None:
    """A ``host:port`` address must accept a connection: ``ray.init`` would retry an unreachable one for
    minutes. (``auto`` and ``ray://`` addresses go to Ray as they are.)"""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=10).close()
    except OSError as error:
        raise InputError(f"Invalid address: {address!r} (no Ray cluster reachable there: "
                         f"{error.strerror or error})") from None


def run_sweep_on_ray(sweep: Sweep, *, address: str | None = None, progress: ProgressCallback | None = None,
                     storage_path: str | os.PathLike | None = None, num_cpus: int = 2,
                     cpus_per_trial: float = 1.0) -> SweepResult:
    """Run a prepared sweep (:func:`eve_search.engine.sweep.prepare_sweep`) through Ray Tune; the same
    :class:`~eve_search.engine.sweep.SweepResult` and store records as :meth:`Sweep.run`.

    Args:
        sweep: the prepared sweep (its settings, configurations, store).
        address: an existing Ray cluster (``ray start --head`` prints it; ``auto`` finds a local one);
            None starts a local instance with ``num_cpus`` CPUs. A Ray already initialized in this
            process is used as it is.
        progress: called as (phase, rung number, trials done in the rung, trials in the rung, best).
        storage_path: where Tune keeps trial checkpoints and its experiment state (default: the
            sweep's checkpoint folder); on a multi-node cluster a folder every node sees, or a cloud URI.
        num_cpus: CPUs of the local Ray instance started when there is no ``address`` (and no Ray
            running in this process already).
        cpus_per_trial: CPUs each trial's actor reserves (its torch threads).

    Returns:
        The sweep's :class:`~eve_search.engine.sweep.SweepResult`, as :meth:`Sweep.run` returns it.

    Example (starts Ray and trains, so not run as a doctest; tests/integrations runs it):
        >>> from pathlib import Path
        >>> from eve_search.engine.sweep import SweepSettings, prepare_sweep
        >>> settings = SweepSettings(space="hp", optimizer="eve", configs=6, rungs=(100, 300), backward_ratio=2.0)
        >>> sweep = prepare_sweep(settings, storage="sqlite:///runs/results.db",  # doctest: +SKIP
        ...                       checkpoint_dir=Path("runs/checkpoints"))
        >>> result = run_sweep_on_ray(sweep, num_cpus=2)  # doctest: +SKIP
        >>> result.rungs  # doctest: +SKIP
        [{'budget': 100, 'trials': 6, 'promoted': 2}, {'budget': 300, 'trials': 2, 'promoted': 0}]
    """
    ray = require("ray", "ray")
    tune = require("ray.tune", "ray")
    started = _connect(ray, address, num_cpus)
    try:
        return _run(ray, tune, sweep, progress, storage_path, cpus_per_trial)
    finally:
        if started:
            ray.shutdown()


def _run(ray: Any, tune: Any, sweep: Sweep, progress: ProgressCallback | None,
         storage_path: str | os.PathLike | None, cpus_per_trial: float) -> SweepResult:
    s = sweep.settings
    store = sweep.store
    sweep.start_clock()  # the sweep's clock starts once Ray is up (ray.init excluded)
    if progress is not None:
        progress("calibrating", 0, 0, 0, None)
    sweep.calibrate()
    configs = sweep.configs
    cohort_size = s.cohort_size if s.cohort_size is not None and s.cohort_size < len(sweep.configs) else None
    scheduler = SynchronousSHAScheduler(time_attr="eval_cost", rungs=s.rungs, fraction=s.fraction,
                                        metric=sweep.task.metric, mode=sweep.task.mode, cohort_size=cohort_size)
    scheduler._warned.add("best")  # this sweep names its winner itself: Tune's get_best_result() is not read
    trainable = tune.with_resources(
        tune.with_parameters(EveTrainable, task=sweep.task, optimizer=s.optimizer, rungs=s.rungs, seed=s.seed,
                             cost_mode=s.cost_mode, backward_ratios=dict(sweep.ratios),
                             data_dir=None if _data_dir(sweep) is None else str(_data_dir(sweep)),
                             owner=store.sweep_id, test_metrics="best"),
        {"cpu": cpus_per_trial})
    recorder = _recorder(sweep, s.rungs, progress, lambda: store.set("wall_seconds", sweep.elapsed()))
    root = os.fspath(storage_path) if storage_path is not None else str(store.checkpoint_dir.resolve())
    run_config = tune.RunConfig(name=EXPERIMENT, storage_path=root, verbose=0, callbacks=[recorder],
                                failure_config=tune.FailureConfig(max_failures=2))
    path = f"{root.rstrip('/')}/{EXPERIMENT}"
    if tune.Tuner.can_restore(path):
        tuner = tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        space: dict[str, Any] = {INDEX_KEY: tune.grid_search(list(range(len(configs))))}
        for key in configs[0]:
            space[key] = tune.sample_from(lambda config, key=key: configs[config[INDEX_KEY]][key])
        tuner = tune.Tuner(trainable, param_space=space, run_config=run_config,
                           tune_config=tune.TuneConfig(scheduler=scheduler, reuse_actors=True))
    try:
        with _tune_settings():
            grid = tuner.fit()
    except BaseException:
        recorder.writer.shutdown(wait=True)
        raise
    finally:
        _LIVE.pop(recorder.token, None)
    for result in grid:  # trials this run never heard from (a restored run of a finished sweep)
        if result.metrics and "trial_id" in result.metrics:
            recorder.index.setdefault(result.metrics["trial_id"], int(result.config[INDEX_KEY]))
    if recorder.state_path is None and "://" not in root:  # the copy Tune synced to storage at the end
        recorder.state_path = Path(root, EXPERIMENT, STATE_FILE)
    ledgers = recorder.read_ledgers()
    cohorts = 1 if cohort_size is None else -(-len(configs) // cohort_size)
    decided = sum(len(ledger.decisions()) for ledger in ledgers)
    if len(ledgers) < cohorts or decided < cohorts * len(s.rungs):
        errors = [str(r.error).strip().splitlines()[0] for r in grid if r.error is not None]
        raise RuntimeError(f"the Ray sweep ended before its last rung was decided ({decided} of "
                           f"{cohorts * len(s.rungs)} rungs; {len(errors)} trials failed"
                           f"{': ' + errors[0] if errors else ''})")
    recorder.flush(final=True)
    recorder.wait()
    return finish(sweep, _RayBackend(recorder, ledgers, grid, s.rungs[-1]), trained=recorder.trained)


class _RayBackend:
    """A Ray sweep as a :class:`~eve_search.engine.backend.SweepBackend`: the scheduler's ledgers (keyed by
    Tune's trial ids), and the winner's test metrics as its actor reported them at the last rung."""

    def __init__(self, recorder: _SweepRecorder, ledgers: list[RungLedger], grid: Any, last: int) -> None:
        self._recorder, self._ledgers, self._grid, self._last = recorder, ledgers, grid, last

    def ledgers(self) -> list[RungLedger]:
        return self._ledgers

    def index_of(self, key: Any) -> int:
        return self._recorder.index[key]

    def winner_test(self, index: int) -> dict[str, float]:
        result = self._recorder.results.get((index, self._last)) or _last_result(self._grid, index)
        return dict(result["test"])


def _data_dir(sweep: Sweep) -> Any:
    return sweep.data_dir


def _last_result(grid: Any, index: int) -> dict[str, Any]:
    for result in grid:
        if int(result.config[INDEX_KEY]) == index:
            return result.metrics
    raise RuntimeError(f"no Ray result for configuration {index}")
