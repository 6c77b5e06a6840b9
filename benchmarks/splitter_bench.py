"""Lines per second through the splitter's Spark source versus ``spark.readStream.text``.

    .venv/bin/python benchmarks/splitter_bench.py [--size-gb 2] [--cores 2]

Writes a directory of text files (default 2 GB, 16 files) into a temporary directory,
reads it with Trigger.AvailableNow into the ``noop`` sink through the splitter for
several ``blocks_per_batch`` / ``block_size`` settings (a block is one Spark partition),
each right after two native runs: ``value`` only (what ``spark.readStream.text`` gives),
and ``value`` plus the file path from ``_metadata.file_path``, the closest native
equivalent of the splitter's rows (``value, path, block_id, offset``; native Spark has no
line offset). ``read_stream`` reads chunk rows and cuts lines on the JVM; the splitter's
line-row source (``format("file_splitter")`` without ``rows=chunks``, the path before) is
timed too, once, for comparison, and so is one 4-byte file (what a query costs whatever
the data). Both sources are warmed up first (JVM code generation,
and for the splitter the Python workers' start and imports). Every run is checked to read
every line (counted with ``observe``, on every query alike, since the splitter's
``numInputRows`` counts chunks); prints a Markdown table and deletes the data.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

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


def timed(frame, jvm: int) -> tuple[float, float, float, int, int]:
    """Wall seconds, CPU seconds of the JVM and of Spark's Python processes, to read everything
    with Trigger.AvailableNow; the lines read and the micro-batches."""
    from pyspark.sql import functions as F

    cpu, begin = cpu_seconds(jvm), time.perf_counter()
    counted = frame.observe("counted", F.count(F.lit(1)).alias("lines"))
    query = counted.writeStream.format("noop").trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - begin
    wait_for_source_runners(jvm)
    after = cpu_seconds(jvm)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    return seconds, after[0] - cpu[0], after[1] - cpu[1], sum(p["observedMetrics"]["counted"]["lines"] for p in batches), len(batches)


def checked(frame, jvm: int, expected: int, what: str) -> tuple[float, float, float, int]:
    """``timed``, checking that the query read ``expected`` rows; without the row count."""
    seconds, jvm_cpu, python_cpu, rows, batches = timed(frame, jvm)
    assert rows == expected, f"{what} read {rows} rows, expected {expected}"
    return seconds, jvm_cpu, python_cpu, batches


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
        timed(native(), jvm)
        timed(native_path(), jvm)
        timed(FileSplitter(data, block_size=128 * MB, blocks_per_batch=16, settle=0).read_stream(spark), jvm)
        line_rows = (spark.readStream.format("file_splitter").option("block_size", str(32 * MB))  # registered above
                     .option("blocks_per_batch", "8").option("settle", "0").load(data))
        native_s, *native_cpu, _ = checked(native(), jvm, lines, "native")
        native_cpu = sum(native_cpu)
        seconds, jvm_cpu, python_cpu, _ = checked(line_rows, jvm, lines, "line-row splitter")
        cpu = jvm_cpu + python_cpu
        print(f"line rows (before), 32 MiB blocks, 8 per batch: {seconds:.1f} s ({cpu:.1f} cpu s: JVM {jvm_cpu:.1f}, "
              f"Python {python_cpu:.1f}); native `value` "
              f"right before: {native_s:.1f} s ({native_cpu:.1f} cpu s); ratio {native_s / seconds:.2f}x "
              f"({native_cpu / cpu:.2f}x)\n", flush=True)
        # What a query costs whatever the data: the same source over one 4-byte file.
        tiny = tempfile.mkdtemp(prefix="splitter-bench-tiny-")
        try:
            with open(os.path.join(tiny, "one.txt"), "w") as out:
                out.write("abc\n")
            seconds, jvm_cpu, python_cpu, _ = checked(FileSplitter(tiny, settle=0).read_stream(spark), jvm, 1,
                                                      "splitter over a one-line file")
            print(f"fixed cost, one 4-byte file: {seconds:.1f} s (cpu s: JVM {jvm_cpu:.1f}, Python {python_cpu:.1f})\n",
                  flush=True)
        finally:
            shutil.rmtree(tiny, ignore_errors=True)
        # The machine may be shared: native runs right before each splitter run keep the ratio fair,
        # and CPU seconds (JVM + Python processes) show the work done whatever the other jobs do.
        print("| block_size | blocks_per_batch | blocks (= partitions) | micro-batches | splitter s (cpu s: JVM + Python) "
              "| splitter lines/s | native `value` s (cpu s) | native `value, path` s (cpu s) "
              "| splitter / native `value`: wall (cpu) | splitter / native `value, path`: wall (cpu) |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for block_mb, per_batch in [(128, 2), (128, 16), (32, 8), (32, 64), (8, 256)]:
            native_s, *native_cpu, _ = checked(native(), jvm, lines, "native")
            native_cpu = sum(native_cpu)
            path_s, *path_cpu, _ = checked(native_path(), jvm, lines, "native with path")
            path_cpu = sum(path_cpu)
            splitter = FileSplitter(data, block_size=block_mb * MB, blocks_per_batch=per_batch, settle=0)
            blocks = sum(-(-os.path.getsize(os.path.join(data, n)) // (block_mb * MB)) for n in os.listdir(data))
            seconds, jvm_cpu, python_cpu, batches = checked(splitter.read_stream(spark), jvm, lines, "splitter")
            cpu = jvm_cpu + python_cpu
            print(f"| {block_mb} MiB | {per_batch} | {blocks} | {batches} | {seconds:.1f} ({jvm_cpu:.1f} + {python_cpu:.1f}) "
                  f"| {lines / seconds:,.0f} | {native_s:.1f} ({native_cpu:.1f}) | {path_s:.1f} ({path_cpu:.1f}) "
                  f"| {native_s / seconds:.2f}x ({native_cpu / cpu:.2f}x) "
                  f"| {path_s / seconds:.2f}x ({path_cpu / cpu:.2f}x) |", flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
