"""What the commands share: the store URL (checked before any work), the output paths they refuse, the
--plugin imports, the checks the training commands start with, and the command's name in messages."""

from __future__ import annotations

import argparse
import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eve_search._checks import InputError
from eve_search.cli.args import DEFAULT_WORKDIR, UsageError, default_storage_url

if TYPE_CHECKING:
    from eve_search.tasks import Task

__all__ = ["JSON_SCHEMA_VERSION", "KEPT_IN_STORE", "OutputError", "check_frozen_ratio", "check_output_path",
           "check_outputs", "check_paths", "check_weight_decay", "command_label", "default_storage", "import_plugins",
           "registered_task", "storage_url", "task_spaces", "write_json", "write_output"]


def use_fast_store_writes() -> None:
    """Let the results store write each rung result, claim and ending in one transaction on SQLite and
    PostgreSQL (:mod:`eve_search.integrations._optuna_adapter` registers that path with the engine when it
    is imported; without it every write is a call of Optuna's public storage API, several times slower).
    Commands that write a store call it before they open one."""
    import eve_search.integrations._optuna_adapter  # noqa: F401  (registers the fast path on import)


def command_label(args: argparse.Namespace) -> str:
    """The command as messages name it: ``adult``, ``rank adult``, ``bench synthetic``."""
    words = [args.command]
    for sub in ("dataset", "bench"):
        if isinstance(getattr(args, sub, None), str):
            words.append(getattr(args, sub))
    return " ".join(words)


def default_storage(args: argparse.Namespace) -> str | None:
    """The store a command uses: ``--storage``, else ``results.db`` in ``--workdir``, or in the default work
    directory for a command without ``--workdir`` (``dashboard``); None for commands without a store."""
    if getattr(args, "storage", None):
        return args.storage
    if not hasattr(args, "storage"):
        return None
    return default_storage_url(getattr(args, "workdir", None) or DEFAULT_WORKDIR)


# Options naming files a command writes, and files or folders it reads.
_OUTPUT_OPTIONS = (("out", "--out"), ("json", "--json"))
_INPUT_OPTIONS = (("data_dir", "--data-dir"), ("data", "--data"), ("model", "--model"))


def check_outputs(args: argparse.Namespace, outputs: dict[str, Path | None] | None = None) -> None:
    """Refuse, before any work, an output path that could not be written at the end, or that would
    overwrite the results store (or its -wal/-shm/-journal), a checkpoint, a file the command reads or
    another of its outputs (see :func:`eve_search.cli._outputs.check_outputs`). ``outputs``: option -> path,
    default every output option of ``args``."""
    from eve_search.cli._outputs import OutputClash
    from eve_search.cli._outputs import check_outputs as check

    command = command_label(args)
    if outputs is None:
        outputs = {option: getattr(args, dest, None) for dest, option in _OUTPUT_OPTIONS}
    for option, path in outputs.items():
        try:
            check_output_path(path, option, command)
        except OSError as error:  # e.g. a file name longer than the file system allows
            raise UsageError(f"eve-search {command}: argument {option}: {str(path)[:60]!r}: cannot be used "
                             f"({error.strerror or error})") from None
    if not any(path is not None for path in outputs.values()):
        return
    storage = default_storage(args)
    workdir = getattr(args, "workdir", None)
    from eve_search.engine._stores import sqlite_file

    database = sqlite_file(storage) if storage else None
    checkpoints = workdir / "checkpoints" if workdir is not None else (
        database.parent / "checkpoints" if database is not None else None)
    inputs = [(option, getattr(args, dest)) for dest, option in _INPUT_OPTIONS
              if isinstance(getattr(args, dest, None), Path)]
    pools = getattr(args, "pool", None)  # one path (bench scale) or a list of them (dashboard)
    inputs += [("--pool", pool) for pool in ([pools] if isinstance(pools, Path) else pools or [])
               if isinstance(pool, Path)]
    # A --plugin given as a file is read too (a module name is looked up on the import path).
    inputs += [("--plugin", Path(plugin)) for plugin in getattr(args, "plugin", None) or []
               if isinstance(plugin, str) and (plugin.endswith(".py") or os.sep in plugin)]
    try:
        check(outputs, storage=storage, checkpoints=checkpoints, inputs=inputs)
    except OutputClash as error:
        raise UsageError(f"eve-search {command}: {error}") from None
    except OSError as error:
        raise UsageError(f"eve-search {command}: an output path cannot be used ({error.strerror or error})") \
            from None


