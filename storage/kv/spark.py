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

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    """Integers as 8-byte big-endian values (a counter's bytes), one Arrow binary array. Floats are taken where
    whole (a sum pandas made float by a null); a fraction, a NaN or a value beyond int64 is refused, where the cast
    dropped or wrapped it without a word."""
    given = np.asarray(values)
    if given.dtype.kind == "f":
        bad = ~np.isfinite(given) | (given != np.trunc(given)) | (np.abs(given) >= 2.0**63)
    elif given.dtype.kind == "u":
        bad = given > np.iinfo(np.int64).max
    elif given.dtype.kind == "O":
        bad = np.array([not isinstance(v, (int, np.integer)) or not -2**63 <= v < 2**63 for v in given.ravel()], dtype=bool)
    else:
        bad = np.full(given.shape, given.dtype.kind not in "bi")
    if bad.any():
        first = given.ravel()[bad.ravel()][0]
        raise ValueError(f"encode_int64 values: {first!r} (dtype {given.dtype}) is not an int64; cast the column to "
                         "int64 first, rounding as you mean to")
    data = np.ascontiguousarray(given, dtype=">i8")
    return pa.Array.from_buffers(pa.binary(8), len(data), [None, pa.py_buffer(data.tobytes())]).cast(pa.binary())


def decode_int64(values: pa.Array | pa.ChunkedArray, missing: int = 0) -> np.ndarray:
    """The integers of ``encode_int64``; ``missing`` where a value is null (an absent key)."""
    if not isinstance(missing, (int, np.integer)) or isinstance(missing, (bool, np.bool_)) or not -2**63 <= missing < 2**63:
        raise ValueError(f"decode_int64 missing={missing!r} must be an int64 (1.5 was truncated to 1)")
    if not isinstance(values, (pa.Array, pa.ChunkedArray)):  # a list: an AttributeError on null_count
        try:
            values = pa.array(values, pa.binary())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as error:
            raise ValueError(f"decode_int64 values: {type(values).__name__} is not encode_int64's 8-byte values ({error})"
                             ) from None
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if getattr(pa.types, "is_binary_view", lambda kind: False)(values.type):  # pyarrow 16 on (Polars' binary)
        values = values.cast(pa.binary())
    if not (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)
            or (pa.types.is_fixed_size_binary(values.type) and values.type.byte_width == 8)):
        raise ValueError(f"decode_int64 values: an array of {values.type}, not encode_int64's binary values (a string "
                         "array's 8 characters were read as an integer)")
    filled = values.fill_null(b"\0" * 8) if values.null_count else values
    out = np.frombuffer(*_eight_byte_values(filled)).astype(np.int64)
    if values.null_count and missing:
        out[values.is_null().to_numpy(zero_copy_only=False)] = missing
    return out


def _eight_byte_values(values: pa.Array) -> tuple[Any, str, int, int]:
    """``np.frombuffer``'s arguments reading ``values`` (binary, large or of fixed size 8) as big-endian int64s:
    pyarrow 14 (pyspark 3.5's) casts no binary to a fixed size, so the values are read where they lie, one after
    another once each is 8 bytes."""
    if pa.types.is_fixed_size_binary(values.type) and values.type.byte_width == 8:
        return values.buffers()[1], ">i8", len(values), values.offset * 8
    lengths = pc.binary_length(values).to_numpy(zero_copy_only=False)
    if (lengths != 8).any():
        raise ValueError(f"decode_int64 values: a value of {lengths[lengths != 8][0]} bytes is not one of "
                         "encode_int64's (8 bytes)")
    offsets = np.frombuffer(values.buffers()[1], np.int64 if pa.types.is_large_binary(values.type) else np.int32,
                            len(values) + 1, values.offset * (8 if pa.types.is_large_binary(values.type) else 4))
    return values.buffers()[2], ">i8", len(values), int(offsets[0])
