"""Output paths that would destroy what a command keeps or reads, refused before any work.

A command writes its outputs (``--json``, ``--out``) only at the end, so a path that is the results
store, one of the files SQLite keeps beside it, a file in the checkpoint folder, a file the command
reads, or another output of the same command is refused up front: otherwise a finished sweep would be
overwritten by its own summary. Paths are compared resolved (symbolic links, ``./x``, ``x/../x``,
relative to the current directory) and, for files that exist, by identity (hard links).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from eve_search._checks import InputError
from eve_search.engine._stores import sqlite_file

__all__ = ["OutputClash", "check_outputs", "store_files"]

# The files of an SQLite store: the database, and what SQLite keeps beside it while it is open.
_STORE_FILES = (("", "the results store"), ("-wal", "the results store's write-ahead log"),
                ("-shm", "the results store's shared-memory index"), ("-journal", "the results store's journal"))


class OutputClash(InputError):
    """An output path that would overwrite something the command keeps or reads.

    Attributes:
        argument: the option that named the path (``--json``).
        reason: what the path is, e.g. ``'results.db' is the results store (choose another path)``.
    """

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"argument {argument}: {reason}")
        self.argument, self.reason = argument, reason


def _resolved(path: Path) -> Path:
    return Path(path).resolve()  # symbolic links first, then "..", as the system resolves a path


def _same(a: Path, b: Path) -> bool:
    if _resolved(a) == _resolved(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet)
        return False


def _inside(path: Path, folder: Path) -> bool:
    resolved, root = _resolved(path), _resolved(folder)
    if resolved == root or root in resolved.parents:
        return True
    try:  # the same folder reached through a hard-linked or bind-mounted parent
        return any(os.path.samefile(parent, folder) for parent in resolved.parents if parent.exists())
    except OSError:
        return False


def store_files(storage: str | None) -> list[tuple[Path, str]]:
    """The files of the SQLite store ``storage`` with what each is (none for other databases)."""
    database = sqlite_file(storage) if storage else None
    if database is None:
        return []
    return [(database.with_name(database.name + suffix), what) for suffix, what in _STORE_FILES]


def check_outputs(outputs: Mapping[str, Path | None], *, storage: str | None = None, checkpoints: Path | None = None,
                  inputs: Mapping[str, Path | None] | Iterable[tuple[str, Path | None]] | None = None) -> None:
    """Raise :class:`OutputClash` for the first output path that is a file of ``storage``, lies in the
    ``checkpoints`` folder, is (or lies in) one of ``inputs``, or is also another output.

    Args:
        outputs: option -> path the command writes (None: not given).
        storage: the command's results store URL (an SQLite file's files are protected).
        checkpoints: the folder of trial checkpoints.
        inputs: option -> a file or folder the command reads (a mapping, or pairs when an option repeats).
    """
    given = [(argument, Path(path)) for argument, path in outputs.items() if path is not None]
    sources = [(option, Path(path)) for option, path in
               (inputs.items() if isinstance(inputs, Mapping) else inputs or ()) if path is not None]
    protected_files = store_files(storage)
    for position, (argument, path) in enumerate(given):
        shown = repr(str(path))
        for file, what in protected_files:
            if _same(path, file):
                raise OutputClash(argument, f"{shown} is {what} (choose another path)")
        if checkpoints is not None and _inside(path, checkpoints):
            raise OutputClash(argument, f"{shown} is inside the checkpoint folder {str(checkpoints)!r} (choose "
                                        "another path)")
        for option, source in sources:
            if _same(path, source):
                raise OutputClash(argument, f"{shown} is the {option} file, which this command reads (choose "
                                            "another path)")
            if source.is_dir() and _inside(path, source):
                raise OutputClash(argument, f"{shown} is inside the {option} folder {str(source)!r}, which this "
                                            "command reads (choose another path)")
        for other, earlier in given[:position]:
            if _same(path, earlier):
                raise OutputClash(argument, f"{shown} is also the {other} path (choose another path)")
