"""Old import paths of moved modules: each keeps working for one release, with a DeprecationWarning.

An old module path is a three-line file at its old place (see :func:`alias`); an old package is a
small package whose names are forwarded (:func:`forward`); names that moved out of a module that
stays are looked up in a table of their new homes (:func:`moved_names`). Removed in eve-search 0.4.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType

__all__ = ["alias", "forward", "moved", "moved_names"]

REMOVED_IN = "0.4"


def _warn(old: str, new: str, stacklevel: int) -> None:
    # Python skips importlib's own frames when it counts ``stacklevel``, so the warning names the
    # line of user code that imported the old path.
    warnings.warn(f"{old} is deprecated and will be removed in eve-search {REMOVED_IN}; import {new} instead",
                  DeprecationWarning, stacklevel=stacklevel)


def alias(old: str, new: str) -> None:
    """Make the module ``old`` the module ``new`` (the same object: patches, pickles and isinstance
    checks see one module). Call it from the old module's file: ``alias(__name__, "eve_search.x.y")``."""
    _warn(old, new, stacklevel=4)  # _warn <- alias <- the shim module <- the importing line
    sys.modules[old] = importlib.import_module(new)


def forward(old: str, new: str) -> Callable[[str], object]:
    """A module ``__getattr__`` for an old package: each name is read from ``new`` with a warning."""

    def __getattr__(name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        module: ModuleType = importlib.import_module(new)
        value = getattr(module, name)  # AttributeError for a name the new package lacks
        _warn(f"{old}.{name}", f"{new}.{name}", stacklevel=3)  # _warn <- __getattr__ <- the importing line
        sys.modules[old].__dict__[name] = value  # warned once: ``from old import name`` reads it twice
        return value

    return __getattr__


def moved(package: str, names: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for names a module no longer exports: each of ``names`` (name -> the
    module that now holds it) is read from its new module with a warning; any other name raises
    AttributeError as usual.

    Args:
        package: the module that used to export the names (its ``__name__``).
        names: each old name and the module that defines it now.

    Returns:
        The function to assign to the module's ``__getattr__``.

    Example:
        >>> import warnings
        >>> getter = moved("old.place", {"sep": "os"})
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     import os
        ...     getter("sep") == os.sep
        True
        >>> str(caught[0].message)
        'old.place.sep is deprecated and will be removed in eve-search 0.4; import os.sep instead'
    """

    return moved_names(package, {name: f"{module}:{name}" for name, module in names.items()}, once=False)


def moved_names(old: str, homes: Mapping[str, str], *, once: bool = True) -> Callable[[str], object]:
    """A module ``__getattr__`` for the names that left the module ``old``: each name of ``homes`` is
    read from its new home, ``"package.module:attribute"`` (or ``"package.module"`` for a module), with
    a warning naming that home (``once``: only at the first read; the name is then set on ``old``); any
    other missing name is an AttributeError, as usual.

    Example (in ``old``'s file): ``__getattr__ = moved_names(__name__, {"_helper": "eve_search.x:helper"})``.
    """

    def __getattr__(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        module_name, _, attribute = homes[name].partition(":")
        value: object = importlib.import_module(module_name)
        if attribute:
            value = getattr(value, attribute)
        new = f"{module_name}.{attribute}" if attribute else module_name
        _warn(f"{old}.{name}", new, stacklevel=3)  # _warn <- __getattr__ <- the line reading the name
        if once and old in sys.modules:  # warned once: ``from old import name`` reads it twice
            sys.modules[old].__dict__[name] = value
        return value

    return __getattr__
