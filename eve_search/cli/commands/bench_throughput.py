"""``eve-search bench throughput``: the command's arguments and its table; the measurements are
:mod:`eve_search.benchmarks.throughput`."""

from __future__ import annotations

import argparse
from pathlib import Path

import eve_search.cli.args as types
from eve_search.cli._common import write_json

__all__ = ["configure_parser", "run"]

_LABELS = {"floor": "compute floor (forward-only loop)", "passes": "forward+backward loop, no update", "eve": "EvE",
           "adam": "Adam (fused)"}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search bench throughput``.

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> parser = argparse.ArgumentParser(prog="eve-search bench throughput")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--seconds", "0.5", "--rounds", "3"])
        >>> args.seconds, args.rounds, args.json
        (0.5, 3, None)
    """
    parser.add_argument("--seconds", type=types.seconds, default=2.0,
                        help=f"wall seconds per loop per round (at most {types.MAX_SECONDS:g})")
    parser.add_argument("--rounds", type=types.rounds, default=5,
                        help=f"rounds (medians are reported; at most {types.MAX_ROUNDS})")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")


def run(args: argparse.Namespace) -> int:
    """``eve-search bench throughput``: measure the four loops side by side, print the table (and ``--json``).

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Example (measures for seconds: not run as a doctest):
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--seconds", "0.1", "--rounds", "1"]))  # doctest: +SKIP
        0
    """
    from rich.console import Console
    from rich.table import Table

    from eve_search.benchmarks.throughput import LOOPS, throughput

    report = throughput(seconds=args.seconds, rounds=args.rounds)
    table = Table(title=f"Charged units per second, Adult-sized MLP, batch 256 "
                        f"({report.rounds} rounds x {report.seconds_per_loop:g} s, {report.threads} threads)")
    table.add_column("loop")
    table.add_column("units/s", justify="right")
    table.add_column("floor / loop", justify="right")
    table.add_column("wall time in charged passes", justify="right")
    for name in LOOPS:
        table.add_row(_LABELS[name], f"{report.units_per_second[name]:.0f}", f"{report.floor_ratio[name]:.2f}x",
                      f"{report.time_in_passes[name]:.0%}")
    console = Console(width=None if Console().is_terminal else 120)
    console.print(table)
    console.print(f"EvE / Adam units per second: {report.eve_over_adam:.2f}; EvE's fallback fired on "
                  f"{report.eve_fallback_rate:.0%} of its iterations")
    if args.json:
        write_json(args.json, "bench-throughput", report.as_dict())
    return 0
