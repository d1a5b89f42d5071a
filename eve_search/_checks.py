"""Argument checks shared by every layer of the package (this module imports nothing from it), and
:class:`InputError`, what every one of them raises."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["MAX_CONFIGS", "WHY_CONFIGS", "InputError", "check_int", "finite_number", "options_or_keywords",
           "with_overrides"]

#: The most configurations one sweep samples (``SearchSpace.sample``, ``--configs``): the library's
#: limit, which the command line reads from here.
MAX_CONFIGS = 100_000
WHY_CONFIGS = "one trial per configuration is kept in the store and ranked at every rung"

_Options = TypeVar("_Options")


class InputError(ValueError):
    """Bad input: an argument, a setting, a store, a checkpoint or a data file that cannot be used, in a
    message naming the argument (or file), the value and what was expected.

    The errors of the store, the checkpoints and the data files subclass it. The ``eve-search`` command
    prints it as one line with exit code 2; any other exception is a bug, shown with its traceback. It is
    a :class:`ValueError`, so ``except ValueError`` still catches it.

    Example:
        >>> import eve_search
        >>> try:
        ...     eve_search.check_rungs([300, 100])
        ... except eve_search.InputError as error:
        ...     print(error)
        Invalid rungs: 300, 100 (expected strictly increasing cumulative budgets)
    """


# Tracebacks and the reference name it where users import it from. (Its example is then no longer
# found as this module's: ``__test__`` keeps it among this module's doctests.)
InputError.__module__ = "eve_search"
__test__ = {"InputError": InputError}


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite int or float (never a bool, never a string); None otherwise.

    The one reading of a number from untrusted data (a stored record, a JSON file): anything else is
    treated as missing, not coerced.

    Example:
        >>> [finite_number(v) for v in (3, 2.5, float("nan"), True, "1.0", None)]
        [3.0, 2.5, None, None, None, None]
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


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
        InputError: ``Invalid {name}: {value!r} (expected an int >= {minimum}{detail})``.

    Example:
        >>> check_int("count", 3, 1)
        3
        >>> check_int("count", True, 1)
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid count: True (expected an int >= 1)
        >>> check_int("jobs", 0, 1, detail=" of worker processes")
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid jobs: 0 (expected an int >= 1 of worker processes)
    """
    if isinstance(value, bool) or not isinstance(value, types) or value < minimum:
        raise InputError(f"Invalid {name}: {value!r} (expected an int >= {minimum}{detail})")
    return int(value)


def with_overrides(function: str, cls: type[_Options], options: _Options | None,
                   overrides: Mapping[str, Any]) -> _Options:
    """``options`` (``cls()`` when None) with the fields named in ``overrides`` replaced, validated again.

    For a function that takes an options dataclass plus its fields as keywords (``**overrides``): the
    keywords win over the object, and a keyword that is no field is refused as Python refuses one.

    Args:
        function: the function's name, as the message shows it.
        cls: the options dataclass (frozen, validating in ``__post_init__``).
        options: an instance of ``cls``, or None for the defaults.
        overrides: field values given as keywords.

    Returns:
        the options to use (``options`` itself when there is nothing to override).

    Raises:
        TypeError: ``{function}() got an unexpected keyword argument {name!r}``, or ``Invalid options``
            when ``options`` is not a ``cls``.
        InputError: from ``cls``'s own checks, for a bad value.

    Example:
        >>> @dataclasses.dataclass(frozen=True)
        ... class Knobs:
        ...     size: int = 4
        ...     def __post_init__(self):
        ...         check_int("size", self.size, 1)
        >>> with_overrides("run", Knobs, None, {"size": 8})
        Knobs(size=8)
        >>> with_overrides("run", Knobs, Knobs(size=2), {"colour": 1})
        Traceback (most recent call last):
        ...
        TypeError: run() got an unexpected keyword argument 'colour'
    """
    if options is None:
        options = cls()
    elif not isinstance(options, cls):
        raise TypeError(f"Invalid options: {options!r} (expected a {cls.__name__} or None)")
    if not overrides:
        return options
    names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    for name in overrides:
        if name not in names:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
    return dataclasses.replace(options, **overrides)  # type: ignore[type-var]


def options_or_keywords(function: str, cls: type[_Options], options: _Options | None,
                        keywords: Mapping[str, Any]) -> _Options:
    """``options``, or a ``cls`` built from ``keywords``: a function that takes an options dataclass or its
    fields as keywords takes one or the other, never both.

    Args:
        function: the function's name, as the messages show it.
        cls: the options dataclass (frozen, validating in ``__post_init__``).
        options: an instance of ``cls``, or None.
        keywords: field values given as keywords.

    Returns:
        the options to use: ``options`` itself, else ``cls(**keywords)`` (``cls()`` with none).

    Raises:
        InputError: ``Invalid options: ...`` when both are given (one line naming the keywords).
        TypeError: ``{function}() got an unexpected keyword argument {name!r}``, or ``Invalid options``
            when ``options`` is not a ``cls``.

    Example:
        >>> @dataclasses.dataclass(frozen=True)
        ... class Knobs:
        ...     size: int = 4
        >>> options_or_keywords("run", Knobs, None, {"size": 8})
        Knobs(size=8)
        >>> options_or_keywords("run", Knobs, Knobs(size=2), {"size": 8})
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid options: given with size= (run() takes a Knobs or its fields as keywords, not both)
    """
    if options is not None and keywords:
        raise InputError(f"Invalid options: given with {', '.join(f'{name}=' for name in keywords)} "
                         f"({function}() takes a {cls.__name__} or its fields as keywords, not both)")
    if options is not None:
        return with_overrides(function, cls, options, {})
    names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    for name in keywords:
        if name not in names:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
    return cls(**keywords)
