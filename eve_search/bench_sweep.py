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

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["configure_parser", "plain_loop", "run"]


def _hogs_count(text: str) -> int:
    from eve_search import _argtypes as types

    cpus = types.available_cpus()
    return types.bounded_int(0, types.JOBS_PER_CPU * cpus, f"{types.JOBS_PER_CPU} x the {cpus} CPUs this process may "
                             "use: more only slows every measurement further")(text)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from eve_search import _argtypes as types

    parser.description = __doc__.split("\n\n", 1)[1].replace("\n", " ")
    parser.add_argument("--space", type=types.adult_space, default="hp", help="Adult search space (default hp)")
    parser.add_argument("--optimizers", type=types.optimizer_list, default=["eve", "adam"], metavar="NAMES",
                        help="comma-separated optimizers (default eve,adam)")
    parser.add_argument("--rounds", type=types.rounds, default=2,
                        help=f"rounds (medians are reported; default 2, at most {types.MAX_ROUNDS})")
    parser.add_argument("--hogs", type=_hogs_count, default=0, metavar="N",
                        help=f"busy-looping background processes during every measurement (default 0, at most "
                             f"{types.JOBS_PER_CPU} x the CPUs)")
    parser.add_argument("--jobs", type=types.bounded_int(1, types.MAX_CONFIGS, "one worker per configuration at most"),
                        default=None, metavar="N", help="pass --jobs N to the sweeps (worker processes, one thread "
                        f"each; at most --configs and {types.JOBS_PER_CPU} x the CPUs unless --force-jobs)")
    parser.add_argument("--force-jobs", action="store_true", help="pass --force-jobs to the sweeps")
    parser.add_argument("--configs", type=types.configs, default=48, metavar="N",
                        help=f"configurations (default 48, at most {types.MAX_CONFIGS:,})")
    parser.add_argument("--backward-ratio", type=types.backward_ratio, default=None, metavar="R",
                        help="pin the ratio (default: each sweep calibrates, and its plain loop uses that ratio)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every figure as JSON")


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

    from eve_search.store import study_name

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
    from eve_search.ledger import (
        DEFAULT_RUNGS,
        PROMOTED_FRACTION,
        promote_top_fraction,
        rank_order,
    )
    from eve_search.spaces import get_space
    from eve_search.tasks import get_task
    from eve_search.trial import Trial

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
        wall, _ = _timed([sys.executable, "-m", "eve_search.bench_sweep", space, optimizer, str(configs),
                          repr(ratio), str(out)])
        result = json.loads(out.read_text())
    return {"process": wall, "load": load, **result}


def _hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def run(args: argparse.Namespace) -> int:
    from eve_search._argtypes import check_processes
    from eve_search.cli import UsageError

    # Everything the sweeps' own command would refuse is refused here, before any process starts.
    problem = check_processes(args.jobs, "--jobs", configs=args.configs, force=args.force_jobs)
    if problem is not None:
        raise UsageError(f"eve-search bench sweep: {problem}")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.optimizers}
    plain: dict[str, list[dict[str, Any]]] = {name: [] for name in args.optimizers}
    print(f"bench sweep: adult --space {args.space}, {args.configs} configurations, {args.rounds} rounds, "
          f"{args.hogs} hogs, jobs {args.jobs or 'off'}, {os.cpu_count()} CPUs; load average before: {_load()}",
          flush=True)
    for round_ in range(args.rounds):
        for optimizer in args.optimizers:
            hogs = _hogs(args.hogs)
            try:
                sweep = _sweep_once(args.space, optimizer, args.configs, args.backward_ratio, args.jobs,
                                    args.force_jobs)
                ratio = args.backward_ratio or statistics.median(sweep["ratios"].values())
                loop = _plain_once(args.space, optimizer, args.configs, ratio)
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()
            same = loop["scores"] == sweep["scores"] and loop["winner"] == sweep["winner"]
            loop["same_results_as_sweep"] = same
            runs[optimizer].append(sweep)
            plain[optimizer].append(loop)
            parts = ", ".join(f"{k} {v:.2f}" for k, v in sweep["parts"].items())
            print(f"round {round_ + 1} {optimizer:>5}: process {sweep['process']:.2f} s (load {sweep['load']}), "
                  f"sweep {sweep['sweep']:.2f} s, training {sweep['training']:.2f} s [{parts}]; plain loop "
                  f"{loop['process']:.2f} s (load {loop['load']}), same results: {'yes' if same else 'no'}",
                  flush=True)
    medians: dict[str, dict[str, float]] = {}
    for optimizer in args.optimizers:
        figures = runs[optimizer]
        m = {key: statistics.median(f[key] for f in figures) for key in ("process", "sweep", "training")}
        m["startup"] = statistics.median(f["process"] - f["sweep"] for f in figures)
        for part in figures[0]["parts"]:
            m[part] = statistics.median(f["parts"].get(part, 0.0) for f in figures)
        m["plain_loop"] = statistics.median(f["process"] for f in plain[optimizer])
        m["process_over_training"] = m["process"] / m["training"]
        m["plain_over_process"] = m["plain_loop"] / m["process"]
        medians[optimizer] = m
    print(f"\nmedians over {args.rounds} rounds (seconds; load average now {_load()}):")
    keys = ["process", "startup", "sweep", "calibration", "load", "train", "evaluate", "serialize", "store",
            "training", "plain_loop", "process_over_training", "plain_over_process"]
    print(f"{'':>22}" + "".join(f"{name:>10}" for name in args.optimizers))
    for key in keys:
        if all(key in medians[name] for name in args.optimizers):
            print(f"{key:>22}" + "".join(f"{medians[name][key]:>10.2f}" for name in args.optimizers))
    if "eve" in medians and "adam" in medians:
        print(f"EvE / Adam process seconds: {medians['eve']['process'] / medians['adam']['process']:.2f}; "
              f"sweep seconds: {medians['eve']['sweep'] / medians['adam']['sweep']:.2f}")
    print("process_over_training: whole process over the trials' own training seconds (with --jobs the training "
          "seconds add up the workers' time); plain_over_process: the plain in-process loop's seconds over the "
          "sweep process's (> 1: the sweep is faster)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)  # checked writable before any work (cli.main)
        args.json.write_text(json.dumps({"medians": medians, "runs": runs, "plain": plain,
                                         "hogs": args.hogs, "jobs": args.jobs}, indent=2))
    return 0


if __name__ == "__main__":  # the plain loop's own process: SPACE OPTIMIZER CONFIGS RATIO OUT
    import gc

    space, optimizer, configs, ratio, out = sys.argv[1:6]
    Path(out).write_text(json.dumps(plain_loop(space, optimizer, int(configs), float(ratio))))
    gc.freeze()  # the same quick exit as the eve-search command's (see eve_search.cli.console)
