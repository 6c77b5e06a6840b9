"""The Spark recipes of docs/kv_store.md: word counts in the store, a Python worker killed mid-batch, a restart.

The worker dies (``os._exit``) right after one bucket committed batch 1, so
the query fails with batch 1 committed in some buckets and not in others.
The restarted query replays batch 1: the committed buckets read their counts
back, the others count; every count ends exact, and the store holds them.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import pandas as pd
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.state import GroupStateTimeout

from storage import KVStore
from storage._lease import holder_is_dead
from storage.kv.spark import bucket_column, decode_int64, task_batch_id
from storage.kv.word_count import SCHEMA, count_in_partitions, count_with_state
from tests.sparks import wait_for

pytestmark = pytest.mark.spark

TEXTS = ["to be or not to be", "that is the question be", "to sleep perchance to dream", "or not"]
EXPECTED = Counter(" ".join(TEXTS).split())


def write_inputs(directory):
    directory.mkdir()
    for i, text in enumerate(TEXTS):
        (directory / f"{i}.json").write_text("".join(json.dumps({"word": w}) + "\n" for w in text.split()))


def killer(marker):
    def after_commit(bucket, batch_id):
        if batch_id == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the Python worker dies: one bucket committed batch 1, the others did not

    return after_commit


def wait_for_the_failed_query_to_stop(spark, store):
    """Wait until nothing of the failed query runs any more before restarting it.

    ``awaitTermination()`` raises as soon as the query failed, while Spark cancels its other tasks
    asynchronously: their JVM side may still run (and a cancelled task's monitor thread may then kill the
    Python worker it ran on, after Spark handed that worker to a task of the restarted query: "Python worker
    exited unexpectedly"), and so may their Python workers, which can still open a bucket and fence the
    restarted query's writer off. A user restarts a failed query later than this; the store's part (a late
    writer is fenced, nothing is lost) is tested without Spark in test_bucket.py.
    """
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    wait_for(lambda: sum(e.numRunningTasks() for e in tracker.getExecutorInfos()) == 0,
             "the failed query's cancelled tasks to end")
    wait_for(lambda: writers_gone(store), "the failed query's Python workers to let go of the store's buckets")


def writers_gone(store):
    """Whether every bucket's newest lease is released or held by a process that has exited."""
    for bucket in store.buckets():
        directory = f"{store.root}/bucket-{bucket}/lease"
        leases = [p for p in store.fs.ls(directory, detail=False) if re.fullmatch(r"\d{10}\.json", p.rsplit("/", 1)[-1])]
        try:
            held = json.loads(store.fs.cat_file(max(leases)))
        except FileNotFoundError:  # a newer writer's cleanup: look again
            return False
        if not held["released"] and not holder_is_dead(held):
            return False
    return True


def store_counts(store):
    counts = {}
    for bucket in store.buckets():
        with store.open(bucket) as b:
            table = b.scan_table()
            counts.update(zip([k.decode() for k in table["key"].to_pylist()], decode_int64(table["value"]).tolist()))
    return counts


def test_apply_in_pandas_with_state_counts_exactly_once_after_a_killed_query(spark, tmp_path):
    write_inputs(tmp_path / "in")
    store = KVStore(str(tmp_path / "store"))

    def start(after_commit):
        words = spark.readStream.schema("word string").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
        counts = words.withColumn("bucket", bucket_column("word", 3)).groupBy("bucket").applyInPandasWithState(
            count_with_state(store, after_commit), SCHEMA, "unused int", "append", GroupStateTimeout.NoTimeout
        )
        return (counts.writeStream.format("parquet").option("path", str(tmp_path / "out"))
                .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())

    with pytest.raises(StreamingQueryException):
        start(killer(str(tmp_path / "killed"))).awaitTermination()
    assert os.path.exists(tmp_path / "killed")
    wait_for_the_failed_query_to_stop(spark, store)
    start(None).awaitTermination()
    out = spark.read.parquet(str(tmp_path / "out")).toPandas()
    assert out.groupby("word")["count"].max().to_dict() == dict(EXPECTED)
    assert len(out) == sum(len(set(t.split())) for t in TEXTS)  # one row per word and batch, none twice
    assert store_counts(store) == dict(EXPECTED)


def test_map_in_pandas_in_foreach_batch_counts_exactly_once_after_a_killed_query(spark, tmp_path):
    write_inputs(tmp_path / "in")
    store = KVStore(str(tmp_path / "store"))
    out = tmp_path / "out"

    def start(after_commit):
        def write(batch, batch_id):
            counted = batch.repartition(3, "word").mapInPandas(count_in_partitions(store, batch_id, after_commit), SCHEMA)
            counted.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))  # a replay rewrites its batch

        words = spark.readStream.schema("word string").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
        return (words.writeStream.foreachBatch(write).option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True).start())

    with pytest.raises(StreamingQueryException):
        start(killer(str(tmp_path / "killed"))).awaitTermination()
    assert os.path.exists(tmp_path / "killed")
    wait_for_the_failed_query_to_stop(spark, store)
    start(None).awaitTermination()
    rows = pd.read_parquet(out)
    assert rows.groupby("word")["count"].max().to_dict() == dict(EXPECTED)
    assert len(rows) == sum(len(set(t.split())) for t in TEXTS)
    assert store_counts(store) == dict(EXPECTED)


def test_task_batch_id_outside_a_streaming_task_says_what_to_do():
    with pytest.raises(RuntimeError, match="in foreachBatch, pass the batch_id"):
        task_batch_id()
