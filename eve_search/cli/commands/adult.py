"""``eve-search adult``: the search on UCI Adult, ``eve-search sweep --task adult`` with a required
``--space``; it runs as :func:`eve_search.cli.commands.sweep.run`."""

from __future__ import annotations

import argparse

import eve_search.cli.args as types
from eve_search.cli.commands.sweep import add_run_arguments, run

__all__ = ["configure_parser", "run"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``eve-search adult``: ``--space`` (required) and those of every search
    (:func:`eve_search.cli.commands.sweep.add_run_arguments`).

    Args:
        parser: the command's ``argparse`` parser (arguments are added to it).

    Example:
        >>> parser = argparse.ArgumentParser(prog="eve-search adult")
        >>> configure_parser(parser)
        >>> args = parser.parse_args(["--space", "arch", "--optimizer", "eve,adam"])
        >>> args.space, args.optimizer, args.configs
        ('arch', ['eve', 'adam'], 48)
    """
    parser.add_argument("--space", required=True, type=types.name("a search space"), metavar="SPACE",
                        help=f"search space ({types.SPACE_NAMES}, or one a --plugin registers)")
    add_run_arguments(parser)
