"""The exactly-once rotating file sink (issue 4); see docs/file_sink.md."""

from .buckets import BasePathBuckets, BucketAssigner, CallableBuckets, ColumnBuckets, DateTimeBuckets
from .codec import CorruptPartError
from .rolling import RollingPolicy
from .sink import FileSink
from .writer import SinkWriter

__all__ = [
    "BasePathBuckets",
    "BucketAssigner",
    "CallableBuckets",
    "ColumnBuckets",
    "CorruptPartError",
    "DateTimeBuckets",
    "FileSink",
    "RollingPolicy",
    "SinkWriter",
]
