"""``SinkConfig``: the file sink's frozen, validated settings and their builder steps.

``FileSink`` (``sink.py``) adds what is done with them; the modules that write,
commit and read take the settings from here, so none of them imports ``sink.py``.
"""

from __future__ import annotations

import dataclasses
import io
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar

import pyarrow as pa
from fsspec.core import url_to_fs

from .._fs import absolute_if_local
from .._units import Seconds, is_whole_number, parse_seconds
from .buckets import BasePathBuckets, BucketAssigner
from .codec import AES_KEY_BYTES, ROW_CODECS
from .formats import BULK_CODECS, FORMATS, Format
from .rolling import RollingPolicy

Self = TypeVar("Self", bound="SinkConfig")

# Flink's DefaultRollingPolicy: 128 MiB, one minute open, one minute idle.
DEFAULT_ROW_POLICY = RollingPolicy(max_part_size=128 * 1024 * 1024, rollover_ms=60_000, inactivity_ms=60_000)
# Filesystems whose files can be opened for append (the rest get a part per batch).
APPENDABLE_PROTOCOLS = frozenset({"file", "local", "memory"})


#: The endings of default part names, and the format and row compression they say a part was written with.
_WRITTEN_BY_ENDING: dict[str, tuple[str, str | None]] = {
    FORMATS[fmt].suffix + ending: (fmt, codec)
    for fmt in FORMATS
    for codec, ending in ([(None, "")] + ([] if FORMATS[fmt].bulk else list(ROW_CODECS.items())))
}


