"""The Spark adapter without Spark: the batch function and the stateful function, driven by hand.

Differential: the same events through the pandas runner and through the
adapter (split into buckets, micro-batches and Arrow-like chunks) give the
same panes; so do issue 15's random pipelines and every golden transcript.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import accumulations
from accumulations import Count, Fold, Max, Mean, Min, Sum, ToList
from tests.beam.pipelines import elements_frame
from tests.beam.pipelines import pipelines as random_pipelines
from tests.engine.test_golden import SCENARIOS, build_pipeline, expected_rows, global_bounds, instant, load, to_frame
from triggers import AfterAll, AfterCount, AfterEach, AfterProcessingTime, AfterWatermark, AtWatermark, Default, Never, Repeatedly
from windowing import TestStream, windowed
from windowing.errors import WindowingConfigError
from windowing.runners.spark import plan_spark, stacked, uses_processing_time
from windowing.runners.spark.combine import CHECKED_BUCKET
from windowing.windows import FixedWindows, Sessions, SlidingWindows

from .helpers import SimulatedQuery, assert_same_late_data, assert_same_panes, events, shipped, spark_schema, split_output

rows = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 120), st.integers(-5, 50)),
                min_size=0, max_size=40)
WINDOWS = {
    "fixed": lambda w: w.fixed("10 seconds"),
    "sliding": lambda w: w.sliding("20 seconds", every="10 seconds"),
    "uneven sliding": lambda w: w.sliding("10 seconds", every="4 seconds"),  # lifted in units of 2 s
    "sessions": lambda w: w.sessions("15 seconds"),
    "global": lambda w: w.global_window(),
}
AGGS = dict(total=Sum("amount"), n=Count(), top=Max("amount"), mean=Mean("amount"), all=ToList("amount"))


def _batch_via_adapter(pipeline, frame: pd.DataFrame, buckets: int, aggs=AGGS) -> pd.DataFrame:
    plan = plan_spark(pipeline.strategy(**aggs), spark_schema(frame), buckets)
    data = shipped(frame, plan).drop(columns="_wm_ms")
    parts = [plan.adapter.run_batch(part) for _, part in data.groupby("_b")] or [plan.adapter.run_batch(data)]
    return stacked([part for part in parts if len(part)] or parts[:1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows, kind=st.sampled_from(sorted(WINDOWS)), buckets=st.integers(1, 5))
def test_batch_function_matches_the_pandas_runner(rows, kind, buckets):
    frame = events(rows)
    expected = WINDOWS[kind](windowed(frame, time="ts", key="user")).aggregate(**AGGS)
    actual = _batch_via_adapter(WINDOWS[kind](windowed(frame, time="ts", key="user")), frame, buckets)
    assert_same_panes(actual, expected)


LIFTABLE = dict(total=Sum("amount"), n=Count(), top=Max("amount"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows, kind=st.sampled_from(["fixed", "sliding", "uneven sliding"]), buckets=st.integers(1, 3))
def test_lifted_batch_matches_the_pandas_runner(rows, kind, buckets):
    frame = events(rows)
    expected = WINDOWS[kind](windowed(frame, time="ts", key="user")).aggregate(**LIFTABLE)
    actual = _batch_via_adapter(WINDOWS[kind](windowed(frame, time="ts", key="user")), frame, buckets, LIFTABLE)
    assert_same_panes(actual, expected)


def test_lifting_folds_rows_only_where_it_is_exact():

    frame = events([("a", 1, 5), ("a", 2, 7), ("a", 3, 1), ("b", 3, 1), ("a", 14, 2)])
    w = windowed(frame, time="ts", key="user").fixed("10 seconds")
    plan = plan_spark(w.strategy(**LIFTABLE), spark_schema(frame), 1)
    assert plan.lifting is not None
    lifted = plan.adapter.elements([shipped(frame, plan, partition_rows=10).drop(columns="_wm_ms")])
    assert len(lifted) == 3  # (a, [0,10)), (b, [0,10)), (a, [10,20))
    assert plan_spark(w.strategy(**LIFTABLE), spark_schema(frame), 1, combine=False).lifting is None
    assert plan_spark(w.strategy(**AGGS), spark_schema(frame), 1).lifting is None  # Mean, ToList
    assert plan_spark(w.strategy(first=Min("ts")), spark_schema(frame), 1).lifting is None  # of timestamps
    assert plan_spark(w.trigger(Repeatedly(AfterCount(2))).strategy(**LIFTABLE), spark_schema(frame), 1).lifting is None
    assert plan_spark(windowed(frame, time="ts", key="user").sessions("5 seconds").strategy(**LIFTABLE),
                      spark_schema(frame), 1).lifting is None


@pytest.mark.parametrize("trigger, lifted", [
    (AtWatermark(), True),
    (AtWatermark().with_early_firings_every("10 seconds").with_late_firings_every("5 seconds"), True),
    (AfterWatermark(early=AfterProcessingTime("5 seconds")), True),
    (Repeatedly(AfterProcessingTime("5 seconds")), True),
    (AfterEach(AfterProcessingTime("5 seconds"), Never()), True),
    (Default(), True),
    (AtWatermark().with_early_firings_every(2), False),
    (AtWatermark().with_late_firings_every(2), False),
    (AfterWatermark(late=AfterCount(2)), False),
    (AfterAll(AfterCount(2), AfterProcessingTime("5 seconds")), False),
    (AfterEach(AfterProcessingTime("5 seconds"), AfterCount(2)), False),
    (Repeatedly(AfterAll(AfterCount(3), AfterProcessingTime("1 second"))), False),
], ids=repr)
def test_lifting_is_off_when_any_part_of_the_trigger_counts_elements(trigger, lifted):
    """A count anywhere in the tree (late firings, after a processing-time part) would see one
    element per folded row instead of the step's elements."""
    frame = events([("a", 1, 5)])
    w = windowed(frame, time="ts", key="user").fixed("10 seconds").trigger(trigger)
    assert (plan_spark(w.strategy(**LIFTABLE), spark_schema(frame), 1).lifting is not None) is lifted


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows, buckets=st.integers(1, 4), partition_rows=st.integers(1, 7))
def test_packing_hands_every_row_to_its_bucket_once(rows, buckets, partition_rows):
    frame = events(rows)
    w = windowed(frame, time="ts", key="user").sessions("15 seconds")
    plain = plan_spark(w.strategy(**AGGS), spark_schema(frame), buckets, combine=False)
    plan = plan_spark(w.strategy(**AGGS), spark_schema(frame), buckets)
    assert plan.adapter.packed and not plain.adapter.packed
    packed, unpacked = shipped(frame, plan, partition_rows), shipped(frame, plain)
    partitions = -(-len(frame) // partition_rows)
    assert len(packed) <= partitions * buckets  # a row per bucket and input partition
    assert (packed["_b"] == CHECKED_BUCKET).sum() == partitions  # with or without rows, in every partition
    as_rows = lambda elements: sorted(map(tuple, elements.astype(str).to_numpy().tolist()))
    for b in range(buckets):
        mine = packed[packed["_b"] == b]
        assert all(t == max(ts) for t, ts in zip(mine.get("_tmax", []), mine["_t"]) if len(ts))
        if "_tmax" in packed and b == CHECKED_BUCKET:  # an empty row has another row's latest time: no watermark moves
            empty, full = packed["_t"].map(len) == 0, packed["_t"].map(len) > 0
            assert set(packed.loc[empty, "_tmax"]) <= set(packed.loc[full, "_tmax"])
        assert as_rows(plan.adapter.elements([mine])) == as_rows(plain.adapter.elements([unpacked[unpacked["_b"] == b]]))


def test_batch_function_fires_every_window_at_end_of_input():
    frame = events([("a", 1, 5), ("a", 12, 7), ("b", 3, 1)])
    out = _batch_via_adapter(windowed(frame, time="ts", key="user").fixed("10 seconds"), frame, 2)
    assert sorted(zip(out["user"], out["total"], out["timing"])) == [("a", 5, "ON_TIME"), ("a", 7, "ON_TIME"), ("b", 1, "ON_TIME")]


# ---- streaming: the stateful function inside a simulated micro-batch loop ---------------------

TRIGGERS = {
    "on_time": lambda w: w,
    "default_late": lambda w: w.allowed_lateness("20 seconds"),
    "late_counts": lambda w: w.allowed_lateness("30 seconds").trigger(AtWatermark().with_late_firings_every(1)).accumulating(),
    "early_periodic_retracting": lambda w: w.allowed_lateness("20 seconds").trigger(
        AtWatermark().with_early_firings_every("10 seconds").with_late_firings_every(1)).accumulating_and_retracting(),
}


def _differential(batches, kind, trigger, buckets, chunks, pt_steps, late=False):
    """Simulated query output and the pandas runner's panes; with ``late`` also its late data."""
    delay = 5
    frame = events([r for b in batches for r in b])
    build = lambda source: TRIGGERS[trigger](WINDOWS[kind](windowed(source, time="ts", key="user"))).watermark(f"{delay} seconds")
    # Lifted (pre-aggregated) where exact: fixed and sliding windows with these aggregations and triggers.
    aggs = LIFTABLE if trigger in ("on_time", "default_late") else dict(total=Sum("amount"), n=Count(), all=ToList("amount"))
    plan = plan_spark(build(frame).strategy(**aggs), spark_schema(frame), buckets, late_data=late)
    query = SimulatedQuery(plan, delay * 1000, chunk_sizes=chunks)
    stream, pt_ms = TestStream(), 0
    for batch, pt_s in zip(batches, pt_steps):
        part = events(batch)
        pt_ms += pt_s * 1000
        stream = stream.advance_processing_time(f"{pt_s} seconds")
        query.batch(None, pt_ms)
        stream = stream.add_elements(part)
        query.batch(part, pt_ms)
        if plan.timeout == "EventTimeTimeout":  # Spark runs a no-data batch when the watermark moved
            stream = stream.add_elements(events([]))
            query.batch(None, pt_ms)
    run = build(stream).run(**aggs)
    expected = run.panes
    expected = expected[expected["step"] < expected["step"].max()] if len(expected) else expected
    if len(expected) and expected["step"].max() >= len(stream.actions):
        expected = expected[expected["step"] < len(stream.actions)]
    if late:
        return query, query.result(), expected, run.late_data
    return query, query.result(), expected


batches_st = st.lists(rows.map(lambda r: r[:12]), min_size=1, max_size=5)


@pytest.mark.parametrize("kind", ["fixed", "sessions"])
def test_a_missing_key_streams_like_any_other_key(kind):
    # Its windows are saved in the bucket's state between micro-batches (an Arrow null there).
    batches = [[("a", 1, 5), (None, 2, 7)], [(None, 3, 1), ("a", 14, 2), (None, 40, 4)]]
    _, actual, expected = _differential(batches, kind, "late_counts", 1, [2], [1] * 5)  # one bucket: a and None share a table
    assert expected["user"].isna().any()
    assert_same_panes(*(panes.assign(user=panes["user"].fillna("<missing>")) for panes in (actual, expected)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches_st, kind=st.sampled_from(sorted(WINDOWS)), trigger=st.sampled_from(sorted(TRIGGERS)),
       buckets=st.integers(1, 4), chunks=st.lists(st.integers(1, 7), min_size=1, max_size=3),
       pt_steps=st.lists(st.integers(1, 15), min_size=5, max_size=5))
def test_stateful_function_matches_the_pandas_runner_step_for_step(batches, kind, trigger, buckets, chunks, pt_steps):
    _, actual, expected = _differential(batches, kind, trigger, buckets, chunks, pt_steps)
    assert_same_panes(actual, expected)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches_st, kind=st.sampled_from(sorted(WINDOWS)), trigger=st.sampled_from(sorted(TRIGGERS)),
       buckets=st.integers(1, 4), chunks=st.lists(st.integers(1, 7), min_size=1, max_size=3),
       pt_steps=st.lists(st.integers(1, 15), min_size=5, max_size=5))
def test_late_output_matches_the_pandas_runners_late_data(batches, kind, trigger, buckets, chunks, pt_steps):
    # Panes against the pandas runner: test_stateful_function_matches_the_pandas_runner_step_for_step.
    _, output, _, expected_late = _differential(batches, kind, trigger, buckets, chunks, pt_steps, late=True)
    assert_same_late_data(split_output(output)[1], expected_late)


def test_late_output_reports_both_reasons_and_rows_far_behind_the_watermark():

    frame = events([("a", 1, 5)])
    w = windowed(frame, time="ts", key="user").fixed("10 seconds").watermark("5 seconds").allowed_lateness("20 seconds")
    plan = plan_spark(w.trigger(AfterCount(1)).strategy(total=Sum("amount")), spark_schema(frame), 2, late_data=True)
    assert plan.lifting is None and plan.out_schema.names[-3:] == ["kind", "reason", "element"]
    query = SimulatedQuery(plan, 5000)
    query.batch(events([("a", 1, 5), ("b", 20, 1)]), 0)  # AfterCount(1) fires and finishes a's window
    # The watermark is 15 s. a: its window is closed; c: 115 s behind, beyond window size plus
    # lateness, so Spark's watermark would drop it before the function without run()'s shift.
    query.batch(events([("a", 2, 7), ("c", -100, 9)]), 0)
    panes, late = split_output(query.result())
    assert sorted(panes["total"]) == [1, 5]
    assert sorted(zip(late["user"], late["amount"], late["reason"])) == [
        ("a", 7, "window closed (trigger finished)"), ("c", 9, "beyond allowed lateness")]


def test_late_output_refuses_an_aggregation_named_like_its_columns():
    frame = events([("a", 1, 5)])
    with pytest.raises(WindowingConfigError, match=r"output column 'reason' clashes with run\(\)'s late-data columns"):
        plan_spark(windowed(frame, time="ts", key="user").fixed("10 seconds").strategy(reason=Sum("amount")),
                   spark_schema(frame), 1, late_data=True)


def test_windows_fire_through_timeouts_without_new_data():
    batches = [[("a", 1, 5)], [("b", 30, 1)]]
    query, actual, _ = _differential(batches, "fixed", "on_time", 4, [2], [1, 1, 1, 1, 1])
    # a's window [0, 10) fires when b's data moves the watermark to 25 s; a gets no row in that batch.
    fired = actual[actual["user"] == "a"]
    assert list(fired["total"]) == [5] and list(fired["timing"]) == ["ON_TIME"]
    assert query.states, "b's window is still open"


def test_keys_without_open_windows_leave_the_state_and_an_empty_bucket_is_removed():
    """Bucket 1 (keys a and z) is removed once empty; the checked bucket keeps its empty table (combine.CHECKED_BUCKET)."""
    from windowing.state_codec import decode

    batches = [[("a", 1, 5)], [("a", 100, 1)]]
    query, actual, _ = _differential(batches, "fixed", "on_time", 2, [3], [1, 1, 1, 1, 1])
    assert list(actual["total"]) == [5]
    query.batch(events([("z", 1000, 0)]), 10_000)
    query.batch(None, 10_000)  # the watermark passes a's last window: it fires and is purged
    assert list(query.result()["total"]) == [5, 1]
    assert set(decode(query.states[1][0])[0]["_k0"]) == {"z"}
    query.watermark_ms = 2_000_000_000_000  # far past z's window too
    query.batch(None, 10_000)
    assert list(query.states) == [CHECKED_BUCKET] and len(decode(query.states[CHECKED_BUCKET][0])[0]) == 0


def test_periodic_early_firings_use_processing_time_timeouts():
    frame = events([("a", 1, 1)])
    w = windowed(frame, time="ts", key="user").fixed("10 seconds")
    assert plan_spark(w.strategy(v=Sum("amount")), spark_schema(frame), 2).timeout == "EventTimeTimeout"
    early = w.trigger(AtWatermark().with_early_firings_every("10 seconds"))
    assert plan_spark(early.strategy(v=Sum("amount")), spark_schema(frame), 2).timeout == "ProcessingTimeTimeout"
    assert uses_processing_time(plan_spark(early.strategy(v=Sum("amount")), spark_schema(frame), 2).adapter.plan.spec)


# ---- configuration errors ----------------------------------------------------------------------

def test_an_output_type_that_cannot_be_derived_names_the_aggregation_and_the_way_out():
    from windowing.runners.spark import spark_typed

    frame = events([("a", 1, 1)])
    fold = Fold("amount", 0, lambda a, v: a + v, lambda a, b: a + b)
    by_value = Fold("amount", {}, lambda a, v: {**a, v: 1}, lambda a, b: {**a, **b})  # a dict: no clear Spark type
    w = windowed(frame, time="ts", key="user").fixed("10 seconds")
    with pytest.raises(WindowingConfigError, match=r"aggregate\(s=Fold.*cannot derive the Spark type.*spark_typed"):
        plan_spark(w.strategy(s=by_value), spark_schema(frame), 2)
    typed = plan_spark(w.strategy(s=spark_typed(fold, "bigint")), spark_schema(frame), 2)
    assert typed.out_schema["s"].dataType.simpleString() == "bigint"
    out = typed.adapter.run_batch(shipped(frame, typed).drop(columns="_wm_ms"))
    assert list(out["s"]) == [1]


def test_the_type_an_underivable_output_of_decimals_is_told_to_state_keeps_a_sums_exact():
    from pyspark.sql import types as T

    class Squares(Sum):  # folds otherwise: Sum's decimal output type is dropped
        def accumulate(self, accumulated, value):
            return accumulated + value * value

    schema = T.StructType([T.StructField("ts", T.LongType()), T.StructField("amount", T.DecimalType(10, 2))])
    w = windowed(None, time="ts").fixed(10)
    for acc in (Squares("amount"), Fold("amount", 0, lambda a, v: a + v, lambda a, b: a + b)):
        # It told to state 'double', which rounds decimals.
        with pytest.raises(WindowingConfigError, match=r"spark_typed\(.*'decimal\(38,2\)'\) \(exact for an output of "
                                                       r"the input's scale, .*grows needs more digits, or 'double'\)"):
            plan_spark(w.strategy(s=acc), schema, 1)


def test_spark_typed_refuses_a_non_type():
    from windowing.runners.spark import spark_typed

    with pytest.raises(WindowingConfigError, match=r"spark_typed\(spark_type=3\)"):
        spark_typed(Sum("amount"), 3)


def test_a_string_time_column_is_refused_with_its_type():
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("ts", T.StringType()), T.StructField("amount", T.LongType())])
    with pytest.raises(WindowingConfigError, match=r"time column 'ts' has Spark type string"):
        plan_spark(windowed(None, time="ts").fixed(10).strategy(v=Sum("amount")), schema, 1)


