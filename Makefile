# Two entry points, each self-contained on a fresh machine:
#   make demo   install the project and run the main job on the bundled UCI Adult data
#   make test   install the project with every extra and the test tools, then run the whole suite
# PyTorch is pinned to the 2.13.0 CPU build first: an unpinned torch would pull a multi-GB CUDA build.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0

.PHONY: demo test install install-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e ".[optuna]"

install-test: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e ".[optuna,ray,postgres,test]"

demo: install
	$(BIN)/eve-search adult --space arch

test: install-test
	$(BIN)/python -m pytest -q
