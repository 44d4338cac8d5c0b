# Set-up on a fresh machine is `make demo` or `make test`: each creates .venv when missing and
# installs the project (editable, with the dev extras) before doing its job.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RESULTS ?= results/demo

.PHONY: install demo test lint clean-results

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The quick image comparison: ViT vs row-by-row LSTM and GRU on scikit-learn's 8x8 digits
# (no download, about a minute on 2 CPU cores), then one table of the results.
demo: install
	$(BIN)/mhab run -m task=image task.dataset=digits model=attention,lstm,gru \
		trainer.epochs=30 trainer.batch_size=64 results_dir=$(RESULTS)
	$(BIN)/mhab table $(RESULTS)

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .

clean-results:
	rm -rf results/runs results/hydra results/demo
