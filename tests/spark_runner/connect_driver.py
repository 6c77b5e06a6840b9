"""Scenarios over Spark Connect, each in a Python process of its own.

``python -m tests.spark_runner.connect_driver <scenario> <sc://host:port> <work dir>`` runs one
scenario against the server and exits non-zero with the failing assertion. A process of its own,
because pyspark picks its Connect or classic functions by a process-wide switch that a Connect
session turns on, and the suite's classic session lives in the test process
(`test_connect.py`, `tests.sparks.connect_server`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from accumulations import Count, Sum
from triggers import AtWatermark
from windowing import windowed

from .helpers import assert_same_late_data, assert_same_panes, events
from .streaming import SCHEMA, batch_inputs, mirror, write_batch

ROWS = [("a", 1, 5), ("b", 3, 1), ("a", 12, 7), ("c", 14, 2), ("a", 8, 3), ("b", 31, 4), ("c", 12, 1),
        ("a", 44, 8), ("b", 2, 9), ("d", 58, 1), ("a", 61, 2), ("c", 75, 3)]
# b's 2 s and c's 13 s arrive after the watermark passed 40 s: late, beyond 10 s of allowed lateness.
PARTS = [events(ROWS[:4]), events(ROWS[4:8]), events(ROWS[8:]), events([("b", 2, 9), ("c", 13, 4), ("a", 47, 1)]),
         events([("z", 300, 0)])]


def batch(spark, work: Path) -> None:
    """A batch DataFrame, fixed, uneven sliding and session windows, and float seconds, as the pandas runner."""
    frame = events(ROWS)
    for build in (lambda w: w.fixed("10 seconds"), lambda w: w.sliding("10 seconds", every="4 seconds"),
                  lambda w: w.sessions("8 seconds")):
        expected = build(windowed(frame, time="ts", key="user")).aggregate(total=Sum("amount"), n=Count())
        actual = build(windowed(spark.createDataFrame(frame), time="ts", key="user")).aggregate(total=Sum("amount"), n=Count())
        assert_same_panes(actual.toPandas(), expected)
    seconds = pd.DataFrame({"user": ["a", "a", "b"], "ts": [1700000001.0000004, 1700000001.0000007, -0.0000005],
                            "amount": [1, 2, 4]})  # float products with 1e6 that round onto half a microsecond
    expected = windowed(seconds, time="ts", key="user", time_unit="s").fixed("1 microsecond").aggregate(Sum("amount"))
    actual = windowed(spark.createDataFrame(seconds), time="ts", key="user", time_unit="s").fixed(
        "1 microsecond").aggregate(Sum("amount")).toPandas()
    starts = [sorted(panes["window_start"].astype("datetime64[us]").tolist()) for panes in (actual, expected)]
    assert starts[0] == starts[1], starts  # exactly: assert_same_panes compares numbers within a tolerance


def _late_sessions(source, watermark: bool = False):
    w = windowed(source, time="ts", key="user").sessions("5 seconds").allowed_lateness("10 seconds")
    w = w.watermark("0 seconds") if watermark else w
    return w.trigger(AtWatermark().with_late_firings_every(1)).accumulating().run(total=Sum("amount"), n=Count())


def stream_with_watermark(spark, work: Path) -> None:
    """Sessions with late data on an input watermarked by ``withWatermark("ts", "0 seconds")`` (failed at start:
    "Watermark must be specified ... for using event-time timeout"), stopped and restarted from its checkpoint."""
    _stream(spark, work, lambda s: s.withWatermark("ts", "0 seconds"), _late_sessions,
            lambda s: _late_sessions(s, watermark=True))


def stream_with_builder_watermark(spark, work: Path) -> None:
    """The same with ``.watermark(delay)`` on the builder, fixed windows."""
    def build(source):
        return (windowed(source, time="ts", key="user").fixed("10 seconds").watermark("0 seconds")
                .allowed_lateness("10 seconds").trigger(AtWatermark()).run(total=Sum("amount"), n=Count()))

    _stream(spark, work, lambda s: s, build, build)


def stream_unpacked(spark, work: Path) -> None:
    """Both streams with ``windowing.spark.combine=false``: their rows pass a ``mapInArrow`` after the watermark is
    set (`combine.with_checked_bucket_copy`), whose schema must carry the watermark's marker over Connect."""
    from windowing.runners.spark import COMBINE_CONF

    spark.conf.set(COMBINE_CONF, "false")
    stream_with_watermark(spark, work / "input_watermark")
    stream_with_builder_watermark(spark, work / "builder_watermark")


