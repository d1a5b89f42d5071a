"""The versions of its hosts (Ray, Optuna) that eve-search declares: one reading of ``pyproject.toml``'s
ranges, from the installed package's metadata, for the code that checks a host's version and for
``.ci/hosts.sh``, which tests the oldest version of each range.

Run as a module, it prints a range's lower bound::

    python -m eve_search._hosts oldest optuna     # e.g. 4.3

Example:
    >>> from packaging.version import Version
    >>> Version("4.3.0") in declared("optuna")
    True
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet

__all__ = ["declared", "oldest"]


def declared(package: str, fallback: str = "") -> SpecifierSet:
    """The range eve-search declares for ``package`` (as a dependency or in an extra).

    Args:
        package: the host's distribution name, e.g. ``"ray"``.
        fallback: the range to return when eve-search's metadata cannot be read (a source tree that was
            never installed) or does not name ``package``.

    Returns:
        The specifier set, e.g. ``<5.1,>=4.3``.
    """
    try:
        for line in metadata.requires("eve-search") or ():
            requirement = Requirement(line)
            if requirement.name == package:
                return requirement.specifier
    except (metadata.PackageNotFoundError, InvalidRequirement):
        pass
    return SpecifierSet(fallback)


def oldest(package: str) -> str | None:
    """The lower bound of ``package``'s declared range (``>=``, ``==`` or ``~=``), or None when it has none.

    Example:
        >>> oldest("optuna")
        '4.3'
    """
    lows = [s.version for s in declared(package) if s.operator in (">=", "==", "~=")]
    return lows[0] if lows else None


def main(argv: list[str] | None = None) -> int:
    """``oldest PACKAGE``: print the lower bound; exit 2 when the range has none."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "oldest":
        print("usage: python -m eve_search._hosts oldest PACKAGE", file=sys.stderr)
        return 2
    low = oldest(args[1])
    if low is None:
        print(f"Invalid package: {args[1]!r} (expected a host whose range pyproject.toml bounds below)", file=sys.stderr)
        return 2
    print(low)
    return 0


if __name__ == "__main__":
    sys.exit(main())
