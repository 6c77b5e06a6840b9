"""File sink throughput against Spark's native streaming file sinks, and the driver's memory, same data, same run.

Throughput (default): ``.venv/bin/python benchmarks/file_sink_bench.py [--rows N] [--files F] [--rounds R]``.
A streaming query reads F Parquet input files (one per micro-batch, ``availableNow``) and writes them
with Spark's ``writeStream.format("json")`` / ``format("parquet")`` and with ``FileSink`` (``jsonl`` /
``parquet``, every part finished at each commit), on ``local[2]``; the four writers run in turn, R
rounds, and each figure is the median. rows/s is input rows over wall time. ``FileSink`` is the Python
data source path (pyspark 4.1+), ``FileSink (foreachBatch)`` the path pyspark 3.5 takes, forced.

Driver memory: ``... --memory [--batch-mb 100,400,1600]``. On ``local-cluster[2,1,1024]`` (the driver in
its own JVM, heap ``--driver-memory``, default 512m) one query writes micro-batches of the given sizes
(Arrow bytes) through ``FileSink``; a thread samples the driver's resident memory (its JVM and this
Python process) during each batch. A batch several times the heap would not fit if it were collected to
the driver, as the sink did before; batches up to ``--collect-up-to-mb`` are also collected (``toArrow``)
to show what that took.

``--fs-calls`` instead counts the filesystem calls (round trips on an object store) of a writer given
ten batches, on the tests' ``counting://`` filesystem.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from storage.file_sink import FileSink  # noqa: E402

COLUMNS = ["id", "concat('user-', id % 1000) as k", "timestamp_millis(id) as ts", "rand(7) * 100 as v",
           "sha2(cast(id as string), 256) as s"]


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


def session(master: str, **settings: str):
    from tests import sparks

    return sparks.session(master, "file-sink-bench", **{"spark.ui.showConsoleProgress": "false", **settings})


def write_input(spark, source: str, rows: int, files: int) -> None:
    per_file = rows // files
    for i in range(files):
        (spark.range(i * per_file, (i + 1) * per_file, numPartitions=1).selectExpr(*COLUMNS)
         .write.mode("append").parquet(source))


def throughput(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()[0]
    spark = session("local[2]", **{"spark.driver.memory": "2g"})
    work = tempfile.mkdtemp(prefix="file_sink_bench_")
    source = os.path.join(work, "in")
    write_input(spark, source, args.rows, args.files)
    schema = spark.read.parquet(source).schema
    rows = spark.read.parquet(source).count()
    spark.read.parquet(source).write.json(os.path.join(work, "warm-up"))  # JIT and caches, untimed

    def stream():
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(source)

    tiny = os.path.join(work, "tiny")
    write_input(spark, tiny, 100, 1)
    for fmt in ("jsonl", "parquet"):  # the Python workers of the data source path, started once, untimed
        warm = os.path.join(work, f"warm-up-{fmt}")
        tiny_stream = spark.readStream.schema(schema).parquet(tiny)
        FileSink(warm, format=fmt).start(tiny_stream, checkpoint_location=warm + "-ckpt",
                                         trigger={"availableNow": True}).awaitTermination()

    def run(fmt: str, name: str, n: int) -> tuple[float, int]:
        out, ckpt = os.path.join(work, f"{fmt}-{name}-{n}-out"), os.path.join(work, f"{fmt}-{name}-{n}-ckpt")
        start = time.perf_counter()
        if name == "spark native":
            query = (stream().writeStream.format(fmt).option("path", out).option("checkpointLocation", ckpt)
                     .trigger(availableNow=True).start())
        else:  # bounded: every part finished at each commit, as Spark's sink finishes its files
            sink = FileSink(out, format="jsonl" if fmt == "json" else "parquet")
            api = "foreach_batch" if "foreachBatch" in name else "auto"
            query = sink.start(stream(), checkpoint_location=ckpt, trigger={"availableNow": True}, api=api)
        query.awaitTermination()
        elapsed = time.perf_counter() - start
        size = output_bytes(out)
        shutil.rmtree(out)
        shutil.rmtree(ckpt)
        return elapsed, size

    times: dict[tuple[str, str], list[float]] = {}
    sizes: dict[tuple[str, str], int] = {}
    writers = ("spark native", "FileSink", "FileSink (foreachBatch)")
    for n in range(args.rounds):
        for fmt in ("json", "parquet"):
            for name in writers:
                elapsed, sizes[fmt, name] = run(fmt, name, n)
                times.setdefault((fmt, name), []).append(elapsed)
    print(f"rows={rows} micro-batches={args.files} rounds={args.rounds} cores={os.cpu_count()} "
          f"load average (1 min) before: {load_before:.1f}, after: {os.getloadavg()[0]:.1f}")
    print("| format | writer | rows/s | MB/s | seconds (median) | seconds (all rounds) | vs native rows/s |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: |")
    for fmt in ("json", "parquet"):
        native = statistics.median(times[fmt, "spark native"])
        for name in writers:
            median = statistics.median(times[fmt, name])
            every = ", ".join(f"{t:.1f}" for t in times[fmt, name])
            print(f"| {fmt} | {name} | {rows / median:,.0f} | {sizes[fmt, name] / median / 1e6:.1f} | {median:.1f} "
                  f"| {every} | {native / median:.2f}x |")
    spark.stop()
    shutil.rmtree(work)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class PeakMemory:
    """Samples the resident memory of some processes every 50 ms; ``peak()`` since the last ``reset()``."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids, self._peak = pids, dict.fromkeys(pids, 0.0)
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for name, pid in self.pids.items():
                self._peak[name] = max(self._peak[name], rss_mb(pid))

    def reset(self) -> None:
        self._peak = {name: rss_mb(pid) for name, pid in self.pids.items()}

    def peak(self) -> dict[str, float]:
        return dict(self._peak)

    def stop(self) -> None:
        self._stop.set()


