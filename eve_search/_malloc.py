"""Where glibc's ``malloc`` gets the memory of a large tensor: keep freed blocks for the next one.

glibc serves a request above its mmap threshold (128 KiB at first) with fresh pages from the kernel and
gives them back when the block is freed; it raises that threshold once it sees such a block freed, but
a request of the same size still lands on fresh pages, and freed memory at the top of the heap is handed
back to the kernel whenever it exceeds twice the threshold. A validation pass of the Adult MLP allocates
two 3,256 x 256 activations (3.3 MB each) and frees them again. How often that lands on fresh zeroed
pages depends on where the heap happens to end (in a fresh process, three runs of six faulted in none),
but in a process that trains between passes it was most of the time: 2,020-2,370 minor faults per pass
on average against 15-18 with the settings below, and 6.8-7.5 ms per pass against 4.4 ms (median of 250
passes between training steps, 2026-11-26, this 2-core VM, load 0.7). In a whole 480-configuration
sweep: 1.05-1.16 million faults against 0.26-0.33 million. Training steps (batch 256, 256 KB
activations) were not affected either way.

:func:`configure_malloc` fixes the threshold at 32 MiB (the most glibc's own rule would ever raise it
to) and the trim threshold at 64 MiB (twice that, glibc's own ratio), so blocks up to 32 MiB come from
and go back to the heap, and up to 64 MiB of freed heap is kept for reuse. It changes no result: only
where memory comes from. A process keeps up to 64 MiB more resident than it is using at that moment.

Nothing here runs on import. The ``eve-search`` console script calls :func:`configure_malloc` (it owns
its process), and the processes it starts itself (the ``--jobs`` workers' fork server, the Optuna
driver's workers) get :func:`child_variables` in their environment, which glibc reads when a process
starts. Ray's actors are left as Ray starts them: passing the variables through a runtime environment
made each actor start 0.5-0.9 s later here (2.8-3.1 s against 2.1-2.3 s, three starts each), far more
than it would save. A user's own ``MALLOC_*`` or ``glibc.malloc`` setting is kept. Elsewhere than glibc
it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "child_variables", "configure_malloc"]

MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD

# mallopt's parameter numbers (glibc's malloc.h), and the variables glibc reads at start for the same.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_VARIABLES = {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD, "MALLOC_TRIM_THRESHOLD_": TRIM_THRESHOLD}

_configured = False


def _on_glibc() -> bool:
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _user_chose() -> bool:
    """The environment already says how malloc should behave (the user's choice, kept)."""
    return (any(name.startswith("MALLOC_") for name in os.environ)
            or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""))


def configure_malloc() -> bool:
    """Make this process's ``malloc`` keep freed blocks of up to 32 MiB for reuse (see the module).

    Returns:
        True when the settings are in force (set now or earlier by this function); False where the
        C library is not glibc, or where the environment already holds a ``MALLOC_*`` or
        ``glibc.malloc`` setting (the user's choice: nothing is changed).

    Example:
        >>> from eve_search._malloc import configure_malloc
        >>> configure_malloc() in (True, False)
        True
    """
    global _configured
    if _configured:
        return True
    if not _on_glibc() or _user_chose():
        return False
    try:
        libc = ctypes.CDLL(None)
        done = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    except (OSError, AttributeError):
        return False
    _configured = done
    return done


def child_variables() -> dict[str, str]:
    """The environment variables that give a new process the settings of :func:`configure_malloc` from
    its start (empty where they would not apply, or where the user chose their own)."""
    if not _on_glibc() or _user_chose():
        return {}
    return {name: str(value) for name, value in _VARIABLES.items()}
