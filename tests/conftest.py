"""Shared fixtures: one local SparkSession for the whole test run.

Spark starts only when a test asks for the ``spark`` fixture, so the pure
pandas suites never pay the ~10 s JVM start-up.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests import sparks

# CI explores the same examples on every run (derandomized), so a green rehearsal on a
# fresh clone means a green CI; local runs keep drawing new examples and find new cases.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def spark():
    session = sparks.session(sparks.LOCAL, "tests", **{"spark.driver.memory": "2g"})
    yield session
    session.stop()
