"""A streaming query's panes leave the stateful function packed (`worker.packed_output`) where every output
type travels packed, and as rows otherwise: both give the pandas runner's panes."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import types as T

from accumulations import Count, Max, Mean, Min, Sum, ToList
from windowing import windowed
from windowing.runners.spark import plan_spark
from windowing.runners.spark.wire import packed_output_schema

from .helpers import assert_same_panes, events
from .streaming import mirror, read_sink, run_all, start

pytestmark = pytest.mark.spark

ROWS = [("a", 1, 5), ("b", 3, 1), ("a", 12, 7), ("c", 14, 2), ("a", 8, 3), ("b", 31, 4), ("c", 12, 1),
        ("a", 44, 8), ("b", 2, 9), ("d", 58, 1), ("a", 61, 2), ("c", 75, 3)]
SCHEMA = T.StructType([T.StructField("user", T.StringType()), T.StructField("ts", T.TimestampType()),
                       T.StructField("amount", T.LongType())])
PACKED = dict(total=Sum("amount"), mean=Mean("amount"), top=Max("amount"), n=Count())  # bigint, double, string key
UNPACKED = dict(total=Sum("amount"), values=ToList("amount"), first=Min("ts"))  # an array and a timestamp: rows


@pytest.mark.parametrize("aggregations, packed", [(PACKED, True), (UNPACKED, False)], ids=["packed", "rows"])
def test_packed_and_unpacked_output_give_the_pandas_runners_panes(spark, tmp_path, aggregations, packed):
    def build(source):
        return windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds").aggregate(**aggregations)

    strategy = windowed(events(ROWS), time="ts", key="user").fixed("10 seconds").watermark("5 seconds").strategy(**aggregations)
    assert (packed_output_schema(plan_spark(strategy, SCHEMA, 4).out_schema) is not None) == packed

    base = tmp_path / uuid.uuid4().hex[:8]
    source, sink, checkpoint = base / "in", base / "out", base / "chk"
    parts = [events(ROWS[i:i + 4]) for i in range(0, len(ROWS), 4)] + [events([("z", 300, 0)])]
    inputs = run_all(start(spark, source, sink, checkpoint, build), source, parts)
    expected = mirror(parts, inputs, build)
    assert len(expected) > 0
    assert_same_panes(read_sink(spark, sink), expected)
