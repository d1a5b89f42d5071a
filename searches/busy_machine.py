"""A sweep's training time on a busy machine, with the old thread policy and the new one (issue 41).

For each load (quiet, then N processes spinning on the CPUs, which this script starts and stops) and
each thread policy, it runs

    eve-search adult --space hp --optimizer eve,adam --configs 48 --rungs 10,30,90 --backward-ratio 2

in a fresh work folder, reads each optimizer's training seconds from its --json, and prints one table:
the policy, the PyTorch threads the sweep ran, the load measured while it ran (the mean runnable count
of the machine, the sweep's own included, and the 1-minute load average at its end), each optimizer's
training seconds (median over --repeats) and its slowdown against the same policy's quiet run, and
whether every run found the same result (rungs, scores, winner) as the first.

The policies: ``old`` is PyTorch's default threads whatever the load (``EVE_SEARCH_THREADS=torch``, as
eve-search 0.2 ran), with OpenMP's wait policy chosen at start-up as before (passive when other
processes run at that moment); ``old-spin`` is the same with threads that spin while they wait, which
0.2 chose whenever its sample at start-up missed a load that comes in bursts; ``new`` is the default
(one thread per CPU the other processes leave free, see ``eve_search._openmp.intra_op_threads``).

    python searches/busy_machine.py                          # loads 0, 3 and 6, every policy, 3 repeats
    python searches/busy_machine.py --loads 0,3 --repeats 1 --configs 6 --rungs 10,30   # a quick look

Run it on an otherwise quiet machine: it says so when the load is 1 or more before it starts (its
"quiet" rows are then not quiet). Timings only: the results (scores, winners) do not depend on them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

POLICIES = {"old": {"EVE_SEARCH_THREADS": "torch"}, "old-spin": {"EVE_SEARCH_THREADS": "torch", "OMP_WAIT_POLICY": "ACTIVE"},
            "new": {}}
SHOW_THREADS = ("import os, sys, torch\n"
                "print('eve-search-threads', torch.get_num_threads(), file=sys.stderr, flush=True)\n")
TIMING_KEYS = ("wall_seconds", "training_seconds", "trained")
HANG_GUARD_S = 3600  # one sweep, however slow: a hang, not a measurement


class Spinners:
    """``count`` processes spinning on the CPUs while the block runs (each says it spins before it starts)."""

    CODE = ("import os, sys\nparent = int(sys.argv[1])\nos.write(1, b's')\nos.close(1)\n"
            "while os.getppid() == parent:\n    for _ in range(200_000):\n        pass\n")

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> Spinners:
        for _ in range(self.count):
            # A session of its own each, as other users' work: where the kernel shares the CPUs between
            # sessions first (autogroup), each spinner then weighs as one more process against the sweep.
            self.processes.append(subprocess.Popen([sys.executable, "-c", self.CODE, str(os.getpid())],
                                                   stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                                   start_new_session=True))
        for process in self.processes:
            if process.stdout.read(1) != b"s":
                self.__exit__()
                raise RuntimeError("a spinning process ended at start")
            process.stdout.close()
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()
        self.processes = []


class LoadSampler:
    """The machine's runnable count (/proc/loadavg), sampled every ``period`` seconds while the block runs."""

    def __init__(self, period: float = 0.25) -> None:
        self.period = period
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with open("/proc/loadavg") as handle:
                    self.samples.append(int(handle.read().split()[3].split("/")[0]) - 1)  # this script's own reader
            except (OSError, ValueError, IndexError):
                return
            self._stop.wait(self.period)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def run_once(args: argparse.Namespace, policy: str, folder: Path) -> dict[str, Any]:
    """One sweep of every optimizer under ``policy``; its training seconds, threads, load and results."""
    plugin = folder / "show_threads.py"
    plugin.write_text(SHOW_THREADS)
    out = folder / "out.json"
    command = [sys.executable, "-m", "eve_search", "adult", "--space", args.space, "--optimizer", args.optimizers,
               "--configs", str(args.configs), "--rungs", args.rungs, "--backward-ratio", str(args.backward_ratio),
               "--seed", str(args.seed), "--workdir", str(folder / "work"), "--json", str(out), "--quiet",
               "--plugin", str(plugin)]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "EVE_SEARCH_THREADS")}
    env.update(POLICIES[policy])
    with LoadSampler() as sampler:
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"eve-search exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    shown = [line.split() for line in done.stderr.splitlines() if line.startswith("eve-search-threads ")]
    document = json.loads(out.read_text())["optimizers"]
    return {"policy": policy, "process_seconds": seconds, "threads": int(shown[0][1]) if shown else None,
            "runnable": sampler.mean(), "load_1min": os.getloadavg()[0],
            "training": {name: doc["training_seconds"] for name, doc in document.items()},
            "results": {name: {k: v for k, v in doc.items() if k not in TIMING_KEYS} for name, doc in document.items()}}


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict[str, Any]], optimizers: list[str]) -> str:
    """The markdown table of every (load, policy): medians over the repeats."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["spinners"], row["policy"]), []).append(row)
    quiet = {(policy, name): statistics.median(r["training"][name] for r in runs)
             for (spinners, policy), runs in groups.items() if spinners == 0 for name in optimizers}
    first = rows[0]["results"]
    header = ["spinning processes", "policy", "threads", "runnable (mean)", "load 1-min (end)"]
    header += [f"{name} training s (x quiet)" for name in optimizers] + ["same results as the first run"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (spinners, policy), runs in sorted(groups.items(), key=lambda item: (item[0][0], list(POLICIES).index(item[0][1]))):
        cells = [str(spinners), policy, "/".join(sorted({str(r["threads"]) for r in runs})),
                 _fmt(statistics.median(r["runnable"] for r in runs if r["runnable"] is not None)
                      if any(r["runnable"] is not None for r in runs) else None),
                 _fmt(statistics.median(r["load_1min"] for r in runs))]
        for name in optimizers:
            seconds = statistics.median(r["training"][name] for r in runs)
            base = quiet.get((policy, name))
            ratio = f" ({seconds / base:.1f}x)" if base else ""
            cells.append(f"{seconds:.2f}{ratio}")
        cells.append("yes" if all(r["results"] == first for r in runs) else "no")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="0,3,6", help="spinning processes per load, comma-separated (0: quiet)")
    parser.add_argument("--policies", default="old,old-spin,new",
                        help="thread policies: old (PyTorch's default), old-spin (and spinning waits), new")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (load, policy); medians are shown")
    parser.add_argument("--space", default="hp")
    parser.add_argument("--optimizers", default="eve,adam")
    parser.add_argument("--configs", type=int, default=48)
    parser.add_argument("--rungs", default="10,30,90")
    parser.add_argument("--backward-ratio", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args(argv)
    loads = [int(text) for text in args.loads.split(",")]
    policies = args.policies.split(",")
    if any(n < 0 for n in loads) or not set(policies) <= set(POLICIES) or args.repeats < 1:
        parser.error(f"--loads {args.loads!r} / --policies {args.policies!r} / --repeats {args.repeats}: expected "
                     f"counts >= 0, policies among {','.join(POLICIES)}, and at least 1 repeat")
    before = os.getloadavg()[0]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cpus} CPUs, load {before:.2f} before the first run"
          + ("" if before < 1 else " (not quiet: the quiet rows include other work)"), flush=True)
    rows = []
    for repeat in range(args.repeats):
        for spinners in loads:
            with Spinners(spinners):
                order = policies if repeat % 2 == 0 else policies[::-1]  # no policy always runs first
                for policy in order:
                    with tempfile.TemporaryDirectory(prefix="busy-machine-") as folder:
                        row = run_once(args, policy, Path(folder))
                    row.update(spinners=spinners, repeat=repeat)
                    rows.append(row)
                    print(f"repeat {repeat} spinners {spinners} {policy}: threads {row['threads']}, runnable "
                          f"{_fmt(row['runnable'])}, " + ", ".join(f"{k} {v:.2f} s" for k, v in row["training"].items()),
                          flush=True)
    print()
    print(table(rows, args.optimizers.split(",")))
    if args.json is not None:
        args.json.write_text(json.dumps({"cpus": cpus, "load_before": before, "argv": sys.argv[1:], "runs": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
