"""CPU seconds of a run's whole process tree.

The kernel adds a process's CPU time to its parent's when the parent waits for it, so
``getrusage(RUSAGE_CHILDREN)`` of the process that started a run, taken before and after it, holds
every descendant that was waited for (the runner makes itself a subreaper, so orphans are waited for
too). A process whose parent ignores SIGCHLD is reaped by the kernel without that: its time is lost to
``getrusage``. Ray's raylet does this to its worker processes, so those are sampled instead:
:class:`LostChildren` reads ``/proc`` every ``interval`` seconds while the run lives and keeps, per
such process, the last CPU time it saw (its own and its waited children's). The sum is a lower bound:
each sampled process may have run up to ``interval`` seconds after its last sample.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["LostChildren"]

SIGCHLD_BIT = 1 << 16  # SIGCHLD (17) in /proc/<pid>/status SigIgn
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its waited children), or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    # fields[1] is ppid; utime, stime, cutime, cstime are fields 14-17 of stat (11-14 here).
    return int(fields[1]), sum(int(v) for v in fields[11:15]) / TICKS


def _ignores_sigchld(pid: int) -> bool:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & SIGCHLD_BIT)
    except (OSError, ValueError):
        pass
    return False


class LostChildren:
    """Samples the descendants of ``root`` that their parent will not wait for (Linux; elsewhere 0)."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        self.root = root
        self.interval = interval
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peers-cpu", daemon=True)
        self.available = Path("/proc/self/stat").exists()
        if self.available:
            self._thread.start()

    def _sample(self) -> None:
        parents: dict[int, int] = {}
        times: dict[int, float] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                found = _stat(int(entry.name))
                if found is not None:
                    parents[int(entry.name)], times[int(entry.name)] = found
        tree = {self.root}
        grew = True
        while grew:
            grew = False
            for pid, ppid in parents.items():
                if ppid in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        ignoring: dict[int, bool] = {}
        for pid in tree - {self.root}:
            ppid = parents[pid]
            if ppid not in ignoring:
                ignoring[ppid] = _ignores_sigchld(ppid)
            if ignoring[ppid]:
                self.seen[pid] = max(self.seen.get(pid, 0.0), times[pid])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def stop(self) -> float:
        """Stop sampling; the CPU seconds seen in processes whose time ``getrusage`` will not report."""
        self._stop.set()
        if self.available:
            self._thread.join()
        return sum(self.seen.values())
