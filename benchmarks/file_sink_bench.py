"""File sink throughput against Spark's native streaming file sinks, same data, same run.

Run: ``.venv/bin/python benchmarks/file_sink_bench.py [--rows N] [--files F]``.
A streaming query reads F Parquet input files (one per micro-batch) and writes
them once with Spark's ``writeStream.format(...)`` and once with ``FileSink``;
rows/s is input rows over wall time, MB/s is bytes of finished output over wall time.

``--fs-calls`` instead counts the filesystem calls (round trips on an object
store) of a writer given ten batches, on the tests' ``counting://`` filesystem.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from storage.file_sink import FileSink, RollingPolicy  # noqa: E402


def output_bytes(root: str) -> int:
    total = 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        total += sum(os.path.getsize(os.path.join(directory, f)) for f in files if not f.startswith(("_", ".")))
    return total


def count_fs_calls() -> None:
    from storage.file_sink import ColumnBuckets
    from tests.file_sink.helpers import batch, counted_calls

    print("| format | buckets | batches | parts | calls | by method |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for fmt, buckets in (("parquet", 2), ("jsonl", 2), ("parquet", 10)):
        sink = FileSink(f"counting://bench-{fmt}-{buckets}/out", format=fmt).with_buckets(ColumnBuckets("k"))
        calls = counted_calls()
        calls.clear()
        writer = sink.writer()
        for batch_id in range(10):
            writer.write_batch(batch(20 * batch_id, 20, buckets), batch_id, 0)
        writer.close()
        by_method = ", ".join(f"{name} {n}" for name, n in sorted(calls.items()))
        print(f"| {fmt} | {buckets} | 10 | {10 * buckets} | {sum(calls.values())} | {by_method} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--fs-calls", action="store_true", help="count filesystem calls instead (no Spark)")
    args = parser.parse_args()
    if args.fs_calls:
        count_fs_calls()
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = tempfile.mkdtemp(prefix="file_sink_bench_")
    source = os.path.join(work, "in")
    per_file = args.rows // args.files
    for i in range(args.files):
        (
            spark.range(i * per_file, (i + 1) * per_file, numPartitions=1)
            .selectExpr("id", "concat('user-', id % 1000) as k", "timestamp_millis(id) as ts",
                        "rand(7) * 100 as v", "sha2(cast(id as string), 256) as s")
            .write.mode("append").parquet(source)
        )
    schema = spark.read.parquet(source).schema
    rows = spark.read.parquet(source).count()
    spark.read.parquet(source).write.json(os.path.join(work, "warm-up"))  # JIT and caches, untimed

    def stream():
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(source)

    results = []
    for fmt in ("json", "parquet"):
        for name in ("spark native", "FileSink"):
            out, ckpt = os.path.join(work, f"{fmt}-{name}-out"), os.path.join(work, f"{fmt}-{name}-ckpt")
            start = time.perf_counter()
            if name == "spark native":
                query = (stream().writeStream.format(fmt).option("path", out).option("checkpointLocation", ckpt)
                         .trigger(availableNow=True).start())
            else:
                # A part per batch, as Spark's sink finishes its files every batch: same work, all readable.
                sink = FileSink(out, format="jsonl" if fmt == "json" else "parquet")
                sink = sink.with_rolling_policy(RollingPolicy.on_every_batch())
                query = sink.start(stream(), checkpoint_location=ckpt, trigger={"availableNow": True})
            query.awaitTermination()
            elapsed = time.perf_counter() - start
            results.append((fmt, name, rows / elapsed, output_bytes(out) / elapsed / 1e6, elapsed))
    print(f"rows={rows} micro-batches={args.files} cores={os.cpu_count()}")
    print("| format | writer | rows/s | MB/s | seconds | vs native rows/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    native = {fmt: r for fmt, name, r, _, _ in results if name == "spark native"}
    for fmt, name, r, mb, sec in results:
        print(f"| {fmt} | {name} | {r:,.0f} | {mb:.1f} | {sec:.1f} | {r / native[fmt]:.2f}x |")
    spark.stop()
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
