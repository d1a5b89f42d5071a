import json

import pytest

from eve_search.cli import main


def _args(tmp_path, *extra):
    return ["bench", "synthetic", "--functions", "sphere,zakharov", "--dims", "2", "--seeds", "0-3", "--budget", "40",
            "--storage", f"sqlite:///{tmp_path / 'runs.db'}", *extra]


def test_the_command_runs_a_tiny_selection_and_resumes(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(_args(tmp_path, "--json", str(out))) == 0
    printed = capsys.readouterr().out
    assert "paper W/T/L" in printed and "33/20/17" in printed and "zakharov" in printed
    document = json.loads(out.read_text())
    assert document["runs_now"] == 16 and document["runs_recorded"] == 16
    assert [(c["function"], c["n"], c["seeds"]) for c in document["cells"]] == [
        ("sphere", 2, list(range(4))), ("zakharov", 2, list(range(4)))]
    assert set(document["cells"][0]) >= {"eve", "adam", "p_eve_better_holm", "p_adam_better_holm", "verdict"}
    assert document["paper_win_tie_loss"]["sphere"] == {"win": 0, "tie": 0, "loss": 10}
    assert sum(document["total"].values()) == 2
    # The same command again runs nothing and reports the same cells.
    assert main(_args(tmp_path, "--json", str(out), "--quiet")) == 0
    again = json.loads(out.read_text())
    assert again["runs_now"] == 0 and again["cells"] == document["cells"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--functions", "sphre"], "argument --functions: unknown function 'sphre'"),
        (["--dims", "1"], "argument --dims: '1' is not a dimension"),
        (["--seeds", "3-1"], "argument --seeds: '3-1' is not a seed list"),
        (["--budget", "-5"], "argument --budget: '-5' must be"),
        (["--alpha", "1.5"], "argument --alpha: 1.5"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys, extra, message):
    assert main(["bench", "synthetic", "--storage", f"sqlite:///{tmp_path / 'x.db'}", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eve-search bench synthetic: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_report_only_on_an_empty_store_says_so(tmp_path, capsys):
    assert main(_args(tmp_path, "--report-only")) == 2
    err = capsys.readouterr().err
    assert err.startswith("eve-search bench synthetic: argument --report-only: no cell") and err.count("\n") == 1


def test_a_store_that_cannot_be_opened_is_named(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'missing' / 'dir' / 'runs.db'}"
    assert main(["bench", "synthetic", "--storage", url, "--dims", "2", "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eve-search bench synthetic: argument --storage: cannot open the results store")
    assert err.count("\n") == 1
