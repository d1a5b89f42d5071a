"""How PyTorch's OpenMP threads wait for work: passively (sleeping) on a CPU other processes are using.

Nothing here runs on import. The ``eve-search`` console script calls :func:`configure_openmp` first
thing (it owns its process), and the processes eve-search starts (the ``--jobs`` workers, the Optuna
driver's workers) are started inside :func:`child_environment`. A program that uses eve-search as a
library chooses for itself: call ``eve_search.configure_openmp()`` before it imports PyTorch.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["available_cpus", "child_environment", "configure_openmp", "cpu_is_shared"]

POLICIES = ("PASSIVE", "ACTIVE")


def cpu_is_shared(others_running: int, cpus: int) -> bool:
    """Whether PyTorch's OpenMP threads should wait passively: other processes are running right now
    on about half the CPUs or more. Only the present counts: a load average, or Linux's CPU pressure
    averaged over the last 10 s, still remembers a run that has just ended on a machine that is now
    idle (right after a two-worker sweep, the next sweep chose passive waiting and ran 1.7x slower).

    Args:
        others_running: runnable tasks of other processes now (``/proc/loadavg``'s count, this one excluded).
        cpus: the CPUs this process may run on.

    Returns:
        True when ``others_running`` is at least half of ``cpus`` (and at least one).

    Example:
        >>> cpu_is_shared(others_running=2, cpus=2)
        True
        >>> cpu_is_shared(others_running=0, cpus=2)
        False
        >>> cpu_is_shared(others_running=4, cpus=16)
        False
    """
    return others_running >= max(1.0, cpus / 2)


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform tells it).

    Returns:
        The count, at least 1.

    Example:
        >>> available_cpus() >= 1
        True
    """
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _others_running(samples: int = 5, interval: float = 0.002) -> int:
    """Other runnable tasks now (this process excluded): the median of a few reads of /proc/loadavg's
    runnable count, ~10 ms apart in all, so one passing task does not decide; 0 where it cannot be read."""
    counts = []
    for sample in range(samples):
        try:
            with open("/proc/loadavg") as handle:
                counts.append(max(0, int(handle.read().split()[3].split("/")[0]) - 1))
        except (OSError, ValueError, IndexError):
            return 0
        if sample + 1 < samples:
            time.sleep(interval)
    return sorted(counts)[len(counts) // 2]


def _chosen_policy(policy: str | None) -> str | None:
    if policy is not None:
        if policy not in POLICIES:
            raise ValueError(f"Invalid policy: {policy!r} (expected 'PASSIVE', 'ACTIVE' or None)")
        return policy
    # On a shared CPU, OpenMP threads wait passively (sleep) instead of spinning: with two CPU hogs,
    # 1000 units of one Adult trial took EvE 58 s spinning and 1.5 s passive. On a quiet machine
    # spinning is faster (the whole hp sweep: 7.6 s of training spinning, 21.1 s passive), so it is
    # kept there. It never changes a result.
    return "PASSIVE" if cpu_is_shared(_others_running(), cpus=available_cpus()) else None


def configure_openmp(policy: str | None = None) -> str | None:
    """Set ``OMP_WAIT_POLICY`` for this process, before PyTorch loads its OpenMP runtime.

    Args:
        policy: ``"PASSIVE"`` or ``"ACTIVE"`` to set it as given; ``None`` (default) to choose
            ``"PASSIVE"`` when other processes are running on about half the CPUs or more right now
            (see :func:`cpu_is_shared`), and to leave it unset otherwise.

    Returns:
        The policy in force afterwards (``None``: unset, OpenMP's default). A policy already in the
        environment is the user's choice and is kept. If PyTorch is already imported it is too late
        (OpenMP read the environment when it loaded): nothing is set and a ``RuntimeWarning`` says so.

    Example:
        >>> import eve_search
        >>> eve_search.configure_openmp()  # doctest: +SKIP
        'PASSIVE'
    """
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"Invalid policy: {policy!r} (expected 'PASSIVE', 'ACTIVE' or None)")
    if "OMP_WAIT_POLICY" in os.environ:
        return os.environ["OMP_WAIT_POLICY"]
    if "torch" in sys.modules:
        warnings.warn("configure_openmp() was called after PyTorch was imported: OpenMP has already read "
                      "its settings, so OMP_WAIT_POLICY was left unset (call it before importing torch)",
                      RuntimeWarning, stacklevel=2)
        return None
    chosen = _chosen_policy(policy)
    if chosen is not None:
        os.environ["OMP_WAIT_POLICY"] = chosen
    return chosen


@contextmanager
def child_environment() -> Iterator[str | None]:
    """While the block runs, the environment is what a new process of eve-search's should start with:
    ``OMP_WAIT_POLICY`` (the user's own value, else the rule of :func:`configure_openmp`) and glibc's
    malloc settings of :func:`eve_search._malloc.configure_malloc`; afterwards this process's environment
    is as it was. Processes started inside the block inherit them. Yields the OpenMP policy."""
    from eve_search._malloc import child_variables

    added = child_variables()  # (empty where the environment already holds a malloc setting)
    if "OMP_WAIT_POLICY" in os.environ:
        chosen = os.environ["OMP_WAIT_POLICY"]
    else:
        chosen = _chosen_policy(None)
        if chosen is not None:
            added["OMP_WAIT_POLICY"] = chosen
    os.environ.update(added)
    try:
        yield chosen
    finally:
        for name in added:
            os.environ.pop(name, None)
