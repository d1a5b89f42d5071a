"""``eve-search dashboard``: the command's arguments and what it does."""

from __future__ import annotations

import argparse
import errno
import json
import sys
from pathlib import Path
from typing import Any

from eve_search.cli._common import JSON_SCHEMA_VERSION, OutputError, check_outputs, default_storage, write_output
from eve_search.cli.args import DEFAULT_WORKDIR, UsageError, add_store_options

__all__ = ["DEFAULT_STORAGE", "configure_parser", "run"]

#: The store read without --storage (relative to the current folder; see
#: :func:`eve_search.cli.args.default_storage_url`).
DEFAULT_STORAGE = f"{DEFAULT_WORKDIR}/results.db"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (expected 0-65535; 0 picks a free one)")
    return value


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0.5:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0.5 (seconds between checks of the store)")
    return value


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the dashboard's arguments to ``parser`` (the ``dashboard`` subcommand).

    Args:
        parser: the sub-command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="eve-search dashboard")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--storage", "sqlite:///runs.db", "--out", "page.html"])
        >>> args.storage, str(args.out), args.serve, args.port
        ('sqlite:///runs.db', 'page.html', False, 8050)
    """
    parser.description = (
        "Draw every sweep of a results store as one self-contained HTML page that opens offline: sweep wall "
        "time against the best validation score found (with the paper's UCI Adult figures beside ours), each "
        "sweep's successive-halving ladder and trial curves against charged units and wall seconds, the "
        "ranking agreement between EvE and Adam, and a sortable, filterable table of every configuration.")
    add_store_options(parser, checkpoints=False, workdir=False)  # reads a store: no --workdir to create
    parser.add_argument("--out", type=Path, metavar="PATH", help="where to write the page (default: report.html; "
                        "with --serve, only written when given)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the page's data as JSON")
    parser.add_argument("--pool", type=Path, action="append", default=[], metavar="PATH",
                        help="also draw the proxy audit of a recorded pool (a .json.gz of searches/pools/; repeat for "
                        "more); with --pool and no --storage, the page shows only the pools")
    parser.add_argument("--title", default="eve-search results", help="the page's title")
    parser.add_argument("--serve", action="store_true", help="serve the page at http://127.0.0.1:PORT/, redrawn "
                        "from the store as a running sweep records results (Ctrl-C stops)")
    parser.add_argument("--port", type=_port, default=8050, help="port for --serve (default 8050; 0 picks a free one)")
    parser.add_argument("--interval", type=_interval, default=5.0, metavar="S",
                        help="with --serve, seconds between the page's checks of the store (default 5)")


def _writable(path: Path, argument: str) -> Path:
    if path.is_dir():
        raise UsageError(f"eve-search dashboard: argument {argument}: {str(path)!r} is a directory (expected a file "
                         "path)")
    return path


def _write(path: Path, text: str, argument: str) -> None:
    try:
        write_output(path, text, argument, kept="; the store is unchanged")
    except OutputError as error:
        raise UsageError(f"eve-search dashboard: {error}") from None


def _pools(paths: list[Path]) -> list[Any]:
    """The recorded pools named by ``--pool``, each checked as it is read (one line naming a bad one)."""
    from eve_search.engine.pool import PoolError, load_pool

    pools = []
    for path in paths:
        try:
            pools.append(load_pool(path))
        except PoolError as error:
            raise UsageError(f"eve-search dashboard: argument --pool: {error}") from None
    return pools


def run(args: argparse.Namespace) -> int:
    """Write the page (and ``--json``), or serve it; returns the exit code.

    Args:
        args: the parsed command line (see :func:`configure_parser`).

    Returns:
        The exit code (0 on success; with ``--serve``, once the server is stopped).

    Raises:
        UsageError: bad input, as one line (exit code 2).

    Example (through :func:`eve_search.cli.main`, which parses the command line and calls this):
        >>> import pathlib, tempfile, optuna
        >>> from eve_search.cli import main
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = optuna.create_study(study_name="demo", storage=f"sqlite:///{folder}/runs.db")
        >>> main(["dashboard", "--storage", f"sqlite:///{folder}/runs.db", "--out", str(folder / "page.html")])
        0
        >>> (folder / "page.html").read_text().startswith("<!DOCTYPE html>")
        True
    """
    from eve_search.dashboard import build, dashboard_data, pool_audit_section, render_page

    if not args.serve and args.port != 8050:
        raise UsageError(f"eve-search dashboard: argument --port: {args.port} only applies with --serve")
    if args.serve and args.pool:
        raise UsageError(f"eve-search dashboard: argument --pool: {str(args.pool[0])!r} cannot be served (a pool "
                         "file does not change; --serve redraws a store as it changes: write the page with --out)")
    storage = default_storage(args) if args.storage or not args.pool else None
    out = _writable(args.out, "--out") if args.out else (None if args.serve else Path("report.html"))
    if args.json:
        _writable(args.json, "--json")
    # Neither the page nor --json may overwrite the store, its -wal/-shm, a checkpoint or each other.
    check_outputs(args, {"--out": out, "--json": args.json})
    pools = _pools(args.pool)  # read (and checked) before anything is written
    data = dashboard_data(storage) if storage is not None else build([])  # also checks the store before a server starts
    if pools:
        data["sections"].append(pool_audit_section(pools))
        data["pools"] = len(pools)
    if out is not None:
        _write(out, render_page(data, title=args.title), "--out")
        pooled = f", {len(pools)} pools" if pools else ""
        print(f"wrote {out} ({data['sweeps']} sweeps, {data['studies']} studies{pooled})", file=sys.stderr)
    if args.json:
        _write(args.json, json.dumps({"schema": "eve-search/dashboard", "schema_version": JSON_SCHEMA_VERSION, **data},
                                     indent=1, allow_nan=False), "--json")
        print(f"wrote {args.json}", file=sys.stderr)
    if not args.serve:
        return 0
    from eve_search.dashboard._serve import start_server

    try:
        server, thread = start_server(storage, args.port, interval=args.interval)
    except OSError as error:
        reason = "is in use" if error.errno == errno.EADDRINUSE else f"cannot be opened ({error.strerror or error})"
        raise UsageError(f"eve-search dashboard: argument --port: {args.port} {reason} (try another, or 0 for a free "
                         "one)") from None
    print(f"serving {server.url} (reloads as the store changes; Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        print("eve-search dashboard: stopped", file=sys.stderr)
    finally:
        server.shutdown()
        server.server_close()
    return 0
