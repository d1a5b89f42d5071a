"""Shared fixtures: the tiny task of tests/tiny_task.py and a real, throwaway PostgreSQL server."""

from __future__ import annotations

import contextlib

import pytest

from eve_search.tasks import Splits, Task
from eve_search.testing import throwaway_postgres
from tests.tiny_task import TINY_TASK


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
