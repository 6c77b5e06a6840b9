"""``FileSink``: the frozen configuration, its builder steps and its uses.

* ``FileSink(path).start(streaming_df, checkpoint_location=...)``: a Spark query;
* ``FileSink(path).write(df)``: a bounded pandas, Arrow or Spark DataFrame;
* ``FileSink(path).write_panes(result.panes)``: the panes of a pandas-runner
  run, one committed batch per ``step``;
* ``FileSink(path).writer()``: a ``SinkWriter`` that any loop feeds batch by
  batch with ``write_batch(table, batch_id, processing_time_ms)``.

``FileSink(path).read()`` returns the rows of the finished files.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pandas as pd
from fsspec.core import url_to_fs

from .buckets import BasePathBuckets, BucketAssigner
from .codec import AES_KEY_BYTES, ROW_CODECS, decompress, unseal
from .formats import BULK_CODECS, FORMATS, Format
from .rolling import RollingPolicy
from .writer import PhaseHook, SinkWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame as SparkDataFrame
    from pyspark.sql.streaming import StreamingQuery

# Flink's DefaultRollingPolicy: 128 MiB, one minute open, one minute idle.
DEFAULT_ROW_POLICY = RollingPolicy(max_part_size=128 * 1024 * 1024, rollover_ms=60_000, inactivity_ms=60_000)
# Filesystems whose files can be opened for append (the rest get a part per batch).
APPENDABLE_PROTOCOLS = frozenset({"file", "local", "memory"})


@dataclass(frozen=True)
class FileSink:
    """A rotating, exactly-once file sink; validated when built, so a bad value fails here."""

    path: str
    format: str = "jsonl"
    compression: str | None = None
    key: bytes | None = field(default=None, repr=False)
    encryption: str | None = None
    buckets: BucketAssigner = BasePathBuckets()
    rolling_policy: RollingPolicy | None = None
    prefix: str = "part"
    suffix: str | None = None
    part_name: Callable[[str, int], str] | None = None
    writer_id: str | None = None
    max_open_files: int = 100
    expire_after_ms: int | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"FileSink format={self.format!r} is unknown; choose one of {sorted(FORMATS)}")
        bulk = FORMATS[self.format].bulk
        codecs = BULK_CODECS[self.format] if bulk else tuple(ROW_CODECS)
        if self.compression is not None and self.compression not in codecs:
            raise ValueError(
                f"FileSink compression={self.compression!r} is unknown for format {self.format!r}; "
                f"choose one of {list(codecs)} or None"
            )
        if self.encryption not in (None, "aes-gcm"):
            raise ValueError(f"FileSink encryption={self.encryption!r} is unknown; the only choice is 'aes-gcm'")
        if self.encryption and self.key is None:
            raise ValueError("FileSink encryption='aes-gcm' needs a key; pass with_encryption(key=...)")
        if self.key is not None and not isinstance(self.key, bytes):
            kind = type(self.key).__name__
            raise ValueError(f"FileSink key must be bytes, got {kind}; an AES key is 16, 24 or 32 bytes")
        if self.key is not None and len(self.key) not in AES_KEY_BYTES:
            raise ValueError(f"FileSink key has length {len(self.key)}; an AES key is 16, 24 or 32 bytes")
        if self.key is not None and not self.encryption:
            raise ValueError("FileSink key is set but encryption=None; use with_encryption(key) to encrypt")
        if isinstance(self.max_open_files, bool) or not isinstance(self.max_open_files, int) or self.max_open_files < 1:
            raise ValueError(f"FileSink max_open_files={self.max_open_files!r} must be a positive integer")
        expiry = self.expire_after_ms
        if expiry is not None and (isinstance(expiry, bool) or not isinstance(expiry, int) or expiry <= 0):
            raise ValueError(f"FileSink expire_after_ms={expiry!r} must be a positive integer or None")
        for name in ("prefix", "writer_id"):
            value = getattr(self, name)
            if value is not None and (not value or not re.fullmatch(r"[A-Za-z0-9_\-]+", value) or value[0] in "._"):
                raise ValueError(
                    f"FileSink {name}={value!r} must be letters, digits, '-' or '_', not starting with '.' or '_' "
                    "(readers skip such files)"
                )
        if self.suffix is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]*", self.suffix):
            raise ValueError(
                f"FileSink suffix={self.suffix!r} must be letters, digits, '.', '-' or '_'; "
                "a '/' would make the part's name a directory"
            )
        policy = self.rolling
        if (bulk or not self.appendable) and not (policy.every_batch and policy.max_batches is None):
            reason = f"format {self.format!r} cannot be appended to" if bulk else f"{self.path!r} cannot be appended to"
            raise ValueError(
                f"FileSink rolling_policy={policy!r}: {reason}; use RollingPolicy.on_every_batch() "
                "(size or time limits may be added to it)"
            )

    # ----------------------------------------------------------- derived

    @property
    def file_format(self) -> Format:
        """The format object that encodes and decodes part files."""
        return FORMATS[self.format]()

    @property
    def rolling(self) -> RollingPolicy:
        """The policy in force: the configured one, else Flink's defaults (every batch for bulk formats)."""
        if self.rolling_policy is not None:
            return self.rolling_policy
        if FORMATS[self.format].bulk or not self.appendable:
            return RollingPolicy.on_every_batch()
        return DEFAULT_ROW_POLICY

    @property
    def appendable(self) -> bool:
        """True when the filesystem can append to a file (local disk, memory)."""
        fs, _ = url_to_fs(self.path, **dict(self.storage_options))
        proto = fs.protocol
        return bool(APPENDABLE_PROTOCOLS.intersection((proto,) if isinstance(proto, str) else proto))

    def part_file_name(self, writer_id: str, number: int) -> str:
        """``<prefix>-<writer id>-<part number><suffix>``, or the user's function."""
        if self.part_name is not None:
            name = self.part_name(writer_id, number)
            if not isinstance(name, str) or not name or "/" in name or name[0] in "._":
                raise ValueError(
                    f"FileSink part name fn gave {name!r} for part {number}; a part name is a non-empty str "
                    "without '/', not starting with '.' or '_' (readers skip such files)"
                )
            return name
        suffix = self.suffix
        if suffix is None:
            bulk = FORMATS[self.format].bulk
            suffix = self.file_format.suffix + ("" if bulk or not self.compression else ROW_CODECS[self.compression])
        return f"{self.prefix}-{writer_id}-{number}{suffix}"

    # ------------------------------------------------------ builder steps

    def with_format(self, format: str) -> FileSink:
        """Choose ``jsonl``, ``csv``, ``text``, ``parquet``, ``orc`` or ``avro``."""
        return dataclasses.replace(self, format=format)

    def with_compression(self, codec: str | None) -> FileSink:
        """Compress part files: per flush for row formats, inside the file for bulk formats."""
        return dataclasses.replace(self, compression=codec)

    def with_encryption(self, key: bytes) -> FileSink:
        """Encrypt with AES-GCM, one authenticated segment per flush."""
        return dataclasses.replace(self, encryption="aes-gcm", key=key)

    def with_buckets(self, assigner: BucketAssigner) -> FileSink:
        """Choose the bucket (sub-directory) of each row."""
        return dataclasses.replace(self, buckets=assigner)

    def with_rolling_policy(self, policy: RollingPolicy) -> FileSink:
        """Choose when in-progress parts are rolled."""
        return dataclasses.replace(self, rolling_policy=policy)

    def with_part_names(
        self, prefix: str = "part", suffix: str | None = None, fn: Callable[[str, int], str] | None = None
    ) -> FileSink:
        """Name parts ``<prefix>-<writer id>-<n><suffix>``, or by ``fn(writer_id, n)``."""
        return dataclasses.replace(self, prefix=prefix, suffix=suffix, part_name=fn)

    def with_writer_id(self, writer_id: str) -> FileSink:
        """Fix the writer id (else a random one, kept in the commit record)."""
        return dataclasses.replace(self, writer_id=writer_id)

    def with_open_files(self, max_open_files: int, expire_after_ms: int | None = None) -> FileSink:
        """Bound the cache of open part streams; evicted streams are closed, their parts stay open."""
        return dataclasses.replace(self, max_open_files=max_open_files, expire_after_ms=expire_after_ms)

    # ------------------------------------------------------------- running

    def writer(self, hook: PhaseHook | None = None) -> SinkWriter:
        """A writer restored from the newest commit record (recovery runs here)."""
        return SinkWriter(self, hook)

    def write(self, df: Any, batch_id: int | None = None, processing_time_ms: int | None = None) -> None:
        """Write a bounded DataFrame as one batch and finish every part (end of input).

        ``batch_id`` defaults to the one after the last committed; pass it to
        make a retried call a no-op. To end a streaming query's output, use
        ``writer().finish(t)`` instead: a batch id after the stream's last would be
        skipped as a replay by the stream's next run.
        """
        from .spark import to_arrow

        writer = self.writer()
        try:
            bid = writer.committed_batch_id + 1 if batch_id is None else batch_id
            now = int(time.time() * 1000) if processing_time_ms is None else processing_time_ms
            writer.write_batch(to_arrow(df), bid, now, end_of_input=True)
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
        if not pd.api.types.is_integer_dtype(steps) or (len(steps) and steps.min() < 0):
            raise ValueError(
                f"FileSink.write_panes: {step_column!r} must hold non-negative integers (the batch ids), "
                f"got dtype {steps.dtype}"
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
        **options: str,
    ) -> StreamingQuery:
        """Start a Spark streaming query writing ``df`` here, committed by Spark's batch id.

        ``trigger`` goes to ``writeStream.trigger`` (e.g. ``{"availableNow": True}``),
        ``options`` to ``writeStream.option``; ``hook`` is the crash-test seam.
        """
        from .spark import start_query

        return start_query(self, df, checkpoint_location, options, trigger, hook)

    # ------------------------------------------------------------- reading

    def finished_files(self) -> list[str]:
        """Finished part files in bucket and part order; hidden and in-progress files excluded."""
        fs, root = url_to_fs(self.path, **dict(self.storage_options))
        if not fs.exists(root):
            return []
        root = root.rstrip("/")
        found = [p for p in fs.find(root) if not any(s[:1] in "._" for s in p[len(root) + 1 :].split("/"))]
        return sorted(found, key=_natural)

    def read(self) -> pd.DataFrame:
        """The rows of every finished file, decrypted (authenticated) and decompressed."""
        fs, _ = url_to_fs(self.path, **dict(self.storage_options))
        fmt, bulk = self.file_format, FORMATS[self.format].bulk
        frames = []
        for path in self.finished_files():
            data = unseal(fs.cat_file(path), self.key)
            frames.append(fmt.decode(data if bulk else decompress(data, self.compression)))
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _natural(path: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]

