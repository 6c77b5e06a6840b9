"""A streaming Spark DataFrame through applyInPandasWithState.

- same panes as the pandas runner for the same micro-batches (hypothesis splits);
- early firings by processing time and retractions: same final values, and per
  window emitted minus retracted equals the final value;
- restarts from the checkpoint, between batches and after a failing batch,
  emit exactly the panes of an uninterrupted run into an idempotent sink.
"""

from __future__ import annotations

import os
import uuid

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accumulations import Count, Sum
from triggers import AtWatermark
from windowing import TestStream, windowed

from .helpers import assert_same_panes, events
from .streaming import batch_inputs, read_sink, start, write_batch

pytestmark = pytest.mark.spark

ROWS = [("a", 1, 5), ("b", 3, 1), ("a", 12, 7), ("c", 14, 2), ("a", 8, 3), ("b", 31, 4), ("c", 12, 1),
        ("a", 44, 8), ("b", 2, 9), ("d", 58, 1), ("a", 61, 2), ("c", 75, 3)]


def _on_time(source):
    return windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds") \
        .aggregate(total=Sum("amount"), n=Count())


def _feed(query, source, parts, first: int = 0, stop: bool = True) -> None:
    """Write ``parts`` as the next files, each followed by processAllAvailable; then stop the query."""
    try:
        for i, part in enumerate(parts, first):
            write_batch(source, i, part)
            query.processAllAvailable()
    finally:
        if stop:
            query.stop()


def _mirror(parts: list[pd.DataFrame], inputs: list[int], build) -> pd.DataFrame:
    """The pandas runner over the micro-batches Spark ran (a no-data batch is an empty step)."""
    stream, files = TestStream(), iter(parts)
    for n in inputs:
        stream = stream.add_elements(next(files) if n else events([]))
    panes = build(stream)
    return panes[panes["step"] < len(stream.actions)]  # Spark's stream has no end of input


@pytest.fixture
def where(tmp_path):
    def make():
        base = tmp_path / uuid.uuid4().hex[:8]
        return base / "in", base / "out", base / "chk"
    return make


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, len(ROWS) - 1), min_size=1, max_size=3, unique=True))
def test_stream_matches_the_pandas_runner_batch_for_batch(spark, where, cuts):
    source, sink, checkpoint = where()
    bounds = [0, *sorted(cuts), len(ROWS)]
    parts = [events(ROWS[a:b]) for a, b in zip(bounds, bounds[1:])]
    query = start(spark, source, sink, checkpoint, _on_time)
    try:
        _feed(query, source, parts, stop=False)
        inputs = batch_inputs(query)
    finally:
        query.stop()
    assert sum(inputs) == len(ROWS)
    actual = read_sink(spark, sink)
    expected = _mirror(parts, inputs, _on_time)
    assert len(expected) > 0
    assert_same_panes(actual, expected)


