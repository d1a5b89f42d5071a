"""The results table shared by `eve-search mnist` and `eve-search lora`."""

from eve_search.cli.commands import lora, mnist
from eve_search.paper import PAPER_LORA, PAPER_MNIST

SUMMARY = {
    "settings": {"model": {"width": 8, "depth": 2}, "budget": 100, "eval_every": 10, "cost_mode": "calibrated"},
    "runs_finished": 3, "runs_requested": 4, "study": "s1", "backward_ratios": {"eve": 2.0, "adam": None},
    "methods": {
        "eve": {"lr_by_val": 0.001, "lr_by_test": 0.003, "wall_over_eve": 1.0, "by_lr": {
            "0.001": {"seeds": [0, 1], "val": 0.9, "test": 0.85, "test_std": 0.01, "wall_seconds": 1.5, "wall_std": 0.1},
            "0.003": {"seeds": [0], "val": 0.8, "test": 0.86, "test_std": None, "wall_seconds": 1.4, "wall_std": None}}},
        "adam": {"lr_by_val": None, "lr_by_test": None, "by_lr": {}},
    },
}


def _row(text: str, name: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"│ {name} "))
    return [cell.strip() for cell in line.strip("│").split("│")]


def test_mnist_table_shows_the_validation_choice_its_spread_and_the_papers_figures(capsys):
    mnist.print_table(SUMMARY, "Fashion-MNIST")
    text = capsys.readouterr().out
    eve = _row(text, "eve")
    assert eve[:8] == ["eve", "0.001", "2", "90.00%", "85.00% +- 1.00", "1.5", "1.00x", "0.003"]
    assert eve[8:] == ["86.00%", PAPER_MNIST["eve"]["lr"], PAPER_MNIST["eve"]["test"], PAPER_MNIST["eve"]["wall"]]
    assert _row(text, "adam")[1:5] == ["-", "0", "-", "-"]
    assert "Cost mode calibrated; backward/forward ratios: eve 2.00" in " ".join(text.split())


def test_lora_table_gives_wall_time_with_its_spread_and_the_papers_note(capsys):
    lora.print_table(SUMMARY, "bundled")
    text = capsys.readouterr().out
    eve = _row(text, "eve")
    assert eve[3:6] == ["0.900", "0.850 +- 0.010", "1.50 +- 0.10"] and eve[9] == PAPER_LORA["eve"]["lr"]
    assert "Paper: Qwen2.5-1.5B-Instruct on Alpaca" in " ".join(text.split())
