"""``eve-search bench scale``: the command's arguments and its table; the simulations are
:mod:`eve_search.benchmarks.scale`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import eve_search.cli.args as types
from eve_search.cli._common import check_output_path, write_json
from eve_search.cli.args import UsageError

__all__ = ["configure_parser", "run"]


def _worker_list(text: str) -> list[int]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or len(parts) > 16:
        raise argparse.ArgumentTypeError(f"{types.shown(text)}: expected 1 to 16 comma-separated worker counts")
    values = [types.bounded_int(1, 4096, "simulated workers")(part) for part in parts]
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{types.shown(text)} names a count twice")
    return values


def _methods(text: str) -> list[str]:
    from eve_search.benchmarks.scale import METHODS

    return types.name_list(text, list(METHODS), "method")


def _jitter(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"{types.shown(text)}: expected a number in [0, 10]")
    return value


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search bench scale``.

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search bench scale")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--pool", "adult-arch.json.gz", "--workers", "1,16"])
        >>> args.workers, args.cohort_size, args.cohorts, args.trainer
        ([1, 16], 48, 10, 'adam')
    """
    from eve_search.benchmarks import scale

    parser.description = scale.__doc__.split("\n\n", 1)[0].replace("\n", " ")
    parser.add_argument("--pool", type=Path, required=True, metavar="PATH",
                        help="a recorded pool (searches/pools/adult-arch.json.gz, or one searches/record_pools.py "
                             "wrote)")
    parser.add_argument("--trainer", default="adam", metavar="NAME",
                        help="the pool's trainer whose trajectories are replayed (default adam)")
    parser.add_argument("--workers", type=_worker_list, default=list(scale.DEFAULT_WORKERS), metavar="N,N,...",
                        help="simulated worker counts (default 1,2,4,...,256)")
    parser.add_argument("--cohort-size", type=types.bounded_int(1, 100_000, "configurations"), default=48,
                        metavar="N", help="configurations per cohort (default 48, the demo sweep)")
    parser.add_argument("--cohorts", type=types.bounded_int(1, 100_000, "cohorts"), default=10, metavar="K",
                        help="cohorts in the stream; its charged units are the peers' budget (default 10)")
    parser.add_argument("--seeds", type=types.seed_list, default=list(range(5)), metavar="SEEDS",
                        help="search seeds, each a search order of the pool, e.g. 0-4 (default)")
    parser.add_argument("--methods", type=_methods, default=None, metavar="NAMES",
                        help="comma-separated methods (default: all: " + ", ".join(scale.METHODS) + ")")
    parser.add_argument("--jitter", type=_jitter, default=0.0, metavar="J",
                        help="scale each duration by exp(J x N(0, 1)), to show that decisions do not depend on "
                             "timing (default 0)")
    parser.add_argument("--with-replacement", action="store_true",
                        help="draw the searched configurations with replacement, so --cohorts may ask for more "
                             "than the pool holds (a longer search over the same configurations)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every row as JSON")
    parser.add_argument("--svg", type=Path, metavar="PATH",
                        help="draw utilisation against workers, one line per method, as an SVG file")


