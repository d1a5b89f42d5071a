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

from eve_search._checks import InputError

__all__ = ["VARIANTS", "import_floor", "overhead_once", "plain_loop"]

VARIANTS = ("local", "jobs1", "jobs2", "optuna", "ray")
"""Who drives the trials in ``--overhead`` runs: this process (``local``), ``--jobs 1`` or ``--jobs 2``
worker processes, ``--backend optuna`` (one worker) or ``--backend ray`` (a local Ray instance)."""

_WORKERS = {"jobs2": 2}

IMPORT_FLOOR = ("import time; start = time.perf_counter(); import torch, torch._dynamo, sqlalchemy, optuna; "
                "print(time.perf_counter() - start)")


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _timed(command: list[str], cwd: str) -> tuple[float, subprocess.CompletedProcess]:
    """Run ``command`` in ``cwd`` (a folder of the benchmark's own: ``python -m`` and ``-c`` put the working
    directory first on ``sys.path``, so an ``eve_search`` folder there would be run instead)."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd)
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
        wall, _ = _timed(command, folder)
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
    checkpoints, no calibration (``ratio`` is given). Returns the scores per trial and rung.

    Args:
        space: the search space's name.
        optimizer: the optimizer's name.
        configs: how many configurations are drawn (configuration seed 0).
        ratio: the frozen backward/forward ratio.
        task: the task's name.
        rungs: the rung budgets (None: the engine's default rungs).

    Returns:
        ``scores``, ``{trial index: {budget: score}}`` (both keys strings), and the ``winner``'s index.

    Example:
        >>> result = plain_loop("hp", "adam", 2, 2.0, rungs=(10, 20))
        >>> sorted(result["scores"]["0"]), result["winner"] in (0, 1)
        (['10', '20'], True)
    """
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
                          repr(ratio), str(out)], folder)
        result = json.loads(out.read_text())
    return {"process": wall, "load": load, **result}


def import_floor(rounds: int = 3) -> float:
    """Seconds a fresh interpreter takes to import PyTorch, ``torch._dynamo`` (every ``torch.optim``
    optimizer imports it when constructed) and the store's libraries (SQLAlchemy, Optuna): the part of
    any one-shot sweep process that no engine change can remove. The median of ``rounds`` fresh runs.

    Args:
        rounds: how many fresh interpreters are timed.

    Returns:
        The median import time, in seconds.

    Example (starts fresh interpreters that import torch: seconds, so not run as a doctest):
        >>> import_floor(rounds=1) > 0  # doctest: +SKIP
        True
    """
    times = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="eve-bench-floor-") as folder:
            _, done = _timed([sys.executable, "-c", IMPORT_FLOOR], folder)
        times.append(float(done.stdout.strip()))
    return sorted(times)[len(times) // 2]


def _run_measured(command: list[str], cwd: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of one child process, from exec to exit, run in ``cwd`` (see
    :func:`_timed`)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    error = child.stderr.read().decode(errors="replace") if child.stderr else ""
    if child.stderr:
        child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({child.returncode}): {error.strip()[-400:]}")
    return seconds, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def overhead_once(space: str, optimizer: str, configs: int, rungs: tuple[int, ...], ratio: float, variant: str,
                  storage: str | None = None, source: Path | None = None) -> dict[str, Any]:
    """One ``eve-search adult`` sweep in a fresh process, driven as ``variant`` says (see :data:`VARIANTS`),
    on a fresh store (``storage``: an empty database's URL; default an SQLite file in a temporary folder).

    Returns the process's wall seconds and peak RSS (MiB; the sweep's own process, not Ray's or the
    workers'), the sweep's seconds, its trials' training seconds, the trial-rungs it trained, the
    overhead per trial-rung (sweep seconds minus training seconds, over the trial-rungs) and, for the
    in-process engine, its parts (``run_seconds``: building or loading trials, evaluating, serializing
    checkpoints, handing results to the store, deciding rungs, and the store writer thread's CPU seconds).
    ``source``: a folder holding another ``eve_search`` package (an older checkout) for the sweep to run
    instead of this one, for before/after tables measured in one run.

    Args:
        space: the search space's name.
        optimizer: the optimizer's name.
        configs: how many configurations the sweep draws.
        rungs: its rung budgets.
        ratio: the frozen backward/forward ratio (``--backward-ratio``).
        variant: who drives the trials, one of ``VARIANTS``.
        storage: an empty database's URL (None: an SQLite file in a temporary folder).
        source: a folder holding another ``eve_search`` package to run instead (None: this one).

    Returns:
        The figures listed above, with the per-trial ``scores`` and the ``winner``'s index.

    Raises:
        InputError: an unknown ``variant``.
        RuntimeError: the sweep's process failed.

    Example (trains a sweep in a fresh process: not run as a doctest):
        >>> row = overhead_once("hp", "eve", 8, (100, 300), 2.0, "local")  # doctest: +SKIP
        >>> row["trial_rungs"], row["overhead_ms"] > 0  # doctest: +SKIP
        (10, True)
    """
    import optuna

    from eve_search.engine.store import study_name

    if variant not in VARIANTS:
        raise InputError(f"Invalid variant: {variant!r} (expected one of {', '.join(VARIANTS)})")
    with tempfile.TemporaryDirectory(prefix="eve-bench-overhead-") as folder:
        out = Path(folder) / "out.json"
        url = storage or f"sqlite:///{Path(folder) / 'results.db'}"
        command = [sys.executable, "-m", "eve_search.cli", "adult", "--space", space, "--optimizer", optimizer,
                   "--configs", str(configs), "--rungs", ",".join(map(str, rungs)), "--backward-ratio", repr(ratio),
                   "--quiet", "--workdir", folder, "--storage", url, "--json", str(out)]
        command += {"local": [], "jobs1": ["--jobs", "1"], "jobs2": ["--jobs", "2"],
                    "optuna": ["--backend", "optuna", "--workers", "1"], "ray": ["--backend", "ray"]}[variant]
        command += ["--force-jobs"] if variant.startswith("jobs") and configs < int(variant[-1]) else []
        load = _load()
        env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
        wall, peak = _run_measured(command, folder, env)
        result = json.loads(out.read_text())["optimizers"][optimizer]
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        parts: dict[str, float] = {}
        if variant != "ray":
            try:
                study = optuna.load_study(study_name=study_name("adult", space, optimizer, 0), storage=url)
                parts = dict(study.user_attrs.get("run_seconds", {}))
            except Exception:  # noqa: BLE001 a backend that records no parts: the totals still stand
                parts = {}
    trained = int(result["trained"])
    sweep, training = float(result["wall_seconds"]), float(result["training_seconds"])
    return {"variant": variant, "configs": configs, "optimizer": optimizer, "trial_rungs": trained,
            "process": wall, "peak_rss_mib": peak, "sweep": sweep, "training": training,
            # With --jobs N the N workers train side by side: their training seconds over N is what the
            # sweep's wall time holds of them.
            "overhead_ms": 1000 * (sweep - training / _WORKERS.get(variant, 1)) / max(trained, 1),
            "parts": parts, "load": load,
            "scores": {str(t["index"]): t["scores"] for t in result["trials"]}, "winner": result["winner"]["index"]}


def _hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


if __name__ == "__main__":  # the plain loop's own process: SPACE OPTIMIZER CONFIGS RATIO OUT
    import gc

    space, optimizer, configs, ratio, out = sys.argv[1:6]
    Path(out).write_text(json.dumps(plain_loop(space, optimizer, int(configs), float(ratio))))
    gc.freeze()  # the same quick exit as the eve-search command's (see eve_search.cli.console)
