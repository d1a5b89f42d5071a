"""A busy machine for a test, and latency where a host calls eve-search.

:class:`Spinners` keeps the CPUs busy: ``count`` processes that spin until the block ends (each says it
spins before the block starts, so the load is there when the test begins; none outlives the process
that started it). :func:`delayed` makes one function or method wait before it runs, as a searcher that
takes seconds to suggest, a report that arrives late or a slow store would. The fixtures of
tests/conftest.py (``busy_machine``, ``latency``) put them around a test; tests marked ``load`` run under
them (`make test-load` runs only those; `make test` runs them with the rest).

Example:
    >>> with Spinners(2) as spinners:
    ...     len(spinners.pids)
    2
    >>> class Store:
    ...     def write(self, value):
    ...         return value
    >>> import pytest
    >>> patch = pytest.MonkeyPatch()
    >>> calls = delayed(patch, Store, "write", 0.01, when=lambda store, value: value > 2)
    >>> Store().write(1), Store().write(3), [args[1:] for args, _ in calls]
    (1, 3, [(3,)])
    >>> patch.undo()
"""

from __future__ import annotations

import faulthandler
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

__all__ = ["HANG_GUARD_S", "Spinners", "default_spinners", "delayed", "hang_guard", "runnable_now"]

HANG_GUARD_S = 600
"""The default hang guard: minutes for what takes seconds, sized for a machine ten times slower."""

# A spinner: says it runs (one byte on stdout), then spins; it ends when the process that started it is
# gone (checked between blocks of work), so a killed test run leaves no process spinning.
_SPIN = """
import os, sys
parent = int(sys.argv[1])
os.write(1, b"s")
os.close(1)
while os.getppid() == parent:
    for _ in range(200_000):
        pass
"""


def default_spinners() -> int:
    """Spinning processes for a busy machine: one per CPU this process may use, plus one (a load of 3 on
    two CPUs), or ``EVE_SEARCH_TEST_SPINNERS`` where set.

    Example:
        >>> default_spinners() >= 2
        True
    """
    configured = os.environ.get("EVE_SEARCH_TEST_SPINNERS", "").strip()
    if configured:
        return int(configured)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cpus + 1


def runnable_now() -> int | None:
    """Runnable tasks on the machine now (``/proc/loadavg``'s count); None where it cannot be read.

    Example:
        >>> runnable_now() is None or runnable_now() >= 1
        True
    """
    try:
        with open("/proc/loadavg") as handle:
            return int(handle.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


class Spinners:
    """``count`` processes spinning on the CPUs while the ``with`` block runs.

    Args:
        count: how many (0: none, a quiet run of the same test).

    Attributes:
        pids: the spinning processes' ids, once started.
    """

    def __init__(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"Invalid count: {count!r} (expected an int >= 0 of spinning processes)")
        self.count = count
        self.pids: list[int] = []
        self._processes: list[subprocess.Popen] = []

    def __enter__(self) -> Spinners:
        try:
            for _ in range(self.count):
                # Each in a session of its own, as other users' work is: where the kernel shares the CPUs
                # between sessions first (autogroup), a spinner then counts as one more process, as it
                # does where it does not, instead of taking turns with the test's own processes.
                process = subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid())], stdout=subprocess.PIPE,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
                self._processes.append(process)
            for process in self._processes:  # each says it runs: an event, not a sleep
                said = process.stdout.read(1)
                process.stdout.close()
                if said != b"s":
                    raise RuntimeError(f"a spinning process ended at start (exit code {process.wait()})")
        except BaseException:
            self._stop()
            raise
        self.pids = [p.pid for p in self._processes]
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.kill()
        for process in self._processes:
            process.wait()
        self._processes = []


@contextmanager
def hang_guard(seconds: float = HANG_GUARD_S) -> Iterator[None]:
    """If the block is still running after ``seconds``, dump every thread's stack and end the process, so
    a hang fails the run instead of stalling it. A last guard, not an assertion on time: size it for a
    machine ten times slower than the slowest seen (one guard at a time per process).

    Example:
        >>> with hang_guard(60):
        ...     sum(range(10))
        45
    """
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)  # (not a captured stream)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def delayed(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, seconds: float,
            when: Callable[..., bool] | None = None) -> list[tuple[tuple, dict]]:
    """Make ``owner.name`` (a function of a module, or a method of a class) wait ``seconds`` before it
    runs, on every call or on those where ``when(*args, **kwargs)`` is true, until ``monkeypatch`` is
    undone. Latency, not an order: nothing waits for it.

    Args:
        monkeypatch: the test's monkeypatch (undone at the end of the test).
        owner: the module, class or object that holds the function.
        name: its attribute name.
        seconds: how long each delayed call waits first.
        when: which calls to delay (default: all).

    Returns:
        The calls delayed so far, as ``(args, kwargs)``, in order (filled as they come).
    """
    original = getattr(owner, name)
    calls: list[tuple[tuple, dict]] = []

    @functools.wraps(original)
    def slow(*args: Any, **kwargs: Any) -> Any:
        if when is None or when(*args, **kwargs):
            calls.append((args, kwargs))
            time.sleep(seconds)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, slow)
    return calls