@dataclass(frozen=True)
class SinkConfig:
    """A rotating, exactly-once file sink's settings; validated when built, so a bad value fails here."""

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
    lease_seconds: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():  # "" would be the working directory, recovered
            raise ValueError(f"FileSink path={self.path!r} must be a directory's path or URL, a non-empty str")
        object.__setattr__(self, "path", absolute_if_local(self.path))  # executors resolved a relative one elsewhere
        self._check_parts()
        if not isinstance(self.format, str) or self.format not in FORMATS:  # a list failed as unhashable
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
        for name in ("max_open_files", "expire_after_ms"):
            if is_whole_number(getattr(self, name)):  # a NumPy integer (read from a settings table) is one
                object.__setattr__(self, name, int(getattr(self, name)))
        if isinstance(self.max_open_files, bool) or not isinstance(self.max_open_files, int) or self.max_open_files < 1:
            raise ValueError(f"FileSink max_open_files={self.max_open_files!r} must be a positive integer")
        expiry = self.expire_after_ms
        if expiry is not None and (isinstance(expiry, bool) or not isinstance(expiry, int) or expiry <= 0):
            raise ValueError(f"FileSink expire_after_ms={expiry!r} must be a positive integer or None")
        for name in ("prefix", "writer_id"):
            value = getattr(self, name)
            if value is None and (name == "writer_id" or self.part_name is not None):
                continue  # a random writer id; a prefix the part-name function does without
            if not isinstance(value, str):  # a prefix None named parts "None-<writer id>-0.jsonl"
                raise ValueError(f"FileSink {name}={value!r} must be a str of letters, digits, '-' or '_'")
            if not re.fullmatch(r"[A-Za-z0-9_\-]+", value) or value[0] in "._":
                raise ValueError(
                    f"FileSink {name}={value!r} must be letters, digits, '-' or '_', not starting with '.' or '_' "
                    "(readers skip such files)"
                )
        suffix = self.suffix
        if suffix is not None and (not isinstance(suffix, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]*", suffix)):
            raise ValueError(
                f"FileSink suffix={self.suffix!r} must be letters, digits, '.', '-' or '_'; "
                "a '/' would make the part's name a directory"
            )
        # seconds or a timedelta, as the key-value store's lease
        object.__setattr__(self, "lease_seconds", parse_seconds("FileSink lease_seconds", self.lease_seconds, positive=True))
        policy = self.rolling
        if (bulk or not self.appendable) and not (policy.every_batch and policy.max_batches is None):
            reason = f"format {self.format!r} cannot be appended to" if bulk else f"{self.path!r} cannot be appended to"
            raise ValueError(
                f"FileSink rolling_policy={policy!r}: {reason}; use RollingPolicy.on_every_batch() "
                "(size or time limits may be added to it)"
            )

    def _check_parts(self) -> None:
        """The builder steps' objects are of their kinds: a wrong one failed only when a batch was written."""
        if not callable(getattr(self.buckets, "assign", None)):
            raise ValueError(
                f"FileSink buckets={self.buckets!r} must be a bucket assigner: BasePathBuckets(), "
                "ColumnBuckets(column), DateTimeBuckets(...) or CallableBuckets(fn)"
            )
        if self.rolling_policy is not None and not isinstance(self.rolling_policy, RollingPolicy):
            raise ValueError(f"FileSink rolling_policy={self.rolling_policy!r} must be a RollingPolicy(...)")
        if self.part_name is not None and not callable(self.part_name):
            raise ValueError(f"FileSink part name fn={self.part_name!r} must be a function (writer_id, number) -> str")

    # ----------------------------------------------------------- derived

    def as_written(self: Self, path: str) -> Self:
        """The settings that decode the finished part at ``path``: with the default part names its name ends in the
        suffix of the format, and of a row format's compression, it was written with (parts finished before the
        settings changed keep theirs, so a directory may hold both: a CSV read of a JSON lines part gave rows of
        garbage); this config itself where the name tells nothing else."""
        if self.suffix is not None or self.part_name is not None:
            return self
        name = path.rsplit("/", 1)[-1]
        endings = [(len(ending), fmt, codec) for ending, (fmt, codec) in _WRITTEN_BY_ENDING.items() if name.endswith(ending)]
        if not endings:
            return self
        _, fmt, codec = max(endings)
        if fmt == self.format and (FORMATS[fmt].bulk or codec == self.compression):
            return self
        return dataclasses.replace(self, format=fmt, compression=codec, rolling_policy=None)

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

    def check_bucket_column(self, schema: pa.Schema) -> None:
        """Refuse a batch without the column its buckets are chosen by, naming both (pyarrow's KeyError did not)."""
        column = getattr(self.buckets, "column", None)
        if column is not None and column not in schema.names:
            raise ValueError(
                f"{type(self.buckets).__name__} column={column!r} is not a column of the DataFrame "
                f"(columns: {schema.names})"
            )

    def check_schema(self, schema: pa.Schema) -> None:
        """Refuse, before any row is written, what a batch of ``schema`` would fail on in every task: a bucket
        column that is missing or of a type its buckets refuse, a column the format cannot hold (by bucketing
        and writing none of its rows)."""
        self.check_bucket_column(schema)
        empty = schema.empty_table()
        self.buckets.assign(empty, 0)
        fmt = self.file_format
        if not fmt.bulk:
            fmt.encode(empty)
            return
        writer = fmt.open_writer(io.BytesIO(), None)
        writer.write(empty)
        writer.close()

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

    def with_format(self: Self, format: str) -> Self:
        """Choose ``jsonl``, ``csv``, ``text``, ``parquet``, ``orc`` or ``avro``."""
        return dataclasses.replace(self, format=format)

    def with_compression(self: Self, codec: str | None) -> Self:
        """Compress part files: per flush for row formats, inside the file for bulk formats."""
        return dataclasses.replace(self, compression=codec)

    def with_encryption(self: Self, key: bytes) -> Self:
        """Encrypt with AES-GCM, one authenticated segment per flush."""
        return dataclasses.replace(self, encryption="aes-gcm", key=key)

    def with_buckets(self: Self, assigner: BucketAssigner) -> Self:
        """Choose the bucket (sub-directory) of each row."""
        return dataclasses.replace(self, buckets=assigner)

    def with_rolling_policy(self: Self, policy: RollingPolicy) -> Self:
        """Choose when in-progress parts are rolled."""
        return dataclasses.replace(self, rolling_policy=policy)

    def with_part_names(
        self: Self, prefix: str = "part", suffix: str | None = None, fn: Callable[[str, int], str] | None = None
    ) -> Self:
        """Name parts ``<prefix>-<writer id>-<n><suffix>``, or by ``fn(writer_id, n)``."""
        return dataclasses.replace(self, prefix=prefix, suffix=suffix, part_name=fn)

    def with_writer_id(self: Self, writer_id: str) -> Self:
        """Fix the writer id (else a random one, kept in the commit record)."""
        return dataclasses.replace(self, writer_id=writer_id)

    def with_open_files(self: Self, max_open_files: int, expire_after_ms: int | None = None) -> Self:
        """Bound the cache of open part streams; evicted streams are closed, their parts stay open."""
        return dataclasses.replace(self, max_open_files=max_open_files, expire_after_ms=expire_after_ms)

    def with_lease(self: Self, seconds: Seconds) -> Self:
        """How long a writer's hold on the directory lasts without renewal (it renews while it writes)."""
        return dataclasses.replace(self, lease_seconds=seconds)

    @property
    def fs_and_root(self) -> tuple[Any, str]:
        """The fsspec filesystem and the base path on it, without a trailing '/'."""
        fs, root = url_to_fs(self.path, **dict(self.storage_options))
        return fs, root.rstrip("/")
