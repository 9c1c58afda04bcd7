# Two commands a new user needs: `make run` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint install clean

$(STAMP): pyproject.toml setup.py
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and exactly pinned, so pip takes the CPU wheel instead of a CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# State (MLflow store, caches) under var/ here unless PERFCAST_HOME says otherwise; an installed
# perfcast defaults to the platform's per-user data directory instead.
run: $(STAMP)
	PERFCAST_HOME="$${PERFCAST_HOME:-$(CURDIR)/var}" $(BIN)/perfcast serve

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q --durations=10

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache mlruns build *.egg-info
