"""The Spark adapter: the only module of the file sink that imports pyspark.

A streaming query writes through ``foreachBatch``: each micro-batch is
collected to the driver as Arrow and committed under Spark's batch id, so a
batch that Spark replays after a failure is recognised and skipped.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

import pyarrow as pa

from .writer import to_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from .sink import FileSink
    from .writer import PhaseHook


def _is_spark(df: Any) -> bool:
    return type(df).__module__.startswith("pyspark.")


def to_arrow(df: Any) -> pa.Table:
    """An Arrow table from a pandas, Arrow or (batch) Spark DataFrame."""
    if _is_spark(df):
        return df.toArrow()
    return to_table(df)


def start_query(
    sink: FileSink,
    df: DataFrame,
    checkpoint_location: str,
    options: Mapping[str, str],
    trigger: Mapping[str, Any] | None = None,
    hook: PhaseHook | None = None,
) -> StreamingQuery:
    """Start ``df.writeStream.foreachBatch`` into ``sink``; one writer lives on the driver."""
    writer = sink.writer(hook)

    def write(batch: DataFrame, batch_id: int) -> None:
        if batch_id <= writer.committed_batch_id:
            return  # a replay of a committed batch: do not even compute it
        writer.write_batch(batch.toArrow(), batch_id, int(time.time() * 1000))

    stream = df.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint_location)
    for key, value in options.items():
        stream = stream.option(key, value)
    if trigger:
        stream = stream.trigger(**trigger)
    return stream.start()
