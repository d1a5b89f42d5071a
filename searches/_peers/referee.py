"""The referee: a configuration's quality, whichever tool picked it.

The configuration is trained as an Adam :class:`~eve_search.engine.trial.Trial` to the full ``max_units``
under the pinned cost rule on each referee seed (seeds of their own, 10000 + k, so no search saw
their initial weights or batches), with one PyTorch thread (a score does not depend on how many
processes computed it); validation and test accuracy are the task's metrics. Scores are cached in the
store per (configuration, referee seed) and never computed twice.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any

from _peers.problem import Problem, coerce, config_key

__all__ = ["REFEREE_SEED_BASE", "referee_seeds", "score", "summary", "worker_pool"]

REFEREE_SEED_BASE = 10_000


def referee_seeds(count: int) -> list[int]:
    return [REFEREE_SEED_BASE + k for k in range(count)]


def train_one(problem: dict[str, Any], config: dict[str, Any], seed: int) -> dict[str, Any]:
    """One referee training (module level: it also runs in worker processes)."""
    import torch

    from eve_search.engine.trial import Trial

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        p = Problem(**problem)
        trial = Trial(p.task, config, "adam", seed=seed, index=0, cost_mode="calibrated",
                      backward_ratio=p.backward_ratio)
        started = time.perf_counter()
        trial.train_to(p.max_units)
        seconds = time.perf_counter() - started
        metric = trial.task.metric
        return {"val": float(trial.evaluate("val")[metric]), "test": float(trial.evaluate("test")[metric]),
                "units": float(trial.charged_units), "seconds": seconds}
    finally:
        torch.set_num_threads(threads)


def score(store: Any, problem: Problem, configs: Iterable[dict[str, Any]], seeds: list[int], *,
          pool: Executor | None = None, progress: Callable[[int, int], None] | None = None) -> None:
    """Make sure the store holds the referee's score of every configuration on every seed, training the
    missing ones (in ``pool``'s worker processes when given, else here)."""
    known = store.referee_scores(problem)
    todo: list[tuple[dict[str, Any], int]] = []
    queued: set[tuple[str, int]] = set()
    for raw in configs:
        config = coerce(problem.declared, raw)
        key = config_key(config)
        for seed in seeds:
            if (key, seed) not in known and (key, seed) not in queued:
                queued.add((key, seed))
                todo.append((config, seed))
    if not todo:
        return
    if pool is None or len(todo) == 1:
        for done, (config, seed) in enumerate(todo, 1):
            store.add_referee_score(problem, config, seed, train_one(problem.as_dict(), config, seed))
            if progress is not None:
                progress(done, len(todo))
        return
    futures = [(config, seed, pool.submit(train_one, problem.as_dict(), config, seed)) for config, seed in todo]
    for done, (config, seed, future) in enumerate(futures, 1):
        store.add_referee_score(problem, config, seed, future.result())  # stored as each one is known
        if progress is not None:
            progress(done, len(todo))


def worker_pool(jobs: int) -> Executor | None:
    """Worker processes for the referee (``spawn``: nothing of the parent's state travels), or None."""
    if jobs <= 1:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))


def summary(store: Any, problem: Problem, config: dict[str, Any], seeds: list[int]) -> dict[str, Any] | None:
    """The referee's verdict on one configuration (means over the seeds), None while a seed is missing."""
    known = store.referee_scores(problem)
    key = config_key(coerce(problem.declared, config))
    results = [known.get((key, seed)) for seed in seeds]
    if any(r is None for r in results):
        return None
    return {"key": key, "val": statistics.fmean(r["val"] for r in results),
            "test": statistics.fmean(r["test"] for r in results),
            "val_each": [r["val"] for r in results], "test_each": [r["test"] for r in results]}
