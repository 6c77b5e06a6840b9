"""Lines per second through the splitter's Spark source versus ``spark.readStream.text``.

    .venv/bin/python benchmarks/splitter_bench.py [--size-gb 2] [--cores 2]

Writes a directory of text files (default 2 GB, 16 files) into a temporary directory and
reads it with Trigger.AvailableNow into the ``noop`` sink, for several ``block_size`` /
``blocks_per_batch`` settings (a block is one Spark partition), four queries each:

- native ``value``: ``spark.readStream.text(dir)``, what the issue compares with;
- splitter ``value``: ``read_stream(spark).select("value")``, the same rows;
- native ``value, path``: plus ``_metadata.file_path``;
- the splitter's whole rows ``value, path, block_id, offset`` (native Spark has no line offset,
  so native ``value, path`` is the closest native equivalent).

Each is measured three ways: wall seconds from ``start()`` to the end (the query's start
included), processing seconds (the micro-batches' ``triggerExecution``, which Spark's own
``processedRowsPerSecond`` divides by), and CPU seconds of Spark's JVM and of its Python
processes. ``read_stream`` reads chunk rows and cuts lines on the JVM; the splitter's line-row
source (``format("file_splitter")`` without ``rows=chunks``) is timed once for comparison, and
so is one 4-byte file (what a query costs whatever the data). Both sources are warmed up
first (JVM code generation, and for the splitter the Python workers' start and imports).
Every run is checked to read every line; prints Markdown and deletes the data.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import NamedTuple

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from spark_cpu import cpu_seconds, jvm_pid, wait_for_source_runners  # noqa: E402
from storage import FileSplitter  # noqa: E402

MB = 1024 * 1024


def write_data(directory: str, size_gb: float, files: int = 16) -> int:
    """Files of lines 20-120 bytes long; returns the number of lines."""
    pattern = [f"{i:08d} " + "x" * (10 + (i * 37) % 100) + "\n" for i in range(10_000)]
    chunk = "".join(pattern).encode()
    per_file = int(size_gb * 1024 * MB / files) // len(chunk)
    for f in range(files):
        with open(os.path.join(directory, f"part-{f:03d}.txt"), "wb") as out:
            for _ in range(per_file):
                out.write(chunk)
    return files * per_file * len(pattern)


class Run(NamedTuple):
    """One query reading everything with Trigger.AvailableNow."""

    wall: float  #: seconds from start() to the end, query start included
    processing: float  #: seconds in micro-batches (Spark's ``triggerExecution``), what ``processedRowsPerSecond`` uses
    jvm: float  #: CPU seconds of Spark's JVM
    python: float  #: CPU seconds of Spark's Python processes
    batches: int  #: micro-batches that read data

    @property
    def cpu(self) -> float:
        return self.jvm + self.python

    def vs(self, native: "Run") -> str:
        """Speed relative to ``native`` (same lines): wall / processing / CPU."""
        return f"{native.wall / self.wall:.2f}x / {native.processing / self.processing:.2f}x / {native.cpu / self.cpu:.2f}x"


def checked(frame, jvm: int, expected: int, what: str) -> Run:
    """Read everything into the ``noop`` sink, checking that the query read ``expected`` lines (counted
    with ``observe``, on every query alike, since the splitter's ``numInputRows`` counts chunks)."""
    from pyspark.sql import functions as F

    cpu, begin = cpu_seconds(jvm), time.perf_counter()
    counted = frame.observe("counted", F.count(F.lit(1)).alias("lines"))
    query = counted.writeStream.format("noop").trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - begin
    wait_for_source_runners(jvm)
    after = cpu_seconds(jvm)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["observedMetrics"]["counted"]["lines"] for p in batches)
    assert rows == expected, f"{what} read {rows} rows, expected {expected}"
    processing = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress) / 1000
    return Run(seconds, processing, after[0] - cpu[0], after[1] - cpu[1], len(batches))


