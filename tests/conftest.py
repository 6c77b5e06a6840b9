"""Shared fixtures: one local SparkSession for the whole test run.

Spark starts only when a test asks for the ``spark`` fixture, so the pure
pandas suites never pay the ~10 s JVM start-up.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

# CI explores the same examples on every run (derandomized), so a green rehearsal on a
# fresh clone means a green CI; local runs keep drawing new examples and find new cases.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def spark():
    # Workers must run this interpreter (the venv's), or they miss our packages.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
