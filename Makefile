# `make demo` and `make test` create .venv on first use and reinstall when pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench test-spark35

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m windowing.demo

test: $(STAMP)
	$(PY) -m pytest -q

# The Spark runner's tests and the file sink's streaming queries (its foreachBatch path) on pyspark 3.5 (Databricks Runtime 15.4 and 16.4 LTS) with pandas 2, in their own venv.
SPARK35_VENV ?= .venv-spark35
SPARK35_PINS := 'pyspark>=3.5,<3.6' 'pandas>=2,<3' 'numpy<2' 'pyarrow>=14,<15'
SPARK35_STAMP := $(SPARK35_VENV)/.installed

$(SPARK35_STAMP): pyproject.toml
	$(PYTHON) -m venv $(SPARK35_VENV)
	$(SPARK35_VENV)/bin/python -m pip install -q --upgrade pip
	$(SPARK35_VENV)/bin/python -m pip install -q -e '.[test]' $(SPARK35_PINS)
	touch $(SPARK35_STAMP)

test-spark35: $(SPARK35_STAMP)
	$(SPARK35_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/spark_runner tests/file_sink/test_spark_queries.py

bench: $(STAMP)
	$(PY) benchmarks/engine_pandas.py
