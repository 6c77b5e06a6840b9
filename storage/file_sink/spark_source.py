"""The file sink as a Python data source of pyspark 4.1 and later: ``df.writeStream.format(<its name>)``.

Spark pickles the source class (with the sink's settings on it) to the tasks,
whose ``write`` writes their partition (``tasks.py``) and returns the report as
the commit message; Spark passes the messages of the attempts that won to
``commit``, which runs in a Python process on the driver (``commit.py``).
Only imported where ``DataSourceStreamArrowWriter`` exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from .commit import commit_batch, discard_after_failed_commit, fenced_lease, now_ms
from .config import SinkConfig
from .parts import PhaseHook
from .tasks import TaskReport, describe_task_context, write_task


@dataclass
class ReportMessage(WriterCommitMessage):
    """A task's report, as the commit message Spark hands to the driver."""

    report: str


class FileSinkSource(DataSource):
    """A file sink's streaming writer; ``register_source`` makes a subclass holding one sink's settings."""

    # (sink, lease fence, bounded, hook) in a tuple: a function as a class attribute would become a method.
    settings: tuple[SinkConfig, tuple[int, str], bool, PhaseHook]
    source_name: str

    @classmethod
    def name(cls) -> str:
        return cls.source_name

    def streamWriter(self, schema: Any, overwrite: bool) -> FileSinkStreamWriter:
        return FileSinkStreamWriter(*self.settings)


class FileSinkStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, sink: SinkConfig, fence: tuple[int, str], bounded: bool, hook: PhaseHook) -> None:
        self.sink, self.fence, self.bounded, self.hook = sink, fence, bounded, hook

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ReportMessage:
        task = describe_task_context(TaskContext.get(), now_ms())
        return ReportMessage(write_task(self.sink, task, iterator, self.bounded, self.hook).to_json())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        reports = [TaskReport.from_json(m.report) for m in messages if isinstance(m, ReportMessage)]
        commit_batch(self.sink, batchId, reports, fenced_lease(self.sink, self.fence), now_ms(), self.bounded,
                     self.hook)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        reports = [TaskReport.from_json(m.report) for m in messages if isinstance(m, ReportMessage)]
        discard_after_failed_commit(self.sink, reports)


def register_source(spark: Any, sink: SinkConfig, fence: tuple[int, str], bounded: bool, hook: PhaseHook) -> str:
    """Register a data source writing into ``sink`` under the lease ``fence``; its format name."""
    name = f"file_sink_{uuid.uuid4().hex[:12]}"
    source = type("FileSinkSource_" + name, (FileSinkSource,),
                  {"settings": (sink, fence, bounded, hook), "source_name": name})
    spark.dataSource.register(source)
    return name
