"""SIGTERM and SIGHUP handled as Ctrl-C: the command stops where it is, keeps what it recorded, says so.

``timeout``, job schedulers, container stops and a closed terminal end a process with SIGTERM or
SIGHUP. By default Python dies of either at once, silently: queued store writes are lost and an
SQLite store is left with its ``-wal`` and ``-shm`` files, so a copy of the main file alone holds
none of the newest results. While a command runs, :func:`terminations` turns each of them into
:class:`Terminated`, a :class:`KeyboardInterrupt`, so everything that cleans up after Ctrl-C (the
background store writer, the worker processes, :func:`~eve_search.engine._stores.close_stores`)
does so for them too; the command line then prints one line and exits with 128 + the signal's
number, as the shell reports a process killed by it (143 for SIGTERM, 129 for SIGHUP).

A second signal while the first is being handled does not interrupt the clean-up: it is ignored.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["Terminated", "exit_code", "signal_name", "terminations"]

# The signals that end a command as Ctrl-C does (SIGHUP does not exist on Windows).
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Terminated(KeyboardInterrupt):
    """The process received ``signum`` (SIGTERM or SIGHUP) while a command ran.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = int(signum)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, and so on.

    Example:
        >>> signal_name(signal.SIGTERM), signal_name(signal.SIGINT)
        ('SIGTERM', 'SIGINT')
    """
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The exit code of a command stopped by ``interrupt``: 128 + its signal's number (Ctrl-C: SIGINT, 130).

    Example:
        >>> exit_code(KeyboardInterrupt()), exit_code(Terminated(signal.SIGTERM))
        (130, 143)
    """
    return 128 + int(getattr(interrupt, "signum", signal.SIGINT))


@contextlib.contextmanager
def terminations() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (once: a
    repeated signal is ignored until the block ends); the previous handlers are restored after it.
    A signal the process ignores (SIGHUP under ``nohup``) stays ignored. Outside the main thread
    (where Python cannot set handlers) nothing changes.

    Example:
        >>> import os
        >>> try:
        ...     with terminations():
        ...         os.kill(os.getpid(), signal.SIGTERM)  # the handler raises at the next instruction
        ...         print("not reached")
        ... except Terminated as stopped:
        ...     print(exit_code(stopped))
        143
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if raised.is_set():
            return  # already stopping: let the clean-up finish
        raised.set()
        raise Terminated(signum)

    previous = {}
    for number in _SIGNALS:
        if signal.getsignal(number) is signal.SIG_IGN:
            continue  # ignored on purpose (nohup): still ignored
        try:
            previous[number] = signal.signal(number, handler)
        except (OSError, ValueError):  # pragma: no cover - a signal this platform does not let us catch
            continue
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old if old is not None else signal.SIG_DFL)
