"""What ``--plugin`` imports, and how.

``--plugin`` takes either

* a path to a ``.py`` file (``--plugin ./my_task.py``, anything ending in ``.py`` or containing a
  path separator): that one file is executed as a module, loaded by its path. ``sys.path`` is not
  touched, so nothing lying beside it (an ``optuna.py``, a ``torch.py``) can replace an installed
  package; the file's own imports find installed packages only. It is registered as a module named
  after its path under this package (``eve_search.cli._plugins.f<hex of the path>``), so ``--jobs``
  workers, which receive the task by reference, load the same file again by its path; or

* a module name (``--plugin my_task``, ``--plugin tests.tiny_task``): looked up among the installed
  packages and ``PYTHONPATH`` first, and only then in the current directory, which is appended to
  ``sys.path``, never put in front of it. When the module is found only in the current directory,
  the directory stays at the end of ``sys.path`` so that ``--jobs`` workers find the module too;
  otherwise it is removed again once the import is done.

An exception raised by a plugin, when it is imported or later when the command runs its code
(``load_data``, ``build_model``, a metric), is reported in one line naming the plugin, the exception
and the plugin's file and line (:func:`describe_failure`); so is a plugin's ``sys.exit()``
(:func:`describe_exit`), which would otherwise end the command silently with the plugin's exit code.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PluginError", "describe_exit", "describe_failure", "import_plugin", "reported"]

# This module doubles as the package of plugin files: a module object with a __path__ can have
# submodules, and the only finder that answers for them is _PluginFiles (an empty path list gives
# the standard finders nothing to search).
__path__: list[str] = []

_PREFIX = f"{__name__}.f"


class PluginError(Exception):
    """A --plugin that cannot be imported: the message is one line."""


@dataclass
class _Plugin:
    label: str  # what the user typed
    roots: list[str] = field(default_factory=list)  # its file, or its package's folders
    tasks: set[str] = field(default_factory=set)  # the tasks it registered


_PLUGINS: dict[str, _Plugin] = {}  # module name -> what it is


def _file_module_name(path: Path) -> str:
    return _PREFIX + os.fsencode(path).hex()


class _PluginFiles(importlib.abc.MetaPathFinder):
    """Finds ``eve_search.cli._plugins.f<hex>``: the ``.py`` file whose path is that hex, in any process."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX) or "." in fullname[len(_PREFIX):]:
            return None
        try:
            file = os.fsdecode(bytes.fromhex(fullname[len(_PREFIX):]))
        except ValueError:
            return None
        if not os.path.isfile(file):
            return None
        return importlib.util.spec_from_file_location(fullname, file)


if not any(isinstance(finder, _PluginFiles) for finder in sys.meta_path):
    sys.meta_path.append(_PluginFiles())


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    line = line if len(line) <= 300 else line[:297] + "..."
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def _is_file_plugin(text: str) -> bool:
    return text.endswith(".py") or os.sep in text or (os.altsep is not None and os.altsep in text)


def _registered_tasks() -> set[str]:
    from eve_search.tasks import task_names

    return set(task_names())


def _current_folder_exists() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def _cwd_entries() -> set[str]:
    cwd = os.getcwd()
    return {entry for entry in sys.path if entry in ("", ".") or os.path.abspath(entry) == cwd}


def _import_file(text: str) -> tuple[str, Any]:
    path = Path(text).expanduser()
    if not path.is_file():
        raise PluginError(f"{text!r} is not a file (expected a .py file, or the name of a module)")
    if path.suffix != ".py":
        raise PluginError(f"{text!r} is not a .py file (expected a .py file, or the name of a module)")
    name = _file_module_name(path.resolve())
    return name, importlib.import_module(name)


def _import_name(text: str) -> tuple[str, Any]:
    if not all(part.isidentifier() for part in text.split(".")):
        raise PluginError(f"{text!r} is neither a module name (e.g. my_tasks) nor a path to a .py file")
    cwd = os.getcwd()
    appended = not _cwd_entries()
    if appended:
        sys.path.append(cwd)  # after site-packages: the current directory never replaces an installed package
    module = None
    try:
        importlib.invalidate_caches()
        module = importlib.import_module(text)
    finally:
        top = sys.modules.get(text.split(".")[0])
        if appended and not _from_directory(top, cwd):
            sys.path.remove(cwd)
    return text, module


def _from_directory(module: Any, directory: str) -> bool:
    """Whether ``module`` was loaded from ``directory``: its file, or its package's folder, lies there."""
    places = [getattr(module, "__file__", None), *getattr(module, "__path__", [])] if module is not None else []
    return any(place and os.path.dirname(os.path.abspath(place)) == directory for place in places)


