"""``eve-search audit adult``: the proxy audit from the command line (progress on stderr, table on stdout)."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import eve_search.cli.args as types
from eve_search.analysis.audit import DEFAULT_BUDGETS, KEEP_RATE, REGRET_THRESHOLD
from eve_search.cli._common import (
    check_frozen_ratio,
    check_output_path,
    registered_task,
    storage_url,
    task_spaces,
    use_fast_store_writes,
    write_json,
)
from eve_search.cli._plugins import reported
from eve_search.cli.args import UsageError
from eve_search.experiments.audit._core import audit_report, prepare_audit, run_audit

__all__ = ["configure_parser", "run"]

DESCRIPTION = (
    "If you stop at budget b with trainer P, how likely are you to keep the configuration full training would "
    "have picked, and what did that cost in wall time? Every configuration of the space is trained by every "
    "trainer along one trajectory per training seed, recording each budget of the grid; the truth is the "
    "reference trainer (--truth) at the last budget. Per proxy and budget: Kendall's tau-b against the truth, "
    "the regret of the proxy's top-1, how often the true best is in the proxy's top third (what successive "
    "halving keeps) and the wall seconds spent, with bootstrap intervals over configurations; then the "
    "cheapest budget at which each proxy is trustworthy. Runs are kept in the results store: a killed audit "
    "continues, a finished one is reported without training.")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``adult`` sub-command (and its options) to the ``audit`` parser.

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search audit")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["adult", "--configs", "12"])
        >>> args.dataset, args.configs, args.truth, args.budgets
        ('adult', 12, ['adam'], (30, 100, 300, 900, 2700, 3000))
    """
    datasets = parser.add_subparsers(dest="dataset", required=True, parser_class=type(parser))
    adult = datasets.add_parser(
        "adult", help="how much compute a trustworthy ranking costs, per trainer, on UCI Adult (or --task TASK)",
        description=DESCRIPTION)
    adult.add_argument("--space", type=types.space_list, default=None, metavar="SPACES",
                       help="comma-separated search spaces (default: the task's, for Adult hp,arch)")
    adult.add_argument("--seeds", type=types.seed_list, default=list(range(5)), metavar="SEEDS",
                       help="training seeds, e.g. 0-4 (default) or 0,1,2")
    adult.add_argument("--proxies", type=types.optimizer_list, default=["eve", "adam", "sgd_momentum"], metavar="NAMES",
                       help="the cheap trainers audited (default: eve,adam,sgd_momentum)")
    adult.add_argument("--truth", type=types.optimizer_list, default=["adam"], metavar="NAME",
                       help="the reference trainer whose score at the last budget is the truth (default: adam)")
    adult.add_argument("--budgets", type=types.rung_list, default=DEFAULT_BUDGETS, metavar="B1,B2,...",
                       help="the grid of budgets, whole evaluation units; the last is full training "
                            f"(default {','.join(map(str, DEFAULT_BUDGETS))})")
    adult.add_argument("--task", default="adult", type=types.name("a registered task"), metavar="TASK",
                       help="audit another registered task (default: adult)")
    adult.add_argument("--fraction", type=types.fraction, default=None, metavar="F",
                       help="the top share a proxy must keep the true best in (default 1/3, what successive "
                            "halving promotes)")
    adult.add_argument("--keep-rate", type=types.fraction, default=KEEP_RATE, metavar="R",
                       help=f"share of seeds in which the true best must be kept (default {KEEP_RATE:g}: 4 of 5)")
    adult.add_argument("--regret-threshold", type=types.bounded_float(0.0, math.inf), default=REGRET_THRESHOLD,
                       metavar="X",
                       help=f"mean top-1 regret called small, in points for accuracy (default {REGRET_THRESHOLD:g})")
    adult.add_argument("--configs", type=types.configs, default=48, metavar="N",
                       help=f"configurations sampled (configuration seed 0; default 48, at most {types.MAX_CONFIGS:,})")
    types.add_store_options(adult, checkpoints=True)
    adult.add_argument("--data-dir", type=Path, metavar="DIR", help="another copy of the task's data")
    types.add_cost_mode_option(adult)
    adult.add_argument("--backward-ratio", type=types.backward_ratio, metavar="R", help="pin the calibrated "
                       "backward/forward ratio instead of measuring it per model shape")
    adult.add_argument("--resamples", type=types.resamples, default=1000, metavar="N",
                       help=f"bootstrap resamples (default 1000, at most {types.MAX_RESAMPLES:,})")
    adult.add_argument("--json", type=Path, metavar="PATH", help="write every measure as JSON")
    adult.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                       help="import MODULE first (it may register tasks, spaces or optimizers): a path to a .py "
                            "file, loaded by its path, or a module name, looked up among the installed packages "
                            "and then in the current directory; repeatable")
    adult.add_argument("--quiet", action="store_true", help="no progress display and no table")


