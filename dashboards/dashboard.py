"""Entry of the dashboard app: the same as ``eve-search dashboard`` (arguments passed through).

    python dashboards/dashboard.py --out report.html     # the store eve-search writes by default
    python dashboards/dashboard.py --storage sqlite:///runs/results.db --out runs/report.html
    python dashboards/dashboard.py --serve            # http://127.0.0.1:8050/, live while a sweep runs

The app itself (data layer, SVG charts, page template, style and script) is the package
``eve_search.dashboard``; its page template, style and script live in ``eve_search/dashboard/assets/``
so that an installed eve-search carries them.
"""

import sys

from eve_search.cli import main

if __name__ == "__main__":
    sys.exit(main(["dashboard", *sys.argv[1:]]))
