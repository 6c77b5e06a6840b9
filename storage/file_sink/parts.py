"""The part files of one writer: rows in, in-progress parts appended, rolled parts pending their commit.

A writer is a ``SinkWriter`` (one per directory, batch after batch) or one
attempt of a Spark task (its partition of one micro-batch). Either way it
assigns each row its bucket, encodes it, appends it to the bucket's open part
and rolls parts as the policy says; committing is its owner's job.

Row formats append one self-contained segment per flush (``codec.py``). Bulk
formats write a whole file per part, streamed through the format's writer:
the bytes go out in segments of ``SPILL_BYTES`` (each sealed when encrypted),
so a part never has to fit in memory.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from .buckets import check_bucket_id
from .codec import compress, decompress, seal, unseal
from .config import SinkConfig
from .directory import SinkDirectory
from .formats import BulkWriter
from .part_schemas import SchemaBook, widened
from .rolling import PartStats
from .state import PartRecord

# A test seam: called with (phase, batch_id) at "before_claim" and "task_started" (a Spark task, before and
# after it decides which parts it goes on with), "mid_write", "after_staging", "after_commit_record" and "mid_rename", so crash tests can
# stop the process there.
PhaseHook = Callable[[str, int], None]
#: Rows buffered for a part before they are appended as one segment (a flush), and bulk-file bytes kept
#: before they go out: what one open part holds in memory.
FLUSH_BYTES = 16 * 1024 * 1024
SPILL_BYTES = 64 * 1024 * 1024
#: Rows of a bulk part gathered before they are written as one row group (stripe, block).
ROW_GROUP_BYTES = 64 * 1024 * 1024

#: Gives a bucket's next part: its number, in-progress path and final path, in a directory that exists.
PartNamer = Callable[[str], tuple[int, str, str]]


def no_hook(phase: str, batch_id: int) -> None:
    """The hook of a writer no test stops."""


class SpillingOutput:
    """A part file's byte sink: segments of ``spill_bytes`` (``SPILL_BYTES`` unless given) go to the part's file
    as they fill.

    Each segment is compressed with ``compression`` (a row format's codec; a bulk
    format compresses inside the file) and, encrypted, sealed, the last one with
    the final flag. A part that never fills a segment is uploaded whole when it
    is closed (one call).
    """

    def __init__(self, fs: Any, path: str, key: bytes | None, compression: str | None = None,
                 spill_bytes: int | None = None) -> None:
        self._fs, self._path, self._key = fs, path, key
        self._compression, self._spill_bytes = compression, SPILL_BYTES if spill_bytes is None else spill_bytes
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._position = 0  # plaintext bytes written, which the format's writer asks for
        self._handle: Any = None
        self.segments = 0
        self.length = 0  # bytes on disk
        self.crc = 0  # their CRC-32
        self.closed = False

    def write(self, data: Any) -> int:
        if self.closed:  # given up: what the format's writer still writes when it is collected goes nowhere
            return len(data)
        data = bytes(data)
        self._chunks.append(data)
        self._buffered += len(data)
        self._position += len(data)
        if self._buffered >= self._spill_bytes:
            self._emit(final=False)
        return len(data)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        """Called by the format's writer: bytes go out by segments, not on its flushes."""

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def _emit(self, final: bool) -> None:
        data = b"".join(self._chunks)
        segment = seal(compress(data, self._compression) if data else b"", self._key, self.segments, final)
        self._chunks, self._buffered = [], 0
        self.segments += 1
        self.length += len(segment)
        self.crc = zlib.crc32(segment, self.crc)
        if final and self._handle is None:
            self._fs.pipe_file(self._path, segment)
            return
        if self._handle is None:
            self._handle = self._fs.open(self._path, "wb")
        self._handle.write(segment)

    def finish(self) -> None:
        self._emit(final=True)
        if self._handle is not None:
            self._handle.close()
        self.closed = True

    def abandon(self) -> None:
        """Give the part up unfinished (its batch failed): its file is closed as a dead process's would be."""
        self.closed = True
        self._chunks, self._buffered = [], 0
        if self._handle is not None:
            self._handle.close()


