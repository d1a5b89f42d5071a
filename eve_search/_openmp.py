"""How many OpenMP threads PyTorch runs, and how they wait for work, on a CPU other processes are using.

Two intra-op threads meet at every parallel operation. When the operating system has given one
thread's CPU to another process, its sibling waits a whole time slice for it, at every one of the
many small operations of a step (EvE runs more of them than Adam): on a busy machine a trial then
trains many times slower than its share of the CPU. One thread has no sibling to wait for. So where
other processes take the CPUs, PyTorch runs one thread per CPU they leave free, and at least one
(:func:`intra_op_threads`); on a quiet machine it keeps its own default (two threads can be faster
there). Threads that still wait wait passively (sleeping) on a shared CPU (:func:`cpu_is_shared`).

Nothing here runs on import. The ``eve-search`` console script calls :func:`configure_openmp` first
thing (it owns its process), and the processes eve-search starts (the ``--jobs`` workers, the Optuna
driver's workers) are started inside :func:`child_environment`. A program that uses eve-search as a
library chooses for itself: call ``eve_search.configure_openmp()`` before it imports PyTorch. A user's
own ``OMP_NUM_THREADS`` or ``OMP_WAIT_POLICY`` is always kept; ``EVE_SEARCH_THREADS=torch`` keeps
PyTorch's default thread count whatever the load (the policy of eve-search 0.2).
"""

from __future__ import annotations

import glob
import math
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from eve_search._checks import InputError

__all__ = ["THREAD_POLICIES", "THREADS_VARIABLE", "available_cpus", "child_environment", "configure_openmp",
           "cpu_is_shared", "cpus_taken", "cpus_taken_now", "intra_op_threads"]

POLICIES = ("PASSIVE", "ACTIVE")
THREADS_VARIABLE = "EVE_SEARCH_THREADS"
"""The environment variable that chooses the thread policy: ``auto`` (default) or ``torch``."""
THREAD_POLICIES = ("auto", "torch")
"""``auto``: :func:`intra_op_threads` by the load; ``torch``: PyTorch's default whatever the load."""


def cpu_is_shared(others_running: int, cpus: int) -> bool:
    """Whether PyTorch's OpenMP threads should wait passively: other processes are running right now
    on about half the CPUs or more. Only the present counts: a load average, or Linux's CPU pressure
    averaged over the last 10 s, still remembers a run that has just ended on a machine that is now
    idle (right after a two-worker sweep, the next sweep chose passive waiting and ran slower; the figures
    are in searches/README.md, "Figures behind each change (issue 11)").

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


def cpus_taken(others_running: float, load_average: float) -> float:
    """How many CPUs other processes are using, as the thread rule counts them: the larger of their
    runnable count right now and the 1-minute load average. The count now misses work that comes in
    bursts (a sample between two bursts reads 0); the load average misses work that has just started,
    and remembers for a minute work that has just ended, which costs at most PyTorch's second thread
    on a quiet machine, where the other error costs a collapse.

    Args:
        others_running: runnable tasks of other processes now (``/proc/loadavg``'s count, this one excluded).
        load_average: the 1-minute load average (``os.getloadavg()[0]``).

    Returns:
        The larger of the two, at least 0.

    Example:
        >>> cpus_taken(others_running=0, load_average=3.3)
        3.3
        >>> cpus_taken(others_running=6, load_average=0.4)
        6
    """
    return max(0, others_running, load_average)


def intra_op_threads(taken: float, cpus: int, default: int) -> int:
    """PyTorch's intra-op threads for a process that trains beside other work: one per CPU the others
    leave free, within PyTorch's own ``default``, and at least one.

    On two CPUs, any other process at work (``taken`` of 0.5 or more) leaves one thread: two threads
    that wait for each other at every small operation, on CPUs the OS also gives to others, train many
    times slower than one (``searches/busy_machine.py`` measures it; the figures are on the results page).

    Args:
        taken: CPUs other processes are using (:func:`cpus_taken`); rounded to the nearest whole CPU.
        cpus: the CPUs this process may run on (:func:`available_cpus`).
        default: PyTorch's default thread count (its physical cores, within the affinity).

    Returns:
        ``min(default, cpus - round(taken))``, at least 1.

    Example:
        >>> intra_op_threads(taken=0.2, cpus=2, default=2)  # a quiet machine: PyTorch's default
        2
        >>> intra_op_threads(taken=3.3, cpus=2, default=2)  # a busy one: one thread
        1
        >>> intra_op_threads(taken=4, cpus=16, default=8), intra_op_threads(taken=11, cpus=16, default=8)
        (8, 5)
    """
    return max(1, min(int(default), int(cpus) - math.floor(max(0.0, float(taken)) + 0.5)))


def cpus_taken_now() -> float:
    """How many CPUs other processes are using now, by :func:`cpus_taken`'s rule: the larger of their
    runnable count (sampled a few times) and the 1-minute load average.

    Returns:
        A number of CPUs, at least 0.

    Example:
        >>> cpus_taken_now() >= 0
        True
    """
    return cpus_taken(_others_running(), _load_average())


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


def _load_average() -> float:
    """The 1-minute load average; 0 where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def _default_threads(cpus: int) -> int:
    """PyTorch's default intra-op thread count, without importing it: its physical cores (CPUs that share
    a core count once), within the ``cpus`` this process may use; ``cpus`` where the topology is unknown."""
    cores = set()
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/core_cpus_list") or \
            glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list"):
        try:
            with open(path) as handle:
                cores.add(handle.read().strip())
        except OSError:
            continue
    return max(1, min(cpus, len(cores) or cpus))


