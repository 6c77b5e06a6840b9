"""A streaming Spark DataFrame through applyInPandasWithState.

- same panes as the pandas runner for the same micro-batches (hypothesis splits);
- early firings by processing time and retractions: same final values, and per
  window emitted minus retracted equals the final value;
- restarts from the checkpoint, between batches and after a failing batch,
  emit exactly the panes of an uninterrupted run into an idempotent sink.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import uuid
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from accumulations import Count, Distinct, Fold, Max, Mean, Min, Reduce, Sum, ToList, TopN, ToSet
from storage import KVStore
from triggers import AfterCount, AfterEach, AtWatermark, Default, OrFinally, Repeatedly
from windowing import windowed
from windowing.errors import RepeatedWallTimeWarning, WindowingConfigError

from .helpers import assert_same_late_data, assert_same_panes, events, frozen_when_output
from .streaming import (
    ROCKSDB_CHANGELOG,
    batch_inputs,
    mirror,
    parquet_takes_ancient_timestamps,
    read_sink,
    run_all,
    start,
    start_run,
    write_batch,
)

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
    inputs = run_all(start(spark, source, sink, checkpoint, _on_time), source, parts)
    assert sum(inputs) == len(ROWS)
    actual = read_sink(spark, sink)
    expected = mirror(parts, inputs, _on_time)
    assert len(expected) > 0
    assert_same_panes(actual, expected)


WINDOW_KINDS = {"fixed": lambda w: w.fixed("10 seconds"), "sliding": lambda w: w.sliding("20 seconds", every="10 seconds"),
                "uneven sliding": lambda w: w.sliding("10 seconds", every="4 seconds"),
                "sessions": lambda w: w.sessions("7 seconds"), "global": lambda w: w.global_window()}
COUNT_TRIGGERS = {"default": None, "repeated count": Repeatedly(AfterCount(2)),
                  "early and late counts": AtWatermark().with_early_firings_every(2).with_late_firings_every(1),
                  "each": AfterEach(AfterCount(2), AfterCount(1)),
                  "or finally": OrFinally(Repeatedly(AfterCount(1)), AfterCount(4))}
AGGREGATIONS = {"sums": lambda: dict(total=Sum("amount"), n=Count()),
                "extremes": lambda: dict(lo=Min("amount"), hi=Max("amount"), mean=Mean("amount")),
                "lists": lambda: dict(all=ToList("amount"), top=TopN("amount", 2)),
                "sets": lambda: dict(d=Distinct("amount"), s=ToSet("amount"))}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 90), st.integers(-5, 20)), min_size=1, max_size=25),
       cuts=st.lists(st.integers(1, 24), max_size=3, unique=True), kind=st.sampled_from(sorted(WINDOW_KINDS)),
       trigger=st.sampled_from(sorted(COUNT_TRIGGERS)), mode=st.sampled_from(["discarding", "accumulating", "retracting"]),
       lateness=st.sampled_from([0, 30]), keyed=st.booleans(), aggregations=st.sampled_from(sorted(AGGREGATIONS)))
def test_random_pipelines_stream_on_spark_as_on_the_pandas_runner(spark, where, rows, cuts, kind, trigger, mode,
                                                                  lateness, keyed, aggregations):
    """The real query (Arrow, the JVM's types, packing or folding, timeouts) against the pandas runner over the
    micro-batches Spark ran, for random windows, count triggers, modes and accumulations (test_adapter.py runs
    many more, and processing time, on a simulated query)."""
    assume(not (kind == "global" and COUNT_TRIGGERS[trigger] is None))  # refused: it never fires on a stream

    def build(source):
        w = WINDOW_KINDS[kind](windowed(source, time="ts", key="user" if keyed else None))
        w = w.watermark("3 seconds").allowed_lateness(f"{lateness} seconds")
        w = w if COUNT_TRIGGERS[trigger] is None else w.trigger(COUNT_TRIGGERS[trigger])
        w = {"discarding": w.discarding, "accumulating": w.accumulating, "retracting": w.accumulating_and_retracting}[mode]()
        return w.aggregate(**AGGREGATIONS[aggregations]())

    source, sink, checkpoint = where()
    bounds = [0, *sorted(c for c in cuts if c < len(rows)), len(rows)]
    parts = [events(rows[a:b]) for a, b in zip(bounds, bounds[1:])]
    with parquet_takes_ancient_timestamps(spark):
        inputs = run_all(start(spark, source, sink, checkpoint, build), source, parts)
    expected = mirror(parts, inputs, build)
    for column in expected.columns:  # Spark has no sets: ToSet and Distinct give sorted arrays
        if expected[column].dtype == object:
            expected[column] = [tuple(sorted(v)) if isinstance(v, (set, frozenset)) else v for v in expected[column]]
    assert_same_panes(read_sink(spark, sink), expected)


def test_a_window_ending_inside_a_millisecond_fires_in_the_same_micro_batch_as_on_the_pandas_runner(spark, where):
    # Spark's watermark counts whole milliseconds of the largest event time: 19.000500 s makes it 19.000 s, short
    # of the end of a's session, 19.000123 s; the pandas runner floors the same way (docs/engine.md).
    def at(micros):
        return pd.Timestamp("2024-01-01") + pd.Timedelta(microseconds=micros)

    def frame(*rows):
        return pd.DataFrame({"user": [r[0] for r in rows], "ts": pd.Series([at(r[1]) for r in rows]).astype("datetime64[us]"),
                             "amount": [r[2] for r in rows]})

    def build(source):
        return windowed(source, time="ts", key="user").sessions("7 seconds").watermark("0 seconds").aggregate(Sum("amount"))

    source, sink, checkpoint = where()
    parts = [frame(("a", 12_000_123, 1), ("b", 19_000_500, 2)), frame(("c", 19_001_000, 4))]
    inputs = run_all(start(spark, source, sink, checkpoint, build), source, parts)
    actual, expected = read_sink(spark, sink), mirror(parts, inputs, build)
    # a's pane: after the second file, in the step of the mirror and in the batch (id = step) of Spark's sink
    assert list(expected.loc[expected["user"] == "a", "step"]) == [len(inputs) - 1]
    assert [r.batch for r in spark.read.parquet(str(sink)).where("user = 'a'").select("batch").collect()] == [len(inputs) - 1]
    assert_same_panes(actual, expected)


def test_a_stream_refuses_event_times_before_1970_naming_the_column_and_value(spark, where):
    """Spark's watermark starts at 0 and never goes below it: a stream of such times fired no window and reported
    no late element, without a word (the pandas runner fires them), and times that crossed 0 got other timings."""
    def build(source):
        return windowed(source, time="ts", key="user").fixed("10 seconds").watermark("0 seconds").aggregate(Sum("amount"))

    source, sink, checkpoint = where()
    before = pd.DataFrame({"user": ["a"], "ts": pd.Series([pd.Timestamp("1969-12-31 23:58:25")]).astype("datetime64[us]"),
                           "amount": [1]})
    query = start(spark, source, sink, checkpoint, build)
    try:
        write_batch(source, 0, before)
        with pytest.raises(Exception, match=r"time column 'ts' holds 1969-12-31 23:58:25, before 1970-01-01 .*Spark's "
                                            r"watermark starts at 0 and never goes below it"):
            query.processAllAvailable()
    finally:
        query.stop()


@pytest.mark.parametrize("in_store", [False, True])
def test_a_stream_whose_sum_passes_64_bits_is_refused_saying_what_to_cast_to(spark, where, tmp_path, in_store):
    """The refusal said to convert the column with pandas' dtypes (float64, Python ints of dtype object), which a
    Spark column has none of."""
    def build(source):
        w = windowed(source, time="ts", key="user").fixed("10 seconds").watermark("0 seconds")
        return (w.window_state(KVStore(str(tmp_path / "kv"))) if in_store else w).aggregate(Sum("amount"))

    source, sink, checkpoint = where()
    big = pd.DataFrame({"user": ["a", "a"], "ts": pd.Series([pd.Timestamp("2024-01-01 00:00:01")] * 2).astype(
        "datetime64[us]"), "amount": [2**62, 2**62]})
    query = start(spark, source, sink, checkpoint, build)
    try:
        write_batch(source, 0, big)
        with pytest.raises(Exception, match=r"aggregate\(value=Sum\('amount'\)\): in a window of column "
                                            r"'amount', a sum is beyond the range of int64; cast the column to double "
                                            r"\(approximate\) or to decimal\(38,0\) \(exact\) before windowed\(\)"):
            query.processAllAvailable()
    finally:
        query.stop()


def test_early_firings_and_retractions_reach_the_final_values(spark, where):
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    try:
        source, sink, checkpoint = where()

        def build(s):
            # Early firings by count: a processing-time period would make EARLY panes depend on the
            # wall-clock gaps between micro-batches (the simulator covers processing time exactly).
            return (windowed(s, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")
                    .trigger(AtWatermark().with_early_firings_every(1).with_late_firings_every(1))
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


def _restarts_with_each(spark, where, build, setting: str, values: tuple[str, str, str], parts=None,
                        restarts: tuple[int, int] = (2, 4)) -> None:
    """The query stopped twice (before part ``restarts[0]`` and part ``restarts[1]`` of ``parts``) and restarted
    from its checkpoint, ``setting`` set to each of ``values`` in turn, emits exactly the panes of the query run
    through with the setting unset."""
    if parts is None:
        parts = [events(ROWS[i:i + 3]) for i in range(0, len(ROWS), 3)] + [events([("z", 300, 0)])]
    source, sink, checkpoint = where()
    _feed(start(spark, source, sink, checkpoint, build), source, parts)
    uninterrupted = read_sink(spark, sink)
    assert len(uninterrupted) > 0

    source, sink, checkpoint = where()
    try:
        for (first, last), value in zip(((0, restarts[0]), restarts, (restarts[1], len(parts))), values):
            spark.conf.set(setting, value)
            _feed(start(spark, source, sink, checkpoint, build), source, parts[first:last], first)
    finally:
        spark.conf.unset(setting)
    assert_same_panes(read_sink(spark, sink), uninterrupted)


def test_a_checkpoint_restarts_with_packing_switched_off_or_on(spark, where):
    """Session windows are packed before the shuffle; ``windowing.spark.combine=false`` ships rows one
    by one, as versions before packing did. A checkpoint of either restarts as the other: the stateful
    operator and its state are the same, only its input rows differ."""
    from windowing.runners.spark import COMBINE_CONF

    def build(s):
        return windowed(s, time="ts", key="user").sessions("5 seconds").watermark("5 seconds") \
            .aggregate(total=Sum("amount"), n=Count())

    _restarts_with_each(spark, where, build, COMBINE_CONF, ("false", "true", "false"))


@pytest.mark.parametrize("shape", ["sessions", "fixed, lifted"])
def test_a_checkpoint_of_one_bucket_restarts_with_packing_switched_off_or_on(spark, where, shape):
    """One bucket (an unkeyed query): unpacked its key ``_b`` was a literal, not null, packed a nullable column, and
    pyspark 3.5 refused the restart that made it nullable (``StateSchemaNotCompatible``). It is not null in every
    shape now (`wire.bucket_field`)."""
    from windowing.runners.spark import COMBINE_CONF

    def build(s):
        pipeline = windowed(s, time="ts")
        pipeline = pipeline.sessions("5 seconds") if shape == "sessions" else pipeline.fixed("10 seconds")
        return pipeline.watermark("5 seconds").aggregate(total=Sum("amount"), n=Count())

    _restarts_with_each(spark, where, build, COMBINE_CONF, ("false", "true", "false"))


def test_a_checkpoint_of_lifted_counts_restarts_with_lifting_switched_off_or_on(spark, where):
    """Lifted, a ``Count`` of fixed windows accumulates partial counts as a ``Sum``, under another column of the
    window table and another pipeline in the state row: a checkpoint of either restarts as the other
    (`worker.SwitchedLayout`), each window's count carried across both restarts."""
    from windowing.runners.spark import COMBINE_CONF

    def build(s):
        return windowed(s, time="ts", key="user").fixed("10 seconds").watermark("5 seconds") \
            .aggregate(total=Sum("amount"), n=Count(), filled=Count("amount"))

    _restarts_with_each(spark, where, build, COMBINE_CONF, ("false", "true", "false"))
    _restarts_with_each(spark, where, build, COMBINE_CONF, ("true", "false", "true"))


def test_a_checkpoint_of_aggregate_with_counts_restarts_as_run(spark, where):
    """``aggregate()`` lifts a ``Count``, ``run()`` never does (it judges every input row): a query restarted as
    ``run()`` from ``aggregate()``'s checkpoint, to get the late data from then on, carries each open window's
    count on; the panes of both are those of ``aggregate()`` run through."""
    def pipeline(s):
        return windowed(s, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")

    aggs = {"total": Sum("amount"), "n": Count()}
    parts = [events([("a", 1, 5), ("a", 3, 1), ("b", 4, 2)]), events([("a", 6, 2), ("b", 8, 1), ("c", 9, 4)]),
             events([("a", 12, 1)]), events([("z", 300, 0)])]  # [0, 10) is open across the restart
    source, sink, checkpoint = where()
    _feed(start(spark, source, sink, checkpoint, lambda s: pipeline(s).aggregate(**aggs)), source, parts)
    uninterrupted = read_sink(spark, sink)
    assert {("a", 8, 3), ("b", 3, 2), ("c", 4, 1)} <= set(zip(uninterrupted["user"], uninterrupted["total"], uninterrupted["n"]))

    source, sink, checkpoint = where()
    _feed(start(spark, source, sink, checkpoint, lambda s: pipeline(s).aggregate(**aggs)), source, parts[:2])
    as_run = sink.parent / "run"
    _feed(start_run(spark, source, as_run, checkpoint, lambda s: pipeline(s).run(**aggs)), source, parts[2:], 2)
    assert read_sink(spark, as_run / "late").empty
    both = [panes for panes in (read_sink(spark, sink), read_sink(spark, as_run / "panes")) if len(panes)]
    assert_same_panes(pd.concat(both, ignore_index=True), uninterrupted)  # pandas 2 warns at concatenating an empty frame


@pytest.mark.parametrize("shape", ["fixed", "sessions"])
def test_a_checkpoint_of_integer_keys_restarts_with_packing_switched_off_or_on(spark, where, shape):
    """With packing or lifting a worker computes an integer key's bucket before the shuffle, without it the
    JVM does (`combine.with_buckets`): a checkpoint of either restarts as the other only if both put every
    key in the same bucket. Each key's window is open across both restarts: a key put in another bucket
    would leave its first elements in the old bucket's state, and its window would fire twice, split."""
    from pyspark.sql import functions as F

    from windowing.runners.spark import COMBINE_CONF

    def build(s):
        pipeline = windowed(s.withColumn("user", F.col("user").cast("long")), time="ts", key="user")
        pipeline = pipeline.fixed("10 seconds") if shape == "fixed" else pipeline.sessions("5 seconds")
        return pipeline.watermark("5 seconds").aggregate(total=Sum("amount"), top=Max("amount"))

    users = [str(k * 7_919_000_003 - 150_000_000_000) for k in range(40)]
    parts = [events([(user, second, k + second) for k, user in enumerate(users)]) for second in (1, 2, 3)]
    _restarts_with_each(spark, where, build, COMBINE_CONF, ("false", "true", "false"),
                        parts + [events([("0", 300, 0)])], restarts=(1, 2))


@pytest.mark.parametrize("shape", ["fixed, lifted", "sessions with late firings, packed"])
def test_on_rocksdb_with_changelog_checkpointing_a_restarted_query_emits_the_uninterrupted_panes(spark, where, shape):
    """docs/databricks.md advises the RocksDB state store with changelog checkpointing: there each bucket's state
    row and timeout are written as changelog entries and read back by replaying them at a restart. Stopped twice
    and restarted from its checkpoint, the query on RocksDB emits exactly the panes of the query run through on
    Spark's default store."""
    provider, changelog = ROCKSDB_CHANGELOG

    def build(s):
        pipeline = windowed(s, time="ts", key="user")
        if shape.startswith("fixed"):
            return pipeline.fixed("10 seconds").watermark("5 seconds").aggregate(total=Sum("amount"), n=Count())
        return (pipeline.sessions("5 seconds").watermark("5 seconds").allowed_lateness("20 seconds")
                .trigger(AtWatermark().with_late_firings_every(1)).accumulating_and_retracting()
                .aggregate(total=Sum("amount"), n=Count()))

    made = []

    def recorded_where():
        made.append(where())
        return made[-1]

    spark.conf.set(changelog, ROCKSDB_CHANGELOG[changelog])
    try:
        _restarts_with_each(spark, recorded_where, build, provider, (ROCKSDB_CHANGELOG[provider],) * 3)
    finally:
        spark.conf.unset(changelog)
    uninterrupted, restarted = (paths[2] / "state" for paths in made)
    assert not list(uninterrupted.rglob("*.changelog")), "the reference ran on the default store"
    assert list(restarted.rglob("*.changelog")), "the restarted query ran on RocksDB with changelog checkpointing"


def test_a_checkpoint_restarts_with_another_state_compression(spark, where):
    """Each of ``windowing.spark.stateCompression``'s codecs writes the buckets' state values, and a restart
    reads whichever the checkpoint holds: the panes are the uninterrupted query's (of the default, zstd)."""
    from windowing.runners.spark import STATE_COMPRESSION_CONF

    def build(s):
        return windowed(s, time="ts", key="user").fixed("10 seconds").watermark("5 seconds").aggregate(Sum("amount"))

    _restarts_with_each(spark, where, build, STATE_COMPRESSION_CONF, ("none", "lz4", "ZSTD"))


def _with_late_data(source):
    # AtWatermark() finishes after its ON_TIME pane: within the lateness an element is dropped as
    # "window closed", beyond it as "beyond allowed lateness".
    return windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds") \
        .allowed_lateness("10 seconds").trigger(AtWatermark()).run(total=Sum("amount"), n=Count())


def test_a_decimal_column_streams_packed_and_sums_to_decimals_as_on_pandas(spark, where):
    """Sessions pack every element before the shuffle, decimals included; Sum and Max come back decimal."""
    source, sink, checkpoint = where()
    parts = [events(ROWS[:5]), events(ROWS[5:9]), events(ROWS[9:])]
    with_cents = [part.assign(amount=[decimal.Decimal(v) / 4 for v in part.amount]) for part in parts]

    def build(frame):
        return windowed(frame, time="ts", key="user").sessions("10 seconds").watermark("5 seconds") \
            .aggregate(total=Sum("amount"), top=Max("amount"))

    cents = (F.col("amount") / 4).cast("decimal(12,2)")
    query = start(spark, source, sink, checkpoint, build, prepare=lambda stream: stream.withColumn("amount", cents))
    inputs = run_all(query, source, parts)
    actual = read_sink(spark, sink)
    assert len(actual) and actual.total.map(type).eq(decimal.Decimal).all() and actual.top.map(type).eq(decimal.Decimal).all()
    assert_same_panes(actual, mirror(with_cents, inputs, build))


def test_an_interval_column_streams_packed_with_late_data_as_on_pandas(spark, where):
    """A day-time interval (pandas' timedelta) column: Sum, Min and Max were refused at planning with a hint
    to state them as 'double', Mean failed in the worker; sessions pack every element, late ones included."""
    source, sink, checkpoint = where()
    parts = [events(ROWS[:6]), events(ROWS[6:] + [("d", -100, 1), ("a", 2, 4)]), events([("z", 200, 0)])]
    as_intervals = [part.assign(amount=pd.to_timedelta(part.amount * 250, unit="ms") - pd.Timedelta("1s")) for part in parts]

    def build(frame):
        return windowed(frame, time="ts", key="user").sessions("10 seconds").watermark("5 seconds") \
            .allowed_lateness("10 seconds").trigger(AtWatermark()).run(total=Sum("amount"), lo=Min("amount"),
                                                                       hi=Max("amount"))

    interval = F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), F.col("amount") / 4 - 1)
    query = start_run(spark, source, sink, checkpoint, build, prepare=lambda stream: stream.withColumn("amount", interval))
    inputs = run_all(query, source, parts)
    panes, late = mirror(as_intervals, inputs, build, late=True)
    actual = read_sink(spark, sink / "panes")
    assert str(actual.total.dtype).startswith("timedelta64") and (actual.lo < pd.Timedelta(0)).any()
    assert_same_panes(actual, panes)
    late_rows = lambda frame: frame[["user", "amount", "reason"]].sort_values(["user", "amount"]).values.tolist()  # noqa: E731
    assert len(late) and late_rows(read_sink(spark, sink / "late")) == late_rows(late)


