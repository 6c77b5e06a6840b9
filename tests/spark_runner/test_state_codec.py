"""The versioned state encoding: round trips, and stored samples of every version still decode and resume."""

from __future__ import annotations

import importlib.util
from collections import Counter, defaultdict, namedtuple
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accumulations import Count, Max, Min, Sum, ToList
from triggers import NO_TIME, AfterCount, AfterWatermark, AtWatermark, OrFinally
from windowing import columns, state_codec, windowed
from windowing.engine import next_timers, step
from windowing.errors import WindowingConfigError
from windowing.runners.spark import NUMBERS, PARTITIONS, Bucketing, plan_spark
from windowing.runners.spark.pipelines import EXACT_INSTANTS
from windowing.runners.spark.wire import WIRE
from windowing.state_codec import COMPRESSIONS, MAGIC, checked_compression, decode, encode
from windowing.timeaxis import MAX_TIME
from windowing.window_table import current_layout

from .helpers import EPOCH_2024_S, events, shipped, spark_schema

SAMPLES = Path(__file__).parent / "data"
T0 = 1_704_067_200 * 10**9  # 2024-01-01 in ns


def _plan(frame, buckets=4, state_compression="zstd"):
    w = (windowed(frame, time="ts", key="user").fixed("10 seconds")
         .trigger(AtWatermark().with_early_firings_every("10 seconds")).accumulating_and_retracting())
    return plan_spark(w.strategy(total=Sum("amount"), all=ToList("amount")), spark_schema(frame), buckets,
                      state_compression=state_compression)


def _assert_tables_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        assert list(a[c]) == list(b[c]), c


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", "é"]), st.integers(0, 60), st.integers(-9, 9)), max_size=20),
       watermark_s=st.integers(0, 70))
def test_decode_of_encode_is_the_table(rows, watermark_s):
    frame = events(rows)
    adapter = _plan(frame).adapter
    elements = adapter.elements([shipped(frame, _plan(frame)).drop(columns="_wm_ms")])
    table = step(adapter.plan.spec, adapter.fresh_state(), elements, T0 + watermark_s * 10**9, 0).state
    decoded, meta = decode(encode(table, 4))
    assert meta["buckets"] == 4
    _assert_tables_equal(decoded, table)


def test_a_large_table_is_stored_compressed_as_the_plan_says_and_decodes():
    """Spark pickles, copies and checkpoints the state value every micro-batch, at a cost per byte: by
    default a table of 20,000 keys' windows (over 100 bytes a window as plain Arrow) takes a fraction of
    that; ``windowing.spark.stateCompression`` picks the codec (`plan_spark`'s ``state_compression``)."""
    rng = np.random.default_rng(3)
    frame = events([(f"user{i % 20_000}", int(s), int(a)) for i, s, a in
                    zip(range(40_000), rng.integers(0, 9, 40_000), rng.integers(1, 100, 40_000))])
    adapter = _plan(frame).adapter
    elements = adapter.elements([shipped(frame, _plan(frame), partition_rows=40_000).drop(columns="_wm_ms")])
    table = step(adapter.plan.spec, adapter.fresh_state(), elements, T0, 0).state
    assert len(table) == 20_000 and len(encode(table, 4)) < 20 * len(table)
    sizes = {}
    for compression in COMPRESSIONS:
        saving = _plan(frame, state_compression=compression).adapter
        blob = saving.save(table)
        sizes[compression] = len(blob)
        _assert_tables_equal(saving.load(blob), table)
    assert sizes["zstd"] < sizes["lz4"] < sizes["none"] / 3, sizes


@pytest.mark.parametrize("rows, on_the_pool", [(31, False), (20_000, True)])
def test_a_table_has_the_same_bytes_and_decodes_alike_on_arrows_thread_pool_or_off_it(monkeypatch, rows, on_the_pool):
    """A small table is compressed and decompressed off Arrow's thread pool, a large one on it (`THREADED_ROWS`,
    `THREADED_BYTES`: the pool's hand-over costs more than a small table's codec work); neither the bytes nor
    the table read back may depend on which."""
    rng = np.random.default_rng(5)
    table = pd.DataFrame({"_k0": rng.integers(0, 2**40, rows), "start": rng.integers(0, 2**60, rows),
                          "n_pending": rng.integers(0, 9, rows), "closed": rng.integers(0, 2, rows).astype(bool)})
    threads = []

    def recorded(options):
        class Recorded(options):  # a subclass: pyarrow checks the type it is handed
            def __init__(self, **kwargs):
                threads.append(kwargs["use_threads"])
                super().__init__(**kwargs)
        return Recorded

    monkeypatch.setattr(pa.ipc, "IpcWriteOptions", recorded(pa.ipc.IpcWriteOptions))
    monkeypatch.setattr(pa.ipc, "IpcReadOptions", recorded(pa.ipc.IpcReadOptions))
    blob = encode(table, 4)
    _assert_tables_equal(decode(blob)[0], table)
    assert threads == [on_the_pool, on_the_pool]
    monkeypatch.setattr(state_codec, "THREADED_ROWS", 0 if not on_the_pool else rows + 1)
    monkeypatch.setattr(state_codec, "THREADED_BYTES", 0 if not on_the_pool else len(blob))
    assert encode(table, 4) == blob
    _assert_tables_equal(decode(blob)[0], table)
    assert threads[2:] == [not on_the_pool, not on_the_pool]


