"""``eve-search bench memory``: the command's arguments and its report; the measurements are
:mod:`eve_search.benchmarks.memory`."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import eve_search.cli.args as types
from eve_search.benchmarks import memory as _bench
from eve_search.cli._common import write_json
from eve_search.cli.args import UsageError

__all__ = ["configure_parser", "run"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search bench memory``.

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search bench memory")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--iterations", "20"])
        >>> args.model, args.optimizer, args.iterations, args.device
        ('all', ['eve', 'adam'], 20, 'cpu')
    """
    parser.description = (
        "Peak memory of EvE and Adam over 200 training iterations, each in a fresh process, beside the theoretical "
        "count (paper: 13x vs 4x the weights; 2.95x measured on a GPU): tensor bytes held by the training state "
        "(weights, gradients, optimizer), and the peak above the process's baseline (CPU: resident memory; CUDA: "
        "max_memory_allocated). Models: the paper's MNIST MLP (784-1024-1024-10) and the small LoRA model of "
        "eve-search lora (adapters only are trained).")
    parser.add_argument("--model", choices=(*_bench.MODELS, "all"), default="all", help="which model (default: all)")
    parser.add_argument("--optimizer", type=types.optimizer_list, default=["eve", "adam"], metavar="NAMES",
                        help="comma-separated optimizers (default: eve,adam)")
    parser.add_argument("--iterations", type=types.iterations, default=200,
                        help=f"training iterations (default 200, at most {types.MAX_ITERATIONS:,})")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default cpu")
    parser.add_argument("--threads", type=types.threads, help=f"torch threads in each measuring process (at most "
                        f"{types.JOBS_PER_CPU} x the CPUs)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the measurements as JSON")


def _mb(value: float) -> str:
    return f"{value / 2**20:.1f}"


def run(args: argparse.Namespace) -> int:
    """``eve-search bench memory``; returns the exit code.

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (trains each model in a fresh process: not run as a doctest):
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--iterations", "20"]))  # doctest: +SKIP
        0
    """
    from rich.console import Console
    from rich.table import Table

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("eve-search bench memory: argument --device: cuda, but no CUDA device is available")
    if not Path("/proc/self/clear_refs").exists() and args.device == "cpu":
        raise UsageError("eve-search bench memory: the CPU measurement needs Linux's /proc/self/clear_refs")
    models = _bench.MODELS if args.model == "all" else (args.model,)
    results = []
    for model_name in models:
        for optimizer_name in args.optimizer:
            results.append(_bench._in_fresh_process({"model": model_name, "optimizer": optimizer_name,
                                              "iterations": args.iterations, "device": args.device,
                                              "threads": args.threads}))
    measure_name = "peak RSS above baseline" if args.device == "cpu" else "max_memory_allocated above baseline"
    table = Table(title=f"Memory over {args.iterations} training iterations, each in a fresh process ({args.device})")
    for column in ("model", "optimizer", "trained weights", "weights MB", "state MB (x weights)",
                   "theory here / paper", f"{measure_name} MB", "vs adam"):
        table.add_column(column, justify="left" if column in ("model", "optimizer") else "right")
    for r in results:
        state, weights = r["state"], r["state"]["weights"]
        adam = next((a for a in results if a["model"] == r["model"] and a["optimizer"] == "adam"), None)
        theory = _bench.THEORY.get(r["optimizer"])
        table.add_row(r["model"], r["optimizer"], f"{r['trained_weights']:,}", _mb(weights),
                      f"{_mb(state['total'])} ({state['total'] / weights:.2f}x)",
                      f"{theory['here']}x / {theory['paper']}x" if theory else "-",
                      _mb(r["peak_above_baseline_bytes"]),
                      f"{r['peak_above_baseline_bytes'] / adam['peak_above_baseline_bytes']:.2f}x"
                      if adam and adam["peak_above_baseline_bytes"] > 0 else "-")
    console = Console(width=None if Console().is_terminal else 160)
    console.print(table)
    console.print("State: distinct tensor storages of the trained weights, their gradients and everything the "
                  "optimizer object holds, after the run. Paper (MNIST MLP, GPU): EvE 213.95 MB vs Adam 72.43 MB "
                  "peak allocated, 2.95x; theory 13x vs 4x (3.25x).", highlight=False)
    for r in results:
        if "fallback_steps_per_slot" in r:
            console.print(f"{r['model']} eve: Adam-fallback steps per population slot {r['fallback_steps_per_slot']}",
                          highlight=False)
    if args.json:
        write_json(args.json, "bench-memory", {"theory": _bench.THEORY, "results": results})
    return 0
