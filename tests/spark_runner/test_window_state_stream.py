"""``.window_state(KVStore(path))`` on a streaming Spark query: the windows in the store, Spark's state row
without them; the same panes as the pandas runner batch for batch, and after a killed query's restart
exactly the panes and late data of an uninterrupted run without the store. A checkpoint written when the
state rows held the windows' small fields (``data/light_table_checkpoints.py``) is refused by name."""

from __future__ import annotations

import pickle
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accumulations import Sum, ToSet
from storage import KVStore
from triggers import AfterAll, AfterCount, AfterProcessingTime, AfterWatermark, AtWatermark
from windowing import WindowingConfigError, windowed
from windowing.runners.spark import plan_spark

from .helpers import SimulatedQuery, assert_same_late_data, assert_same_panes, events, spark_schema
from .streaming import batch_inputs, mirror, read_sink, start, write_batch
from .test_adapter import TRIGGERS, WINDOWS, rows

pytestmark = pytest.mark.spark

ROWS = [("a", 1, 5), ("b", 3, 1), ("a", 12, 7), ("c", 14, 2), ("a", 8, 3), ("b", 31, 4), ("c", 12, 1),
        ("a", 44, 8), ("b", 2, 9), ("d", 58, 1), ("a", 61, 2), ("c", 75, 3), ("z", 300, 0)]


@pytest.fixture
def where(tmp_path):
    def make():
        base = tmp_path / uuid.uuid4().hex[:8]
        return base / "in", base / "out", base / "chk", base / "kv"
    return make


def sessions(store: KVStore | None):
    def build(source):
        pipeline = (windowed(source, time="ts", key="user").sessions("6 seconds").watermark("5 seconds")
                    .allowed_lateness("20 seconds").trigger(AtWatermark().with_late_firings_every(1))
                    .accumulating_and_retracting())
        if store is not None:
            pipeline = pipeline.window_state(store)
        return pipeline.aggregate(items=ToSet("amount"), total=Sum("amount"))
    return build


def _sorted_items(panes: pd.DataFrame) -> pd.DataFrame:
    """A set's output as the sorted tuple Spark's array column holds."""
    return panes.assign(items=[tuple(sorted(v)) for v in panes["items"]]) if len(panes) else panes


@dataclass
class TaskQuery(SimulatedQuery):
    """`SimulatedQuery` whose calls run in a task context naming the micro-batch, as the store's batch id
    (`storage.kv.spark.task_batch_id`) is read in a Spark task."""

    batch_id: int = -1

    def batch(self, frame, processing_ms):
        self.batch_id += 1
        return super().batch(frame, processing_ms)

    def _call(self, bucket, frames, processing_ms, timed_out):
        from pyspark import TaskContext

        TaskContext._getOrCreate()._localProperties = {"streaming.sql.batchId": str(self.batch_id)}
        try:
            super()._call(bucket, frames, processing_ms, timed_out)
        finally:
            TaskContext._setTaskContext(None)  # the driver's SparkSession refuses to start inside a task