def test_a_reduce_that_gives_none_keeps_it_in_spark_state_as_on_pandas(spark, where):
    """A None, a null value or ``fn``'s answer, is Reduce's value, across micro-batches in Spark's state too:
    before, it was the empty accumulator and the next micro-batch's values started the reduction again."""
    source, sink, checkpoint = where()
    parts = [events(ROWS[:5]), events(ROWS[5:9]), events(ROWS[9:])]
    parts = [part.assign(amount=pd.Series([None if v in (1, 7) else v for v in part.amount], dtype=object))
             for part in parts]

    def build(frame):
        return windowed(frame, time="ts", key="user").sessions("10 seconds").watermark("5 seconds") \
            .trigger(Repeatedly(AfterCount(1))).accumulating() \
            .aggregate(total=Reduce("amount", lambda a, b: None if a is None or b is None else a + b))

    query = start(spark, source, sink, checkpoint, build)
    inputs = run_all(query, source, parts)
    actual, expected = read_sink(spark, sink), mirror(parts, inputs, build)
    rows = pd.concat(parts)
    for pane in expected.drop_duplicates(["user", "window_start"], keep="last").itertuples():
        inside = rows[(rows.user == pane.user) & (rows.ts >= pane.window_start) & (rows.ts < pane.window_end)].amount
        assert (pane.total if pd.notna(pane.total) else None) == (None if inside.isna().any() else inside.sum())
    assert expected.total.isna().any() and expected.total.notna().any()
    assert_same_panes(actual, expected)


