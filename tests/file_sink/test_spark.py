"""The Spark adapter: a streaming query that fails once and restarts from its checkpoint; Spark reading
ColumnBuckets output as it reads its own partitionBy output."""

import json
import os

import pandas as pd
import pyarrow as pa
import pytest

from storage.file_sink import ColumnBuckets, FileSink, RollingPolicy

from tests.file_sink.spark_hooks import FailAt

from .test_rotation import NANOSECOND_NAMES, NANOSECONDS, SPARK_PARTITION_NAMES

pytestmark = pytest.mark.spark


def write_inputs(directory, batches):
    directory.mkdir()
    for i, rows in enumerate(batches):
        (directory / f"in-{i:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def stream(spark, directory):
    return spark.readStream.schema("id LONG, k STRING").option("maxFilesPerTrigger", 1).json(str(directory))


@pytest.mark.parametrize("phase", ["mid_write", "after_commit_record"])
def test_query_failing_on_first_attempt_restarts_without_loss_or_duplicates(spark, tmp_path, phase):
    batches = [[{"id": 4 * b + i, "k": f"k{i % 2}"} for i in range(4)] for b in range(3)]
    write_inputs(tmp_path / "in", batches)
    sink = (
        FileSink(str(tmp_path / "out"))
        .with_buckets(ColumnBuckets("k"))
        .with_rolling_policy(RollingPolicy(max_batches=2))
    )
    checkpoint = str(tmp_path / "checkpoint")
    first = sink.start(stream(spark, tmp_path / "in"), checkpoint_location=checkpoint, hook=FailAt(phase, 1))
    with pytest.raises(Exception, match="injected failure"):
        first.processAllAvailable()
    first.stop()

    second = sink.start(stream(spark, tmp_path / "in"), checkpoint_location=checkpoint)
    second.processAllAvailable()
    second.stop()
    writer = sink.writer()
    try:  # end of input: under the stream's last batch id, which a later run of the stream does not skip
        assert writer.finish(processing_time_ms=0)
    finally:
        writer.close()

    out = sink.read()
    assert sorted(out["id"]) == list(range(12))
    assert set(out.groupby("k")["id"].count()) == {6}
    assert spark.read.json(str(tmp_path / "out")).count() == 12  # Spark reads finished files only


def test_bounded_spark_dataframe_to_parquet_read_back_by_spark(spark, tmp_path):
    df = spark.range(0, 50).selectExpr("id", "concat('x/_:', cast(id % 3 as string)) as k")
    sink = FileSink(str(tmp_path / "out"), format="parquet", compression="zstd").with_buckets(ColumnBuckets("k"))
    sink.write(df)
    back = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(r.id for r in back.collect()) == list(range(50))
    written = {n.split("/")[-2] for n in sink.finished_files()}  # a part per task and bucket: the tasks write
    assert sorted(written) == ["k=x%2F_%3A0", "k=x%2F_%3A1", "k=x%2F_%3A2"]
    assert sorted(r.k for r in back.select("k").distinct().collect()) == ["x/_:0", "x/_:1", "x/_:2"]  # decoded


def test_null_and_empty_column_values_read_back_by_spark_as_null(spark, tmp_path):
    sink = FileSink(str(tmp_path / "out"), format="parquet").with_buckets(ColumnBuckets("k"))
    sink.write(pa.table({"k": ["a", None, "None", ""], "v": [0, 1, 2, 3]}))
    back = spark.read.parquet(str(tmp_path / "out"))  # Spark refuses a "k=" directory outright
    assert sorted((r.v, r.k) for r in back.collect()) == [(0, "a"), (1, None), (2, "None"), (3, None)]


def partition_directories(path):
    return sorted(d for d in os.listdir(path) if d.startswith("k="))


def rows(df):
    """(v, k) per row; repr makes NaN equal to NaN."""
    return sorted((r.v, repr(r.k)) for r in df.select("v", "k").collect())


@pytest.mark.parametrize("case", SPARK_PARTITION_NAMES)
def test_column_buckets_read_back_as_sparks_own_partition_by_output(spark, tmp_path, case):
    values, session_time_zone, names = SPARK_PARTITION_NAMES[case]
    table = pa.table({"v": pa.array(range(len(values))), "k": values})
    ours, theirs = str(tmp_path / "sink"), str(tmp_path / "spark")
    FileSink(ours, format="parquet").with_buckets(ColumnBuckets("k", timezone=session_time_zone)).write(table)
    time_zone_before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", session_time_zone)
    try:
        spark.createDataFrame(table).write.partitionBy("k").parquet(theirs)
        assert partition_directories(ours) == partition_directories(theirs) == sorted(names)
        ours_back, theirs_back = spark.read.parquet(ours), spark.read.parquet(theirs)
        assert ours_back.schema["k"] == theirs_back.schema["k"]
        assert rows(ours_back) == rows(theirs_back)
    finally:
        spark.conf.set("spark.sql.session.timeZone", time_zone_before)


def test_nanosecond_timestamps_are_named_as_spark_names_them(spark, tmp_path):
    # Names only, in CSV: Parquet, Avro and JSON lines refuse the digits below the microsecond.
    table = pa.table({"k": NANOSECONDS, "v": [0, 1]})
    FileSink(str(tmp_path / "sink"), format="csv").with_buckets(ColumnBuckets("k")).write(table)
    spark.createDataFrame(table).write.partitionBy("k").parquet(str(tmp_path / "spark"))
    spark_names = partition_directories(tmp_path / "spark")
    assert partition_directories(tmp_path / "sink") == spark_names == sorted(NANOSECOND_NAMES)


def test_parquet_of_pandas_nanosecond_timestamps_is_read_by_spark(spark, tmp_path):
    times = pd.Series(pd.to_datetime(["2024-01-01 10:00:00.123456", None], format="ISO8601"), dtype="datetime64[ns]")
    panes = pd.DataFrame({"window_start": times, "window_end": times.dt.tz_localize("UTC"), "v": [1, 2]})
    FileSink(str(tmp_path / "out"), format="parquet").write(panes)
    back = spark.read.parquet(str(tmp_path / "out"))
    assert back.schema.simpleString() == "struct<window_start:timestamp_ntz,window_end:timestamp,v:bigint>"
    as_text = back.selectExpr("v", "string(window_start)", "string(window_end)").orderBy("v").collect()
    when = "2024-01-01 10:00:00.123456"  # window_end in the session time zone, UTC
    assert [tuple(r) for r in as_text] == [(1, when, when), (2, None, None)]


FORMATS = ["jsonl", "csv", "text", "parquet", "orc", "avro"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bounded_query_leaves_every_committed_row_readable_and_the_next_run_goes_on(spark, tmp_path, fmt):
    # The default policy of the row formats (128 MiB, 60 s) would keep these rows in progress: the query must end
    # with them finished. The second run over one more file writes only that file's rows.
    batches = [[{"id": 3 * b + i, "k": f"k{i}"} for i in range(3)] for b in range(4)]
    write_inputs(tmp_path / "in", batches[:3])
    sink = FileSink(str(tmp_path / "out"), format=fmt)
    checkpoint = str(tmp_path / "checkpoint")

    def run_once():
        df = stream(spark, tmp_path / "in")
        df = df.selectExpr("cast(id as string) as value") if fmt == "text" else df
        sink.start(df, checkpoint_location=checkpoint, trigger={"availableNow": True}).awaitTermination()
        out = sink.read()
        return sorted(int(v) for v in out["value" if fmt == "text" else "id"])

    assert run_once() == list(range(9))
    assert not [n for n in os.listdir(tmp_path / "out") if n.endswith(".inprogress")]
    (tmp_path / "in" / "in-003.json").write_text("".join(json.dumps(r) + "\n" for r in batches[3]))
    assert run_once() == list(range(12))


def test_the_foreach_batch_path_writes_from_the_tasks_too(spark, tmp_path):
    # What pyspark 3.5 and 4.0 run; here forced on a pyspark that has the data source writer.
    write_inputs(tmp_path / "in", [[{"id": 2 * b + i, "k": f"k{i}"} for i in range(2)] for b in range(3)])
    sink = FileSink(str(tmp_path / "out"), format="parquet").with_buckets(ColumnBuckets("k"))
    query = sink.start(stream(spark, tmp_path / "in"), checkpoint_location=str(tmp_path / "checkpoint"),
                       trigger={"availableNow": True}, api="foreach_batch")
    query.awaitTermination()
    assert sorted(sink.read()["id"]) == list(range(6))
    assert spark.read.parquet(str(tmp_path / "out")).count() == 6
