"""`import eve_search` is light: PyTorch loads only when the API is used; worker servers start before it."""

import subprocess
import sys

import eve_search


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
            "from eve_search.cli import _main\n"
            "_main._start_workers_early(['adult', '--space', 'hp', '--jobs', '2'])\n"
            "children = subprocess.run(['pgrep', '-a', '-P', str(os.getpid())], capture_output=True, text=True).stdout\n"
            "print('torch' in sys.modules, 'forkserver' in children)\n")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["False", "True"]
