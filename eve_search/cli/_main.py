"""The ``eve-search`` command line: the command table (each command's code is a module of
:mod:`eve_search.cli.commands`), the parser and :func:`main`.

Bad input gets one line on stderr naming the argument, the value and what was expected, and exit
code 2; any other exception is a bug, shown with its traceback and a line asking for a report (exit
code 1). Nothing already computed is lost (sweeps resume from their store with ``--resume``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from eve_search.cli._common import check_outputs, check_paths, command_label
from eve_search.cli._signals import Terminated, exit_code, signal_name, terminations
from eve_search.cli.args import UsageError, _Parser

__all__ = ["main"]


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
        "eve_search.cli.commands.adult:run", "eve_search.cli.commands.adult:configure_parser",
        "rank configurations on UCI Adult with synchronous successive halving",
        "Sample configurations of a search space once, train them on UCI Adult inside synchronous successive "
        "halving (top third promoted at each rung, trials resumed, never restarted) and report the best. Several "
        "optimizers run side by side on the same configurations, initial weights and batches."),
    "sweep": Command(
        "eve_search.cli.commands.sweep:run", "eve_search.cli.commands.sweep:configure_parser",
        "the same search on any registered task (e.g. one a --plugin module registers)",
        "Synchronous successive halving on a registered task: sample configurations of a search space, train "
        "them resumably under the evaluation-cost budget, report the best. `eve-search adult` is `eve-search "
        "sweep --task adult`."),
    "rank": Command(
        "eve_search.cli.commands.rank:run", "eve_search.cli.commands.rank:configure_parser",
        "ranking agreement between EvE and a reference trainer"),
    "bench throughput": Command(
        "eve_search.cli.commands.bench_throughput:run",
        "eve_search.cli.commands.bench_throughput:configure_parser",
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


def _start_workers_early(argv: Sequence[str]) -> None:
    """A sweep with ``--jobs``: start the process its workers are forked from before this one imports
    PyTorch, so both import it side by side and the first trial starts sooner. Only a head start: the
    arguments are checked afterwards, and a server started for arguments that turn out wrong ends with
    this process."""
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
        The exit code: 0 on success, 2 for bad input (printed as one line on stderr: a
        :class:`~eve_search.cli.UsageError` or an :class:`~eve_search.InputError`), 1 for any other
        exception (a bug: its traceback, then a line asking for a report), 128 + n for a command
        stopped by signal n (Ctrl-C: 130, SIGTERM: 143, SIGHUP: 129; see
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
    return "eve-search" if args is None else f"eve-search {command_label(args)}"


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


def _report_bug(error: Exception, args: argparse.Namespace | None, redact: Callable[[str], str]) -> int:
    """Any exception other than bad input is a bug: its traceback (credentials of URLs hidden), then one
    line that asks for a report, and exit code 1."""
    import traceback

    print(redact("".join(traceback.format_exception(type(error), error, error.__traceback__))).rstrip(),
          file=sys.stderr)
    print(f"{_prog(args)}: stopped by an unexpected {type(error).__name__}, a bug in eve-search: please report it "
          "with the traceback above and the command you ran (everything recorded so far is kept)", file=sys.stderr)
    return 1


def _main(argv: Sequence[str] | None) -> int:
    words = [str(word) for word in (sys.argv[1:] if argv is None else argv)]
    _start_workers_early(words)
    import signal

    from eve_search._checks import InputError
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
    except (MissingExtraError, InputError) as error:
        # Bad input that only the work could find (settings, data, a store, a checkpoint) and a missing
        # extra: one line, never a traceback. The errors of the store, the checkpoints and the data
        # files are InputErrors, so catching them needs none of their modules (which import PyTorch).
        text = str(error).strip()
        first = text.splitlines()[0] if text else type(error).__name__
        print(redact(f"{_prog(args)}: {first}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM/SIGHUP (eve_search.cli._signals)
        how = f"interrupted by {signal_name(error.signum)}" if isinstance(error, Terminated) else "interrupted"
        print(f"eve-search: {how}; everything recorded so far is kept (continue with --resume)", file=sys.stderr)
        return exit_code(error)
    except Exception as error:
        if isinstance(error, FileNotFoundError) and _current_folder_gone():
            print(f"eve-search: {_GONE}", file=sys.stderr)
            return 2
        # A store's database failing mid-run (read-only, disk full, server gone): one line; what was
        # recorded before is kept.
        line = describe_failure(error)
        if line is not None:
            print(f"{_prog(args)}: {line}", file=sys.stderr)
            return 2
        return _report_bug(error, args, redact)
    finally:
        # Every command, whatever ended it, leaves each SQLite store it opened whole in its main file
        # (the write-ahead log checkpointed, the connections closed): console() then skips the
        # interpreter's last collection, which would otherwise be what closes them.
        close_stores()


def console() -> int:
    """The ``eve-search`` console script: :func:`main`, then a quick exit.

    By the time :func:`main` returns, everything is written and closed (each SQLite store checkpointed
    into its main file, see :func:`eve_search.engine._stores.close_stores`). The interpreter's last
    garbage collection would then walk every object PyTorch and its compiler stack created, for
    nothing, so the objects still alive are frozen out of it (``gc.freeze``); exit handlers still run
    and modules are still torn down as usual.

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
        from eve_search._checks import InputError

        try:  # the command owns its process: on a shared CPU, fewer PyTorch threads, which wait passively
            configure_openmp()
        except InputError as error:  # EVE_SEARCH_THREADS is not one of its values
            print(f"eve-search: {error}", file=sys.stderr)
            return 2
    configure_malloc()  # and large tensors reuse freed heap memory instead of faulting in fresh pages
    code = main()
    sys.stdout.flush()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(console())
