import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "searches" / "calibration_spread.py"


def test_prints_every_architecture_and_a_spread_per_chunking(capsys):
    spec = importlib.util.spec_from_file_location("calibration_spread", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--space", "hp", "--optimizers", "adam", "--repeats", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ratios = [line for line in lines if re.search(r"256x2: \d+\.\d\d \d+\.\d\d$", line)]
    assert len(ratios) == 2  # hp has one architecture; chunks=1 and chunks=5
    assert all(float(r) > 0 for line in ratios for r in line.split(": ")[1].split())  # timing: no range on a busy machine
    spreads = [line for line in lines if "spread median" in line]
    assert [line.split()[1] for line in spreads] == ["chunks=1:", "chunks=5:"]
