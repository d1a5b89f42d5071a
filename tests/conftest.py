"""Shared fixtures: a tiny classification data set and a real, throwaway PostgreSQL server."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from eve_search.models import mlp
from eve_search.spaces import Categorical, Fixed, Float, SearchSpace, register_space
from eve_search.tasks import Splits, Task, register_task


def make_tiny_splits(seed: int = 0, features: int = 12) -> Splits:
    """A small linearly separable-ish problem, for fast trial tests."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, generator=g)

    def draw(rows):
        x = torch.randn(rows, features, generator=g)
        y = ((x @ w + 0.3 * torch.randn(rows, generator=g)) > 0).long()
        return x, y

    x_train, y_train = draw(1024)
    x_val, y_val = draw(256)
    x_test, y_test = draw(256)
    return Splits(x_train, y_train, x_val, y_val, x_test, y_test)


def _tiny_model(config, data, generator):
    return mlp(data.x_train.shape[1], [int(config["width"])] * int(config["depth"]), 2, generator=generator)


# A user-defined task and space, registered the way a user's own code (or a --plugin module) would:
# the whole search (SHA, store, resume, ranking, CLI, Ray, Optuna) runs on it in milliseconds per trial.
TINY_TASK = Task("tiny", "12 Gaussian features, a noisy linear label; an MLP of depth x width",
                 load_data=lambda data_dir: make_tiny_splits(), build_model=_tiny_model, batch_size=32,
                 spaces=("tiny",))
register_task(TINY_TASK)
TINY_SPACE = SearchSpace("tiny", (Categorical("width", (8, 16)), Fixed("depth", 1),
                                  Float("lr", 1e-3, 3e-2, log=True), Fixed("weight_decay", 1e-4)))
register_space(TINY_SPACE)


@pytest.fixture(scope="session")
def tiny_splits() -> Splits:
    return TINY_TASK.data()


@pytest.fixture(scope="session")
def tiny_task() -> Task:
    return TINY_TASK


def _postgres_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server started for this test session only (unix socket, random port)."""
    initdb, pg_ctl = _postgres_bin("initdb"), _postgres_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found; `make test` installs them")
    root = Path(tempfile.mkdtemp(prefix="eve-search-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run([*prefix, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-w", "-l", str(root / "server.log"), "-o",
                    f"-p {port} -k {sockets} -c listen_addresses=''", "start"], check=True, capture_output=True)
    try:
        subprocess.run([*prefix, _postgres_bin("createdb") or "createdb", "-h", str(sockets), "-p", str(port),
                        "-U", "postgres", "eve"], check=True, capture_output=True)
        yield f"postgresql+psycopg2://postgres@/eve?host={sockets}&port={port}"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
