"""OpenMP's threads and wait policy: never changed by `import eve_search`; chosen by the console script, by
`eve_search.configure_openmp()` for library users, and passed to the processes eve-search starts."""

import os
import subprocess
import sys

import pytest

import eve_search
from eve_search import _openmp
from tests.load import HANG_GUARD_S, Spinners

CHOSEN = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "EVE_SEARCH_THREADS")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CHOSEN}
    return {**env, **extra}


def _hogs():
    """Other processes on about half the CPUs or more, spinning before the block starts (each says so)."""
    return Spinners(_openmp.available_cpus() // 2 + 2)


def _show(code: str, **extra: str) -> str:
    return subprocess.run([sys.executable, "-c", code], env=_env(**extra), capture_output=True, text=True,
                          check=True, timeout=HANG_GUARD_S).stdout.strip()


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


def _console(tmp_path, plugin_code: str, **extra: str) -> subprocess.CompletedProcess:
    """``eve-search adult --space hp --plugin P`` in a new process, P printing what it sees, then ending it."""
    plugin = tmp_path / "show.py"
    plugin.write_text(plugin_code)
    code = ("import sys; from eve_search.cli import console; sys.argv = ['eve-search', 'adult', '--space', 'hp', "
            f"'--plugin', {str(plugin)!r}]; sys.exit(console())")
    return subprocess.run([sys.executable, "-c", code], env=_env(**extra), capture_output=True, text=True,
                          timeout=HANG_GUARD_S, cwd=tmp_path, check=False)


def test_the_console_script_trains_on_one_thread_that_waits_passively_while_other_processes_hold_the_cpus(
        tmp_path):
    show = ("import os, torch\nprint('seen', os.environ.get('OMP_WAIT_POLICY'), torch.get_num_threads(), "
            "os.environ.get('OMP_NUM_THREADS'), flush=True)\nos._exit(0)\n")
    with Spinners(_openmp.available_cpus() + 1):
        done = _console(tmp_path, show)
    assert done.stdout.strip() == "seen PASSIVE 1 1", done.stderr[-500:]


def test_configure_openmp_keeps_a_users_thread_count_and_pytorchs_default_on_request():
    show = "import os, eve_search; eve_search.configure_openmp(); print(os.environ.get('OMP_NUM_THREADS'))"
    with Spinners(_openmp.available_cpus() + 1):
        assert _show(show) == "1"
        assert _show(show, OMP_NUM_THREADS="2") == "2"  # the user's own count is kept
        assert _show(show, EVE_SEARCH_THREADS="torch") == "None"  # the old policy: PyTorch's default, whatever the load


def test_an_unknown_thread_policy_is_one_line_and_exit_code_2(tmp_path):
    done = _console(tmp_path, "raise SystemExit('the plugin must not be reached')\n", EVE_SEARCH_THREADS="many")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "eve-search: Invalid EVE_SEARCH_THREADS: 'many' (expected 'auto' or 'torch')\n"
    with pytest.raises(ValueError, match=r"^Invalid EVE_SEARCH_THREADS: 'many' \(expected 'auto' or 'torch'\)$"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("EVE_SEARCH_THREADS", "many")
            eve_search.configure_openmp()


def test_on_a_quiet_machine_pytorch_keeps_its_default_threads(monkeypatch):
    monkeypatch.delenv("EVE_SEARCH_THREADS", raising=False)
    monkeypatch.setattr(_openmp, "available_cpus", lambda: 2)
    monkeypatch.setattr(_openmp, "_default_threads", lambda cpus: 2)
    for others, load, expected in [(0, 0.3, None), (0, 0.6, 1), (1, 0.0, 1), (3, 6.2, 1)]:
        monkeypatch.setattr(_openmp, "_others_running", lambda: others)
        monkeypatch.setattr(_openmp, "_load_average", lambda: load)
        assert _openmp._chosen_threads() == expected, (others, load)
    monkeypatch.setenv("EVE_SEARCH_THREADS", "torch")
    assert _openmp._chosen_threads() is None  # whatever the load


def test_the_thread_rule_leaves_one_thread_per_cpu_the_others_leave_free():
    assert [_openmp.intra_op_threads(taken, cpus=2, default=2) for taken in (0, 0.49, 0.5, 1, 3.3, 15)] == \
        [2, 2, 1, 1, 1, 1]
    assert [_openmp.intra_op_threads(taken, cpus=16, default=8) for taken in (0, 8, 12, 15.4, 40)] == [8, 8, 4, 1, 1]
    assert _openmp.intra_op_threads(0, cpus=1, default=1) == 1
    assert _openmp.cpus_taken(0, 3.3) == 3.3 and _openmp.cpus_taken(6, 0.4) == 6


def test_processes_started_in_the_child_environment_inherit_the_policy_and_this_process_keeps_its_own():
    before = os.environ.pop("OMP_WAIT_POLICY", None)
    try:
        with _hogs():
            with _openmp.child_environment() as chosen:
                seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('OMP_WAIT_POLICY'))"],
                                      capture_output=True, text=True, check=True, timeout=HANG_GUARD_S).stdout.strip()
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
