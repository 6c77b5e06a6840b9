"""The exactly-once rotating file sink (issue 4); see docs/file_sink.md."""

from .buckets import BasePathBuckets, BucketAssigner, CallableBuckets, ColumnBuckets, DateTimeBuckets
from .errors import (
    CommittedPartMissingError,
    CorruptPartError,
    DamagedCommitRecordError,
    SinkFencedError,
    SinkHeldError,
)
from .rolling import RollingPolicy
from .sink import FileSink
from .writer import SinkWriter

__all__ = [
    "BasePathBuckets",
    "BucketAssigner",
    "CallableBuckets",
    "ColumnBuckets",
    "CommittedPartMissingError",
    "CorruptPartError",
    "DamagedCommitRecordError",
    "DateTimeBuckets",
    "FileSink",
    "RollingPolicy",
    "SinkFencedError",
    "SinkHeldError",
    "SinkWriter",
]