@pytest.mark.parametrize("spark_type", ["timestamp_ntz", "date"])
def test_a_time_column_of_wall_times_or_dates_is_refused_pointing_to_the_cast(spark_type):
    from pyspark.sql import types as T

    time_type = {"timestamp_ntz": T.TimestampNTZType(), "date": T.DateType()}[spark_type]
    schema = T.StructType([T.StructField("ts", time_type), T.StructField("amount", T.LongType())])
    with pytest.raises(WindowingConfigError, match=rf"time column 'ts' has Spark type {spark_type}; it must be a timestamp or an "
                                                   r"integer; cast it first, withColumn\('ts', col\('ts'\).cast\('timestamp'\)\)"):
        plan_spark(windowed(None, time="ts").fixed(10).strategy(v=Sum("amount")), schema, 1)


def test_a_packed_row_without_nulls_ships_no_null_flags():
    """Null flags cross the shuffle only in packed rows that hold a null; unpacking restores them."""
    from windowing.runners.spark.combine import pack
    from windowing.runners.spark.worker import _unpacked

    batch = pa.RecordBatch.from_pydict({
        "_b": pa.array([0, 0, 1, 1], pa.int32()), "_k0": [5, 0, 7, 8], "_k0_null": [False, True, False, False],
        "_t": [1, 2, 3, 4]})
    packed = next(pack(iter([batch])))
    assert packed.column("_k0_null").to_pylist() == [[False, True], None]  # bucket 1 has no null
    elements = _unpacked([packed.to_pandas()], ["_k0", "_t"], ["_k0_null"])
    assert elements["_k0_null"].tolist() == [False, True, False, False]
    assert elements["_k0"].tolist() == [5, 0, 7, 8]