def _stream(spark, work: Path, prepare, build, pandas_build) -> None:
    """Feed ``PARTS`` one file and micro-batch each, ``run().output`` into a Parquet sink, the query stopped
    and started again from its checkpoint after the second file; compare panes and late data with the
    pandas runner over the micro-batches Spark ran."""
    out, checkpoint = work / "out", work / "chk"

    def start(stream):
        return (build(prepare(stream)).output.writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(checkpoint)).outputMode("append").start())

    inputs = _in_two_runs(spark, work / "in", PARTS, (start, start))
    panes, late = _panes_and_late(pd.read_parquet(out))
    expected_panes, expected_late = mirror(PARTS, inputs, pandas_build, late=True)
    assert len(expected_late) > 0, "the scenario has late data"
    assert_same_panes(panes, expected_panes)
    assert_same_late_data(late, expected_late)


def _in_two_runs(spark, source: Path, parts: list[pd.DataFrame], starts) -> list[int]:
    """Write ``parts`` into ``source`` one file and micro-batch each, read by the query ``starts[0]`` starts on
    the stream for the first two and, after it stopped, by the one ``starts[1]`` starts for the rest (from
    the same checkpoint); the rows each micro-batch read."""
    source.mkdir(parents=True)
    inputs: list[int] = []
    for (first, last), start in zip(((0, 2), (2, len(parts))), starts):
        query = start(spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source)))
        try:
            for i in range(first, last):
                write_batch(source, i, parts[i])
                query.processAllAvailable()
            inputs += batch_inputs(query)
        finally:
            query.stop()
    assert sum(inputs) == sum(map(len, parts))
    return inputs


