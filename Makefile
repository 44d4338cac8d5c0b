# Set-up on a fresh machine is `make demo` or `make test`: each creates .venv when missing and
# installs the project (editable, with the dev and mlflow extras) before doing its job.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test test-fast lint clean-results

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,mlflow]'
	touch $(STAMP)

install: $(STAMP)

# The quick suite: attention vs LSTM vs GRU on the five offline datasets (digits,
# synth_digits, numbers, synth_strings, reports), nothing to download; then the table and the report.
demo: install
	$(BIN)/mhab run -m suite=quick
	$(BIN)/mhab table results/quick
	$(BIN)/mhab report results/quick

# -n auto: one pytest worker per core (pytest-xdist); each worker's torch, and the commands it
# starts, get their share of the cores (tests/conftest.py).
test: install
	$(BIN)/python -m pytest -q -n auto

# The edit-test loop: everything but the end-to-end command-line runs (marked slow).
test-fast: install
	$(BIN)/python -m pytest -q -n auto -m "not slow"

lint: install
	$(BIN)/ruff check .

clean-results:
	rm -rf results/runs results/hydra results/quick results/standard results/claims
