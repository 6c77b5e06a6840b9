"""Bucket assigners: which sub-directory of the base path a row lands in.

Every assigner maps a whole Arrow table to one bucket id per row at once
(vectorized), because the sink sees micro-batches, never single rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pandas as pd
import pyarrow as pa


class BucketAssigner(Protocol):
    """Maps the rows of a batch to bucket ids ('' is the base path itself)."""

    def assign(self, table: pa.Table, processing_time_ms: int) -> list[str] | str:
        """One bucket id per row, or a single id for every row of the batch."""


def check_bucket_id(bucket: Any, assigner: BucketAssigner) -> None:
    """Refuse a bucket id that is not a directory below the base path that readers see."""
    refused = f"FileSink bucket id {bucket!r} from {type(assigner).__name__} is refused"
    if not isinstance(bucket, str):
        raise TypeError(f"{refused}: a bucket id is a str")
    for level in bucket.split("/") if bucket else []:
        if level in ("", ".", ".."):
            raise ValueError(f"{refused}: a level is {level!r}; a bucket id is '/'-separated directory names")
        if level[0] in "._":
            raise ValueError(f"{refused}: level {level!r} starts with {level[0]!r}, so readers would skip its rows")


@dataclass(frozen=True)
class BasePathBuckets:
    """Every part file directly under the base path (one bucket)."""

    def assign(self, table: pa.Table, processing_time_ms: int) -> str:
        return ""


@dataclass(frozen=True)
class DateTimeBuckets:
    """Buckets named by time, Flink's ``yyyy-MM-dd--HH`` by default.

    ``column`` names the event-time column (timestamps, or integers in epoch
    milliseconds); ``None`` buckets by the batch's processing time instead.
    A null time fails the whole batch: no bucket would be right for it.
    """

    pattern: str = "%Y-%m-%d--%H"
    timezone: str = "UTC"
    column: str | None = None

    def __post_init__(self) -> None:
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(
                f"DateTimeBuckets timezone={self.timezone!r} is not a known IANA time zone; "
                "use a name such as 'UTC' or 'Europe/Berlin'"
            ) from exc
        if not self.pattern or "/" in self.pattern or ".." in self.pattern:
            raise ValueError(
                f"DateTimeBuckets pattern={self.pattern!r} must be a non-empty strftime pattern "
                "without '/' or '..'; a bucket is one directory level"
            )

    def assign(self, table: pa.Table, processing_time_ms: int) -> list[str] | str:
        if self.column is None:
            stamp = pd.Timestamp(processing_time_ms, unit="ms", tz="UTC")
            return stamp.tz_convert(self.timezone).strftime(self.pattern)
        col = table.column(self.column).to_pandas()
        if pd.api.types.is_numeric_dtype(col):
            col = pd.to_datetime(col, unit="ms", utc=True)
        else:
            col = pd.to_datetime(col, utc=True)
        nulls = int(col.isna().sum())
        if nulls:  # factorize would code them -1, and take(-1) the last bucket name
            raise ValueError(
                f"DateTimeBuckets column={self.column!r} has {nulls} null timestamp(s) in this batch; a row without "
                "a time has no bucket: fill or drop them, or bucket by processing time (column=None)"
            )
        # strftime per distinct second only: a batch has far fewer of them than rows.
        seconds = col.dt.floor("s")
        codes, uniques = pd.factorize(seconds)
        names = pd.DatetimeIndex(uniques).tz_convert(self.timezone).strftime(self.pattern)
        return list(pd.Index(names).take(codes))


# What Hive and Spark percent-escape in a partition directory name (Hive's FileUtils.escapePathName);
# their readers, and pyarrow's hive partitioning, decode it back.
HIVE_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x20)}


# What Hive and Spark write for a null or empty partition value, and read back as null (Spark refuses a
# ``k=`` directory with nothing after the ``=``).
HIVE_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def hive_escape(text: str) -> str:
    """``text`` as Hive and Spark write it in a partition directory name."""
    return "".join(f"%{ord(c):02X}" if c in HIVE_ESCAPED else c for c in text)


@dataclass(frozen=True)
class ColumnBuckets:
    """One bucket per distinct value of a column, named ``<column>=<value>``.

    The Hive-style name lets Spark and pyarrow readers rebuild the column:
    name and value are escaped as Hive escapes them ('/' as ``%2F``, ...), so
    a value can neither add directory levels nor hide its rows. A null or
    empty value is ``<column>=__HIVE_DEFAULT_PARTITION__``, which Spark and
    pyarrow read back as null.
    """

    column: str

    def __post_init__(self) -> None:
        if not self.column or self.column[0] in "._":
            raise ValueError(
                f"ColumnBuckets column={self.column!r} would name directories that readers skip "
                "(empty, or starting with '.' or '_'); bucket by another column, or rename it"
            )

    def assign(self, table: pa.Table, processing_time_ms: int) -> list[str]:
        texts = [None if v is None else str(v) for v in table.column(self.column).to_pylist()]
        prefix = f"{hive_escape(self.column)}="
        # Escape each distinct value once; a null or empty one gets Hive's null name.
        names = {text: prefix + (hive_escape(text) if text else HIVE_NULL_PARTITION) for text in set(texts)}
        return [names[text] for text in texts]


@dataclass(frozen=True)
class CallableBuckets:
    """A user function ``(row: dict, processing_time_ms) -> bucket id`` per row."""

    fn: Callable[[dict, int], str]

    def assign(self, table: pa.Table, processing_time_ms: int) -> list[str]:
        return [str(self.fn(row, processing_time_ms)) for row in table.to_pylist()]
