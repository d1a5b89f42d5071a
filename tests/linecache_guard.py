"""A race-free ``linecache.checkcache`` for the test processes.

``doctest`` calls ``linecache.checkcache()`` before every example (through ``pdb``'s ``reset``). On Python
3.11 (and other releases before CPython's fix for gh-126775) that function lists the cache's keys and then
reads each one, and a garbage collection in between can run a finalizer that drops a key: ``KeyError``.
SQLAlchemy 2.1 registers such finalizers for the ``__init__`` it generates for every mapped class, and
Optuna maps its migration scripts' classes each time a storage checks its schema, so a worker that has
opened SQLite studies can fail a doctest that has nothing to do with storage (CI saw it once, on
``Layout``'s doctest).

:func:`install` swaps in a version that skips a key that vanished, as CPython's fixed releases do; it
changes nothing else, so it is harmless where the stdlib is already fixed.
"""

from __future__ import annotations

import linecache
import os


def _checkcache(filename: str | None = None) -> None:
    """``linecache.checkcache`` that tolerates entries removed while it runs."""
    cache = linecache.cache
    names = list(cache.copy()) if filename is None else [filename]
    for name in names:
        entry = cache.get(name)
        if entry is None or len(entry) == 1:
            continue  # gone meanwhile, or a lazy entry that has not been read yet
        size, mtime, _lines, fullname = entry
        if mtime is None:
            continue  # registered by hand (generated code), never stale
        try:
            stat = os.stat(fullname)
        except OSError:
            cache.pop(name, None)
            continue
        if size != stat.st_size or mtime != stat.st_mtime:
            cache.pop(name, None)


def install() -> None:
    linecache.checkcache = _checkcache