def test_early_firings_and_retractions_reach_the_final_values(spark, where):
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    try:
        source, sink, checkpoint = where()

        def build(s):
            return (windowed(s, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")
                    .trigger(AtWatermark().with_early_firings_every("1 second").with_late_firings_every(1))
                    .allowed_lateness("30 seconds").accumulating_and_retracting().aggregate(Sum("amount")))

        parts = [events(ROWS[:4]), events(ROWS[4:8]), events(ROWS[8:]), events([("z", 200, 0)])]
        query = start(spark, source, sink, checkpoint, build)
        _feed(query, source, parts)
        assert query.lastProgress is not None
        panes = read_sink(spark, sink)
    finally:
        spark.conf.unset("spark.sql.streaming.noDataMicroBatches.enabled")
    assert set(panes["timing"]) >= {"EARLY", "ON_TIME"}
    assert panes["is_retraction"].any()
    live = panes[panes["user"] != "z"]
    signed = live["value"].where(~live["is_retraction"], -live["value"])
    per_window = signed.groupby([live["user"], live["window_start"]]).sum()
    final = windowed(events(ROWS), time="ts", key="user").fixed("10 seconds").aggregate(Sum("amount"))
    expected = final.set_index(["user", "window_start"])["value"]
    expected.index = expected.index.set_levels(expected.index.levels[1].astype("datetime64[us]"), level=1)
    per_window.index = per_window.index.set_levels(per_window.index.levels[1].astype("datetime64[us]"), level=1)
    assert per_window.sort_index().to_dict() == expected.sort_index().to_dict()


def test_restarts_from_the_checkpoint_emit_exactly_the_uninterrupted_panes(spark, where, tmp_path):
    parts = [events(ROWS[i:i + 3]) for i in range(0, len(ROWS), 3)] + [events([("z", 300, 0)])]

    source, sink, checkpoint = where()
    _feed(start(spark, source, sink, checkpoint, _on_time), source, parts)
    uninterrupted = read_sink(spark, sink)
    assert len(uninterrupted) > 0

    arm, fired = tmp_path / "arm", tmp_path / "fired"

    def prepare(stream):
        from pyspark.sql import functions as F

        def fail_once(amount):
            if os.path.exists(arm) and not os.path.exists(fired):
                open(fired, "w").close()
                raise RuntimeError("injected failure on the first attempt")
            return amount

        return stream.withColumn("amount", F.udf(fail_once, "long")("amount"))

    source, sink, checkpoint = where()
    _feed(start(spark, source, sink, checkpoint, _on_time, prepare), source, parts[:2])  # stopped between batches

    query = start(spark, source, sink, checkpoint, _on_time, prepare)
    arm.touch()
    write_batch(source, 2, parts[2])
    with pytest.raises(Exception, match="injected failure"):
        query.processAllAvailable()  # the batch fails mid-way, after its offsets were logged
    query.stop()
    assert fired.exists()

    query = start(spark, source, sink, checkpoint, _on_time, prepare)
    query.processAllAvailable()
    _feed(query, source, parts[3:], 3)
    assert_same_panes(read_sink(spark, sink), uninterrupted)


def test_the_watermark_can_come_from_with_watermark_on_the_input(spark, where):
    source, sink, checkpoint = where()
    parts = [events(ROWS[:6]), events(ROWS[6:])]

    def spark_build(s):
        return windowed(s, time="ts", key="user").fixed("10 seconds").aggregate(total=Sum("amount"), n=Count())

    query = start(spark, source, sink, checkpoint, spark_build, lambda s: s.withWatermark("ts", "5 seconds"))
    try:
        _feed(query, source, parts, stop=False)
        inputs = batch_inputs(query)
    finally:
        query.stop()
    # No row of this data is behind the watermark while its window is open, where Spark's rule (drop rows
    # behind the watermark) and Beam's (drop rows whose window is past the watermark) differ.
    expected = _mirror(parts, inputs, _on_time)  # the pandas runner with .watermark("5 seconds")
    assert len(expected) > 0
    assert_same_panes(read_sink(spark, sink), expected)


@pytest.mark.parametrize("step, message", [
    (lambda w: w.watermark("5 seconds"), r"watermark\(delay='5 seconds'\) on an input that already has withWatermark on 'ts'"),
    (lambda w: w.allowed_lateness("1 minute"), r"allowed_lateness\('1 minute'\) with withWatermark on the input"),
])
def test_with_watermark_on_the_input_refuses_what_it_cannot_honour(spark, where, step, message):
    from windowing.errors import WindowingConfigError

    source, _, _ = where()
    source.mkdir(parents=True)
    stream = spark.readStream.schema("user string, ts timestamp, amount long").parquet(str(source)).withWatermark("ts", "5 seconds")
    with pytest.raises(WindowingConfigError, match=message):
        step(windowed(stream, time="ts", key="user").fixed("10 seconds")).aggregate(Sum("amount"))


def test_a_stream_without_a_watermark_is_refused(spark, where):
    from windowing.errors import WindowingConfigError

    source, _, _ = where()
    source.mkdir(parents=True)
    stream = spark.readStream.schema("user string, ts timestamp, amount long").parquet(str(source))
    with pytest.raises(WindowingConfigError, match=r"streaming windowed\(time='ts'\) has no watermark: call \.watermark\(delay\)"):
        windowed(stream, time="ts", key="user").fixed("10 seconds").aggregate(Sum("amount"))