@dataclass
class _Part:
    record: PartRecord
    pending: list[bytes] = field(default_factory=list)
    pending_bytes: int = 0
    wrote_this_batch: bool = False
    bulk: BulkWriter | None = None
    output: SpillingOutput | None = None
    tables: list[pa.Table] = field(default_factory=list)  # a bulk part's rows not yet written
    tables_bytes: int = 0
    header: bytes | None = None  # a row format's header (CSV's column names); None: adopted, not read yet

    def stats(self) -> PartStats:
        r = self.record
        written = self.output.tell() if self.output is not None else r.length
        return PartStats(written + self.pending_bytes + self.tables_bytes, r.batches, r.created_ms, r.last_write_ms)


class PartFiles:
    """The open parts of one writer, one per bucket, and the parts it rolled since its last commit."""

    def __init__(self, config: SinkConfig, directory: SinkDirectory, namer: PartNamer, hook: PhaseHook = no_hook,
                 slot: str = "") -> None:
        self.config, self.directory, self._namer, self._hook, self.slot = config, directory, namer, hook, slot
        self._format = config.file_format
        self._bulk = config.file_format.bulk
        self.parts: dict[str, _Part] = {}
        self.pending: list[tuple[str, str, int, int, str]] = []  # rolled: in-progress, final, length, CRC, schema
        self.schemas = SchemaBook()  # the texts of the schemas its parts name
        self.unsynced_files: set[str] = set()
        self.unsynced_dirs: set[str] = set()
        self._handles: OrderedDict[str, Any] = OrderedDict()
        self._handle_used_ms: dict[str, int] = {}
        self._now = 0

    def adopt(self, records: list[PartRecord], schemas: dict[str, str]) -> None:
        """Go on appending to committed in-progress parts, of the schemas named in ``schemas``."""
        self.schemas.texts.update(schemas)
        for record in records:
            self.parts[record.bucket] = _Part(record)

    def start_batch(self, now: int) -> None:
        self._now = now
        self.pending = []
        self.unsynced_files.clear()
        self.unsynced_dirs.clear()

    # ------------------------------------------------------------------ writing

    def write(self, data: pa.Table, now: int, batch_id: int) -> None:
        """Append ``data``'s rows to their buckets' parts, rolling parts that fill up."""
        refuse_duplicate_columns(data.column_names)
        refuse_rows_without_columns(data.num_rows, data.num_columns)
        self._now = now
        groups = _group(self.config.buckets.assign(data, now) if data.num_rows else "", data.num_rows)
        limit = self.directory.name_limit
        for bucket, _ in groups:
            check_bucket_id(bucket, self.config.buckets, limit)
        for bucket, rows in groups:
            table = data if rows is None else data.take(pa.array(rows))
            if self._bulk:
                self._write_bulk(bucket, table, now, batch_id)
            else:
                self._write_rows(bucket, table, now, batch_id)

    def _write_bulk(self, bucket: str, table: pa.Table, now: int, batch_id: int) -> None:
        part = self.parts.get(bucket) or self._open_part(bucket, table, now)
        part.tables.append(table)
        part.tables_bytes += table.nbytes
        part.wrote_this_batch = True
        part.record.last_write_ms = now
        if part.tables_bytes >= ROW_GROUP_BYTES:
            self._write_tables(part)
        if self.config.rolling.roll_on_write(part.stats()):
            self.roll(part, batch_id)

    def _write_tables(self, part: _Part) -> None:
        """A bulk part's gathered rows as one row group (stripe, block)."""
        if not part.tables:
            return
        assert part.bulk is not None
        part.bulk.write(pa.concat_tables(part.tables) if len(part.tables) > 1 else part.tables[0])
        part.tables, part.tables_bytes = [], 0

    def _write_rows(self, bucket: str, table: pa.Table, now: int, batch_id: int) -> None:
        body, ends = self._format.encode(table)
        header = self._format.header(table)
        part = self.parts.get(bucket)
        if header and part is not None and self._header_of(part) != header:
            self.roll(part, batch_id)  # under the part's header its columns' values would be read as other columns
        elif part is not None and self._schema_with(part, table.schema) is None:
            self.roll(part, batch_id)  # no type holds the part's values and these: read back, one would be wrong
        limit = self.config.rolling.max_part_size
        start, row = 0, 0
        while row < len(ends):
            part = self.parts.get(bucket) or self._open_part(bucket, table, now)
            part.record.schema = self._schema_with(part, table.schema) or ""
            stop = len(ends)
            if limit is not None:
                room = limit - part.stats().size
                stop = max(int(np.searchsorted(ends, start + room, side="right")), row + 1)
            chunk = body[start : int(ends[stop - 1])]
            part.pending.append(chunk)
            part.pending_bytes += len(chunk)
            part.wrote_this_batch = True
            part.record.last_write_ms = now
            start, row = int(ends[stop - 1]), stop
            if self.config.rolling.roll_on_write(part.stats()):
                self.roll(part, batch_id)
            elif part.pending_bytes >= FLUSH_BYTES:
                self.flush(part, batch_id)

    def _open_part(self, bucket: str, table: pa.Table, now: int) -> _Part:
        number, temp, final = self._namer(bucket)
        levels = bucket.split("/") if bucket else []
        for depth in range(len(levels) + 1):
            self.unsynced_dirs.add("/".join([self.directory.root, *levels[:depth]]))
        schema = self.schemas.name(table.schema)
        part = _Part(PartRecord(bucket, number, temp, final, 0, 0, now, now, 0, self.slot, schema=schema))
        if self._bulk:
            part.output = SpillingOutput(self.directory.fs, temp, self.config.key)
            part.bulk = self._format.open_writer(part.output, self.config.compression)
        else:
            part.header = self._format.header(table)
            part.pending, part.pending_bytes = ([part.header], len(part.header)) if part.header else ([], 0)
        self.parts[bucket] = part
        return part

    def _schema_with(self, part: _Part, rows: pa.Schema) -> str | None:
        """The digest of the part's schema once it holds ``rows`` too; None if no schema holds both, "" if the
        part's is unknown (adopted from a record before version 5: it stays so)."""
        if not part.record.schema:
            return ""
        schema = widened(self.schemas.schema(part.record.schema), rows.remove_metadata())
        return None if schema is None else self.schemas.name(schema)

    def _header_of(self, part: _Part) -> bytes:
        """The header a part was opened with; an adopted part's is read back from its committed bytes."""
        if part.header is None:
            rec, config = part.record, self.config
            data = self.directory.fs.cat_file(rec.path, start=0, end=rec.length) if rec.length else b""
            plain = decompress(unseal(data, config.key, finished=False), config.compression)
            part.header = self._format.header_of(plain)
        return part.header

    def flush(self, part: _Part, batch_id: int, final: bool = False) -> None:
        """Append the part's buffered rows as one segment (and the final one when rolling)."""
        if not part.pending and not (final and self.config.key is not None):
            return
        rec, config = part.record, self.config
        plain = compress(b"".join(part.pending), config.compression) if part.pending else b""
        segment = seal(plain, config.key, rec.segments, final)
        handle = self._handle(rec.path, batch_id)
        handle.write(segment)
        handle.flush()
        self.unsynced_files.add(rec.path)
        rec.length += len(segment)
        rec.segments += 1
        rec.crc = zlib.crc32(segment, rec.crc)
        part.pending, part.pending_bytes = [], 0
        self._hook("mid_write", batch_id)

    def roll(self, part: _Part, batch_id: int) -> None:
        """Close the part: it becomes pending, renamed to its final name once its batch is committed."""
        rec = part.record
        if part.bulk is not None and part.output is not None:
            self._write_tables(part)
            part.bulk.close()
            part.output.finish()
            rec.length, rec.segments, rec.crc = part.output.length, part.output.segments, part.output.crc
            self.unsynced_files.add(rec.path)
            self._hook("mid_write", batch_id)
        else:
            self.flush(part, batch_id, final=True)
            self._close_handle(rec.path)
        del self.parts[rec.bucket]
        self.pending.append((rec.path, rec.final_path, rec.length, rec.crc, rec.schema))

    def end_batch(self, now: int, batch_id: int, end_of_input: bool) -> None:
        """Roll the parts the policy selects at the end of a batch (bulk parts always), flush the others."""
        policy = self.config.rolling
        for part in list(self.parts.values()):
            if self.parts.get(part.record.bucket) is not part:  # rolled as another's stream took its place
                continue
            stats = part.stats()
            if (
                end_of_input
                or part.bulk is not None
                or policy.roll_on_batch_end(_after_batch(stats, part), part.wrote_this_batch)
                or policy.roll_on_processing_time(stats, now)
            ):
                self.roll(part, batch_id)
            else:
                self.flush(part, batch_id)
        self._expire_handles(now)

    def open_records(self) -> list[PartRecord]:
        """The open parts as the commit records them, this batch counted for those it wrote to."""
        out = []
        for part in self.parts.values():
            if part.wrote_this_batch:
                part.record.batches += 1
                part.wrote_this_batch = False
            out.append(PartRecord(**vars(part.record)))
        return out

    # ------------------------------------------------------- open-file cache

    def _handle(self, path: str, batch_id: int) -> Any:
        """The open stream of a part, from the cache; evicts the least recently used one. Where the filesystem cannot
        append (an object store), the evicted stream's part is rolled: reopened, its bytes would be written over."""
        self._handle_used_ms[path] = self._now
        if path in self._handles:
            self._handles.move_to_end(path)
            return self._handles[path]
        while len(self._handles) >= self.config.max_open_files:
            evicted = next(iter(self._handles))
            part = None if self.config.appendable else next(
                (p for p in self.parts.values() if p.record.path == evicted), None)
            if part is not None:
                self.roll(part, batch_id)
            else:
                self._close_handle(evicted)
        self._handles[path] = self.directory.fs.open(path, "ab" if self.config.appendable else "wb")
        return self._handles[path]

    def _close_handle(self, path: str) -> None:
        handle = self._handles.pop(path, None)
        self._handle_used_ms.pop(path, None)
        if handle is not None:
            handle.close()

    def _expire_handles(self, now: int) -> None:
        expiry = self.config.expire_after_ms
        for path, used in list(self._handle_used_ms.items()):
            if expiry is not None and now - used >= expiry:
                self._close_handle(path)

    @property
    def open_handle_count(self) -> int:
        return len(self._handles)

    def close(self) -> None:
        """Close every open stream; parts stay in progress (committed) for the next writer.

        A bulk part still open was not rolled at its batch's end, so its batch
        failed: its file is closed unfinished, for recovery or the commit to delete.
        """
        for path in list(self._handles):
            self._close_handle(path)
        for part in self.parts.values():
            if part.output is not None:
                part.output.abandon()


