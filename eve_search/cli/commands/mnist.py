"""``eve-search mnist``: the paper's MLP/MNIST protocol on MNIST-format data (Fashion-MNIST by default).

The tasks it trains (``"fashion-mnist"``, ``"mnist"``) are :mod:`eve_search.tasks.mnist`; the protocol
runner is :mod:`eve_search.experiments.protocol`.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from pathlib import Path
from typing import Any

import eve_search.cli.args as types
from eve_search.cli._common import check_frozen_ratio, check_weight_decay, storage_url, write_json
from eve_search.cli.args import MAX_MLP_PARAMETERS, UsageError, add_protocol_arguments
from eve_search.cli.commands._protocol import ProtocolTable, print_protocol_table
from eve_search.data._idx import FASHION_MNIST_DIR, VALIDATION_FRACTION, IdxError, load_idx_splits
from eve_search.paper import PAPER_MNIST
from eve_search.tasks import Splits, check_batch_size, get_task
from eve_search.tasks.mnist import MLP_CONFIG, mlp_weights

__all__ = ["PAPER_MNIST", "configure_parser", "mlp_weights", "run"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search mnist`` to ``parser``.

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search mnist")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--budget", "500", "--width", "64"])
        >>> args.budget, args.eval_every, args.width, args.depth
        (500, 250, 64, 2)
    """
    parser.description = (
        "The paper's MLP/MNIST protocol (784-1024-1024-10 MLP, batch 256, budget 3000 units, weight decay 5e-4, "
        "learning rates 1e-4..1e-2, 5 seeds, EvE and eight baselines) on MNIST-format data: Fashion-MNIST from "
        "the Debian package dataset-fashion-mnist by default, or any copy with --data-dir. Each run keeps the "
        "weights with the lowest validation loss (checked every --eval-every units) and reports their test "
        "accuracy; each method is shown at its own best learning rate chosen on validation, beside the paper's "
        "test-chosen rate and the paper's MNIST figures. Finished runs are stored and skipped on --resume.")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="a folder with the four MNIST-format files "
                        "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                        f"t10k-labels-idx1-ubyte, each optionally .gz); default: {FASHION_MNIST_DIR}")
    parser.add_argument("--dataset-name", metavar="NAME", help="what the --data-dir files are, when their "
                        "checksums are not a release eve-search knows (reports print it)")
    parser.add_argument("--subset", type=types.bounded_int(1, types.MAX_ROWS, "more rows than any MNIST-format file "
                                                            "holds"), metavar="N",
                        help="train on only the first N training rows (quick runs; validation and test stay whole)")
    parser.add_argument("--width", type=types.bounded_int(1, types.MAX_WIDTH, "the model must fit in memory"),
                        default=MLP_CONFIG["width"], help="hidden width (default 1024; the model may have at most "
                        f"{types.MAX_MLP_PARAMETERS:,} weights)")
    parser.add_argument("--depth", type=types.bounded_int(1, types.MAX_DEPTH, "the model must fit in memory"),
                        default=MLP_CONFIG["depth"], help=f"hidden layers (default 2, at most {types.MAX_DEPTH})")
    add_protocol_arguments(parser, budget=3000, eval_every=250)


def _dataset(args: argparse.Namespace) -> tuple[str, str, Splits]:
    """(task name, dataset label, splits) from --data-dir / --dataset-name."""
    directory = args.data_dir if args.data_dir is not None else FASHION_MNIST_DIR
    if args.data_dir is None and not directory.is_dir():
        raise UsageError(f"eve-search mnist: Fashion-MNIST is not installed at {directory} (install the Debian "
                         "package dataset-fashion-mnist, or pass --data-dir)")
    splits, read = load_idx_splits(directory)
    identified = read.identified_as
    named = args.dataset_name.strip() if args.dataset_name else None
    if named and identified and named.lower() != identified.lower():
        raise UsageError(f"eve-search mnist: argument --dataset-name: {named!r}, but the checksums of the files "
                         f"in {directory} are those of {identified}")
    label = identified or named or f"unidentified MNIST-format data in {directory}"
    task = "fashion-mnist" if label.lower() == "fashion-mnist" else "mnist"
    batch = get_task(task).batch_size
    # The smallest training file whose rows left after the validation split fill one minibatch.
    needed = next(n for n in itertools.count(batch) if n - round(n * VALIDATION_FRACTION) >= batch)
    try:
        check_batch_size(splits, batch, Path(directory), hint=(
            f"give a data set with at least {needed} training images ({VALIDATION_FRACTION:.0%} of the "
            f"{read.train_images.shape[0]} here are held out for validation)"))
    except ValueError as error:
        raise UsageError(f"eve-search mnist: {error}") from None
    return task, label, splits


