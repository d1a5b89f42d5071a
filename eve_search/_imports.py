"""Imports made when they are needed: optional dependencies, with the extra to install, and the public
names a package re-exports from its modules."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType

__all__ = ["MissingExtraError", "lazy_exports", "require"]


class MissingExtraError(ImportError):
    """An optional dependency is not installed."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or explain which extra of eve-search provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(f"{module} is not installed; install it with: pip install 'eve-search[{extra}]' "
                                f"({error})") from None


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` (PEP 562) of a package whose public names are imported from its
    modules on first use, so that importing the package, or one of its light modules, loads nothing heavy.

    Args:
        package: the package's ``__name__`` (already in ``sys.modules``: call this from its ``__init__``).
        exports: each public name and the module it is imported from.

    Returns:
        ``(__getattr__, __dir__)``: assign them at the package's top level. A name, once imported, is
        kept in the package's namespace, so later lookups are plain attribute reads.

    Example:
        >>> getattr_, dir_ = lazy_exports("eve_search", {"PROMOTED_FRACTION": "eve_search.engine.ledger"})
        >>> round(getattr_("PROMOTED_FRACTION"), 4), "PROMOTED_FRACTION" in dir_()
        (0.3333, True)
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
