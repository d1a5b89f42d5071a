"""glibc's malloc settings of eve-search's own processes: large freed blocks are reused, not given back.

Each check runs in a fresh interpreter, so this process's allocator is never changed, and looks at
where a block the size of an Adult validation activation comes from, and at the page faults of a
validation-sized forward pass (the behaviour the settings exist for), never at time.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from eve_search import _malloc, _openmp

pytestmark = pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"),
                                reason="the settings are glibc's")

# In a fresh interpreter: own_mapping() is how many bytes glibc mapped for a new 3.3 MB block (a
# 3,256 x 256 float activation of the Adult MLP's validation pass) instead of taking them from the heap;
# faults_per_pass() the minor page faults of one forward pass over 3,256 rows after a warm-up.
PROBE = textwrap.dedent("""
    import ctypes, functools, resource
    class _Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
    _LIBC = ctypes.CDLL(None)
    _LIBC.mallinfo2.restype = _Info
    def own_mapping():
        import torch
        before = _LIBC.mallinfo2().hblkhd
        block = torch.empty(3256, 256)
        return _LIBC.mallinfo2().hblkhd - before
    @functools.cache
    def _net_and_rows():  # torch is imported by the probes that use it, not by those that read settings
        import torch
        from eve_search.tasks.models import mlp
        return mlp(107, [256, 256], 2, generator=torch.Generator().manual_seed(0)), torch.randn(3256, 107)
    def faults_per_pass(rounds=20):
        import torch
        net, rows = _net_and_rows()
        with torch.inference_mode():
            for _ in range(3):
                net(rows)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(rounds):
                net(rows)
        return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / rounds
""")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    return {**env, **extra}


def _run(code: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE + textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-800:]
    return done.stdout.strip()


def test_large_blocks_come_from_the_heap_and_are_reused_once_configured():
    plain = _run("print(own_mapping())", _clean_env())
    assert int(plain) >= 3256 * 256 * 4  # glibc's default: a block of its own, given back when freed
    shown = _run("""
        from eve_search._malloc import configure_malloc
        print(configure_malloc(), own_mapping(), faults_per_pass(), configure_malloc())
    """, _clean_env())
    configured, mapped, faults, again = shown.split()
    assert configured == again == "True" and int(mapped) == 0
    # Two 3.3 MB activations are about 1,600 pages, faulted in afresh by many passes with glibc's defaults;
    # kept in the heap, a pass faults in next to none of them.
    assert float(faults) < 200


def test_a_users_own_malloc_setting_is_kept():
    shown = _run("""
        from eve_search._malloc import child_variables, configure_malloc
        print(configure_malloc(), child_variables())
    """, _clean_env(MALLOC_ARENA_MAX="2"))
    assert shown == "False {}"
    shown = _run("""
        from eve_search._malloc import configure_malloc
        print(configure_malloc())
    """, _clean_env(GLIBC_TUNABLES="glibc.malloc.trim_threshold=0"))
    assert shown == "False"


def test_processes_started_in_the_child_environment_start_with_the_settings(monkeypatch):
    for name in [n for n in os.environ if n.startswith("MALLOC_")] + ["GLIBC_TUNABLES"]:
        monkeypatch.delenv(name, raising=False)
    with _openmp.child_environment():
        shown = subprocess.run([sys.executable, "-c", PROBE + "import os\nprint(os.environ['MALLOC_TRIM_THRESHOLD_'], "
                                "own_mapping(), faults_per_pass())"], capture_output=True, text=True, timeout=120,
                               check=True).stdout
    threshold, mapped, faults = shown.split()
    assert int(threshold) == _malloc.TRIM_THRESHOLD and int(mapped) == 0 and float(faults) < 200
    assert not any(name.startswith("MALLOC_") for name in os.environ)  # this process's environment as it was


def test_the_console_script_configures_its_own_process(tmp_path):
    plugin = tmp_path / "show_faults.py"
    plugin.write_text(PROBE + "import os\nprint('mapped', own_mapping(), flush=True)\nos._exit(0)\n")
    code = ("import sys; from eve_search.cli import console; "
            f"sys.argv = ['eve-search', 'adult', '--space', 'hp', '--plugin', {str(plugin)!r}]; console()")
    done = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=False)
    assert "mapped" in done.stdout, done.stderr[-800:]
    assert int(done.stdout.split("mapped")[1].split()[0]) == 0