def row(config: str, query: str, run: Run, lines: int, versus: str) -> str:
    return (f"| {config} | {query} | {run.wall:.1f} | {run.processing:.1f} | {run.cpu:.1f} ({run.jvm:.1f} + {run.python:.1f}) "
            f"| {lines / run.wall:,.0f} | {lines / run.processing:,.0f} | {versus} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master(f"local[{args.cores}]").appName("splitter-bench")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    data = tempfile.mkdtemp(prefix="splitter-bench-")
    try:
        lines = write_data(data, args.size_gb)
        size = sum(os.path.getsize(os.path.join(data, n)) for n in os.listdir(data))
        print(f"data: {size / MB:.0f} MiB, {lines:,} lines, 16 files; Spark local[{args.cores}]\n")
        # Warm-up of both sources: a first run pays JIT compilation and, for the splitter, the
        # start of Python workers and their imports; neither is the steady-state speed.
        jvm = jvm_pid(spark)
        native = lambda: spark.readStream.text(data)  # noqa: E731
        native_path = lambda: native().select("value", F.col("_metadata.file_path").alias("path"))  # noqa: E731
        splitter = lambda block_mb, per_batch: FileSplitter(  # noqa: E731
            data, block_size=block_mb * MB, blocks_per_batch=per_batch, settle=0).read_stream(spark)
        for warm_up in (native(), native_path(), splitter(128, 16)):
            checked(warm_up, jvm, lines, "warm-up")
        line_rows = (spark.readStream.format("file_splitter").option("block_size", str(32 * MB))  # registered above
                     .option("blocks_per_batch", "8").option("settle", "0").load(data))
        native_run = checked(native(), jvm, lines, "native")
        run = checked(line_rows, jvm, lines, "line-row splitter")
        print(f"line rows (before), 32 MiB blocks, 8 per batch: {run.wall:.1f} s ({run.cpu:.1f} cpu s: JVM {run.jvm:.1f}, "
              f"Python {run.python:.1f}); native `value` right before: {native_run.wall:.1f} s ({native_run.cpu:.1f} cpu s); "
              f"wall / processing / cpu: {run.vs(native_run)}\n", flush=True)
        # What a query costs whatever the data: the same source over one 4-byte file.
        tiny = tempfile.mkdtemp(prefix="splitter-bench-tiny-")
        try:
            with open(os.path.join(tiny, "one.txt"), "w") as out:
                out.write("abc\n")
            run = checked(FileSplitter(tiny, settle=0).read_stream(spark), jvm, 1, "splitter over a one-line file")
            print(f"fixed cost, one 4-byte file: {run.wall:.1f} s, {run.processing:.1f} s processing "
                  f"(cpu s: JVM {run.jvm:.1f}, Python {run.python:.1f})\n", flush=True)
        finally:
            shutil.rmtree(tiny, ignore_errors=True)
        # The machine may be shared: native runs right before each splitter run keep the ratio fair,
        # and CPU seconds (JVM + Python processes) show the work done whatever the other jobs do.
        print("| block_size, blocks_per_batch: partitions, micro-batches | query | wall s | processing s "
              "| cpu s (JVM + Python) | lines/s, wall | lines/s, processing | splitter / native: wall / processing / cpu |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for block_mb, per_batch in [(128, 2), (128, 16), (32, 8), (32, 64), (8, 256)]:
            native_run = checked(native(), jvm, lines, "native")
            value_run = checked(splitter(block_mb, per_batch).select("value"), jvm, lines, "splitter, value")
            path_run = checked(native_path(), jvm, lines, "native with path")
            rows_run = checked(splitter(block_mb, per_batch), jvm, lines, "splitter")
            blocks = sum(-(-os.path.getsize(os.path.join(data, n)) // (block_mb * MB)) for n in os.listdir(data))
            config = f"{block_mb} MiB, {per_batch}: {blocks}, {rows_run.batches}"
            print(row(config, "native `value`", native_run, lines, ""))
            print(row(config, "splitter `value`", value_run, lines, value_run.vs(native_run)))
            print(row(config, "native `value, path`", path_run, lines, ""))
            print(row(config, "splitter, all 4 columns", rows_run, lines, rows_run.vs(path_run)), flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
