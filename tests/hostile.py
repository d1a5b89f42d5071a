"""Guards shared by the hostile-input tests: a deadline that fails a hang, and a memory ceiling."""

from __future__ import annotations

import contextlib
import signal
import tracemalloc

MiB = 1 << 20


class Hung(Exception):  # noqa: N818 (not an OSError: no loader may take it for a read error)
    """Raised in a call that runs past its deadline."""


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail instead of hanging (a read from a named pipe or an endless device would block forever)."""
    def expire(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def peak_memory(limit: int):
    """Fail when the Python-visible allocations (numpy buffers and zlib output included) peak above
    ``limit`` bytes inside the block."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit, f"peak allocation {peak / MiB:.0f} MiB (limit {limit / MiB:.0f} MiB)"


def one_line(capsys, *names: str) -> str:
    """The CLI's stderr: exactly one line, no traceback, naming each of ``names``."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, err
    return err


def default_sigint() -> None:
    """For ``preexec_fn``: the child handles Ctrl-C as in a terminal (SIGINT at its default), even when
    this test run ignores SIGINT, as a shell's background job does (and its children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
