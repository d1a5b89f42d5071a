"""Hostile input, round two (issue 41, item 6): the cases that need a process of their own.

SIGTERM and SIGHUP mid-sweep (in process and with ``--jobs 2``) act as Ctrl-C: one line, every recorded
rung in the store's main file alone (no ``-wal``/``-shm`` left), exit code 128 + the signal's number.
A standard output closed by its reader (``| head -c 10``) loses no ``--json``; an ASCII terminal shows a
unicode path escaped instead of failing after the sweep; a current folder deleted before the command
starts is one line. Every wait here is on an event (a pipe, the process's end); each timeout is only a
hang guard, sized for a machine ten times slower.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a dozen fresh interpreters: `make test` starts this file first
ROOT = Path(__file__).resolve().parents[2]
TINY = ["sweep", "--task", "tiny", "--plugin", "tests.tiny_task", "--configs", "6", "--rungs", "30,90",
        "--backward-ratio", "2", "--quiet"]
HANG_GUARD = 600  # seconds: a sweep here takes a few; only a hang reaches this


def main_file_rungs(database: Path, scratch: Path) -> tuple[int, int]:
    """(rung results, trials) that a copy of the store's main file alone holds."""
    copy = scratch / "copy.db"
    shutil.copyfile(database, copy)
    connection = sqlite3.connect(copy)
    try:
        results = connection.execute("SELECT COUNT(*) FROM trial_intermediate_values").fetchone()[0]
        trials = connection.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        return results, trials
    finally:
        connection.close()


def recorded_rungs(database: Path) -> int:
    """The rung results the store holds, read through SQLite (its -wal included, if any)."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return connection.execute("SELECT COUNT(*) FROM trial_intermediate_values").fetchone()[0]
    finally:
        connection.close()


def default_signals() -> None:
    """For ``preexec_fn``: the child handles SIGINT, SIGTERM and SIGHUP as a command started from a terminal
    does, even where this test run ignores them (a background job, ``nohup``) and a child would inherit that."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=HANG_GUARD, check=False, preexec_fn=default_signals, **kwargs)


# Each signal once and each way of running once: both signals take one handler, and both ways one store.
@pytest.mark.parametrize(("name", "jobs"), [("SIGTERM", []), ("SIGHUP", ["--jobs", "2"])],
                         ids=["SIGTERM-in-process", "SIGHUP-jobs2"])
def test_a_signal_mid_sweep_acts_as_ctrl_c(name, jobs, tmp_path):
    """The signal arrives right after the first rung's decisions are stored, as `kill` or `timeout` would send it."""
    result = python(f"""
        import os, signal, sys
        from eve_search.cli import console
        from eve_search.engine.store import SweepStore

        recorded = SweepStore.eliminate

        def eliminate(self, indices):
            recorded(self, indices)
            os.kill(os.getpid(), signal.{name})

        SweepStore.eliminate = eliminate
        sys.argv = ["eve-search", *{TINY!r}, "--workdir", {str(tmp_path)!r}, *{jobs!r}]
        sys.exit(console())
    """)
    number = getattr(signal, name)
    assert result.returncode == 128 + number, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [f"eve-search: interrupted by {name}; everything recorded so far is kept (continue with --resume)"]
    database = tmp_path / "results.db"
    assert not (tmp_path / "results.db-wal").exists() and not (tmp_path / "results.db-shm").exists()
    results, trials = main_file_rungs(database, tmp_path)
    assert trials == 6 and results >= 6  # the first rung's six results, at least, in the main file alone
    assert results == recorded_rungs(database)
    # And the sweep continues from there.
    done = python(f"""
        import sys
        from eve_search.cli import console
        sys.argv = ["eve-search", *{TINY!r}, "--workdir", {str(tmp_path)!r}, "--resume", *{jobs!r}]
        sys.exit(console())
    """)
    assert done.returncode == 0, done.stderr
    assert main_file_rungs(database, tmp_path) == (6 + 2, 6)


