"""The interpreter of Spark's Python workers: functions shipped so that a worker lacking this
package fails naming what is missing, and a check before a local query starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any, Callable

from ...errors import WindowingConfigError


def on_workers(function: Callable[..., Any], quick_ack: bool = True) -> Callable[..., Any]:
    """``function`` (of one argument, or three: ``applyInPandasWithState``'s) as Spark's Python workers
    get it: pickled inside a function that needs only the standard library to load.

    pyspark loads a function before calling it, and one of this package's would import the package
    (and a pipeline's own accumulations) right then: a worker whose interpreter lacks them failed
    with a bare ``ModuleNotFoundError``. This one loads ``function`` when first called and fails
    naming the missing module and how to fix it (`worker_import_hint`); the message reaches the
    driver in the query's exception.

    Each call starts with ``gc.freeze()``: pyspark's worker runs a full ``gc.collect()`` after every
    task, and each one walked every object alive in the worker, the modules and classes of pandas,
    pyarrow and pyspark included: a large part of this runner's Python time (``benchmarks/spark_bench.py``,
    docs/spark_benchmark_history.md, "Earlier runs, with a set bucket count"). What is alive when a task's
    function starts is such lasting state; frozen, the collector skips it. Reference counting still frees
    frozen objects. The splitter's Spark source does the same (``storage.splitter.spark_source``).

    Each call also drops the zip archives' importers from ``sys.path_importer_cache``: pyspark 3.5's worker
    calls ``importlib.invalidate_caches()`` before every task, and on Python 3.11 a zip importer in that cache
    then reads its archive's whole directory again (pyspark's zips and Spark's core jar, on the workers'
    path), which made the engine's micro-batch at 1k keys 557 ms where it now takes 351 with fixed windows
    (617 and 389 with sessions; docs/spark.md, "Python workers on pyspark 3.5"). A later import from an archive makes its importer anew.

    With ``quick_ack`` the first call in a worker process has it acknowledge at once what the JVM
    sends it over TCP (`storage.worker_socket`): each exchange with the worker otherwise waited up to 40 ms.
    """
    from pyspark import cloudpickle

    payload, hint = cloudpickle.dumps(function), worker_import_hint()  # type: ignore[no-untyped-call]
    worker_socket = "storage.worker_socket"  # by name: the closure is pickled by value, and loads with the standard library
    loaded: list[Callable[..., Any]] = []

    def load() -> Callable[..., Any]:
        import gc
        import importlib
        import pickle
        import sys
        import zipimport

        if not loaded:
            try:
                loaded.append(pickle.loads(payload))
            except ImportError as err:
                raise ModuleNotFoundError(f"Spark's Python worker cannot load this pipeline's code "
                                          f"({type(err).__name__}: {err}). {hint}") from err
            if quick_ack:
                importlib.import_module(worker_socket).acknowledge_arrivals_at_once()
        for entry, importer in list(sys.path_importer_cache.items()):  # after the imports of loading
            if isinstance(importer, zipimport.zipimporter):
                del sys.path_importer_cache[entry]
        gc.freeze()
        return loaded[0]

    if function.__code__.co_argcount == 3:
        def stateful(key: Any, frames: Any, state: Any) -> Any:
            return load()(key, frames, state)

        return stateful

    def stateless(rows: Any) -> Any:
        return load()(rows)

    return stateless


def worker_import_hint() -> str:
    """How to give Spark's Python workers an interpreter that can import this package and a pipeline's code."""
    return ("The interpreter that runs Spark's Python workers needs spark-event-windows, its dependencies "
            "(pandas, pyarrow, numpy, ...) and the modules of your own accumulations. On a local master, start "
            f"Python with PYSPARK_PYTHON set to the interpreter that has them, e.g. PYSPARK_PYTHON={sys.executable} "
            "(spark.pyspark.python with spark-submit), or activate its virtual environment first; on a cluster, "
            "install the wheel on every node (Databricks: a job or cluster library).")


_WORKER_PYTHON_CHECKED: dict[tuple[str, str], str | None] = {}


def check_worker_python(spark: Any) -> None:
    """On a local master, refuse before the query starts when Spark's Python workers would run an
    interpreter that cannot import this package: with ``PYSPARK_PYTHON`` unset they run the
    ``python3`` on ``PATH``, often not the one running the driver (a virtual environment used without
    activating it), and the query then failed in its first micro-batch, visible only in
    ``query.exception()``. Over Spark Connect the workers are the server's concern: not checked."""
    context = getattr(spark, "_sc", None)  # a classic session's SparkContext; Connect sessions have none
    if context is None or not str(context.master).startswith("local"):
        return
    executable = str(context.pythonExec)
    found = executable if os.sep in executable else shutil.which(executable)
    if found is not None and os.path.abspath(found) == os.path.abspath(sys.executable):
        return
    key = (str(found), os.getcwd())
    if key not in _WORKER_PYTHON_CHECKED:
        _WORKER_PYTHON_CHECKED[key] = _import_problem(found, executable)
    if _WORKER_PYTHON_CHECKED[key] is not None:
        raise WindowingConfigError(f"{_WORKER_PYTHON_CHECKED[key]}. {worker_import_hint()}")


def _import_problem(found: str | None, executable: str) -> str | None:
    """Why interpreter ``found`` (``executable`` as Spark names it) cannot import what the workers need, or None."""
    if found is None:
        return f"Spark's Python workers would run {executable!r}, which is not on PATH"
    probe = subprocess.run([found, "-c", "import pandas, pyarrow, windowing.runners.spark"], capture_output=True,
                           text=True, timeout=120)  # from the driver's directory, with its environment, as workers
    if probe.returncode == 0:
        return None
    error = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
    return f"Spark's Python workers would run {executable!r} ({found}), which cannot import this package: {error}"
