"""OpenMP's wait policy: never changed by `import eve_search`; chosen by the console script, by
`eve_search.configure_openmp()` for library users, and passed to the processes eve-search starts."""

import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

import eve_search
from eve_search import _openmp


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return {**env, **extra}


@contextmanager
def _hogs():
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(_openmp.available_cpus() // 2 + 2)]
    try:
        time.sleep(0.5)  # the hogs are running
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _show(code: str, **extra: str) -> str:
    return subprocess.run([sys.executable, "-c", code], env=_env(**extra), capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def test_import_eve_search_leaves_the_wait_policy_unset_even_on_a_busy_cpu():
    with _hogs():
        shown = _show("import os, eve_search; print(os.environ.get('OMP_WAIT_POLICY'))")
    assert shown == "None"


def test_configure_openmp_chooses_passive_waiting_while_other_processes_hold_the_cpus():
    with _hogs():
        shown = _show("import os, eve_search; print(eve_search.configure_openmp(), os.environ['OMP_WAIT_POLICY'])")
    assert shown == "PASSIVE PASSIVE"


def test_configure_openmp_keeps_a_users_own_policy_and_sets_an_explicit_one():
    assert _show("import eve_search; print(eve_search.configure_openmp())", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
    assert _show("import os, eve_search; eve_search.configure_openmp('PASSIVE'); "
                 "print(os.environ['OMP_WAIT_POLICY'])") == "PASSIVE"
    with pytest.raises(ValueError, match="Invalid policy: 'sleepy'"):
        eve_search.configure_openmp("sleepy")


def test_configure_openmp_after_pytorch_loaded_warns_and_sets_nothing():
    shown = _show("import os, warnings, torch, eve_search\n"
                  "with warnings.catch_warnings(record=True) as caught:\n"
                  "    warnings.simplefilter('always')\n"
                  "    value = eve_search.configure_openmp('PASSIVE')\n"
                  "print(value, os.environ.get('OMP_WAIT_POLICY'), caught[0].category.__name__)")
    assert shown == "None None RuntimeWarning"


def test_the_console_script_chooses_passive_waiting_on_a_busy_cpu(tmp_path):
    plugin = tmp_path / "show_policy.py"
    plugin.write_text("import os\nprint('policy', os.environ.get('OMP_WAIT_POLICY'), flush=True)\nos._exit(0)\n")
    code = f"import sys; from eve_search.cli import console; sys.argv = ['eve-search', 'adult', '--space', 'hp', '--plugin', {str(plugin)!r}]; console()"
    with _hogs():
        done = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60,
                              cwd=tmp_path, check=False)
    assert "policy PASSIVE" in done.stdout, done.stderr[-500:]


def test_processes_started_in_the_child_environment_inherit_the_policy_and_this_process_keeps_its_own():
    before = os.environ.pop("OMP_WAIT_POLICY", None)
    try:
        with _hogs():
            with _openmp.child_environment() as chosen:
                seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('OMP_WAIT_POLICY'))"],
                                      capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        assert (chosen, seen) == ("PASSIVE", "PASSIVE")
        assert "OMP_WAIT_POLICY" not in os.environ
    finally:
        if before is not None:
            os.environ["OMP_WAIT_POLICY"] = before


def test_the_rule_counts_other_running_processes_against_half_the_cpus():
    assert eve_search.cpu_is_shared(1, cpus=2)
    assert not eve_search.cpu_is_shared(0, cpus=1)
    assert eve_search.cpu_is_shared(1, cpus=1)
    assert not eve_search.cpu_is_shared(7, cpus=16) and eve_search.cpu_is_shared(8, cpus=16)