HELD_BACK = lambda w: w.allowed_lateness("30 seconds").trigger(  # noqa: E731 (a timer due and held back: D entries)
    AfterWatermark(early=AfterAll(AfterProcessingTime("5 seconds"), AfterCount(2)), late=AfterCount(1)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=st.lists(rows.map(lambda r: r[:12]), min_size=1, max_size=5), kind=st.sampled_from(sorted(WINDOWS)),
       trigger=st.sampled_from([*TRIGGERS.values(), HELD_BACK]), buckets=st.integers(1, 3),
       pt_steps=st.lists(st.integers(1, 12), min_size=6, max_size=6))
def test_the_store_gives_the_in_memory_panes_batch_for_batch_in_a_simulated_query(tmp_path_factory, batches, kind,
                                                                                 trigger, buckets, pt_steps):
    """Spark's micro-batch loop around the worker, with and without the store: the same panes in the same
    micro-batches, so the buckets' timeouts, which the store's index gives, call them when the whole table's
    timers would (processing-time ones included)."""
    batches = [*batches, [("z", 1000, 0)]]  # the watermark passes every window but z's
    frame = events([r for b in batches for r in b])
    build = lambda source: trigger(WINDOWS[kind](windowed(source, time="ts", key="user"))).watermark("5 seconds")
    aggregations = dict(total=Sum("amount"), items=ToSet("amount"))
    queries = [TaskQuery(plan_spark(pipeline.strategy(**aggregations), spark_schema(frame), buckets), 5000)
               for pipeline in (build(frame), build(frame).window_state(KVStore(str(tmp_path_factory.mktemp("kv")))))]
    per_batch: list[list[pd.DataFrame]] = [[], []]
    pt_ms = 0
    for batch, pt_s in zip(batches, pt_steps):
        pt_ms += pt_s * 1000
        for part in (None, events(batch), None):
            for query, outputs in zip(queries, per_batch):
                before = len(query.panes)
                query.batch(part, pt_ms)
                outputs.append(pd.concat([p for p in query.panes[before:] if len(p)] or [pd.DataFrame()]))
    for in_memory, stored in zip(*per_batch):
        assert_same_panes(_sorted_items(stored), _sorted_items(in_memory))


def test_a_null_integer_key_reads_its_windows_back_from_the_store(tmp_path):
    """A nullable bigint key holding a null: the second micro-batch reading that key's windows back from the
    store failed (ValueError: cannot convert float NaN to integer); without the store the query ran."""
    def part(keys, seconds, amounts):
        return pd.DataFrame({"user": pd.array(keys, dtype="Int64"), "amount": amounts,
                             "ts": pd.Timestamp("2024-01-01") + pd.to_timedelta(seconds, unit="s")})

    batches = [part([1, None], [1, 2], [1, 2]), part([None, 2**62 + 1], [3, 4], [3, 4]), part([1], [100], [5])]
    build = lambda source: windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")  # noqa: E731
    schema = spark_schema(pd.concat(batches))
    queries = [TaskQuery(plan_spark(pipeline.strategy(total=Sum("amount")), schema, 2), 5000)
               for pipeline in (build(batches[0]), build(batches[0]).window_state(KVStore(str(tmp_path / "kv"))))]
    for i, batch in enumerate([*batches, None]):  # the last, a no-data batch: the watermark has passed 10 s
        for query in queries:
            query.batch(batch, 1000 * (i + 1))
    in_memory, stored = (pd.concat([p for p in query.panes if len(p)]) for query in queries)  # pandas 2 warns of empties
    assert_same_panes(stored, in_memory)
    assert sorted(zip(stored.user.map(lambda k: -1 if pd.isna(k) else k), stored.total)) == [(-1, 5), (1, 1), (2**62 + 1, 4)]


def test_a_null_boolean_key_reads_its_windows_back_from_the_store(tmp_path):
    """A nullable boolean key holding a null: read back from the store its windows came as key True (NumPy makes
    the NaN that the table keeps True), so the null key's window split in two panes under a key never seen."""
    def part(key, seconds, amount):
        return pd.DataFrame({"user": pd.array([key], dtype="boolean"), "amount": [amount],
                             "ts": pd.Timestamp("2024-01-01") + pd.to_timedelta([seconds], unit="s")})

    batches = [part(None, 1, 1), part(None, 2, 10), part(False, 1000, 100)]
    build = lambda source: windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")  # noqa: E731
    schema = spark_schema(pd.concat(batches))
    queries = [TaskQuery(plan_spark(pipeline.strategy(total=Sum("amount")), schema, 2), 5000)
               for pipeline in (build(batches[0]), build(batches[0]).window_state(KVStore(str(tmp_path / "kv"))))]
    for i, batch in enumerate([*batches, None]):
        for query in queries:
            query.batch(batch, 1000 * (i + 1))
    in_memory, stored = (pd.concat([p for p in query.panes if len(p)]) for query in queries)
    null_as_none = lambda panes: panes.assign(user=[None if pd.isna(k) else k for k in panes.user])  # noqa: E731
    assert list(zip(null_as_none(stored).user, stored.total)) == [(None, 11)]
    assert_same_panes(null_as_none(stored), null_as_none(in_memory))


@pytest.mark.parametrize("combine, store, windows", [("true", True, "fixed"), ("false", True, "fixed"),
                                                    ("false", False, "sessions")])
def test_a_timestamp_key_keeps_its_windows_and_its_value_in_every_micro_batch(spark, where, combine, store, windows):
    """A timestamp key: a micro-batch's elements hold it in microseconds, the windows read back as Timestamps,
    and the store spelt the two apart, so from the third micro-batch of a key on its elements missed its open
    window (a Sum of 1, 10 and 100 in one window gave 100). Not folded before the shuffle
    (``windowing.spark.combine=false``), pyspark hands the key over in nanoseconds, which the table of Python
    objects took as ints: read back from the store, or merged into a session, the key came out 1000 times later
    (the year 55,000), and ``toPandas`` failed on it."""
    source, sink, checkpoint, kv = where()
    key, t0 = pd.Timestamp("2023-06-01 12:00"), pd.Timestamp("2024-01-01")
    parts = [pd.DataFrame({"user": pd.Series([key]).astype("datetime64[us]"), "amount": [10 ** i],
                           "ts": pd.Series([t0 + pd.Timedelta(seconds=s)]).astype("datetime64[us]")})
             for i, s in enumerate([1, 2, 3, 1000])]

    def build(stream):
        pipeline = windowed(stream, time="ts", key="user").watermark("5 seconds")
        pipeline = pipeline.fixed("10 seconds") if windows == "fixed" else pipeline.sessions("5 seconds")
        pipeline = pipeline.window_state(KVStore(str(kv))) if store else pipeline
        return pipeline.aggregate(total=Sum("amount"))

    source.mkdir(parents=True)
    spark.conf.set("windowing.spark.combine", combine)
    try:
        stream = spark.readStream.schema("user timestamp, amount long, ts timestamp").option("maxFilesPerTrigger", 1)
        query = (build(stream.parquet(str(source))).writeStream
                 .foreachBatch(lambda frame, batch_id: frame.write.mode("overwrite").parquet(str(sink / f"batch={batch_id}")))
                 .option("checkpointLocation", str(checkpoint)).outputMode("append").start())
    finally:
        spark.conf.unset("windowing.spark.combine")
    try:
        for i, part in enumerate(parts):
            write_batch(source, i, part)
            query.processAllAvailable()
    finally:
        query.stop()
    panes = read_sink(spark, sink)
    first = t0 if windows == "fixed" else t0 + pd.Timedelta(seconds=1)
    assert list(zip(panes.user, panes.window_start, panes.total)) == [(key, first, 111)]


@pytest.mark.parametrize("damage", ["deleted", "older copy"])
def test_a_store_that_lost_committed_batches_is_refused_not_read_as_fewer_windows(tmp_path, damage):
    """The store deleted, or a copy from before the last batches put back, between micro-batches: the query
    went on with the windows left (the deleted store's as new, no error), its panes short of the lost elements."""
    store_path = tmp_path / "kv"
    pipeline = windowed(events(ROWS), time="ts", key="user").sessions("6 seconds").watermark("5 seconds")
    strategy = pipeline.window_state(KVStore(str(store_path))).strategy(total=Sum("amount"))
    query = TaskQuery(plan_spark(strategy, spark_schema(events(ROWS)), 2), 5000)
    query.batch(events(ROWS[:4]), 1000)
    shutil.copytree(store_path, tmp_path / "copy")
    query.batch(events(ROWS[4:8]), 2000)
    shutil.rmtree(store_path)
    if damage == "older copy":
        shutil.copytree(tmp_path / "copy", store_path)
    with pytest.raises(WindowingConfigError, match=r"the window state's store committed batch -?\d+ in this bucket, but the "
                                                   r"query's checkpoint recorded batch 1 committed there: the store lost "
                                                   r"batches \(deleted, an older copy restored, a damaged log\)"):
        query.batch(events(ROWS[8:]), 3000)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, len(ROWS) - 1), min_size=2, max_size=4, unique=True))
