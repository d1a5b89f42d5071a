"""Shared fixtures: the tiny task of tests/tiny_task.py and a real, throwaway PostgreSQL server."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from eve_search.tasks import Splits, Task
from tests.tiny_task import TINY_TASK


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
