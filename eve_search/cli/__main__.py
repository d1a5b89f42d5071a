"""``python -m eve_search.cli``: the console script."""

import sys

if __name__ == "__main__":  # pytest --doctest-modules imports this module: it must not run a command
    from eve_search.cli import console

    sys.exit(console())
