"""One search run of one tool, in a process of its own: ``python runner.py SPEC.json``.

``searches/peers.py`` starts this script (with the project's Python, or with a tool's own virtual
environment's Python for DEHB and Syne Tune), waits for it and charges the process tree's CPU time to
the run. The run speaks a JSON-lines protocol into the file the spec names (``events``):

* ``{"type": "start", ...}`` once the common start-up (PyTorch, eve-search, the task's data) is done:
  the run's clock starts here (``cpu_start``: this process's CPU seconds until then);
* ``{"type": "report", "trial", "config", "units", "score", "total", "wall"}`` whenever the tool sees
  a result: the trial's cumulative charged units, its validation score, all units charged by the
  run so far and the run's wall seconds;
* ``{"type": "end", "pick", "note", "total", "wall", "versions", "settings"}``: the configuration
  the tool returns, read the way its documentation shows;
* ``{"type": "error", "message"}`` when the run failed (exit code 1).

Every tool trains the same :class:`eve_search.engine.trial.Trial` (Adam, calibrated cost rule with the pinned
backward ratio), except eve-search's own searches, which train EvE where their names say so. Each
tool's code below is written here, in that tool's usual idiom. The process makes itself a child
subreaper (Linux), so that worker processes orphaned by a tool (Ray's workers after ``ray.shutdown``)
are reaped here and their CPU time reaches the parent's accounting.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _peers.problem import Problem, coerce, config_key  # noqa: E402

METRIC = "accuracy"  # the validation metric every tool maximizes (the task's own)
VERSION_PACKAGES = ("torch", "numpy", "eve-search", "optuna", "ray", "dehb", "ConfigSpace", "syne-tune")


# The protocol -------------------------------------------------------------------------------------------


class Events:
    """The run's event file and its charged-units account (this is what enforces the budget).

    ``charge`` counts units a trial trained without a result the tool sees; ``report`` counts them and
    writes a report line. Units are per trial cumulative (what its meter says), so a trial resumed from
    a checkpoint is charged only for what it trains again, and one restarted from scratch under a new
    key is charged in full.
    """

    def __init__(self, path: Path, budget: float | None) -> None:
        self.path = Path(path)
        self.budget = budget
        self.spent = 0.0
        self.reports = 0
        self._seen: dict[str, float] = {}
        self._started = time.perf_counter()

    def __getstate__(self) -> dict[str, Any]:  # Ray may pickle its callbacks along with the experiment
        return dict(self.__dict__)

    def wall(self) -> float:
        return time.perf_counter() - self._started

    def restart_clock(self) -> None:
        self._started = time.perf_counter()

    def _write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, allow_nan=False, default=_plain) + "\n")

    def charge(self, trial: Any, units: float) -> None:
        key = str(trial)
        units = float(units)
        self.spent += max(0.0, units - self._seen.get(key, 0.0))
        self._seen[key] = max(units, self._seen.get(key, 0.0))

    def report(self, trial: Any, config: dict[str, Any], units: float, score: float | None) -> None:
        self.charge(trial, units)
        self.reports += 1
        finite = score is not None and math.isfinite(float(score))
        self._write({"type": "report", "trial": str(trial), "config": config, "units": float(units),
                     "score": float(score) if finite else None, "total": self.spent, "wall": self.wall()})

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.spent >= self.budget

    def start(self, **fields: Any) -> None:
        self.restart_clock()
        self._write({"type": "start", **fields})

    def end(self, pick: dict[str, Any] | None, note: str, **fields: Any) -> None:
        self._write({"type": "end", "pick": pick, "note": note, "total": self.spent, "wall": self.wall(),
                     "reports": self.reports, **fields})

    def error(self, message: str) -> None:
        self._write({"type": "error", "message": message, "wall": self.wall(), "total": self.spent})


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"not JSON: {type(value).__name__}")


class Context:
    """What every tool's run gets: the problem, the search seed, the budget, folders, the data."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from eve_search.tasks import get_task

        self.spec = spec
        self.problem = Problem(**spec["problem"])
        self.space = self.problem.declared
        self.seed = int(spec["seed"])
        self.multiplier = float(spec["multiplier"])
        self.cpus = int(spec["cpus"])
        self.scratch = Path(spec["scratch"])
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.task = get_task(self.problem.task)
        self.data = self.task.data()
        self.events = Events(Path(spec["events"]), spec.get("budget"))
        self.settings: dict[str, Any] = {}

    def trial(self, config: dict[str, Any], index: int, optimizer: str = "adam") -> Any:
        from eve_search.engine.trial import Trial

        return Trial(self.task, config, optimizer, seed=self.seed, index=index, cost_mode="calibrated",
                     backward_ratio=self.problem.backward_ratio, data=self.data)

    def train_in_chunks(self, key: str, trial: Any, target: int) -> bool:
        """Train ``trial`` to ``target`` units in steps of the first fidelity, charging as it goes;
        False when the budget ran out first (the trial is cut there)."""
        step = self.problem.min_units
        while trial.budget < target:
            if self.events.exhausted:
                return False
            trial.train_to(min(target, trial.budget + step))
            self.events.charge(key, trial.charged_units)
        return True


