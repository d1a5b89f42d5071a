"""Old import paths of moved modules: each keeps working for one release, with a DeprecationWarning.

An old module path is a three-line file at its old place (see :func:`alias`); an old package is a
small package whose names are forwarded (:func:`forward`). Removed in eve-search 0.4.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from types import ModuleType

__all__ = ["alias", "forward", "moved"]

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

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        _warn(f"{package}.{name}", f"{names[name]}.{name}", stacklevel=3)  # _warn <- __getattr__ <- the caller
        return value

    return __getattr__
