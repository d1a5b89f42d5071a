"""The ``eve-search`` command line.

Bad input gets one line on stderr naming the argument, the value and what was expected, and exit
code 2; nothing already computed is lost (sweeps resume from their store with ``--resume``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

# The argument types and limits live in one place (eve_search.cli.args). The names the former module
# eve_search/cli.py had are read from their new homes by eve_search.cli's __getattr__ (deprecated).
import eve_search.cli.args as _argtypes
from eve_search.cli.args import fraction as _fraction
from eve_search.cli.args import optimizer_list as _optimizer_list
from eve_search.cli.args import rung_list as _rung_list
from eve_search.cli.args import seed as _seed
from eve_search.cli.args import seed_list
from eve_search.cli.args import space_list as _space_list
from eve_search.cli._common import (
    _command_label,
    _import_plugins,
    _storage_url,
    check_output_path,
    check_outputs,
    check_paths,
    write_json,
)
from eve_search.cli._plugins import reported as _reported_plugin_errors
from eve_search.cli._signals import Terminated, exit_code, signal_name, terminations
from eve_search.cli.args import UsageError, _Parser

__all__ = ["main"]


_processes = _argtypes.bounded_int(1, _argtypes.MAX_CONFIGS, "one worker per configuration at most, and --configs is "
                                   f"at most {_argtypes.MAX_CONFIGS:,}")



def _add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    _argtypes.add_store_options(parser, checkpoints=True)
    parser.add_argument("--resume", action="store_true", help="continue sweeps already in the store (a sweep "
                        "that finished is reported without training)")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="another copy of the task's data (UCI "
                        "Adult: adult.data[.gz] and adult.test[.gz]); default: the task's own (Adult: the bundled "
                        "copy)")
    _argtypes.add_cost_mode_option(parser)
    parser.add_argument("--backward-ratio", type=_argtypes.backward_ratio, metavar="R", help="pin the calibrated "
                        "backward/forward ratio instead of measuring it (reproducible across machines; at most "
                        f"{_argtypes.MAX_RATIO:g})")
    parser.add_argument("--configs", type=_argtypes.configs, default=48, metavar="N",
                        help=f"configurations sampled (configuration seed 0; default 48, at most "
                             f"{_argtypes.MAX_CONFIGS:,})")
    parser.add_argument("--rungs", type=_rung_list, default=None, metavar="B1,B2,...",
                        help="cumulative rung budgets, whole evaluation units (default 100,300,900,2700,3000; "
                             f"each at most {_argtypes.MAX_BUDGET:.0e}, at most {_argtypes.MAX_RUNGS} rungs)")
    parser.add_argument("--fraction", type=_fraction, default=None, metavar="F",
                        help="share of each rung promoted to the next, in (0, 1] (default 1/3)")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (it may register tasks, spaces or optimizers): a path to a .py "
                             "file, loaded by its path, or a module name, looked up among the installed packages "
                             "and then in the current directory; repeatable")
    parser.add_argument("--quiet", action="store_true", help="no progress display and no table")


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    _add_sweep_arguments(parser)
    parser.add_argument("--optimizer", type=_optimizer_list, default=["eve"], metavar="NAMES",
                        help="one or several comma-separated optimizers (default: eve), e.g. eve,adam")
    parser.add_argument("--seed", type=_seed, default=0, help="training seed (default 0)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--backend", choices=("local", "ray", "optuna"), default="local",
                        help="who drives the trials: this process (default), Ray Tune (a local Ray instance, "
                             "or the cluster at --address) or Optuna worker processes on the store (--workers)")
    parser.add_argument("--address", metavar="ADDR", help="with --backend ray: an existing Ray cluster "
                        "(e.g. auto, or HOST:6379); default: start a local Ray instance")
    parser.add_argument("--workers", type=_processes, default=None, metavar="N",
                        help="with --backend optuna: worker processes on the study (default 1; at most --configs "
                             f"and {_argtypes.JOBS_PER_CPU} x the CPUs unless --force-jobs)")
    parser.add_argument("--jobs", type=_processes, default=None, metavar="N",
                        help="with --backend local: train each rung's trials on N worker processes, one thread "
                             "each (with two CPUs per worker, each evaluates a trial on a second thread while it "
                             "trains the next; same results for every N, bit for bit; not always bit-identical to "
                             "the default single process, which uses PyTorch's default threads); at most --configs and "
                             f"{_argtypes.JOBS_PER_CPU} x the CPUs unless --force-jobs")
    parser.add_argument("--force-jobs", action="store_true",
                        help=f"allow --jobs/--workers above {_argtypes.JOBS_PER_CPU} x the CPUs this process may use "
                             f"(up to {_argtypes.MAX_FORCED_JOBS:,})")
    parser.add_argument("--cohort-size", type=_argtypes.bounded_int(1, _argtypes.MAX_CONFIGS, "configurations"),
                        default=None, metavar="N",
                        help="run the configurations as a stream of cohorts of N (in sampling order), each decided "
                             "as one synchronous sweep of its configurations; a worker that would wait at a rung "
                             "barrier takes a promoted trial of an older cohort or a first-rung trial of the next "
                             "one. The results are the same for any --jobs and any timing (default: one cohort of "
                             "all, synchronous successive halving over every configuration)")


def _configure_adult(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--space", required=True, type=_argtypes.name("a search space"), metavar="SPACE",
                        help=f"search space ({_argtypes.SPACE_NAMES}, or one a --plugin registers)")
    _add_run_arguments(parser)


def _configure_sweep(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, type=_argtypes.name("a registered task"), metavar="TASK",
                        help="a registered task (adult, or one a "
                        "--plugin module registers)")
    parser.add_argument("--space", type=_argtypes.name("a search space"), metavar="SPACE",
                        help="search space (default: the task's first)")
    _add_run_arguments(parser)


def _configure_rank(parser: argparse.ArgumentParser) -> None:
    """Add the ``adult`` sub-command (and its options) to the ``rank`` parser."""
    datasets = parser.add_subparsers(dest="dataset", required=True, parser_class=_Parser)
    adult = datasets.add_parser(
        "adult", help="Kendall tau-b agreement of configuration rankings on UCI Adult (or --task TASK)",
        description="Compare how EvE and a reference trainer rank the same configurations: Kendall's tau-b "
                    "at every rung (paired by training seed, mean +- std over seeds, bootstrap intervals), the "
                    "paper's four reference comparisons, and each rung against the reference's final SHA "
                    "ordering. Sweeps already in the results store are reused; missing ones are trained, "
                    "resumably.")
    adult.add_argument("--space", type=_space_list, default=None, metavar="SPACES",
                       help="comma-separated search spaces (default: the task's, for Adult hp,arch)")
    adult.add_argument("--seeds", type=seed_list, default=list(range(5)), metavar="SEEDS",
                       help="training seeds, e.g. 0-4 (default) or 0,1,2")
    adult.add_argument("--against", type=_optimizer_list, default=["adam"], metavar="NAME",
                       help="the reference trainer (default: adam)")
    adult.add_argument("--json", type=Path, metavar="PATH", help="write every agreement as JSON")
    adult.add_argument("--task", default="adult", type=_argtypes.name("a registered task"), metavar="TASK",
                       help="rank on another registered task (default: adult)")
    _add_sweep_arguments(adult)


def _configure_bench_throughput(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=_argtypes.seconds, default=2.0,
                        help=f"wall seconds per loop per round (at most {_argtypes.MAX_SECONDS:g})")
    parser.add_argument("--rounds", type=_argtypes.rounds, default=5,
                        help=f"rounds (medians are reported; at most {_argtypes.MAX_ROUNDS})")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")


class Command(NamedTuple):
    """One row of :data:`COMMANDS`: where the command's code is, and what ``--help`` says about it."""

    run: str  # "module:function" that runs the parsed command and returns the exit code
    configure: str  # "module:function" that adds the command's arguments to its (sub)parser
    help: str  # the command's line in its parent's --help
    description: str | None = None  # the top of the command's own --help (None: set by configure, or none)


