"""An on-disk cache of preprocessed arrays, so a second run does not parse CSV again.

Entries are ``.npz`` files of plain numeric and string arrays, read with ``allow_pickle=False`` (loading
an entry never executes code). An entry's name carries its key (for a dataset: the sha256 of its source
files and the preprocessing version), it is written to a temporary file in the cache folder and renamed
into place (a killed process leaves the old entry or the new one, never half of one), and an entry that
cannot be read or does not have the expected arrays is recomputed and rewritten.

Each entry also holds the sha256 of its key and arrays, taken when it was made, and every read checks
the arrays against it: an entry changed afterwards (labels flipped in the ``.npz``, a bit rotted) is
named on stderr, recomputed from the source and rewritten, so it never changes a score. The check
is against accidents and casual edits, not against someone who recomputes the sum as well: the cache
is trusted as the user's own files are (anyone who can write it can write the user's home). An entry
without the sum (written by eve-search 0.3 or earlier) is recomputed once. The folder is
``$EVE_SEARCH_CACHE``, else ``$XDG_CACHE_HOME/eve-search``, else ``~/.cache/eve-search``; when it cannot
be written the data is simply computed every time.

Example:
    >>> import numpy as np, tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> compute = lambda: {"x": np.arange(3.0)}
    >>> cached_arrays("demo", "key1", compute, ("x",), folder=folder)["x"]
    array([0., 1., 2.])
    >>> sorted(p.name for p in folder.iterdir())
    ['demo-key1.npz']
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["cache_folder", "cached_arrays"]


def cache_folder() -> Path:
    """Where eve-search keeps its caches (see the module docstring)."""
    explicit = os.environ.get("EVE_SEARCH_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eve-search"


# The most an entry's arrays may hold, as its zip directory declares them (the reader never inflates a
# member past its declared size): far above any dataset cached here (UCI Adult's arrays are 22 MB).
CACHE_MAX_BYTES = 1 << 30


_DIGEST = "__sha256__"  # the entry's own array: the sha256 of its key and arrays, taken when it was made


def _digest(key: str, arrays: dict[str, np.ndarray]) -> str:
    """The sha256 of ``key`` and every array (its name, dtype, shape and bytes), in name order."""
    digest = hashlib.sha256(key.encode())
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"\0{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _read(path: Path, names: Sequence[str], key: str) -> dict[str, np.ndarray] | None:
    """The entry's arrays, or None (recompute) when it is missing, not a regular file (a named pipe
    is never waited on), corrupt, foreign, declares more than ``CACHE_MAX_BYTES``, or does not match
    the sha256 it was made with (said on stderr: it was changed after it was written)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except OSError:
        os.close(fd)
        return None
    try:
        with handle:
            with zipfile.ZipFile(handle) as archive:
                if sum(member.file_size for member in archive.infolist()) > CACHE_MAX_BYTES:
                    return None
            handle.seek(0)
            with np.load(handle, allow_pickle=False) as entry:
                if set(entry.files) != {*names, _DIGEST}:
                    return None
                arrays = {name: entry[name] for name in names}
                recorded = entry[_DIGEST]
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None  # truncated, corrupt or foreign: recompute
    if recorded.shape != () or str(recorded) != _digest(key, arrays):
        print(f"eve-search: the cached data {str(path)!r} does not match the checksum it was made with (it was "
              "changed after it was written); recomputed it from the source files", file=sys.stderr)
        return None
    return arrays


def _write(path: Path, arrays: dict[str, np.ndarray], key: str) -> None:
    import io

    from eve_search._atomic import write_atomically

    content = io.BytesIO()
    np.savez(content, **arrays, **{_DIGEST: np.array(_digest(key, arrays))})
    write_atomically(path, content.getvalue())


def cached_arrays(kind: str, key: str, compute: Callable[[], dict[str, np.ndarray]], names: Sequence[str], *,
                  folder: Path | None = None) -> dict[str, np.ndarray]:
    """The arrays ``compute()`` returns, from the cache entry ``{kind}-{key}.npz`` when it is readable, holds
    exactly ``names`` and matches the sha256 it was made with; otherwise computed and written there
    (atomically)."""
    path = (cache_folder() if folder is None else folder) / f"{kind}-{key}.npz"
    arrays = _read(path, names, f"{kind}-{key}")
    if arrays is not None:
        return arrays
    arrays = compute()
    if set(arrays) != set(names):
        raise ValueError(f"Invalid arrays: {sorted(arrays)} (expected {sorted(names)})")
    try:
        _write(path, arrays, f"{kind}-{key}")
    except OSError:
        pass  # a full disk or a folder we may not write: the arrays are still right
    return arrays