def test_a_spilled_stream_matches_the_pandas_runner_batch_for_batch(spark, where, cuts):
    source, sink, checkpoint, kv = where()
    bounds = [0, *sorted(cuts), len(ROWS)]
    parts = [events(ROWS[a:b]) for a, b in zip(bounds, bounds[1:])]
    store = KVStore(str(kv))
    query = start(spark, source, sink, checkpoint, sessions(store))
    try:
        for i, part in enumerate(parts):
            write_batch(source, i, part)
            query.processAllAvailable()
        inputs = batch_inputs(query)
    finally:
        query.stop()
    actual = read_sink(spark, sink)
    expected = mirror(parts, inputs, sessions(None))
    assert len(expected) > 0
    assert_same_panes(_sorted_items(actual), _sorted_items(expected))
    assert store.buckets(), "the payloads went to the store"


def test_a_restart_between_batches_reads_the_payloads_back(spark, where):
    """Stop the query after each batch and start it again from its checkpoint and store."""
    parts = [events(ROWS[i:i + 3]) for i in range(0, len(ROWS), 3)]
    source, sink, checkpoint, kv = where()
    inputs: list[int] = []
    for i, part in enumerate(parts):
        query = start(spark, source, sink, checkpoint, sessions(KVStore(str(kv))))
        try:
            write_batch(source, i, part)
            query.processAllAvailable()
            inputs += batch_inputs(query)
        finally:
            query.stop()
    expected = mirror(parts, inputs, sessions(None))
    assert_same_panes(_sorted_items(read_sink(spark, sink)), _sorted_items(expected))