def test_numpy_accumulators_in_spark_state_merge_as_arrays_as_on_pandas(spark, where):
    """Sessions of one micro-batch merged in the next: their accumulators, numpy arrays, came back from Spark's
    state as lists before (the state codec pickled them as plain Python values), and merging added two lists."""
    source, sink, checkpoint = where()
    parts = [events([("a", 1, 5), ("a", 12, 7), ("b", 3, 1)]), events([("a", 8, 3), ("b", 40, 2)])]

    def build(frame):
        mean = Fold("amount", None, lambda a, v: np.array([v, 1.0]) if a is None else a + np.array([v, 1.0]),
                    lambda a, b: b if a is None else a if b is None else a + b, output=lambda a: float(a[0] / a[1]))
        return windowed(frame, time="ts", key="user").sessions("10 seconds").watermark("5 seconds") \
            .trigger(Repeatedly(AfterCount(1))).accumulating().aggregate(mean=mean)

    query = start(spark, source, sink, checkpoint, build)
    inputs = run_all(query, source, parts)
    actual, expected = read_sink(spark, sink), mirror(parts, inputs, build)
    assert 5.0 in expected["mean"].tolist()  # a: (5 + 7 + 3) / 3 once 8 merged [1, 11) and [12, 22)
    assert_same_panes(actual, expected)


