"""Shared fixtures: one local SparkSession for the whole test run.

Spark starts only when a test asks for the ``spark`` fixture, so the pure
pandas suites never pay the ~10 s JVM start-up.
"""

from __future__ import annotations

import os
import sys

import pytest


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
