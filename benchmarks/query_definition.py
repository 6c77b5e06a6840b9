"""How long defining a keyed query takes, by bucket count: the labels of the buckets reach the plan as one SQL array
literal (`windowing.runners.spark.query._bucket`), where they were built as one Spark Column per label.

    .venv/bin/python benchmarks/query_definition.py [--buckets 200 2000 20000] [--repeat 3]

Prints, per count, the median seconds of defining ``windowed(...).fixed(10).aggregate(...)`` with
``windowing.spark.buckets`` set, of building the labels as one Column each (the earlier way) beside it, and of the
defined query's first ``collect()``. Nothing else of the query runs: its input is one row.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from accumulations import Sum  # noqa: E402
from windowing import windowed  # noqa: E402
from windowing.runners.spark import bucket_labels  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", type=int, nargs="+", default=[200, 2000, 20000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.repeat < 1 or min(args.buckets) < 1:
        parser.error(f"--repeat={args.repeat} and --buckets={args.buckets} must be positive")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    events = spark.createDataFrame([("a", 1, 2)], "user string, ts long, amount long")
    print("| buckets | define s | labels as Columns s | first collect() s |")
    print("| ---: | ---: | ---: | ---: |")
    try:
        for count in args.buckets:
            spark.conf.set("windowing.spark.buckets", str(count))
            labels = bucket_labels(count)  # cached: both ways below time building the expression, not finding labels
            defined, columns, collected = [], [], []
            for _ in range(args.repeat):
                start = time.perf_counter()
                query = windowed(events, time="ts", key="user").fixed(10).aggregate(total=Sum("amount"))
                defined.append(time.perf_counter() - start)
                start = time.perf_counter()
                F.array(*[F.lit(int(label)) for label in labels])
                columns.append(time.perf_counter() - start)
                start = time.perf_counter()
                query.collect()
                collected.append(time.perf_counter() - start)
            print(f"| {count:,} | {statistics.median(defined):.2f} | {statistics.median(columns):.2f} | "
                  f"{statistics.median(collected):.2f} |", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
