# Two entry points, each self-contained on a fresh machine:
#   make demo   install the project and run the main job on the bundled UCI Adult data
#   make test   install the project with every extra, the test tools and the Debian packages the
#               tests drive (PostgreSQL, Chromium, Fashion-MNIST), then run the whole suite
#   make docs   build the documentation site into docs/_build/html (offline; warnings are errors)
# PyTorch is pinned to the 2.13.0 CPU build first: an unpinned torch would pull a multi-GB CUDA build.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
# postgresql: the store tests start a throwaway server; chromium + chromium-driver: the dashboard is
# checked in a real headless browser; dataset-fashion-mnist: the default data of `eve-search mnist`.
DEBIAN_PACKAGES ?= postgresql chromium chromium-driver dataset-fashion-mnist

.PHONY: demo test test-load test-hosts docs install install-test install-docs system-packages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Byte-compiled at install: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines), a package
# installed without its .pyc files is compiled again by every process that imports it. pip compiles one file
# at a time, so pip installs without compiling and compileall then compiles on every core; like pip, it goes
# on past a file that does not compile (torch ships one written for Python 3.12). The project's own folders
# too: the editable install runs them from the checkout, and each command, worker, Ray actor and test
# subprocess imports them. A source edited later is newer than its .pyc, so Python reads the source again.
PIP_INSTALL := $(BIN)/pip install --quiet --no-compile
COMPILE = $(BIN)/python -m compileall -qq -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" eve_search searches tests || true

install: $(BIN)/python
	$(PIP_INSTALL) $(TORCH)
	$(PIP_INSTALL) -e .
	@$(COMPILE)

install-test: $(BIN)/python
	$(PIP_INSTALL) $(TORCH)
	$(PIP_INSTALL) -e ".[ray,postgres,lora,test]"
	@$(COMPILE)

# The site's API reference imports every public module, so the build needs the ray and lora extras too.
# Installs only what is missing: on a machine already set up, `make docs` touches no network.
install-docs: $(BIN)/python
	@$(BIN)/python -c "import sys; sys.exit(sys.version_info < (3, 11))" || { \
		echo "make docs: Sphinx 9 and MyST 5 need Python 3.11 or later (a .venv made with PYTHON=python3.11)"; exit 2; }
	@$(BIN)/python -c "import eve_search, optuna, ray, peft, sphinx, myst_parser, furo" 2>/dev/null || { \
		$(PIP_INSTALL) $(TORCH) && $(PIP_INSTALL) -e ".[ray,lora,docs]" && $(COMPILE); }

system-packages:
	@missing=""; for package in $(DEBIAN_PACKAGES); do \
		dpkg -s $$package >/dev/null 2>&1 || missing="$$missing $$package"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

demo: install
	$(BIN)/eve-search adult --space arch

# The Python and the Debian packages install side by side (each waits on downloads at its own times).
test:
	@$(MAKE) --no-print-directory -j2 install-test system-packages
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=40
	VENV=$(VENV) bash .ci/hosts.sh

# The integration tests against the oldest Optuna and Ray that pyproject.toml allows, each in its own
# virtual environment under .hosts/ (make test runs them after the suite, which runs the newest).
test-hosts: install-test system-packages
	VENV=$(VENV) bash .ci/hosts.sh

# -E: read every page afresh, so a warning from an earlier build is never hidden by the cache.
docs: install-docs
	$(BIN)/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html
	@echo "built docs/_build/html/index.html"

# The integration tests that run on a busy machine (processes spinning, a slow searcher, late reports, a
# slow store: tests/load.py); `make test` runs them too, with the rest.
test-load: install-test system-packages
	$(BIN)/python -m pytest -q -m load
