# Two entry points, each self-contained on a fresh machine:
#   make demo   install the project and run the main job on the bundled UCI Adult data
#   make test   install the project with every extra and the test tools, then run the whole suite
# PyTorch is pinned to the 2.13.0 CPU build first: an unpinned torch would pull a multi-GB CUDA build.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0

.PHONY: demo test install install-test postgres

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e ".[optuna]"

install-test: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e ".[optuna,ray,postgres,test]"

# The PostgreSQL tests start their own throwaway server from the Debian package's binaries.
postgres:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null)

demo: install
	$(BIN)/eve-search adult --space arch

test: install-test postgres
	$(BIN)/python -m pytest -q
