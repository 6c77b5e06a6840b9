"""Key buckets on Spark: one per shuffle partition by default (fewer on a local master with fewer cores),
each on its own partition, and a checkpoint's bucket count kept across restarts (docs/spark.md, "Key buckets")."""

from __future__ import annotations

import os
import uuid
from types import SimpleNamespace

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accumulations import Count, Sum
from windowing import windowed
from windowing.errors import WindowingConfigError
from windowing.runners.spark import BUCKETS_CONF, COMBINE_CONF, PLACEMENT_CONF, bucket_labels, buckets, run_spark
from windowing.runners.spark.buckets import Bucketing, bucketing_of, default_bucket_count, local_cores, setting

from .helpers import assert_same_panes, events, partition_when_output
from .streaming import read_sink, start, write_batch

pytestmark = pytest.mark.spark

ROWS = [("a", 1, 5), ("b", 3, 1), ("a", 12, 7), ("c", 14, 2), ("a", 8, 3), ("b", 31, 4), ("c", 12, 1),
        ("a", 44, 8), ("b", 2, 9), ("d", 58, 1), ("e", 61, 2), ("f", 75, 3), ("g", 76, 1), ("h", 77, 4)]
PARTS = [events(ROWS[i:i + 4]) for i in range(0, len(ROWS), 4)] + [events([("z", 300, 0)])]


def _where(tmp_path):
    base = tmp_path / uuid.uuid4().hex[:8]
    return base / "in", base / "out", base / "chk"


def _pipeline(source):
    return windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds") \
        .aggregate(total=Sum("amount"), n=Count(), partition=partition_when_output())


def _feed(query, source, parts, first=0):
    try:
        for i, part in enumerate(parts, first):
            write_batch(source, i, part)
            query.processAllAvailable()
    finally:
        query.stop()


@pytest.mark.parametrize("count", [1, 2, 3, 8, 200])
def test_the_labels_of_n_buckets_land_one_to_one_on_n_hash_partitions(spark, count):
    """``groupBy`` hash-partitions by ``pmod(hash(label), n)`` (Murmur3, seed 42), as ``repartition(n, col)`` does."""
    from pyspark.sql import functions as F

    labels = bucket_labels(count)
    frame = spark.createDataFrame([(i, int(label)) for i, label in enumerate(labels)], "bucket int, label int")
    placed = frame.repartition(count, "label").select("bucket", F.spark_partition_id().alias("partition")).collect()
    assert sorted((r.bucket, r.partition) for r in placed) == [(i, i) for i in range(count)]
    assert len(set(labels.tolist())) == count and labels.min() >= 0


INTEGER_KEYS = {"big": ("bigint", pa.int64(), 64), "i": ("int", pa.int32(), 32), "small": ("smallint", pa.int16(), 16),
                "tiny": ("tinyint", pa.int8(), 8)}


def _integers(bits: int):
    return st.one_of(st.none(), st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1), st.sampled_from([0, -1, 1]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(*[_integers(bits) for _, _, bits in INTEGER_KEYS.values()]), min_size=1, max_size=40),
       combinations=st.lists(st.lists(st.sampled_from(list(INTEGER_KEYS)), min_size=1, max_size=3), min_size=1, max_size=4),
       count=st.sampled_from([2, 3, 4, 7, 200]))
def test_a_worker_labels_integer_keys_with_the_bucket_spark_would(spark, rows, combinations, count):
    """Before the shuffle a worker computes an integer key's bucket itself (`combine.with_buckets`), so
    that the JVM ships one column fewer: every key, nulls and extremes included, of every integer type
    and combination of them, gets the label Spark's ``pmod(xxhash64(keys), count)`` gives it (`query._bucket`)."""
    from windowing.runners.spark.query import _bucket

    bucketing = Bucketing(count)
    frame = spark.createDataFrame(rows, ", ".join(f"{name} {ddl}" for name, (ddl, _, _) in INTEGER_KEYS.items()))
    by_spark = frame.select(*[_bucket(keys, bucketing, frame.schema).alias(f"b{i}") for i, keys in enumerate(combinations)]).collect()
    arrow = {name: pa.array([row[i] for row in rows], arrow_type) for i, (name, (_, arrow_type, _)) in enumerate(INTEGER_KEYS.items())}
    for i, keys in enumerate(combinations):
        assert bucketing.labels_of([arrow[k] for k in keys], len(rows)).tolist() == [row[f"b{i}"] for row in by_spark], keys


