"""A tiny task whose functions are importable, so it can travel to worker processes (spawn).

The ``tiny`` task of tests/tiny_task.py loads its data through a lambda, which pickle cannot send to
another process; this one is the same problem with module-level functions.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

from eve_search.tasks.models import mlp
from eve_search.tasks import Task, cross_entropy_loss, register_task
from tests.tiny_task import TINY_SPACE, make_tiny_splits


def tiny_data(data_dir):
    return make_tiny_splits()


def tiny_model(config, data, generator):
    return mlp(data.x_train.shape[1], [int(config["width"])] * int(config["depth"]), 2, generator=generator)


TINY_WORKERS_TASK = Task("tiny-workers", "the tiny task, with importable functions (for worker processes)",
                         load_data=tiny_data, build_model=tiny_model, batch_size=32, spaces=(TINY_SPACE.name,))
register_task(TINY_WORKERS_TASK)


GATE_VARIABLE = "EVE_SEARCH_TEST_GATE"
_gates_passed: set[str] = set()


def _gate_worker(path: str) -> None:
    """With ``EVE_SEARCH_TEST_GATE`` naming a file: the first worker process (started by the sweep's process)
    to train creates it, holding its process id, and then trains forever (it holds its trial mid-rung until a
    test kills it); the sweep's own process (worker 0) trains nothing until the file exists. Events only:
    whichever process is slower, one worker other than this process is caught training, every time."""
    if path in _gates_passed:
        return
    if multiprocessing.parent_process() is None:  # the process that started the workers
        while not os.path.exists(path):
            time.sleep(0.01)
        _gates_passed.add(path)
        return
    staged = f"{path}.{os.getpid()}"
    with open(staged, "w") as handle:
        handle.write(str(os.getpid()))
    try:
        os.link(staged, path)  # atomic, and only once: the file appears whole, with the first worker's id
    except FileExistsError:
        _gates_passed.add(path)
        return
    finally:
        os.unlink(staged)
    threading.Event().wait()  # "training" until killed


def slow_loss(model, x, y):
    """The default loss after a short sleep: wall time for a worker to be killed in, same numbers (and the
    gate of ``EVE_SEARCH_TEST_GATE``, where a test sets it)."""
    gate = os.environ.get(GATE_VARIABLE)
    if gate:
        _gate_worker(gate)
    time.sleep(0.006)
    return cross_entropy_loss(model, x, y)


SLOW_TASK = Task("tiny-slow", "the tiny task, 6 ms slower per loss evaluation (to kill a worker mid-rung)",
                 load_data=tiny_data, build_model=tiny_model, loss=slow_loss, batch_size=32,
                 spaces=(TINY_SPACE.name,))
register_task(SLOW_TASK)
