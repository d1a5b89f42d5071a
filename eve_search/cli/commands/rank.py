"""``eve-search rank adult``: how far EvE's ranking of configurations agrees with a reference trainer's
(progress on stderr, tables on stdout); the study is :mod:`eve_search.experiments.ranking`."""

from __future__ import annotations

import argparse
from pathlib import Path

import eve_search.cli.args as types
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
from eve_search.cli.commands.sweep import add_sweep_arguments

__all__ = ["configure_parser", "run"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``adult`` sub-command (and its options) to the ``rank`` parser.

    Args:
        parser: the command's ``argparse`` parser (the ``adult`` sub-command is added to it).

    Example:
        >>> parser = argparse.ArgumentParser(prog="eve-search rank")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["adult", "--seeds", "0-2", "--space", "hp"])
        >>> args.dataset, args.seeds, args.space, args.against
        ('adult', [0, 1, 2], ['hp'], ['adam'])
    """
    datasets = parser.add_subparsers(dest="dataset", required=True, parser_class=type(parser))
    adult = datasets.add_parser(
        "adult", help="Kendall tau-b agreement of configuration rankings on UCI Adult (or --task TASK)",
        description="Compare how EvE and a reference trainer rank the same configurations: Kendall's tau-b "
                    "at every rung (paired by training seed, mean +- std over seeds, bootstrap intervals), the "
                    "paper's four reference comparisons, and each rung against the reference's final SHA "
                    "ordering. Sweeps already in the results store are reused; missing ones are trained, "
                    "resumably.")
    adult.add_argument("--space", type=types.space_list, default=None, metavar="SPACES",
                       help="comma-separated search spaces (default: the task's, for Adult hp,arch)")
    adult.add_argument("--seeds", type=types.seed_list, default=list(range(5)), metavar="SEEDS",
                       help="training seeds, e.g. 0-4 (default) or 0,1,2")
    adult.add_argument("--against", type=types.optimizer_list, default=["adam"], metavar="NAME",
                       help="the reference trainer (default: adam)")
    adult.add_argument("--json", type=Path, metavar="PATH", help="write every agreement as JSON")
    adult.add_argument("--task", default="adult", type=types.name("a registered task"), metavar="TASK",
                       help="rank on another registered task (default: adult)")
    add_sweep_arguments(adult)


@reported
def run(args: argparse.Namespace) -> int:
    """``eve-search rank adult``: check every input and the store, train the sweeps the store lacks (EvE,
    the reference and AdamW, every space and seed), then write ``--json`` and print the agreement tables.

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (trains three optimizers on every space and seed: not run as a doctest):
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["adult", "--seeds", "0-1", "--configs", "6", "--quiet"]))  # doctest: +SKIP
        0
    """
    import time

    from eve_search.cli._report import SweepProgress, print_rank_tables
    from eve_search.engine._stores import safe_url
    from eve_search.engine.sha import DEFAULT_RUNGS, PROMOTED_FRACTION
    from eve_search.experiments.ranking import gather, study

    if len(args.against) != 1 or args.against[0] == "eve":
        raise UsageError("eve-search rank adult: argument --against: expected one reference optimizer other than "
                         f"eve (got {','.join(args.against)})")
    if len(args.seeds) < 2:
        raise UsageError(f"eve-search rank adult: argument --seeds: {args.seeds} (the reference-vs-itself comparison "
                         "pairs different training seeds, so give at least 2)")
    check_frozen_ratio(args, "rank adult")
    against = args.against[0]
    spaces = task_spaces(args, registered_task(args, "rank adult"), "rank adult")
    check_output_path(args.json, "--json", "rank adult")
    storage = storage_url(args)
    use_fast_store_writes()
    started = time.perf_counter()
    settings = {"task": args.task, "configs": args.configs, "rungs": args.rungs or DEFAULT_RUNGS,
                "fraction": args.fraction or PROMOTED_FRACTION, "cost_mode": args.cost_mode,
                "backward_ratio": args.backward_ratio}
    optimizers = sorted({"eve", against, "adamw"})
    reports, trained = {}, 0
    for space in spaces:
        sweeps = gather(space, optimizers, args.seeds, storage=storage, data_dir=args.data_dir,
                        checkpoint_dir=args.workdir / "checkpoints", settings=settings,
                        progress=lambda sweep: SweepProgress(sweep, enabled=not args.quiet))
        trained += sum(r.trained for by_seed in sweeps.values() for r in by_seed.values())
        reports[space] = study(sweeps, args.seeds, against)
    elapsed = time.perf_counter() - started
    document = {"task": args.task, "seeds": args.seeds, "against": against, "storage": safe_url(storage),
                "wall_seconds": elapsed, "trained_trial_rungs": trained, "spaces": reports}
    if args.json:  # written first, as the sweep's
        write_json(args.json, "rank", document)
    if not args.quiet:
        print_rank_tables(document)
    return 0
