"""Spark reading the sink's output: ColumnBuckets directories as Spark's own partitionBy output, Parquet
timestamps; a bounded Spark DataFrame written by its tasks. The streaming queries are in test_spark_queries.py."""

import datetime
import os
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pytest

from storage.file_sink import ColumnBuckets, DateTimeBuckets, FileSink

from .test_rotation import NANOSECOND_NAMES, NANOSECONDS, SPARK_PARTITION_NAMES

pytestmark = pytest.mark.spark


def test_bounded_spark_dataframe_to_parquet_read_back_by_spark(spark, tmp_path):
    df = spark.range(0, 50).selectExpr("id", "concat('x/_:', cast(id % 3 as string)) as k")
    sink = FileSink(str(tmp_path / "out"), format="parquet", compression="zstd").with_buckets(ColumnBuckets("k"))
    sink.write(df)
    back = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(r.id for r in back.collect()) == list(range(50))
    written = {n.split("/")[-2] for n in sink.finished_files()}  # a part per task and bucket: the tasks write
    assert sorted(written) == ["k=x%2F_%3A0", "k=x%2F_%3A1", "k=x%2F_%3A2"]
    assert sorted(r.k for r in back.select("k").distinct().collect()) == ["x/_:0", "x/_:1", "x/_:2"]  # decoded


def test_rows_without_columns_from_spark_are_refused_and_none_without_rows_write_nothing(spark, tmp_path):
    # Before: the tasks got the batches of no columns without their rows, and the sink committed an empty batch.
    sink = FileSink(str(tmp_path / "out"))
    with pytest.raises(ValueError, match=r"FileSink cannot write 3 row\(s\) without columns"):
        sink.write(spark.range(3).drop("id"))
    sink.write(spark.range(0).drop("id"))
    assert sink.finished_files() == []
    stream = spark.readStream.format("rate").load().drop("timestamp", "value")
    with pytest.raises(ValueError, match=r"FileSink cannot write a stream without columns"):
        sink.start(stream, str(tmp_path / "checkpoint"))


def test_a_relative_path_is_the_drivers_directory_on_the_tasks_too(spark, tmp_path, monkeypatch):
    """The tasks resolved a relative path in their own working directory (the driver's after a notebook's %cd
    differs): their parts went there, and the read found the commit's parts missing."""
    spark.range(1).collect()  # the workers start in the working directory of before
    monkeypatch.chdir(tmp_path)
    sink = FileSink("out")
    sink.write(spark.range(10).repartition(2))
    assert sink.path == str(tmp_path / "out")
    assert sorted(sink.read()["id"]) == list(range(10))


@pytest.mark.parametrize("processing_time_ms", [0, 1_700_000_000_000], ids=["1970", "2023"])
def test_a_spark_dataframe_is_written_at_the_processing_time_given_as_a_pandas_one_is(spark, tmp_path,
                                                                                      processing_time_ms):
    """write(spark_df, processing_time_ms=t) dropped t: its tasks bucketed by their own clocks (DateTimeBuckets()
    put the rows into the wall clock's hour), where the same rows from pandas went to t's hour."""
    rows = pd.DataFrame({"id": range(6)})
    expected = pd.Timestamp(processing_time_ms, unit="ms").strftime("%Y-%m-%d--%H")
    for name, df in [("pandas", rows), ("spark", spark.createDataFrame(rows).repartition(3))]:
        sink = FileSink(str(tmp_path / name)).with_buckets(DateTimeBuckets())
        sink.write(df, processing_time_ms=processing_time_ms)
        assert {os.path.relpath(p, tmp_path / name).split(os.sep)[0] for p in sink.finished_files()} == {expected}
        assert sorted(sink.read()["id"]) == list(range(6))


def test_a_spark_dataframe_written_without_a_processing_time_takes_the_calls_in_every_task(spark, tmp_path,
                                                                                            monkeypatch):
    """Each task took its own clock: one batch written across an hour went to two DateTimeBuckets hours."""
    import types

    import storage.file_sink.sink as sink_module

    monkeypatch.setattr(sink_module, "time", types.SimpleNamespace(time=lambda: 0.0))  # the call's clock: 1970
    sink = FileSink(str(tmp_path / "out")).with_buckets(DateTimeBuckets())
    sink.write(spark.createDataFrame(pd.DataFrame({"id": range(6)})).repartition(3))
    assert {os.path.relpath(p, tmp_path / "out").split(os.sep)[0] for p in sink.finished_files()} == {"1970-01-01--00"}


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


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_parts_written_by_spark_tasks_read_back_as_the_types_written(spark, tmp_path, fmt):
    """Each task reports its parts' schemas with them, the driver's commit keeps them: timestamps, dates and
    decimals read back as such, text of digits as text."""
    df = spark.range(0, 40, numPartitions=4).selectExpr(
        "id", "timestamp_micros(id * 1000001) as at", "date_add(date'2024-02-28', cast(id as int)) as day",
        "cast(id / 8 as decimal(10, 3)) as amount", "lpad(cast(id as string), 5, '0') as code")
    sink = FileSink(str(tmp_path / "out"), format=fmt)
    sink.write(df)
    assert len(sink.finished_files()) == 4
    back = sink.read().sort_values("id", ignore_index=True)
    assert back["code"].tolist() == [f"{i:05d}" for i in range(40)]
    assert back["amount"].tolist() == [Decimal(i) / 8 for i in range(40)]
    assert [t.tz_convert("UTC").tz_localize(None) for t in back["at"]] == [
        pd.Timestamp(i * 1000001, unit="us") for i in range(40)]
    assert back["day"].tolist() == [datetime.date(2024, 2, 28) + datetime.timedelta(days=i) for i in range(40)]


def test_a_record_damaged_while_the_tasks_write_is_named_once_and_their_files_stay(spark, tmp_path):
    """The commit refuses the damaged record, and the cleanup read it again to find the tasks' files to delete:
    the same DamagedCommitRecordError came twice, the second raised while handling the first. Now the commit's
    error comes alone, and the tasks' files stay (which of them the records name is not known)."""
    from storage.file_sink import DamagedCommitRecordError
    from storage.file_sink.spark import write_with_tasks
    from tests.file_sink.spark_hooks import DamageNewestRecord

    sink = FileSink(str(tmp_path))
    sink.write(pd.DataFrame({"id": [1, 2]}))
    before = {p for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(DamagedCommitRecordError, match="is damaged") as refused:
        write_with_tasks(sink, spark.createDataFrame(pd.DataFrame({"id": [3, 4]})).coalesce(1), "w", 1, None, False,
                         DamageNewestRecord(str(tmp_path), 1))
    assert refused.value.__context__ is None
    written = {p for p in tmp_path.rglob("*") if p.is_file()} - before
    assert written and all(p.name.startswith(".") or "_file_sink" in p.parts for p in written)
