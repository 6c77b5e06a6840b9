"""Spark's Python workers on an interpreter that cannot import this package: refused before the query
on a local master, and named with the fix from the workers elsewhere (docs/spark.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests import sparks
from windowing import windowed
from windowing.runners.spark import spark_typed
from windowing.runners.spark.combine import pack
from windowing.runners.spark.worker_python import on_workers

from .helpers import events

HINT = r"The interpreter that runs Spark's Python workers needs spark-event-windows, its dependencies"


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A virtual environment with nothing installed: its python3 imports neither pandas nor this package."""
    home = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    return home / "bin"


@pytest.mark.spark
def test_a_local_master_whose_workers_python3_lacks_pandas_is_refused_before_the_query(bare_python):
    """The docs' example run with .venv/bin/python, the venv not activated: the workers ran the python3 on
    PATH, and the query died in its first micro-batch with "No module named 'pandas'", seen only in
    query.exception()."""
    env = {name: value for name, value in os.environ.items() if name not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bare_python}{os.pathsep}{env.get('PATH', '')}"
    done = sparks.run_driver("tests.spark_runner.unset_worker_python", env=env)
    assert done.stdout.startswith("refused: Spark's Python workers would run 'python3' "
                                  f"({bare_python / 'python3'}), which cannot import this package: "
                                  "ModuleNotFoundError: No module named 'pandas'. "), done.stdout
    assert f"PYSPARK_PYTHON={sys.executable}" in done.stdout


def test_a_worker_without_this_package_names_the_missing_module_and_the_fix(bare_python, tmp_path):
    """What a worker gets loads with pyspark alone (pyspark's own Python path, as workers have it); calling
    it names the module the interpreter lacks and how to fix it. pyspark loaded the function itself and
    failed with a bare ModuleNotFoundError."""
    import pyspark
    from pyspark import cloudpickle

    shipped = tmp_path / "function.pickle"
    shipped.write_bytes(cloudpickle.dumps(on_workers(pack)))
    libraries = Path(pyspark.__file__).parent / "python" / "lib"
    path = os.pathsep.join(str(p) for p in sorted(libraries.glob("*.zip")))
    call = f"import pickle; pickle.loads(open({str(shipped)!r}, 'rb').read())(iter([]))"
    done = subprocess.run([str(bare_python / "python3"), "-c", call], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": path, "PATH": os.environ.get("PATH", "")})
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: Spark's Python worker cannot load this pipeline's code "
                           "(ModuleNotFoundError: No module named 'windowing'). The interpreter that runs"), done.stderr


@pytest.mark.spark
def test_an_accumulation_whose_module_the_workers_lack_fails_the_query_with_the_fix(spark, tmp_path):
    name = f"driver_only_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from accumulations import Accumulation\n\n"
        "class Total(Accumulation):\n"
        "    def __init__(self, column):\n        self.column = column\n"
        "    def default_accumulated_value(self):\n        return 0\n"
        "    def accumulate(self, accumulated, value):\n        return accumulated + value\n"
        "    def merge(self, a, b):\n        return a + b\n"
        "    def get_output(self, accumulated):\n        return accumulated\n")
    sys.path.insert(0, str(tmp_path))
    try:
        module = __import__(name)
        panes = windowed(spark.createDataFrame(events([("a", 1, 5)])), time="ts", key="user").fixed("10 seconds") \
            .aggregate(total=spark_typed(module.Total("amount"), "bigint"))
        with pytest.raises(Exception, match=r"Spark's Python worker cannot load this pipeline's code \(ModuleNotFoundError: "
                                            rf"No module named '{name}'\)\. {HINT}"):
            panes.collect()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