def _path_problem(path: Path) -> str | None:
    """Why ``path`` cannot be used at all, whatever a command does with it (a symbolic-link loop in it,
    or a name too long for the system), or None; a path that does not exist yet is fine."""
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "is a loop of symbolic links (expected a path that leads to a file or folder)"
        if error.errno == errno.ENAMETOOLONG:
            return f"cannot be used ({error.strerror})"
    except ValueError:  # a NUL byte: argparse's types refuse it earlier; kept for direct callers
        return "holds a NUL character"
    return None


def check_paths(args: argparse.Namespace) -> None:
    """Refuse, before any work, a path argument that no command could use: one line naming the argument,
    the path and why (see :func:`_path_problem`). Every path-valued option is checked (``--workdir``,
    ``--data-dir``, ``--json``, ``--out``, ...), with the SQLite file of ``--storage`` and each
    ``--plugin`` given as a file.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> (folder / "a").symlink_to(folder / "b"); (folder / "b").symlink_to(folder / "a")
        >>> try:
        ...     check_paths(argparse.Namespace(command="adult", workdir=folder / "a" / "runs"))
        ... except UsageError as error:
        ...     print(str(error).replace(str(folder), "DIR"))
        eve-search adult: argument --workdir: 'DIR/a/runs' is a loop of symbolic links (expected a path that leads to a file or folder)
    """
    from eve_search.engine._stores import sqlite_file

    paths = [(f"--{dest.replace('_', '-')}", value) for dest, value in vars(args).items() if isinstance(value, Path)]
    storage = getattr(args, "storage", None)
    database = sqlite_file(storage) if storage else None
    if database is not None:
        paths.append(("--storage", database))
    paths += [("--plugin", Path(plugin)) for plugin in getattr(args, "plugin", None) or []
              if isinstance(plugin, str) and (plugin.endswith(".py") or os.sep in plugin)]
    for option, path in paths:
        problem = _path_problem(path)
        if problem is not None:
            shown = str(path) if len(str(path)) <= 60 else "..." + str(path)[-57:]
            raise UsageError(f"eve-search {command_label(args)}: argument {option}: {shown!r} {problem}")


def storage_url(args: argparse.Namespace) -> str:
    """The command's results store URL, checked before any work: outputs that would overwrite it (see
    :func:`check_outputs`), a store in memory, a read-only store or folder; the work directory is created."""
    from eve_search.engine._stores import storage_problem

    from eve_search.cli._outputs import OutputClash, check_outputs as check

    command = command_label(args)
    check_outputs(args)
    storage = default_storage(args)
    try:  # the work directory is created below: it must not take the place of a file of the store
        check({"--workdir": args.workdir}, storage=storage)
    except OutputClash as error:
        raise UsageError(f"eve-search {command}: {error}") from None
    except OSError as error:
        raise UsageError(f"eve-search {command}: argument --workdir: {str(args.workdir)[:60]!r}: cannot be used "
                         f"({error.strerror or error})") from None
    if args.storage:
        problem = storage_problem(args.storage)
        if problem is not None:
            raise UsageError(f"eve-search {command}: argument --storage: {problem}")
        return args.storage
    try:
        args.workdir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"eve-search {command}: argument --workdir: {str(args.workdir)!r}: cannot create it "
                         f"({error.strerror or error})") from None
    problem = storage_problem(storage, name="its results store")
    if problem is not None:
        raise UsageError(f"eve-search {command}: argument --workdir: {str(args.workdir)!r}: {problem}")
    return storage


