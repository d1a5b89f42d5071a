"""``eve-search bench sweep``: the command's arguments and its report; the measurements are
:mod:`eve_search.benchmarks.sweep`."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
from pathlib import Path
from typing import Any

import eve_search.cli.args as types
from eve_search.benchmarks import sweep as _bench
from eve_search.cli._common import write_json
from eve_search.cli.args import UsageError

__all__ = ["configure_parser", "run"]


def _hogs_count(text: str) -> int:
    cpus = types.available_cpus()
    return types.bounded_int(0, types.JOBS_PER_CPU * cpus, f"{types.JOBS_PER_CPU} x the {cpus} CPUs this process may "
                             "use: more only slows every measurement further")(text)


def _variants(text: str) -> list[str]:
    return types.name_list(text, _bench.VARIANTS, "variant")


def _source(text: str) -> Path:
    folder = Path(text)
    if not (folder / "eve_search" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{types.shown(text)} holds no eve_search package (expected a checkout's root)")
    return folder.resolve()


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search bench sweep``.

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search bench sweep")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--configs", "8", "--rounds", "1"])
        >>> args.space, args.configs, args.rounds, args.optimizers
        ('hp', 8, 1, ['eve', 'adam'])
    """
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
    parser.add_argument("--overhead", action="store_true",
                        help="measure the engine's overhead per trial-rung instead: one sweep per --scales and "
                             "--variants (tiny --rungs, pinned ratio), with its parts, peak RSS and the import floor")
    parser.add_argument("--scales", type=types.configs_list, default=[48, 480, 4800], metavar="N,N,...",
                        help="with --overhead: configurations of each sweep (default 48,480,4800)")
    parser.add_argument("--variants", type=_variants, default=["local"], metavar="NAMES",
                        help=f"with --overhead: who drives the trials, among {', '.join(_bench.VARIANTS)} "
                             "(default local)")
    parser.add_argument("--rungs", type=types.rung_list, default=(10, 30, 90), metavar="B1,B2,...",
                        help="with --overhead: the rung budgets (default 10,30,90)")
    parser.add_argument("--source", type=_source, default=None, metavar="DIR",
                        help="with --overhead: run the sweeps from the eve_search package in DIR (e.g. an older "
                             "checkout, for a before/after table from one run) instead of this one")
    parser.add_argument("--postgres", action="store_true",
                        help="with --overhead: store every sweep in a throwaway PostgreSQL server started for the "
                             "run (needs the postgresql binaries) instead of an SQLite file")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every figure as JSON")


def run(args: argparse.Namespace) -> int:
    """``eve-search bench sweep``: time whole sweeps against the plain loop (or ``--overhead``), print the table.

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (trains sweeps in fresh processes: not run as a doctest):
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--configs", "8", "--rounds", "1"]))  # doctest: +SKIP
        0
    """
    if args.overhead:
        return _run_overhead(args)

    # Everything the sweeps' own command would refuse is refused here, before any process starts.
    problem = types.check_processes(args.jobs, "--jobs", configs=args.configs, force=args.force_jobs)
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


def _run_overhead(args: argparse.Namespace) -> int:
    """``--overhead``: a sweep per scale and variant, each in a fresh process on a fresh store."""
    ratio = args.backward_ratio or 2.0
    rungs = tuple(args.rungs)
    floor = _bench.import_floor()
    print(f"bench sweep --overhead: adult --space {args.space}, rungs {','.join(map(str, rungs))}, ratio {ratio:g}, "
          f"store {'PostgreSQL' if args.postgres else 'SQLite'}, {os.cpu_count()} CPUs, code "
          f"{args.source or 'this checkout'}; import floor (torch, "
          f"torch._dynamo, sqlalchemy, optuna in a fresh interpreter) {floor:.2f} s; load average before: "
          f"{_bench._load()}", flush=True)
    header = (f"{'optimizer':>9} {'variant':>7} {'configs':>7} {'trial-rungs':>11} {'training s':>10} {'sweep s':>8} "
              f"{'ms/trial-rung':>13} {'build':>6} {'eval':>6} {'ckpt':>6} {'store':>6} {'decide':>6} "
              f"{'writer':>6} {'peak MiB':>8} {'proc-train-floor s':>18}  load")
    print(header, flush=True)
    rows = []
    with contextlib.ExitStack() as stack:
        database = None
        if args.postgres:
            from eve_search.testing import throwaway_postgres

            database = stack.enter_context(throwaway_postgres())
        for optimizer in args.optimizers:
            for configs in args.scales:
                for variant in args.variants:
                    storage = None
                    if database is not None:
                        storage = database(f"bench_{optimizer}_{variant}_{configs}_{len(rows)}")
                    row = _bench.overhead_once(args.space, optimizer, configs, rungs, ratio, variant, storage,
                                               args.source)
                    row["process_minus_training_minus_floor"] = row["process"] - row["training"] - floor
                    rows.append(row)
                    parts = row["parts"]
                    per = {key: 1000 * parts[key] / max(row["trial_rungs"], 1) if key in parts else None
                           for key in ("load", "evaluate", "serialize", "store", "decide", "writer_cpu")}
                    cells = "".join(f" {'-' if v is None else f'{v:.2f}':>6}" for v in per.values())
                    print(f"{optimizer:>9} {variant:>7} {configs:>7} {row['trial_rungs']:>11} {row['training']:>10.2f} "
                          f"{row['sweep']:>8.2f} {row['overhead_ms']:>13.2f}{cells} {row['peak_rss_mib']:>8.0f} "
                          f"{row['process_minus_training_minus_floor']:>18.2f}  {row['load']}", flush=True)
    print("ms/trial-rung: (sweep seconds - training seconds) / trial-rungs (with jobs2, training seconds / 2); the "
          "parts are ms per trial-rung of the in-process engine: build (trials built or loaded), eval, ckpt "
          "(serializing checkpoints), store (handing results over), decide (rung decisions), writer (CPU of the store's "
          f"writer thread, beside the training). Load average now {_bench._load()}.")
    if args.json:
        write_json(args.json, "bench-sweep-overhead", {"import_floor": floor, "rungs": list(rungs), "ratio": ratio,
                                                       "source": None if args.source is None else str(args.source),
                                                       "postgres": args.postgres, "rows": rows})
    return 0
