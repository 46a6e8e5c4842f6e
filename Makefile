# Two commands on a fresh machine:  make demo   and   make test
# Both create .venv if missing and install riskrank into it.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Data and caches live inside the checkout (both are git-ignored).
export RISKRANK_DATA  ?= $(CURDIR)/data
export RISKRANK_CACHE ?= $(CURDIR)/.cache
export HF_HUB_OFFLINE := 1
# Where `make data` copies the benchmarks from: `upstream` (GitHub, pinned commits) or a
# local mirror directory in <owner>/<repo>/<path> layout (CI uses ../shared/datasets).
DATA_SOURCE ?= upstream

.PHONY: venv data demo test test-slow lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch is pinned to the CPU build; install it first so nothing pulls a CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

data: $(STAMP)
	$(BIN)/riskrank data fetch --source $(DATA_SOURCE) --dest $(RISKRANK_DATA) --quiet

demo: $(STAMP)
	$(BIN)/riskrank demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

test: $(STAMP) data lint
	$(BIN)/python -m pytest -q

test-slow: $(STAMP) data
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) .cache build src/*.egg-info