@pytest.mark.parametrize("given, message", [
    ("snappy", r"SETTING='snappy' must be one of 'zstd', 'lz4', 'none' \(how a bucket's state value is compressed\)"),
    ("", r"SETTING='' must be one of")])
def test_a_state_compression_that_is_not_offered_is_refused_naming_the_setting(given, message):
    with pytest.raises(WindowingConfigError, match=message):
        checked_compression(given, "SETTING")
    assert checked_compression(" LZ4 ", "SETTING") == "lz4"


def test_a_codec_this_pyarrow_lacks_is_refused_naming_the_setting_and_the_others(monkeypatch):
    monkeypatch.setattr("windowing.state_codec._codec_available", lambda name: name != "zstd")
    with pytest.raises(WindowingConfigError, match=r"SETTING='zstd': this pyarrow was built without zstd; "
                                                   r"set SETTING to another of 'zstd', 'lz4', 'none'"):
        checked_compression("zstd", "SETTING")
    assert checked_compression("lz4", "SETTING") == "lz4"


def named(spec, panes: pd.DataFrame) -> pd.DataFrame:
    """The engine's panes with each aggregation's output under its name, as the runners give them."""
    return panes.rename(columns={columns.output(i): agg.name for i, agg in enumerate(spec.aggregations)})


def test_a_table_with_a_missing_key_round_trips_and_its_windows_fire_after_decoding():
    """A null key in a streaming job: the engine's table holds it as NaN in a str column (pandas 3)
    or None in an object column; either is saved as an Arrow null and comes back missing."""
    frame = events([("a", 1, 5), (None, 2, 7), (None, 12, 1)])
    adapter = _plan(frame).adapter
    elements = adapter.elements([shipped(frame, _plan(frame)).drop(columns="_wm_ms")])
    table = step(adapter.plan.spec, adapter.fresh_state(), elements, T0, 0).state
    plain = [k if isinstance(k, str) else None for k in table["_k0"]]
    assert sorted(plain, key=lambda k: k is None) == ["a", None, None]
    for keys in (table["_k0"], pd.Series(plain, dtype=object)):
        decoded, _ = decode(encode(table.assign(_k0=keys), 4))
        assert [k if isinstance(k, str) else None for k in decoded["_k0"]] == plain
        _assert_tables_equal(decoded.drop(columns="_k0"), table.drop(columns="_k0"))
        panes = named(adapter.plan.spec, step(adapter.plan.spec, decoded, adapter.elements([]), MAX_TIME, 0).panes)
        assert sorted((k if isinstance(k, str) else "<missing>", total) for k, total in zip(panes["_k0"], panes["total"])) == [
            ("<missing>", 1), ("<missing>", 7), ("a", 5)]


def test_the_stored_version_1_sample_decodes_and_resumes():
    """A checkpoint written by version 1 must restart on later versions: this sample is never regenerated."""
    blob = (SAMPLES / "state_v1.bin").read_bytes()
    assert blob[:4] == MAGIC
    table, meta = decode(blob)
    assert meta == {"buckets": 4, "objects": ["o0", "a1", "o1"]}
    assert list(table["_k0"]) == ["a", "a", "b"]
    assert list(table["start"] - T0) == [0, 10 * 10**9, 0]
    assert list(table["a0.sum"]) == [7, 7, 1]
    assert [list(v) for v in table["a1"]] == [[5, 2], [7], [1]]
    assert list(table["n_pending"]) == [2, 1, 1]
    assert list(table["t.early_next"]) == [10 * 10**9] * 3

    # The engine of this version resumes from it (its 4 buckets were labelled by number): end of input
    # fires the three windows.
    frame = events([("a", 1, 5)])
    adapter = _plan(frame, Bucketing(4, NUMBERS)).adapter
    assert adapter.load(blob) is not None
    panes = named(adapter.plan.spec, step(adapter.plan.spec, table, adapter.elements([]), MAX_TIME, 0).panes)
    assert sorted(zip(panes["_k0"], panes["total"], [tuple(v) for v in panes["all"]])) == [
        ("a", 7, (5, 2)), ("a", 7, (7,)), ("b", 1, (1,))]


