"""The Optuna releases the adapter was checked against, and whether the installed one is among them."""

from __future__ import annotations

import optuna

__all__ = ["TESTED", "TESTED_NOW", "in_tested_range", "release"]

TESTED = ((4, 3), (5, 0))
"""The oldest and the newest Optuna release (major, minor) whose internals the adapter was checked against:
the range `pyproject.toml` declares, run by `make test` (newest) and `make test-hosts` (oldest)."""


def release(version: str) -> tuple[int, int]:
    """The (major, minor) of an Optuna version string; (0, 0) for one that does not start with two numbers.

    Example:
        >>> release("5.0.0"), release("4.3.0.dev0"), release("nightly")
        ((5, 0), (4, 3), (0, 0))
    """
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return 0, 0


def in_tested_range(version: str) -> bool:
    """Whether ``version`` lies in :data:`TESTED` (bounds included, compared by major and minor).

    Example:
        >>> in_tested_range("5.0.1"), in_tested_range("3.6.1"), in_tested_range("5.1.0")
        (True, False, False)
    """
    return TESTED[0] <= release(version) <= TESTED[1]


TESTED_NOW = in_tested_range(optuna.__version__)
"""Whether the installed Optuna is one the adapter was checked against."""
