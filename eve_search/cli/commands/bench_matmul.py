"""``eve-search bench matmul``: the command's arguments and its report; the measurements are
:mod:`eve_search.benchmarks.matmul`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

import eve_search.cli.args as types
from eve_search.benchmarks import matmul as _bench
from eve_search.cli._common import write_json
from eve_search.cli.args import UsageError

__all__ = ["configure_parser", "run"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search bench matmul``.

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search bench matmul")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--threads", "1", "2", "--seconds", "0.1"])
        >>> args.threads, args.seconds
        ([1, 2], 0.1)
    """
    parser.description = _bench.__doc__.split("\n\n")[0].replace("``", "")
    parser.add_argument("--threads", type=types.threads, nargs="+", default=None, metavar="N",
                        help=f"PyTorch thread counts to measure (default: 1 and the CPUs available; each at most "
                             f"{types.JOBS_PER_CPU} x the CPUs)")
    parser.add_argument("--seconds", type=types.seconds, default=0.5, metavar="S",
                        help=f"timing per path and shape (default 0.5, at most {types.MAX_SECONDS:g})")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every figure as JSON")


def run(args: argparse.Namespace) -> int:
    """``eve-search bench matmul``: time every shape on every path, print the table (and ``--json``).

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (times products for seconds: not run as a doctest):
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> configure_parser(parser)
        >>> run(parser.parse_args(["--threads", "1"]))  # doctest: +SKIP
        0
    """
    from eve_search._openmp import available_cpus as _available_cpus

    if args.threads is not None and len(args.threads) > 16:
        raise UsageError(f"eve-search bench matmul: argument --threads: {len(args.threads)} thread counts is more "
                         "than 16 (each measures every shape and path again)")
    threads = args.threads or sorted({1, _available_cpus()})
    config = torch.__config__.show()
    library = "MKL" if "BLAS_INFO=mkl" in config else "not MKL (see torch.__config__.show())"
    print(f"bench matmul: torch {torch.__version__}, BLAS {library}, oneDNN available "
          f"{torch.backends.mkldnn.is_available()}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    trains = _bench._onednn_linear_trains()
    print(f"oneDNN's linear module (torch.utils.mkldnn) trains: {trains}")
    results: dict[str, Any] = {"torch": torch.__version__, "onednn_module_trains": trains, "threads": {}}
    original = torch.get_num_threads()
    try:
        for count in threads:
            torch.set_num_threads(count)
            print(f"\n{count} thread(s); GFLOP/s of a layer's training step (forward + 2 backward products), "
                  "largest difference from default")
            print(f"{'shape':>24} {'default':>8} {'onednn':>8} {'ratio':>6} {'out diff':>9} {'grad diff':>9} "
                  f"{'onednn-forward':>15} {'its diff':>9}")
            rows = {}
            for label, m, k, n in _bench.SHAPES:
                row = _bench.measure_shape(m, k, n, seconds=args.seconds)
                g, d = row["gflops"], row["max_difference"]
                print(f"{label:>24} {g['default']:8.1f} {g['onednn']:8.1f} {g['onednn'] / g['default']:6.2f} "
                      f"{d['onednn_forward_output']:9.1e} {d['onednn_weight_gradient']:9.1e} "
                      f"{g['onednn_forward']:15.1f} {d['onednn_forward_kernel_output']:9.1e}")
                rows[label] = row
            results["threads"][str(count)] = rows
    finally:
        torch.set_num_threads(original)
    if args.json:
        write_json(args.json, "bench-matmul", results, indent=1)
    return 0
