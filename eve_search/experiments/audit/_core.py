"""The proxy audit behind ``eve-search audit``: what a trustworthy ranking costs, per trainer.

A cheap inner loop is only worth its speed if stopping early still keeps the configuration that
full training would pick. The audit measures that directly. Every configuration of a search space
is trained by every trainer (the proxies and the reference, or "truth", trainer) along ONE
trajectory per training seed: :meth:`~eve_search.engine.trial.Trial.train_to` is called at each budget of
a grid in order, never restarted, and at each grid point the validation and test metrics, the
charged units and the trial's cumulative wall seconds are recorded. The truth of a training seed is
the reference trainer's validation score at the last budget (so the truth and the reference as a
proxy share their runs).

Then, for each proxy and budget, paired by training seed, against the truth:

* Kendall's tau-b of the two orderings (:func:`eve_search.analysis.ranking.agreement`, with its bootstrap);
* the regret of the proxy's top-1: the truth score of the true best minus that of the proxy's pick
  (:func:`top1_regret`; in points, i.e. x100, for accuracy);
* whether the true best is in the proxy's top third, what successive halving keeps
  (:func:`keeps_true_best`), as a rate over seeds;
* the wall seconds the proxy spent to reach that budget over all configurations;

with percentile bootstrap intervals over configurations, and a verdict per proxy: the cheapest
budget, in wall seconds, at which it keeps the true best in its top third in at least 4 of 5 seeds
(a rate of 0.8), and the cheapest at which its mean top-1 regret is under 0.1 point. A reference
row, the truth under the next training seed, shows how far full training agrees with itself.

Runs live in the results store (one Optuna study of kind ``"audit"`` per task, space, trainer and
seed; one Optuna trial per configuration, the grid points as ``rung_{budget}`` user attributes and
intermediate values), so an audit resumes where it was killed and a finished one is read back
without training.

Example (hand-made scores of three configurations; the measures are :mod:`eve_search.analysis.audit`):
    >>> from eve_search.analysis.audit import keeps_true_best, top1_regret
    >>> truth = {0: 0.80, 1: 0.85, 2: 0.83}
    >>> proxy = {0: 0.70, 1: 0.72, 2: 0.75}
    >>> round(top1_regret(proxy, truth), 4), keeps_true_best(proxy, truth, fraction=2 / 3)
    (0.02, True)
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eve_search._checks import options_or_keywords

from eve_search.engine.ledger import (
    PROMOTED_FRACTION,
    check_fraction,
    check_rungs,
)
from eve_search.analysis.audit import (  # the measures: pure functions over results
    AUDIT_KIND,
    DEFAULT_BUDGETS,
    KEEP_RATE,
    REGRET_THRESHOLD,
    audit_header,
    audit_measures,
    regret_scale,
)
from eve_search.tasks.spaces import get_space
from eve_search.engine.store import SweepStore
from eve_search.engine.sweep import Sweep, SweepSettings, warm_up
from eve_search.tasks import Task, get_task

# The runs; the measures they feed are eve_search.analysis.audit (imported above for the runs and the
# doctest; the package re-exports both).
__all__ = ["AuditRunOptions", "AuditStore", "audit_name", "audit_report", "prepare_audit", "run_audit"]

# The runs: one study per (task, space, trainer, seed) ---------------------------------------------


class AuditStore(SweepStore):
    """A :class:`~eve_search.engine.store.SweepStore` whose study holds audit runs (kind ``"audit"``): every
    configuration trained through every grid budget, COMPLETE once it reached the last.

    Args:
        storage, name, configs, space, checkpoint_dir, settings, direction, resume: as for
            :class:`~eve_search.engine.store.SweepStore` (``name``: see :func:`audit_name`).

    Example:
        >>> import pathlib, tempfile, torch
        >>> from eve_search.tasks import Splits, Task, register_task
        >>> from eve_search.tasks.spaces import Float, SearchSpace, register_space
        >>> def blobs(data_dir=None):
        ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
        ...     y = (x.sum(dim=1) > 0).long()
        ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
        >>> register_task(Task("blobs-audit", "doctest task", load_data=blobs,
        ...                    build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50))
        >>> register_space(SearchSpace("blobs-lr", (Float("lr", 1e-3, 1e-1, log=True),)))
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> prepared = prepare_audit("blobs-audit", "blobs-lr", ["eve", "adam"], [0], budgets=[10, 20], configs=3,
        ...                          storage=f"sqlite:///{folder}/runs.db", checkpoint_dir=folder, backward_ratio=2.0)
        >>> store = prepared[("eve", 0)].store
        >>> type(store).__name__, store.kind, store.name, store.rung_details()
        ('AuditStore', 'audit', 'audit-blobs-audit-blobs-lr-eve-seed0', {0: {}, 1: {}, 2: {}})
    """

    kind = AUDIT_KIND


def audit_name(settings: SweepSettings) -> str:
    """The study name of one trainer's runs at one seed: ``audit-{task}-{space}-{trainer}-seed{seed}``.

    Args:
        settings: the (trainer, seed) run's sweep settings.

    Returns:
        The Optuna study name.

    Example:
        >>> from eve_search.engine.sweep import SweepSettings
        >>> audit_name(SweepSettings(space="hp", optimizer="eve", seed=3))
        'audit-adult-hp-eve-seed3'
    """
    return f"audit-{settings.name}"


def _stored_settings(settings: SweepSettings) -> dict[str, Any]:
    values = settings.as_dict()
    values["budgets"] = values.pop("rungs")
    values.pop("fraction")
    return values


@dataclass(frozen=True, kw_only=True)
class AuditRunOptions:
    """What every (trainer, seed) run of an audit shares: the budget grid, the configurations, the cost
    rule, the data and the reference trainer. :func:`prepare_audit` takes this object or its fields as
    keywords (not both).

    Args:
        budgets: the grid of budgets, increasing; the last one is the truth's.
        configs: how many configurations are drawn from the space.
        config_seed: the seed of that draw (the same configurations for every trainer and seed).
        cost_mode: ``"calibrated"`` or ``"measured"``.
        backward_ratio: pin the calibrated backward/forward ratio instead of measuring it.
        data_dir: the task's data folder (None: its default data).
        truth: the reference trainer, noted on every study (None: not noted).

    Example:
        >>> AuditRunOptions(budgets=(10, 30), configs=3).cost_mode
        'calibrated'
    """

    budgets: Sequence[int] = DEFAULT_BUDGETS
    configs: int = 48
    config_seed: int = 0
    cost_mode: str = "calibrated"
    backward_ratio: float | None = None
    data_dir: Path | None = None
    truth: str | None = None


def prepare_audit(task: Task | str, space: str, trainers: Sequence[str], seeds: Sequence[int], *,
                  storage: str, checkpoint_dir: Path, options: AuditRunOptions | None = None,
                  **keywords: Any) -> dict[tuple[str, int], Sweep]:
    """Open (or create) every (trainer, seed) study of one space, keyed (trainer, seed), before any
    training: the task's data, the store and the settings are checked here. ``truth`` (the reference
    trainer of this audit) is noted on every study for the dashboard.

    Args:
        task: the task, or a registered task's name.
        space: the search space's name.
        trainers: every trainer of the audit (the proxies and the truth).
        seeds: the training seeds.
        storage: the results store's URL (not in-memory: runs are reopened).
        checkpoint_dir: where unfinished runs keep their checkpoints.
        options: the grid, configurations, cost rule, data and truth (:class:`AuditRunOptions`).
        **keywords: fields of :class:`AuditRunOptions` (``budgets``, ``configs``, ``config_seed``,
            ``cost_mode``, ``backward_ratio``, ``data_dir``, ``truth``) instead of ``options``.

    Returns:
        ``{(trainer, seed): Sweep}``, each sweep's store an :class:`AuditStore`.

    Example:
        >>> import pathlib, tempfile, torch
        >>> from eve_search.tasks import Splits, Task, register_task
        >>> from eve_search.tasks.spaces import Float, SearchSpace, register_space
        >>> def blobs(data_dir=None):
        ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
        ...     y = (x.sum(dim=1) > 0).long()
        ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
        >>> register_task(Task("blobs-audit", "doctest task", load_data=blobs,
        ...                    build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50))
        >>> register_space(SearchSpace("blobs-lr", (Float("lr", 1e-3, 1e-1, log=True),)))
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> prepared = prepare_audit("blobs-audit", "blobs-lr", ["eve", "adam"], [0], budgets=[10, 20], configs=3,
        ...                          storage=f"sqlite:///{folder}/runs.db", checkpoint_dir=folder, backward_ratio=2.0)
        >>> sorted(prepared)
        [('adam', 0), ('eve', 0)]
    """
    o = options_or_keywords("prepare_audit", AuditRunOptions, options, keywords)
    configs, config_seed, cost_mode, backward_ratio, truth = o.configs, o.config_seed, o.cost_mode, \
        o.backward_ratio, o.truth
    task = get_task(task) if isinstance(task, str) else task
    budgets = check_rungs(o.budgets)
    data = task.data(o.data_dir)
    space_ = get_space(space)
    sample = space_.sample(configs, config_seed)
    prepared: dict[tuple[str, int], Sweep] = {}
    for seed in seeds:
        for trainer in trainers:
            settings = SweepSettings(space=space, optimizer=trainer, seed=seed, config_seed=config_seed,
                                     configs=configs, rungs=budgets, cost_mode=cost_mode,
                                     backward_ratio=backward_ratio, task=task.name)
            store = AuditStore(storage, audit_name(settings), sample, space_, checkpoint_dir,
                               _stored_settings(settings), direction="maximize" if task.mode == "max" else "minimize",
                               resume=True)
            if truth is not None and store.get("truth") != truth:
                store.set("truth", truth)
            prepared[(trainer, seed)] = Sweep(settings, task, data, sample, store)
    return prepared


def _train_run(sweep: Sweep, index: int, recorded: Mapping[int, Mapping[str, Any]]) -> None:
    """Train configuration ``index`` through every grid budget not yet recorded, along one trajectory
    (from its checkpoint when a killed audit left one), recording each grid point."""
    store, budgets = sweep.store, sweep.settings.rungs
    trial = sweep.make_trial(index)
    path = store.checkpoint_path(index)
    if recorded and path.exists():
        trial.load(path)
    score = math.nan
    for budget in budgets:
        if budget <= trial.budget:
            continue
        trial.train_to(budget)
        val = trial.evaluate("val")
        score = trial.score(val)
        details = {"score": score, "val": val, "test": trial.evaluate("test"),
                   "charged_units": trial.charged_units, "wall_seconds": trial.wall_seconds,
                   "backward_passes": trial.meter.backward_passes}
        store.record(index, budget, details, None if budget == budgets[-1] else trial.to_bytes())
    if math.isnan(score):  # every budget was already recorded (killed after the last record)
        score = float(store.rung_details()[index][budgets[-1]]["score"])
    store.complete(index, score)
    path.unlink(missing_ok=True)


AuditProgress = Callable[[str, int, str, int, int, int], None]


def run_audit(prepared: Mapping[tuple[str, int], Sweep], progress: AuditProgress | None = None, *,
              order: Sequence[int] | None = None) -> int:
    """Train every run not yet finished; returns how many runs this call trained.

    Seed by seed, each trainer's ratios are calibrated first (stored, so a resumed audit charges
    alike), then configuration by configuration every trainer takes its turn, so that a machine
    whose speed drifts slows every trainer alike. Each study's ``wall_seconds`` user attribute
    accumulates the wall time spent on its runs (calibration, training, evaluation, recording).
    ``progress(space, seed, trainer, index, done, total)`` after every run.

    Args:
        prepared: the studies of :func:`prepare_audit`.
        progress: told ``(space, seed, trainer, index, done, total)`` after every run (None: nothing).
        order: the configurations to train, in this order (default: all, in sampling order). A second
            recording of the same audit into another store can work from the other end
            (``reversed(range(configs))``); :func:`~eve_search.experiments.pools.pool_from_audit` joins them.

    Returns:
        How many (trainer, seed, configuration) runs this call trained.

    Example:
        >>> import pathlib, tempfile, torch
        >>> from eve_search.tasks import Splits, Task, register_task
        >>> from eve_search.tasks.spaces import Float, SearchSpace, register_space
        >>> def blobs(data_dir=None):
        ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
        ...     y = (x.sum(dim=1) > 0).long()
        ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
        >>> register_task(Task("blobs-audit", "doctest task", load_data=blobs,
        ...                    build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50))
        >>> register_space(SearchSpace("blobs-lr", (Float("lr", 1e-3, 1e-1, log=True),)))
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> prepared = prepare_audit("blobs-audit", "blobs-lr", ["eve", "adam"], [0], budgets=[10, 20], configs=3,
        ...                          storage=f"sqlite:///{folder}/runs.db", checkpoint_dir=folder, backward_ratio=2.0)
        >>> run_audit(prepared), run_audit(prepared)  # 2 trainers x 1 seed x 3 configurations, then none
        (6, 0)
    """
    seeds = sorted({seed for _, seed in prepared})
    trainers = list(dict.fromkeys(trainer for trainer, _ in prepared))
    for trainer in trainers:
        warm_up(trainer)
    done, trained = 0, 0
    total = sum(len(sweep.configs) for sweep in prepared.values())
    for seed in seeds:
        sweeps = {trainer: prepared[(trainer, seed)] for trainer in trainers if (trainer, seed) in prepared}
        finished = {trainer: sweep.store.finished() for trainer, sweep in sweeps.items()}
        details = {trainer: sweep.store.rung_details() for trainer, sweep in sweeps.items()}
        spent = {trainer: float(sweep.store.get("wall_seconds", 0.0)) for trainer, sweep in sweeps.items()}
        for trainer, sweep in sweeps.items():
            if len(finished[trainer]) < len(sweep.configs):
                started = time.perf_counter()
                sweep.calibrate()
                spent[trainer] += time.perf_counter() - started
                sweep.store.set("wall_seconds", spent[trainer])
        configs = max(len(sweep.configs) for sweep in sweeps.values())
        for index in (range(configs) if order is None else order):
            for trainer, sweep in sweeps.items():
                if index not in finished[trainer]:
                    started = time.perf_counter()
                    _train_run(sweep, index, details[trainer].get(index, {}))
                    spent[trainer] += time.perf_counter() - started
                    sweep.store.set("wall_seconds", spent[trainer])
                    trained += 1
                done += 1
                if progress is not None:
                    progress(sweep.settings.space, seed, trainer, index, done, total)
    return trained


# The report --------------------------------------------------------------------------------------


def audit_report(prepared: Mapping[tuple[str, int], Sweep], proxies: Sequence[str], truth: str, *,
                 fraction: float = PROMOTED_FRACTION, keep_rate: float = KEEP_RATE,
                 regret_threshold: float = REGRET_THRESHOLD, resamples: int = 1000) -> dict[str, Any]:
    """Every measure of one space, from the store (see :func:`audit_measures`).

    Only seeds whose runs are all finished (every trainer, every configuration) are used; the
    others are listed as ``incomplete_seeds``.

    Args:
        prepared: the studies of :func:`prepare_audit`.
        proxies: the trainers measured against the truth.
        truth: the reference trainer (its score at the last budget is the truth).
        fraction: the share of configurations successive halving keeps (the "top third").
        keep_rate: the share of seeds in which a proxy must keep the true best for its verdict.
        regret_threshold: the mean top-1 regret under which a proxy's budget counts as enough.
        resamples: bootstrap resamples of each interval.

    Returns:
        The report: the task, space, metric, budgets, complete and ``incomplete_seeds``, and (when a
        seed is complete) per proxy its measures and verdict, the truth's runs and the noise floor.

    Example:
        >>> import pathlib, tempfile, torch
        >>> from eve_search.tasks import Splits, Task, register_task
        >>> from eve_search.tasks.spaces import Float, SearchSpace, register_space
        >>> def blobs(data_dir=None):
        ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
        ...     y = (x.sum(dim=1) > 0).long()
        ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
        >>> register_task(Task("blobs-audit", "doctest task", load_data=blobs,
        ...                    build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50))
        >>> register_space(SearchSpace("blobs-lr", (Float("lr", 1e-3, 1e-1, log=True),)))
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> prepared = prepare_audit("blobs-audit", "blobs-lr", ["eve", "adam"], [0], budgets=[10, 20], configs=3,
        ...                          storage=f"sqlite:///{folder}/runs.db", checkpoint_dir=folder, backward_ratio=2.0)
        >>> _ = run_audit(prepared)
        >>> report = audit_report(prepared, proxies=["eve"], truth="adam", resamples=50)
        >>> report["seeds"], report["budgets"], report["truth_budget"], list(report["proxies"])
        ([0], [10, 20], 20, ['eve'])
    """
    fraction = check_fraction(fraction)
    any_sweep = next(iter(prepared.values()))
    task, settings = any_sweep.task, any_sweep.settings
    budgets, mode, scale = list(settings.rungs), task.mode, regret_scale(task.metric)
    seeds = sorted({seed for _, seed in prepared})
    trainers = list(dict.fromkeys([*proxies, truth]))
    details: dict[tuple[str, int], dict[int, dict[int, dict[str, Any]]]] = {}
    complete, incomplete = [], []
    for seed in seeds:
        ok = True
        for trainer in trainers:
            sweep = prepared[(trainer, seed)]
            details[(trainer, seed)] = sweep.store.rung_details()
            ok &= len(sweep.store.finished()) == len(sweep.configs)
        (complete if ok else incomplete).append(seed)
    report = audit_header({"task": task.name, "space": settings.space, "metric": task.metric, "mode": mode,
                           "configs": settings.configs}, truth, budgets, fraction, complete, incomplete)
    if not complete:
        return report
    report.update(audit_measures(details, complete, proxies, truth, budgets, mode=mode, scale=scale,
                                 fraction=fraction, keep_rate=keep_rate, regret_threshold=regret_threshold,
                                 resamples=resamples))
    for seed, run in report["truth_runs"].items():
        run["best_config"] = any_sweep.configs[run["best_index"]]
    for proxy in proxies:
        stored = [float(prepared[(proxy, s)].store.get("wall_seconds", 0.0)) for s in complete]
        report["proxies"][proxy]["audit_wall_seconds"] = {"mean": statistics.fmean(stored), "total": sum(stored)}
    return report