# The command table, in --help order. A two-word name is a kind of a command group (``bench``, see
# GROUPS). Every function is named as "module:function" and imported when it is needed: the
# configure functions when the parser is built, the run function only when its command runs
# (``eve-search adult --help`` runs none and loads no optional dependency: Ray, Optuna, transformers).
COMMANDS: dict[str, Command] = {
    "adult": Command(
        "eve_search.cli._main:_sweep", "eve_search.cli._main:_configure_adult",
        "rank configurations on UCI Adult with synchronous successive halving",
        "Sample configurations of a search space once, train them on UCI Adult inside synchronous successive "
        "halving (top third promoted at each rung, trials resumed, never restarted) and report the best. Several "
        "optimizers run side by side on the same configurations, initial weights and batches."),
    "sweep": Command(
        "eve_search.cli._main:_sweep", "eve_search.cli._main:_configure_sweep",
        "the same search on any registered task (e.g. one a --plugin module registers)",
        "Synchronous successive halving on a registered task: sample configurations of a search space, train "
        "them resumably under the evaluation-cost budget, report the best. `eve-search adult` is `eve-search "
        "sweep --task adult`."),
    "rank": Command(
        "eve_search.cli._main:_rank", "eve_search.cli._main:_configure_rank",
        "ranking agreement between EvE and a reference trainer"),
    "bench throughput": Command(
        "eve_search.cli._main:_bench_throughput", "eve_search.cli._main:_configure_bench_throughput",
        "charged units per second of EvE and Adam against the compute floor (Adult-sized MLP)",
        "Charged evaluation units per second of EvE and Adam on the Adult-sized MLP (107-256-256-2, batch 256, "
        "random data), against a tight forward-only loop (the compute floor) and a forward+backward loop, "
        "measured side by side in rounds."),
    "bench synthetic": Command(
        "eve_search.cli.commands.bench_synthetic:run", "eve_search.cli.commands.bench_synthetic:configure_parser",
        "EvE vs Adam on the paper's seven scalable test functions (win/tie/loss per function)",
        "EvE against Adam (lr 0.1) on Ackley, Griewank, Rastrigin, Rosenbrock, Schwefel, Sphere and Zakharov at "
        "fixed evaluation-cost budget (paper, Section 'Synthetic Scalable Benchmarks'): runs are recorded in the "
        "results store as they finish (a new command skips them), then every cell gets two one-sided Wilcoxon "
        "signed-rank tests paired by seed, Holm-Bonferroni corrected over all of them, and the win/tie/loss "
        "counts are printed beside the paper's."),
    "bench sweep": Command(
        "eve_search.cli.commands.bench_sweep:run", "eve_search.cli.commands.bench_sweep:configure_parser",
        "a whole sweep's process time against its training time, EvE vs Adam, beside a plain loop"),
    "bench scale": Command(
        "eve_search.cli.commands.bench_scale:run", "eve_search.cli.commands.bench_scale:configure_parser",
        "wall time, worker utilisation and the pick's quality at 1 to 256 simulated workers, over a recorded pool",
        "Replay a recorded pool (each configuration's score at every rung budget and its training seconds) "
        "through the real scheduling core in simulated time, at 1 to 256 workers: synchronous SHA over one "
        "cohort, the stream of cohorts (with and without speculation), and ASHA and Hyperband (Optuna's "
        "pruners, Ray Tune's ASHAScheduler) at the same budget in charged units."),
    "bench memory": Command(
        "eve_search.cli.commands.bench_memory:run", "eve_search.cli.commands.bench_memory:configure_parser",
        "peak memory of EvE and Adam over 200 iterations, each in a fresh process"),
    "bench matmul": Command(
        "eve_search.cli.commands.bench_matmul:run", "eve_search.cli.commands.bench_matmul:configure_parser",
        "Linear's training step on PyTorch's default matrix library and on oneDNN"),
    "dashboard": Command(
        "eve_search.cli.commands.dashboard:run", "eve_search.cli.commands.dashboard:configure_parser",
        "draw a results store as one HTML page of charts"),
    "mnist": Command(
        "eve_search.cli.commands.mnist:run", "eve_search.cli.commands.mnist:configure_parser",
        "the paper's MLP/MNIST protocol on MNIST-format data (default: Fashion-MNIST)"),
    "lora": Command(
        "eve_search.cli.commands.lora:run", "eve_search.cli.commands.lora:configure_parser",
        "the paper's LoRA protocol: adapters on a frozen causal LM (default: a small built-in Qwen2)"),
    "audit": Command(
        "eve_search.cli.commands.audit:run", "eve_search.cli.commands.audit:configure_parser",
        "proxy audit: what a trustworthy ranking costs per trainer (tau, top-1 regret, wall time)"),
}