def check_output_path(path: Path | None, argument: str, command: str) -> None:
    """Refuse, before any work, an output file that could not be written at the end."""
    if path is None:
        return
    prefix = f"eve-search {command}: argument {argument}: {str(path)!r}"
    if path.is_dir():
        raise UsageError(f"{prefix} is a directory (expected a file path)")
    parent = path.parent
    for ancestor in [parent, *parent.parents]:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise UsageError(f"{prefix}: {str(ancestor)!r} is not a directory")
            if not os.access(ancestor, os.W_OK | os.X_OK):
                raise UsageError(f"{prefix}: {str(ancestor)!r} is not writable")
            break
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{prefix} is not writable")


def import_plugins(args: argparse.Namespace) -> None:
    """Import each --plugin: a .py file by its path, a module name from the installed packages first and
    the current directory last (see :mod:`eve_search.cli._plugins`); one line naming the plugin if it fails."""
    from eve_search.cli._plugins import PluginError, import_plugin

    for plugin in args.plugin:
        try:
            import_plugin(plugin)
        except PluginError as error:
            raise UsageError(f"eve-search {command_label(args)}: argument --plugin: {error}") from None


# The checks the commands that train (adult, sweep, rank, audit, mnist, lora) start with, each in one
# place: one line naming the argument, the value and what was expected, before any work.


def check_frozen_ratio(args: argparse.Namespace, command: str) -> None:
    """Refuse ``--backward-ratio`` with ``--cost-mode measured``: only the calibrated cost mode takes a
    frozen ratio. ``command`` is the command as messages name it (:func:`command_label`).

    Example:
        >>> args = argparse.Namespace(cost_mode="measured", backward_ratio=2.0)
        >>> try:
        ...     check_frozen_ratio(args, "mnist")
        ... except UsageError as error:
        ...     print(error)
        eve-search mnist: argument --backward-ratio: only the calibrated cost mode takes a frozen ratio (got --cost-mode measured)
    """
    if args.cost_mode == "measured" and args.backward_ratio is not None:
        raise UsageError(f"eve-search {command}: argument --backward-ratio: only the calibrated cost mode takes a "
                         "frozen ratio (got --cost-mode measured)")


def check_weight_decay(args: argparse.Namespace, command: str) -> None:
    """Refuse a ``--weight-decay`` that is not a finite number >= 0.

    Example:
        >>> try:
        ...     check_weight_decay(argparse.Namespace(weight_decay=-0.1), "lora")
        ... except UsageError as error:
        ...     print(error)
        eve-search lora: argument --weight-decay: -0.1 (expected a number >= 0)
    """
    import math

    if not (math.isfinite(args.weight_decay) and args.weight_decay >= 0):
        raise UsageError(f"eve-search {command}: argument --weight-decay: {args.weight_decay!r} (expected a number "
                         ">= 0)")


def registered_task(args: argparse.Namespace, command: str) -> Task:
    """Import each ``--plugin`` (see :func:`import_plugins`), then return the task ``--task`` names
    (``adult`` for a command without ``--task``), refusing one that no module registered.

    Example:
        >>> registered_task(argparse.Namespace(command="sweep", task="adult", plugin=[]), "sweep").name
        'adult'
        >>> try:
        ...     registered_task(argparse.Namespace(command="sweep", task="nosuch", plugin=[]), "sweep")
        ... except UsageError as error:
        ...     print(str(error)[:70])
        eve-search sweep: argument --task: 'nosuch' is not a registered task (
    """
    from eve_search.tasks import get_task, task_names

    import_plugins(args)
    name = getattr(args, "task", None)
    name = "adult" if name is None else name  # '' is refused by the argument's type
    if name not in task_names():
        raise UsageError(f"eve-search {command}: argument --task: {name!r} is not a registered task (expected one "
                         f"of {', '.join(task_names())}, or register it in a --plugin module)")
    return get_task(name)


