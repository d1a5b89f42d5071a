"""The results table of a protocol command (``eve-search mnist``, ``eve-search lora``): one row per
optimizer, its learning rate chosen on validation beside the paper's rule (chosen on test) and the
paper's figures."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ProtocolTable", "print_protocol_table"]


@dataclass(frozen=True, kw_only=True)
class ProtocolTable:
    """How a protocol command's table reads: its title, columns, cell formats and footnote.

    Attributes:
        title: the table's title.
        metric: the short name in the column headers (``acc``, ``loss``).
        value: formats a metric value, with its standard deviation when one is given.
        wall: formats the wall seconds of a learning rate's runs (``several``: more than one seed).
        wall_column: the header of the wall-time column.
        paper_label: the header of the paper's learning-rate column.
        paper: the paper's figures per optimizer (``lr``, ``test``, ``wall``).
        note: the footnote, before the cost mode and the backward/forward ratios.
        tail: appended after the ratios.
        width: the console width when the output is not a terminal.
    """

    title: str
    metric: str
    value: Callable[..., str]
    wall: Callable[[Mapping[str, Any], bool], str]
    wall_column: str
    paper_label: str
    paper: Mapping[str, Mapping[str, str]]
    note: str
    tail: str = ""
    width: int


def print_protocol_table(summary: dict[str, Any], layout: ProtocolTable) -> None:
    """Print ``summary`` (:func:`eve_search.experiments.protocol.summarize`) as a table and its footnote.

    Args:
        summary: the protocol's summary.
        layout: how the table reads (:class:`ProtocolTable`).
    """
    from rich.console import Console
    from rich.table import Table

    s = summary["settings"]
    title, metric, value, wall, paper = layout.title, layout.metric, layout.value, layout.wall, layout.paper
    wall_column, paper_label, note, tail = layout.wall_column, layout.paper_label, layout.note, layout.tail
    table = Table(title=title)
    for column in ("optimizer", "lr (val)", "seeds", f"val {metric}", f"test {metric}", wall_column, "wall / EvE",
                   "lr (test)", f"test {metric}", paper_label, f"test {metric}", "wall s"):
        table.add_column(column, justify="left" if column == "optimizer" else "right")
    for optimizer, info in summary["methods"].items():
        val_lr, test_lr = info["lr_by_val"], info["lr_by_test"]
        by_val = info["by_lr"].get(f"{val_lr:g}") if val_lr is not None else None
        by_test = info["by_lr"].get(f"{test_lr:g}") if test_lr is not None else None
        figures = paper.get(optimizer, {"lr": "-", "test": "-", "wall": "-"})
        ratio = info.get("wall_over_eve")
        several = by_val is not None and len(by_val["seeds"]) > 1
        table.add_row(
            optimizer, f"{val_lr:g}" if val_lr is not None else "-", str(len(by_val["seeds"])) if by_val else "0",
            value(by_val["val"]) if by_val else "-",
            value(by_val["test"], by_val["test_std"] if several else None) if by_val else "-",
            wall(by_val, several) if by_val else "-", f"{ratio:.2f}x" if ratio else "-",
            f"{test_lr:g}" if test_lr is not None else "-", value(by_test["test"]) if by_test else "-",
            figures["lr"], figures["test"], figures["wall"])
    console = Console(width=None if Console().is_terminal else layout.width)
    console.print(table)
    ratios = summary["backward_ratios"]
    console.print(f"{note} Cost mode {s['cost_mode']}; backward/forward ratios: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items() if v is not None) + tail, highlight=False)
