"""The API reference's one directive: ``.. public-api:: eve_search.engine.ledger``.

It documents a public module by its ``__all__``: the module's docstring, then each public name. A name
that several modules export (``eve_search.EvE`` is ``eve_search.optim.EvE``) is documented once, at its
*home*, and every other module that exports it lists it with a link there. The home of a class or
function is the public module it is defined in, or else the nearest public package above that module
which exports it; the home of a constant is the module that assigns it. Every module the reference
documents is named in ``conf.py``'s ``api_modules``, in the order used to break ties.

A reference to a re-exported name (``eve_search.Trial``) goes to its home, and an unqualified name in a
docstring (``:class:`Trial```) to the one documented object of that name, when there is exactly one. A
reference from a page of the site (not from a docstring) that finds nothing is a warning, so the
tutorials link only to what the reference documents.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from functools import cache
from pathlib import Path

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


@cache
def _assigned_names(module_name: str) -> frozenset[str]:
    """The names a module's source assigns at its top level (not the ones it imports)."""
    module = importlib.import_module(module_name)
    source = Path(inspect.getfile(module)).read_text()
    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


def _exports(module_name: str) -> list[str]:
    return list(getattr(importlib.import_module(module_name), "__all__", []))


def _exporters(modules: list[str], name: str, obj: object) -> list[str]:
    """The documented modules that export ``obj`` under ``name``."""
    found = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        if name in _exports(module_name) and getattr(module, name) is obj:
            found.append(module_name)
    return found


def home(modules: list[str], module_name: str, name: str) -> str:
    """Where ``module_name.name`` is documented (see the module docstring)."""
    obj = getattr(importlib.import_module(module_name), name)
    candidates = _exporters(modules, name, obj) or [module_name]
    if inspect.isclass(obj) or inspect.isfunction(obj):
        defined = obj.__module__.split(".")
        while defined:
            if ".".join(defined) in candidates:
                return ".".join(defined)
            defined.pop()
        return candidates[0]
    assigning = [m for m in candidates if name in _assigned_names(m)]
    return (assigning or candidates)[0]


def _summary(obj: object) -> str:
    """The first paragraph of a class's or function's docstring, on one line ("" for a constant)."""
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return ""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def _kind(obj: object) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "function"
    return "data"


class PublicApi(SphinxDirective):
    """``.. public-api:: module``: the module's docstring and its public names (see the module docstring)."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module_name = self.arguments[0]
        modules = self.config.api_modules
        if module_name not in modules:
            raise self.error(f"{module_name} is not in conf.py's api_modules")
        module = importlib.import_module(module_name)
        own, elsewhere = [], []
        for name in _exports(module_name):
            where = home(modules, module_name, name)
            (own if where == module_name else elsewhere).append((name, where))
        lines = [f".. automodule:: {module_name}", "   :no-members:", ""]
        for name, _ in own:
            obj = getattr(module, name)
            kind = _kind(obj)
            directive = {"class": "autoclass", "exception": "autoexception", "function": "autofunction",
                         "data": "autodata"}[kind]
            lines += [f".. {directive}:: {module_name}::{name}"]
            if kind == "class":
                lines += ["   :members:", "   :show-inheritance:"]
            if kind == "data" and len(repr(obj)) > 120:
                lines += ["   :no-value:"]
            lines.append("")
        if elsewhere:
            lines += [".. rubric:: Also exported here", ""]
            for name, where in elsewhere:
                summary = _summary(getattr(module, name))
                lines.append(f"- :py:obj:`{name} <{where}.{name}>` (in ``{where}``){': ' + summary if summary else ''}")
            lines.append("")
        return self.parse_text_to_nodes("\n".join(lines))


def resolve_unqualified(app, env, node, contnode):
    """A ``py`` cross-reference nobody resolved: if exactly one documented object has that last name, link it."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    if not target:
        return None
    domain = env.get_domain("py")
    module_name, _, name = target.rpartition(".")
    modules = app.config.api_modules
    if module_name in modules and name in _exports(module_name):  # a re-export: go to its home
        where = home(modules, module_name, name)
        if where != module_name:
            return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], f"{where}.{name}",
                                       node, contnode)
    last = target.rsplit(".", 1)[-1]
    matches = [full for full in domain.objects if full.rsplit(".", 1)[-1] == last
               and (full == target or full.endswith("." + target))]
    found = None
    if len(matches) == 1:
        found = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], matches[0], node, contnode)
    if found is None and not node["refdoc"].startswith("api/"):
        # A page written for the site (not a docstring) links only to what the reference documents.
        logger.warning("%s: no documented Python object %r", node["refdoc"], node["reftarget"], location=node)
    return found


def _type_docstring(obj: object) -> str | None:
    """The docstring a constant inherits from its type (``dict``'s for a dict), which says nothing about it."""
    origin = getattr(obj, "__origin__", None)  # a type alias such as ``dict[str, Any]``
    return inspect.getdoc(origin if origin is not None else type(obj))


def clean_docstring(app, what, name, obj, options, lines):
    """Two repairs to docstrings as autodoc reads them, so that they render and the build stays clean:

    - a constant documented by no docstring of its own shows none, not its type's (``dict``'s);
    - an example header that wraps over two lines (``Example (trains for seconds ...;`` then ``... calls
      it):`` above an indented ``>>>`` block) is joined into one line, which reStructuredText reads as a
      term and its definition, as it does the one-line headers.
    """
    if what in ("data", "attribute") and lines and inspect.getdoc(obj) == _type_docstring(obj) is not None:
        lines[:] = []
        return
    i = 0
    while i + 2 < len(lines):
        first, second, body = lines[i], lines[i + 1], lines[i + 2]
        indent = len(first) - len(first.lstrip())
        if (first.lstrip().startswith("Example") and not first.rstrip().endswith(":") and second.strip()
                and second.rstrip().endswith(":") and len(second) - len(second.lstrip()) == indent
                and len(body) - len(body.lstrip()) > indent and body.strip()):
            lines[i:i + 2] = [first.rstrip() + " " + second.strip()]
        i += 1


def skip_field_aliases(app, what, name, obj, skip, options):
    """A ``NamedTuple``'s fields are described by its ``Attributes`` section: skip their alias properties."""
    doc = getattr(obj, "__doc__", None) or ""
    return True if doc.startswith("Alias for field number") else None


def setup(app):
    app.connect("autodoc-process-docstring", clean_docstring)
    app.connect("autodoc-skip-member", skip_field_aliases)
    app.add_config_value("api_modules", [], "env")
    app.add_directive("public-api", PublicApi)
    app.connect("missing-reference", resolve_unqualified)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
