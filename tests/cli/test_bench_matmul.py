"""`eve-search bench matmul`: the default and oneDNN paths of a Linear training step, side by side."""

import json

import pytest
import torch

from eve_search.benchmarks.matmul import measure_shape
from eve_search.cli import main


def test_a_shape_is_measured_on_every_path_and_compared_with_the_default():
    row = measure_shape(16, 8, 4, seconds=0.01)
    assert row["shape"] == [16, 8, 4]
    assert set(row["gflops"]) == {"default", "onednn", "onednn_forward"}
    assert all(rate > 0 for rate in row["gflops"].values())
    # oneDNN computes the same product: differences are rounding-sized, never a different answer
    assert all(0.0 <= d < 1e-3 for d in row["max_difference"].values())
    assert torch.backends.mkldnn.matmul.fp32_precision != "bf16"  # the switch is restored


def test_the_command_prints_a_table_and_writes_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("eve_search.benchmarks.matmul.SHAPES", (("tiny", 16, 8, 4),))
    out = tmp_path / "matmul.json"
    assert main(["bench", "matmul", "--threads", "1", "--seconds", "0.01", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "oneDNN's linear module (torch.utils.mkldnn) trains:" in printed and "tiny" in printed
    assert set(json.loads(out.read_text())["threads"]["1"]["tiny"]["gflops"]) == {"default", "onednn",
                                                                                   "onednn_forward"}


@pytest.mark.parametrize("argument", [["--threads", "0"], ["--seconds", "0"]])
def test_bad_arguments_are_one_line_errors(argument, capsys):
    assert main(["bench", "matmul", *argument]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and argument[0] in err and "Traceback" not in err
