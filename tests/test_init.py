"""`import eve_search` chooses passive OpenMP waiting only while other processes hold the CPUs."""

import os
import subprocess
import sys
import time

import eve_search


def test_passive_waiting_is_chosen_when_other_processes_are_running_now():
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(eve_search._available_cpus() // 2 + 2)]
    try:
        time.sleep(0.5)  # the hogs are running
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        shown = subprocess.run([sys.executable, "-c", "import os, eve_search; print(os.environ.get('OMP_WAIT_POLICY'))"],
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert shown == "PASSIVE"


def test_a_users_own_wait_policy_is_kept():
    env = dict(os.environ, OMP_WAIT_POLICY="ACTIVE")
    shown = subprocess.run([sys.executable, "-c", "import os, eve_search; print(os.environ['OMP_WAIT_POLICY'])"],
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert shown == "ACTIVE"


def test_the_rule_counts_other_running_processes_against_half_the_cpus():
    assert eve_search.cpu_is_shared(1, cpus=2)
    assert not eve_search.cpu_is_shared(0, cpus=1)
    assert eve_search.cpu_is_shared(1, cpus=1)
    assert not eve_search.cpu_is_shared(7, cpus=16) and eve_search.cpu_is_shared(8, cpus=16)


def test_import_eve_search_leaves_pytorch_unloaded_until_the_api_is_used():
    code = ("import sys, eve_search; before = 'torch' in sys.modules; "
            "from eve_search import EvE, Trial, DEFAULT_RUNGS; "
            "print(before, 'torch' in sys.modules, EvE.__name__, Trial.__name__, DEFAULT_RUNGS[0])")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["False", "True", "EvE", "Trial", "100"]
    assert set(eve_search.__all__) <= set(dir(eve_search))
    with __import__("pytest").raises(AttributeError, match="no attribute 'nothing_here'"):
        eve_search.nothing_here  # noqa: B018


def test_a_sweep_with_jobs_starts_its_worker_server_before_pytorch_loads():
    code = ("import sys, subprocess, os\n"
            "from eve_search import cli\n"
            "cli._start_workers_early(['adult', '--space', 'hp', '--jobs', '2'])\n"
            "children = subprocess.run(['pgrep', '-a', '-P', str(os.getpid())], capture_output=True, text=True).stdout\n"
            "print('torch' in sys.modules, 'forkserver' in children)\n")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["False", "True"]