# ---- the same transcripts through micro-batches ------------------------------------------------

NO_DELAY = 10**15
"""A watermark delay no event time reaches: the scripts below move the watermark themselves."""


def _transcript(output: pd.DataFrame, keys: list[str], value: str = "value") -> dict[int, list[tuple]]:
    """Panes of the simulator (or the pandas runner) by step, as sorted plain tuples."""
    if len(output) == 0:
        return {}
    panes = output[output["kind"] == "PANE"] if "kind" in output else output
    columns = keys + ["window_start", "window_end", value, "timing", "pane_index", "is_retraction"]
    out: dict[int, list[tuple]] = {}
    for step, group in panes.groupby("step"):
        rows = [tuple(v.item() if hasattr(v, "item") else v for v in row) for row in group[columns].itertuples(index=False)]
        out[int(step)] = sorted(rows, key=repr)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipeline=st.booleans().flatmap(lambda pt: random_pipelines(processing_time=pt)), buckets=st.integers(1, 4),
       chunks=st.lists(st.integers(1, 7), min_size=1, max_size=3), late=st.booleans())
def test_random_pipelines_stream_through_micro_batches_as_on_the_pandas_runner(pipeline, buckets, chunks, late):
    """issue 15's random pipelines (tests/beam/pipelines.py): each TestStream action is a micro-batch
    (a data-less one after a watermark or processing-time move), the engine is called only for the
    buckets with data or a due timeout, and the panes of every step, and the dropped elements, are
    the pandas runner's. Not where a window ends at 1 (ms): Spark's timeouts are positive, so it
    fires once the watermark passes 1 ms (docs/spark.md, "Watermark, timeouts, and firing latency")."""
    assume(not _a_window_ends_at_the_first_millisecond(pipeline))
    everything = elements_frame([e for kind, arg in pipeline.actions if kind == "add" for e in arg])
    plan = plan_spark(pipeline.windowed(None).strategy(value=Sum("v")), spark_schema(everything), buckets, late_data=late)
    query = SimulatedQuery(plan, NO_DELAY, chunk_sizes=chunks, instant=True)
    output = query.play([(kind, elements_frame(arg) if kind == "add" else arg) for kind, arg in pipeline.actions])
    expected = pipeline.run()
    in_stream = expected.panes[expected.panes["step"] < len(pipeline.actions)]  # a stream has no end of input
    assert _transcript(output, ["k"]) == _transcript(in_stream, ["k"]), pipeline
    if late:
        dropped = [] if len(output) == 0 else [
            (int(step), *(json.loads(e)[c] for c in ("k", "t", "v")), int(start), int(end), reason)
            for step, e, start, end, reason in output[output["kind"] == "LATE"][
                ["step", "element", "window_start", "window_end", "reason"]].itertuples(index=False)]
        late_rows = expected.late_data
        want = [] if len(late_rows) == 0 else [
            tuple(v.item() if hasattr(v, "item") else v for v in row)
            for row in late_rows[late_rows["step"] < len(pipeline.actions)][
                ["step", "k", "t", "v", "window_start", "window_end", "reason"]].itertuples(index=False)]
        assert sorted(dropped) == sorted(want), pipeline


