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


@pytest.mark.spark
def test_a_workers_task_finds_no_zip_importer_for_pyspark_to_invalidate(spark):
    """pyspark 3.5's worker calls importlib.invalidate_caches() before every task, and on Python 3.11 each
    cached zip importer then read its archive's directory again (pyspark's zips and Spark's core jar). The
    runner's functions leave none in the cache (run by make test-spark35 on pyspark 3.5)."""
    def zip_importers(rows):
        import sys
        import zipimport

        # First: reading the rows may import what a new worker has not imported yet, making importers anew
        # for the next task's invalidation to reload once; a worker's later tasks import nothing new.
        cached = [entry for entry, importer in sys.path_importer_cache.items() if isinstance(importer, zipimport.zipimporter)]
        import pandas as pd

        for _ in rows:
            pass
        yield pd.DataFrame({"zips_on_path": [sum(entry.endswith((".zip", ".jar")) for entry in sys.path)],
                            "zip_importers_cached": [len(cached)]})

    seen = spark.range(8, numPartitions=4).mapInPandas(on_workers(zip_importers),
                                                      "zips_on_path long, zip_importers_cached long").toPandas()
    assert (seen.zips_on_path > 0).all(), seen  # the workers' path holds archives, so the check can fail
    assert (seen.zip_importers_cached == 0).all(), seen


def test_an_archive_on_the_path_still_imports_after_its_importer_was_dropped(tmp_path):
    """Dropped from the cache, a zip's importer is made anew by the next import that needs the archive."""
    import zipfile

    archive = tmp_path / "modules.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("first_in_zip.py", "VALUE = 1\n")
        zipped.writestr("second_in_zip.py", "VALUE = 2\n")
    shipped = tmp_path / "function.pickle"
    from pyspark import cloudpickle

    shipped.write_bytes(cloudpickle.dumps(on_workers(lambda rows: rows)))
    script = ("import pickle, sys, zipimport\n"
              f"sys.path.insert(0, {str(archive)!r})\n"
              "import first_in_zip\n"
              "cached = lambda: sum(isinstance(i, zipimport.zipimporter) for i in sys.path_importer_cache.values())\n"
              "before = cached()\n"
              f"pickle.loads(open({str(shipped)!r}, 'rb').read())(None)\n"
              "after = cached()\n"
              "import second_in_zip\n"
              "print(before, after, first_in_zip.VALUE + second_in_zip.VALUE)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "0", "3"], done.stdout + done.stderr