def test_the_stored_version_2_sample_decodes_and_resumes():
    """Version 2 stores all-None and single-type object columns as Arrow values; never regenerated.

    Written after an early firing: ``o0`` holds the emitted totals (Arrow values), ``o1`` the
    emitted lists (pickled).
    """
    blob = (SAMPLES / "state_v2.bin").read_bytes()
    table, meta = decode(blob)
    assert meta == {"buckets": 4, "objects": ["a1", "o1"], "values": ["o0"]}
    assert list(table["_k0"]) == ["a", "a", "b"]
    assert list(table["o0"]) == [7, 7, 1] and table["o0"].dtype == object
    assert [list(v) for v in table["o1"]] == [[5, 2], [7], [1]]
    assert list(table["pane_index"]) == [1, 1, 1]

    # Resumed with accumulating_and_retracting: end of input retracts each early pane, then re-emits it.
    frame = events([("a", 1, 5)])
    adapter = _plan(frame).adapter
    panes = named(adapter.plan.spec, step(adapter.plan.spec, table, adapter.elements([]), MAX_TIME, 0).panes)
    assert sorted(zip(panes["_k0"], panes["total"], panes["is_retraction"])) == [
        ("a", 7, False), ("a", 7, False), ("a", 7, True), ("a", 7, True), ("b", 1, False), ("b", 1, True)]


def _nested_plan(frame):
    w = (windowed(frame, time="ts", key="user").fixed("10 seconds").allowed_lateness("30 seconds")
         .trigger(AfterWatermark(early=AfterCount(2), late=OrFinally(AfterCount(3), until=AfterCount(5)))).accumulating())
    return plan_spark(w.strategy(total=Sum("amount")), spark_schema(frame), Bucketing(4, NUMBERS))  # the samples predate placed buckets


@pytest.mark.parametrize("sample, trigger_columns", [
    ("state_v2_numbered.bin", ["t.late", "t.0.0.count", "t.1.0.0.count", "t.1.0.1.count"]),
    ("state_v3.bin", ["t.late", "t.early.count", "t.late.trigger.count", "t.late.until.count"]),
])
def test_nested_trigger_state_resumes_whether_numbered_by_position_or_named_by_role(sample, trigger_columns):
    """Until issue 15 (04d14e3) nested trigger state was numbered by position; since, it is named by
    role. Both samples are never regenerated; 04d14e3 wrote the first, this code the second, after the
    same steps: [0,10) of a (elements 1, 2, 3 s; EARLY after two) and of b (1 s), the watermark at
    10 s (ON_TIME), then late elements, one for a and two for b. Each late trigger (AfterCount(3)) has
    counted them: one more element for b and two for a make each fire, no more. Each sample is the
    step function's table after those steps (bucket 4 of ``_nested_plan``), saved by that code's
    adapter."""
    blob = (SAMPLES / sample).read_bytes()
    table, meta = decode(blob)
    assert [c for c in table.columns if c.startswith("t.")] == trigger_columns
    assert list(table["_k0"]) == ["b", "a"] and list(table["a0.sum"]) == [601, 114]
    frame = events([("a", 1, 5)])
    plan = _nested_plan(frame)
    loaded = plan.adapter.load(blob)
    late = plan.adapter.elements([shipped(events([("a", 7, 1000), ("b", 9, 3000)]), plan).drop(columns="_wm_ms")])
    once = step(plan.adapter.plan.spec, loaded, late, T0 + 10 * 10**9, 0)
    fired = named(plan.adapter.plan.spec, once.panes)
    assert sorted(zip(fired["_k0"], fired["total"], fired["pane_index"])) == [("b", 3601, 1)]
    again = plan.adapter.elements([shipped(events([("a", 8, 2000)]), plan).drop(columns="_wm_ms")])
    panes = named(plan.adapter.plan.spec, step(plan.adapter.plan.spec, once.state, again, T0 + 10 * 10**9, 0).panes)
    assert sorted(zip(panes["_k0"], panes["total"], panes["pane_index"])) == [("a", 3114, 2)]