def _a_window_ends_at_the_first_millisecond(pipeline) -> bool:
    times = np.array([e[1] for kind, arg in pipeline.actions if kind == "add" for e in arg], dtype=np.int64)
    kind, *sizes = pipeline.windows
    if kind == "global":  # it ends at the end of time
        return False
    windows = {"fixed": FixedWindows, "sliding": SlidingWindows, "sessions": Sessions}[kind](*sizes)
    return bool((windows.assign(times)[2] == 1).any())  # a session's first element's window, before merging


def _ms(sc: dict, value) -> int:
    """A transcript's watermark as Spark's milliseconds: a numeric time is taken as milliseconds."""
    if sc.get("tz") or sc.get("timestamps"):
        at = instant(sc, value)
        return int((at.tz_convert("UTC").tz_localize(None) if at.tzinfo else at).value // 10**6)
    return int(value)


def _micros(sc: dict, value):
    if sc.get("tz") or sc.get("timestamps"):
        return _ms(sc, value) * 1000
    return value


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_golden_scenario_streams_through_micro_batches_with_its_transcript(path):
    """Every golden transcript (tests/engine/scenarios), the same on Spark's micro-batches as on the
    pandas runner, as Beam runs its transcripts through every runner. A stream has no end of input:
    the transcript runs up to its first ``watermark: infinity``, the panes of its steps compared."""
    sc = load(path)
    actions = []
    for action in sc["actions"]:
        (kind, arg), = action.items()
        if kind == "watermark" and arg == "infinity":
            break
        if kind == "add":
            actions.append(("add", to_frame(sc, arg)))
        elif kind == "watermark":
            actions.append(("watermark", _ms(sc, arg)))
        else:
            by = pd.Timedelta(arg) if isinstance(arg, str) else arg
            actions.append(("processing_time", int(by / pd.Timedelta("1ms")) if isinstance(by, pd.Timedelta) else int(by)))
    everything = pd.concat([arg for kind, arg in actions if kind == "add"], ignore_index=True)
    aggregate = eval(sc["aggregate"], vars(accumulations))
    plan = plan_spark(build_pipeline(sc).strategy(value=aggregate), spark_schema(everything), 2)
    output = SimulatedQuery(plan, NO_DELAY, chunk_sizes=[2], instant=True).play(actions)
    keys = [sc["key"]] if isinstance(sc.get("key"), str) else list(sc.get("key") or [])
    expected = [global_bounds(r) for r in expected_rows(sc)]
    expected = pd.DataFrame([r for r in expected if r[0] < len(actions)],
                            columns=["step", *keys, "window_start", "window_end", "value", "timing", "pane_index",
                                     "is_retraction"])
    for bound in ("window_start", "window_end"):
        expected[bound] = [_micros(sc, v) for v in expected[bound]]
    assert _transcript(output, keys) == _transcript(expected, keys)


def test_timestamps_pyspark_converts_are_handed_over_aware_and_a_folds_aware_ones_kept():
    # Naive wall times are made aware with the workers' rules (the hour the clocks go back in standard time); a
    # Fold's own aware timestamps are kept as they are (localizing them failed: "cannot supply both a tz and ...").
    import datetime as dt

    from windowing.runners.spark.instants import zone_aware

    own = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    back = pd.Timestamp("2024-11-03 01:30")  # 01:30 PDT and PST: standard time, 09:30 UTC
    cells = pd.Series([[back, own, None], None, []], dtype=object)
    lists = zone_aware(cells, "America/Los_Angeles", made_by_pyspark=False, lists=True)
    assert [None if cell is None else [None if v is None else pd.Timestamp(v).tz_convert("UTC") for v in cell]
            for cell in lists] == [[pd.Timestamp("2024-11-03 09:30", tz="UTC"), pd.Timestamp(own), None], None, []]
    assert list(zone_aware(pd.Series([own, pd.NaT], dtype=object), "UTC", made_by_pyspark=True, lists=False)) == [own, None]
