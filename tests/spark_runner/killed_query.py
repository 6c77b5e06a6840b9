"""One streaming query in a process of its own, for the kill-and-restart test.

``python killed_query.py '<json spec>'`` starts a local Spark (the test session's settings),
runs ``late_data_run`` on ``source`` with panes and late data written by one ``foreachBatch``
(`streaming.start_run`; with ``store``, its windows' payloads in that key-value store), processes
every file there, stops and exits 0. With ``block`` set,
the writer stops mid-batch (after that batch's panes, before its late data) and waits to be
killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def late_data_run(source, store: str | None = None):
    """``store``: a path for ``.window_state(KVStore(store))``; None keeps the windows in Spark's state."""
    from accumulations import Count, Sum, ToList
    from storage import KVStore
    from triggers import AtWatermark
    from windowing import windowed

    pipeline = (windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")
                .allowed_lateness("10 seconds").trigger(AtWatermark()))
    if store is not None:
        pipeline = pipeline.window_state(KVStore(store))
    return pipeline.run(total=Sum("amount"), n=Count(), amounts=ToList("amount"))


def write_files(source: Path, parts: list) -> None:
    """One file per micro-batch, in this order (by modification time)."""
    from tests.spark_runner.streaming import write_batch

    now = time.time()
    for i, part in enumerate(parts):
        write_batch(source, i, part)
        os.utime(source / f"part-{i:05d}.parquet", (now - 100 + i, now - 100 + i))


def uninterrupted(spark, source: Path, sink: Path, checkpoint: Path, parts: list) -> tuple:
    """Panes and late data of ``late_data_run`` (without a store) over ``parts`` in ``spark``, never killed."""
    from tests.spark_runner.streaming import read_sink, start_run

    write_files(source, parts)
    query = start_run(spark, source, sink, checkpoint, late_data_run)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    panes, late = read_sink(spark, sink / "panes"), read_sink(spark, sink / "late")
    assert len(panes) > 0 and len(late) > 0
    return panes, late


def kill_at_batch(spec: dict, batch: int, reached: Path) -> None:
    """Run the query of ``spec`` in a process of its own until its writer holds ``batch`` (after the batch's
    panes, before its late data), then SIGKILL the whole process group (driver, JVM, workers)."""
    from tests.sparks import wait_for

    blocked = {**spec, "block": {"batch": batch, "reached": str(reached)}}
    process = subprocess.Popen([sys.executable, __file__, json.dumps(blocked)], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # a loaded machine starts the process's JVM slowly: wait on the file, not on a clock
        wait_for(reached.exists, f"the query to reach batch {batch}", alive=lambda: process.poll() is None)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: the driver, Spark's JVM and its workers
        process.wait()


def restart(spec: dict) -> None:
    """Run the query of ``spec`` to the end in a new process; fail with its stderr's tail if it fails."""
    restarted = subprocess.run([sys.executable, __file__, json.dumps(spec)], timeout=600,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert restarted.returncode == 0, restarted.stderr[-3000:]


def main(spec: dict) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tests.spark_runner.streaming import start_run

    spark = (SparkSession.builder.master("local[2]").appName("killed-query")
             .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    query = start_run(spark, Path(spec["source"]), Path(spec["sink"]), Path(spec["checkpoint"]),
                      lambda source: late_data_run(source, spec.get("store")), spec.get("block"))
    query.processAllAvailable()
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