class _Progress:
    """A live line on stderr: space, seed, trainer, configuration, runs done of all, elapsed."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console

        self.enabled = enabled
        self._console = Console(stderr=True)
        self._live = None
        self._started = time.perf_counter()

    def __enter__(self) -> _Progress:  # noqa: PYI034 a final class
        if self.enabled:
            from rich.live import Live
            from rich.text import Text

            self._live = Live(Text("audit: preparing"), console=self._console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def phase(self, text: str) -> None:
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text(f"audit: {text} | {time.perf_counter() - self._started:.0f}s"))

    def __call__(self, space: str, seed: int, trainer: str, index: int, done: int, total: int) -> None:
        self.phase(f"{space}, seed {seed}, {trainer} config {index} | {done}/{total} runs")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _print_tables(document: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 140)
    for space, report in document["spaces"].items():
        seeds = report["seeds"]
        if not seeds:
            console.print(f"{document['task']}/{space}: no seed finished yet (run the command again to continue)")
            continue
        unit = report["regret_unit"]
        table = Table(title=f"Proxy audit, {document['task']}/{space}: truth = {report['truth']} at "
                            f"{report['truth_budget']} units, {report['configs']} configurations, seeds "
                            f"{','.join(map(str, seeds))}")
        for column, justify in (("proxy", "left"), ("budget", "right"), ("wall s (all configs)", "right"),
                                ("tau-b [95%]", "right"), (f"top-1 regret, {unit} [95%]", "right"),
                                ("true best in top third", "right")):
            table.add_column(column, justify=justify)
        for proxy, entry in report["proxies"].items():
            for budget, row in entry["budgets"].items():
                tau, regret, keep = row["tau"], row["regret"], row["keep"]
                table.add_row(proxy, budget, f"{row['wall_seconds']['mean']:.1f}",
                              f"{_fmt(tau['mean'])} [{_fmt(tau['interval'][0])}, {_fmt(tau['interval'][1])}]",
                              f"{_fmt(regret['mean'], 2)} [{_fmt(regret['interval'][0], 2)}, "
                              f"{_fmt(regret['interval'][1], 2)}]",
                              f"{keep['kept']}/{keep['seeds']}")
            table.add_section()
        floor = report.get("noise_floor")
        if floor:
            table.add_row(f"{report['truth']}, next seed", str(report["truth_budget"]), "",
                          f"{_fmt(floor['tau']['mean'])} [{_fmt(floor['tau']['interval'][0])}, "
                          f"{_fmt(floor['tau']['interval'][1])}]",
                          f"{_fmt(floor['regret']['mean'], 2)} [{_fmt(floor['regret']['interval'][0], 2)}, "
                          f"{_fmt(floor['regret']['interval'][1], 2)}]",
                          f"{floor['keep']['kept']}/{floor['keep']['seeds']}")
        console.print(table)
        for proxy, entry in report["proxies"].items():
            v = entry["verdict"]

            def said(found: dict[str, Any] | None) -> str:
                return "no budget of the grid" if found is None else \
                    f"{found['budget']} units ({found['wall_seconds']:.1f} s)"

            console.print(f"{proxy}: keeps the true best in its top third in >= {v['keep_rate']:.0%} of seeds from "
                          f"{said(v['keeps_best'])}; top-1 regret < {v['regret_threshold']:g} {unit} from "
                          f"{said(v['regret_under'])}; both from {said(v['both'])}. Audit time of its runs: "
                          f"{entry['audit_wall_seconds']['total']:.0f} s")
        if report["incomplete_seeds"]:
            console.print(f"seeds not finished yet (left out): {','.join(map(str, report['incomplete_seeds']))}")
    console.print(f"audit wall time of this command: {document['wall_seconds']:.1f} s; runs trained now: "
                  f"{document['trained_runs']}")


@reported
def run(args: argparse.Namespace) -> int:
    """Check every input and the store, train what is missing, print and write the report.

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (trains every configuration with every trainer: not run as a doctest):
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["adult", "--configs", "12", "--seeds", "0-1"]))  # doctest: +SKIP
        0
    """
    from eve_search.engine._stores import safe_url

    command = "audit adult"
    if len(args.truth) != 1:
        raise UsageError(f"eve-search {command}: argument --truth: expected one reference trainer (got "
                         f"{','.join(args.truth)})")
    check_frozen_ratio(args, command)
    if len(args.budgets) < 2:
        raise UsageError(f"eve-search {command}: argument --budgets: {','.join(map(str, args.budgets))} (expected "
                         "at least one cheaper budget before the full one)")
    task = registered_task(args, command)
    spaces = task_spaces(args, task, command)
    check_output_path(args.json, "--json", command)
    storage = storage_url(args)
    truth = args.truth[0]
    trainers = list(dict.fromkeys([*args.proxies, truth]))
    started = time.perf_counter()
    # Every store and setting is checked for every space before the first run trains.
    use_fast_store_writes()
    prepared = {space: prepare_audit(task, space, trainers, args.seeds, storage=storage,
                                     checkpoint_dir=args.workdir / "checkpoints", budgets=args.budgets,
                                     configs=args.configs, cost_mode=args.cost_mode,
                                     backward_ratio=args.backward_ratio, data_dir=args.data_dir, truth=truth)
                for space in spaces}
    trained = 0
    with _Progress(enabled=not args.quiet) as progress:
        for space in spaces:
            trained += run_audit(prepared[space], progress)
        progress.phase("bootstrapping")
        reports = {space: audit_report(prepared[space], args.proxies, truth, fraction=args.fraction or 1 / 3,
                                       keep_rate=args.keep_rate, regret_threshold=args.regret_threshold,
                                       resamples=args.resamples)
                   for space in spaces}
    document = {"kind": "audit", "task": args.task, "spaces": reports, "proxies": args.proxies, "truth": truth,
                "seeds": args.seeds, "budgets": list(args.budgets), "storage": safe_url(storage),
                "wall_seconds": time.perf_counter() - started, "trained_runs": trained}
    if args.json:  # written first: a closed standard output (`| head`) loses nothing
        write_json(args.json, "audit", document)
    if not args.quiet:
        _print_tables(document)
    return 0
