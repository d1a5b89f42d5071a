"""Reproduce the paper's UCI Adult tables: 9 optimizers x 5 training seeds x both search spaces.

Every sweep is recorded in the results store (resumable: run the same command again to continue or
just to print), then each space gets the paper's table layout (method, sweep time, best validation
accuracy, mean +- std over seeds, sorted by time) with the paper's figures beside ours.

    python searches/adult_tables.py                      # everything: 90 sweeps
    python searches/adult_tables.py --optimizers eve,adam,adamw --seeds 0-4 --json tables.json

The paper's times are on a GPU; ours are on whatever machine runs this, so compare ratios, not
seconds. Sweeps run one after another in one process, each optimizer's sweeps interleaved by seed,
so that slow drifts of the machine touch every optimizer alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from eve_search.cli.args import add_store_options, default_storage_url, seed_list
from eve_search.dashboard import PAPER_ADULT_SWEEPS
from eve_search.optim import optimizer_names
from eve_search.cli._report import SweepProgress
from eve_search.engine.sweep import SweepSettings, prepare_sweep

# Paper, Appendix "UCI Adult": (time s mean, std, best val acc mean, std) per space and optimizer.
PAPER = PAPER_ADULT_SWEEPS


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default="hp,arch")
    parser.add_argument("--optimizers", default=",".join(optimizer_names()))
    parser.add_argument("--seeds", type=seed_list, default=seed_list("0-4"))
    add_store_options(parser, checkpoints=True)  # --storage and --workdir, with eve-search's own defaults
    parser.add_argument("--backward-ratio", type=float, help="pin the calibrated backward/forward ratio")
    parser.add_argument("--json", type=Path, help="write every sweep's summary here")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    storage = args.storage or default_storage_url(args.workdir)
    console = Console(width=None if Console().is_terminal else 140)
    collected: dict[str, dict[str, list[dict]]] = {}
    for space in args.spaces.split(","):
        results: dict[str, list[dict]] = {name: [] for name in args.optimizers.split(",")}
        for seed in args.seeds:
            for optimizer, runs in results.items():
                settings = SweepSettings(space=space, optimizer=optimizer, seed=seed,
                                         backward_ratio=args.backward_ratio)
                with SweepProgress(settings) as progress:
                    result = prepare_sweep(settings, storage=storage, checkpoint_dir=args.workdir / "checkpoints",
                                           resume=True).run(progress)
                runs.append(result.as_dict())
        collected[space] = results
        table = Table(title=f"UCI Adult, space {space}: mean +- std over seeds {args.seeds} (paper: GPU, 5 seeds)")
        for column in ("method", "time s", "training s", "best val acc", "paper time s", "paper best val acc",
                       "time / eve", "paper time / eve"):
            table.add_column(column, justify="left" if column == "method" else "right")
        eve_time = mean_std([r["wall_seconds"] for r in results["eve"]])[0] if results.get("eve") else None
        by_time = sorted(results.items(), key=lambda item: mean_std([r["wall_seconds"] for r in item[1]])[0])
        for optimizer, runs in by_time:
            time_m, time_s = mean_std([r["wall_seconds"] for r in runs])
            train_m, train_s = mean_std([r["training_seconds"] for r in runs])
            acc_m, acc_s = mean_std([r["best"]["score"] for r in runs])
            paper = PAPER[space].get(optimizer)
            table.add_row(
                optimizer, f"{time_m:.1f} +- {time_s:.1f}", f"{train_m:.1f} +- {train_s:.1f}",
                f"{acc_m:.4f} +- {acc_s:.4f}",
                f"{paper[0]:.1f} +- {paper[1]:.1f}" if paper else "-",
                f"{paper[2]:.4f} +- {paper[3]:.4f}" if paper else "-",
                f"{time_m / eve_time:.2f}" if eve_time else "-",
                f"{paper[0] / PAPER[space]['eve'][0]:.2f}" if paper else "-",
            )
        console.print(table)
    if args.json:
        args.json.write_text(json.dumps(collected, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