def test_by_default_each_bucket_has_its_own_shuffle_partition_in_the_stateful_step(spark, tmp_path):
    """Two shuffle partitions (the suite's setting): two buckets, each on its own partition. Labelled by
    number, as before, buckets 0 and 1 both hash to partition 1 and one core did all the stateful work."""
    source, sink, checkpoint = _where(tmp_path)
    _feed(start(spark, source, sink, checkpoint, _pipeline), source, PARTS)
    panes = read_sink(spark, sink)
    assert set(panes["partition"]) == {0, 1}
    spark.conf.set(PLACEMENT_CONF, "numbers")
    try:
        source, sink, checkpoint = _where(tmp_path)
        _feed(start(spark, source, sink, checkpoint, _pipeline), source, PARTS)
    finally:
        spark.conf.unset(PLACEMENT_CONF)
    assert set(read_sink(spark, sink)["partition"]) == {1}


@pytest.mark.parametrize("combine", ["true", "false"])
def test_a_restart_with_other_shuffle_partitions_is_refused_in_its_first_batch_and_restarts_with_the_named_count(
        spark, tmp_path, monkeypatch, request, combine):
    """Spark keeps a checkpoint's shuffle partitions whatever the session says; the default bucket count
    follows the session's setting when the query is defined, so a changed setting would move keys to
    other buckets. The first micro-batch refuses it, naming the count to set, and nothing is lost.

    That batch holds only key g, whose bucket of 3 has a label no bucket of 2 has (1; 2 buckets are
    labelled 2 and 0): its group has no state to tell the other count. The checked bucket's does, called
    by the packed row `combine.pack` gives it or, rows not packed (``combine`` false), by the copy of a row
    `combine.with_checked_bucket_copy` gives it: unpacked, that batch's panes reached the sink, and the refusal came
    only with a batch for a bucket with state. As on a cluster's master: on the suite's ``local[2]`` 3
    partitions would make 1 bucket (at most one per core, dividing the partitions: tested below)."""
    monkeypatch.setattr(buckets, "local_cores", lambda master: None)
    spark.conf.set(COMBINE_CONF, combine)
    request.addfinalizer(lambda: spark.conf.unset(COMBINE_CONF))
    parts = PARTS[:2] + [events([("g", 33, 1)])] + PARTS[2:]
    source, sink, checkpoint = _where(tmp_path)
    _feed(start(spark, source, sink, checkpoint, _pipeline), source, parts)
    uninterrupted = read_sink(spark, sink).drop(columns="partition")

    source, sink, checkpoint = _where(tmp_path)
    _feed(start(spark, source, sink, checkpoint, _pipeline), source, parts[:2])
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        query = start(spark, source, sink, checkpoint, _pipeline)
        write_batch(source, 2, parts[2])
        with pytest.raises(Exception, match=r"this query groups keys into 3 buckets \(windowing.spark.buckets unset: one per "
                                            r"shuffle partition, spark.sql.shuffle.partitions=3\), but its checkpoint was "
                                            r"written with 2 buckets: .* set windowing.spark.buckets=2 "):
            query.processAllAvailable()
        query.stop()
        spark.conf.set(BUCKETS_CONF, "2")
        query = start(spark, source, sink, checkpoint, _pipeline)
        query.processAllAvailable()  # the refused batch again
        _feed(query, source, parts[3:], 3)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
        spark.conf.unset(BUCKETS_CONF)
    assert_same_panes(read_sink(spark, sink).drop(columns="partition"), uninterrupted)


