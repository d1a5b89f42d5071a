"""Store writes off the training thread, in the order the engine issued them.

:class:`BackgroundStore` wraps a :class:`~eve_search.engine.sha.RungStore` (a
:class:`~eve_search.engine.store.SweepStore`): ``record``, ``eliminate``, ``complete`` and ``set`` are queued
and performed by one writer thread in exactly the order they were called, so the store passes through
the same states as with direct calls, only later (results are gathered for up to ``LINGER`` seconds,
unless a read waits for them, and written in one transaction, which skips none of them). A record still writes its checkpoint before its result
(the store's own rule), so a SIGKILL at any moment leaves a store that an uninterrupted sweep
also passed through, and ``--resume`` retrains whatever was still queued, exactly. Reads that depend
on queued writes wait for them: :meth:`checkpoint_path` waits for that trial's pending records only
(the next trial trains while earlier results are written), ``sweep_id`` (fixed when the store opened)
waits for nothing, the other reads wait for everything queued.
A write that fails is raised on the training thread at its next call.

Example:
    >>> class Recorder:
    ...     def __init__(self): self.calls = []
    ...     def set(self, key, value): self.calls.append((key, value))
    ...     def get(self, key, default=None): return dict(self.calls).get(key, default)
    >>> inner = Recorder()
    >>> with BackgroundStore(inner) as store:
    ...     store.set("a", 1); store.set("b", 2)
    >>> inner.calls
    [('a', 1), ('b', 2)]
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["BackgroundStore"]

_STOP = object()
BATCH = 64  # results written in one transaction at most
LINGER = 0.25  # seconds the writer waits for more results to write with the first (unless a read waits)


class BackgroundStore:
    """Queue a store's writes to one thread, in order (see the module docstring)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        # The sweep's identity never changes once the store is open: read it here, so building a trial
        # (which names its owner) does not wait for the queued writes.
        if hasattr(store, "sweep_id"):
            self.sweep_id = store.sweep_id
        self._queue: queue.Queue = queue.Queue()
        self._pending: Counter[int] = Counter()  # queued records per trial index
        self._changed = threading.Condition()
        self._hurry = threading.Event()  # a read waits for the writes: no lingering
        self._error: BaseException | None = None
        self.busy_seconds = 0.0  # CPU seconds of the writer thread so far (eve-search bench sweep reads it)
        self._thread = threading.Thread(target=self._work, name="eve-search-store-writer", daemon=True)
        self._thread.start()

    # The writer thread --------------------------------------------------------------------------------

    def _work(self) -> None:
        started = time.thread_time()
        carried = None  # an item taken while gathering results, done next
        while True:
            items = [self._queue.get() if carried is None else carried]
            carried = None
            self.busy_seconds = time.thread_time() - started
            if items[0] is _STOP:
                self._queue.task_done()
                return
            if items[0][0] == "record":
                carried = self._gather(items)
            try:
                name, args, _ = items[0]
                if self._error is None:
                    if name == "record" and len(items) > 1 and hasattr(self.store, "record_many"):
                        self.store.record_many([item[1] for item in items])
                    elif name == "record":
                        for item in items:
                            self.store.record(*item[1])
                    elif name == "set" and args[0] == "wall_seconds" and self._newer_wall_time_queued():
                        pass  # a later wall time is queued: write that one only
                    else:
                        getattr(self.store, name)(*args)
            except BaseException as error:  # noqa: BLE001 handed to the training thread, raised there
                self._error = error
            finally:
                with self._changed:
                    for item in items:
                        if item[2] is not None:
                            self._pending[item[2]] -= 1
                    self._changed.notify_all()
                for _ in items:
                    self._queue.task_done()

    def _gather(self, items: list) -> Any:
        """Add to ``items`` (a result) the results that follow it, up to ``BATCH`` in all, waiting up to
        ``LINGER`` seconds for them unless a read is waiting: written together in one transaction, they
        cost the writer thread (which shares the CPUs with the training) a fraction of one each. Returns
        the first other item taken from the queue (to be done next), or None."""
        deadline = time.monotonic() + LINGER
        while len(items) < BATCH:
            remaining = deadline - time.monotonic()
            try:  # what is queued already is taken even when a read waits
                item = self._queue.get(block=False) if self._hurry.is_set() or remaining <= 0 else \
                    self._queue.get(timeout=min(remaining, 0.02))
            except queue.Empty:
                if self._hurry.is_set() or remaining <= 0:
                    break
                continue
            if item is _STOP or item[0] != "record":
                return item
            items.append(item)
        return None

    def _newer_wall_time_queued(self) -> bool:
        with self._queue.mutex:
            return any(item is not _STOP and item[0] == "set" and item[1][0] == "wall_seconds"
                       for item in self._queue.queue)

    # The training thread ------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _put(self, name: str, args: tuple, index: int | None = None) -> None:
        self._check()
        if index is not None:
            with self._changed:
                self._pending[index] += 1
        self._queue.put((name, args, index))

    def flush(self) -> None:
        """Wait until every queued write is done; raise the first that failed."""
        self._hurry.set()
        try:
            self._queue.join()
        finally:
            self._hurry.clear()
        self._check()

    def close(self) -> None:
        """Finish the queued writes and stop the writer thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self._check()

    def __enter__(self) -> BackgroundStore:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, index: int, budget: int, details: dict[str, Any], checkpoint: bytes | None) -> None:
        self._put("record", (index, budget, details, checkpoint), index)

    def save_checkpoint(self, index: int, checkpoint: bytes) -> None:
        self._put("save_checkpoint", (index, checkpoint), index)

    def eliminate(self, indices: list[int]) -> None:
        self._put("eliminate", (list(indices),))

    def complete(self, index: int, score: float) -> None:
        self._put("complete", (index, score))

    def set(self, key: str, value: Any) -> None:
        self._put("set", (key, value))

    def checkpoint_path(self, index: int) -> Path:
        """The trial's checkpoint path, once its queued records (and so its checkpoint) are written."""
        self._hurry.set()
        try:
            with self._changed:
                self._changed.wait_for(lambda: self._pending[index] <= 0 or not self._thread.is_alive())
        finally:
            self._hurry.clear()
        self._check()
        return self.store.checkpoint_path(index)

    def rung_details(self) -> dict[int, dict[int, dict[str, Any]]]:
        self.flush()
        return self.store.rung_details()

    def get(self, key: str, default: Any = None) -> Any:
        self.flush()
        return self.store.get(key, default)

    def __getattr__(self, name: str) -> Any:  # every other read goes to the store once it is up to date
        if name.startswith("_") or name == "store":
            raise AttributeError(name)
        self.flush()
        return getattr(self.store, name)
