"""``eve-search bench sweep``: what a whole sweep costs beside the training it does.

Each round runs, per optimizer, ``eve-search adult --space SPACE --optimizer OPT`` in a fresh process
on a fresh store (checkpoints, store and resume on, as a user runs it) and times it from exec to exit;
then a plain in-process loop of the same synchronous successive halving (paper, Section
"Successive Halving"): every trial kept in memory, no store, no checkpoints, the same configurations,
seeds and frozen ratio, also in a fresh process. The sweep's own parts (calibration, checkpoint loads,
training, evaluation, serialization, store writes) come from the ``run_seconds`` the sweep records in
its store. ``--hogs N`` runs N busy-looping processes during every measurement, ``--jobs N`` passes
``--jobs N`` to the sweeps. Medians over rounds are printed with the load average beside each run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["plain_loop"]


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return seconds, done


def _sweep_once(space: str, optimizer: str, configs: int, ratio: float | None, jobs: int | None,
                force_jobs: bool = False) -> dict[str, Any]:
    import optuna

    from eve_search.engine.store import study_name

    with tempfile.TemporaryDirectory(prefix="eve-bench-sweep-") as folder:
        out = Path(folder) / "out.json"
        command = [sys.executable, "-m", "eve_search.cli", "adult", "--space", space, "--optimizer", optimizer,
                   "--configs", str(configs), "--quiet", "--workdir", folder, "--json", str(out)]
        command += [] if ratio is None else ["--backward-ratio", repr(ratio)]
        command += [] if jobs is None else ["--jobs", str(jobs)]
        command += ["--force-jobs"] if force_jobs else []
        load = _load()
        wall, _ = _timed(command)
        result = json.loads(out.read_text())["optimizers"][optimizer]
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name=study_name("adult", space, optimizer, 0),
                                  storage=f"sqlite:///{Path(folder) / 'results.db'}")
        parts = dict(study.user_attrs.get("run_seconds", {}))
    return {"process": wall, "sweep": result["wall_seconds"], "training": result["training_seconds"],
            "parts": parts, "ratios": result["backward_ratios"], "load": load,
            "scores": {str(t["index"]): t["scores"] for t in result["trials"]}, "winner": result["winner"]["index"]}


def plain_loop(space: str, optimizer: str, configs: int, ratio: float, *, task: str = "adult",
               rungs: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Synchronous successive halving as a plain loop over trials held in memory: no store, no
    checkpoints, no calibration (``ratio`` is given). Returns the scores per trial and rung."""
    from eve_search.engine.ledger import (
        DEFAULT_RUNGS,
        PROMOTED_FRACTION,
        promote_top_fraction,
        rank_order,
    )
    from eve_search.tasks.spaces import get_space
    from eve_search.tasks import get_task
    from eve_search.engine.trial import Trial

    rungs = DEFAULT_RUNGS if rungs is None else rungs
    task = get_task(task)
    data = task.data()
    sampled = get_space(space).sample(configs, 0)
    trials = {i: Trial(task, config, optimizer, seed=0, index=i, backward_ratio=ratio, data=data)
              for i, config in enumerate(sampled)}
    scores: dict[str, dict[str, float]] = {str(i): {} for i in trials}
    alive = list(trials)
    for rung, budget in enumerate(rungs):
        rung_scores = {}
        for i in alive:
            trials[i].train_to(budget)
            rung_scores[i] = trials[i].score(trials[i].evaluate())
            scores[str(i)][str(budget)] = rung_scores[i]
        if rung == len(rungs) - 1:
            break
        alive = sorted(promote_top_fraction(rung_scores, PROMOTED_FRACTION, task.mode))
        for i in set(trials) - set(alive):
            del trials[i]  # an eliminated trial is done
    return {"scores": scores, "winner": rank_order(rung_scores, task.mode)[0]}


def _plain_once(space: str, optimizer: str, configs: int, ratio: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="eve-bench-plain-") as folder:
        out = Path(folder) / "plain.json"
        load = _load()
        wall, _ = _timed([sys.executable, "-m", "eve_search.benchmarks.sweep", space, optimizer, str(configs),
                          repr(ratio), str(out)])
        result = json.loads(out.read_text())
    return {"process": wall, "load": load, **result}


def _hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


if __name__ == "__main__":  # the plain loop's own process: SPACE OPTIMIZER CONFIGS RATIO OUT
    import gc

    space, optimizer, configs, ratio, out = sys.argv[1:6]
    Path(out).write_text(json.dumps(plain_loop(space, optimizer, int(configs), float(ratio))))
    gc.freeze()  # the same quick exit as the eve-search command's (see eve_search.cli.console)
