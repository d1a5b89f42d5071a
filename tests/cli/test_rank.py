import json

import pytest

from eve_search.cli import main

RANK = ["rank", "adult", "--task", "tiny", "--seeds", "0-1", "--configs", "6", "--rungs", "40,120",
        "--backward-ratio", "2"]


def test_rank_trains_what_is_missing_then_reuses_the_store(tmp_path, capsys):
    assert main([*RANK, "--workdir", str(tmp_path), "--json", str(tmp_path / "first.json")]) == 0
    printed = capsys.readouterr().out
    assert "Kendall tau-b at the first rung" in printed and "agrees with adam's" in printed
    document = json.loads((tmp_path / "first.json").read_text())
    assert document["task"] == "tiny"
    # eve, adam and adamw, 2 seeds, rungs of 6 and 2 trials
    assert document["trained_trial_rungs"] == 3 * 2 * (6 + 2)
    report = document["spaces"]["tiny"]
    assert set(report["comparisons"]) == {"eve vs adam", "eve vs adamw", "adam vs adamw",
                                          "adam vs adam (different training seeds)"}
    first_rung = report["comparisons"]["eve vs adam"]["first_rung"]
    assert len(first_rung["taus"]) == 2 and first_rung["configurations"] == [6, 6]
    assert -1 <= first_rung["mean"] <= 1 and first_rung["interval"][0] <= first_rung["interval"][1]
    assert report["comparisons"]["adam vs adam (different training seeds)"]["first_rung"]["pairs"] == [[0, 1], [1, 0]]
    assert set(report["comparisons"]["eve vs adam"]["per_rung"]) == {"40", "120"}
    assert len(report["eve_top_config_rank_under_reference"]) == 2

    assert main([*RANK, "--workdir", str(tmp_path), "--json", str(tmp_path / "second.json")]) == 0
    again = json.loads((tmp_path / "second.json").read_text())
    assert again["trained_trial_rungs"] == 0
    assert again["spaces"] == document["spaces"]


@pytest.mark.parametrize(("args", "message"), [
    (["--seeds", "3"], "give at least 2"),
    (["--seeds", "4-1"], "'4-1' is not a seed list"),
    (["--against", "eve"], "expected one reference optimizer other than eve"),
    (["--space", "hp,foo"], "unknown space 'foo'"),
    (["--task", "nope"], "argument --task: 'nope' is not a registered task"),
    (["--json", "/dev/null/x.json"], "argument --json: '/dev/null/x.json': '/dev/null' is not a directory"),
])
def test_rank_rejects_bad_input_in_one_line(tmp_path, capsys, args, message):
    assert main(["rank", "adult", "--workdir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
