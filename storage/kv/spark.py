"""Using the store from Spark tasks: which bucket, which batch (docs/kv_store.md, "On Spark").

A task writes the buckets it owns: the group of ``applyInPandasWithState``
keyed by a bucket column (``bucket_column``), or the partition of
``mapInPandas`` after ``repartition(n, key)``. The batch id is Spark's
micro-batch id, which a task reads with ``task_batch_id()`` (or a
``foreachBatch`` function passes on). A batch at or below the bucket's
``committed_batch_id`` is Spark replaying it after a failure: its writes are
in the store already, so the task only reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import Column


def task_batch_id() -> int:
    """The id of the streaming micro-batch the calling Spark task belongs to."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
    if value is None:
        raise RuntimeError(
            "task_batch_id() found no streaming batch id: call it inside a task of a streaming query "
            "(applyInPandasWithState, or mapInPandas on a streaming DataFrame); in foreachBatch, pass "
            "the batch_id argument to the tasks instead"
        )
    return int(value)


def bucket_column(column: str | Column, buckets: int) -> Column:
    """A Spark column holding the bucket of ``column``'s value: ``pmod(xxhash64(column), buckets)``.

    Stable across batches and restarts, so a key always goes to the same bucket.
    """
    from pyspark.sql import functions as F

    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise ValueError(f"bucket_column buckets={buckets!r} must be an int of 1 or more")
    return F.pmod(F.xxhash64(column), F.lit(buckets)).cast("int")


def encode_int64(values: np.ndarray) -> pa.Array:
    """Integers as 8-byte big-endian values (a counter's bytes), one Arrow binary array."""
    data = np.ascontiguousarray(values, dtype=">i8")
    return pa.Array.from_buffers(pa.binary(8), len(data), [None, pa.py_buffer(data.tobytes())]).cast(pa.binary())


def decode_int64(values: pa.Array | pa.ChunkedArray, missing: int = 0) -> np.ndarray:
    """The integers of ``encode_int64``; ``missing`` where a value is null (an absent key)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    filled = values.fill_null(b"\0" * 8) if values.null_count else values
    raw = filled.cast(pa.binary(8))
    out = np.frombuffer(raw.buffers()[1], ">i8", len(raw), raw.offset * 8).astype(np.int64)
    if values.null_count and missing:
        out[values.is_null().to_numpy(zero_copy_only=False)] = missing
    return out
