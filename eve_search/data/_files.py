"""Opening the data files a user names: regular files only, gzip streamed, every read bounded.

Used by the Adult, IDX and instruction loaders. A path that is a directory, a named pipe, a device
(``/dev/zero``, ``/dev/urandom``) or a socket is refused before a byte is read; opening never waits
for a named pipe's writer (the file is opened non-blocking and checked first). A failed read, a
corrupt gzip stream and content past a loader's size limit each raise the loader's own error class
with one line naming the file. Decompression is streamed: nothing past the bytes a caller asks for
is ever inflated, so a small gzip "bomb" costs no more memory than the file it claims to be.

Example:
    >>> import gzip, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.gz"
    >>> _ = path.write_bytes(gzip.compress(b"hello"))
    >>> with DataFile(path, ValueError) as handle:
    ...     handle.compressed, handle.read(3), handle.read(10), handle.at_end()
    (True, b'hel', b'lo', True)
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CHUNK", "DataFile", "file_kind", "format_size"]

CHUNK = 1 << 20  # bytes per read: what a loader holds beyond its result at any moment
GZIP_MAGIC = b"\x1f\x8b"


def format_size(count: int) -> str:
    """``count`` bytes in words: whole GiB or MiB when exact, else the byte count.

    Example:
        >>> format_size(64 << 20), format_size(1 << 30), format_size(3974305)
        ('64 MiB', '1 GiB', '3,974,305 bytes')
    """
    if count >= 1 << 30 and count % (1 << 30) == 0:
        return f"{count >> 30} GiB"
    if count >= 1 << 20 and count % (1 << 20) == 0:
        return f"{count >> 20} MiB"
    return f"{count:,} bytes"


def file_kind(mode: int) -> str | None:
    """What a file of this ``st_mode`` is, when it is not a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "a special file"


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class _Tee:
    """A read-only file object that feeds every byte read through it to ``digest`` (a hashlib object)."""

    mode = "rb"

    def __init__(self, handle: Any, digest: Any) -> None:
        self.handle, self.digest = handle, digest

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data

    def readinto(self, view: memoryview) -> int:
        got = self.handle.readinto(view)
        self.digest.update(view[:got])
        return got


class DataFile:
    """A user-named data file open for reading, gunzipped on the fly when it is gzip.

    Args:
        path: the file.
        error: the exception class (or factory) of the calling loader; it gets one line that
            starts with the path.
        gzip_data: True: the content must be gzip (a ``.gz`` name); None: gzip when the file starts
            with the gzip magic bytes; False: never decompress.
        raw_digest: a hashlib object to feed the file's bytes as stored (before decompression).
        bad_gzip: how a corrupt gzip stream is described.
        expected: what the file should be, for the "not a regular file" message.
        message: how the one line is made from the path and the problem (default ``"{path}: {problem}"``).

    Attributes:
        compressed: whether reads are decompressed.
        size: the file's size on disk (``st_size``).
    """

    def __init__(self, path: str | os.PathLike, error: Callable[[str], BaseException], *,
                 gzip_data: bool | None = None, raw_digest: Any = None,
                 bad_gzip: str = "corrupt or truncated gzip data", expected: str = "a regular file",
                 message: Callable[[Path, str], str] | None = None) -> None:
        self.path, self._error, self._bad_gzip = Path(path), error, bad_gzip
        self._message = message or (lambda where, problem: f"{where}: {problem}")
        self._stream: Any = None
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            raise self.fail("cannot be read (not found)") from None
        except OSError as exc:
            raise self.fail(f"cannot be read ({_reason(exc)})") from None
        try:
            info = os.fstat(fd)
            kind = file_kind(info.st_mode)
            if kind is not None:
                raise self.fail(f"is {kind} (expected {expected})")
            if flags & getattr(os, "O_NONBLOCK", 0):
                os.set_blocking(fd, True)
            self._raw = os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        self.size = info.st_size
        self._raw_source: Any = self._raw if raw_digest is None else _Tee(self._raw, raw_digest)
        try:
            if gzip_data is None:
                gzip_data = self._raw.peek(2)[:2] == GZIP_MAGIC
        except OSError as exc:
            self.close()
            raise self.fail(f"cannot be read ({_reason(exc)})") from None
        self.compressed = bool(gzip_data)
        self._stream = gzip.GzipFile(fileobj=self._raw_source, mode="rb") if self.compressed else self._raw_source

    def fail(self, problem: str) -> BaseException:
        """The loader's error, one line: ``message(path, problem)``."""
        return self._error(self._message(self.path, problem))

    def _failed_read(self, exc: BaseException) -> BaseException:
        if self.compressed and not (isinstance(exc, OSError) and exc.errno is not None):
            return self.fail(f"{self._bad_gzip} ({_reason(exc)})")
        return self.fail(f"cannot be read ({_reason(exc)})")

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of content; fewer only at the end of the file."""
        parts, wanted = [], size
        while wanted > 0:
            try:
                block = self._stream.read(min(wanted, CHUNK))
            except (OSError, EOFError, zlib.error) as exc:
                raise self._failed_read(exc) from None
            if not block:
                break
            parts.append(block)
            wanted -= len(block)
        return b"".join(parts)

    def readinto(self, view: memoryview, on_block: Callable[[memoryview], None] | None = None) -> int:
        """Fill ``view`` (bytes) with content, ``CHUNK`` at a time; the count filled (short only at the
        end of the file). ``on_block`` sees each block as it arrives (for a checksum)."""
        filled = 0
        while filled < len(view):
            block = view[filled:filled + CHUNK]
            try:
                got = self._stream.readinto(block)
            except (OSError, EOFError, zlib.error) as exc:
                raise self._failed_read(exc) from None
            if not got:
                break
            if on_block is not None:
                on_block(block[:got])
            filled += got
        return filled

    def read_all(self, limit: int, too_large: Callable[[], str]) -> bytes:
        """The whole content, refused with ``too_large()`` as soon as it passes ``limit`` bytes
        (a plain file larger than ``limit`` on disk is refused before reading)."""
        if not self.compressed and self.size > limit:
            raise self.fail(too_large())
        content = bytearray()
        while True:
            block = self.read(min(CHUNK, limit + 1 - len(content)))
            if not block:
                return bytes(content)
            content += block
            if len(content) > limit:
                raise self.fail(too_large())

    def at_end(self) -> bool:
        """Whether the content has no byte left (reads at most one more)."""
        return self.read(1) == b""

    def drain_raw(self) -> None:
        """Read the stored bytes not read yet (for ``raw_digest``), a chunk at a time."""
        try:
            while self._raw_source.read(CHUNK):
                pass
        except OSError as exc:
            raise self.fail(f"cannot be read ({_reason(exc)})") from None

    def close(self) -> None:
        if self._stream is not self._raw_source and self._stream is not None:
            self._stream.close()
        self._raw.close()

    def __enter__(self) -> DataFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
