"""Where a command's CPU time goes, by kind of process: the test suite's pytest workers, Ray's actors and
daemons, the `eve-search` subprocesses, PostgreSQL, Chromium, Sphinx, ...

Runs the command and samples ``/proc`` every half second. Every process that starts after the command
does is counted (on a quiet machine, those are the command's), with the user + system CPU it used up
to its last sample; a process that lives less than a sample is missed. Linux only.

Usage (the figures in searches/README.md, "The test suite's time")::

    python searches/suite_cpu.py -- .venv/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# (what the command line holds, the kind it is counted as), first match wins
_KINDS = [
    ("exec(eval(sys.stdin", "pytest-xdist worker"),
    ("default_worker.py", "Ray worker (actors, tasks)"),
    ("ray::", "Ray worker (actors, tasks)"),
    ("raylet", "Ray daemons"),
    ("gcs_server", "Ray daemons"),
    ("ray/dashboard", "Ray daemons"),
    ("log_monitor", "Ray daemons"),
    ("runtime_env", "Ray daemons"),
    ("ray/autoscaler", "Ray daemons"),
    ("monitor.py", "Ray daemons"),
    ("-m pytest", "pytest (a run of its own)"),
    ("bin/pytest", "pytest (a run of its own)"),
    ("sphinx", "Sphinx"),
    ("postgres", "PostgreSQL"),
    ("initdb", "PostgreSQL"),
    ("chrom", "Chromium"),
    ("while os.getppid() == parent", "busy-machine spinners (tests/load.py)"),
    ("eve_search", "eve-search commands and workers"),
    ("eve-search", "eve-search commands and workers"),
    ("python", "other Python"),
]


def kind(command_line: str) -> str:
    """The kind of a process, from its command line.

    Example:
        >>> kind("/usr/bin/python -m eve_search.cli sweep --task tiny")
        'eve-search commands and workers'
        >>> kind("/opt/ray/core/src/ray/raylet/raylet --node_ip_address=127.0.0.1")
        'Ray daemons'
    """
    for needle, name in _KINDS:
        if needle in command_line:
            return name
    return "other"


def _sample(seen: dict[tuple[int, int], dict], since_ticks: int) -> None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
            fields = stat[stat.rindex(")") + 2:].split()
            cpu, started = (int(fields[11]) + int(fields[12])) / _TICK, int(fields[19])
            if started < since_ticks:
                continue
            record = seen.get((int(entry), started))
            if record is None:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    line = handle.read().replace(b"\0", b" ").decode(errors="replace")
                record = seen[(int(entry), started)] = {"command": line, "cpu": 0.0}
            record["cpu"] = max(record["cpu"], cpu)
        except (OSError, ValueError, IndexError):
            continue  # ended between the listing and the read


def _boot_ticks_now() -> int:
    with open("/proc/uptime") as handle:
        return int(float(handle.read().split()[0]) * _TICK)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default 0.5)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("argument command: expected a command to run after --")
    if not os.path.isdir("/proc/self"):
        parser.error("no /proc here: this script reads Linux's process table")
    seen: dict[tuple[int, int], dict] = {}
    since, start = _boot_ticks_now(), time.monotonic()
    process = subprocess.Popen(command)
    while process.poll() is None:
        _sample(seen, since)
        time.sleep(args.interval)
    wall = time.monotonic() - start
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for record in seen.values():
        if record["command"]:  # an empty command line: a process already gone, or a kernel thread
            total = totals[kind(record["command"])]
            total[0] += 1
            total[1] += record["cpu"]
    cpu = sum(cpu for _, cpu in totals.values())
    print(f"\n{wall:.0f} s wall, {cpu:.0f} CPU-s in processes started since ({os.cpu_count()} CPUs); "
          f"exit code {process.returncode}\n")
    print("| kind | processes | CPU-s | share |\n|---|---:|---:|---:|")
    for name, (count, seconds) in sorted(totals.items(), key=lambda item: -item[1][1]):
        print(f"| {name} | {count:.0f} | {seconds:.1f} | {seconds / cpu if cpu else 0:.0%} |")
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
