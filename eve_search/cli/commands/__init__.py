"""One module per ``eve-search`` command (see the command table in :mod:`eve_search.cli._main`)."""