def _thread_policy() -> str:
    """``EVE_SEARCH_THREADS``, checked: ``auto`` when unset or empty."""
    chosen = os.environ.get(THREADS_VARIABLE, "").strip() or "auto"
    if chosen not in THREAD_POLICIES:
        raise InputError(f"Invalid {THREADS_VARIABLE}: {chosen!r} (expected 'auto' or 'torch')")
    return chosen


def _chosen_threads() -> int | None:
    """The intra-op thread count to set in ``OMP_NUM_THREADS``: fewer than PyTorch's default when other
    processes take the CPUs; None to leave PyTorch its default (a quiet machine, or ``EVE_SEARCH_THREADS=torch``)."""
    if _thread_policy() == "torch":
        return None
    cpus = available_cpus()
    default = _default_threads(cpus)
    threads = intra_op_threads(cpus_taken_now(), cpus=cpus, default=default)
    return threads if threads < default else None


def _chosen_policy(policy: str | None) -> str | None:
    if policy is not None:
        if policy not in POLICIES:
            raise InputError(f"Invalid policy: {policy!r} (expected 'PASSIVE', 'ACTIVE' or None)")
        return policy
    # On a shared CPU, OpenMP threads wait passively (sleep) instead of spinning: with CPU hogs beside
    # it, a trial trains many times faster so. On a quiet machine spinning is faster, so it is kept there
    # (the figures: searches/README.md, "Figures behind each change (issue 11)"). It never changes a result.
    return "PASSIVE" if cpu_is_shared(_others_running(), cpus=available_cpus()) else None


def configure_openmp(policy: str | None = None) -> str | None:
    """Set ``OMP_NUM_THREADS`` and ``OMP_WAIT_POLICY`` for this process, before PyTorch loads its OpenMP
    runtime.

    The thread count: where other processes take the CPUs, one thread per CPU they leave free, at least
    one (:func:`intra_op_threads`); otherwise, or with ``EVE_SEARCH_THREADS=torch``, it is left unset
    (PyTorch's default). A count already in ``OMP_NUM_THREADS`` (or ``MKL_NUM_THREADS``, which PyTorch
    also reads) is the user's choice and is kept. The choice is made once, here: threads do not come
    and go with the load during a run, so a run is the same throughout (a thread count can change the
    last bits of a reduction; ``OMP_NUM_THREADS`` pins it across machines and runs).

    Args:
        policy: ``"PASSIVE"`` or ``"ACTIVE"`` to set the wait policy as given; ``None`` (default) to
            choose ``"PASSIVE"`` when other processes are running on about half the CPUs or more right
            now (see :func:`cpu_is_shared`), and to leave it unset otherwise.

    Returns:
        The wait policy in force afterwards (``None``: unset, OpenMP's default). A policy already in the
        environment is the user's choice and is kept. If PyTorch is already imported it is too late
        (OpenMP read the environment when it loaded): nothing is set and a ``RuntimeWarning`` says so.

    Raises:
        InputError: ``policy`` or ``EVE_SEARCH_THREADS`` is not one of the accepted values.

    Example:
        >>> import eve_search
        >>> eve_search.configure_openmp()  # doctest: +SKIP
        'PASSIVE'
    """
    if policy is not None and policy not in POLICIES:
        raise InputError(f"Invalid policy: {policy!r} (expected 'PASSIVE', 'ACTIVE' or None)")
    _thread_policy()  # checked first, whatever is already set
    if "torch" in sys.modules:
        if "OMP_WAIT_POLICY" in os.environ:
            return os.environ["OMP_WAIT_POLICY"]
        warnings.warn("configure_openmp() was called after PyTorch was imported: OpenMP has already read "
                      "its settings, so OMP_WAIT_POLICY and OMP_NUM_THREADS were left unset (call it before "
                      "importing torch)", RuntimeWarning, stacklevel=2)
        return None
    if "OMP_NUM_THREADS" not in os.environ and "MKL_NUM_THREADS" not in os.environ:  # (else the user's)
        threads = _chosen_threads()
        if threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(threads)
    if "OMP_WAIT_POLICY" in os.environ:
        return os.environ["OMP_WAIT_POLICY"]
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
