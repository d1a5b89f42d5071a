"""Helpers for tests and measurement scripts of eve-search (like ``optuna.testing``): not used by the package.

A leaf: imports nothing from eve_search.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["throwaway_postgres"]


def _postgres_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[Callable[[str], str]]:
    """A PostgreSQL server for this process only (unix socket, random port), removed afterwards.

    Yields:
        ``database(name)``: creates the database ``name`` and returns its SQLAlchemy URL.

    Raises:
        RuntimeError: the server binaries (initdb, pg_ctl, createdb) are not installed.

    Example (starts a PostgreSQL server, a few seconds, so not run as a doctest):
        >>> with throwaway_postgres() as database:  # doctest: +SKIP
        ...     url = database("sweeps")
        ...     url.startswith("postgresql+psycopg2://postgres@/sweeps?host=")
        True
    """
    binaries = {name: _postgres_bin(name) for name in ("initdb", "pg_ctl", "createdb")}
    missing = [name for name, path in binaries.items() if path is None]
    if missing:
        raise RuntimeError(f"PostgreSQL server binaries not found: {', '.join(missing)} (install postgresql)")
    initdb, pg_ctl, createdb = binaries["initdb"], binaries["pg_ctl"], binaries["createdb"]
    root = Path(tempfile.mkdtemp(prefix="eve-search-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        subprocess.run([*prefix, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True)
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-w", "-l", str(root / "server.log"), "-o",
                        f"-p {port} -k {sockets} -c listen_addresses=''", "start"], check=True, capture_output=True)

        def database(name: str) -> str:
            subprocess.run([*prefix, createdb, "-h", str(sockets), "-p", str(port), "-U", "postgres", name],
                           check=True, capture_output=True)
            return f"postgresql+psycopg2://postgres@/{name}?host={sockets}&port={port}"

        yield database
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