def task_spaces(args: argparse.Namespace, task: Task, command: str) -> list[str]:
    """The search spaces of ``--space``, else the task's own, refusing a task that names none.

    Example:
        >>> from eve_search.tasks import get_task
        >>> task_spaces(argparse.Namespace(space=None, task="adult"), get_task("adult"), "rank adult")
        ['hp', 'arch']
    """
    spaces = args.space or list(task.spaces)
    if not spaces:
        raise UsageError(f"eve-search {command}: argument --space: task {args.task!r} names no default space")
    return spaces


JSON_SCHEMA_VERSION = 1


class OutputError(InputError):
    """An output file (``--json``, ``--out``) that could not be written at the end: one line naming the
    argument, the path and why; the file was left as it was (see :func:`write_output`)."""


def write_output(path: Path, content: str, argument: str, *, kept: str = "") -> None:
    """Write a file the user named (``--json``, ``--out``) atomically (see
    :func:`eve_search._atomic.write_atomically`): a full disk, ``/dev/full`` or Ctrl-C leaves the old
    file whole, never a truncated one, and a failure is :class:`OutputError`, one line.

    Args:
        path: the file.
        content: its text (written as UTF-8).
        argument: the option that named it, for the message.
        kept: what the message adds about where the results still are (e.g. the store).

    Example:
        >>> write_output(Path("/dev/full"), "{}", "--json", kept="; the results are in the store")
        Traceback (most recent call last):
        ...
        eve_search.cli._common.OutputError: argument --json: '/dev/full' could not be written (No space left on device); the file was left as it was; the results are in the store
    """
    from eve_search._atomic import write_atomically

    try:
        write_atomically(path, content, output=True)
    except OSError as error:
        raise OutputError(f"argument {argument}: {str(path)!r} could not be written ({error.strerror or error}); the "
                          f"file was left as it was{kept}") from None


#: What an output that could not be written says about the results, for commands that keep them in a store.
KEPT_IN_STORE = "; every result is kept in the results store: the same command with --resume writes it again"
# The --json kinds of the commands that record their results in a store (and resume from it).
_STORED_KINDS = frozenset({"sweep", "rank", "audit", "mnist", "lora", "bench-synthetic"})


def write_json(path: Path, kind: str, document: Any, *, indent: int = 2, kept: str | None = None) -> None:
    """Write a command's ``--json`` document, headed by what it is and its layout's version.

    Every ``--json`` file starts with ``"schema": "eve-search/<kind>"`` and ``"schema_version"``
    (:data:`JSON_SCHEMA_VERSION`, raised whenever a key is renamed or removed; new keys do not raise
    it). The kinds: ``sweep`` (adult, sweep), ``rank``, ``audit``, ``mnist``, ``lora``,
    ``bench-throughput``, ``bench-synthetic``, ``bench-sweep``, ``bench-memory``, ``bench-matmul``,
    ``dashboard``; each command's ``--help`` and the docs say what its document holds. A document
    that is not a mapping goes under ``"results"``. The path was checked writable before any work; the
    file is written atomically (:func:`write_output`: :class:`OutputError` in one line when it cannot
    be, ``kept`` added to it; default: :data:`KEPT_IN_STORE` for a command that records its results
    in a store, else nothing).

    Example:
        >>> import json, tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "out.json"
        >>> write_json(path, "rank", {"seeds": [0, 1]})
        >>> json.loads(path.read_text())
        {'schema': 'eve-search/rank', 'schema_version': 1, 'seeds': [0, 1]}
    """
    import json

    body = dict(document) if isinstance(document, Mapping) else {"results": document}
    text = json.dumps({"schema": f"eve-search/{kind}", "schema_version": JSON_SCHEMA_VERSION, **body},
                      indent=indent, allow_nan=False if kind == "dashboard" else True)
    if kept is None:
        kept = KEPT_IN_STORE if kind in _STORED_KINDS else ""
    write_output(path, text, "--json", kept=kept)
