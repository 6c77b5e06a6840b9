"""Lines per second through the splitter's Spark source versus ``spark.readStream.text``.

    .venv/bin/python benchmarks/splitter_bench.py [--size-gb 2] [--master local[2]] [--configs 128:16,32:8]

Writes a directory of text files (default 2 GB, 16 files) into a temporary directory and
reads it with Trigger.AvailableNow into the ``noop`` sink, for several ``block_size`` /
``blocks_per_batch`` settings (a block is one Spark partition), four queries each:

- native ``value``: ``spark.readStream.text(dir)``, what the issue compares with;
- splitter ``value``: ``read_stream(spark).select("value")``, the same rows;
- native ``value, path``: plus ``input_file_name()``, the like-for-like reference;
- the splitter's whole rows ``value, path, block_id, offset`` (native Spark has no line offset,
  so native ``value, path`` is the closest native equivalent).

Each is measured three ways: wall seconds from ``start()`` to the end (the query's start
included), processing seconds (the micro-batches' ``triggerExecution``, which Spark's own
``processedRowsPerSecond`` divides by), and CPU seconds of Spark's JVMs and of its Python
processes. ``read_stream`` reads chunk rows and cuts lines on the JVM; the splitter's line-row
source (``format("file_splitter")`` without ``rows=chunks``) is timed once for comparison, and
so is one 4-byte file (what a query costs whatever the data). Both sources are warmed up
first (JVM code generation, and for the splitter the Python workers' start and imports).
Every setting is checked to read every line, in an untimed run (``observe`` counts the lines,
at a cost per row); the timed runs add nothing per row. Prints Markdown and deletes the data.

``--master local-cluster[2,1,1024]`` runs the same on two executor JVMs of one core each
(the driver, master and workers in this process's JVM); CPU seconds then add up every JVM and
every Python process under the driver's JVM.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Callable, NamedTuple

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from spark_cpu import cpu_seconds, jvm_pid, pids, proc_stat, wait_for_source_runners  # noqa: E402

from storage import FileSplitter  # noqa: E402

MB = 1024 * 1024


LINES = [f"{i:08d} " + "x" * (10 + (i * 37) % 100) + "\n" for i in range(10_000)]  # 20-120 bytes each
CHUNK = "".join(LINES).encode()


def chunks_per_file(size_gb: float, files: int = 16) -> int:
    """Whole ``CHUNK``s per file for ``size_gb`` in all; a size too small for one is refused (it ran on no data)."""
    per_file = int(size_gb * 1024 * MB / files) // len(CHUNK)
    if per_file < 1:
        raise ValueError(f"--size-gb {size_gb:g} writes no line: each of the {files} files holds whole blocks of "
                         f"{len(CHUNK):,} bytes; give at least {math.ceil(files * len(CHUNK) / MB) / 1024:.4f}")
    return per_file


def write_data(directory: str, size_gb: float, files: int = 16) -> int:
    """Files of lines 20-120 bytes long; returns the number of lines."""
    per_file = chunks_per_file(size_gb, files)
    for f in range(files):
        with open(os.path.join(directory, f"part-{f:03d}.txt"), "wb") as out:
            for _ in range(per_file):
                out.write(CHUNK)
    return files * per_file * len(LINES)


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


def tree_cpu_seconds(root: int) -> tuple[float, float]:
    """``(jvm, python)`` CPU seconds of every process under ``root`` (itself included), by program:
    for ``local-cluster``, whose executor JVMs are children of the driver's. Time of reaped
    children (a query's Python source runner, exited Python workers) counts as Python."""
    jvm = python = 0
    processes = {}
    for pid in pids():
        stat = proc_stat(f"/proc/{pid}/stat")
        if stat is None:
            continue
        name, fields = stat
        processes[pid] = (int(fields[1]), name, int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]))
    todo = [root]
    while todo:
        pid = todo.pop()
        _, name, own, reaped = processes.get(pid, (0, "", 0, 0))
        if name == "java":
            jvm += own
        else:
            python += own
        python += reaped
        todo += [child for child, (parent, *_) in processes.items() if parent == pid]
    tick = os.sysconf("SC_CLK_TCK")
    return jvm / tick, python / tick


