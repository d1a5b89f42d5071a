"""``eve-search sweep`` (and ``eve-search adult``, the same search on UCI Adult): synchronous successive
halving on a registered task, from the command line (progress on stderr, table on stdout).

The arguments every sweep takes (:func:`add_sweep_arguments`) are shared with ``eve-search rank``; the
search itself is :mod:`eve_search.engine.sweep`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import eve_search.cli.args as types
from eve_search.cli._common import (
    check_frozen_ratio,
    check_output_path,
    registered_task,
    storage_url,
    use_fast_store_writes,
    write_json,
)
from eve_search.cli._plugins import reported
from eve_search.cli.args import UsageError

__all__ = ["add_run_arguments", "add_sweep_arguments", "configure_parser", "run"]

_processes = types.bounded_int(1, types.MAX_CONFIGS, "one worker per configuration at most, and --configs is "
                               f"at most {types.MAX_CONFIGS:,}")


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of every command that trains sweeps (``adult``, ``sweep``, ``rank adult``): the
    store, ``--resume``, the data, the cost rule, the configurations, the rungs, ``--plugin``, ``--quiet``.

    Args:
        parser: the command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> parser = argparse.ArgumentParser(prog="eve-search sweep")
        >>> add_sweep_arguments(parser)
        >>> args = parser.parse_args(["--configs", "12", "--rungs", "100,300", "--fraction", "0.5"])
        >>> args.configs, args.rungs, args.fraction, args.resume
        (12, (100, 300), 0.5, False)
    """
    types.add_store_options(parser, checkpoints=True)
    parser.add_argument("--resume", action="store_true", help="continue sweeps already in the store (a sweep "
                        "that finished is reported without training)")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="another copy of the task's data (UCI "
                        "Adult: adult.data[.gz] and adult.test[.gz]); default: the task's own (Adult: the bundled "
                        "copy)")
    types.add_cost_mode_option(parser)
    parser.add_argument("--backward-ratio", type=types.backward_ratio, metavar="R", help="pin the calibrated "
                        "backward/forward ratio instead of measuring it (reproducible across machines; at most "
                        f"{types.MAX_RATIO:g})")
    parser.add_argument("--configs", type=types.configs, default=48, metavar="N",
                        help=f"configurations sampled (configuration seed 0; default 48, at most "
                             f"{types.MAX_CONFIGS:,})")
    parser.add_argument("--rungs", type=types.rung_list, default=None, metavar="B1,B2,...",
                        help="cumulative rung budgets, whole evaluation units (default 100,300,900,2700,3000; "
                             f"each at most {types.MAX_BUDGET:.0e}, at most {types.MAX_RUNGS} rungs)")
    parser.add_argument("--fraction", type=types.fraction, default=None, metavar="F",
                        help="share of each rung promoted to the next, in (0, 1] (default 1/3)")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (it may register tasks, spaces or optimizers): a path to a .py "
                             "file, loaded by its path, or a module name, looked up among the installed packages "
                             "and then in the current directory; repeatable")
    parser.add_argument("--quiet", action="store_true", help="no progress display and no table")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of one search (``adult``, ``sweep``): :func:`add_sweep_arguments`, then the
    optimizers, the training seed, ``--json`` and who drives the trials (the backend, its workers).

    Args:
        parser: the command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> parser = argparse.ArgumentParser(prog="eve-search sweep")
        >>> add_run_arguments(parser)
        >>> args = parser.parse_args(["--optimizer", "eve,adam", "--jobs", "2"])
        >>> args.optimizer, args.jobs, args.backend, args.seed
        (['eve', 'adam'], 2, 'local', 0)
    """
    add_sweep_arguments(parser)
    parser.add_argument("--optimizer", type=types.optimizer_list, default=["eve"], metavar="NAMES",
                        help="one or several comma-separated optimizers (default: eve), e.g. eve,adam")
    parser.add_argument("--seed", type=types.seed, default=0, help="training seed (default 0)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--backend", choices=("local", "ray", "optuna"), default="local",
                        help="who drives the trials: this process (default), Ray Tune (a local Ray instance, "
                             "or the cluster at --address) or Optuna worker processes on the store (--workers)")
    parser.add_argument("--address", metavar="ADDR", help="with --backend ray: an existing Ray cluster "
                        "(e.g. auto, or HOST:6379); default: start a local Ray instance")
    parser.add_argument("--workers", type=_processes, default=None, metavar="N",
                        help="with --backend optuna: worker processes on the study (default 1; at most --configs "
                             f"and {types.JOBS_PER_CPU} x the CPUs unless --force-jobs)")
    parser.add_argument("--jobs", type=_processes, default=None, metavar="N",
                        help="with --backend local: train each rung's trials on N worker processes, one thread "
                             "each (with two CPUs per worker, each evaluates a trial on a second thread while it "
                             "trains the next; same results for every N, bit for bit; not always bit-identical to "
                             "the default single process, which uses PyTorch's default threads); at most --configs and "
                             f"{types.JOBS_PER_CPU} x the CPUs unless --force-jobs")
    parser.add_argument("--force-jobs", action="store_true",
                        help=f"allow --jobs/--workers above {types.JOBS_PER_CPU} x the CPUs this process may use "
                             f"(up to {types.MAX_FORCED_JOBS:,})")
    parser.add_argument("--cohort-size", type=types.bounded_int(1, types.MAX_CONFIGS, "configurations"),
                        default=None, metavar="N",
                        help="run the configurations as a stream of cohorts of N (in sampling order), each decided "
                             "as one synchronous sweep of its configurations; a worker that would wait at a rung "
                             "barrier takes a promoted trial of an older cohort or a first-rung trial of the next "
                             "one. The results are the same for any --jobs and any timing (default: one cohort of "
                             "all, synchronous successive halving over every configuration)")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search sweep``: ``--task``, ``--space`` and :func:`add_run_arguments`.

    Args:
        parser: the command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> parser = argparse.ArgumentParser(prog="eve-search sweep")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--task", "adult", "--configs", "6"])
        >>> args.task, args.space, args.configs
        ('adult', None, 6)
    """
    parser.add_argument("--task", required=True, type=types.name("a registered task"), metavar="TASK",
                        help="a registered task (adult, or one a "
                        "--plugin module registers)")
    parser.add_argument("--space", type=types.name("a search space"), metavar="SPACE",
                        help="search space (default: the task's first)")
    add_run_arguments(parser)