def test_a_checkpoint_written_without_the_store_is_refused_with_it(spark, where):
    source, sink, checkpoint, kv = where()
    query = start(spark, source, sink, checkpoint, sessions(None))
    try:
        write_batch(source, 0, events(ROWS[:3]))
        query.processAllAvailable()
    finally:
        query.stop()
    query = start(spark, source, sink, checkpoint, sessions(KVStore(str(kv))))
    try:
        write_batch(source, 1, events(ROWS[3:6]))
        with pytest.raises(Exception, match="window_state None then, windows per key in a key-value store now"):
            query.processAllAvailable()
    finally:
        query.stop()


def test_a_checkpoint_whose_state_rows_held_the_light_table_is_refused(spark, where):
    import pyspark

    version = ".".join(pyspark.__version__.split(".")[:2])
    fixture = Path(__file__).parent / "data" / f"light-table-{version}" / "checkpoint"
    if not fixture.is_dir():
        pytest.fail(f"no checkpoint of the light-table layout for pyspark {version}: {fixture} is missing; make it "
                    "as data/light_table_checkpoints.py says")
    source, sink, checkpoint, kv = where()
    shutil.copytree(fixture, checkpoint)
    query = start(spark, source, sink, checkpoint, sessions(KVStore(str(kv))))
    try:
        write_batch(source, 1, events(ROWS[3:6]))
        with pytest.raises(Exception, match="window_state payloads in a key-value store then, windows per key in a "
                                            "key-value store now"):
            query.processAllAvailable()
    finally:
        query.stop()


def test_a_killed_query_with_a_store_restarts_exactly_once(spark, where, tmp_path):
    """SIGKILL mid-batch (after the batch's panes: Spark's state and the store committed it, the query
    did not): the restart replays the batch, which reads the versions its state names, writes nothing,
    and the output equals an uninterrupted run's without the store."""
    from .killed_query import kill_at_batch, restart, uninterrupted, write_files

    rows = ROWS[:-1]
    parts = [events(rows[i:i + 4]) for i in range(0, len(rows), 4)]
    parts += [events([("b", 2, 9), ("c", 13, 4), ("a", 47, 1)]), events([("z", 300, 0)])]

    panes, late = uninterrupted(spark, *where()[:3], parts)

    source, sink, checkpoint, kv = where()
    write_files(source, parts)
    spec = {"source": str(source), "sink": str(sink), "checkpoint": str(checkpoint), "store": str(kv)}
    kill_at_batch(spec, 2, tmp_path / "reached")
    store = KVStore(str(kv))
    committed = {}
    for bucket in store.buckets():
        with store.open(bucket, take_over=True) as b:
            committed[bucket] = b.committed_batch_id
    assert 2 in committed.values(), f"the store committed batch 2 before the kill: {committed}"

    restart(spec)
    assert_same_panes(read_sink(spark, sink / "panes"), panes)
    assert_same_late_data(read_sink(spark, sink / "late"), late)


def test_a_bucket_whose_windows_are_all_purged_deletes_their_records_once_the_watermark_moves(spark, where):
    """Purging a key's last window deletes its record and leaves an undo record holding it, deleted in the
    bucket's next batch. A bucket left with no window gets no element to call it again: the runner keeps its
    state with a timeout, so the records go once the watermark next moves, not when (if ever) one of its keys
    comes back."""
    early = [(user, ts, 1) for user in "abcdefgh" for ts in (1, 3)]
    source, sink, checkpoint, kv = where()
    store = KVStore(str(kv))

    def keys_held() -> dict[int, set[bytes]]:
        users = {pickle.dumps((user,), protocol=4): user for user in "abcdefghz"}
        held: dict[int, set[bytes]] = {}
        for bucket in store.buckets():
            with store.open(bucket, take_over=True) as b:
                stored = b.scan_table().column("key").to_pylist()
            held[bucket] = {user for key in stored for blob, user in users.items() if blob in key}
        return held

    query = start(spark, source, sink, checkpoint, sessions(store))
    try:
        write_batch(source, 0, events(early))
        query.processAllAvailable()
        write_batch(source, 1, events([("z", 300, 0)]))  # the watermark passes every early window's lateness
        query.processAllAvailable()
        held = keys_held()
        without_z = [bucket for bucket, users in held.items() if "z" not in users and users]
        assert without_z, f"a bucket must hold early keys only, for the test to mean anything: {held}"
        write_batch(source, 2, events([("z", 400, 0)]))  # lands in z's bucket only; the watermark moves
        query.processAllAvailable()
    finally:
        query.stop()
    assert {bucket: users - {"z"} for bucket, users in keys_held().items()} == {bucket: set() for bucket in held}
