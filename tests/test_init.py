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