PAUSING_PLUGIN = '''
import os
from eve_search.tasks import get_task, register_task
import dataclasses
import tests.tiny_task

calls = [0]
tiny = get_task("tiny")


def metrics(model, x, y):
    calls[0] += 1
    if calls[0] == int(os.environ["PAUSE_AT"]):
        os.write(int(os.environ["READY_FD"]), b"x")  # the test sends its signal now
        os.read(int(os.environ["GO_FD"]), 1)  # and this call waits until the test lets it go
    return tiny.metrics(model, x, y)


register_task(dataclasses.replace(tiny, name="paused", metrics=metrics))
'''


def test_sigterm_from_outside_while_a_trial_trains_keeps_every_recorded_rung(tmp_path):
    """`kill -TERM` from another process, at a moment the sweep chose: once 4 results are recorded."""
    plugin = tmp_path / "paused_plugin.py"
    plugin.write_text(PAUSING_PLUGIN)
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    command = [sys.executable, "-m", "eve_search.cli", *TINY, "--workdir", str(tmp_path / "w")]
    command[command.index("tiny")] = "paused"
    command[command.index("tests.tiny_task")] = str(plugin)
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True, pass_fds=(ready_write, go_read),
                               env={**os.environ, "PAUSE_AT": "5", "READY_FD": str(ready_write), "GO_FD": str(go_read)},
                               preexec_fn=default_signals)
    os.close(ready_write)
    os.close(go_read)
    try:
        assert os.read(ready_read, 1) == b"x"  # blocks until the fifth evaluation starts
        process.send_signal(signal.SIGTERM)
        os.close(go_write)  # (the interrupted call would also end here, once it reads the pipe's end)
        _, err = process.communicate(timeout=HANG_GUARD)
    finally:
        os.close(ready_read)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, err
    assert err.strip().splitlines() == ["eve-search: interrupted by SIGTERM; everything recorded so far is kept "
                                        "(continue with --resume)"]
    database = tmp_path / "w" / "results.db"
    assert not Path(f"{database}-wal").exists() and not Path(f"{database}-shm").exists()
    results, _ = main_file_rungs(database, tmp_path)
    assert results == 4 == recorded_rungs(database)


def test_a_closed_standard_output_still_writes_the_json(tmp_path):
    """`eve-search ... --json x.json | head -c 10`: the reader is gone before the table is printed."""
    out = tmp_path / "x.json"
    command = [sys.executable, "-m", "eve_search.cli", *[a for a in TINY if a != "--quiet"],
               "--workdir", str(tmp_path / "w"), "--json", str(out)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # as `head -c 0` would
    err = process.stderr.read()
    process.wait(timeout=HANG_GUARD)
    assert process.returncode == 128 + signal.SIGPIPE, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith(
        "standard output was closed by its reader; stopped printing (everything recorded is kept)")
    assert json.loads(out.read_text())["schema"] == "eve-search/sweep"


def test_an_ascii_terminal_and_a_unicode_path_print_escapes_and_write_the_json(tmp_path):
    workdir = tmp_path / "runs-\u00fc\u4e2d"
    out = workdir / "out.json"
    result = subprocess.run([sys.executable, "-m", "eve_search.cli", *[a for a in TINY if a != "--quiet"],
                             "--workdir", str(workdir), "--json", str(out)], cwd=ROOT, capture_output=True,
                            timeout=HANG_GUARD, check=False, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0, result.stderr.decode("ascii", "replace")
    assert b"Traceback" not in result.stderr
    assert b"runs-\\xfc\\u4e2d" in result.stdout  # the store's path, escaped
    assert json.loads(out.read_text(encoding="utf-8"))["storage"].endswith("runs-\u00fc\u4e2d/results.db")


def test_a_current_folder_deleted_before_the_command_starts_is_one_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f'cd {str(gone)!r} && rmdir {str(gone)!r} && exec "$0" -m eve_search.cli "$@"'
    result = subprocess.run(["sh", "-c", script, sys.executable, *TINY], capture_output=True, text=True,
                            timeout=HANG_GUARD, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "eve-search: the current folder no longer exists (it was deleted or moved); change to an existing folder "
        "and run the command again"]