def import_plugin(text: str) -> Any:
    """Import one ``--plugin`` value (see the module's docstring); PluginError in one line if it fails."""
    if not text.strip():
        raise PluginError(f"{text!r} is empty (expected a module name or a path to a .py file)")
    before = _registered_tasks()
    file_plugin = _is_file_plugin(text)
    try:
        name, module = _import_file(text) if file_plugin else _import_name(text)
    except PluginError:
        raise
    except (Exception, SystemExit) as error:  # the user's code: reported in one line
        if isinstance(error, FileNotFoundError) and not _current_folder_exists():
            raise  # the current folder was deleted, not the plugin's fault: the command line says so
        missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
        if not file_plugin and missing and (text == missing or text.startswith(missing + ".")):
            raise PluginError(f"{text!r} could not be imported (no module named {missing!r} among the installed "
                              "packages or in the current directory; give a file by its path, e.g. ./my_tasks.py)") \
                from None
        raise PluginError(f"{text!r} could not be imported ({_first_line(error)}{_where(error)})") from None
    plugin = _PLUGINS.setdefault(name, _Plugin(text))
    plugin.label = text
    file = getattr(module, "__file__", None)
    roots = list(getattr(module, "__path__", [])) or ([file] if file else [])
    plugin.roots = [os.path.abspath(root) for root in roots]
    plugin.tasks |= _registered_tasks() - before
    return module


# Errors raised by plugin code later ------------------------------------------------------------------

_REMOTE_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _owner(filename: str) -> _Plugin | None:
    path = os.path.abspath(filename)
    for plugin in _PLUGINS.values():
        for root in plugin.roots:
            if path == root or (os.path.isdir(root) and path.startswith(root + os.sep)):
                return plugin
    return None


def _plugin_frame(error: BaseException) -> tuple[_Plugin, str, int] | None:
    """The innermost frame of plugin code in ``error``'s traceback, its causes and any traceback a
    worker process sent back with it."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        for frame in reversed(traceback.extract_tb(current.__traceback__)):
            plugin = _owner(frame.filename)
            if plugin is not None:
                return plugin, frame.filename, frame.lineno or 0
        remote = getattr(current, "tb", None)  # concurrent.futures' _RemoteTraceback
        if isinstance(remote, str):
            for filename, line in reversed(_REMOTE_FRAME.findall(remote)):
                plugin = _owner(filename)
                if plugin is not None:
                    return plugin, filename, int(line)
        pending += [current.__cause__, current.__context__]
    return None


def _where(error: BaseException) -> str:
    """`` at FILE:LINE`` of the plugin's line that raised, directly or through what it called, or ''."""
    for frame in traceback.extract_tb(error.__traceback__):  # the outermost: the plugin's own line
        if not frame.filename.startswith("<") and "importlib" not in frame.filename \
                and not os.path.abspath(frame.filename).startswith(os.path.dirname(__file__) + os.sep):
            return f" at {os.path.basename(frame.filename)}:{frame.lineno}"
    return ""


def describe_failure(error: BaseException, task: str | None = None) -> str | None:
    """One line for an exception raised by plugin code (found in its traceback), or raised while
    running a task a plugin registered; None when no plugin is involved."""
    found = _plugin_frame(error)
    if found is not None:
        plugin, filename, line = found
        return f"--plugin {plugin.label!r} raised {_first_line(error)} (at {os.path.basename(filename)}:{line})"
    # An error of this package's own kinds (bad input, a store, a checkpoint) keeps its own message, and
    # so does one of the system's that no plugin frame raised (the current folder deleted, a full disk).
    if isinstance(error, (ValueError, OSError)) or type(error).__module__.split(".")[0] == "eve_search":
        return None
    for plugin in _PLUGINS.values():
        if task is not None and task in plugin.tasks:
            return f"task {task!r} of --plugin {plugin.label!r} failed: {_first_line(error)}"
    return None


def describe_exit(error: SystemExit) -> str | None:
    """One line for a ``SystemExit`` raised by plugin code (``sys.exit(3)`` in a metric), or None when no
    plugin raised it (a genuine exit of the command)."""
    code = error.code
    call = f"sys.exit({code!r})" if code is not None else "sys.exit()"
    after = ("; a task's code must raise an exception, not end the process; everything recorded so far is kept "
             "(continue with --resume)")
    found = _plugin_frame(error)  # (only plugin code counts: rich, say, exits on a closed standard output)
    if found is None:
        return None
    plugin, filename, line = found
    return f"--plugin {plugin.label!r} called {call} (at {os.path.basename(filename)}:{line}){after}"


def reported(command: Callable[[Any], int]) -> Callable[[Any], int]:
    """Decorate a command's ``run(args)``: an exception from plugin code becomes one line (a
    :class:`~eve_search.cli.UsageError`, exit code 2) instead of a traceback."""

    @functools.wraps(command)
    def run(args: Any) -> int:
        from eve_search.cli.args import UsageError

        try:
            return command(args)
        except UsageError:
            raise
        except SystemExit as error:
            # A plugin's sys.exit() (or exit()) inside load_data, build_model, a metric...: the command
            # stops as for any error of plugin code, in one line, instead of ending the process
            # silently with the plugin's code. Everything recorded so far is kept and resumes.
            line = describe_exit(error) if getattr(args, "plugin", None) else None
            if line is None:
                raise
            prog = f"eve-search {args.command}" + (f" {args.dataset}" if getattr(args, "dataset", None) else "")
            raise UsageError(f"{prog}: {line}") from None
        except Exception as error:
            if not getattr(args, "plugin", None):
                raise
            from eve_search.engine._stores import describe_failure as store_failure

            if store_failure(error) is not None:  # the store failed, not the plugin: main says so
                raise
            line = describe_failure(error, getattr(args, "task", None))
            if line is None:
                raise
            prog = f"eve-search {args.command}" + (f" {args.dataset}" if getattr(args, "dataset", None) else "")
            raise UsageError(f"{prog}: {line}") from None

    return run
