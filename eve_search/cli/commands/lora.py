"""``eve-search lora``: the paper's LoRA protocol (Appendix "LoRA/Alpaca") through the shared protocol runner.

Every optimizer x learning rate x seed is one :class:`~eve_search.engine.trial.Trial` of a ``lora`` task
trained to the same evaluation-cost budget (B = 300); the adapter weights with the lowest
validation loss are kept and their test loss is reported; each method is shown at its own best
learning rate, beside the paper's Qwen2.5-1.5B / Alpaca figures. See :mod:`eve_search.experiments.protocol`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import eve_search.cli.args as types
from eve_search.cli._common import check_frozen_ratio, check_weight_decay, storage_url, write_json
from eve_search.cli.args import UsageError, add_protocol_arguments
from eve_search.cli.commands._protocol import ProtocolTable, print_protocol_table
from eve_search.paper import PAPER_LORA

__all__ = ["PAPER_LORA", "configure_parser", "run"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search lora`` to ``parser``.

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search lora")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--rank", "4", "--seeds", "0"])
        >>> args.rank, args.seeds, args.budget, args.model
        (4, [0], 300, None)
    """
    parser.description = (
        "The paper's LoRA protocol (Appendix 'LoRA/Alpaca'): LoRA adapters on the query, value and output "
        "projections and the MLP of a frozen causal language model, loss on response tokens only, batch 2, "
        "budget 300 units, weight decay 5e-4, learning rates 1e-4..1e-2, 5 seeds, EvE (anchored at the "
        "adapter's own initialization) and eight baselines. Each run keeps the adapter with the lowest "
        "validation loss (16-example probe, checked every --eval-every units) and reports its loss on the "
        "64-example test sample. Default: a small Qwen2 model built in code (pretrained weights bundled) on the "
        "bundled instruction set; --model loads real local weights (e.g. Qwen2.5-1.5B-Instruct), on the GPU "
        "when there is one. Finished runs are stored and skipped on --resume.")
    parser.add_argument("--model", type=Path, metavar="DIR", help="a local model directory (save_pretrained "
                        "format, with its tokenizer), loaded with local_files_only; default: the small built-in "
                        "Qwen2 model")
    parser.add_argument("--data", type=Path, metavar="PATH", help="instruction records as JSON lines or a JSON "
                        "list with 'instruction', 'input', 'output' (Alpaca's format); default: the bundled set")
    parser.add_argument("--rank", type=types.bounded_int(1, types.MAX_RANK, "no model here is that wide"), metavar="R",
                        help="LoRA rank (default: 32 with --model, as in the paper; 8 for the small model, whose "
                             "hidden width is 64); at most the model's hidden size")
    parser.add_argument("--alpha", type=types.bounded_float(0.0, types.MAX_ALPHA, "alpha / rank scales every adapter's "
                                                            "output", low_open=True),
                        metavar="A", help=f"LoRA alpha (default: 2 x rank; at most {types.MAX_ALPHA:g})")
    parser.add_argument("--max-length", type=types.bounded_int(2, types.MAX_TOKENS, "the longest context of the models "
                                                                "this runs; memory grows with it"),
                        default=512, metavar="TOKENS", help=f"token cap per example (default 512, from 2 to "
                                                            f"{types.MAX_TOKENS:,})")
    add_protocol_arguments(parser, budget=300, eval_every=25)


def _hidden_size(model: Path | None) -> int | None:
    """The hidden size of the small built-in model, or the one ``model``'s config.json states (None
    when it states none that can be read; the model's own loading then decides)."""
    if model is None:
        from eve_search.tasks.lora._model import SmallModelShape

        return SmallModelShape().hidden_size
    from eve_search.tasks.lora._model import check_model_dir

    check_model_dir(model)  # no named pipe or device among its files: the read below cannot block
    try:
        with open(model / "config.json", "rb") as file:
            text = file.read(1 << 20)
        config = json.loads(text)
    except (OSError, ValueError, RecursionError):
        return None
    value = config.get("hidden_size", config.get("d_model")) if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _task_name(settings: Any) -> str:
    """``lora`` for the default setting; otherwise ``lora-<digest>`` of what defines the task, so
    that two different models or data sets never share a results study."""
    if settings.model_path is None and settings.data_path is None and repr(settings) == repr(type(settings)()):
        return "lora"
    key = json.dumps([os.path.abspath(settings.model_path) if settings.model_path else None,
                      os.path.abspath(settings.data_path) if settings.data_path else None, repr(settings)])
    return "lora-" + hashlib.sha256(key.encode()).hexdigest()[:10]


def _describe(settings: Any) -> str:
    model = "small Qwen2 (built in code)" if settings.model_path is None else f"model {settings.model_path}"
    data = "bundled instructions" if settings.data_path is None else f"data {settings.data_path}"
    return f"{model}, {data}, LoRA rank {settings.rank} alpha {settings.alpha:g}"


