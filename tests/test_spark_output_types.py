"""On Spark as on pandas: an empty input has the output types of a non-empty one, and a numeric
column of epoch instants (``time.time()`` floats included) is read with ``time_unit``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from accumulations import Count, Mean, Sum, ToList
from tests.spark_runner.helpers import assert_same_panes
from tests.spark_runner.streaming import write_batch
from tests.sparks import wait_for
from triggers import AtWatermark
from windowing import WindowingConfigError, windowed

pytestmark = pytest.mark.spark

SCHEMA = "user string, ts timestamp, amount long, price double"
ROWS = pd.DataFrame({"user": ["a", "b", "a"], "ts": pd.to_datetime([1, 2, 14], unit="s").astype("datetime64[us]"),
                     "amount": [5, 7, 1], "price": [1.5, 2.5, 0.5]})
AGGREGATIONS = dict(total=Sum("amount"), n=Count(), mean=Mean("price"), all=ToList("amount"))


def _fixed(source, **unit):
    return windowed(source, time="ts", key="user", **unit).fixed("10 seconds")


# A Spark result's types are its schema (how pyspark's toPandas maps them is pyspark's own: pyspark
# 3.5 gives an empty timestamp column nanoseconds, a full one microseconds).

def test_an_empty_batch_input_has_the_types_of_a_non_empty_one(spark):
    full = _fixed(spark.createDataFrame(ROWS, SCHEMA)).run(**AGGREGATIONS)
    empty = _fixed(spark.createDataFrame([], SCHEMA)).run(**AGGREGATIONS)
    assert full.panes.count() == 3 and empty.panes.count() == 0 and empty.late_data.count() == 0
    assert empty.panes.schema == full.panes.schema
    assert empty.late_data.schema == full.late_data.schema
    assert empty.late_data.columns == ["user", "ts", "amount", "price", "window_start", "window_end", "reason"]


def test_an_empty_micro_batch_has_the_types_of_a_non_empty_one(spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source.resolve()))
    panes = _fixed(stream).watermark("5 seconds").aggregate(**AGGREGATIONS)
    batches: list[tuple[int, object]] = []  # (rows, schema) of each micro-batch
    write_batch(source, 0, ROWS.iloc[:0])
    query = (panes.writeStream.foreachBatch(lambda batch, _: batches.append((batch.count(), batch.schema)))
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    try:
        query.processAllAvailable()
        write_batch(source, 1, ROWS)
        later = ROWS.assign(ts=(ROWS["ts"] + pd.Timedelta(minutes=1)).astype("datetime64[us]"))
        write_batch(source, 2, later)  # moves the watermark past ROWS' windows
        wait_for(lambda: query.processAllAvailable() or any(rows for rows, _ in batches), "a micro-batch with panes")
    finally:
        query.stop()
    assert batches[0][0] == 0
    with_panes = next(schema for rows, schema in batches if rows)
    assert all(schema == with_panes for _, schema in batches)


# (unit, Spark type, the instants of ROWS in that unit): 1.001 s is 1000999.9999999999 us as a
# double, and 2.5 us is half a microsecond, rounded up on both runners.
EPOCH = [
    ("s", "double", [1.001, 2.0000005, 14.999999, -0.5]),
    ("ms", "double", [1001.0004, 2000.0, 14999.9995, -0.0001]),
    ("us", "double", [1001000.5, 2.5, 14999999.0, -2.5]),
    ("ns", "bigint", [1_001_000_500, 1_500, -1_500, 14_999_999_499]),
    ("s", "bigint", [1, 2, 14, -3]),
    # their products with the unit round onto half a microsecond: read as the numbers they hold
    ("s", "double", [1700000001.0000004, -1700000001.0000004, 1700000001.0000007, 0.0000005]),
    ("us", "double", [4503599627370497.0, -4503599627370497.0, 0.49999999999999994, 1.5]),
    ("ns", "double", [1_700_000_001_000_000_512.0, 1499.9999999999998, -1500.0, 2.5e15]),
    # near the epoch the product's rounding crossed half a microsecond: 1.5997815 s holds 1599781.4999... us
    ("s", "double", [1.5997815, -1.5997815, 0.0000025, 2.599781]),
    ("ms", "double", [1599.7815, 0.0025, -0.0005, 7.0000005]),
]


@pytest.mark.parametrize("unit, spark_type, times", EPOCH)
def test_epoch_numbers_with_a_time_unit_window_as_on_pandas(spark, unit, spark_type, times):
    frame = pd.DataFrame({"user": ["a", "b", "a", "b"], "ts": times, "amount": [5, 7, 1, 2]})
    frame = frame.astype({"ts": np.float64 if spark_type == "double" else np.int64})
    df = spark.createDataFrame(frame, f"user string, ts {spark_type}, amount long")
    micros = windowed(df, time="ts", key="user", time_unit=unit).fixed("1 microsecond").aggregate(total=Sum("amount"))
    expected = windowed(frame, time="ts", key="user", time_unit=unit).fixed("1 microsecond").aggregate(total=Sum("amount"))
    assert_same_panes(micros.toPandas(), expected)


def test_the_global_window_of_a_timestamp_column_has_the_bounds_of_the_pandas_runner(spark):
    frame = ROWS.assign(ts=ROWS["ts"].astype("datetime64[us]"))
    whole = windowed(spark.createDataFrame(frame, SCHEMA), time="ts").global_window().aggregate(total=Sum("amount"))
    expected = windowed(frame, time="ts").global_window().aggregate(total=Sum("amount"))
    got = whole.toPandas()
    assert_same_panes(got, expected)
    bounds = ["window_start", "window_end"]  # exactly: assert_same_panes compares numbers within a tolerance
    assert got[bounds].astype("datetime64[us]").values.tolist() == expected[bounds].values.tolist()


def test_time_dot_time_seconds_stream_with_a_time_unit(spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    seconds = pd.DataFrame({"user": ["a", "a", "b"], "ts": [1_704_067_200.25, 1_704_067_209.75, 1_704_067_212.5],
                            "amount": [5, 7, 1]})
    stream = spark.readStream.schema("user string, ts double, amount long").option("maxFilesPerTrigger", 1) \
        .parquet(str(source.resolve()))
    panes = (windowed(stream, time="ts", key="user", time_unit="s").fixed("10 seconds").watermark("5 seconds")
             .trigger(AtWatermark()).aggregate(total=Sum("amount")))
    batches: list[pd.DataFrame] = []
    query = (panes.writeStream.foreachBatch(lambda batch, _: batches.append(batch.toPandas()))
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    try:
        write_batch(source, 0, seconds)
        write_batch(source, 1, seconds.assign(user="z", ts=seconds["ts"] + 60))  # moves the watermark
        wait_for(lambda: query.processAllAvailable() or sum(map(len, batches)) >= 2, "the panes of a and b")
    finally:
        query.stop()
    got = pd.concat([batch for batch in batches if len(batch)], ignore_index=True)
    expected = windowed(seconds, time="ts", key="user", time_unit="s").fixed("10 seconds").aggregate(total=Sum("amount"))
    assert_same_panes(got, expected)


def test_a_float_time_column_on_spark_needs_a_time_unit_and_a_finite_time(spark):
    floats = spark.createDataFrame([(1.5, 1)], "ts double, x long")
    with pytest.raises(WindowingConfigError, match=r"time column 'ts' has Spark type double; it must be a timestamp or "
                                                   r"an integer; for epoch instants give their unit, "
                                                   r"e\.g\. windowed\(\.\.\., time_unit='s'\)"):
        windowed(floats, time="ts").fixed(10).aggregate(Sum("x"))
    for bad, shown in ((float("nan"), "NaN"), (float("inf"), "Infinity"), (1e300, "1.0E300")):
        with pytest.raises(Exception, match=rf"time column 'ts' holds {shown}, "
                                            r"not finite or beyond the time axis in windowed\(time_unit='s'\)"):
            # One input partition: on pyspark 3.5 a killed sibling task may leave its Python worker broken.
            frame = spark.createDataFrame([(1.5, 1), (bad, 2)], "ts double, x long").coalesce(1)
            windowed(frame, time="ts", time_unit="s") \
                .fixed("1 second").aggregate(Sum("x")).collect()
    stamps = spark.createDataFrame(ROWS, SCHEMA)
    with pytest.raises(WindowingConfigError, match=r"windowed\(time_unit='ms'\): time column 'ts' has Spark type timestamp"):
        windowed(stamps, time="ts", time_unit="ms").fixed("1 second").aggregate(Sum("amount"))
