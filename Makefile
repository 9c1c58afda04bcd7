# Two commands a new user needs: `make run` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint duplicates install clean FORCE

# perfcast's own modules sit in common/ (perfcast.errors, perfcast.cli, ...), the layers in the
# folders beside it (perfcast.datasets is datasets/, ...): setup.py maps them.
PACKAGE_DIRS := common datasets features predictor training optimizer scheduler serving

# The package's files: the strict editable install below links each one, so adding or removing
# one reinstalls. The list is rewritten only when it changes.
MODULES := build/package-files.txt
$(MODULES): FORCE
	@mkdir -p build && find -H $(PACKAGE_DIRS) -type f -not -path '*__pycache__*' | LC_ALL=C sort \
		> $@.new && { cmp -s $@.new $@ && rm $@.new || mv $@.new $@; }

# A strict editable install: build/__editable__.perfcast-*/perfcast/ mirrors the import paths
# with a link to each file here, on a plain path in a .pth file, so editors and import-graph
# tools resolve perfcast.datasets & co. by path (pyproject.toml [tool.pyright]);
# tests/test_architecture.py checks the mirror.
$(STAMP): pyproject.toml setup.py $(MODULES)
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and exactly pinned, so pip takes the CPU wheel instead of a CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]' --config-settings editable_mode=strict
	touch $(STAMP)

install: $(STAMP)

# State (MLflow store, caches) under var/ here unless PERFCAST_HOME says otherwise; an installed
# perfcast defaults to the platform's per-user data directory instead.
run: $(STAMP)
	PERFCAST_HOME="$${PERFCAST_HOME:-$(CURDIR)/var}" $(BIN)/perfcast serve

test: $(STAMP)
	$(BIN)/ruff check .
	# a worker per core, each test module whole on one worker (its fitted models built once) and
	# the modules that start Ray on one worker between them, first (tests/conftest.py)
	$(BIN)/python -m pytest -q -n auto --dist loadgroup --no-loadscope-reorder --durations=10

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# No block of 6 or more identical lines (imports, comments, docstrings and signatures aside) is
# written twice across the package's modules (symilar compares files with each other): the second
# copy belongs in one function both places call.
duplicates: $(STAMP)
	@out=$$(git ls-files $(foreach d,$(PACKAGE_DIRS),'$(d)/*.py') | xargs $(BIN)/symilar \
		--duplicates=6 --ignore-comments --ignore-docstrings --ignore-imports \
		--ignore-signatures) && echo "$$out" && echo "$$out" | grep -q ' duplicates=0 '

clean:
	rm -rf $(VENV) .pytest_cache mlruns build *.egg-info