def stable_index(text: str) -> int:
    """A configuration index for a trial a tool names with text (initial weights, batch order)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in VERSION_PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


# eve-search -------------------------------------------------------------------------------------------


def run_eve_sha(ctx: Context, optimizer: str) -> tuple[dict[str, Any], str]:
    """eve-search's synchronous SHA (the in-process engine, ``--jobs`` workers): ``configs`` x the budget
    multiplier configurations drawn from the search seed, the problem's rungs."""
    from eve_search.engine.sweep import SweepSettings, prepare_sweep

    p = ctx.problem
    settings = SweepSettings(task=p.task, space=p.space, optimizer=optimizer, seed=ctx.seed, config_seed=ctx.seed,
                             configs=max(1, round(p.configs * ctx.multiplier)), rungs=p.rungs,
                             backward_ratio=p.backward_ratio)
    sweep = prepare_sweep(settings, storage=f"sqlite:///{ctx.scratch / 'sweep.db'}", checkpoint_dir=ctx.scratch / "ckpt")
    record_many = sweep.store.record_many
    logged = 0

    def recorded(results: list[tuple[int, int, dict[str, Any], bytes | None]]) -> None:
        nonlocal logged
        record_many(results)
        for index, _, details, _ in results:
            ctx.events.report(index, sweep.configs[index], details["charged_units"], details["score"])
        logged += len(results)

    # Every result reaches the store through record_many (record() calls it too; the store's writer
    # thread hands it up to 64 gathered results at once), in the order they arrive: this log sees each.
    sweep.store.record_many = recorded
    jobs = ctx.cpus if ctx.cpus > 1 else None
    ctx.settings.update(configs=settings.configs, rungs=list(settings.rungs), optimizer=optimizer,
                        workers=jobs or 1, threads_per_worker=1 if jobs else ctx.cpus)
    result = sweep.run(jobs=jobs)
    stored = sum(len(rungs) for rungs in sweep.store.rung_details().values())
    if logged != stored:
        raise RuntimeError(f"the event log saw {logged} of the sweep's {stored} results")
    return dict(result.winner["config"]), "the configuration SHA kept to the last rung"


