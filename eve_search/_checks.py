"""Argument checks shared by every layer of the package (this module imports nothing from it)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_int"]


def check_int(name: str, value: Any, minimum: int, *, types: tuple[type, ...] = (int,), detail: str = "") -> int:
    """``value`` as an int, once it is known to be an integer (never a bool) of at least ``minimum``.

    Args:
        name: the argument's name, as the message shows it.
        value: the value to check.
        minimum: the smallest value accepted.
        types: the integer types accepted, e.g. ``(int, numpy.integer)``; a bool is refused whatever they are.
        detail: words the message adds after "an int >= minimum", e.g. ``" of worker processes"``.

    Returns:
        ``int(value)``.

    Raises:
        ValueError: ``Invalid {name}: {value!r} (expected an int >= {minimum}{detail})``.

    Example:
        >>> check_int("count", 3, 1)
        3
        >>> check_int("count", True, 1)
        Traceback (most recent call last):
        ...
        ValueError: Invalid count: True (expected an int >= 1)
        >>> check_int("jobs", 0, 1, detail=" of worker processes")
        Traceback (most recent call last):
        ...
        ValueError: Invalid jobs: 0 (expected an int >= 1 of worker processes)
    """
    if isinstance(value, bool) or not isinstance(value, types) or value < minimum:
        raise ValueError(f"Invalid {name}: {value!r} (expected an int >= {minimum}{detail})")
    return int(value)