class _Progress:
    """One live line on stderr: run k of n, its units, elapsed; finished runs are printed above it."""

    def __init__(self, label: str, budget: int, enabled: bool) -> None:
        from rich.console import Console

        self.label, self.budget, self.enabled = label, budget, enabled
        self.console = Console(stderr=True)
        self.live: Any = None
        self.started = time.perf_counter()
        self.current = "starting"

    def __enter__(self) -> _Progress:  # noqa: PYI034
        if self.enabled:
            from rich.live import Live

            self.live = Live(self._line(0.0), console=self.console, refresh_per_second=2, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def _line(self, units: float) -> str:
        return (f"{self.label} | {self.current} | {units:.0f}/{self.budget} units | "
                f"{time.perf_counter() - self.started:.0f}s")

    def __call__(self, event: str, payload: Any) -> None:
        if not self.enabled:
            return
        if event == "calibrating":
            self.current = f"measuring {payload}'s backward/forward ratio"
        elif event == "start":
            (optimizer, lr, seed), done, total = payload
            self.current = f"run {done + 1}/{total}: {optimizer} lr={lr:g} seed {seed}"
            payload = 0.0
        elif event == "finished":
            run = payload
            self.console.print(f"{run['optimizer']:>12} lr={run['lr']:<7g} seed {run['seed']}: val acc "
                               f"{run['val']['accuracy']:.4f}, test acc {run['test']['accuracy']:.4f} (snapshot at "
                               f"{run['kept_units']:.0f} units), {run['wall_seconds']:.1f}s for "
                               f"{run['charged_units']:.0f} units", highlight=False)
            payload = float(run["charged_units"])
        if self.live is not None:
            self.live.update(self._line(float(payload) if isinstance(payload, (int, float)) else 0.0))


def _pct(value: float | None, sd: float | None = None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{100 * value:.2f}%" + ("" if sd is None else f" +- {100 * sd:.2f}")


def print_table(summary: dict[str, Any], label: str) -> None:
    s = summary["settings"]
    print_protocol_table(summary, ProtocolTable(
        title=f"{label}: MLP {784}-{'-'.join([str(s['model']['width'])] * s['model']['depth'])}-10, "
                       f"budget {s['budget']} units, {summary['runs_finished']}/{summary['runs_requested']} runs "
                       f"finished (study {summary['study']})",
        metric="acc", value=_pct, wall=lambda by_val, several: f"{by_val['wall_seconds']:.1f}",
        wall_column="wall s (budget)", paper_label="paper MNIST: lr", paper=PAPER_MNIST, width=200,
        note=f"Dataset: {label}. Test accuracy: of the weights with the lowest validation loss (checked every "
             f"{s['eval_every']} units). lr (val): best mean validation accuracy over seeds; lr (test): the "
             "paper's rule. Wall s: time inside training to spend the budget, mean over seeds."))


def run(args: argparse.Namespace) -> int:
    """``eve-search mnist``; returns the exit code (bad input raises ``eve_search.cli.UsageError``).

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (trains every optimizer, rate and seed: not run as a doctest):
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--subset", "1000", "--seeds", "0"]))  # doctest: +SKIP
        0
    """
    from eve_search.experiments.protocol import ProtocolSettings, run_protocol, summarize

    check_frozen_ratio(args, "mnist")
    check_weight_decay(args, "mnist")
    weights = mlp_weights(args.width, args.depth)
    if weights > MAX_MLP_PARAMETERS:
        raise UsageError(f"eve-search mnist: argument --width: {args.width} with --depth {args.depth} is an MLP of "
                         f"{weights:,} weights, more than {MAX_MLP_PARAMETERS:,} ({4 * weights / 2**30:,.1f} GiB of "
                         "float32 weights, and EvE keeps about 13 copies of them: a population of 4 with Adam's "
                         "state)")
    # The store before the data loads: a store in memory or a read-only one is one line now (the
    # work directory is created here).
    storage = storage_url(args)
    try:
        task, label, splits = _dataset(args)
    except IdxError as error:
        raise UsageError(f"eve-search mnist: {error}") from None
    if args.subset is not None and args.subset > splits.x_train.shape[0]:
        raise UsageError(f"eve-search mnist: argument --subset: {args.subset} (the training split has "
                         f"{splits.x_train.shape[0]} rows)")
    if args.subset is not None and args.subset < 256:
        raise UsageError(f"eve-search mnist: argument --subset: {args.subset} (expected at least one batch, 256)")
    settings = ProtocolSettings(
        task, optimizers=tuple(args.optimizer), lrs=tuple(args.lrs), seeds=tuple(args.seeds), budget=args.budget,
        eval_every=args.eval_every, weight_decay=args.weight_decay,
        model={"width": args.width, "depth": args.depth}, cost_mode=args.cost_mode,
        backward_ratio=args.backward_ratio, subset=args.subset,
        data_dir=str(args.data_dir) if args.data_dir else None, dataset=label)
    with _Progress(f"{label} protocol", args.budget, enabled=not args.quiet) as progress:
        result = run_protocol(settings, storage=storage, resume=args.resume, data=splits, train=not args.report_only, progress=progress)
    summary = summarize(result)
    if args.json:  # written first: a closed standard output (`| head`) loses nothing
        write_json(args.json, "mnist", {**summary, "trained_now": result.trained, "wall_seconds": result.wall_seconds,
                                        "paper_mnist": PAPER_MNIST, "runs": result.runs})
    if not args.quiet:
        print_table(summary, label)
    return 0
