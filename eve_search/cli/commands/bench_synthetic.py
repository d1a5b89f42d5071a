"""``eve-search bench synthetic``: EvE against Adam on the paper's seven scalable test functions.

Runs every missing (function, n, method, seed) of the selection into the results store (resuming
where an earlier command stopped), then tests every cell and prints the table and the per-function
win/tie/loss counts beside the paper's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import eve_search.cli.args as types
from eve_search.cli._common import storage_url, write_json
from eve_search.cli.args import UsageError
from eve_search.engine._stores import redact, safe_url
from eve_search.engine.store import StoreError
from eve_search.experiments.synthetic._functions import function_names
from eve_search.experiments.synthetic._stats import PAPER_WIN_TIE_LOSS, analyse, win_tie_loss
from eve_search.experiments.synthetic._suite import (
    DEFAULT_DIMS,
    RunRecord,
    SuiteStore,
    run_key,
    run_suite,
)

__all__ = ["configure_parser", "run"]

_PROG = "eve-search bench synthetic"


def _function_list(text: str) -> list[str]:
    names = types.name_list(text, list(function_names()), "function", normalize=lambda part: part.strip().lower())
    return [name for name in function_names() if name in names]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the command's arguments to ``parser`` (the ``synthetic`` parser under ``bench``).

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search bench synthetic")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--functions", "sphere", "--dims", "2,10", "--seeds", "0-4"])
        >>> args.functions, args.dims, args.seeds, args.budget
        (['sphere'], [2, 10], [0, 1, 2, 3, 4], 2000.0)
    """
    parser.add_argument("--functions", type=_function_list, default=function_names(), metavar="NAMES",
                        help=f"comma-separated test functions (default: all of {','.join(function_names())})")
    parser.add_argument("--dims", type=types.dim_list, default=list(DEFAULT_DIMS), metavar="N,N,...",
                        help="dimensions, e.g. 2,10,1e5 (default: the paper's 2,10,20,50,100,200,500,1000,1e5,1e6)")
    parser.add_argument("--seeds", type=types.seed_list, default=list(range(21)), metavar="SEEDS",
                        help="seeds, e.g. 0-20 (default, the paper's 21) or 0,3,7")
    parser.add_argument("--budget", type=types.bounded_float(10.0, types.MAX_BUDGET, types.WHY_BUDGET),
                        default=2000.0, metavar="B",
                        help="evaluation-cost budget per run (default 2000, the paper's; from 10 to 1e9)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="what times each pass: 'cpu' "
                        "(default), the thread's CPU time with torch on one thread, so time the machine gives "
                        "to other processes is never charged; 'wall', the wall clock, for a dedicated machine")
    parser.add_argument("--alpha", type=float, default=0.05,  # checked in run(): in (0, 1), so finite
                        help="family-wise level of the Holm-Bonferroni correction over every test (default 0.05)")
    types.add_store_options(parser, checkpoints=False)
    parser.add_argument("--report-only", action="store_true", help="run nothing: report the runs of the "
                        "selection already in the store (each cell over the seeds it has for both methods)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every cell and the counts as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress display and no table")


def _usage(argument: str, message: str) -> Exception:
    return UsageError(f"{_PROG}: argument {argument}: {message}")


def _cells(records: dict[str, RunRecord], functions: list[str], dims: list[int],
           seeds: list[int]) -> dict[tuple[str, int], dict[int, tuple[float, float]]]:
    cells = {}
    for function in functions:
        for n in dims:
            pairs = {}
            for seed in seeds:
                eve, adam = (records.get(run_key(function, n, method, seed)) for method in ("eve", "adam"))
                if eve is not None and adam is not None:
                    pairs[seed] = (eve.value, adam.value)
            if pairs:
                cells[(function, n)] = pairs
    return cells


def _seed_ranges(seeds: list[int]) -> str:
    parts, start = [], None
    for k, seed in enumerate(seeds):
        if start is None:
            start = seed
        if k + 1 == len(seeds) or seeds[k + 1] != seed + 1:
            parts.append(str(start) if start == seed else f"{start}-{seed}")
            start = None
    return ",".join(parts)


def _document(args: argparse.Namespace, store: SuiteStore, records: dict[str, RunRecord], ran: int,
              elapsed: float) -> dict[str, Any]:
    cells = analyse(_cells(records, args.functions, args.dims, args.seeds), alpha=args.alpha)
    counts = win_tie_loss(cells)
    by_method: dict[str, dict[str, float]] = {}
    for method in ("eve", "adam"):
        runs = [r for r in records.values() if r.method == method]
        backward = sum(r.backward_passes for r in runs)
        by_method[method] = {
            "runs": len(runs), "wall_seconds": sum(r.wall_seconds for r in runs),
            "mean_iterations": sum(r.iterations for r in runs) / len(runs) if runs else 0.0,
            "mean_units_per_backward": (sum(r.units - r.forward_points for r in runs) / backward) if backward else 0.0,
        }
    totals = [sum(counts.get(f, (0, 0, 0))[k] for f in counts) for k in range(3)]
    return {
        "study": store.name, "storage": safe_url(store.storage), "budget": args.budget, "clock": args.clock,
        "alpha": args.alpha,
        "settings": store.study.user_attrs.get("settings"),
        "functions": args.functions, "dims": args.dims, "seeds": args.seeds,
        "runs_recorded": len(records), "runs_now": ran, "command_wall_seconds": elapsed,
        "runs_wall_seconds": sum(r.wall_seconds for r in records.values()), "methods": by_method,
        "cells": [cell.as_dict() for cell in cells],
        "win_tie_loss": {f: dict(zip(("win", "tie", "loss"), counts[f], strict=True)) for f in counts},
        "total": dict(zip(("win", "tie", "loss"), totals, strict=True)),
        "paper_win_tie_loss": {f: dict(zip(("win", "tie", "loss"), PAPER_WIN_TIE_LOSS[f], strict=True))
                               for f in counts},
    }


