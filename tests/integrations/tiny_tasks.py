"""A tiny task whose functions are importable, so it can travel to worker processes (spawn).

The ``tiny`` task of tests/tiny_task.py loads its data through a lambda, which pickle cannot send to
another process; this one is the same problem with module-level functions.
"""

from __future__ import annotations

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


def slow_loss(model, x, y):
    """The default loss after a short sleep: wall time for a worker to be killed in, same numbers."""
    time.sleep(0.006)
    return cross_entropy_loss(model, x, y)


SLOW_TASK = Task("tiny-slow", "the tiny task, 6 ms slower per loss evaluation (to kill a worker mid-rung)",
                 load_data=tiny_data, build_model=tiny_model, loss=slow_loss, batch_size=32,
                 spaces=(TINY_SPACE.name,))
register_task(SLOW_TASK)
