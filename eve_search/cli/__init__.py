"""The ``eve-search`` command line: :func:`main` runs a command in-process, :func:`console` is the
console script (``eve-search = "eve_search.cli:console"``)."""

from eve_search.cli._main import UsageError, console, main

__all__ = ["UsageError", "console", "main"]