def run_sha_tpe(ctx: Context, splits: int = 1) -> tuple[dict[str, Any], str]:
    """eve-search's ask-and-tell driver ``run_sha`` with Optuna's TPE sampler. ``splits`` cohorts of
    ``configs / splits`` configurations per budget multiple; each new cohort's study starts with the
    earlier cohorts' finished trials, so TPE learns from them (a cohort is asked before any of its
    results exist, so with one cohort TPE samples at random). Two cohorts of 24 charge about what one
    of 48 does: with rungs 100, 300, 900, 2,700, 3,000 and a reduction factor of 3, at most 2 x 7,900
    against 15,500 units (three cohorts of 16 would charge 18,300)."""
    import optuna
    from optuna.trial import TrialState, create_trial

    from eve_search.engine import _stores
    from eve_search.integrations.optuna import run_sha, worker_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    p = ctx.problem
    url = f"sqlite:///{ctx.scratch / 'run_sha.db'}"
    storage = worker_storage(url)
    size = max(1, p.configs // splits)
    cohorts = max(1, round(ctx.multiplier)) * splits
    history: list[Any] = []
    best: tuple[float, dict[str, Any]] | None = None
    write = _stores.record_results
    now = {"cohort": 0, "logged": 0}

    def logged(storage_: Any, results: list[tuple[int, int, dict[str, Any]]], **options: Any) -> None:
        # Every rung result of the driver's worker is written through this one function (in one
        # transaction where it can): this log sees each, as it reaches the study.
        write(storage_, results, **options)
        for trial_id, budget, details in results:
            frozen = storage_.get_trial(trial_id)
            ctx.events.report(f"{now['cohort']}:{frozen.user_attrs.get('config_index')}", frozen.user_attrs["config"],
                              details.get("charged_units", budget), details["score"])
            now["logged"] += 1

    for cohort in range(cohorts):
        # A sampler per study (TPE keeps per-study state); seeds 1000 * seed + cohort.
        study = optuna.create_study(study_name=f"cohort-{cohort}", storage=storage, direction="maximize",
                                    sampler=optuna.samplers.TPESampler(seed=1000 * ctx.seed + cohort))
        for old in history:
            study.add_trial(create_trial(params=old.params, distributions=old.distributions, value=old.value,
                                         state=old.state, intermediate_values=old.intermediate_values))
        now.update(cohort=cohort, logged=0)
        _stores.record_results = logged
        try:
            run_sha(study, task=p.task, space=ctx.space, n_trials=size, storage=storage,
                    checkpoint_dir=ctx.scratch / f"ckpt-{cohort}", optimizer="eve", seed=ctx.seed, rungs=p.rungs,
                    backward_ratio=p.backward_ratio)
        finally:
            _stores.record_results = write
        stored = sum(len(t.intermediate_values) for t in study.get_trials(deepcopy=False)
                     if "config_index" in t.user_attrs)
        if now["logged"] != stored:
            raise RuntimeError(f"the event log saw {now['logged']} of cohort {cohort}'s {stored} results")
        finished = [t for t in study.get_trials(deepcopy=False)
                    if "config_index" in t.user_attrs and t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        history.extend(finished)
        for t in finished:
            if t.state == TrialState.COMPLETE and t.value is not None and (best is None or t.value > best[0]):
                best = (t.value, dict(t.user_attrs["config"]))
    ctx.settings.update(cohorts=cohorts, configs_per_cohort=size, rungs=list(p.rungs), optimizer="eve",
                        sampler="TPESampler(seed=1000 * seed + cohort)", workers=1, threads=ctx.cpus)
    if best is None:
        raise RuntimeError("no configuration completed the last rung")
    return best[1], "the best configuration completed at the last rung (over cohorts)"


# Optuna -----------------------------------------------------------------------------------------------


def run_optuna(ctx: Context, pruner_name: str) -> tuple[dict[str, Any], str]:
    """Optuna's TPE sampler with its SuccessiveHalvingPruner or HyperbandPruner: ``study.optimize`` on an
    objective that reports the validation score every ``min_units`` units (one step) and asks
    ``should_prune``; stopped by a callback once the budget is spent."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    p = ctx.problem
    if pruner_name == "sh":
        pruner: Any = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=p.reduction_factor,
                                                              min_early_stopping_rate=0)
        described = f"SuccessiveHalvingPruner(min_resource=1, reduction_factor={p.reduction_factor})"
    else:
        pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=p.steps,
                                                reduction_factor=p.reduction_factor)
        described = f"HyperbandPruner(min_resource=1, max_resource={p.steps}, reduction_factor={p.reduction_factor})"
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=ctx.seed),
                                pruner=pruner)
    events = ctx.events

    def objective(trial: optuna.Trial) -> float:
        config = coerce(ctx.space, ctx.space.suggest(trial))
        model = ctx.trial(config, trial.number)
        score = math.nan
        for step in range(1, p.steps + 1):
            if not ctx.train_in_chunks(str(trial.number), model, p.units_at(step)):
                events.report(trial.number, config, model.charged_units, None)
                trial.study.stop()
                raise optuna.TrialPruned("the budget is spent")
            score = model.score(model.evaluate())
            events.report(trial.number, config, model.charged_units, score)
            trial.report(score, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return score

    def stop_when_spent(study: optuna.Study, trial: Any) -> None:
        if events.exhausted:
            study.stop()

    ctx.settings.update(sampler="TPESampler(seed)", pruner=described, step_units=p.min_units, n_jobs=1,
                        threads=ctx.cpus)
    study.optimize(objective, callbacks=[stop_when_spent], gc_after_trial=False)
    try:
        return coerce(ctx.space, study.best_trial.params), "study.best_trial (the best completed trial)"
    except ValueError:
        return _best_reported(ctx), "no trial completed: the furthest-trained best report"


# Ray Tune ---------------------------------------------------------------------------------------------


def _ray_train(config: dict[str, Any], problem: dict[str, Any], seed: int, checkpointing: bool) -> None:
    """The function trainable: report the validation score every ``min_units`` units (``step``); with
    ``checkpointing`` (HyperBand pauses trials) a checkpoint with every report, resumed from."""
    import tempfile

    import torch
    from ray import tune

    from eve_search.tasks import get_task
    from eve_search.engine.trial import Trial

    torch.set_num_threads(1)  # one CPU per trial, as Ray reserves it
    p = Problem(**problem)
    config = coerce(p.declared, config)
    trial = Trial(p.task, config, "adam", seed=seed, index=stable_index(tune.get_context().get_trial_id()),
                  cost_mode="calibrated", backward_ratio=p.backward_ratio, data=get_task(p.task).data())
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            trial.load(Path(folder) / "trial.pt")
    first = next((s for s in range(1, p.steps + 1) if p.units_at(s) > trial.budget), p.steps + 1)
    for step in range(first, p.steps + 1):
        trial.train_to(p.units_at(step))
        metrics = {METRIC: trial.score(trial.evaluate()), "units": trial.charged_units, "step": step}
        if checkpointing:
            with tempfile.TemporaryDirectory() as folder:
                trial.save(Path(folder) / "trial.pt")
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)


def run_ray(ctx: Context, scheduler_name: str) -> tuple[dict[str, Any], str]:
    """Ray Tune's random search (``BasicVariantGenerator``) under ``ASHAScheduler`` or
    ``HyperBandScheduler`` on a function trainable, steps of ``min_units`` units as ``time_attr``;
    a ``Stopper`` ends the experiment once the budget is spent. The pick is
    ``ResultGrid.get_best_result()`` (its default scope: each trial's last result)."""
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from _peers.problem import ray_param_space

    p = ctx.problem
    events = ctx.events
    space = ctx.space

    class Recorder(tune.Callback):
        def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
            events.report(trial.trial_id, coerce(space, trial.config), result["units"], result[METRIC])

    class BudgetStopper(tune.stopper.Stopper):
        def __call__(self, trial_id: str, result: dict) -> bool:
            return False

        def stop_all(self) -> bool:
            return events.exhausted

    if scheduler_name == "asha":
        scheduler: Any = ASHAScheduler(time_attr="step", max_t=p.steps, grace_period=1,
                                       reduction_factor=p.reduction_factor)
        described = f"ASHAScheduler(time_attr=step, max_t={p.steps}, grace_period=1, reduction_factor={p.reduction_factor})"
    else:
        scheduler = HyperBandScheduler(time_attr="step", max_t=p.steps, reduction_factor=p.reduction_factor)
        described = f"HyperBandScheduler(time_attr=step, max_t={p.steps}, reduction_factor={p.reduction_factor})"
    # Ray's session files (logs, sockets) in a short temporary folder of this run's own, removed after it
    # (a socket path must stay under ~107 characters, so not under --workdir).
    temp = tempfile.mkdtemp(prefix="peers-ray-")
    ray.init(num_cpus=ctx.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False,
             _temp_dir=temp)
    try:
        trainable = tune.with_parameters(_ray_train, problem=p.as_dict(), seed=ctx.seed,
                                         checkpointing=scheduler_name == "hyperband")
        samples = int(events.budget // p.min_units) + 1 if events.budget else 1000
        tuner = tune.Tuner(
            trainable, param_space=ray_param_space(space),
            tune_config=tune.TuneConfig(metric=METRIC, mode="max", scheduler=scheduler, num_samples=samples,
                                        search_alg=BasicVariantGenerator(random_state=ctx.seed)),
            run_config=tune.RunConfig(name="peers", storage_path=str(ctx.scratch / "ray-results"), verbose=0,
                                      stop=BudgetStopper(), callbacks=[Recorder()]))
        ctx.settings.update(search="BasicVariantGenerator(random_state=seed)", scheduler=described,
                            step_units=p.min_units, num_cpus=ctx.cpus, cpus_per_trial=1, threads_per_trial=1,
                            num_samples=samples, checkpoint_every_report=scheduler_name == "hyperband")
        grid = tuner.fit()
        best = grid.get_best_result()
        return coerce(space, best.config), "ResultGrid.get_best_result() (scope 'last')"
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


# DEHB -------------------------------------------------------------------------------------------------


def run_dehb(ctx: Context) -> tuple[dict[str, Any], str]:
    """DEHB's ask-and-tell interface: each job trains a fresh trial to the job's fidelity (DEHB does not
    continue a configuration from a lower fidelity), fitness = 1 - validation accuracy, cost = seconds.
    Asks stop once the budget is spent; the pick is ``get_incumbents()``."""
    from dehb import DEHB

    from _peers.problem import configspace

    p = ctx.problem
    events = ctx.events
    optimizer = DEHB(cs=configspace(ctx.space, ctx.seed), min_fidelity=p.min_units, max_fidelity=p.max_units,
                     eta=p.reduction_factor, n_workers=1, seed=ctx.seed, output_path=str(ctx.scratch / "dehb"),
                     log_level="WARNING")
    ctx.settings.update(min_fidelity=p.min_units, max_fidelity=p.max_units, eta=p.reduction_factor, n_workers=1,
                        threads=ctx.cpus, fitness="1 - validation accuracy")
    jobs = 0
    while not events.exhausted:
        job = optimizer.ask()
        config = coerce(ctx.space, dict(job["config"]))
        fidelity = int(round(float(job["fidelity"])))
        key = f"{jobs}:{job['config_id']}@{fidelity}"
        trial = ctx.trial(config, jobs)
        started = time.perf_counter()
        if not ctx.train_in_chunks(key, trial, fidelity):
            events.report(key, config, trial.charged_units, None)
            break
        score = trial.score(trial.evaluate())
        events.report(key, config, trial.charged_units, score)
        optimizer.tell(job, {"fitness": 1.0 - score, "cost": time.perf_counter() - started})
        jobs += 1
    incumbent, _ = optimizer.get_incumbents()
    if incumbent is None:
        return _best_reported(ctx), "no job finished: the furthest-trained best report"
    return coerce(ctx.space, dict(incumbent)), "get_incumbents() (best fitness at any fidelity)"


# Syne Tune --------------------------------------------------------------------------------------------


def run_syne_tune(ctx: Context, scheduler_name: str) -> tuple[dict[str, Any], str]:
    """Syne Tune's ``Tuner`` on a ``LocalBackend`` (each trial a process running ``st_train.py``, which
    reports the validation score every ``min_units`` units as ``step``), with its ``ASHA`` or ``BOHB``
    baseline; the stop criterion is the budget. The pick is ``Tuner.best_config()``."""
    os.environ["SYNETUNE_FOLDER"] = str(ctx.scratch / "syne-tune")  # before syne_tune reads it
    from syne_tune import Tuner
    from syne_tune.backend import LocalBackend
    from syne_tune.optimizer.baselines import ASHA, BOHB
    from syne_tune.results_callback import StoreResultsCallback
    from syne_tune.tuner_callback import TunerCallback

    from _peers.problem import syne_tune_space

    p = ctx.problem
    events = ctx.events
    space = ctx.space
    config_space = dict(syne_tune_space(space))
    # LocalBackend joins the arguments with spaces and splits them again: the problem travels as JSON
    # without spaces.
    constants = {"peers_problem": json.dumps(p.as_dict(), sort_keys=True, separators=(",", ":")),
                 "peers_seed": ctx.seed,
                 "peers_threads": 1}
    config_space.update(constants)
    chosen = {"asha": ASHA, "bohb": BOHB}[scheduler_name]
    scheduler = chosen(config_space, metric=METRIC, do_minimize=False, time_attr="step", max_t=p.steps,
                       grace_period=1, reduction_factor=p.reduction_factor, random_seed=ctx.seed)

    class Recorder(TunerCallback):
        def on_trial_result(self, trial: Any, status: str, result: dict, decision: str) -> None:
            events.report(trial.trial_id, coerce(space, trial.config), result["units"], result[METRIC])

    sleep = 0.1  # Syne Tune's default (5 s) lets trials run seconds past the budget before it looks
    tuner = Tuner(trial_backend=LocalBackend(entry_point=str(Path(__file__).with_name("st_train.py"))),
                  scheduler=scheduler, stop_criterion=lambda status: events.exhausted, n_workers=ctx.cpus,
                  sleep_time=sleep, callbacks=[StoreResultsCallback(), Recorder()], tuner_name="peers",
                  print_update_interval=3600.0)
    ctx.settings.update(scheduler=f"{chosen.__name__}(time_attr=step, max_t={p.steps}, grace_period=1, "
                                  f"reduction_factor={p.reduction_factor})",
                        backend="LocalBackend (a process per trial)", n_workers=ctx.cpus, threads_per_trial=1,
                        sleep_time=sleep, step_units=p.min_units)
    tuner.run()
    _, config = tuner.best_config()
    return coerce(space, config), "Tuner.best_config() (best reported score of any trial)"


# Random search ----------------------------------------------------------------------------------------


def run_random(ctx: Context) -> tuple[dict[str, Any], str]:
    """Random search at full budget: configurations drawn from the declared space (the search seed's
    generator), each trained to ``max_units``, until the budget is spent; the best is picked."""
    import torch

    generator = torch.Generator().manual_seed(ctx.seed)
    best: tuple[float, dict[str, Any]] | None = None
    index = 0
    while not ctx.events.exhausted:
        config = ctx.space.draw(generator)
        trial = ctx.trial(config, index)
        if not ctx.train_in_chunks(str(index), trial, ctx.problem.max_units):
            ctx.events.report(index, config, trial.charged_units, None)
            break
        score = trial.score(trial.evaluate())
        ctx.events.report(index, config, trial.charged_units, score)
        if best is None or score > best[0]:
            best = (score, config)
        index += 1
    ctx.settings.update(units_per_configuration=ctx.problem.max_units, threads=ctx.cpus)
    if best is None:
        return _best_reported(ctx), "the budget ended before one configuration finished"
    return best[1], "the best configuration trained to max_units"


def _best_reported(ctx: Context) -> dict[str, Any]:
    """The furthest-trained best report of the event file (a fallback when a tool returned nothing)."""
    best: tuple[tuple[int, float], dict[str, Any]] | None = None
    with ctx.events.path.open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("type") == "report" and record.get("score") is not None:
                key = (ctx.problem.level(record["units"]), record["score"])
                if best is None or key > best[0]:
                    best = (key, record["config"])
    if best is None:
        raise RuntimeError("no result was reported before the budget ran out")
    return coerce(ctx.space, best[1])


TOOLS: dict[str, Callable[[Context], tuple[dict[str, Any], str]]] = {
    "eve-sha-eve": lambda ctx: run_eve_sha(ctx, "eve"),
    "eve-sha-adam": lambda ctx: run_eve_sha(ctx, "adam"),
    "eve-run-sha-tpe": run_sha_tpe,
    "eve-run-sha-tpe2": lambda ctx: run_sha_tpe(ctx, splits=2),
    "optuna-tpe-sh": lambda ctx: run_optuna(ctx, "sh"),
    "optuna-tpe-hb": lambda ctx: run_optuna(ctx, "hb"),
    "ray-asha": lambda ctx: run_ray(ctx, "asha"),
    "ray-hyperband": lambda ctx: run_ray(ctx, "hyperband"),
    "dehb": run_dehb,
    "synetune-asha": lambda ctx: run_syne_tune(ctx, "asha"),
    "synetune-bohb": lambda ctx: run_syne_tune(ctx, "bohb"),
    "random": run_random,
}


# Processes ----------------------------------------------------------------------------------------------


def become_subreaper() -> bool:
    """Orphaned descendants become this process's children (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 1 and int(fields[1]) == me:
                found.append(int(entry.name))
    return found


def reap(grace: float = 15.0) -> int:
    """Wait for every child left (a tool's orphaned workers), so their CPU time is accounted; after
    ``grace`` seconds the ones still running are ended (they are this run's own processes)."""
    deadline = time.monotonic() + grace
    reaped = 0
    killed = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        except OSError as error:
            if error.errno == errno.ECHILD:
                return reaped
            raise
        if pid:
            reaped += 1
            continue
        if time.monotonic() > deadline and not killed:
            for child in _children():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            killed = True
        elif killed and time.monotonic() > deadline + grace:
            return reaped
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    subreaper = become_subreaper()
    import torch

    torch.set_num_threads(int(spec["cpus"]))
    ctx = Context(spec)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    ctx.events.start(cpu_start=cpu.ru_utime + cpu.ru_stime, pid=os.getpid(), subreaper=subreaper)
    try:
        pick, note = TOOLS[spec["tool"]](ctx)
    except BaseException as error:  # noqa: BLE001 the parent records the failure and goes on
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        ctx.events.error(f"{type(error).__name__}: {message}")
        traceback.print_exc()
        return 1
    wall = ctx.events.wall()
    ctx.events.end(coerce(ctx.space, pick), note, search_wall=wall, versions=versions(), settings=ctx.settings,
                   pick_key=config_key(coerce(ctx.space, pick)))
    sys.stdout.flush()
    reap()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