def run(args: argparse.Namespace) -> int:
    """``eve-search bench scale``: simulate every method at every worker count, print the table.

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (needs a recorded pool: not run as a doctest):
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--pool", "searches/pools/adult-arch.json.gz"]))  # doctest: +SKIP
        0
    """
    from eve_search.benchmarks.scale import METHODS, format_scale_table, scale_table
    from eve_search.engine.pool import PoolError, load_pool

    check_output_path(args.json, "--json", "bench scale")
    check_output_path(args.svg, "--svg", "bench scale")
    try:
        pool = load_pool(args.pool)
    except PoolError as error:
        raise UsageError(f"eve-search bench scale: argument --pool: {error}") from None
    if args.trainer not in pool.trainers:
        raise UsageError(f"eve-search bench scale: argument --trainer: {args.trainer!r} is not in the pool "
                         f"(expected one of {', '.join(sorted(pool.trainers))})")
    if args.cohort_size * args.cohorts > pool.size and not args.with_replacement:
        raise UsageError(f"eve-search bench scale: argument --cohorts: {args.cohorts} cohorts of {args.cohort_size} "
                         f"need {args.cohort_size * args.cohorts} configurations (the pool holds {pool.size}; "
                         "--with-replacement draws them with replacement)")
    methods = args.methods or list(METHODS)
    print(f"{pool.task} {pool.space}: {pool.size} configurations, trainer {args.trainer}, budgets "
          f"{', '.join(map(str, pool.budgets))}; {args.cohorts} cohorts of {args.cohort_size}"
          f"{' drawn with replacement' if args.with_replacement else ''}; search seeds "
          f"{', '.join(map(str, args.seeds))}; referee: {pool.referee}'s test {pool.metric} at "
          f"{pool.budgets[-1]}", file=sys.stderr)
    rows = scale_table(pool, args.trainer, workers=args.workers, cohort_size=args.cohort_size, cohorts=args.cohorts,
                       seeds=args.seeds, methods=methods, jitter=args.jitter, replace=args.with_replacement)
    print(format_scale_table(rows, 100.0 if pool.metric == "accuracy" else 1.0))
    if args.json:
        document: dict[str, Any] = {"pool": str(args.pool), "task": pool.task, "space": pool.space,
                                    "trainer": args.trainer, "cohort_size": args.cohort_size,
                                    "cohorts": args.cohorts, "seeds": list(args.seeds), "jitter": args.jitter,
                                    "with_replacement": args.with_replacement,
                                    "recorded": pool.recorded, "rows": rows}
        write_json(args.json, "bench-scale", document)
    if args.svg:
        from eve_search.engine.checkpoint import save_atomically

        save_atomically(utilisation_svg(rows, f"{pool.task} {pool.space}, {args.cohorts} cohorts of "
                                              f"{args.cohort_size}, trainer {args.trainer}").encode(), args.svg)
    return 0


def utilisation_svg(rows: list[dict[str, Any]], title: str) -> str:
    """Utilisation against simulated workers (log axis), one line per method, as a standalone SVG.

    Args:
        rows: the rows of :func:`~eve_search.benchmarks.scale.scale_table`.
        title: the chart's caption (escaped).

    Returns:
        The SVG document's text.

    Example:
        >>> row = {"method": "stream", "workers": 1, "utilisation": {"mean": 1.0, "sd": 0.0}}
        >>> svg = utilisation_svg([row, {**row, "workers": 4, "utilisation": {"mean": 0.9, "sd": 0.01}}], "<t>")
        >>> svg.startswith("<svg"), "&lt;t&gt;" in svg, svg.count("<svg")
        (True, True, 1)
    """
    from eve_search.dashboard._svg import Point, Series, chart, color_for, esc

    methods = list(dict.fromkeys(row["method"] for row in rows))
    series = [Series(method, [Point(row["workers"], row["utilisation"]["mean"], yerr=row["utilisation"]["sd"],
                                    label=f"{method}, {row['workers']} workers")
                              for row in rows if row["method"] == method],
                     color=color_for(method, methods), lines=True, dashed="spec" in method)
              for method in methods]
    figure = chart(series, title=title, x_label="simulated workers", y_label="utilisation", x_log=True,
                   width=640, height=400)
    svg = figure[figure.index("<svg"):figure.index("</svg>") + len("</svg>")]  # the chart, not the legend
    legend = "".join(f'<text x="612" y="{32 + 16 * k}" font-size="12" text-anchor="end" '
                     f'fill="{color_for(m, methods)}">{esc(m)}</text>' for k, m in enumerate(methods))
    if 'xmlns=' not in svg[:200]:
        svg = svg.replace("<svg", '<svg xmlns="http://www.w3.org/2000/svg"', 1)
    return svg.replace("</svg>", legend + "</svg>")