@pytest.mark.parametrize("partitions, cores, count", [
    (200, 2, 2), (200, 8, 8), (200, 12, 10), (200, 3, 2), (3, 2, 1), (2, 2, 2), (4, 8, 4), (7, 1, 1), (200, None, 200)])
def test_a_local_master_gets_at_most_a_bucket_per_core_dividing_the_shuffle_partitions(partitions, cores, count):
    """More buckets than a local master's cores only add Python calls on the same cores; a divisor of the
    partitions, so that each bucket keeps a partition of its own. No cores known (a cluster): one per partition."""
    assert default_bucket_count(partitions, cores) == count


@pytest.mark.parametrize("master, cores", [
    ("local", 1), ("local[2]", 2), ("local[16]", 16), ("local[3, 4]", 3), ("local[*]", os.cpu_count()),
    ("local[*,2]", os.cpu_count()), ("local-cluster[2,1,1024]", None), ("yarn", None), ("spark://host:7077", None),
    ("sc://localhost", None), (None, None)])
def test_the_cores_of_a_local_master_are_its_threads_and_a_cluster_has_none_fixed(master, cores):
    assert local_cores(master) == cores


def test_with_more_shuffle_partitions_than_local_cores_each_core_gets_one_bucket_on_its_own_partition(spark, tmp_path):
    """Spark's own default of 200 shuffle partitions on the suite's ``local[2]`` (here 8): 2 buckets, not 8, each
    on its own partition of the 8, and the panes of a run with one bucket per partition."""
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    try:
        source, sink, checkpoint = _where(tmp_path)
        spark.conf.set(BUCKETS_CONF, "8")
        try:
            _feed(start(spark, source, sink, checkpoint, _pipeline), source, PARTS)
        finally:
            spark.conf.unset(BUCKETS_CONF)
        one_per_partition = read_sink(spark, sink)
        bucketing = bucketing_of(spark.range(1), keyed=True)
        source, sink, checkpoint = _where(tmp_path)
        _feed(start(spark, source, sink, checkpoint, _pipeline), source, PARTS)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    assert (bucketing.count, bucketing.origin) == (2, "windowing.spark.buckets unset: spark.sql.shuffle.partitions=8, "
                                                      "at most one per core of the local master local[2], dividing the "
                                                      "partitions")
    panes = read_sink(spark, sink)
    assert len(set(one_per_partition["partition"])) > 2  # 8 buckets spread over more partitions than 2
    assert len(set(panes["partition"])) == 2 and set(panes["partition"]) <= set(range(8))
    assert_same_panes(panes.drop(columns="partition"), one_per_partition.drop(columns="partition"))


class _Conf:
    """A session's settings; without ``spark.master`` reading it fails, as on a Connect server that will not say."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.settings = settings

    def get(self, key: str, default: str | None = None) -> str | None:
        if key == "spark.master" and key not in self.settings:
            raise RuntimeError("[CONFIG_NOT_AVAILABLE] Configuration spark.master is not available.")
        return self.settings.get(key, default)


@pytest.mark.parametrize("settings, count, origin", [
    ({"spark.sql.shuffle.partitions": "200"}, 200,
     "windowing.spark.buckets unset: one per shuffle partition, spark.sql.shuffle.partitions=200"),
    ({"spark.sql.shuffle.partitions": "auto"}, 200,
     "windowing.spark.buckets unset: one per shuffle partition, spark.sql.shuffle.partitions not a number: Spark's "
     "default of 200"),
    ({"spark.sql.shuffle.partitions": "auto", "spark.master": "local[4]"}, 4,
     "windowing.spark.buckets unset: spark.sql.shuffle.partitions not a number: Spark's default of 200, at most one "
     "per core of the local master local[4], dividing the partitions"),
    ({"spark.sql.shuffle.partitions": "200", "spark.master": "yarn"}, 200,
     "windowing.spark.buckets unset: one per shuffle partition, spark.sql.shuffle.partitions=200"),
])
def test_the_default_count_and_where_it_came_from_when_the_master_is_unknown_or_the_partitions_no_number(
        settings, count, origin):
    """A session that will not name its master is taken for a cluster's: one bucket per partition."""
    source = SimpleNamespace(sparkSession=SimpleNamespace(conf=_Conf(settings)))
    assert bucketing_of(source, keyed=True) == Bucketing(count, origin=origin)


