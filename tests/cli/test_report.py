import io

from rich.console import Console

from eve_search.cli._report import SweepProgress, print_summary, summary_json, time_ratio
from eve_search.engine.sweep import SweepResult, SweepSettings


def result(optimizer, wall, training):
    return SweepResult(task="adult", optimizer=optimizer, space="arch", seed=0, metric="accuracy", wall_seconds=wall,
                       training_seconds=training, charged_units=15000.0, cost_mode="calibrated",
                       backward_ratios={"64x1": 2.0},
                       best={"index": 3, "budget": 300, "score": 0.85, "val": {"accuracy": 0.85},
                             "test": {"accuracy": 0.84}, "config": {"width": 64, "depth": 1, "lr": 1e-3,
                                                                    "weight_decay": 5e-4}},
                       winner={"index": 3, "config": {}, "score": 0.85, "test": {"accuracy": 0.84}},
                       rungs=[{"budget": 100, "trials": 48, "promoted": 16}], trials=[], trained=48)


def test_time_ratio_compares_eve_with_adam():
    ratio = time_ratio([result("eve", 30.0, 20.0), result("adam", 20.0, 10.0)])
    assert ratio == {"wall_seconds": 1.5, "training_seconds": 2.0}
    assert time_ratio([result("eve", 1.0, 1.0)]) is None


def test_the_summary_table_and_json():
    results = [result("eve", 30.0, 20.0), result("adam", 20.0, 10.0)]
    console = Console(file=io.StringIO(), width=200)
    print_summary(results, "sqlite:///x.db", console=console)
    text = console.file.getvalue()
    assert "UCI Adult, space arch" in text and "0.8500" in text and "0.8400" in text
    assert "64x1, lr 1.00e-03, wd 5.0e-04 (300)" in text and "EvE/Adam time ratio: 1.50" in text
    document = summary_json(results, "sqlite:///x.db")
    assert document["task"] == "adult" and set(document["optimizers"]) == {"eve", "adam"}
    assert document["eve_over_adam_time"] == {"wall_seconds": 1.5, "training_seconds": 2.0}
    assert "optimizer" not in document["optimizers"]["eve"]


def test_progress_line_names_the_sweep_and_rung():
    progress = SweepProgress(SweepSettings(space="arch", optimizer="eve"), enabled=False)
    line = progress._line("training", 1, 3, 16, 0.8512).plain
    assert line.startswith("eve on adult/arch, seed 0 | rung 2/5 (budget 300): 3/16 trials | best val 0.8512")