# The command groups: a group's kinds are the COMMANDS named "<group> <kind>"; the kind chosen is
# the parsed argument named after the group (``args.bench``).
GROUPS: dict[str, str] = {"bench": "measure throughput"}


def _function(target: str) -> Callable[..., Any]:
    """The function a "module:function" entry of :data:`COMMANDS` names, imported now."""
    import importlib

    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


class _Commands(argparse._SubParsersAction):
    """Sub-parsers (the commands, or a group's kinds) that get their arguments only once argparse picks
    one: the picked command's ``configure`` function of :data:`COMMANDS` runs then, and no other's. So
    ``eve-search --help``, ``eve-search bench --help`` and a mistyped command import no command's module
    (several import PyTorch, seconds on a busy machine), and ``eve-search dashboard --help`` imports
    only the dashboard's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._configure: dict[str, str] = {}

    def add_command(self, name: str, configure: str | None, **kwargs: Any) -> _Parser:
        """Add sub-parser ``name``; ``configure`` ("module:function", or None: nothing to add) gives it
        its arguments when it is picked."""
        parser = self.add_parser(name, **kwargs)
        if configure is not None:
            self._configure[name] = configure
        return parser

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        name = values[0]
        configure = self._configure.pop(name, None)
        if configure is not None:
            _function(configure)(self._name_parser_map[name])
        super().__call__(parser, namespace, values, option_string)


def _build_parser() -> _Parser:
    """The ``eve-search`` parser: its commands' arguments are added when a command is picked (see
    :class:`_Commands`)."""
    parser = _Parser(prog="eve-search", description="Hyperparameter search with EvE as the inner-loop trainer.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, action=_Commands)
    kinds: dict[str, _Commands] = {}
    for key, command in COMMANDS.items():
        group, _, kind = key.rpartition(" ")
        if group and group not in kinds:  # the group's own parser, where its first kind is listed
            kinds[group] = commands.add_command(group, None, help=GROUPS[group]).add_subparsers(
                dest=group, required=True, parser_class=_Parser, action=_Commands)
        parent = kinds[group] if group else commands
        parent.add_command(kind, command.configure, help=command.help, description=command.description)
    return parser


def _bench_throughput(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from eve_search.benchmarks.throughput import LOOPS, throughput

    report = throughput(seconds=args.seconds, rounds=args.rounds)
    labels = {"floor": "compute floor (forward-only loop)", "passes": "forward+backward loop, no update",
              "eve": "EvE", "adam": "Adam (fused)"}
    table = Table(title=f"Charged units per second, Adult-sized MLP, batch 256 "
                        f"({report.rounds} rounds x {report.seconds_per_loop:g} s, {report.threads} threads)")
    table.add_column("loop")
    table.add_column("units/s", justify="right")
    table.add_column("floor / loop", justify="right")
    table.add_column("wall time in charged passes", justify="right")
    for name in LOOPS:
        table.add_row(labels[name], f"{report.units_per_second[name]:.0f}", f"{report.floor_ratio[name]:.2f}x",
                      f"{report.time_in_passes[name]:.0%}")
    console = Console(width=None if Console().is_terminal else 120)
    console.print(table)
    console.print(f"EvE / Adam units per second: {report.eve_over_adam:.2f}; EvE's fallback fired on "
                  f"{report.eve_fallback_rate:.0%} of its iterations")
    if args.json:
        write_json(args.json, "bench-throughput", report.as_dict())
    return 0


def _resolve_task_and_space(args: argparse.Namespace) -> tuple[str, str]:
    from eve_search.tasks.spaces import space_names
    from eve_search.tasks import get_task, task_names

    task_name = getattr(args, "task", None)
    task_name = "adult" if task_name is None else task_name  # '' is refused by the argument's type
    if task_name not in task_names():
        raise UsageError(f"eve-search {args.command}: argument --task: {task_name!r} is not a registered task "
                         f"(expected one of {', '.join(task_names())}, or register it in a --plugin module)")
    task = get_task(task_name)
    space = args.space if args.space is not None else (task.spaces[0] if task.spaces else None)
    if space is None:
        raise UsageError(f"eve-search {args.command}: argument --space: task {task_name!r} names no default space "
                         f"(expected one of {', '.join(space_names())})")
    if space not in space_names():
        raise UsageError(f"eve-search {args.command}: argument --space: invalid choice {space!r} (expected one of "
                         f"{', '.join(space_names())})")
    return task_name, space


def _check_processes(args: argparse.Namespace, command: str) -> None:
    """--jobs and --workers: at most one per configuration and 4 x the CPUs (unless --force-jobs)."""
    for argument, value in (("--jobs", args.jobs), ("--workers", args.workers)):
        problem = _argtypes.check_processes(value, argument, configs=args.configs, force=args.force_jobs)
        if problem is not None:
            raise UsageError(f"eve-search {command}: {problem}")


@_reported_plugin_errors
def _sweep(args: argparse.Namespace) -> int:
    from eve_search.cli._report import SweepProgress, print_summary, summary_json
    from eve_search.engine.sha import DEFAULT_RUNGS, PROMOTED_FRACTION
    from eve_search.engine.sweep import SweepSettings, prepare_sweep

    command = args.command
    _import_plugins(args)
    task, space = _resolve_task_and_space(args)
    if args.cost_mode == "measured" and args.backward_ratio is not None:
        raise UsageError(f"eve-search {command}: argument --backward-ratio: only the calibrated cost mode takes a "
                         "frozen ratio (got --cost-mode measured)")
    if args.address is not None and args.backend != "ray":
        raise UsageError(f"eve-search {command}: argument --address: only --backend ray takes a cluster address "
                         f"(got --backend {args.backend})")
    if args.jobs is not None and args.backend != "local":
        raise UsageError(f"eve-search {command}: argument --jobs: only --backend local runs trials on --jobs worker "
                         f"processes (got --backend {args.backend})")
    if args.workers is not None and args.backend != "optuna":
        raise UsageError(f"eve-search {command}: argument --workers: only --backend optuna runs worker processes "
                         f"(got --backend {args.backend})")
    _check_processes(args, command)
    check_output_path(args.json, "--json", command)
    storage = _storage_url(args)
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


@_reported_plugin_errors
def _rank(args: argparse.Namespace) -> int:
    import time

    from eve_search.engine._stores import safe_url
    from eve_search.experiments.ranking import gather, study
    from eve_search.cli._report import SweepProgress, print_rank_tables
    from eve_search.engine.sha import DEFAULT_RUNGS, PROMOTED_FRACTION
    from eve_search.tasks import get_task, task_names

    if len(args.against) != 1 or args.against[0] == "eve":
        raise UsageError("eve-search rank adult: argument --against: expected one reference optimizer other than "
                         f"eve (got {','.join(args.against)})")
    if len(args.seeds) < 2:
        raise UsageError(f"eve-search rank adult: argument --seeds: {args.seeds} (the reference-vs-itself comparison "
                         "pairs different training seeds, so give at least 2)")
    if args.cost_mode == "measured" and args.backward_ratio is not None:
        raise UsageError("eve-search rank adult: argument --backward-ratio: only the calibrated cost mode takes a "
                         "frozen ratio (got --cost-mode measured)")
    against = args.against[0]
    _import_plugins(args)
    if args.task not in task_names():
        raise UsageError(f"eve-search rank adult: argument --task: {args.task!r} is not a registered task (expected "
                         f"one of {', '.join(task_names())}, or register it in a --plugin module)")
    spaces = args.space or list(get_task(args.task).spaces)
    if not spaces:
        raise UsageError(f"eve-search rank adult: argument --space: task {args.task!r} names no default space")
    check_output_path(args.json, "--json", "rank adult")
    storage = _storage_url(args)
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


def _start_workers_early(argv: Sequence[str]) -> None:
    """A sweep with ``--jobs``: start the process its workers are forked from before this one imports
    PyTorch, so both import it side by side (about 1 s sooner to the first trial on 2 cores). Only a
    head start: the arguments are checked afterwards, and a server started for arguments that turn
    out wrong ends with this process."""
    if argv[:1] in (["adult"], ["sweep"]) and any(arg == "--jobs" or arg.startswith("--jobs=") for arg in argv):
        from eve_search.engine._workers import start_worker_server

        start_worker_server()


def _runner(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The function of :data:`COMMANDS` that runs the parsed command."""
    key = f"{args.command} {getattr(args, args.command)}" if args.command in GROUPS else args.command
    return _function(COMMANDS[key].run)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``eve-search`` console script; returns the exit code.

    Args:
        argv: the arguments after the program name (None: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 2 for bad input (printed as one line on stderr), 1 for a failure,
        128 + n for a command stopped by signal n (Ctrl-C: 130, SIGTERM: 143, SIGHUP: 129; see
        :mod:`eve_search.cli._signals`) or by its output's reader going away (141, as SIGPIPE).

    Example:
        >>> main(["mnist", "--budget", "0"])  # bad input: one line on stderr, exit code 2
        2
    """
    _printable_streams()
    if _current_folder_gone():  # before anything resolves a relative path (or imports PyTorch)
        print(f"eve-search: {_GONE}", file=sys.stderr)
        return 2
    with terminations():  # SIGTERM and SIGHUP stop the command as Ctrl-C does, from here on
        return _main(argv)


_GONE = ("the current folder no longer exists (it was deleted or moved); change to an existing folder and run "
         "the command again")


def _current_folder_gone() -> bool:
    import os

    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def _printable_streams() -> None:
    """Text that the terminal's encoding cannot show (a unicode path under ``PYTHONIOENCODING=ascii``) is
    printed with backslash escapes instead of failing the command once its work is done."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # pragma: no cover - a stream that cannot change now: left as it is
                pass


def _prog(args: argparse.Namespace | None) -> str:
    """The command as a message starts: ``eve-search adult``, or ``eve-search`` before the arguments are read."""
    return "eve-search" if args is None else f"eve-search {_command_label(args)}"


def _silence_stdout() -> None:
    """After the reader of standard output went away (``| head``): nothing more goes there, and the
    interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (captured in tests): nothing to redirect
        pass


def _main(argv: Sequence[str] | None) -> int:
    words = [str(word) for word in (sys.argv[1:] if argv is None else argv)]
    _start_workers_early(words)
    import signal

    from eve_search._imports import MissingExtraError
    from eve_search.engine._stores import close_stores, describe_failure, redact

    redact(" ".join(words))  # each credential of a URL typed anywhere is known before argparse may echo a piece
    parser = _build_parser()
    args = None
    try:
        args = parser.parse_args(argv)
        check_paths(args)  # a symbolic-link loop in any path argument: one line naming it
        check_outputs(args)  # before any work: no output may overwrite the store, a checkpoint or an input
        return _runner(args)(args)
    except UsageError as error:
        print(redact(str(error)), file=sys.stderr)
        return 2
    except (BrokenPipeError, SystemExit) as error:
        # The reader of standard output went away (`| head -c 10`): a BrokenPipeError, or rich's
        # SystemExit(1) raised while handling one. Whatever was to be kept is written before anything
        # is printed (the store, --json), so only the rest of the printing is lost.
        if isinstance(error, SystemExit) and not isinstance(error.__context__, BrokenPipeError):
            raise
        _silence_stdout()
        print(f"{_prog(args)}: standard output was closed by its reader; stopped printing (everything recorded is "
              "kept)", file=sys.stderr)
        return 128 + int(getattr(signal, "SIGPIPE", 13))
    except (MissingExtraError, ValueError) as error:
        # Every ValueError a command lets through is about its input (settings, data, a cluster
        # address): one line, never a traceback. The store's, a checkpoint's and the Adult data's
        # errors are ValueErrors too, so catching them needs none of their modules (which import PyTorch).
        text = str(error).strip()
        first = text.splitlines()[0] if text else type(error).__name__
        print(redact(f"{_prog(args)}: {first}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM/SIGHUP (eve_search.cli._signals)
        how = f"interrupted by {signal_name(error.signum)}" if isinstance(error, Terminated) else "interrupted"
        print(f"eve-search: {how}; everything recorded so far is kept (continue with --resume)", file=sys.stderr)
        return exit_code(error)
    except FileNotFoundError:
        if not _current_folder_gone():
            raise
        print(f"eve-search: {_GONE}", file=sys.stderr)
        return 2
    except Exception as error:
        # A store's database failing mid-run (read-only, disk full, server gone): one line; what was
        # recorded before is kept.
        line = describe_failure(error)
        if line is None:
            raise
        print(f"eve-search {_command_label(args)}: {line}", file=sys.stderr)
        return 2
    finally:
        # Every command, whatever ended it, leaves each SQLite store it opened whole in its main file
        # (the write-ahead log checkpointed, the connections closed): console() then skips the
        # interpreter's last collection, which would otherwise be what closes them.
        close_stores()


def console() -> int:
    """The ``eve-search`` console script: :func:`main`, then a quick exit.

    By the time :func:`main` returns, everything is written and closed (each SQLite store checkpointed
    into its main file, see :func:`eve_search.engine._stores.close_stores`). The interpreter's last
    garbage collection would then walk every object PyTorch and its compiler stack created (about
    0.7 s here, for nothing), so the objects still alive are frozen out of it (``gc.freeze``); exit
    handlers still run and modules are still torn down as usual.

    Returns:
        :func:`main`'s exit code.

    Example (runs the command of ``sys.argv``, so not run as a doctest):
        >>> import sys
        >>> sys.argv = ["eve-search", "dashboard", "--storage", "sqlite:///runs/results.db"]  # doctest: +SKIP
        >>> console()  # doctest: +SKIP
        0
    """
    import gc

    from eve_search._malloc import configure_malloc
    from eve_search._openmp import configure_openmp

    if "torch" not in sys.modules:  # called in-process after PyTorch loaded, it is too late: say nothing
        try:  # the command owns its process: on a shared CPU, fewer PyTorch threads, which wait passively
            configure_openmp()
        except ValueError as error:  # EVE_SEARCH_THREADS is not one of its values
            print(f"eve-search: {error}", file=sys.stderr)
            return 2
    configure_malloc()  # and large tensors reuse freed heap memory instead of faulting in fresh pages
    code = main()
    sys.stdout.flush()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(console())