def _not_available(key: str) -> RuntimeError:
    """What Databricks serverless raises reading a setting it does not list (databricks-sdk-py#1112)."""
    return RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available. SQLSTATE: 42K0I")


class _ServerlessConf:
    """Reads only the settings it allows, default or not, as Databricks serverless does (databricks-sdk-py#1112:
    ``spark.conf.get("xxxxx", "my_default")`` raised ``[CONFIG_NOT_AVAILABLE] Configuration xxxxx is not available``)."""

    ALLOWED = {"spark.sql.shuffle.partitions": "200", "spark.sql.session.timeZone": "Etc/UTC"}

    def get(self, key: str, *default: str | None) -> str | None:
        if key not in self.ALLOWED:
            raise _not_available(key)
        return self.ALLOWED[key]


def test_a_server_that_will_not_read_the_runners_settings_gets_their_defaults():
    # Every windowing.spark.* read failed the query where it was defined on such a server, set or not.
    source = SimpleNamespace(sparkSession=SimpleNamespace(conf=_ServerlessConf()))
    assert bucketing_of(source, keyed=True) == Bucketing(
        200, origin="windowing.spark.buckets unset: one per shuffle partition, spark.sql.shuffle.partitions=200")
    assert setting(_ServerlessConf(), "windowing.spark.combine", "true") == "true"
    assert setting(_ServerlessConf(), "spark.master") is None
    assert setting(_ServerlessConf(), "spark.sql.shuffle.partitions") == "200"

    class Broken:
        def get(self, key, *default):
            raise RuntimeError("the connection to the server was lost")

    with pytest.raises(RuntimeError, match="connection to the server was lost"):  # any other failure stays one
        setting(Broken(), "windowing.spark.combine", "true")


class _Refusing:
    """``thing`` with ``attribute`` replaced (a session's ``conf``, a DataFrame's ``sparkSession``)."""

    def __init__(self, thing, attribute, replacement):
        self._thing, self._attribute, self._replacement = thing, attribute, replacement

    def __getattr__(self, name):
        return self._replacement if name == self._attribute else getattr(self._thing, name)


class _RefusingConf:
    """A session's settings, but for the runner's own and ``spark.sql.caseSensitive``, which it will not read."""

    def __init__(self, conf):
        self.conf = conf

    def get(self, key, *default):
        if key.startswith("windowing.spark.") or key == "spark.sql.caseSensitive":
            raise _not_available(key)
        return self.conf.get(key, *default)


def test_a_query_whose_session_will_not_read_the_runners_settings_runs_with_their_defaults(spark):
    # Every read of windowing.spark.* (combine, quickAck, stateCompression, buckets) and of spark.sql.caseSensitive
    # failed the query where it was defined on such a server (Databricks serverless), set or not.
    frame = events(ROWS)
    expected = windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(total=Sum("amount"), n=Count())
    source = spark.createDataFrame(frame)
    session = _Refusing(spark, "conf", _RefusingConf(spark.conf))
    strategy = windowed(frame, time="ts", key="user").fixed("10 seconds").strategy(total=Sum("amount"), n=Count())
    result = run_spark(strategy, _Refusing(source, "sparkSession", session), late_data=False)
    assert_same_panes(result.toPandas(), expected)


@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("value", ["abc", "0", "-1"])
def test_a_bucket_count_that_is_no_positive_integer_is_refused_keyed_or_not(spark, keyed, value):
    # Unkeyed pipelines took it without a word: the typo waited for the session's first keyed query.
    spark.conf.set(BUCKETS_CONF, value)
    try:
        with pytest.raises(WindowingConfigError, match=f"windowing.spark.buckets='{value}' must be a positive integer"):
            bucketing_of(spark.range(1), keyed=keyed)
    finally:
        spark.conf.unset(BUCKETS_CONF)
