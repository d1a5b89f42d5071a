"""``eve-search lora`` end to end, in process, on a tiny setting; bad input is one line and exit 2."""

from __future__ import annotations

import json
import math

import pytest

from eve_search.cli import main

TINY = ["--optimizer", "eve,adam", "--lrs", "1e-2", "--seeds", "0", "--budget", "20", "--eval-every", "10",
        "--backward-ratio", "1.0", "--quiet"]


def test_command_runs_the_protocol_end_to_end(tmp_path):
    out = tmp_path / "lora.json"
    code = main(["lora", *TINY, "--storage", f"sqlite:///{tmp_path / 'r.db'}", "--json", str(out)])
    assert code == 0
    summary = json.loads(out.read_text())
    assert summary["task"] == "lora" and summary["metric"] == "loss" and summary["mode"] == "min"
    assert [r["optimizer"] for r in summary["runs"]] == ["eve", "adam"]
    for run in summary["runs"]:
        assert run["charged_units"] >= 20 and math.isfinite(run["test"]["loss"])
        assert run["kept_units"] in (r[0] for r in run["curve"])
    assert summary["methods"]["eve"]["lr_by_val"] == pytest.approx(1e-2)
    assert summary["paper_lora"]["eve"]["test"].startswith("1.240")
    # A second invocation without --resume refuses to mix into the stored protocol; with it, nothing reruns.
    assert main(["lora", *TINY, "--storage", f"sqlite:///{tmp_path / 'r.db'}"]) == 2
    assert main(["lora", *TINY, "--storage", f"sqlite:///{tmp_path / 'r.db'}", "--resume"]) == 0


def test_model_directory_with_real_weights_and_tokenizer_loads(tmp_path):
    """``--model`` on a directory written by save_pretrained (the small model and the byte tokenizer:
    the same loading path as a downloaded Qwen2.5 checkpoint)."""
    from eve_search.tasks.lora import byte_tokenizer, small_qwen2

    model_dir = tmp_path / "model"
    small_qwen2().save_pretrained(model_dir)
    byte_tokenizer().save_pretrained(model_dir)
    out = tmp_path / "lora.json"
    code = main(["lora", *TINY, "--model", str(model_dir), "--rank", "4", "--storage",
                 f"sqlite:///{tmp_path / 'r.db'}", "--json", str(out)])
    assert code == 0
    summary = json.loads(out.read_text())
    assert summary["task"].startswith("lora-") and "rank 4" in summary["dataset"]
    assert all(math.isfinite(r["test"]["loss"]) for r in summary["runs"])


@pytest.mark.parametrize("extra, fragment", [
    (["--model", "/nonexistent/model"], "argument --model: '/nonexistent/model' is not a directory"),
    (["--data", "/nonexistent/data.jsonl"], "argument --data"),
    (["--lrs", "0"], "argument --lrs"),
    (["--cost-mode", "measured", "--backward-ratio", "2"], "argument --backward-ratio"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, fragment):
    code = main(["lora", "--quiet", "--storage", f"sqlite:///{tmp_path / 'r.db'}", *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert fragment in err and err.count("\n") == 1


def test_model_directory_without_a_model_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = main(["lora", *TINY, "--model", str(tmp_path / "empty"), "--storage", f"sqlite:///{tmp_path / 'r.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and "Invalid model" in err and err.count("\n") == 1