def refuse_duplicate_columns(names: list[str]) -> None:
    """Refuse two columns of one name: a row of a file holds each name once (JSON lines kept the last value,
    Parquet wrote a file it could not read back)."""
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"FileSink cannot write two columns named {twice[0]!r} (columns: {names}); rename one")


def refuse_rows_without_columns(rows: int, columns: int) -> None:
    """Refuse rows of no columns: no format keeps a row of no values (ORC's writer crashed the process; CSV wrote
    a part read() failed on; Parquet and Avro lost the rows). No rows and no columns is nothing to write."""
    if rows and not columns:
        raise ValueError(f"FileSink cannot write {rows} row(s) without columns: no format keeps a row of no values; "
                         "select the columns to write")


def _after_batch(stats: PartStats, part: _Part) -> PartStats:
    """The part's stats counting the batch being written, for ``max_batches``."""
    return PartStats(stats.size, stats.batches + int(part.wrote_this_batch), stats.created_ms, stats.last_write_ms)


def _group(buckets: list[str] | str, num_rows: int) -> list[tuple[str, list[int] | None]]:
    """Row indices per bucket, buckets in order of first appearance; None means all rows."""
    if isinstance(buckets, str):
        return [(buckets, None)] if num_rows else []
    groups: dict[str, list[int]] = {}
    for i, bucket in enumerate(buckets):
        groups.setdefault(bucket, []).append(i)
    if len(groups) == 1:
        return [(next(iter(groups)), None)]
    return list(groups.items())
