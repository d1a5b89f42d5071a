"""Scale: wall time, worker utilisation and the quality of the pick at 1 to 256 workers, simulated
over a recorded pool with the real scheduling code.

Every method replays the same recorded pool (:mod:`eve_search.engine.pool`) on the same simulated
workers; a search seed draws the order in which the pool's configurations are searched (the same
order for every method at that seed):

The deterministic methods order their ready work by each configuration's model size (its parameter
count), as the local engine does with ``--jobs``: it orders work, never decides.

* ``sha``: synchronous successive halving over one cohort of ``--cohort-size`` configurations, the
  demo sweep as eve-search ran it before cohorts overlapped;
* ``sha+spec``: the same, with idle workers training the open rung's leaders ahead;
* ``stream``: ``--cohorts`` cohorts of ``--cohort-size`` in a stream
  (:class:`~eve_search.engine.stream.CohortStream`), each decided as its own synchronous sweep;
* ``stream+spec``: the stream with speculation;
* ``sha-all``: one synchronous cohort of every configuration of the stream (one barrier per rung);
* ``asha-optuna``, ``hyperband-optuna``, ``asha-ray``: Optuna's ``SuccessiveHalvingPruner`` and
  ``HyperbandPruner`` through ask and tell, and Ray Tune's ``ASHAScheduler``, at the stream's budget
  in charged units (:mod:`eve_search.benchmarks.peers_sim`).

Per method and worker count: the simulated wall seconds, the utilisation (busy worker-seconds over
wall x workers), the seconds of speculative work thrown away, the charged units spent, the
referee's held-out score of the pick (the pool's referee trainer at the last budget), each as a mean
and sd over search seeds, and whether the decisions equal those with one worker (for the methods
that promise it). Simulated seconds are the pool's recorded seconds: the table is about scheduling,
not about this machine.

Example:
    >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
    >>> pool = RecordedPool(task="toy", space="toy", metric="accuracy", mode="max", budgets=(1, 3),
    ...                     configs=[{"k": k} for k in range(8)], referee="adam",
    ...                     trainers={"adam": TrainerRecord(score=[[k / 10, k / 9] for k in range(8)],
    ...                                                     test=[[k / 10, k / 9] for k in range(8)],
    ...                                                     seconds=[[1.0, 3.0] for _ in range(8)])})
    >>> rows = scale_table(pool, "adam", workers=[1, 2], cohort_size=4, cohorts=2, seeds=[0],
    ...                    methods=["sha", "stream"])
    >>> [(row["method"], row["workers"], row["wall"]["mean"]) for row in rows]
    [('sha', 1, 8.0), ('sha', 2, 4.0), ('stream', 1, 16.0), ('stream', 2, 8.0)]
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from eve_search._checks import InputError, options_or_keywords
from eve_search.engine.ledger import PROMOTED_FRACTION
from eve_search.engine.pool import RecordedPool
from eve_search.engine.simulator import Simulation, simulate_pool
from eve_search.engine.stream import cohort_units

__all__ = ["DEFAULT_WORKERS", "METHODS", "ScaleOptions", "format_scale_table", "model_sizes", "scale_table",
           "search_order"]

METHODS = ("sha", "sha+spec", "stream", "stream+spec", "sha-all", "asha-optuna", "hyperband-optuna", "asha-ray")
DEFAULT_WORKERS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DETERMINISTIC = {"sha", "sha+spec", "stream", "stream+spec", "sha-all"}


def search_order(size: int, seed: int, draws: int | None = None) -> list[int]:
    """The order in which search seed ``seed`` visits a pool of ``size`` configurations.

    Args:
        size: the pool's configurations.
        seed: the search seed.
        draws: None: each configuration once; a count: that many configurations drawn with
            replacement (a search longer than the pool, over the same distribution of configurations).

    Returns:
        A permutation of ``range(size)``, or ``draws`` pool indices.

    Example:
        >>> sorted(search_order(5, 1)) == list(range(5)), search_order(5, 1) == search_order(5, 1)
        (True, True)
        >>> len(search_order(5, 1, draws=12)), set(search_order(5, 1, draws=12)) <= set(range(5))
        (12, True)
    """
    if draws is not None:
        return random.Random(seed).choices(range(size), k=draws)
    order = list(range(size))
    random.Random(seed).shuffle(order)
    return order


def model_sizes(pool: RecordedPool) -> Callable[[int], float] | None:
    """Each pool configuration's parameter count, the cost hint the local engine orders its work by
    (None when the pool's task is not registered here).

    Args:
        pool: the recorded pool.

    Returns:
        ``cost(index)``, or None.

    Example:
        >>> from eve_search.engine.pool import RecordedPool, TrainerRecord
        >>> pool = RecordedPool(task="no-such-task", space="s", metric="accuracy", mode="max", budgets=(1,),
        ...                     configs=[{}], referee="adam", trainers={"adam": TrainerRecord([[0.5]], [[0.5]], [[1.0]])})
        >>> model_sizes(pool) is None
        True
    """
    from eve_search.engine.sweep import model_sizes as sizes
    from eve_search.tasks import get_task, task_names

    if pool.task not in task_names():
        return None
    task = get_task(pool.task)
    return sizes(task, task.data(None), pool.configs)


def _runner(method: str, pool: RecordedPool, trainer: str, rungs: tuple[int, ...], cohort_size: int,
            cohorts: int, fraction: float, cost: Callable[[int], float] | None = None
            ) -> Callable[[int, list[int], float, int], Simulation]:
    configs = cohort_size * cohorts
    units = cohorts * cohort_units(cohort_size, rungs, fraction)
    if method in DETERMINISTIC:
        size, cohort = {"sha": (cohort_size, None), "sha+spec": (cohort_size, None), "stream": (configs, cohort_size),
                        "stream+spec": (configs, cohort_size), "sha-all": (configs, None)}[method]
        return lambda workers, order, jitter, seed: simulate_pool(
            pool, trainer, workers=workers, configs=size, cohort_size=cohort, rungs=rungs, fraction=fraction,
            speculate=method.endswith("+spec"), order=order, jitter=jitter, jitter_seed=seed, cost=cost)
    from eve_search.benchmarks import peers_sim

    if method == "asha-ray":
        return lambda workers, order, jitter, seed: peers_sim.simulate_ray_asha(
            pool, trainer, workers=workers, rungs=rungs, units=units, order=order, jitter=jitter, jitter_seed=seed)
    import optuna

    factor = max(2, round(1 / fraction))  # (Optuna takes a whole reduction factor)

    def pruner() -> Any:
        if method == "asha-optuna":
            return optuna.pruners.SuccessiveHalvingPruner(min_resource=rungs[0], reduction_factor=factor)
        return optuna.pruners.HyperbandPruner(min_resource=rungs[0], max_resource=rungs[-1], reduction_factor=factor)

    return lambda workers, order, jitter, seed: peers_sim.simulate_optuna(
        pool, trainer, pruner=pruner(), workers=workers, rungs=rungs, units=units, order=order, jitter=jitter,
        jitter_seed=seed)


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0}


@dataclass(frozen=True, kw_only=True)
class ScaleOptions:
    """What :func:`scale_table` simulates: the worker counts, the stream, the seeds and methods; it takes
    this object or its fields as keywords (not both).

    Args:
        workers: the simulated worker counts.
        cohort_size: configurations per cohort (``sha`` runs one such cohort).
        cohorts: cohorts in the stream (its budget in charged units is the peers' budget).
        seeds: search seeds (each draws the pool's search order).
        methods: which of :data:`METHODS` to run.
        rungs: the rung budgets (default: the pool's).
        fraction: the promoted share of a rung (the peers' reduction factor is its inverse).
        jitter: scale each duration by ``exp(jitter * N(0, 1))``, seeded by the search seed.
        replace: draw the searched configurations with replacement (see :func:`search_order`), so a
            stream may be longer than the pool.

    Example:
        >>> ScaleOptions(workers=(1, 4), cohorts=2).cohort_size
        48
    """

    workers: Sequence[int] = DEFAULT_WORKERS
    cohort_size: int = 48
    cohorts: int = 10
    seeds: Sequence[int] = range(5)
    methods: Sequence[str] = METHODS
    rungs: Sequence[int] | None = None
    fraction: float = PROMOTED_FRACTION
    jitter: float = 0.0
    replace: bool = False


def scale_table(pool: RecordedPool, trainer: str, options: ScaleOptions | None = None,
                **keywords: Any) -> list[dict[str, Any]]:
    """Simulate every method at every worker count and search seed; one row per (method, workers).

    Args:
        pool: the recorded pool.
        trainer: the pool's trainer whose trajectories are replayed.
        options: what is simulated (:class:`ScaleOptions`).
        **keywords: fields of :class:`ScaleOptions` instead of ``options``.

    Returns:
        Rows with ``method``, ``workers``, and ``wall``, ``utilisation``, ``dropped``, ``units`` and
        ``referee`` as ``{"mean", "sd"}`` over seeds, ``pick`` (the configurations picked, pool indices,
        per seed) and ``same_decisions`` (equal to one worker's at every seed; None for the peers).

    Example (a pool's rows; the module's example builds one):
        >>> rows = scale_table(pool, "adam", workers=[1, 4], cohorts=10)  # doctest: +SKIP
        >>> [row["utilisation"]["mean"] for row in rows if row["method"] == "stream"]  # doctest: +SKIP
    """
    o = options_or_keywords("scale_table", ScaleOptions, options, keywords)
    workers, cohort_size, cohorts, seeds, methods = o.workers, o.cohort_size, o.cohorts, o.seeds, o.methods
    fraction, jitter, replace = o.fraction, o.jitter, o.replace
    rungs = pool.budgets if o.rungs is None else tuple(o.rungs)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"Invalid methods: {', '.join(unknown)} (expected some of {', '.join(METHODS)})")
    if cohort_size * cohorts > pool.size and not replace:
        raise InputError(f"Invalid cohorts: {cohorts} cohorts of {cohort_size} is {cohort_size * cohorts} "
                         f"configurations (the pool holds {pool.size}; replace=True draws with replacement)")
    draws = cohort_size * cohorts if replace else None
    orders = {seed: search_order(pool.size, seed, draws) for seed in seeds}
    cost = model_sizes(pool)
    rows = []
    for method in methods:
        run = _runner(method, pool, trainer, rungs, cohort_size, cohorts, fraction, cost)
        reference: dict[int, Any] = {}
        for count in workers:
            results = {seed: run(count, orders[seed], jitter, seed) for seed in seeds}
            same = None
            if method in DETERMINISTIC:
                summaries = {seed: (r.decision_summary(), r.winner) for seed, r in results.items()}
                if not reference:
                    reference = summaries
                same = summaries == reference
            picks = [None if r.winner is None else orders[seed][r.winner] for seed, r in results.items()]
            rows.append({
                "method": method, "workers": count,
                "wall": _summary([r.wall for r in results.values()]),
                "utilisation": _summary([r.utilisation for r in results.values()]),
                "dropped": _summary([r.dropped for r in results.values()]),
                "units": _summary([r.units + r.dropped_units for r in results.values()]),
                "referee": _summary([pool.referee_score(p) if p is not None else float("nan") for p in picks]),
                "pick": picks, "same_decisions": same})
    return rows


def format_scale_table(rows: Sequence[dict[str, Any]], scale: float = 100.0) -> str:
    """The rows of :func:`scale_table` as a Markdown table (referee scores times ``scale``: points).

    Args:
        rows: the rows.
        scale: the factor of the referee score (100: accuracy in points).

    Returns:
        The table's text.

    Example:
        >>> row = {"method": "sha", "workers": 2, "wall": {"mean": 8.0, "sd": 0.0},
        ...        "utilisation": {"mean": 1.0, "sd": 0.0}, "dropped": {"mean": 0.0, "sd": 0.0},
        ...        "units": {"mean": 12.0, "sd": 0.0}, "referee": {"mean": 0.9, "sd": 0.0}, "same_decisions": True}
        >>> print(format_scale_table([row]).splitlines()[2])
        | sha | 2 | 8.00 ± 0.00 | 1.000 ± 0.000 | 0.00 | 12 | 90.00 ± 0.00 | yes |
    """
    lines = ["| method | workers | wall (s) | utilisation | dropped (s) | units | referee | same decisions as 1 worker |",
             "|---|---:|---:|---:|---:|---:|---:|:---:|"]
    for row in rows:
        w, u, r = row["wall"], row["utilisation"], row["referee"]
        same = {True: "yes", False: "NO", None: "n/a"}[row["same_decisions"]]
        lines.append(f"| {row['method']} | {row['workers']} | {w['mean']:.2f} ± {w['sd']:.2f} | "
                     f"{u['mean']:.3f} ± {u['sd']:.3f} | {row['dropped']['mean']:.2f} | "
                     f"{row['units']['mean']:.0f} | {scale * r['mean']:.2f} ± {scale * r['sd']:.2f} | {same} |")
    return "\n".join(lines)
