"""Optional dependencies, imported only when a feature needs them, with the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(ImportError):
    """An optional dependency is not installed."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or explain which extra of eve-search provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(f"{module} is not installed; install it with: pip install 'eve-search[{extra}]' "
                                f"({error})") from None