def timed(frame, jvm: int, cpu_of: Callable[[int], tuple[float, float]] = cpu_seconds):
    """Read everything into the ``noop`` sink; the ``Run`` and the finished query."""
    cpu, begin = cpu_of(jvm), time.perf_counter()
    query = frame.writeStream.format("noop").trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - begin
    wait_for_source_runners(jvm)
    after = cpu_of(jvm)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    # A trigger that ran no micro-batch is reported too, without ``addBatch``: not processing.
    ran = [p for p in query.recentProgress if "addBatch" in p["durationMs"]]
    processing = sum(p["durationMs"]["triggerExecution"] for p in ran) / 1000
    return Run(seconds, processing, after[0] - cpu[0], after[1] - cpu[1], len(batches)), query


def counted_by_spark(frame, jvm: int, expected: int, what: str,
                     cpu_of: Callable[[int], tuple[float, float]] = cpu_seconds) -> Run:
    """``timed``, checking Spark's own count of input rows: lines for native Spark and for the
    line-row source, nothing per row added to the query."""
    run, query = timed(frame, jvm, cpu_of)
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    assert rows == expected, f"{what} read {rows} rows, expected {expected}"
    return run


def checked(frame, jvm: int, expected: int, what: str,
            cpu_of: Callable[[int], tuple[float, float]] = cpu_seconds) -> Run:
    """``timed``, checking that the query read ``expected`` lines, counted with ``observe``, since the
    splitter's ``numInputRows`` counts chunks. ``observe`` costs something per row, and more for the
    splitter (its accumulator's per-row task-context look-up held 14 % of the splitter's JVM samples
    in a JFR profile, 9 % of native's), so timed comparisons use ``timed``/``counted_by_spark`` and
    an untimed ``checked`` run beside them."""
    from pyspark.sql import functions as F

    run, query = timed(frame.observe("counted", F.count(F.lit(1)).alias("lines")), jvm, cpu_of)
    rows = sum(p["observedMetrics"]["counted"]["lines"] for p in query.recentProgress if p["numInputRows"])
    assert rows == expected, f"{what} read {rows} rows, expected {expected}"
    return run


