"""Streaming checkpoints written by the Spark runner of 1868e9e, before nullable integers crossed
to the workers as a value and a null flag (58c6201); `test_old_checkpoints.py` restarts them.

pyspark hands a bigint column holding a null to pandas as float64, and pyspark 3.5 an array<bigint>
holding one too: that code read keys 2**53 and 2**53 + 1 as one key, its window tables kept such a
key column as float64 (unpacked rows; on pyspark 3.5 packed and lifted rows too), and a Min that
saw only nulls as the int64 minimum. Each case runs `BEFORE` through that code, one file per
micro-batch, and stops with open windows in its state; the test feeds `AFTER` to today's code
from the same checkpoint.

Made with the code of 1868e9e, once per pyspark the tests run on::

    git worktree add /tmp/old 1868e9e
    PYTHONPATH=/tmp/old .venv/bin/python tests/spark_runner/data/old_checkpoints.py
    PYTHONPATH=/tmp/old .venv-spark35/bin/python tests/spark_runner/data/old_checkpoints.py
    git worktree remove --force /tmp/old

Each writes ``checkpoints-<pyspark major.minor>/<case>/``: ``checkpoint/``, the query's, and
``old.json``: the rows each micro-batch read and the panes it emitted. The file source's list of
the files it read names a scratch directory: restarted on another directory, the query reads
only the files there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIG = 2**53  # float64 holds 2**53 and 2**53 + 2, not 2**53 + 1
EPOCH = dt.datetime(2024, 1, 1)
SCHEMA = "k bigint, ts timestamp, v bigint"

# (key, seconds after EPOCH, value). Keys 1, 2, None, BIG, BIG + 1, BIG + 2; every value the old code
# reads is exact in float64, and AFTER's values beyond 2**53 are not.
BEFORE = [
    [(1, 1, 1), (2, 2, None), (None, 3, 5), (BIG, 4, BIG), (BIG + 1, 5, 7), (BIG + 2, 6, BIG + 2),
     (1, 12, -7), (None, 13, None)],
    [(1, 17, 2**60), (BIG + 1, 18, 1), (BIG, 19, None), (2, 21, 3)],  # the watermark passes 10 s
    [(None, 31, 2), (BIG, 32, 4), (BIG + 1, 33, 8), (2, 34, None), (BIG + 2, 35, -1), (1, 36, 9)],
]  # stopped at watermark 31 s: windows from 30 s on stay open in the state
AFTER = [
    [(BIG, 37, BIG + 1), (BIG + 1, 38, BIG + 3), (1, 39, 1), (BIG + 2, 39, BIG + 1), (2, 39, 2**62)],  # no null
    [(None, 38, None), (BIG, 40, 1), (BIG + 1, 41, 2), (1, 42, None), (None, 43, 5)],
    [(2, 100, 0)],  # the watermark passes every window but this one's
]

# case: (windows, early firings per element (then accumulating and retracting), windowing.spark.combine)
CASES = {
    "fixed-lifted": ("fixed", False, "true"),
    "fixed-rows": ("fixed", False, "false"),
    "fixed-packed": ("fixed", True, "true"),
    "sessions-packed": ("sessions", True, "true"),
    "sessions-rows": ("sessions", True, "false"),
}


def pipeline(stream, case: str):
    """The windowed aggregation of ``case`` over ``stream`` (a Spark stream, or a TestStream)."""
    from accumulations import Count, Max, Min, Sum
    from triggers import AtWatermark
    from windowing import windowed

    windows, early, _ = CASES[case]
    w = windowed(stream, time="ts", key="k").watermark("5 seconds")
    w = w.fixed("10 seconds") if windows == "fixed" else w.sessions("10 seconds")
    if early:
        w = w.trigger(AtWatermark().with_early_firings_every(1)).accumulating_and_retracting()
    return w.aggregate(total=Sum("v"), lo=Min("v"), hi=Max("v"), n=Count("v"), rows=Count())


def frame(rows):
    """Rows as the pandas frame written to a source file: nullable bigints, microsecond timestamps."""
    import pandas as pd

    keys, secs, values = zip(*rows) if rows else ((), (), ())
    return pd.DataFrame({"k": pd.array(keys, dtype="Int64"),
                         "ts": pd.Series([EPOCH + dt.timedelta(seconds=s) for s in secs], dtype="datetime64[us]"),
                         "v": pd.array(values, dtype="Int64")})


def session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("old-checkpoints")
               .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(spark, case: str, source: Path, checkpoint: Path, parts, build=None, combine: str | None = None,
        schema: str = SCHEMA, framed=None, collected=None) -> tuple[list[int], list[dict]]:
    """Feed ``parts`` to ``case``'s query, one file and micro-batch each, with every key in one bucket
    (beside the null key); the rows each micro-batch read, and the panes, in batch order.

    ``build(stream, case)`` makes the query (`pipeline` unless given), ``combine`` is the
    ``windowing.spark.combine`` setting (the case's unless given). ``schema``, ``framed(rows)`` and
    ``collected(batch)``: the source's schema, a part's frame (`frame` unless given), and a micro-batch's
    panes as dicts (window bounds in seconds unless given)."""
    build, framed = build or pipeline, framed or frame
    spark.conf.set("windowing.spark.buckets", "1")
    spark.conf.set("windowing.spark.combine", combine or CASES[case][2])
    emitted: dict[int, list[dict]] = {}

    def write(batch, batch_id):  # Rows, not toPandas: that would turn a bigint beside a null into float64
        emitted[batch_id] = collected(batch) if collected else [
            {**r.asDict(), "window_start": seconds(r.window_start), "window_end": seconds(r.window_end)}
            for r in batch.collect()]

    try:
        # maxFileAge: the file source skips files older than a week before the newest it listed, and
        # a restart's new files may be older than the fixture's on another machine's clock.
        stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).option("maxFileAge", "36500d")
                  .parquet(str(source)))
        query = (build(stream, case).writeStream.foreachBatch(write)
                 .option("checkpointLocation", str(checkpoint)).outputMode("append").start())
        try:
            for i, rows in enumerate(parts):
                tmp = source / f".part-{i:05d}.parquet"
                framed(rows).to_parquet(tmp, index=False)
                os.replace(tmp, source / f"part-{i:05d}.parquet")
                query.processAllAvailable()
            # Without addBatch: a trigger that ran no batch (see streaming.batch_inputs).
            progress = sorted((p for p in query.recentProgress if "addBatch" in p["durationMs"]), key=lambda p: p["batchId"])
        finally:
            query.stop()
    finally:
        spark.conf.unset("windowing.spark.buckets")
        spark.conf.unset("windowing.spark.combine")
    return [p["numInputRows"] for p in progress], [row for b in sorted(emitted) for row in emitted[b]]


def seconds(at: dt.datetime) -> float:
    return (at - EPOCH).total_seconds()


def write_fixtures(folder: str, cases, run_before) -> None:
    """``HERE/<folder>-<pyspark major.minor>/<case>/`` for each of ``cases``: ``checkpoint/``, written by
    ``run_before(spark, case, source, checkpoint)`` (`run`'s result), and ``old.json``, its rows and panes."""
    import pyspark

    out = HERE / f"{folder}-{'.'.join(pyspark.__version__.split('.')[:2])}"
    shutil.rmtree(out, ignore_errors=True)
    spark = session()
    with tempfile.TemporaryDirectory() as scratch:
        for case in cases:
            source, checkpoint = Path(scratch) / case / "in", out / case / "checkpoint"
            source.mkdir(parents=True)
            inputs, panes = run_before(spark, case, source, checkpoint)
            (out / case / "old.json").write_text(json.dumps({"inputs": inputs, "panes": panes}, indent=1) + "\n")
    spark.stop()


def main() -> None:
    write_fixtures("checkpoints", CASES, lambda spark, case, source, checkpoint: run(spark, case, source, checkpoint, BEFORE))


if __name__ == "__main__":
    main()
