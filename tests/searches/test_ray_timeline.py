import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("ray")
SCRIPT = Path(__file__).resolve().parents[2] / "searches" / "ray_timeline.py"
spec = importlib.util.spec_from_file_location("ray_timeline", SCRIPT)
ray_timeline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ray_timeline)


def _span(tid, name, start_ms, length_ms):
    return {"ph": "X", "tid": tid, "name": name, "ts": start_ms * 1000.0, "dur": length_ms * 1000.0}


def test_each_actor_gets_its_methods_first_start_busy_time_and_idle_gaps():
    events = [
        _span("worker:aa", "task:execute", 1500, 2000), _span("worker:aa", "__init__", 1500, 1990),
        _span("worker:aa", "task:execute", 3502, 300), _span("worker:aa", "train", 3502, 295),
        _span("worker:aa", "task:execute", 3950, 50), _span("worker:aa", "save", 3950, 45),
        _span("worker:bb", "task:execute", 1600, 100), _span("worker:bb", "__init__", 1600, 100),
        _span("driver", "task:execute", 0, 9000),  # not an actor
        {"ph": "i", "tid": "worker:aa", "name": "marker", "ts": 0.0},  # not a span
    ]
    report = ray_timeline.actor_times(events, clock_start_us=1000 * 1000.0)
    assert set(report) == {"worker:aa", "worker:bb"}
    actor = report["worker:aa"]
    assert actor["calls"] == 3 and actor["first_method_at_s"] == 0.5 and actor["busy_s"] == 2.35
    assert actor["methods_s"] == {"__init__": 1.99, "train": 0.295, "save": 0.045}
    assert actor["idle_gaps_s"] == 0.15 and actor["idle_gap_median_ms"] == 148.0
    assert actor["idle_gaps_over_100ms"] == [148]
    assert report["worker:bb"]["idle_gaps_s"] == 0.0 and report["worker:bb"]["idle_gaps_over_100ms"] == []


def test_the_cpu_sampler_counts_a_process_that_ended_before_it_stopped():
    import subprocess
    import sys

    import time

    from tests.load import hang_guard

    sampler = ray_timeline.CpuSampler(period=0.05)
    sampler.start()
    # The child spins for 0.6 s of CPU, says so, and ends once the sampler has seen all of it (events: no
    # sleep decides whether a sample falls before its end, however slow the machine).
    busy = ("import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
            "print('done', flush=True)\nsys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    with hang_guard():
        assert child.stdout.readline() == "done\n"
        while sampler._last.get(child.pid, ("", 0.0))[1] < 0.6:
            time.sleep(0.01)
        child.stdin.close()
        assert child.wait() == 0  # ended: only the samples taken while it ran know it
    used = sampler.stop()
    mine = [seconds for seconds, pid, _ in used if pid == child.pid]
    assert len(mine) == 1 and 0.5 <= mine[0] <= 2.0
    assert all(seconds > 0.05 for seconds, _, _ in used)
    assert [seconds for seconds, _, _ in used] == sorted((seconds for seconds, _, _ in used), reverse=True)
