# delta_ops developer entry points. `make demo` and `make test` are the README's quick start.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install compile demo test bench lint clean

install: $(STAMP) compile

# Byte-compiles the project's modules, so that no start of `delta-ops` or a Dagster run
# compiles them again (environments that set PYTHONDONTWRITEBYTECODE never write the cache
# themselves). compileall skips modules whose cache is current, so this is quick when done.
compile: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 delta_ops

# Re-installs only when the project's metadata changed; a no-op otherwise.
$(STAMP): pyproject.toml setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: install
	$(BIN)/python -m delta_ops.demo

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

lint: install
	$(BIN)/python -m pip install --quiet ruff
	$(BIN)/ruff check delta_ops delta_ops_tests benchmarks

clean:
	rm -rf $(VENV) demo_tables .dagster_home benchmarks/data
