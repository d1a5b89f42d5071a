"""searches/suite_cpu.py: the CPU of the processes a command starts, by kind, from /proc."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "searches" / "suite_cpu.py"
spec = importlib.util.spec_from_file_location("suite_cpu", SCRIPT)
suite_cpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite_cpu)

# A child that spins half a second of CPU, an `eve_search` process by its command line (its last argument);
# the parent's command line spells that name in two parts, so that the parent is another kind.
BURN = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_child_process_is_counted_under_its_kind(capsys):
    parent = (f"import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', {BURN!r}, 'eve' + '_search'])"
              ".returncode)")
    assert suite_cpu.main(["--interval", "0.05", "--", sys.executable, "-c", parent]) == 0
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and not line.startswith("| kind")}
    assert int(rows["eve-search commands and workers"][1]) == 1
    assert float(rows["eve-search commands and workers"][2]) >= 0.4  # the half second it spun (sampled)


def test_the_exit_code_is_the_commands_and_no_command_is_one_line(capsys):
    assert suite_cpu.main(["--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    with pytest.raises(SystemExit) as stop:
        suite_cpu.main([])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("argument command: expected a command to run after --")
