"""Where a ``--backend ray`` sweep's trial actors spend its time, from Ray's own task timeline.

    python searches/ray_timeline.py                              # Adult hp, 48 configurations, Adam
    python searches/ray_timeline.py --optimizer eve --json ray_timeline.json

One sweep (paper rungs 100/300/900/2,700/3,000, ratio pinned at 2.0, seed 0) runs through Ray Tune on a
local Ray instance with 2 CPUs, started before the sweep and left out of its time, as the
``eve-search`` command leaves out ``ray.init``. Afterwards ``ray.timeline()`` gives every actor method
Ray ran: the trial actors' construction (``__init__``: importing PyTorch and ``torch._dynamo``, which
every ``torch.optim`` optimizer imports when first built, and the task's data), Tune's training steps
(``train``: a rung's training and its evaluations), checkpoint saves and restores, and actor reuse
(``reset``). Per actor it prints the seconds in each, when the actor ran its first method (seconds after
the sweep's clock started), and the idle gaps between its methods (the round trips to the driver, and
the waits at each rung's decision).

With ``--cpu`` it also samples every process's CPU time (every 0.25 s, with psutil, which Ray installs)
and prints the CPU seconds each used while the sweep ran: the driver (this process: Tune's controller,
the store), the trial actors, and Ray's own processes.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import ray

from eve_search.engine.sweep import SweepSettings, prepare_sweep
from eve_search.integrations.ray import run_sweep_on_ray

RUNGS = (100, 300, 900, 2700, 3000)


def actor_times(events: list[dict[str, Any]], clock_start_us: float) -> dict[str, dict[str, Any]]:
    """Per actor (Ray's ``tid`` of a worker): seconds per method, the first method's start (seconds after
    ``clock_start_us``, in the timeline's microseconds) and the idle gaps between methods."""
    spans: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    methods: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for event in events:
        if event.get("ph") != "X" or not str(event.get("tid", "")).startswith("worker:"):
            continue
        tid = str(event["tid"])
        if event["name"] == "task:execute":
            spans[tid].append((float(event["ts"]), float(event["dur"])))
        elif not event["name"].startswith(("task:", "submit_task", "get_auto_filled_metrics")):
            methods[tid][event["name"]] += float(event["dur"]) / 1e6
    report = {}
    for tid, executed in spans.items():
        executed.sort()
        gaps = sorted((b[0] - (a[0] + a[1])) / 1e3 for a, b in zip(executed, executed[1:]))
        report[tid] = {"methods_s": {k: round(v, 3) for k, v in methods[tid].most_common()},
                       "calls": len(executed),
                       "first_method_at_s": round((executed[0][0] - clock_start_us) / 1e6, 2),
                       "busy_s": round(sum(d for _, d in executed) / 1e6, 2),
                       "idle_gaps_s": round(sum(gaps) / 1e3, 2),
                       "idle_gap_median_ms": round(gaps[len(gaps) // 2], 1) if gaps else 0.0,
                       "idle_gaps_over_100ms": [round(g) for g in gaps if g > 100]}
    return report


class CpuSampler:
    """CPU seconds (user + system) of every process on the machine, sampled in a thread from ``start()``
    to ``stop()``: a process that ends in between keeps its last sample."""

    def __init__(self, period: float = 0.25) -> None:
        import psutil

        self._psutil, self._period = psutil, period
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict[int, tuple[str, float]]:
        found = {}
        for process in self._psutil.process_iter(["cmdline", "name"]):
            try:
                times = process.cpu_times()
            except (self._psutil.Error, OSError):
                continue
            command = " ".join(process.info["cmdline"] or []) or str(process.info["name"])
            found[process.pid] = (command, times.user + times.system)
        return found

    def _run(self) -> None:
        while not self._done.wait(self._period):
            self._last.update(self._sample())

    def start(self) -> None:
        self._first = {pid: cpu for pid, (_, cpu) in self._sample().items()}
        self._thread.start()

    def stop(self) -> list[tuple[float, int, str]]:
        """(CPU seconds since ``start``, pid, command line) of each process that used over 0.05 s, most first."""
        self._done.set()
        self._thread.join()
        self._last.update(self._sample())
        used = [(cpu - self._first.get(pid, 0.0), pid, command) for pid, (command, cpu) in self._last.items()]
        return sorted((row for row in used if row[0] > 0.05), reverse=True)


def _role(pid: int, command: str) -> str:
    if pid == os.getpid():
        return "driver (Tune's controller, the store)"
    if command.startswith("ray::"):
        return f"Ray worker {command.split()[0]}"
    return f"other: {os.path.basename(command.split()[0]) if command else '?'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", default="hp")
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--configs", type=int, default=48)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--cpu", action="store_true", help="also print each process's CPU seconds during the sweep")
    args = parser.parse_args(argv)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="eve-ray-timeline-") as folder:
            root = Path(folder)
            settings = SweepSettings(space=args.space, optimizer=args.optimizer, configs=args.configs, rungs=RUNGS,
                                     backward_ratio=2.0, seed=0)
            sweep = prepare_sweep(settings, storage=f"sqlite:///{root / 'results.db'}", checkpoint_dir=root / "ck")
            sampler = CpuSampler() if args.cpu else None
            if sampler is not None:
                sampler.start()
            started = time.time()
            result = run_sweep_on_ray(sweep)
            ended = time.time()
            cpu = sampler.stop() if sampler is not None else []
            timeline = root / "timeline.json"
            ray.timeline(filename=str(timeline))
            events = json.loads(timeline.read_text())
    finally:
        ray.shutdown()
    actors = actor_times(events, started * 1e6)
    figures = {"sweep_s": round(result.wall_seconds, 2), "training_s": round(result.training_seconds, 2),
               "trained": result.trained, "actors": actors}
    print(f"sweep {figures['sweep_s']} s, training {figures['training_s']} s (both actors), "
          f"{result.trained} trial-rungs")
    for tid, actor in actors.items():
        print(f"actor {tid[7:19]}: first method at {actor['first_method_at_s']} s, busy {actor['busy_s']} s in "
              f"{actor['calls']} calls, idle between them {actor['idle_gaps_s']} s (median "
              f"{actor['idle_gap_median_ms']} ms; over 100 ms: {actor['idle_gaps_over_100ms']})")
        print("    " + ", ".join(f"{name} {seconds} s" for name, seconds in actor["methods_s"].items()))
    if cpu:
        total = sum(seconds for seconds, _, _ in cpu)
        print(f"CPU seconds while the sweep ran ({ended - started:.2f} s of wall time, {total:.2f} CPU s in all, "
              f"{total / (ended - started):.2f} CPUs on average):")
        for seconds, pid, command in cpu:
            print(f"  {seconds:6.2f} s  pid {pid:<7} {_role(pid, command)}")
        figures["cpu_seconds"] = [{"seconds": round(seconds, 2), "pid": pid, "role": _role(pid, command)}
                                  for seconds, pid, command in cpu]
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
