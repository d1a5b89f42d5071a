"""The ``eve-search`` command line: :func:`main` runs a command in-process, :func:`console` is the
console script (``eve-search = "eve_search.cli:console"``)."""

from eve_search.cli._main import UsageError, console, main

__all__ = ["UsageError", "console", "main"]


def __getattr__(name: str) -> object:
    # Phase A: every name eve_search/cli/_main.py had stays reachable here; Phase B replaces this with
    # eve_search._deprecation.moved_names (a DeprecationWarning naming the new home).
    from eve_search.cli import _main

    try:
        return getattr(_main, name)
    except AttributeError:
        raise AttributeError(f"module 'eve_search.cli' has no attribute {name!r}") from None
