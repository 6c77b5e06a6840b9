"""Key buckets on Spark: one per shuffle partition by default, each on its own partition, and a
checkpoint's bucket count kept across restarts (docs/spark.md, "Key buckets")."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accumulations import Count, Sum
from windowing import windowed
from windowing.runners.spark import BUCKETS_CONF, PLACEMENT_CONF, bucket_labels
from windowing.runners.spark.buckets import Bucketing

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
    by_spark = frame.select(*[_bucket(keys, bucketing).alias(f"b{i}") for i, keys in enumerate(combinations)]).collect()
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


def test_a_restart_with_other_shuffle_partitions_is_refused_in_its_first_batch_and_restarts_with_the_named_count(
        spark, tmp_path):
    """Spark keeps a checkpoint's shuffle partitions whatever the session says; the default bucket count
    follows the session's setting when the query is defined, so a changed setting would move keys to
    other buckets. The first micro-batch refuses it, naming the count to set, and nothing is lost.

    That batch holds only key g, whose bucket of 3 has a label no bucket of 2 has (1; 2 buckets are
    labelled 2 and 0): its group has no state to tell the other count. The checked bucket's does."""
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