def _print_tables(document: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 150)
    table = Table(title=f"EvE vs Adam, final values (lower is better), B = {document['budget']:g}, measured cost "
                        f"rule; Wilcoxon one-sided, Holm over {2 * len(document['cells'])} tests at "
                        f"alpha {document['alpha']:g}")
    for column in ("function", "n", "seeds", "EvE min", "EvE median", "EvE max", "Adam min", "Adam median",
                   "Adam max", "p EvE<Adam", "p Adam<EvE", "verdict"):
        table.add_column(column, justify="left" if column in ("function", "verdict") else "right")
    style = {"win": "bold green", "loss": "bold red", "tie": ""}
    for cell in document["cells"]:
        table.add_row(cell["function"], f"{cell['n']:,}", str(len(cell["seeds"])),
                      *(f"{cell[m][k]:.3g}" for m in ("eve", "adam") for k in ("min", "median", "max")),
                      f"{cell['p_eve_better_holm']:.2g}", f"{cell['p_adam_better_holm']:.2g}",
                      f"[{style[cell['verdict']]}]{cell['verdict']}[/]" if style[cell["verdict"]] else cell["verdict"])
    console.print(table)
    summary = Table(title="Cells where EvE is better / indistinguishable / Adam is better (W/T/L)")
    for column in ("function", "cells", "this run W/T/L", "paper W/T/L (10 dims)"):
        summary.add_column(column, justify="left" if column == "function" else "right")
    for function, counts in document["win_tie_loss"].items():
        paper = document["paper_win_tie_loss"][function]
        summary.add_row(function, str(sum(counts.values())), "/".join(str(counts[k]) for k in ("win", "tie", "loss")),
                        "/".join(str(paper[k]) for k in ("win", "tie", "loss")))
    total = document["total"]
    cells = sum(total.values())
    summary.add_row("all", str(cells), "/".join(str(total[k]) for k in ("win", "tie", "loss")), "33/20/17")
    console.print(summary)
    if cells:
        console.print(f"EvE wins or ties {total['win'] + total['tie']} of {cells} cells "
                      f"({(total['win'] + total['tie']) / cells:.0%}; paper: 53 of 70, 76%). "
                      f"Runs: {document['runs_recorded']} in the store for this selection, {document['runs_now']} "
                      f"run now; run wall time {document['runs_wall_seconds']:.0f} s in all, this command "
                      f"{document['command_wall_seconds']:.0f} s.")
        eve, adam = document["methods"]["eve"], document["methods"]["adam"]
        console.print(f"Mean iterations per run: EvE {eve['mean_iterations']:.0f}, Adam {adam['mean_iterations']:.0f}; "
                      f"mean units charged per backward pass: EvE {eve['mean_units_per_backward']:.2f}, "
                      f"Adam {adam['mean_units_per_backward']:.2f}.")


class _Progress:
    """A rich progress bar on stderr: the run in progress and an estimate of the time left."""

    def __init__(self, enabled: bool) -> None:
        self._bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[runs]}"),
                                 TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=False)
            self._task = None
            self._runs = 0

    def start(self) -> None:
        if self._bar is not None:
            self._bar.start()

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, description: str, done: float, total: float, ran: bool) -> None:
        if self._bar is None:
            return
        if self._task is None:
            self._task = self._bar.add_task(description, total=total, runs="")
        self._runs += ran
        self._bar.update(self._task, description=description, completed=done, runs=f"{self._runs} runs")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code (bad input raises ``eve_search.cli.UsageError``).

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (runs the suite: not run as a doctest):
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--functions", "sphere", "--dims", "2"]))  # doctest: +SKIP
        0
    """
    if not 0.0 < args.alpha < 1.0:
        raise _usage("--alpha", f"{args.alpha!r} (expected a family-wise level in (0, 1))")
    if args.json is not None and args.json.is_dir():
        raise _usage("--json", f"{str(args.json)!r} is a directory (expected a file path)")
    started = time.perf_counter()
    try:
        store = SuiteStore(storage_url(args), args.budget, args.clock)
    except StoreError as error:
        raise _usage("--storage", redact(str(error))) from None
    progress = _Progress(enabled=not args.quiet and not args.report_only)
    progress.start()
    try:
        records, ran = run_suite(store, args.functions, args.dims, args.seeds, progress=progress,
                                 run=not args.report_only)
    finally:
        progress.stop()
    document = _document(args, store, records, ran, time.perf_counter() - started)
    if not document["cells"]:
        raise _usage("--report-only" if args.report_only else "--seeds",
                     f"no cell of the selection has runs of both methods in {safe_url(store.storage)!r}")
    if not args.quiet:
        _print_tables(document)
    if args.json is not None:
        write_json(args.json, "bench-synthetic", document)
    return 0
