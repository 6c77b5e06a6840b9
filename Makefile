# `make demo` and `make test` create .venv on first use and reinstall when pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo lint test test-random bench test-spark35 test-beam

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m windowing

# ruff over the product, the tests and the benchmarks, mypy (strict) over windowing, triggers and accumulations:
# configured in pyproject.toml. Seconds, so `make test` runs it first.
lint: $(STAMP)
	$(PY) -m ruff check windowing triggers accumulations storage tests benchmarks
	$(PY) -m mypy

# The slowest tests are listed at the end of the run: CI has 90 minutes for the whole of .ci/run.
test: lint
	$(PY) -m pytest -q --durations=25

# The whole suite in a random order (pytest-randomly), to find tests that depend on the tests run
# before them; CI keeps the files' order. The seed is printed: `make test-random SEED=<n>` replays it.
SEED ?=
test-random: $(STAMP)
	$(PY) -m pytest -p randomly $(if $(SEED),--randomly-seed=$(SEED))

# The Spark runner's tests and the file sink's streaming queries (its foreachBatch path) on pyspark 3.5 (Databricks Runtime 15.4 and 16.4 LTS) with pandas 2, in their own venv,
# and the tests of what runs inside those runtimes' Python workers on pandas 2, NumPy 1 and pyarrow 14: the engine, the file sink's
# writers, the key-value store and the splitter's readers (about three minutes; pyarrow 14's ORC reader aborted the process on a damaged part).
SPARK35_VENV ?= .venv-spark35
SPARK35_PINS := 'pyspark>=3.5,<3.6' 'pandas>=2,<3' 'numpy<2' 'pyarrow>=14,<15'
SPARK35_STAMP := $(SPARK35_VENV)/.installed

$(SPARK35_STAMP): pyproject.toml
	$(PYTHON) -m venv $(SPARK35_VENV)
	$(SPARK35_VENV)/bin/python -m pip install -q --upgrade pip
	$(SPARK35_VENV)/bin/python -m pip install -q -e '.[test]' $(SPARK35_PINS)
	touch $(SPARK35_STAMP)

test-spark35: $(SPARK35_STAMP)
	$(SPARK35_VENV)/bin/python -m pytest -q --durations=15 -p no:cacheprovider tests/engine tests/spark_runner tests/test_spark_output_types.py \
		tests/file_sink --ignore tests/file_sink/test_cluster.py --ignore tests/file_sink/test_spark.py tests/kv --ignore tests/kv/test_spark.py \
		tests/splitter/test_readers.py tests/splitter/test_scanner.py tests/splitter/test_state.py tests/splitter/test_compressed.py

# The differential against Apache Beam (tests/beam) in its own venv: apache-beam pins an older pyarrow.
# BEAM_EXAMPLES random pipelines (hypothesis), drawn from BEAM_SEED on.
BEAM_VENV ?= .venv-beam
BEAM_STAMP := $(BEAM_VENV)/.installed
BEAM_EXAMPLES ?= 300
BEAM_SEED ?= 0

$(BEAM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(BEAM_VENV)
	$(BEAM_VENV)/bin/python -m pip install -q --upgrade pip
	$(BEAM_VENV)/bin/python -m pip install -q -e '.[test,beam]'
	touch $(BEAM_STAMP)

test-beam: $(BEAM_STAMP)
	BEAM_EXAMPLES=$(BEAM_EXAMPLES) BEAM_SEED=$(BEAM_SEED) $(BEAM_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/beam

bench: $(STAMP)
	$(PY) benchmarks/engine_pandas.py