def memory(args: argparse.Namespace) -> None:
    from tests import sparks

    spark = session(sparks.CLUSTER, **{"spark.driver.memory": args.driver_memory,
                                       "spark.sql.files.maxPartitionBytes": "64m",
                                       "spark.sql.shuffle.partitions": "8"})
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    work = Path(tempfile.mkdtemp(prefix="file_sink_memory_"))
    source, staging = work / "in", work / "staging"
    source.mkdir()
    sizes = [int(mb) for mb in args.batch_mb.split(",")]
    row_bytes = spark.range(1000).selectExpr(*COLUMNS).toArrow().nbytes / 1000  # Arrow bytes per row
    offset = 0
    for i, mb in enumerate(sizes):
        rows = int(mb * 1e6 / row_bytes)
        (spark.range(offset, offset + rows, numPartitions=max(1, mb // 64)).selectExpr(*COLUMNS)
         .write.parquet(str(staging / f"{i}")))
        offset += rows
    schema = spark.read.parquet(str(staging / "0")).schema
    sampler = PeakMemory({"driver JVM": jvm, "driver Python": os.getpid()})
    sink = FileSink(str(work / "out"), format="parquet")
    print(f"driver heap {args.driver_memory}; executors: local-cluster[2,1,1024]; Arrow bytes per row "
          f"{row_bytes:.0f}; load average before: {os.getloadavg()[0]:.1f}")
    print("| batch (Arrow MB) | rows | seconds | driver JVM peak RSS (MB) | driver Python peak RSS (MB) "
          "| the same batch collected (toArrow, as the sink did before): JVM / Python peak RSS (MB) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, mb in enumerate(sizes):
        files = sorted((staging / f"{i}").glob("*.parquet"))
        for part in files:  # this run's input: one micro-batch of these files
            part.rename(source / f"b{i:02d}-{part.name}")
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", len(files)).parquet(str(source))
        sampler.reset()
        start = time.perf_counter()
        query = sink.start(stream, checkpoint_location=str(work / "checkpoint"), trigger={"availableNow": True})
        query.awaitTermination()
        elapsed = time.perf_counter() - start
        peak = sampler.peak()
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        collected = "not tried (more than the heap)"
        if mb <= args.collect_up_to_mb:
            sampler.reset()
            table = spark.read.schema(schema).parquet(*[str(source / f"b{i:02d}-{f.name}") for f in files]).toArrow()
            del table
            collected = f"{sampler.peak()['driver JVM']:.0f} / {sampler.peak()['driver Python']:.0f}"
        print(f"| {mb:,} | {rows:,} | {elapsed:.1f} | {peak['driver JVM']:.0f} | {peak['driver Python']:.0f} "
              f"| {collected} |")
    sampler.stop()
    total = len(FileSink(str(work / "out"), format="parquet").finished_files())
    print(f"finished parts: {total}")
    spark.stop()
    shutil.rmtree(work)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_200_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory", action="store_true", help="driver memory on local-cluster instead")
    parser.add_argument("--batch-mb", default="100,400,1600")
    parser.add_argument("--collect-up-to-mb", type=int, default=100,
                        help="also collect batches up to this size (a batch near the heap makes the driver run out of "
                             "memory in Spark's result thread, and the run hang)")
    parser.add_argument("--driver-memory", default="512m")
    parser.add_argument("--fs-calls", action="store_true", help="count filesystem calls instead (no Spark)")
    args = parser.parse_args()
    if args.fs_calls:
        count_fs_calls()
    elif args.memory:
        memory(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
