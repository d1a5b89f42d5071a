import json
import subprocess
import sys

RANK = ["rank", "adult", "--space", "hp", "--seeds", "0-1", "--configs", "6", "--rungs", "40,120",
        "--backward-ratio", "2"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "eve_search.cli", *args], check=False, capture_output=True, text=True,
                          timeout=900)


def test_rank_trains_what_is_missing_then_reuses_the_store(tmp_path):
    first = run(*RANK, "--workdir", str(tmp_path), "--json", str(tmp_path / "first.json"))
    assert first.returncode == 0, first.stderr
    assert "Kendall tau-b at the first rung" in first.stdout and "0.663 +- 0.093" in first.stdout
    assert "agrees with adam's" in first.stdout
    document = json.loads((tmp_path / "first.json").read_text())
    # eve, adam and adamw, 2 seeds, rungs of 6 and 2 trials
    assert document["trained_trial_rungs"] == 3 * 2 * (6 + 2)
    report = document["spaces"]["hp"]
    assert set(report["comparisons"]) == {"eve vs adam", "eve vs adamw", "adam vs adamw",
                                          "adam vs adam (different training seeds)"}
    first_rung = report["comparisons"]["eve vs adam"]["first_rung"]
    assert len(first_rung["taus"]) == 2 and first_rung["configurations"] == [6, 6]
    assert -1 <= first_rung["mean"] <= 1 and first_rung["interval"][0] <= first_rung["interval"][1]
    assert report["comparisons"]["adam vs adam (different training seeds)"]["first_rung"]["pairs"] == [[0, 1], [1, 0]]
    assert set(report["comparisons"]["eve vs adam"]["per_rung"]) == {"40", "120"}
    assert len(report["eve_top_config_rank_under_reference"]) == 2

    second = run(*RANK, "--workdir", str(tmp_path), "--json", str(tmp_path / "second.json"))
    assert second.returncode == 0, second.stderr
    again = json.loads((tmp_path / "second.json").read_text())
    assert again["trained_trial_rungs"] == 0
    assert again["spaces"] == document["spaces"]


def test_rank_rejects_bad_input_in_one_line(tmp_path):
    for args, message in [
        (["--seeds", "3"], "give at least 2"),
        (["--seeds", "4-1"], "'4-1' is not a seed list"),
        (["--against", "eve"], "expected one reference optimizer other than eve"),
        (["--space", "hp,foo"], "unknown space 'foo'"),
    ]:
        result = run("rank", "adult", "--workdir", str(tmp_path), *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
