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
# local mirror directory in <owner>/<repo>/<path> layout (CI passes its mirror).
DATA_SOURCE ?= upstream
# A mirror directory given as the source is also the one the real-mirror tests read.
ifneq ($(DATA_SOURCE),upstream)
export RISKRANK_MIRROR ?= $(DATA_SOURCE)
endif

.PHONY: venv data demo test test-slow lint imports docs lock clean console-shots base-model transfer loco poison-detector

# Everything installs from the lock (constraints.txt): the exact versions riskrank is tested with.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, from the lock (the CPU build), so nothing pulls a CUDA build.
	$(BIN)/python -m pip install -q -c constraints.txt torch
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

data: $(STAMP)
	$(BIN)/riskrank data fetch --source $(DATA_SOURCE) --dest $(RISKRANK_DATA) --quiet

demo: $(STAMP)
	$(BIN)/riskrank demo

# riskrank-base, the heads shipped in the wheel (docs/base-model.md). SOURCE_DATE_EPOCH pins the
# sidecar's time stamp and BASE_THREADS the thread count (float reductions may depend on it; the
# shipped files were built with these two values). The card records the build's fingerprint (the
# training code, the level model's files, the data, the choices, these two values);
# tests/test_base.py fails when any of them changes: rebuild and commit the files then.
BASE_MODEL    := src/riskrank/base/model
BASE_TRANSFER := benchmarks/results/transfer_lobo.json
BASE_EPOCH    ?= 1764547200
BASE_THREADS  ?= 1
base-model: $(STAMP) data
	SOURCE_DATE_EPOCH=$(BASE_EPOCH) OMP_NUM_THREADS=$(BASE_THREADS) MKL_NUM_THREADS=$(BASE_THREADS) \
		$(BIN)/riskrank train --base --out $(BASE_MODEL) --force \
		$(if $(wildcard $(BASE_TRANSFER)),--transfer $(BASE_TRANSFER))

# The poisoning detector shipped in the wheel (docs/trust.md), fitted and judged in one run: 40
# fits (leave one family out, with one server out each; leave one corpus out; the shipped
# one), twenty minutes on two shared cores, the first run also building the static piece table (minutes).
# It writes the artefact docs/trust.md renders. NPM_BIN: the reference servers' bin directory.
POISON_DETECTOR := src/riskrank/base/poison
NPM_BIN ?= $(shell bash .ci/npm/install.sh $(HOME)/.cache/riskrank-ci/npm 2>/dev/null | tail -1)
poison-detector: $(STAMP) data
	OMP_NUM_THREADS=2 $(BIN)/python benchmarks/poison_detector.py --data $(RISKRANK_DATA) --ship $(POISON_DETECTOR) \
		--json benchmarks/results/poison_detector.json $(if $(NPM_BIN),--npm-bin $(NPM_BIN))

# Leave one benchmark out, 3 seeds (tens of CPU minutes): the transfer table of docs/base-model.md.
transfer: $(STAMP) data
	$(BIN)/python benchmarks/transfer_lobo.py --seeds 42,123,777 --direction 'sealtools->ultratool' --out benchmarks/results/lobo_seal.json
	$(BIN)/python benchmarks/transfer_lobo.py --seeds 42,123,777 --direction 'ultratool->sealtools' --out benchmarks/results/lobo_ultra.json
	$(BIN)/python benchmarks/transfer_lobo.py --summarise benchmarks/results/lobo_seal.json benchmarks/results/lobo_ultra.json --out $(BASE_TRANSFER)

# Leave one corpus out (six registries, each held out in turn; minutes per build, seed 42 of
# every registry first): the "Leave one corpus out" tables of docs/base-model.md. Two processes.
LOCO_SEEDS ?= 42,123,777
loco: $(STAMP) data
	$(BIN)/python benchmarks/transfer_loco.py --seeds $(LOCO_SEEDS) --held-out ultratool --held-out bfcl --held-out apibank \
		--out benchmarks/results/loco_a.json & \
	$(BIN)/python benchmarks/transfer_loco.py --seeds $(LOCO_SEEDS) --held-out sealtools --held-out apibench --held-out toolalpaca \
		--out benchmarks/results/loco_b.json; wait
	$(BIN)/python benchmarks/transfer_loco.py --summarise benchmarks/results/loco_a.json benchmarks/results/loco_b.json \
		--out benchmarks/results/loco.json

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools

# No import cycle in the package (a new one fails the build).
imports: $(STAMP)
	$(BIN)/python tools/check_imports.py src/riskrank

# Every figure of README.md and docs/*.md against the committed artefact it comes from: a
# figure without one, or one that differs, fails (tools/check_figures.py says how to add one).
docs: $(STAMP) data
	$(BIN)/python tools/check_figures.py

# Two worker processes (pytest-xdist), a test file per worker at a time: many tests wait on the
# servers they start, and a file's tests share its fixtures (some take a minute to build).
# tests/conftest.py gives each worker its share of the cores for torch and BLAS.
TEST_WORKERS ?= 2
test: $(STAMP) data lint imports docs
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# Rewrite the lock from the current venv (after changing a range in pyproject.toml).
lock: $(STAMP)
	{ sed -n '1,3p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# Screenshots of every console page into docs/console/: a gateway over the reference npm MCP
# servers, a scripted agent, an operator in Debian's headless chromium (tools/console_shots.py).
console-shots: $(STAMP)
	$(BIN)/python tools/console_shots.py docs/console

test-slow: $(STAMP) data
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) .cache build src/*.egg-info
