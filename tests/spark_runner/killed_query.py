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
import sys
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
