"""HDHT's word-count example on Spark: running counts kept in the KVStore, exactly once across restarts.

Run ``python -m storage.kv.word_count`` (a local Spark): it streams a few files
of words, kills the Python worker in the middle of a batch (after some of its
buckets committed), restarts the query from its checkpoint and prints the
counts, which match a plain count of the words. Two ways, the same result:

- ``count_with_state``: ``groupBy(bucket).applyInPandasWithState``, one call
  per bucket and batch, the batch id read from the task;
- ``count_in_partitions``: inside ``foreachBatch``, ``repartition(n, word)``
  then ``mapInPandas``, one call per partition (= bucket), the batch id
  passed from ``foreachBatch``.

Each emits, per batch, every word seen in it with its count so far; a batch
that Spark replays emits the same rows again (read back, not counted twice).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any, Callable

import pandas as pd
import pyarrow as pa

from .spark import decode_int64, encode_int64, task_batch_id
from .store import KVStore

#: The output of both ways: a word and its count after the batch.
SCHEMA = "word string, count long"
#: A test seam: called with (bucket, batch_id) once the bucket committed the batch.
AfterCommit = Callable[[int, int], None]


def count_words(
    store: KVStore, bucket: int, batch_id: int, words: pd.Series, after_commit: AfterCommit | None = None
) -> pd.DataFrame:
    """Add one batch's ``words`` of ``bucket`` to their counts in ``store``; the words with their new counts."""
    seen = words.value_counts(sort=False)
    keys = pa.array(seen.index.astype(str).str.encode("utf-8"), pa.binary())
    with store.open(bucket, take_over=True) as b:  # take_over: a failed attempt of this task may still hold it
        if batch_id <= b.committed_batch_id:
            totals = decode_int64(b.get_many(keys))  # a replay: this batch is counted already
        else:
            b.begin(batch_id)
            totals = decode_int64(b.get_many(keys)) + seen.to_numpy()
            b.put_many(keys, encode_int64(totals))
            b.commit()
            if after_commit is not None:
                after_commit(bucket, batch_id)
    return pd.DataFrame({"word": seen.index.astype(str), "count": totals})


def count_with_state(store: KVStore, after_commit: AfterCommit | None = None) -> Callable[..., Iterator[pd.DataFrame]]:
    """The function for ``df.groupBy(bucket_column("word", n)).applyInPandasWithState(fn, SCHEMA, "n int", ...)``.

    The store holds the counts, so Spark's group state stays empty.
    """

    def fn(key: tuple[Any, ...], frames: Iterable[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        words = pd.concat([f["word"] for f in frames], ignore_index=True)
        yield count_words(store, int(key[0]), task_batch_id(), words, after_commit)

    return fn


def count_in_partitions(
    store: KVStore, batch_id: int, after_commit: AfterCommit | None = None
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The function for ``batch.repartition(n, "word").mapInPandas(fn, SCHEMA)`` inside ``foreachBatch``."""

    def fn(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        from pyspark import TaskContext

        words = [f["word"] for f in frames]
        if words and sum(len(w) for w in words):
            bucket = TaskContext.get().partitionId()
            yield count_words(store, bucket, batch_id, pd.concat(words, ignore_index=True), after_commit)

    return fn


def main() -> None:
    import json
    import sys
    import tempfile

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.state import GroupStateTimeout

    from .spark import bucket_column

    spark = SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    base = tempfile.mkdtemp(prefix="kv-word-count-")
    os.makedirs(f"{base}/in")
    texts = ["to be or not to be", "that is the question", "to sleep perchance to dream"]
    for i, text in enumerate(texts):
        with open(f"{base}/in/{i}.json", "w") as handle:
            handle.write("".join(json.dumps({"word": w}) + "\n" for w in text.split()))
    store = KVStore(f"{base}/store")
    kill_marker = f"{base}/killed"

    def kill_once(bucket: int, batch_id: int) -> None:  # the Python worker dies once, mid-batch
        if batch_id == 1 and not os.path.exists(kill_marker):
            open(kill_marker, "w").close()
            os._exit(1)

    def start(after_commit: AfterCommit | None) -> Any:
        words = spark.readStream.schema("word string").option("maxFilesPerTrigger", 1).json(f"{base}/in")
        counts = words.withColumn("bucket", bucket_column("word", 4)).groupBy("bucket").applyInPandasWithState(
            count_with_state(store, after_commit), SCHEMA, "unused int", "append", GroupStateTimeout.NoTimeout
        )
        return (counts.writeStream.format("parquet").option("path", f"{base}/out")
                .option("checkpointLocation", f"{base}/checkpoint").trigger(availableNow=True).start())

    try:
        start(kill_once).awaitTermination()
    except StreamingQueryException:  # the killed worker fails the query
        print("the query failed as planned: its Python worker was killed in batch 1")
    start(None).awaitTermination()  # restarted from its checkpoint: batch 1 again
    out = spark.read.parquet(f"{base}/out").toPandas()
    final = out.groupby("word")["count"].max().sort_index()
    expected = pd.Series(" ".join(texts).split()).value_counts().sort_index()
    print(final.to_string())
    print("exactly once:", final.to_dict() == expected.to_dict())
    spark.stop()


if __name__ == "__main__":
    main()
