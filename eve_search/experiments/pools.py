"""Recording a pool with the audit's machinery: every configuration of a space trained by each trainer
along one trajectory, its score, test score and training seconds kept at every rung budget.

The audit (:mod:`eve_search.experiments.audit`) already trains each configuration once per trainer
through a grid of budgets, never restarting, and keeps every grid point in the results store, so a
killed recording resumes where it stopped. :func:`record_pool` runs it; :func:`pool_from_audit`
turns its studies into a :class:`~eve_search.engine.pool.RecordedPool`, the file the simulator, the
scale benchmark and the peer comparison replay. A recording still in progress exports the
configurations every trainer has finished, in sampling order.

Example:
    >>> import pathlib, tempfile, torch
    >>> from eve_search.tasks import Splits, Task, register_task
    >>> from eve_search.tasks.spaces import Float, SearchSpace, register_space
    >>> def blobs(data_dir=None):
    ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
    ...     y = (x.sum(dim=1) > 0).long()
    ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
    >>> register_task(Task("blobs-pool", "doctest task", load_data=blobs,
    ...                    build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50))
    >>> register_space(SearchSpace("blobs-pool-lr", (Float("lr", 1e-3, 1e-1, log=True),)))
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> pool = record_pool("blobs-pool", "blobs-pool-lr", ["adam", "eve"], configs=3, budgets=(10, 30),
    ...                    storage=f"sqlite:///{folder}/runs.db", checkpoint_dir=folder, backward_ratio=2.0)
    >>> pool.size, pool.budgets, sorted(pool.trainers), pool.referee
    (3, (10, 30), ['adam', 'eve'], 'adam')
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eve_search._checks import InputError, options_or_keywords
from eve_search.engine.ledger import DEFAULT_RUNGS
from eve_search.engine.pool import RecordedPool, TrainerRecord, load_pool  # noqa: F401 (load_pool: the examples)
from eve_search.engine.sweep import Sweep
from eve_search.experiments.audit import prepare_audit, run_audit
from eve_search.tasks import Task

__all__ = ["PoolOptions", "pool_from_audit", "profile_seconds", "record_pool"]


def pool_from_audit(prepared: Mapping[tuple[str, int], Sweep], referee: str, *,
                    notes: Mapping[str, Any] | None = None,
                    also: Sequence[Mapping[tuple[str, int], Sweep]] = ()) -> RecordedPool:
    """The pool that the audit studies of one space and one training seed hold so far.

    Args:
        prepared: the studies of :func:`~eve_search.experiments.audit.prepare_audit`, one seed.
        referee: the trainer whose test score at the last budget judges a pick.
        notes: free-form notes kept with the pool (when and where it was recorded).
        also: the studies of the same audit (space, seed, settings) recorded into other stores, e.g. by
            a second process that trained from the other end; a configuration's records come from the
            first store that holds it.

    Returns:
        The pool of the configurations that every trainer has recorded at every budget (the longest
        such prefix of the sampling order).

    Example:
        >>> pool_from_audit({}, "adam")
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid prepared: {} (expected the audit studies of one space and one seed)
    """
    seeds = {seed for _, seed in prepared}
    if len(seeds) != 1:
        raise InputError(f"Invalid prepared: {dict(prepared)!r} (expected the audit studies of one space and one seed)")
    trainers = [trainer for trainer, _ in prepared]
    if referee not in trainers:
        raise InputError(f"Invalid referee: {referee!r} (expected one of the audited trainers: {', '.join(trainers)})")
    any_sweep = next(iter(prepared.values()))
    task, settings = any_sweep.task, any_sweep.settings
    budgets = tuple(settings.rungs)
    details = {trainer: sweep.store.rung_details() for (trainer, _), sweep in prepared.items()}
    for other in also:
        for (trainer, seed), sweep in other.items():
            if (trainer, seed) not in prepared or sweep.configs != prepared[(trainer, seed)].configs \
                    or sweep.settings.rungs != prepared[(trainer, seed)].settings.rungs:
                raise InputError(f"Invalid also: the {trainer} study of seed {seed} is not the same audit "
                                 "(expected the same trainers, seed, configurations and budgets)")
            for index, rows in sweep.store.rung_details().items():
                if not all(b in details[trainer].get(index, {}) for b in budgets):
                    details[trainer][index] = rows
    count = 0
    while count < len(any_sweep.configs) and all(
            all(b in details[t].get(count, {}) for b in budgets) for t in trainers):
        count += 1
    records = {}
    for trainer in trainers:
        rows = [details[trainer][k] for k in range(count)]
        records[trainer] = TrainerRecord(
            score=[[float(row[b]["score"]) for b in budgets] for row in rows],
            test=[[float((row[b].get("test") or {}).get(task.metric, float("nan"))) for b in budgets] for row in rows],
            seconds=[[float(row[b]["wall_seconds"]) for b in budgets] for row in rows])
    recorded = {"date": datetime.date.today().isoformat(), "machine": platform.machine(),
                "cpus": os.cpu_count(), "trainers_seconds": {t: float(s.store.get("wall_seconds", 0.0))
                                                             for (t, _), s in prepared.items()},
                **dict(notes or {})}
    return RecordedPool(task=task.name, space=settings.space, metric=task.metric, mode=task.mode, budgets=budgets,
                        configs=[dict(c) for c in any_sweep.configs[:count]], trainers=records, referee=referee,
                        config_seed=settings.config_seed, seed=settings.seed, backward_ratio=settings.backward_ratio,
                        recorded=recorded)


@dataclass(frozen=True, kw_only=True)
class PoolOptions:
    """What a recorded pool holds: its configurations, budgets, training seed, cost rule, referee, data
    and notes. :func:`record_pool` takes this object or its fields as keywords (not both).

    Args:
        configs: configurations sampled (configuration seed 0).
        budgets: the rung budgets recorded (default: the paper's).
        seed: the training seed.
        backward_ratio: the pinned backward/forward ratio (default 2: charges that do not depend on
            the machine); None calibrates.
        referee: the trainer whose test score at the last budget judges a pick.
        data_dir: the task's data folder (None: its default).
        notes: free-form notes kept with the pool.

    Example:
        >>> PoolOptions(configs=512).referee
        'adam'
    """

    configs: int
    budgets: Sequence[int] = DEFAULT_RUNGS
    seed: int = 0
    backward_ratio: float | None = 2.0
    referee: str = "adam"
    data_dir: Path | None = None
    notes: Mapping[str, Any] | None = None


def record_pool(task: Task | str, space: str, trainers: Sequence[str], *, storage: str, checkpoint_dir: Path,
                options: PoolOptions | None = None, progress: Any = None, **keywords: Any) -> RecordedPool:
    """Train (or resume) every trajectory of the pool, then return it (see :func:`pool_from_audit`).

    Args:
        task: the task, or a registered task's name.
        space: the search space.
        trainers: the trainers recorded (the referee among them).
        storage: the results store's URL, where the runs are kept (a killed recording resumes).
        checkpoint_dir: where unfinished trajectories keep their checkpoints.
        options: what the pool holds (:class:`PoolOptions`; ``configs`` has no default).
        progress: the audit's progress callback (see :func:`~eve_search.experiments.audit.run_audit`).
        **keywords: fields of :class:`PoolOptions` (``configs``, ``budgets``, ``seed``, ``backward_ratio``,
            ``referee``, ``data_dir``, ``notes``) instead of ``options``.

    Returns:
        The :class:`~eve_search.engine.pool.RecordedPool`.

    Example (the module's example records a tiny one; the Adult pools take hours):
        >>> pool = record_pool("adult", "arch", ["adam", "eve"], configs=512,  # doctest: +SKIP
        ...                    storage="sqlite:///pools/results.db", checkpoint_dir=Path("pools"))
    """
    o = options_or_keywords("record_pool", PoolOptions, options, keywords)
    names = list(dict.fromkeys([*trainers, o.referee]))
    prepared = prepare_audit(task, space, names, [o.seed], storage=storage, checkpoint_dir=checkpoint_dir,
                             budgets=o.budgets, configs=o.configs, backward_ratio=o.backward_ratio,
                             data_dir=o.data_dir, truth=o.referee)
    run_audit(prepared, progress)
    return pool_from_audit(prepared, o.referee, notes=o.notes)


def profile_seconds(pool: RecordedPool, *, repeats: int = 3, data_dir: Path | None = None) -> RecordedPool:
    """The pool with its seconds measured again, once per model shape and trainer, on this machine now.

    A recording takes hours and shares the machine with other work, so the wall seconds it measured
    carry that work's noise (the same architecture was seen to take 0.3 to 2.4 ms per unit in one
    recording at load 5-9). The scores do not depend on timing; the seconds do. This trains one
    configuration of each model shape (the task's ``cost_key``) per trainer through every budget,
    ``repeats`` times on one thread (as a ``--jobs`` worker trains), and gives every configuration of
    that shape the median cumulative seconds: training plus one validation pass at each budget, what a
    piece of a search's work costs. Run it on a quiet machine, and note its load.

    Args:
        pool: the recorded pool.
        repeats: trajectories timed per shape and trainer (the median is kept).
        data_dir: the task's data folder (None: its default).

    Returns:
        A new pool: the same scores, the profiled seconds, and ``recorded["seconds"]`` saying how they
        were measured.

    Example:
        >>> pool = profile_seconds(load_pool("searches/pools/adult-arch.json.gz"))  # doctest: +SKIP
    """
    import torch

    from eve_search.tasks import get_task


    task = get_task(pool.task)
    data = task.data(data_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a --jobs worker trains: the simulator's workers are one-thread processes
    try:
        return _profiled(pool, task, data, repeats)
    finally:
        torch.set_num_threads(threads)


def _profiled(pool: RecordedPool, task: Any, data: Any, repeats: int) -> RecordedPool:
    import statistics
    import time

    from eve_search.engine.trial import Trial, warm_up

    shapes: dict[str, int] = {}
    for index, config in enumerate(pool.configs):
        shapes.setdefault(task.cost_key(config), index)
    profiles: dict[tuple[str, str], list[float]] = {}
    for trainer in pool.trainers:
        warm_up(trainer)
        for key, index in shapes.items():
            runs = []
            for _ in range(repeats):
                trial = Trial(task, pool.configs[index], trainer, seed=pool.seed, index=index,
                              backward_ratio=pool.backward_ratio if pool.backward_ratio is not None else 2.0,
                              data=data)
                cumulative, spent = [], 0.0
                for budget in pool.budgets:
                    start = time.perf_counter()
                    trial.train_to(budget)
                    trial.evaluate("val")
                    spent += time.perf_counter() - start
                    cumulative.append(spent)
                runs.append(cumulative)
            profiles[(trainer, key)] = [statistics.median(run[b] for run in runs) for b in range(len(pool.budgets))]
    trainers = {name: TrainerRecord(score=record.score, test=record.test,
                                    seconds=[list(profiles[(name, task.cost_key(c))]) for c in pool.configs])
                for name, record in pool.trainers.items()}
    recorded = {**pool.recorded, "seconds": f"profiled per model shape ({len(shapes)}), median of {repeats}, one "
                f"thread, training plus a validation pass per budget, on {datetime.date.today().isoformat()} at load "
                f"{os.getloadavg()[0]:.2f}"}
    return RecordedPool(task=pool.task, space=pool.space, metric=pool.metric, mode=pool.mode, budgets=pool.budgets,
                        configs=pool.configs, trainers=trainers, referee=pool.referee, config_seed=pool.config_seed,
                        seed=pool.seed, backward_ratio=pool.backward_ratio, recorded=recorded)