def _processing_time_sample():
    spec = importlib.util.spec_from_file_location("processing_time_sample", SAMPLES / "processing_time_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_table_written_before_the_processing_time_timer_column_resumes_with_the_timers_it_held():
    """Until c1a7665 a window table kept an `AfterProcessingTime`'s firing time only (``fire_at``); today
    its timer (``timer``) also outlives a reset, as in Beam Java. The sample (written by c1a7665, never
    regenerated: data/processing_time_sample.py) resumes with the timers it held, the table today's code
    makes from the same steps: a's first delay fired (no timer), its second is due at 8 s, b's at 11 s."""
    sample = _processing_time_sample()
    blob = (SAMPLES / "state_v3_processing_time.bin").read_bytes()
    stored, _ = decode(blob)
    assert [c for c in stored.columns if c.startswith("t.")] == ["t.index", "t.0.fire_at", "t.1.fire_at"]
    adapter = sample.plan().adapter
    spec = adapter.plan.spec
    resumed = current_layout(spec, adapter.load(blob))
    _assert_tables_equal(resumed, current_layout(spec, adapter.load(sample.written())))
    timers = {key: (first, second) for key, first, second in zip(resumed["_k0"], resumed["t.0.timer"], resumed["t.1.timer"])}
    assert timers == {"a": (NO_TIME, 8 * sample.SECOND), "b": (11 * sample.SECOND, NO_TIME)}
    totals = []
    for made_at, now in ((6, 8), (8, 11)):  # the processing time of the step that made the table, the next timer's
        assert next_timers(spec, resumed, made_at * sample.SECOND)[1] == now * sample.SECOND
        result = step(spec, resumed, adapter.elements([]), sample.T0, now * sample.SECOND)
        fired = named(spec, result.panes)
        totals.append(sorted(zip(fired["_k0"], fired["total"])))
        resumed = result.state
    assert totals == [[("a", 2)], [("b", 4)]]


_CELLS = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.text(), st.booleans(),
                   st.lists(st.integers(), max_size=3), st.tuples(st.integers()))


@settings(max_examples=60, deadline=None)
@given(columns=st.lists(st.lists(_CELLS, min_size=3, max_size=3), min_size=1, max_size=4))
def test_object_columns_keep_every_python_value(columns):
    """Whatever an object column holds (None, one type, mixed types, big ints, NaN), it decodes to the same values and types."""
    table = pd.DataFrame({f"o{i}": pd.Series(cells, dtype=object) for i, cells in enumerate(columns)})
    decoded, meta = decode(encode(table, 1))
    assert sorted(meta["objects"] + meta["values"]) == sorted(table.columns)
    for name in table.columns:
        assert decoded[name].dtype == object
        before, after = list(table[name]), list(decoded[name])
        assert [type(v) for v in after] == [type(v) for v in before], name
        assert [repr(v) for v in after] == [repr(v) for v in before], name


Point = namedtuple("Point", "x y")


def test_an_accumulator_of_ones_own_comes_back_as_it_was_numpy_inside_included():
    """What a Fold or an accumulation of one's own holds comes back as it was, as on pandas (where the table
    is never encoded). Before, a cell holding numpy came back as Python values: an array as a list (which a
    fold's ``a + b`` then concatenated), a namedtuple holding numpy as a tuple, a defaultdict as a dict."""
    cells = [Point(1, [2, 3]), Counter({"a": 2}), [np.int64(4), 5], Point(np.int64(6), np.array([7, 8])),
             np.array([1.5, 2.0]), defaultdict(list, {np.int64(1): [np.float64(0.5)]})]
    decoded, meta = decode(encode(pd.DataFrame({"a0": pd.Series(cells, dtype=object)}), 1))
    assert meta["objects"] == ["a0"]
    assert [type(v) for v in decoded["a0"]] == [type(v) for v in cells]
    assert [type(v) for v in decoded["a0"][2]] == [np.int64, int] and type(decoded["a0"][3].x) is np.int64
    assert [repr(v) for v in decoded["a0"]] == [repr(v) for v in cells]
    assert (decoded["a0"][4] + decoded["a0"][4]).tolist() == [3.0, 4.0]