def _task_and_space(args: argparse.Namespace, command: str) -> tuple[str, str]:
    """The task (after the --plugin imports) and the search space: ``--space``, else the task's first."""
    from eve_search.tasks.spaces import space_names

    task = registered_task(args, command)
    name = getattr(args, "task", None) or task.name  # adult has no --task
    space = args.space if args.space is not None else (task.spaces[0] if task.spaces else None)
    if space is None:
        raise UsageError(f"eve-search {command}: argument --space: task {name!r} names no default space "
                         f"(expected one of {', '.join(space_names())})")
    if space not in space_names():
        raise UsageError(f"eve-search {command}: argument --space: invalid choice {space!r} (expected one of "
                         f"{', '.join(space_names())})")
    return name, space


def _check_backend(args: argparse.Namespace, command: str) -> None:
    """The options that only one backend takes, and --jobs and --workers: at most one per configuration and
    4 x the CPUs (unless --force-jobs)."""
    if args.address is not None and args.backend != "ray":
        raise UsageError(f"eve-search {command}: argument --address: only --backend ray takes a cluster address "
                         f"(got --backend {args.backend})")
    if args.jobs is not None and args.backend != "local":
        raise UsageError(f"eve-search {command}: argument --jobs: only --backend local runs trials on --jobs worker "
                         f"processes (got --backend {args.backend})")
    if args.workers is not None and args.backend != "optuna":
        raise UsageError(f"eve-search {command}: argument --workers: only --backend optuna runs worker processes "
                         f"(got --backend {args.backend})")
    for argument, value in (("--jobs", args.jobs), ("--workers", args.workers)):
        problem = types.check_processes(value, argument, configs=args.configs, force=args.force_jobs)
        if problem is not None:
            raise UsageError(f"eve-search {command}: {problem}")


@reported
def run(args: argparse.Namespace) -> int:
    """``eve-search sweep`` and ``eve-search adult``: check every input, the store and every optimizer's
    settings, then run one sweep per optimizer (on the chosen backend), write ``--json`` and print the table.

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (trains every configuration: not run as a doctest):
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--task", "adult", "--configs", "6", "--quiet"]))  # doctest: +SKIP
        0
    """
    from eve_search.cli._report import SweepProgress, print_summary, summary_json
    from eve_search.engine.sha import DEFAULT_RUNGS, PROMOTED_FRACTION
    from eve_search.engine.sweep import SweepSettings, prepare_sweep

    command = getattr(args, "command", "sweep")  # ``adult`` runs this too
    task, space = _task_and_space(args, command)
    check_frozen_ratio(args, command)
    _check_backend(args, command)
    check_output_path(args.json, "--json", command)
    use_fast_store_writes()
    storage = storage_url(args)
    # Everything that can fail on bad input (data, store, settings) is checked for every optimizer
    # before the first one trains.
    sweeps = []
    for optimizer in args.optimizer:
        settings = SweepSettings(task=task, space=space, optimizer=optimizer, seed=args.seed, configs=args.configs,
                                 rungs=args.rungs or DEFAULT_RUNGS, fraction=args.fraction or PROMOTED_FRACTION,
                                 cost_mode=args.cost_mode, backward_ratio=args.backward_ratio,
                                 cohort_size=args.cohort_size)
        sweeps.append(prepare_sweep(settings, storage=storage, checkpoint_dir=args.workdir / "checkpoints",
                                    resume=args.resume, data_dir=args.data_dir))
    results = []
    for sweep in sweeps:
        with SweepProgress(sweep.settings, enabled=not args.quiet) as progress:
            if args.backend == "ray":
                from eve_search.integrations.ray import run_sweep_on_ray

                results.append(run_sweep_on_ray(sweep, address=args.address, progress=progress))
            elif args.backend == "optuna":
                from eve_search.integrations.optuna import run_sweep_on_optuna

                results.append(run_sweep_on_optuna(sweep, workers=args.workers or 1, progress=progress))
            else:
                results.append(sweep.run(progress, jobs=args.jobs))
    if args.json:  # written first: a closed standard output (`| head`) or one that cannot print loses nothing
        write_json(args.json, "sweep", summary_json(results, storage))
    if not args.quiet:
        print_summary(results, storage)
    return 0