def _panes_and_late(output: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``run().output`` as written: its panes, and its late rows with each element's columns."""
    panes = output[output["kind"] == "PANE"].drop(columns=["kind", "reason", "element"])
    late = output[output["kind"] == "LATE"]
    rows = pd.DataFrame([json.loads(e) for e in late["element"]], index=late.index)
    late = pd.concat([rows.assign(ts=pd.to_datetime(rows["ts"]).dt.tz_localize(None)),
                      late[["window_start", "window_end", "reason"]]], axis=1) if len(late) else late
    return panes, late


def _write_into(directory: Path):
    """A ``foreachBatch`` function writing each micro-batch into ``directory/batch=<id>``, overwriting it."""
    def write(frame, batch_id: int) -> None:
        frame.write.mode("overwrite").parquet(str(directory / f"batch={batch_id}"))

    return write


def stream_aggregate_then_run(spark, work: Path) -> None:
    """``aggregate()`` with a ``Count``, which lifts, stopped and restarted from its checkpoint as ``run()`` of
    the same pipeline, which does not (`worker.SwitchedLayout`), to get the late data from then on: [0, 10)
    fires before the restart, a's [10, 20) is open across it (its count carried on), b's 2 s comes late after."""
    def pipeline(source):
        return windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")

    aggs = {"total": Sum("amount"), "n": Count()}
    parts = [events([("a", 1, 5), ("a", 3, 1), ("b", 4, 2)]), events([("a", 6, 2), ("c", 9, 4), ("a", 12, 1), ("b", 16, 3)]),
             events([("a", 14, 2), ("c", 18, 1)]), events([("b", 2, 7), ("a", 25, 1)]), events([("z", 300, 0)])]

    def into(side: str, build):
        # foreachBatch, not a file sink: Spark's file sink keeps its own log in its directory, which a
        # restart into another directory does not find ("Unable to find batch .../_spark_metadata/0").
        return lambda stream: (build(stream).writeStream.foreachBatch(_write_into(work / side))
                               .option("checkpointLocation", str(work / "chk")).outputMode("append").start())

    inputs = _in_two_runs(spark, work / "in", parts, (into("aggregate", lambda s: pipeline(s).aggregate(**aggs)),
                                                       into("run", lambda s: pipeline(s).run(**aggs).output)))
    before = pd.read_parquet(work / "aggregate").drop(columns="batch")
    after, late = _panes_and_late(pd.read_parquet(work / "run").drop(columns="batch"))
    expected_panes, expected_late = mirror(parts, inputs, lambda s: pipeline(s).run(**aggs), late=True)
    assert len(before) > 0 and ("a", 2, 3) in set(zip(expected_panes["user"], expected_panes["n"], expected_panes["total"]))
    assert len(expected_late) > 0, "the scenario has late data after the restart"
    assert_same_panes(pd.concat([before, after], ignore_index=True), expected_panes)
    assert_same_late_data(late, expected_late)


def file_sink(spark, work: Path, api: str = "auto") -> None:
    """``FileSink(...).start(...)`` on a stream, stopped and started again; ``read()`` has every row once."""
    from storage.file_sink import FileSink

    source = work / "in"
    source.mkdir(parents=True)
    sink = FileSink(str(work / "sink"), format="parquet")
    written = []
    for first, last in ((0, 2), (2, 4)):
        stream = spark.readStream.schema("id long, k string").option("maxFilesPerTrigger", 1).json(str(source))
        query = sink.start(stream, checkpoint_location=str(work / "chk"), api=api)
        try:
            for i in range(first, last):
                rows = [{"id": 10 * i + j, "k": f"k{j % 2}"} for j in range(5)]
                (source / f"in-{i}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
                written += rows
                query.processAllAvailable()
        finally:
            query.stop()
    read = sink.read()
    assert sorted(read["id"].tolist()) == sorted(r["id"] for r in written)


def file_sink_foreach_batch(spark, work: Path) -> None:
    """The same through ``foreachBatch`` (what pyspark 4.0 and 3.5 use): its function asked the SparkContext,
    which Connect has none of, for the query's id, and failed at the first micro-batch."""
    file_sink(spark, work, api="foreach_batch")


def compaction(spark, work: Path) -> None:
    """``compact(spark=spark)`` merges in Spark tasks; it called ``spark.sparkContext.parallelize`` and failed."""
    from storage.file_sink import FileSink, RollingPolicy

    sink = FileSink(str(work / "sink"), format="jsonl").with_rolling_policy(RollingPolicy.on_every_batch())
    for b in range(3):
        sink.write(pd.DataFrame({"id": [2 * b, 2 * b + 1]}))
    assert (sink.compact(spark=spark).replaced, len(sink.finished_files())) == (3, 1)
    assert sorted(sink.read()["id"]) == list(range(6))


def window_state_foreach_batch(spark, work: Path) -> None:
    """``.window_state(store)`` needs the micro-batch id in its tasks, which foreachBatch's jobs over Connect
    lack: a clear error, where a bare "task_batch_id() found no streaming batch id" said to pass an argument
    the user never handles."""
    from storage import KVStore

    source = work / "in"
    source.mkdir(parents=True)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    panes = windowed(stream, time="ts", key="user").fixed("10 seconds").watermark("5 seconds") \
        .window_state(KVStore(str(work / "kv"))).aggregate(total=Sum("amount"))
    write_batch(source, 0, PARTS[0])
    query = panes.writeStream.foreachBatch(_write_into(work / "out")).option("checkpointLocation", str(work / "chk")).start()
    try:
        query.processAllAvailable()
        raise AssertionError("the micro-batch ran")
    except Exception as err:  # noqa: BLE001 - the query's failure, as Connect reports it
        assert "without it. Write the query to a sink directly" in str(err), str(err)[-2000:]
    finally:
        query.stop()


def splitter(spark, work: Path) -> None:
    """``FileSplitter(...).read_stream(spark)`` into a Parquet sink: every line once."""
    from storage import FileSplitter

    source = work / "in"
    source.mkdir(parents=True)
    lines = [f"file{f} line{i}" for f in range(2) for i in range(30)]
    for f in range(2):
        (source / f"part{f}.txt").write_text("\n".join(lines[30 * f:30 * (f + 1)]) + "\n")
    frame = FileSplitter(str(source), block_size=128, blocks_per_batch=2, settle=0, scan_interval=0).read_stream(spark)
    query = (frame.writeStream.format("parquet").option("path", str(work / "out"))
             .option("checkpointLocation", str(work / "chk")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert sorted(pd.read_parquet(work / "out")["value"]) == sorted(lines)


SCENARIOS = {f.__name__: f for f in (batch, stream_with_watermark, stream_with_builder_watermark, stream_unpacked,
                                     stream_aggregate_then_run, file_sink, file_sink_foreach_batch, compaction,
                                     window_state_foreach_batch, splitter)}


def main(name: str, url: str, work: str) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        SCENARIOS[name](spark, Path(work))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