def _table_beside_nulls():
    """An adapter over a nullable bigint key and value, and today's window table of the null key,
    key 2**53 + 2 and key 1, whose Min saw only a null for key 2**53 + 2. Before 58c6201 a bigint
    column holding a null reached the workers as float64 (test_old_checkpoints.py restarts real
    checkpoints of that code)."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("k", T.LongType()), T.StructField("ts", T.TimestampType()),
                           T.StructField("v", T.LongType())])
    w = windowed(None, time="ts", key="k").fixed("10 seconds")
    adapter = plan_spark(w.strategy(lo=Min("v"), total=Sum("v")), schema, 1, combine=False).adapter
    elements = pd.DataFrame({"_k0": pd.Series([None, 2**53 + 2, 1], dtype=object), "_t": [T0, T0, T0],
                             "_v0": pd.Series([5, None, 3], dtype=object), "_v1": pd.Series([5, None, 3], dtype=object)})
    return adapter, step(adapter.plan.spec, adapter.fresh_state(), elements, T0, 0).state


def test_a_float64_key_column_from_before_exact_integers_loads_as_exact_integers():
    """That code could keep a nullable integer key column as float64: new keys beyond 2**53 were
    rounded into it, and their ints beside its floats failed the step."""
    adapter, today = _table_beside_nulls()
    loaded = adapter.load(adapter.save(today.assign(_k0=today["_k0"].astype(float))))
    assert [(type(k), k) for k in loaded["_k0"]] == [(type(None), None), (int, 2**53 + 2), (int, 1)]
    _assert_tables_equal(loaded.drop(columns="_k0"), today.drop(columns="_k0"))


def test_a_min_from_before_exact_integers_that_saw_only_nulls_loads_with_its_start_value():
    """That code stored such a Min as the int64 minimum (+inf cast), which every later value lost to."""
    adapter, today = _table_beside_nulls()
    unseen = today["a0.n"] == 0
    assert list(unseen) == [False, True, False] and today["a0.min"][1] == np.iinfo(np.int64).max
    written = today.assign(**{"a0.min": today["a0.min"].where(~unseen, np.iinfo(np.int64).min)})
    loaded = adapter.load(adapter.save(written))
    _assert_tables_equal(loaded.drop(columns="_k0"), today.drop(columns="_k0"))


def test_a_checkpoint_of_another_bucket_count_is_refused():
    frame = events([("a", 1, 5)])
    adapter = _plan(frame, Bucketing(4, PARTITIONS, "windowing.spark.buckets=4")).adapter
    blob = encode(adapter.fresh_state(), 8, placement=PARTITIONS)
    with pytest.raises(WindowingConfigError, match=r"this query groups keys into 4 buckets \(windowing.spark.buckets=4\), but "
                                                   r"its checkpoint was written with 8 buckets: keys would land in other "
                                                   r"buckets. To restart from this checkpoint set windowing.spark.buckets=8 \("):
        adapter.load(blob)


def test_a_checkpoint_of_buckets_labelled_by_number_restarts_only_with_that_placement():
    """Checkpoints written before buckets were placed on partitions store no placement: bucket i was label i."""
    frame = events([("a", 1, 5)])
    blob = encode(_plan(frame).adapter.fresh_state(), 4)
    with pytest.raises(WindowingConfigError, match=r"written with 4 buckets placed by numbers: .* set windowing.spark.buckets=4 "
                                                   r"and windowing.spark.bucketPlacement=numbers"):
        _plan(frame, 4).adapter.load(blob)
    # The other way round the advice left the placement out, and repeated itself once followed.
    by_partitions = encode(_plan(frame).adapter.fresh_state(), 4, placement=PARTITIONS)
    with pytest.raises(WindowingConfigError, match=r"written with 4 buckets placed by partitions: .* set windowing.spark.buckets=4 "
                                                   r"and windowing.spark.bucketPlacement=partitions"):
        _plan(frame, Bucketing(4, NUMBERS)).adapter.load(by_partitions)
    assert len(_plan(frame, Bucketing(4, NUMBERS)).adapter.load(blob)) == 0
    assert len(_plan(frame, 1).adapter.load(encode(_plan(frame).adapter.fresh_state(), 1))) == 0  # one bucket: label 0 either way


FIXED = lambda w: w.fixed("10 seconds")  # noqa: E731 - the window the checkpoint was written with


@pytest.mark.parametrize("window, change, message", [
    (FIXED, lambda w: w, None),
    (lambda w: w.sessions("10 seconds"), lambda w: w,
     r"windows FixedWindows\(size=10000000000.*then, Sessions\(gap=10000000000\) now"),
    (FIXED, lambda w: w.trigger(AtWatermark()), r"trigger AtWatermark\(.*early.* then, AtWatermark\(\) now"),
    (FIXED, lambda w: w.discarding(), r"mode accumulating_and_retracting then, discarding now"),
])
def test_a_checkpoint_of_another_pipeline_is_refused_naming_what_changed(window, change, message):
    frame = events([("a", 1, 5)])
    adapter = _plan(frame).adapter
    elements = adapter.elements([shipped(frame, _plan(frame)).drop(columns="_wm_ms")])
    table = step(adapter.plan.spec, adapter.fresh_state(), elements, T0, 0).state
    blob = adapter.save(table)
    base = (window(windowed(frame, time="ts", key="user"))
            .trigger(AtWatermark().with_early_firings_every("10 seconds")).accumulating_and_retracting())
    other = plan_spark(change(base).strategy(total=Sum("amount"), all=ToList("amount")), spark_schema(frame), 4)
    if message is None:
        _assert_tables_equal(other.adapter.load(blob), table)
        return
    with pytest.raises(WindowingConfigError, match=r"the checkpoint's state was written by another pipeline \(" + message):
        other.adapter.load(blob)


LIFTED, UNLIFTED, RUN = {"combine": True}, {"combine": False}, {"combine": True, "late_data": True}


@pytest.mark.parametrize("written, reading", [(LIFTED, UNLIFTED), (UNLIFTED, LIFTED), (LIFTED, RUN), (RUN, LIFTED)])
def test_a_checkpoint_of_counts_reads_with_lifting_switched(written, reading, tmp_path):
    """Lifted, a ``Count`` is a ``Sum`` of partial counts in another column: ``aggregate()`` lifts unless
    ``windowing.spark.combine=false``, ``run()`` never does. The table written either way reads back with this
    query's columns and the same counts; with ``.window_state(store)``, whose windows keep the written columns,
    the restart is refused naming what wrote them."""
    from storage import KVStore

    frame = events([("a", 1, 5), ("b", 3, 1), ("a", 12, 7)])
    w = windowed(frame, time="ts", key="user").fixed("10 seconds")

    def adapter(how, pipeline=w):
        return plan_spark(pipeline.strategy(total=Sum("amount"), n=Count()), spark_schema(frame), 4, **how).adapter

    writer, reader = adapter(written), adapter(reading)
    elements = pd.DataFrame({WIRE.key(0): ["a", "b", "a"], WIRE.time: T0 + np.array([1, 3, 8]) * 10**9,
                             WIRE.value(0): [5, 1, 7]})
    if written is LIFTED:  # folded rows carry their partial counts
        elements[WIRE.value(1)] = [2, 1, 1]
    table = step(writer.plan.spec, writer.fresh_state(), elements, T0, 0).state
    read = reader.load(writer.save(table))
    assert list(read.columns) == list(reader.fresh_state().columns)
    counts = ["a1.sum", "a1.count"] if written is LIFTED else ["a1.count", "a1.sum"]
    expected = [3, 1] if written is LIFTED else [2, 1]
    assert table[counts[0]].tolist() == read[counts[1]].tolist() == expected
    assert read.drop(columns=counts[1]).equals(table.drop(columns=counts[0]))

    stored = w.window_state(KVStore(str(tmp_path / "store")))
    what = (r"aggregate\(\) with windowing.spark.combine=true, which lifts" if written is LIFTED
            else r"run\(\) or aggregate\(\) with windowing.spark.combine=false, which do not lift")
    with pytest.raises(WindowingConfigError, match=rf"written by {what}, and with .window_state\(store\) its windows keep "
                                                   r"that layout in the store: restart it that way"):
        adapter(reading, stored).load(adapter(written, stored).save(table))


@pytest.mark.parametrize("count", [Count(), Count("amount")])
@pytest.mark.parametrize("then, now", [(None, AtWatermark().with_late_firings_every(1)),
                                       (AtWatermark().with_late_firings_every(1), None)])
def test_a_checkpoint_of_counts_under_another_trigger_is_refused_naming_the_trigger_only(then, now, count):
    """The trigger decides whether a ``Count`` is lifted (kept as a ``Sum`` of partial counts): a restart that changed
    the trigger alone also named an aggregation change, ``n=Sum('_count1') of int64 then, n=Count() of None now``,
    in a column the user never named (a helper's restart probe)."""
    frame = events([("a", 1, 5)])

    def adapter(trigger):
        w = windowed(frame, time="ts", key="user").fixed("10 seconds")
        w = w if trigger is None else w.trigger(trigger)
        return plan_spark(w.strategy(total=Sum("amount"), n=count), spark_schema(frame), 4, combine=True).adapter

    written, reading = adapter(then), adapter(now)
    assert [("_count1" in a.pipeline["aggregations"]) for a in (written, reading)] == [then is None, now is None]  # lifted
    with pytest.raises(WindowingConfigError) as refused:
        reading.load(written.save(written.fresh_state()))
    assert "the checkpoint's state was written by another pipeline (trigger " in str(refused.value)
    assert "aggregations" not in str(refused.value) and "_count" not in str(refused.value)


def test_the_pipeline_description_stays_as_checkpoints_store_it():
    """Checkpoints keep this description; if a repr changes, restarts after an upgrade are refused:
    keep old descriptions accepted before changing this test."""
    from windowing.runners.spark import pipeline_of

    assert pipeline_of(_plan(events([("a", 1, 5)])).adapter.plan.spec) == {
        "windows": "FixedWindows(size=10000000000, offset=0)",
        "trigger": "AtWatermark().with_early_firings_every('10 seconds')",
        "mode": "accumulating_and_retracting",
        "keys": "1",
        "aggregations": "total=Sum('amount') of int64, all=ToList('amount') of int64",
    }


def _keyed(frame, key, session_zone="UTC", buckets=4):
    return plan_spark(_keyed_strategy(frame, key), spark_schema(frame), buckets, session_zone=session_zone).adapter


def _keyed_strategy(frame, key):
    w = windowed(frame, time="ts", key=key).fixed("10 seconds").trigger(AtWatermark().with_early_firings_every("10 seconds"))
    return w.strategy(lo=Min("amount"))


@pytest.mark.parametrize("then, now, message", [
    # Another key column of the same type was taken: the old windows fired with the old keys under the new name.
    ("user", "grp", r"key columns user string then, grp string now"),
    # Another type failed late, in a pane's output column, or in a date parser.
    ("user", "amount", r"key columns user string then, amount bigint now"),
    # The bucket check came first and advised windowing.spark.buckets=4, which a query without keys cannot take.
    ("user", None, r"key columns user string then, none \(not keyed\) now"),
])
def test_a_checkpoint_keyed_by_other_columns_is_refused_naming_them(then, now, message):
    frame = events([("a", 1, 5)]).assign(grp=lambda f: "g" + f["user"])
    blob = _keyed(frame, then).save(_keyed(frame, then).fresh_state())
    with pytest.raises(WindowingConfigError, match=r"written by another pipeline \(.*" + message):
        _keyed(frame, now, buckets=1 if now is None else 4).load(blob)


def test_a_checkpoint_holding_timestamps_restarts_only_in_its_session_time_zone():
    # The state keeps timestamp keys and values as wall times in the session's zone: restarted in another zone they
    # were read shifted by the zones' difference (a key split in two, Min and Max 7 hours off), silently.
    frame = events([("a", 1, 5)]).assign(day=lambda f: f["ts"].dt.floor("D"))
    blob = _keyed(frame, "day", "America/Los_Angeles").save(_keyed(frame, "day", "America/Los_Angeles").fresh_state())
    with pytest.raises(WindowingConfigError, match=r"session time zone America/Los_Angeles then, UTC now"):
        _keyed(frame, "day", "UTC").load(blob)
    assert len(_keyed(frame, "day", "America/Los_Angeles").load(blob)) == 0
    without_timestamps = _keyed(frame, "user", "America/Los_Angeles")
    assert len(_keyed(frame, "user", "UTC").load(without_timestamps.save(without_timestamps.fresh_state()))) == 0


def test_a_checkpoint_restarted_with_fire_only_updated_panes_is_refused_naming_it():
    # The refusal named the missing columns ['o0'] only, which the user never wrote.
    frame = events([("a", 1, 5)])
    pipeline = windowed(frame, time="ts", key="user").fixed("10 seconds").trigger(
        AtWatermark().with_early_firings_every(1)).accumulating()
    planned = plan_spark(pipeline.strategy(lo=Min("amount")), spark_schema(frame), 4, combine=False)
    then, elements = planned.adapter, planned.adapter.elements([shipped(frame, planned).drop(columns="_wm_ms")])
    now = plan_spark(pipeline.fire_only_updated_panes().strategy(lo=Min("amount")), spark_schema(frame), 4, combine=False).adapter
    blob = then.save(step(then.plan.spec, then.fresh_state(), elements, 0, 0).state)
    with pytest.raises(WindowingConfigError, match=r"lacks the columns \['o0'\] \(the panes' last outputs, which "
                                                   r"fire_only_updated_panes\(\) and accumulating_and_retracting\(\) keep"):
        step(now.plan.spec, now.load(blob), now.elements([]), 0, 0)


def test_a_checkpoint_written_before_key_columns_and_zones_were_described_restarts():
    """Such a state row describes the engine's parts only (`pipelines.LATER_PARTS`)."""
    import dataclasses

    frame = events([("a", 1, 5)]).assign(day=lambda f: f["ts"].dt.floor("D"))
    adapter = _keyed(frame, "day", "America/Los_Angeles")
    older = dataclasses.replace(adapter, described=())
    assert len(adapter.load(older.save(adapter.fresh_state()))) == 0


def test_a_bucket_written_with_wall_times_in_the_session_zone_goes_on_so_until_its_table_is_empty():
    """A state row without `pipelines.EXACT_INSTANTS` holds timestamp keys and built-ins' values as the session zone's
    wall times (written before they were held exactly): the step for its bucket restores new rows so and saves the row
    without the part; an empty table, or a row with the part, is held exactly. The restart of such checkpoints:
    test_old_checkpoints.py."""
    import dataclasses

    frame = events([("a", 1, 5)]).assign(day=lambda f: f["ts"].dt.floor("D"))
    adapter = _keyed(frame, "day", "America/Los_Angeles")
    older = dataclasses.replace(adapter, described=tuple(p for p in adapter.described if p[0] != EXACT_INSTANTS))
    element = adapter.elements([shipped(frame, plan_spark(_keyed_strategy(frame, "day"), spark_schema(frame), 4,
                                                          session_zone="America/Los_Angeles")).drop(columns="_wm_ms")])
    table = step(adapter.plan.spec, adapter.fresh_state(), element, 0, 0).state
    assert len(table) and adapter.exact == ("_k0",)
    _, meta = adapter.load_with_meta(older.save(table))
    kept = adapter.as_written(meta, table)
    assert not kept.exact_held and EXACT_INSTANTS not in kept.pipeline
    assert EXACT_INSTANTS not in adapter.load_with_meta(kept.save(table))[1]["pipeline"]
    assert adapter.as_written(meta, adapter.fresh_state()) is adapter
    assert adapter.as_written(adapter.load_with_meta(adapter.save(table))[1], table) is adapter


@pytest.mark.parametrize("store", [False, True], ids=["table", "window-state"])
def test_a_bucket_written_with_wall_times_is_saved_exact_once_it_holds_no_window(tmp_path, monkeypatch, store):
    """Bucket 0 (`combine.CHECKED_BUCKET`, a bucket of keys too: a query's only one where it has one) keeps its state
    row when it holds no window: saved the old way, it held wall times for good. With ``.window_state(store)`` the
    row's table is always empty, and the store says whether windows are left."""
    import dataclasses

    from pyspark.sql import Row
    from pyspark.sql.streaming.state import GroupState

    import storage.kv.spark
    from storage import KVStore

    monkeypatch.setattr(storage.kv.spark, "task_batch_id", lambda: 1)  # read in a Spark task
    frame = events([("a", 1, 5)]).assign(day=lambda f: f["ts"].dt.floor("D"))
    pipeline = windowed(frame, time="ts", key="day").fixed("10 seconds")
    pipeline = pipeline.window_state(KVStore(str(tmp_path / "kv"))) if store else pipeline
    planned = plan_spark(pipeline.strategy(lo=Min("amount")), spark_schema(frame), 4, session_zone="America/Los_Angeles")
    adapter = planned.adapter
    older = dataclasses.replace(adapter, exact_held=False)
    elements = older.elements([shipped(frame, planned).drop(columns="_wm_ms")])
    table = adapter.fresh_state() if store else step(adapter.plan.spec, adapter.fresh_state(), elements, 0, 0).state
    assert EXACT_INSTANTS not in older.pipeline and (store or len(table))
    watermark_ms = (EPOCH_2024_S + 60) * 1000
    state = GroupState(Row(table=older.save(table)), 0, watermark_ms, planned.timeout, True, True, True, False, False, -1,
                       b"", planned.state_schema)
    [out] = adapter.run_stream((0,), iter([]), state)
    assert len(out) == (0 if store else 1)  # the table's window closes: its pane fires
    assert state._defined and EXACT_INSTANTS in adapter.load_with_meta(state._value[0])[1]["pipeline"]


def test_a_checkpoint_with_other_aggregations_is_refused_naming_them():
    frame = events([("a", 1, 5)])
    adapter = _plan(frame).adapter
    blob = adapter.save(adapter.fresh_state())
    w = windowed(frame, time="ts", key="user").fixed("10 seconds") \
        .trigger(AtWatermark().with_early_firings_every("10 seconds")).accumulating_and_retracting()
    other = plan_spark(w.strategy(total=Max("amount")), spark_schema(frame), 4)
    with pytest.raises(WindowingConfigError, match=r"aggregations total=Sum\('amount'\) of int64, all=ToList\('amount'\) "
                                                   r"of int64 then, total=Max\('amount'\) of int64 now"):
        other.adapter.load(blob)


@pytest.mark.parametrize("blob, message", [
    (b"xx", r"state value of 2 bytes is too short"),
    (b"NOPE" + bytes(6), r"state value starts with b'NOPE'"),
    (MAGIC + (9).to_bytes(2, "little") + bytes(4), r"encoding version 9; this library reads versions up to 3"),
])
def test_bad_state_values_are_named(blob, message):
    with pytest.raises(WindowingConfigError, match=message):
        decode(blob)
