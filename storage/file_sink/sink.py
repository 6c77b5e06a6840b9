"""``FileSink``: the sink's settings (``SinkConfig``) and what is done with them.

* ``FileSink(path).start(streaming_df, checkpoint_location=...)``: a Spark query
  whose executors write the parts and whose driver commits each micro-batch;
* ``FileSink(path).write(df)``: a bounded pandas, Arrow or Spark DataFrame;
* ``FileSink(path).write_panes(result.panes)``: the panes of a pandas-runner
  run, one committed batch per ``step``;
* ``FileSink(path).writer()``: a ``SinkWriter`` that any loop feeds batch by
  batch with ``write_batch(table, batch_id, processing_time_ms)``;
* ``FileSink(path).compact()``: merge small finished parts.

``FileSink(path).read()`` returns the rows of the finished files.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

import pandas as pd

from .compaction import DEFAULT_TARGET_SIZE, Compacted, compact
from .config import SinkConfig
from .parts import PhaseHook
from .reading import finished_files, read
from .writer import DEFAULT_OWNER, SinkWriter, check_batch_arguments, to_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame as SparkDataFrame
    from pyspark.sql.streaming import StreamingQuery


def _is_spark(df: Any) -> bool:
    return type(df).__module__.startswith("pyspark.")


class FileSink(SinkConfig):
    """A rotating, exactly-once file sink; validated when built, so a bad value fails here."""

    def writer(self, hook: PhaseHook | None = None, take_over: bool = False) -> SinkWriter:
        """A writer restored from the newest commit record (recovery runs here); it holds the directory.

        A second writer of the same directory is refused while this one lives
        (``SinkHeldError``); ``take_over`` takes a dead one's place, fencing it off.
        """
        return SinkWriter(self, hook, take_over)

    def write(self, df: Any, batch_id: int | None = None, processing_time_ms: int | None = None) -> None:
        """Write a bounded DataFrame as one batch and finish every part (end of input).

        ``batch_id`` defaults to the one after the last committed; pass it to
        make a retried call a no-op. A Spark DataFrame is written by its
        executors (no row reaches the driver). To end a streaming query's
        output, use ``writer().finish(t)`` instead: a batch id after the
        stream's last would be skipped as a replay by the stream's next run.
        """
        writer = self.writer()
        try:
            bid = writer.committed_batch_id + 1 if batch_id is None else batch_id
            now = int(time.time() * 1000) if processing_time_ms is None else processing_time_ms
            check_batch_arguments("FileSink.write", bid, now)
            if not _is_spark(df):
                writer.write_batch(to_table(df), bid, now, end_of_input=True)
                return
            if bid <= writer.committed_batch_id:
                return
            from .spark import check_frame, write_with_tasks

            check_frame(self, df)
            # the batch's one processing time, the caller's or the call's, as a pandas frame's (the tasks took their
            # clocks', and a batch written across an hour went to two DateTimeBuckets hours)
            write_with_tasks(self, df, self.writer_id or DEFAULT_OWNER, bid, writer.lease, end_of_input=True,
                             processing_time_ms=now)
        finally:
            writer.close()

    def write_panes(
        self,
        panes: pd.DataFrame,
        step_column: str = "step",
        processing_time_ms: int | None = None,
        end_of_input: bool = True,
    ) -> int:
        """Write the panes of a pandas-runner run, one committed batch per step; the number written.

        ``panes`` is ``WindowedResult.panes`` of a ``TestStream`` run (or any
        frame with an integer ``step_column``); the rows of step ``s`` are
        committed as batch id ``s``, in step order, ``step`` column included.
        A step at or below the last committed one is skipped, so writing the
        same result again, or a longer run of the same stream, duplicates
        nothing. With ``end_of_input`` every part is finished after the last
        step, also when every step had been committed before.
        """
        if step_column not in panes.columns:
            raise ValueError(
                f"FileSink.write_panes: panes have no {step_column!r} column (columns: {list(panes.columns)}); "
                "pass the panes of a TestStream run, or write a bounded result with write(df)"
            )
        steps = panes[step_column]
        if not pd.api.types.is_integer_dtype(steps):
            raise ValueError(
                f"FileSink.write_panes: {step_column!r} must hold non-negative integers (the batch ids), "
                f"got dtype {steps.dtype}"
            )
        bad = (steps.isna() | (steps.fillna(0) < 0)).to_numpy(dtype=bool)
        if bad.any():
            row = int(bad.argmax())
            raise ValueError(
                f"FileSink.write_panes: {step_column!r} must hold non-negative integers (the batch ids), "
                f"got {steps.iloc[row]} at row {row}; nothing was written"
            )
        writer = self.writer()
        written = 0
        try:
            now = int(time.time() * 1000) if processing_time_ms is None else processing_time_ms
            order = sorted(set(steps.tolist()))
            for i, step in enumerate(order):
                rows = panes[steps.to_numpy() == step].reset_index(drop=True)
                last = end_of_input and i == len(order) - 1
                written += writer.write_batch(rows, int(step), now, end_of_input=last)
            if end_of_input:
                writer.finish(now)  # parts left open by an earlier call that committed the last step
        finally:
            writer.close()
        return written

    def start(
        self,
        df: SparkDataFrame,
        checkpoint_location: str,
        trigger: Mapping[str, Any] | None = None,
        hook: PhaseHook | None = None,
        take_over: bool = False,
        api: str = "auto",
        **options: str,
    ) -> StreamingQuery:
        """Start a Spark streaming query writing ``df`` here, committed by Spark's batch id.

        The executors write the parts; the driver commits each micro-batch. ``trigger``
        goes to ``writeStream.trigger``; a bounded one (``{"availableNow": True}``,
        ``{"once": True}``) finishes every part at each commit, so all committed rows
        are readable when the query ends. ``options`` go to ``writeStream.option``;
        ``api`` chooses ``"data_source"`` (pyspark 4.1+) or ``"foreach_batch"`` (the
        default, ``"auto"``, takes the first where it exists); ``hook`` is the
        crash-test seam, called in the tasks and in the commit.
        """
        from .spark import start_query

        return start_query(self, df, checkpoint_location, options, trigger, hook, take_over, api)

    def compact(self, target_size: int = DEFAULT_TARGET_SIZE, spark: Any = None, take_over: bool = False
                ) -> Compacted:
        """Merge small finished parts of each bucket into parts of up to ``target_size`` bytes, in one commit.

        It holds the directory while it runs (run it between a query's runs); with ``spark``,
        Spark tasks merge the parts. ``FileSink.read()`` sees the same rows before and after.
        """
        return compact(self, target_size, spark, take_over)

    # ------------------------------------------------------------- reading

    def finished_files(self) -> list[str]:
        """Finished part files in bucket and part order; hidden and in-progress files excluded."""
        return finished_files(self)

    def read(self) -> pd.DataFrame:
        """The rows of every finished file, decrypted (authenticated), decompressed, checked against the commit.

        A part that is not as committed (damaged, truncated, appended to, missing)
        raises an error naming it; a path that does not exist raises ``FileNotFoundError``.
        """
        return read(self)