def row(config: str, query: str, run: Run, lines: int, versus: str) -> str:
    return (f"| {config} | {query} | {run.wall:.1f} | {run.processing:.1f} | {run.cpu:.1f} ({run.jvm:.1f} + {run.python:.1f}) "
            f"| {lines / run.wall:,.0f} | {lines / run.processing:,.0f} | {versus} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--configs", default="128:2,128:16,32:8,32:64,8:256",
                        help="block_size in MiB : blocks_per_batch, comma-separated")
    parser.add_argument("--rounds", type=int, default=1, help="times to run each setting's four queries")
    parser.add_argument("--no-quick-ack", action="store_true",
                        help="the splitter's quick_ack=False: its workers' sockets as pyspark set them (a worker keeps "
                             "what its first task set, so compare with a separate run, not within one)")
    args = parser.parse_args()
    try:
        chunks_per_file(args.size_gb)
    except ValueError as err:
        parser.error(str(err))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    quick_ack = not args.no_quick_ack
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    cluster = args.master.startswith("local-cluster")
    builder = (SparkSession.builder.master(args.master).appName("splitter-bench")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "4g"))
    if cluster:  # executors of 1 GiB (the master's third number) reach Python through this interpreter
        builder = builder.config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    cpu_of = tree_cpu_seconds if cluster else cpu_seconds
    data = tempfile.mkdtemp(prefix="splitter-bench-")
    try:
        lines = write_data(data, args.size_gb)
        size = sum(os.path.getsize(os.path.join(data, n)) for n in os.listdir(data))
        print(f"data: {size / MB:.0f} MiB, {lines:,} lines, 16 files; Spark {args.master}; "
              f"splitter quick_ack={quick_ack}; load average before: {os.getloadavg()[0]:.1f}\n")
        # Warm-up of both sources: a first run pays JIT compilation and, for the splitter, the
        # start of Python workers and their imports; neither is the steady-state speed.
        jvm = jvm_pid(spark)
        run_checked = lambda frame, what, expected=lines: checked(frame, jvm, expected, what, cpu_of)  # noqa: E731
        native = lambda: spark.readStream.text(data)  # noqa: E731
        native_path = lambda: native().select("value", F.input_file_name().alias("path"))  # noqa: E731
        splitter = lambda block_mb, per_batch: FileSplitter(  # noqa: E731
            data, block_size=block_mb * MB, blocks_per_batch=per_batch, settle=0, quick_ack=quick_ack).read_stream(spark)
        for warm_up in (native(), native_path(), splitter(128, 16)):
            run_checked(warm_up, "warm-up")
        line_rows = (spark.readStream.format("file_splitter").option("block_size", str(32 * MB))  # registered above
                     .option("blocks_per_batch", "8").option("settle", "0").option("quick_ack", str(quick_ack)).load(data))
        by_spark = lambda frame, what: counted_by_spark(frame, jvm, lines, what, cpu_of)  # noqa: E731
        native_run = by_spark(native(), "native")
        run = by_spark(line_rows, "line-row splitter")
        print(f"line rows, 32 MiB blocks, 8 per batch: {run.wall:.1f} s ({run.cpu:.1f} cpu s: JVM {run.jvm:.1f}, "
              f"Python {run.python:.1f}); native `value` right before: {native_run.wall:.1f} s ({native_run.cpu:.1f} cpu s); "
              f"wall / processing / cpu: {run.vs(native_run)}\n", flush=True)
        # What a query costs whatever the data: the same source over one 4-byte file.
        tiny = tempfile.mkdtemp(prefix="splitter-bench-tiny-")
        try:
            with open(os.path.join(tiny, "one.txt"), "w") as out:
                out.write("abc\n")
            run = run_checked(FileSplitter(tiny, settle=0, quick_ack=quick_ack).read_stream(spark),
                              "splitter over a one-line file", 1)
            print(f"fixed cost, one 4-byte file: {run.wall:.1f} s, {run.processing:.1f} s processing "
                  f"(cpu s: JVM {run.jvm:.1f}, Python {run.python:.1f})\n", flush=True)
        finally:
            shutil.rmtree(tiny, ignore_errors=True)
        # The machine may be shared: native runs right before each splitter run keep the ratio fair,
        # and CPU seconds (JVM + Python processes) show the work done whatever the other jobs do.
        # Timed runs add nothing per row; each setting's lines are checked in an untimed run first.
        print("| block_size, blocks_per_batch: partitions, micro-batches | query | wall s | processing s "
              "| cpu s (JVM + Python) | lines/s, wall | lines/s, processing | splitter / native: wall / processing / cpu |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        settings = [tuple(int(x) for x in item.split(":")) for item in args.configs.split(",")]
        for _ in range(args.rounds):
            for block_mb, per_batch in settings:
                run_checked(splitter(block_mb, per_batch), "splitter")  # untimed: every line, once
                native_run = by_spark(native(), "native")
                value_run, _ = timed(splitter(block_mb, per_batch).select("value"), jvm, cpu_of)
                path_run = by_spark(native_path(), "native with path")
                rows_run, _ = timed(splitter(block_mb, per_batch), jvm, cpu_of)
                blocks = sum(-(-os.path.getsize(os.path.join(data, n)) // (block_mb * MB)) for n in os.listdir(data))
                config = f"{block_mb} MiB, {per_batch}: {blocks}, {rows_run.batches}"
                print(row(config, "native `value`", native_run, lines, ""))
                print(row(config, "splitter `value`", value_run, lines, value_run.vs(native_run)))
                print(row(config, "native `value, input_file_name()`", path_run, lines, ""))
                print(row(config, "splitter, all 4 columns", rows_run, lines, rows_run.vs(path_run)), flush=True)
        print(f"\nload average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(data, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
