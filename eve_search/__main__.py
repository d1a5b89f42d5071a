"""``python -m eve_search``: the console script, as ``eve-search`` (for an environment whose scripts
folder is not on ``PATH``)."""

import sys

if __name__ == "__main__":  # pytest --doctest-modules imports this module: it must not run a command
    from eve_search.cli import console

    sys.exit(console())