def _tally_class():
    """A class defined in a function, made anew at each call: one that pickle cannot find by name."""

    class Tally:
        def __init__(self, total, n):
            self.total, self.n = total, n

    return Tally


def _tally_mean(tally):
    def add(a, v):
        assert isinstance(a, tally), f"{type(a)} is not the running pipeline's class"
        return tally(a.total + v, a.n + 1)

    def merge(a, b):
        assert isinstance(a, tally) and isinstance(b, tally), f"{type(a)}, {type(b)}: not the running pipeline's class"
        return tally(a.total + b.total, a.n + b.n)

    return Fold("amount", tally(0, 0), add, merge, output=lambda a: a.total / a.n)


def _mean_of_tallies(tally, **more):
    def build(frame):
        return windowed(frame, time="ts", key="user").sessions("10 seconds").watermark("5 seconds") \
            .trigger(Repeatedly(AfterCount(1))).accumulating().aggregate(mean=_tally_mean(tally), **more)

    return build


def test_an_accumulator_of_a_class_defined_in_a_function_streams_and_restarts_as_on_pandas(spark, where):
    """A class pickle cannot find by its name (a notebook's or script's ``__main__`` class, rebuilt on the workers, or
    one defined in a function): the query died at its first state write with pickle's "Can't pickle local object"
    (a ``__main__`` one: "attribute lookup ... on __main__ failed"); and pickled by value (a review of a first
    mend), a query restarted with the class defined anew read its state back as the old class, failing the
    pipeline's isinstance checks."""
    parts = [events([("a", 1, 5), ("a", 12, 7), ("b", 3, 1)]), events([("a", 8, 3), ("b", 40, 2)])]
    source, sink, checkpoint = where()
    first = start(spark, source, sink, checkpoint, _mean_of_tallies(_tally_class()))
    inputs = run_all(first, source, parts[:1])
    first.stop()
    restarted = start(spark, source, sink, checkpoint, _mean_of_tallies(_tally_class()))
    try:
        write_batch(source, 1, parts[1])
        restarted.processAllAvailable()
        inputs += batch_inputs(restarted)
    finally:
        restarted.stop()
    expected = mirror(parts, inputs, _mean_of_tallies(_tally_class()))
    assert 5.0 in expected["mean"].tolist()  # a: (5 + 7 + 3) / 3 once 8 merged [1, 11) and [12, 22)
    assert_same_panes(read_sink(spark, sink), expected)


def test_two_classes_of_one_name_stream_apart_as_on_pandas(spark, where):
    """Two factory-made classes share their qualified name: a first version read one aggregation's cells back as
    the other's class."""
    parts = [events([("a", 1, 5), ("a", 12, 7), ("b", 3, 1)]), events([("a", 8, 3), ("b", 40, 2)])]
    build = _mean_of_tallies(_tally_class(), again=_tally_mean(_tally_class()))
    source, sink, checkpoint = where()
    query = start(spark, source, sink, checkpoint, build)
    inputs = run_all(query, source, parts)
    expected = mirror(parts, inputs, build)
    assert expected["mean"].tolist() == expected["again"].tolist() and 5.0 in expected["mean"].tolist()
    assert_same_panes(read_sink(spark, sink), expected)


def test_late_data_on_spark_equals_the_pandas_runners_late_data(spark, where):
    source, sink, checkpoint = where()
    # ("d", -100, 1) is far behind: beyond window size plus lateness, Spark's own watermark would drop it.
    parts = [events(ROWS[:6]), events(ROWS[6:] + [("d", -100, 1)]), events([("z", 200, 0)])]
    inputs = run_all(start_run(spark, source, sink, checkpoint, _with_late_data), source, parts)
    panes, late = mirror(parts, inputs, _with_late_data, late=True)
    assert set(late["reason"]) == {"window closed (trigger finished)", "beyond allowed lateness"}
    assert_same_panes(read_sink(spark, sink / "panes"), panes)
    assert_same_late_data(read_sink(spark, sink / "late"), late)


