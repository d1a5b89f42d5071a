"""The ``eve-search`` command line.

Bad input gets one line on stderr naming the argument, the value and what was expected, and exit
code 2; nothing already computed is lost (sweeps resume from their store with ``--resume``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + message
        raise UsageError(f"{self.prog}: {message}")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def _build_parser() -> _Parser:
    parser = _Parser(prog="eve-search", description="Hyperparameter search with EvE as the inner-loop trainer.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    bench = commands.add_parser("bench", help="measure throughput")
    bench_kinds = bench.add_subparsers(dest="bench", required=True, parser_class=_Parser)
    tp = bench_kinds.add_parser(
        "throughput",
        help="charged units per second of EvE and Adam against the compute floor (Adult-sized MLP)",
        description="Charged evaluation units per second of EvE and Adam on the Adult-sized MLP "
                    "(107-256-256-2, batch 256, random data), against a tight forward-only loop (the "
                    "compute floor) and a forward+backward loop, measured side by side in rounds.")
    tp.add_argument("--seconds", type=_positive_float, default=2.0, help="wall seconds per loop per round")
    tp.add_argument("--rounds", type=_positive_int, default=5, help="rounds (medians are reported)")
    tp.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    return parser


def _bench_throughput(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from eve_search.bench import LOOPS, throughput

    report = throughput(seconds=args.seconds, rounds=args.rounds)
    labels = {"floor": "compute floor (forward-only loop)", "passes": "forward+backward loop, no update",
              "eve": "EvE", "adam": "Adam (fused)"}
    table = Table(title=f"Charged units per second, Adult-sized MLP, batch 256 "
                        f"({report.rounds} rounds x {report.seconds_per_loop:g} s, {report.threads} threads)")
    table.add_column("loop")
    table.add_column("units/s", justify="right")
    table.add_column("floor / loop", justify="right")
    for name in LOOPS:
        table.add_row(labels[name], f"{report.units_per_second[name]:.0f}", f"{report.floor_ratio[name]:.2f}x")
    console = Console()
    console.print(table)
    console.print(f"EvE / Adam units per second: {report.eve_over_adam:.2f}; EvE fallback rate "
                  f"{report.eve_fallback_rate:.0%}; share of EvE's wall time inside charged passes "
                  f"{report.eve_time_in_passes:.0%}")
    if args.json:
        args.json.write_text(json.dumps(report.as_dict(), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``eve-search`` console script; returns the exit code."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "bench":
            return _bench_throughput(args)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eve-search: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
