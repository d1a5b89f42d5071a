"""Sphinx configuration of eve-search's documentation site (``make docs``).

The build is offline: no intersphinx, no remote theme assets. The API reference imports every public
module, so the build needs the extras the integrations use (``pip install -e '.[optuna,ray,lora,docs]'``;
``make docs`` installs them when they are missing).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))

# The reference documents these modules (each on one page of docs/api/), in this order of precedence
# when a name is exported by several. tests/test_docs.py checks that it covers every public module that
# tests/test_docstrings.py checks.
api_modules = [
    "eve_search",
    "eve_search.optim", "eve_search.optim.budget",
    "eve_search.tasks", "eve_search.tasks.models", "eve_search.tasks.spaces", "eve_search.tasks.adult",
    "eve_search.tasks.mnist", "eve_search.tasks.lora",
    "eve_search.data",
    "eve_search.engine", "eve_search.engine.ledger", "eve_search.engine.trial", "eve_search.engine.sha",
    "eve_search.engine.sweep", "eve_search.engine.store", "eve_search.engine.checkpoint",
    "eve_search.engine.batches", "eve_search.engine.stream", "eve_search.engine.pool",
    "eve_search.engine.simulator", "eve_search.engine.backend",
    "eve_search.integrations.ray", "eve_search.integrations.optuna",
    "eve_search.dashboard",
    "eve_search.analysis.ranking", "eve_search.analysis.audit", "eve_search.analysis.summary",
    "eve_search.analysis.peer_records",
    "eve_search.experiments.protocol", "eve_search.experiments.ranking", "eve_search.experiments.audit",
    "eve_search.experiments.synthetic", "eve_search.experiments.pools",
    "eve_search.benchmarks.throughput", "eve_search.benchmarks.sweep", "eve_search.benchmarks.matmul",
    "eve_search.benchmarks.memory", "eve_search.benchmarks.scale", "eve_search.benchmarks.peers_sim",
    "eve_search.cli", "eve_search.cli.args", "eve_search.cli.commands.adult", "eve_search.cli.commands.audit",
    "eve_search.cli.commands.bench_matmul", "eve_search.cli.commands.bench_memory",
    "eve_search.cli.commands.bench_scale", "eve_search.cli.commands.bench_sweep",
    "eve_search.cli.commands.bench_synthetic", "eve_search.cli.commands.dashboard",
    "eve_search.cli.commands.bench_throughput", "eve_search.cli.commands.lora", "eve_search.cli.commands.mnist",
    "eve_search.cli.commands.rank", "eve_search.cli.commands.sweep",
    "eve_search.paper", "eve_search.testing",
]

# What the reference imports beyond the core dependencies, and the extra that installs it.
_NEEDED = {"optuna": "optuna", "ray": "ray", "peft": "lora", "transformers": "lora", "myst_parser": "docs",
           "furo": "docs"}
_missing = sorted({extra for module, extra in _NEEDED.items() if importlib.util.find_spec(module) is None})
if _missing:
    raise RuntimeError(f"the documentation needs the extras {', '.join(_missing)}: "
                       f"pip install -e '.[{','.join(_missing)}]' (make docs installs them)")

import eve_search  # noqa: E402  (after the check above, so a missing extra gets the line above)

eve_search.configure_openmp()

project = "eve-search"
author = "the eve-search authors"
copyright = "the eve-search authors, Apache-2.0"
release = eve_search.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "public_api",
    "repo_pages",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

# Markdown (MyST): GitHub-style anchors for headings, so the links inside searches/README.md work.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 5

# autodoc + napoleon: the docstrings are Google style (Args, Returns, Raises, Example sections).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# An Attributes section is a field list (not attribute entries, which would repeat the members autodoc lists).
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"undoc-members": False}
add_module_names = False
python_maximum_signature_line_length = 100

html_theme = "furo"
html_title = f"eve-search {release}"
html_static_path = ["_static"]
html_show_sourcelink = False
html_copy_source = False
