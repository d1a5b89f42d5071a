"""The documentation site (docs/) builds offline with no warning, its links land, and its API reference
covers every public module."""

import ast
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.test_docstrings import PUBLIC_MODULES

pytestmark = pytest.mark.slow  # about a minute: the build imports every public module

DOCS = Path(__file__).resolve().parent.parent / "docs"


def api_modules() -> list[str]:
    """``api_modules`` of docs/conf.py, read without running it."""
    for node in ast.parse((DOCS / "conf.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "api_modules" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("docs/conf.py defines no api_modules")


def test_the_reference_documents_every_public_module_once():
    assert sorted(api_modules()) == sorted(PUBLIC_MODULES), "docs/conf.py's api_modules and PUBLIC_MODULES differ"
    placed = re.findall(r"^\.\. public-api:: (\S+)$", "".join(p.read_text() for p in (DOCS / "api").glob("*.md")),
                        flags=re.MULTILINE)
    assert sorted(placed) == sorted(api_modules()), "each module of api_modules goes on one page of docs/api/"


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])


def _parsed(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the docs extra (Sphinx 9, MyST 5) needs Python 3.11+")
def test_the_site_builds_offline_without_warnings_and_every_link_lands(tmp_path):
    out = tmp_path / "html"
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                            str(out)], capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, f"sphinx-build failed (make docs shows the same):\n{build.stderr[-6000:]}"
    for page in ("index", "tutorials/cli", "tutorials/your-task", "tutorials/ray", "tutorials/optuna",
                 "tutorials/dashboard", "tutorials/resuming-and-safety", "api/index", "results", "changelog"):
        assert (out / f"{page}.html").is_file(), page
    parsed = {page: _parsed(page) for page in out.rglob("*.html")}
    broken = []
    for page, links in parsed.items():
        for link in links.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith("#") and not link[1:]:
                continue  # external, or the page itself
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(out)}: {link}")
            elif parts.fragment and target.suffix == ".html" and parts.fragment not in parsed[target].ids:
                broken.append(f"{page.relative_to(out)}: {link} (no such anchor)")
    assert broken == [], "links that land nowhere:\n" + "\n".join(broken[:40])
    results = (out / "results.html").read_text(encoding="utf-8")
    assert "_images/adult-arch-adam-utilisation.svg" in results  # the results page's chart is copied in
    assert "Headline result" in (out / "index.html").read_text(encoding="utf-8")
