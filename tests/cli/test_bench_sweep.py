"""`eve-search bench sweep`: its plain in-process loop reaches exactly the engine's results."""

import pytest

from eve_search.benchmarks.sweep import plain_loop
from eve_search.cli import main
from eve_search.engine.sweep import SweepSettings, prepare_sweep


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_the_plain_loop_finds_the_scores_and_winner_of_the_sweep(tmp_path, optimizer):
    settings = SweepSettings(task="tiny", space="tiny", optimizer=optimizer, configs=9, rungs=(30, 90, 120),
                             backward_ratio=2.0)
    result = prepare_sweep(settings, storage=f"sqlite:///{tmp_path / 'r.db'}", checkpoint_dir=tmp_path).run()
    loop = plain_loop("tiny", optimizer, 9, 2.0, task="tiny", rungs=(30, 90, 120))
    assert loop["scores"] == {str(t["index"]): t["scores"] for t in result.trials}
    assert loop["winner"] == result.winner["index"]


def test_bad_bench_arguments_are_one_line(capsys):
    assert main(["bench", "sweep", "--rounds", "x"]) == 2
    assert "--rounds" in capsys.readouterr().err
