"""Pages of the repository shown on the site as they are: a page whose source has the line
``% repo-include: searches/README.md`` gets, in that line's place, that file with its first title dropped
(the page has its own) and its relative links made to work on the site:

- a link to a file that is itself a page of the site (``../README.md``, ``../CHANGELOG.md``) goes to
  that page (see ``SITE_PAGES``), keeping its ``#anchor``;
- an image is found where it lies in the repository, and copied into the site by Sphinx;
- a link to any other file of the repository (a script, a table) becomes a download of that file.

A link to a file that does not exist is left alone, so the build warns about it.
``% repo-include: README.md#headline-result`` includes only the section under that heading, heading
included.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MARKER = re.compile(r"^% repo-include: (\S+)[ \t]*$", re.MULTILINE)
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s#]+)(#[^)\s]*)?\)")
FENCE = re.compile(r"^\s*(```|~~~)")

# Files of the repository that are pages of the site: repository path -> document name.
SITE_PAGES = {"README.md": "index", "CHANGELOG.md": "changelog", "searches/README.md": "results"}


def _rewrite_line(line: str, source: Path, root: Path, doc_dir: Path) -> str:
    def replace(match: re.Match) -> str:
        bang, text, target, anchor = match.group(1), match.group(2), match.group(3), match.group(4) or ""
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, path: ...
            return match.group(0)
        path = (source.parent / target).resolve()
        if not path.is_file():
            return match.group(0)
        repo_path = path.relative_to(root).as_posix()
        if bang:
            return f"![{text}]({os.path.relpath(path, doc_dir)})"
        if repo_path in SITE_PAGES:
            page = (root / "docs" / SITE_PAGES[repo_path]).with_suffix(".md")
            return f"[{text}]({os.path.relpath(page, doc_dir)}{anchor})"
        return f"[{text}](path:{os.path.relpath(path, doc_dir)})"

    return LINK.sub(replace, line)


def _slug(title: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def included_text(reference: str, root: Path, doc_dir: Path) -> str:
    """The file named by ``reference`` as it goes into a page in ``doc_dir`` (see the module docstring).

    ``reference`` is a path from the repository's root, with an optional ``#anchor`` that keeps only the
    section under that heading (down to the next heading of the same or a higher level).
    """
    repo_path, _, anchor = reference.partition("#")
    source = root / repo_path
    lines, fenced, titled, level = [], False, False, 0
    for line in source.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^(#+) (.*)$", line) if not fenced else None
        if FENCE.match(line):
            fenced = not fenced
        elif heading and anchor:
            depth = len(heading.group(1))
            if _slug(heading.group(2)) == anchor:
                level = depth
            elif level and depth <= level:
                break
        elif heading and not titled and line.startswith("# "):
            titled = True
            continue
        if anchor and not level:
            continue
        lines.append(line if fenced else _rewrite_line(line, source, root, doc_dir))
    if anchor and not lines:
        raise ValueError(f"{repo_path} has no heading whose anchor is {anchor!r}")
    return "\n".join(lines) + "\n"


def _source_read(app, docname: str, source: list[str]) -> None:
    root = Path(app.srcdir).parent
    doc_dir = (Path(app.srcdir) / docname).parent

    def replace(match: re.Match) -> str:
        app.env.note_dependency(str(root / match.group(1).partition("#")[0]))
        return included_text(match.group(1), root, doc_dir)

    source[0] = MARKER.sub(replace, source[0])


def setup(app):
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
