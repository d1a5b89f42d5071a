"""The one way eve-search writes a whole file: atomically, so nothing is ever left half-written.

Checkpoints, cached data arrays, recorded pools, every ``--json`` document and the dashboard's page go
through :func:`write_atomically`: the content is written to a temporary file beside the target and
renamed over it, so a reader, a killed process or a full disk leaves either the old file, untouched,
or the whole new one, never a truncated or 0-byte file. This module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["write_atomically"]


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux), else once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: str | os.PathLike, content: bytes | str, *, output: bool = False) -> None:
    """Write ``content`` (str: as UTF-8) to ``path``, atomically where the target is a file.

    * A regular file (or a new one) is replaced in one rename: a temporary file in the same folder
      (missing folders are created) receives the content and takes the target's place only once
      every byte is written. On any failure (a full disk, Ctrl-C) the temporary file is removed and
      the target is left as it was.
    * The new file gets the permissions of the file it replaces, else those ``open()`` would give.
    * ``output``: ``path`` is a file the user named (``--json``, ``--out``). A symbolic link there is
      followed (the file it names is replaced, the link stays), and a device (``/dev/null``,
      ``/dev/full``) or a named pipe is written in place, never replaced by a file. Otherwise (files
      eve-search names itself: checkpoints, cache entries) whatever is at ``path`` is replaced,
      a link included, so a planted link never leads a write elsewhere.

    Args:
        path: the file to write.
        content: its new content.
        output: whether the user named ``path`` (see above).

    Raises:
        OSError: it could not be written (the target is then unchanged), e.g. ``IsADirectoryError``.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> write_atomically(folder / "sub" / "out.json", '{"a": 1}')
        >>> (folder / "sub" / "out.json").read_text(), [p.name for p in (folder / "sub").iterdir()]
        ('{"a": 1}', ['out.json'])
    """
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    target = Path(os.path.realpath(path)) if output else Path(path)
    try:
        status: os.stat_result | None = os.stat(target) if output else os.lstat(target)
    except FileNotFoundError:
        status = None
    if status is not None and stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if status is not None and not stat.S_ISREG(status.st_mode) and not output:
        status = None  # a link, a pipe or a device where eve-search keeps a file of its own: replaced
    if status is not None and not stat.S_ISREG(status.st_mode):
        with open(target, "wb") as handle:  # a device or a pipe: there is no file to replace
            handle.write(data)
        return
    mode = stat.S_IMODE(status.st_mode) if status is not None else 0o666 & ~_umask()
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