class _Progress:
    """One line per finished run on stderr (with ``--quiet``: nothing)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.perf_counter()

    def __call__(self, event: str, payload: Any) -> None:
        if not self.enabled:
            return
        from rich.console import Console

        console = Console(stderr=True)
        if event == "calibrating":
            console.print(f"measuring {payload}'s backward/forward ratio", highlight=False, soft_wrap=True)
        elif event == "finished":
            run = payload
            console.print(f"{run['optimizer']:>12} lr={run['lr']:<7g} seed {run['seed']}: val loss "
                          f"{run['val']['loss']:.4f}, test loss {run['test']['loss']:.4f} (snapshot at "
                          f"{run['kept_units']:.0f} units), {run['wall_seconds']:.2f}s for "
                          f"{run['charged_units']:.0f} units [{time.perf_counter() - self.started:.0f}s]",
                          highlight=False, soft_wrap=True)


def _loss(value: float | None, sd: float | None = None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3f}" + ("" if sd is None else f" +- {sd:.3f}")


def print_table(summary: dict[str, Any], label: str) -> None:
    """The per-method table: lr chosen on validation, its test loss and wall time; the paper's rule
    (lr chosen on test) and the paper's figures beside it."""
    s = summary["settings"]
    print_protocol_table(summary, ProtocolTable(
        title=f"LoRA protocol: {label}, budget {s['budget']} units, {summary['runs_finished']}/"
                       f"{summary['runs_requested']} runs finished (study {summary['study']})",
        metric="loss", value=_loss, wall_column="wall s", paper_label="paper: lr", paper=PAPER_LORA, width=220,
        wall=lambda by_val, several: f"{by_val['wall_seconds']:.2f}" + (
            f" +- {by_val['wall_std']:.2f}" if several else ""),
        note="Test loss: mean response-token cross-entropy on the test sample, of the adapter with the lowest "
             f"validation loss (checked every {s['eval_every']} units), mean +- std over seeds. lr (val): best "
             "mean validation loss over seeds (this package's rule); lr (test): the paper's rule. Wall s: time "
             "inside training to spend the budget.",
        tail=". Paper: Qwen2.5-1.5B-Instruct on Alpaca, bfloat16, GPU."))


def run(args: argparse.Namespace) -> int:
    """``eve-search lora``; returns the exit code (bad input raises ``eve_search.cli.UsageError``).

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (fine-tunes every optimizer, rate and seed: not run as a doctest):
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--seeds", "0", "--lrs", "1e-3"]))  # doctest: +SKIP
        0
    """
    import torch

    from eve_search._imports import MissingExtraError
    from eve_search.data._instructions import InstructionDataError
    from eve_search.tasks.lora._model import LoraModelError
    from eve_search.tasks.lora._task import LoraSettings, lora_task
    from eve_search.experiments.protocol import ProtocolSettings, run_protocol, summarize
    from eve_search.tasks import register_task

    prog = "eve-search lora"
    check_frozen_ratio(args, "lora")
    check_weight_decay(args, "lora")
    if args.model is not None and not args.model.is_dir():
        raise UsageError(f"{prog}: argument --model: {str(args.model)!r} is not a directory (expected a local "
                         "model saved with save_pretrained, with its tokenizer)")
    if args.data is not None and not args.data.is_file():
        raise UsageError(f"{prog}: argument --data: {str(args.data)!r} is not a file (expected JSON lines or a "
                         "JSON list of instruction records)")
    if args.max_length < 2:
        raise UsageError(f"{prog}: argument --max-length: {args.max_length} (expected >= 2)")
    hidden = _hidden_size(args.model)
    if args.rank is not None and hidden is not None and args.rank > hidden:
        raise UsageError(f"{prog}: argument --rank: {args.rank} is more than the model's hidden size {hidden} (an "
                         "adapter of higher rank is no longer low-rank: it holds more weights than the layer it "
                         "adapts)")
    # The store before the model loads: a store in memory or a read-only one is one line now (the
    # work directory is created here).
    storage = storage_url(args)
    settings = LoraSettings(args.model, args.data, rank=args.rank, alpha=args.alpha, max_length=args.max_length)
    name = _task_name(settings)
    task = lora_task(settings, name=name)
    try:
        splits = task.data()
        # Load the model once before any run, so a bad directory is one line, not a failed protocol.
        task.build_model({}, splits, torch.Generator().manual_seed(0))
    except (LoraModelError, InstructionDataError, MissingExtraError) as error:
        raise UsageError(f"{prog}: {error}") from None
    except ValueError as error:
        raise UsageError(f"{prog}: {error}") from None
    register_task(task)
    protocol = ProtocolSettings(
        name, optimizers=tuple(args.optimizer), lrs=tuple(args.lrs), seeds=tuple(args.seeds), budget=args.budget,
        eval_every=args.eval_every, weight_decay=args.weight_decay, cost_mode=args.cost_mode,
        backward_ratio=args.backward_ratio, dataset=_describe(settings))
    result = run_protocol(protocol, storage=storage, resume=args.resume, data=splits, train=not args.report_only,
                          progress=_Progress(enabled=not args.quiet))
    summary = summarize(result)
    if args.json:  # written first: a closed standard output (`| head`) loses nothing
        write_json(args.json, "lora", {**summary, "paper_lora": PAPER_LORA, "runs": result.runs})
    if not args.quiet:
        print_table(summary, _describe(settings))
    return 0
