"""Shared fixtures: the tiny task of tests/tiny_task.py and a real, throwaway PostgreSQL server."""

from __future__ import annotations

import contextlib
import os

import pytest

from eve_search.tasks import Splits, Task
from eve_search.testing import throwaway_postgres
from tests.tiny_task import TINY_TASK


def pytest_configure(config):
    from tests import linecache_guard

    linecache_guard.install()  # doctest + SQLAlchemy 2.1's finalizers race in Python 3.11's linecache
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # One of several pytest-xdist workers (`make test` runs two, one per core): this process's PyTorch
        # trains on one thread, so that two workers training at once do not run four threads on two cores.
        # A test that needs another count sets it (and puts it back); subprocesses choose their own.
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """The files marked ``slow`` (the suite's minutes: Ray, subprocess sweeps, kills) first, in their order,
    then the rest: with `make test`'s two workers taking whole files, no worker is left with a long file at
    the end while the other is idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture
def busy_machine(request):
    """Processes spinning on the CPUs for the whole test (tests/load.py): ``@pytest.mark.load(spinners=N)``
    sets how many (default: one per CPU, plus one). Yields the :class:`tests.load.Spinners`."""
    from tests.load import Spinners, default_spinners

    marker = request.node.get_closest_marker("load")
    count = marker.kwargs.get("spinners", default_spinners()) if marker is not None else default_spinners()
    with Spinners(count) as spinners:
        yield spinners


@pytest.fixture
def latency(monkeypatch):
    """``latency(owner, name, seconds, when=None)``: that function or method waits ``seconds`` before it
    runs for the rest of the test (see :func:`tests.load.delayed`); returns the calls it delayed."""
    from tests.load import delayed

    return lambda owner, name, seconds, when=None: delayed(monkeypatch, owner, name, seconds, when)


@pytest.fixture(scope="session")
def tiny_splits() -> Splits:
    return TINY_TASK.data()


@pytest.fixture(scope="session")
def tiny_task() -> Task:
    return TINY_TASK


@pytest.fixture
def evaluated_splits(monkeypatch) -> list[str]:
    """The splits every task evaluation of this test asks for, in order (``Task.evaluate`` counted)."""
    splits: list[str] = []
    evaluate = Task.evaluate

    def counting(self, model, data, split="val"):
        splits.append(split)
        return evaluate(self, model, data, split)

    monkeypatch.setattr(Task, "evaluate", counting)
    return splits


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server started for this test session only (unix socket, random port)."""
    with contextlib.ExitStack() as stack:
        try:
            database = stack.enter_context(throwaway_postgres())
        except RuntimeError as error:
            pytest.fail(f"{error}; `make test` installs them")
        yield database("eve")
