"""Store writes on a background thread: same order, reads wait for what they depend on, errors surface."""

import threading
import time
from pathlib import Path

import pytest

from eve_search.engine._background import BackgroundStore
from tests.load import hang_guard


class SlowStore:
    """A store whose writes take ``delay`` seconds; with ``hold=True`` its first write also waits until the
    test sets ``released`` (``entered`` is set once the writer is in it): the writer is busy, by events."""

    def __init__(self, delay=0.01, hold=False):
        self.calls, self.delay, self.written = [], delay, set()
        self.entered = threading.Event()
        self.released = threading.Event()
        if not hold:
            self.released.set()

    def record(self, index, budget, details, checkpoint):
        self.entered.set()
        self.released.wait()
        time.sleep(self.delay)
        self.written.add(index)
        self.calls.append(("record", index, budget, threading.current_thread().name))

    def eliminate(self, indices):
        self.calls.append(("eliminate", tuple(indices)))

    def complete(self, index, score):
        self.calls.append(("complete", index))

    def set(self, key, value):
        self.calls.append(("set", key, value))

    def get(self, key, default=None):
        return [c for c in self.calls if c[0] == "set" and c[1] == key][-1][2] if self.calls else default

    def checkpoint_path(self, index):
        return Path(f"trial-{index}.pt") if index in self.written else Path("missing")

    def rung_details(self):
        return {c[1]: {c[2]: {"score": 0.0}} for c in self.calls if c[0] == "record"}


def test_writes_happen_off_the_calling_thread_in_the_order_issued():
    inner = SlowStore()
    with BackgroundStore(inner) as store:
        for i in range(4):
            store.record(i, 10, {"score": 0.5}, b"")
        store.eliminate([2, 3])
        store.complete(0, 0.5)
    assert [c[:3] for c in inner.calls] == [("record", 0, 10), ("record", 1, 10), ("record", 2, 10),
                                            ("record", 3, 10), ("eliminate", (2, 3)), ("complete", 0)]
    assert all(c[3] == "eve-search-store-writer" for c in inner.calls if c[0] == "record")


def test_a_checkpoint_path_is_given_once_that_trials_records_are_written():
    inner = SlowStore(delay=0.05)
    with BackgroundStore(inner) as store:
        store.record(0, 10, {"score": 0.5}, b"")
        store.record(1, 10, {"score": 0.5}, b"")
        assert store.checkpoint_path(1) == Path("trial-1.pt")
        assert store.rung_details().keys() == {0, 1}  # reads wait for everything queued


def test_only_the_latest_queued_wall_time_is_written():
    inner = SlowStore(hold=True)
    with hang_guard(), BackgroundStore(inner) as store:
        store.record(0, 10, {"score": 0.5}, b"")
        inner.entered.wait()  # the writer is busy with the record: the three times queue behind it
        for seconds in (1.0, 2.0, 3.0):
            store.set("wall_seconds", seconds)
        inner.released.set()
    assert [c for c in inner.calls if c[0] == "set"] == [("set", "wall_seconds", 3.0)]


def test_a_failed_write_is_raised_on_the_calling_thread_and_later_writes_are_dropped():
    inner = SlowStore()

    def broken(*args):
        raise OSError("disk full")

    inner.record = broken
    store = BackgroundStore(inner)
    store.record(0, 10, {"score": 0.5}, b"")
    store.complete(0, 0.5)
    with pytest.raises(OSError, match="disk full"):
        store.flush()
    store.close()
    assert inner.calls == []  # nothing after the failed record was written


def test_the_sweep_id_is_read_without_waiting_for_queued_writes():
    inner = SlowStore(hold=True)
    inner.sweep_id = "abc123"
    with hang_guard(), BackgroundStore(inner) as store:  # (a read that waited for the write would hang)
        store.record(0, 10, {"score": 0.5}, b"")
        inner.entered.wait()
        assert store.sweep_id == "abc123"
        assert inner.calls == []  # the record is still being written: nothing waited for it
        inner.released.set()


class BatchingStore(SlowStore):
    def __init__(self, delay=0.05, hold=False):
        super().__init__(delay, hold)
        self.batches = []

    def record_many(self, results):
        time.sleep(self.delay)
        self.batches.append([index for index, *_ in results])
        for index, budget, details, checkpoint in results:
            self.written.add(index)
            self.calls.append(("record", index, budget, threading.current_thread().name))


def test_results_queued_behind_one_another_are_written_together_in_order():
    inner = BatchingStore(hold=True)
    with hang_guard(), BackgroundStore(inner) as store:
        store.record(0, 10, {"score": 0.5}, b"")
        inner.entered.wait()  # the writer is busy with the first: the rest queue behind it
        for i in range(1, 6):
            store.record(i, 10, {"score": 0.5}, b"")
        store.eliminate([4, 5])
        store.record(6, 30, {"score": 0.5}, b"")
        inner.released.set()
        assert store.checkpoint_path(3) == Path("trial-3.pt")
    assert [c[:3] for c in inner.calls] == [("record", i, 10) for i in range(6)] + [("eliminate", (4, 5)),
                                                                                    ("record", 6, 30)]
    assert sum(inner.batches, []) == sorted(sum(inner.batches, []))  # (a result alone goes to record)
    assert max(len(batch) for batch in inner.batches) > 1  # the writer caught up in a batch
    assert all(len(batch) <= 64 for batch in inner.batches)