def test_aggregate_returns_the_api_columns_and_run_adds_the_late_data_views(spark, where):
    source, _, _ = where()
    source.mkdir(parents=True)
    stream = spark.readStream.schema("user string, ts timestamp, amount long").parquet(str(source))
    w = windowed(stream, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")
    api = ["user", "window_start", "window_end", "value", "timing", "pane_index", "is_retraction"]
    assert w.aggregate(Sum("amount")).columns == api
    run = w.run(Sum("amount"))
    assert run.panes.columns == api
    assert run.output.columns == api + ["kind", "reason", "element"]
    assert run.late_data.columns == ["user", "ts", "amount", "window_start", "window_end", "reason"]
    assert dict(run.late_data.dtypes)["ts"] == "timestamp" and dict(run.late_data.dtypes)["window_start"] == "timestamp"


def test_the_global_window_streams_and_spark_drops_no_row_behind_its_watermark(spark, where):
    source, sink, checkpoint = where()

    def build(s):
        return (windowed(s, time="ts", key="user").global_window().watermark("5 seconds")
                .trigger(Repeatedly(AfterCount(2))).accumulating().aggregate(total=Sum("amount"), n=Count()))

    # The second file's rows are a day behind the watermark: the global window still takes them.
    parts = [events(ROWS[:6]), events([("a", -86_400, 100), ("b", -86_400, 10), ("a", 90, 1)]), events(ROWS[6:])]
    with parquet_takes_ancient_timestamps(spark):
        inputs = run_all(start(spark, source, sink, checkpoint, build), source, parts)
    expected = mirror(parts, inputs, build)
    actual = read_sink(spark, sink)
    assert 5 + 7 + 3 + 100 + 1 in set(actual.loc[actual["user"] == "a", "total"])  # the day-old row is counted
    assert_same_panes(actual, expected)


def test_a_killed_streaming_process_restarts_from_its_checkpoint_with_the_uninterrupted_output(spark, where, tmp_path):
    """SIGKILL to the whole process group (Python driver, JVM, workers) mid-batch, then a new process."""
    from .killed_query import kill_at_batch, restart, uninterrupted, write_files

    parts = [events(ROWS[i:i + 4]) for i in range(0, len(ROWS), 4)]
    parts += [events([("b", 2, 9), ("c", 13, 4), ("a", 47, 1)]), events([("z", 300, 0)])]

    panes, late = uninterrupted(spark, *where()[:3], parts)

    source, sink, checkpoint = where()
    write_files(source, parts)
    spec = {"source": str(source), "sink": str(sink), "checkpoint": str(checkpoint)}
    kill_at_batch(spec, 2, tmp_path / "reached")
    assert (sink / "panes" / "batch=2").exists() and not (sink / "late" / "batch=2").exists()  # killed mid-batch

    restart(spec)
    assert_same_panes(read_sink(spark, sink / "panes"), panes)
    assert_same_late_data(read_sink(spark, sink / "late"), late)


def test_the_watermark_can_come_from_with_watermark_on_the_input(spark, where):
    source, sink, checkpoint = where()
    parts = [events(ROWS[:6]), events(ROWS[6:])]

    def spark_build(s):
        return windowed(s, time="ts", key="user").fixed("10 seconds").aggregate(total=Sum("amount"), n=Count())

    query = start(spark, source, sink, checkpoint, spark_build, lambda s: s.withWatermark("ts", "5 seconds"))
    inputs = run_all(query, source, parts)
    expected = mirror(parts, inputs, _on_time)  # the pandas runner with .watermark("5 seconds")
    assert len(expected) > 0
    assert_same_panes(read_sink(spark, sink), expected)


@pytest.mark.parametrize("watermark", ["withWatermark", "builder"])
def test_rows_are_dropped_exactly_when_their_window_end_plus_lateness_is_at_or_behind_the_watermark(spark, where, watermark):
    # withWatermark on the input: Spark dropped every row at or behind its watermark, window open or not,
    # and allowed_lateness was refused.
    source, sink, checkpoint = where()
    parts = [events([("a", 1, 5), ("a", 18, 1)]),  # watermark 13 s
             events([("a", 9, 100)]),  # behind the watermark, [0 s, 10 s) + 10 s lateness is not: a LATE pane
             events([("a", 35, 1)]),  # watermark 30 s
             events([("a", 19, 50), ("b", 20, 7)]),  # [10 s, 20 s) + 10 s is at it: dropped; [20 s, 30 s) + 10 s is not
             events([("z", 100, 0)])]

    def pipeline(s):
        return windowed(s, time="ts", key="user").fixed("10 seconds").allowed_lateness("10 seconds")

    def with_builder_watermark(s):
        return pipeline(s).watermark("5 seconds").aggregate(total=Sum("amount"))

    if watermark == "builder":
        query = start(spark, source, sink, checkpoint, with_builder_watermark)
    else:
        query = start(spark, source, sink, checkpoint, lambda s: pipeline(s).aggregate(total=Sum("amount")),
                      lambda s: s.withWatermark("ts", "5 seconds"))
    expected = mirror(parts, run_all(query, source, parts), with_builder_watermark)
    actual = read_sink(spark, sink)
    assert 100 in set(actual["total"]) and 50 not in set(actual["total"]) and 7 in set(actual["total"])
    assert_same_panes(actual, expected)


def test_a_numeric_time_column_streams_with_durations_as_numbers(spark, where):
    # Refused before: a streaming query needed a timestamp time column for Spark's watermark.
    from pyspark.sql import functions as F

    source, sink, checkpoint = where()
    parts = [events([("a", 1, 5), ("a", 18, 1)]), events([("a", 9, 100)]), events([("a", 35, 1)]),
             events([("a", 19, 50), ("b", 20, 7)]), events([("z", 100, 0)])]

    def build(s):
        return (windowed(s, time="t", key="user").fixed(10).allowed_lateness(10).watermark(5)
                .trigger(AtWatermark().with_late_firings_every(1)).accumulating_and_retracting()
                .aggregate(total=Sum("amount")))

    query = start(spark, source, sink, checkpoint, build,
                  lambda s: s.select("user", F.unix_seconds("ts").alias("t"), "amount"))
    inputs = run_all(query, source, parts)
    seconds = [p.assign(t=p["ts"].astype("int64") // 10**6).drop(columns="ts") for p in parts]
    expected = mirror(seconds, inputs, build)
    actual = read_sink(spark, sink)
    assert actual["window_start"].dtype == "int64" and 105 in set(actual["total"]) and 51 not in set(actual["total"])
    assert_same_panes(actual, expected)


def test_a_trigger_that_ran_no_batch_is_no_step_of_the_mirror(spark, where):
    # Spark reports a trigger that found no file (at once, then every noDataProgressEventInterval) as progress
    # with no rows under the id of the batch to come. Taken for a micro-batch it put an empty step first, with
    # the test's columns rather than the query's input's (CI on dd886b7: "time='t' is not a column").
    from pyspark.sql import functions as F

    from tests.sparks import wait_for

    source, sink, checkpoint = where()
    parts = [events([("a", 1, 5), ("a", 18, 1)]), events([("a", 35, 1)])]

    def build(s):
        return windowed(s, time="t", key="user").fixed(10).watermark(5).aggregate(total=Sum("amount"))

    query = start(spark, source, sink, checkpoint, build,
                  lambda s: s.select("user", F.unix_seconds("ts").alias("t"), "amount"))
    wait_for(lambda: query.recentProgress, "the progress of the trigger that found no file")
    inputs = run_all(query, source, parts)
    assert query.recentProgress[0]["numInputRows"] == 0 and inputs[0] == 2 and sum(inputs) == 3
    seconds = [p.assign(t=p["ts"].astype("int64") // 10**6).drop(columns="ts") for p in parts]
    assert_same_panes(read_sink(spark, sink), mirror(seconds, inputs, build))


def test_a_streamed_numeric_time_beyond_the_watermarks_milliseconds_fails_naming_the_column(spark, where):
    from pyspark.sql import functions as F

    source, sink, checkpoint = where()
    query = start(spark, source, sink, checkpoint,
                  lambda s: windowed(s, time="t", key="user").fixed(10).watermark(5).aggregate(total=Sum("amount")),
                  lambda s: s.select("user", (F.unix_micros("ts") * 1000).alias("t"), "amount"))  # nanoseconds
    with pytest.raises(Exception, match=r"time column 't' holds 1704067201000000000, outside .*taken as milliseconds"):
        _feed(query, source, [events([("a", 1, 5)])])
    assert not list(sink.rglob("*.parquet"))


def test_fire_only_updated_panes_streams_not_keyed_as_on_the_pandas_runner(spark, where):
    source, sink, checkpoint = where()
    parts = [events([("a", 1, 5), ("b", 3, 1)]), events([("a", 12, 7)]), events([("b", 4, 2), ("a", 30, 1)]),
             events([("a", 8, 10)]), events([("z", 100, 0)])]  # a 8 s is late: the watermark is at 25 s

    def build(s):
        return (windowed(s, time="ts").fixed("10 seconds").watermark("5 seconds").allowed_lateness("30 seconds")
                .trigger(AtWatermark().with_early_firings_every(1).with_late_firings_every(1))
                .accumulating().fire_only_updated_panes().aggregate(total=Sum("amount")))

    inputs = run_all(start(spark, source, sink, checkpoint, build), source, parts)
    actual, expected = read_sink(spark, sink), mirror(parts, inputs, build)
    # Every window's ON_TIME pane is unchanged since its last EARLY one, so none fires; the late element's pane does.
    assert "ON_TIME" not in set(actual["timing"]) and list(actual.loc[actual["timing"] == "LATE", "total"]) == [18]
    assert_same_panes(actual, expected)


def test_with_watermark_on_the_input_refuses_a_second_watermark(spark, where):

    source, _, _ = where()
    source.mkdir(parents=True)
    stream = spark.readStream.schema("user string, ts timestamp, amount long").parquet(str(source)).withWatermark("ts", "5 seconds")
    with pytest.raises(WindowingConfigError,
                       match=r"watermark\(delay='5 seconds'\) on an input that already has withWatermark on 'ts'"):
        windowed(stream, time="ts", key="user").fixed("10 seconds").watermark("5 seconds").aggregate(Sum("amount"))


def test_with_watermark_on_the_input_is_refused_with_a_numeric_time_column(spark, where):
    # Its watermark is in milliseconds since the epoch; the column's units (here seconds) would be held against it.
    from pyspark.sql import functions as F


    source, _, _ = where()
    source.mkdir(parents=True)
    stream = (spark.readStream.schema("user string, ts timestamp, amount long").parquet(str(source))
              .withWatermark("ts", "5 seconds").withColumn("t", F.unix_seconds("ts")))
    with pytest.raises(WindowingConfigError, match=r"withWatermark on 'ts' with the numeric time column 't': .*"
                                                   r"call \.watermark\(delay\) on the builder"):
        windowed(stream, time="t", key="user").fixed(10).aggregate(Sum("amount"))


def test_a_stream_without_a_watermark_is_refused(spark, where):

    source, _, _ = where()
    source.mkdir(parents=True)
    stream = spark.readStream.schema("user string, ts timestamp, amount long").parquet(str(source))
    with pytest.raises(WindowingConfigError, match=r"streaming windowed\(time='ts'\) has no watermark: call \.watermark\(delay\)"):
        windowed(stream, time="ts", key="user").fixed("10 seconds").aggregate(Sum("amount"))


@pytest.mark.parametrize("trigger", [None, Default()])
def test_a_streaming_global_window_with_the_default_trigger_is_refused_as_beam_refuses_it(spark, where, trigger):
    # It never fired (a stream's watermark never reaches the end of time) and its state grew for the query's life;
    # Beam's GroupByKey refuses it. An explicit AtWatermark() is left to the user, as in Beam.
    source, _, _ = where()
    source.mkdir(parents=True)
    stream = spark.readStream.schema("user string, ts timestamp, amount long").parquet(str(source))
    w = windowed(stream, time="ts", key="user").global_window().watermark("5 seconds")
    w = w if trigger is None else w.trigger(trigger)
    with pytest.raises(WindowingConfigError, match=r"a streaming \.global_window\(\) with the default trigger never fires"):
        w.aggregate(Sum("amount"))
    windowed(stream, time="ts", key="user").global_window().watermark("5 seconds").trigger(
        Repeatedly(AfterCount(2))).aggregate(Sum("amount"))  # a trigger that fires: taken


def test_the_stateful_workers_exempt_lasting_objects_from_the_garbage_collector(spark, where):
    """``applyInPandasWithState``'s function starts with ``gc.freeze()`` too (docs/spark_benchmark_history.md)."""
    source, sink, checkpoint = where()
    build = lambda stream: windowed(stream, time="ts", key="user").fixed("10 seconds").watermark("5 seconds") \
        .aggregate(frozen=frozen_when_output())
    _feed(start(spark, source, sink, checkpoint, build), source, [events(ROWS[:6]), events(ROWS[6:])])
    frozen = read_sink(spark, sink)["frozen"].tolist()
    assert frozen and all(frozen)


@pytest.mark.parametrize("late_data", [False, True], ids=["aggregate", "run"])
def test_a_missing_event_time_fails_the_micro_batch_naming_the_column(spark, where, late_data):
    # aggregate() emitted it in a 1970 window; run().output failed in the JVM reading the null.
    source, sink, checkpoint = where()
    pipeline = lambda s: windowed(s, time="ts", key="user").fixed("10 seconds").watermark("1 second")
    if late_data:
        query = start_run(spark, source, sink, checkpoint, lambda s: pipeline(s).run(total=Sum("amount")))
    else:
        query = start(spark, source, sink, checkpoint, lambda s: pipeline(s).aggregate(total=Sum("amount")))
    part = events([("a", 1, 5), ("a", 2, 100)])
    part.loc[1, "ts"] = pd.NaT
    with pytest.raises(Exception, match=r"time column 'ts' has a missing value \(null\); every element needs an event time"):
        _feed(query, source, [part])
    assert not list(sink.rglob("*.parquet"))


BIG = 2**53  # float64 holds 2**53 but not 2**53 + 1


def _bigints(stream):
    """Users a, b, d as bigint keys 2**53, 2**53 + 1, 2**53 + 2 (any other: null); amount as 2**53 + amount
    (a negative one: null)."""
    from pyspark.sql import functions as F

    key = F.lit(None).cast("long")
    for user, k in (("a", BIG), ("b", BIG + 1), ("d", BIG + 2)):
        key = F.when(F.col("user") == user, F.lit(k)).otherwise(key)
    return stream.select(key.alias("k"), "ts", F.when(F.col("amount") >= 0, F.lit(BIG) + F.col("amount")).alias("v"))


def _panes_of_a_stream(spark, paths, pipeline, aggs: dict, parts: list[pd.DataFrame], late_data: bool):
    """The panes of ``pipeline(stream).aggregate(**aggs)`` (or ``.run``, its panes, with ``late_data``) over ``parts``."""
    source, sink, checkpoint = paths
    if late_data:
        query = start_run(spark, source, sink, checkpoint, lambda s: pipeline(s).run(**aggs))
    else:
        query = start(spark, source, sink, checkpoint, lambda s: pipeline(s).aggregate(**aggs))
    _feed(query, source, parts)
    return spark.read.parquet(str(sink / "panes" if late_data else sink))


@pytest.mark.parametrize("late_data, combine", [(False, "true"), (False, "false"), (True, "true")],
                         ids=["aggregate-lifted", "aggregate-rows", "run-packed"])
def test_bigint_keys_and_values_beside_nulls_stream_exactly(spark, where, late_data, combine):
    # A micro-batch's bigint column holding a null reached the workers as float64: keys 2**53 and 2**53 + 1
    # became one key, and values beyond 2**53 were rounded.
    source, sink, checkpoint = where()
    aggs = dict(total=Sum("v"), lo=Min("v"), hi=Max("v"), n=Count("v"))
    pipeline = lambda s: windowed(_bigints(s), time="ts", key="k").fixed("10 seconds").watermark("5 seconds")
    parts = [events([("a", 1, 1), ("a", 2, 2), ("b", 3, 3), ("c", 4, 5), ("b", 5, -1), ("c", 6, -1), ("d", 7, -1)]),
             events([("z", 60, 0)]), events([("b", -100, 7)])]  # z moves the watermark to 55 s; b's last row is late
    spark.conf.set("windowing.spark.combine", combine)
    spark.conf.set("windowing.spark.buckets", "1")  # every key in one bucket, beside the nulls
    try:
        panes = _panes_of_a_stream(spark, (source, sink, checkpoint), pipeline, aggs, parts, late_data)
    finally:
        spark.conf.unset("windowing.spark.combine")
        spark.conf.unset("windowing.spark.buckets")
    assert sorted(tuple(r) for r in panes.select("k", *aggs).fillna(-1).collect()) == [
        (-1, BIG + 5, BIG + 5, BIG + 5, 1),  # the null key (nulls as -1)
        (BIG, 2 * BIG + 3, BIG + 1, BIG + 2, 2),
        (BIG + 1, BIG + 3, BIG + 3, BIG + 3, 1),
        (BIG + 2, 0, -1, -1, 0)]  # only nulls: an empty Min and Max
    if late_data:
        late = spark.read.parquet(str(sink / "late")).select("k", "v", "reason").collect()
        assert [tuple(r) for r in late] == [(BIG + 1, BIG + 7, "beyond allowed lateness")]



def _instants(stream, beyond_nanoseconds: bool = True):
    """ROWS with a timestamp key (one per user: summer 2040, 3000 or 2200, the year 100 or 1700, 2020) and a timestamp
    value (null where the amount is odd); built from microseconds, which no session time zone reads."""
    micros = lambda *when: (dt.datetime(*when) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)  # noqa: E731
    far, ancient = ((3000, 7, 1, 12), (100, 1, 1)) if beyond_nanoseconds else ((2200, 7, 1, 12), (1700, 1, 1))
    key = F.lit(micros(2020, 6, 1, 12))
    for user, when in (("a", (2040, 7, 1, 12)), ("b", far), ("c", ancient)):
        key = F.when(F.col("user") == user, F.lit(micros(*when))).otherwise(key)
    years = 100 if beyond_nanoseconds else 10
    value = F.when(F.col("amount") % 2 == 0, F.timestamp_seconds(F.col("amount") * 86_400 * 365 * years))
    return stream.select(F.timestamp_micros(key).alias("k"), "ts", value.alias("v"))


def _stream_instants(spark, where, late_data: bool, combine: str, zone: str, beyond_nanoseconds: bool, aggs=None):
    """The stream's panes of `_instants` and the same batch query's, run in UTC."""
    source, sink, checkpoint = where()
    aggs = aggs or dict(lo=Min("v"), hi=Max("v"), n=Count("v"))
    prepare = lambda s: _instants(s, beyond_nanoseconds)  # noqa: E731
    pipeline = lambda s: windowed(prepare(s), time="ts", key="k").fixed("10 seconds").watermark("5 seconds")  # noqa: E731
    parts = [events(ROWS), events([("z", 200, 1)])]  # z moves the watermark to 195 s
    expected = windowed(prepare(spark.createDataFrame(events(ROWS))), time="ts", key="k").fixed("10 seconds").aggregate(**aggs)
    spark.conf.set("windowing.spark.combine", combine)
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        with parquet_takes_ancient_timestamps(spark):  # the year 100
            panes = _panes_of_a_stream(spark, (source, sink, checkpoint), pipeline, aggs, parts, late_data)
    finally:
        spark.conf.unset("windowing.spark.combine")
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    columns = ["k", "window_start", *aggs]
    return sorted(tuple(r) for r in panes.select(*columns).collect()), sorted(tuple(r) for r in expected.select(*columns).collect())


STREAM_SHAPES = pytest.mark.parametrize("late_data, combine", [(False, "true"), (False, "false"), (True, "true")],
                                        ids=["aggregate-packed", "aggregate-rows", "run-packed"])


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles"])
@STREAM_SHAPES
def test_timestamp_keys_and_values_of_any_year_stream_exactly_in_any_session_zone(spark, where, late_data, combine, zone):
    """Off UTC they came back shifted by the zone's offset on pyspark 4 (7 hours in a Los Angeles summer): pyspark's
    stateful step wrote the workers' wall times back as UTC, where the same batch query is right; on pyspark 3.5 so
    beyond 1677 to 2262. They now leave the workers as microseconds (docs/spark.md, "Output types")."""
    got, wanted = _stream_instants(spark, where, late_data, combine, zone, beyond_nanoseconds=True)
    assert got == wanted
    assert {k.year for k, *_ in wanted} == {100, 2020, 2040, 3000} and max(hi.year for *_, hi, n in wanted if n) > 2262


def _repeated_hour(stream):
    """`events` with a key per user and a value per amount: 'a' and 1 at 08:30 UTC of 2024-11-03, 'b' and 2 an hour
    later, both 01:30 in Los Angeles; null for the rest. Made from microseconds, which no session time zone reads."""
    def instant(column: str, first: Any, second: Any) -> Any:
        micros = F.when(F.col(column) == first, 1_730_622_600_000_000).when(F.col(column) == second, 1_730_626_200_000_000)
        return F.timestamp_micros(micros)

    return stream.select(instant("user", "a", "b").alias("k"), "ts", instant("amount", 1, 2).alias("v"))


@pytest.mark.parametrize("late_data, combine, counts", [(False, "true", True), (False, "true", False),
                                                        (False, "false", False), (True, "true", False)],
                         ids=["aggregate-lifted", "aggregate-packed", "aggregate-rows", "run-packed"])
def test_two_instants_of_the_hour_the_clocks_go_back_stream_as_two_keys_and_two_values(spark, where, late_data, combine,
                                                                                       counts):
    """As in a batch query (test_spark_batch.py): the workers held the two as one wall time in Los Angeles, one key
    and one value; as UTC wall times they stay two, with no warning, as the same batch query in UTC gives them."""
    aggs = dict(n=Count("v"), rows=Count()) if counts else dict(lo=Min("v"), hi=Max("v"), all=ToList("v"), n=Count("v"))
    rows = [("a", 1, 1), ("b", 2, 2), ("a", 3, 2), ("b", 4, 1), ("c", 5, 3), ("a", 12, 1), ("b", 13, 3)]
    pipeline = lambda s: windowed(_repeated_hour(s), time="ts", key="k").fixed("10 seconds").watermark("5 seconds")  # noqa: E731
    lists = [F.array_sort(F.transform("all", F.unix_micros)).alias("all")] if not counts else []
    as_micros = lambda panes: sorted((tuple(row) for row in panes.select(  # noqa: E731
        F.unix_micros("k"), "window_start", *[F.unix_micros(c) for c in ("lo", "hi") if c in aggs], *lists, "n").collect()),
        key=repr)
    source, sink, checkpoint = where()
    spark.conf.set("windowing.spark.combine", combine)
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RepeatedWallTimeWarning)
            got = as_micros(_panes_of_a_stream(spark, (source, sink, checkpoint), pipeline, aggs,
                                               [events(rows), events([("z", 60, 0)])], late_data))
    finally:
        spark.conf.unset("windowing.spark.combine")
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    expected = as_micros(pipeline(spark.createDataFrame(events(rows))).aggregate(**aggs))
    assert got == expected
    assert len({k for k, *_ in expected}) == 3 and len(expected) == 5  # 'a', 'b' and the null key; two windows


@pytest.mark.parametrize("server", ["3.5.6", "4.1.0"])
def test_the_nested_timestamp_refusal_follows_the_sessions_spark_not_the_clients_pyspark(server):
    # The workers run the server's pyspark: over Spark Connect the client's may be of another major version, and the
    # refusal read the client's (a 4.x client refused what a 3.5 server streams exactly, a 3.5 client let a 4.x
    # server shift the times).
    from pyspark.sql import types as T

    from windowing.runners.spark.query import _check_stream_timestamps

    schema = T.StructType([T.StructField("all", T.ArrayType(T.TimestampType())), T.StructField("last", T.TimestampType()),
                           T.StructField("by", T.MapType(T.StringType(), T.TimestampType()))])
    if server.startswith("3."):
        _check_stream_timestamps(schema, "America/Los_Angeles", server)
    else:
        with pytest.raises(WindowingConfigError, match=r"'by' of type map<string,timestamp> holds timestamps, which a "
                                                       r"stream on Spark 4.1.0 would give"):
            _check_stream_timestamps(schema, "America/Los_Angeles", server)
    _check_stream_timestamps(schema, "UTC", server)
    _check_stream_timestamps(T.StructType(schema.fields[:2]), "America/Los_Angeles", server)  # handed over zone-aware
    # A type was read by its name: a struct field named timestamp_ms, which holds no time, was refused.
    named = T.StructField("stamp", T.StructType([T.StructField("timestamp_ms", T.LongType())]))
    _check_stream_timestamps(T.StructType([*schema.fields[:2], named]), "America/Los_Angeles", server)


def _wall_clock_values(stream):
    """`events` with a timestamp value per amount: a Los Angeles winter, summer, summer of 2041 (after pytz's last
    rule) and a time of the hour the clocks go back, read as standard time (docs/spark.md, "Output types"), so only
    its second occurrence; null for the rest. Made from microseconds, which no session time zone reads."""
    instants = {1: 1_705_320_000_000_000, 2: 1_719_835_200_000_000, 3: 2_256_282_000_000_000, 4: 1_730_626_200_000_000}
    value = F.lit(None).cast("long")
    for amount, micros in instants.items():
        value = F.when(F.col("amount") == amount, F.lit(micros)).otherwise(value)
    return stream.select("user", "ts", F.timestamp_micros(value).alias("v"))


@pytest.mark.filterwarnings("ignore::windowing.RepeatedWallTimeWarning")  # the repeated hour: not in these rows
@STREAM_SHAPES
def test_lists_of_timestamps_and_a_timestamp_fold_stream_exactly_in_a_zone_with_daylight_saving(spark, where, late_data,
                                                                                              combine):
    """Refused on Spark 4 in a session zone off UTC until this release: pyspark 4's stateful step wrote the naive wall
    times of a list of timestamps (or a timestamp-typed Fold's) back as UTC, 7 or 8 hours off in Los Angeles. The
    workers hand them over zone-aware (`instants.zone_aware`), which pyspark takes as they are: the stream gives the
    same instants as the batch query in UTC, on pyspark 4.3 and 3.5."""
    latest = Fold("v", None, lambda a, v: v if a is None or (v is not None and v > a) else a,
                  lambda a, b: b if a is None or (b is not None and b > a) else a)
    aggs = dict(all=ToList("v"), top=TopN("v", 2), latest=latest)
    rows = [("a", 1, 1), ("a", 2, 3), ("b", 3, 2), ("b", 4, 4), ("c", 5, 5), ("a", 6, 6), ("c", 7, 4)]
    pipeline = lambda s: windowed(_wall_clock_values(s), time="ts", key="user").fixed("10 seconds").watermark("5 seconds")  # noqa: E731
    as_micros = lambda panes: sorted(  # noqa: E731
        (user, sorted(everything), top, last) for user, everything, top, last in panes.select(
            "user", F.transform("all", F.unix_micros), F.transform("top", F.unix_micros), F.unix_micros("latest")).collect())
    source, sink, checkpoint = where()
    spark.conf.set("windowing.spark.combine", combine)
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        got = as_micros(_panes_of_a_stream(spark, (source, sink, checkpoint), pipeline, aggs,
                                           [events(rows), events([("z", 60, 0)])], late_data))
    finally:
        spark.conf.unset("windowing.spark.combine")
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    expected = as_micros(windowed(_wall_clock_values(spark.createDataFrame(events(rows))), time="ts", key="user")
                         .fixed("10 seconds").aggregate(**aggs))
    assert got == expected
    assert [user for user, *_ in expected] == ["a", "b", "c"] and expected[2][1] == [1_730_626_200_000_000]
