"""Driving a real streaming query deterministically: one Parquet file per micro-batch.

Files are written into the source directory one at a time, with
``maxFilesPerTrigger=1``, and ``processAllAvailable()`` runs the batch and the
no-data batch that follows when the watermark moved. Panes go to an
idempotent sink: ``foreachBatch`` overwrites the directory of its batch id.
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from pathlib import Path

import pandas as pd

SCHEMA = "user string, ts timestamp, amount long"
# The state store docs/databricks.md advises: RocksDB, writing changelogs per micro-batch (open-source provider).
ROCKSDB_CHANGELOG = {
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


@contextlib.contextmanager
def parquet_takes_ancient_timestamps(spark):
    """The global window's ``window_start`` is 1677-09-21: pyspark 3.5 refuses to write it to Parquet without
    these settings (4.x defaults to them)."""
    rebase = ("spark.sql.parquet.int96RebaseModeInWrite", "spark.sql.parquet.datetimeRebaseModeInWrite")
    for conf in rebase:
        spark.conf.set(conf, "CORRECTED")
    try:
        yield
    finally:
        for conf in rebase:
            spark.conf.unset(conf)


def write_batch(source: Path, index: int, frame: pd.DataFrame) -> None:
    """A file of the stream, modified a millisecond or more after every file before it: Spark's file source takes
    new files in the order of their modification times in milliseconds, and of files written within the same one
    in the directory's listing order (a cluster test read part-00002 before part-00001 so)."""
    source.mkdir(parents=True, exist_ok=True)
    newest = max((p.stat().st_mtime_ns for p in source.glob("part-*.parquet")), default=0)
    tmp = source / f".part-{index:05d}.parquet"
    frame.to_parquet(tmp, index=False)
    path = source / f"part-{index:05d}.parquet"
    os.replace(tmp, path)
    modified = max(path.stat().st_mtime_ns, newest + 1_000_000)
    os.utime(path, ns=(modified, modified))


def start(spark, source: Path, sink: Path, checkpoint: Path, build, prepare=None):
    """Start the query ``build(windowed-input)``; ``prepare`` may transform the input first."""
    source.mkdir(parents=True, exist_ok=True)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    if prepare is not None:
        stream = prepare(stream)
    panes = build(stream)

    def write(frame, batch_id):
        frame.write.mode("overwrite").parquet(str(sink / f"batch={batch_id}"))

    return (panes.writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint))
            .outputMode("append").start())


def start_run(spark, source: Path, sink: Path, checkpoint: Path, build, block: dict | None = None, prepare=None):
    """Start ``build(input)``, a ``SparkRun``, writing panes and late data from one query (docs/spark.md);
    ``prepare`` may transform the input first.

    ``foreachBatch`` writes ``sink/panes/batch=<id>`` and ``sink/late/batch=<id>``, each
    overwriting itself on replay. ``block``: ``{"batch": id, "reached": path}`` stops the writer,
    after the panes of that batch and before its late data, until the process is killed.
    """
    source.mkdir(parents=True, exist_ok=True)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    run = build(stream if prepare is None else prepare(stream))

    def write(batch, batch_id):
        batch.persist()  # two writes: without it the stateful step would run twice
        try:
            panes, late = run.split(batch)
            panes.write.mode("overwrite").parquet(str(sink / "panes" / f"batch={batch_id}"))
            if block is not None and batch_id == block["batch"]:
                Path(block["reached"]).write_text(str(os.getpid()))
                time.sleep(300)  # killed here
            late.write.mode("overwrite").parquet(str(sink / "late" / f"batch={batch_id}"))
        finally:
            batch.unpersist()

    return run.output.writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint)).start()


def read_sink(spark, sink: Path) -> pd.DataFrame:
    if not glob.glob(str(sink / "batch=*" / "*.parquet")):
        return pd.DataFrame()
    frame = spark.read.parquet(str(sink)).toPandas()
    return frame.drop(columns="batch")


def run_all(query, source: Path, parts: list[pd.DataFrame]) -> list[int]:
    """Write ``parts`` as the next files, each followed by processAllAvailable, and stop the query; the rows
    each micro-batch read."""
    try:
        for i, part in enumerate(parts):
            write_batch(source, i, part)
            query.processAllAvailable()
        return batch_inputs(query)
    finally:
        query.stop()


def batch_inputs(query) -> list[int]:
    """Rows read by each micro-batch the query ran, in order.

    A trigger that found nothing to run also reports progress (at once, then every
    ``spark.sql.streaming.noDataProgressEventInterval``), with no rows and the id of the batch still to
    come: only a batch that ran, a no-data batch included, has ``addBatch`` among its durations.
    """
    # Over Spark Connect a progress's fields are attributes (its item lookup gives None); classic gives dicts.
    field = lambda progress, name: getattr(progress, name) if hasattr(progress, name) else progress[name]
    ran = [p for p in query.recentProgress if "addBatch" in field(p, "durationMs")]
    return [field(p, "numInputRows") for p in sorted(ran, key=lambda p: field(p, "batchId"))]


def mirror(parts: list[pd.DataFrame], inputs: list[int], build, late: bool = False):
    """The pandas runner over the micro-batches Spark ran (a no-data batch is an empty step).

    ``build`` returns panes, or with ``late`` a ``WindowedResult``: then (panes, late data).
    """
    from windowing import TestStream

    stream, files = TestStream(), iter(parts)
    for n in inputs:
        stream = stream.add_elements(next(files) if n else parts[0].iloc[:0])
    result = build(stream)
    panes = result.panes if late else result
    panes = panes[panes["step"] < len(stream.actions)]  # Spark's stream has no end of input
    return (panes, result.late_data) if late else panes
