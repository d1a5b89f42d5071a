"""``eve-search bench sweep``: the command's arguments and its report; the measurements are
:mod:`eve_search.benchmarks.sweep`."""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

from eve_search.benchmarks import sweep as _bench
from eve_search.cli._common import write_json

__all__ = ["configure_parser", "run"]


def _hogs_count(text: str) -> int:
    import eve_search.cli.args as types


    cpus = types.available_cpus()
    return types.bounded_int(0, types.JOBS_PER_CPU * cpus, f"{types.JOBS_PER_CPU} x the {cpus} CPUs this process may "
                             "use: more only slows every measurement further")(text)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    import eve_search.cli.args as types


    parser.description = _bench.__doc__.split("\n\n", 1)[1].replace("\n", " ")
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


def run(args: argparse.Namespace) -> int:
    from eve_search.cli.args import check_processes
    from eve_search.cli.args import UsageError


    # Everything the sweeps' own command would refuse is refused here, before any process starts.
    problem = check_processes(args.jobs, "--jobs", configs=args.configs, force=args.force_jobs)
    if problem is not None:
        raise UsageError(f"eve-search bench sweep: {problem}")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.optimizers}
    plain: dict[str, list[dict[str, Any]]] = {name: [] for name in args.optimizers}
    print(f"bench sweep: adult --space {args.space}, {args.configs} configurations, {args.rounds} rounds, "
          f"{args.hogs} hogs, jobs {args.jobs or 'off'}, {os.cpu_count()} CPUs; load average before: {_bench._load()}",
          flush=True)
    for round_ in range(args.rounds):
        for optimizer in args.optimizers:
            hogs = _bench._hogs(args.hogs)
            try:
                sweep = _bench._sweep_once(args.space, optimizer, args.configs, args.backward_ratio, args.jobs,
                                    args.force_jobs)
                ratio = args.backward_ratio or statistics.median(sweep["ratios"].values())
                loop = _bench._plain_once(args.space, optimizer, args.configs, ratio)
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
    print(f"\nmedians over {args.rounds} rounds (seconds; load average now {_bench._load()}):")
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
        write_json(args.json, "bench-sweep", {"medians": medians, "runs": runs, "plain": plain, "hogs": args.hogs,
                                              "jobs": args.jobs})
    return 0
