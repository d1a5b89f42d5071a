# Two entry points, each self-contained on a fresh machine:
#   make demo   install the project and run the main job on the bundled UCI Adult data
#   make test   install the project with every extra, the test tools and the Debian packages the
#               tests drive (PostgreSQL, Chromium, Fashion-MNIST), then run the whole suite
# PyTorch is pinned to the 2.13.0 CPU build first: an unpinned torch would pull a multi-GB CUDA build.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
# postgresql: the store tests start a throwaway server; chromium + chromium-driver: the dashboard is
# checked in a real headless browser; dataset-fashion-mnist: the default data of `eve-search mnist`.
DEBIAN_PACKAGES ?= postgresql chromium chromium-driver dataset-fashion-mnist

.PHONY: demo test install install-test system-packages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e ".[optuna]"

install-test: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e ".[optuna,ray,postgres,lora,test]"

system-packages:
	@missing=""; for package in $(DEBIAN_PACKAGES); do \
		dpkg -s $$package >/dev/null 2>&1 || missing="$$missing $$package"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

demo: install
	$(BIN)/eve-search adult --space arch

test: install-test system-packages
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -n 2 --dist loadfile
