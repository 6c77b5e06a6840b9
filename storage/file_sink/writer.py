"""The part-file lifecycle and the exactly-once commit, one micro-batch at a time.

Lifecycle of a part file (Flink's, with Apex's recovery by truncation)::

    .part-w-3.jsonl.inprogress   in-progress: hidden, appended to, batch after batch
    .part-w-3.jsonl.inprogress   pending: rolled, waiting for its batch's commit
    part-w-3.jsonl               finished: renamed after the commit record is durable

A batch is committed by writing the commit record (``state.py``) that holds
the batch id, the committed length of every in-progress part and the renames
still due. On restart the newest record is the truth: due renames are redone,
in-progress parts are truncated back to their committed length, and stray
in-progress files of an uncommitted batch are deleted. A batch id at or below
the committed one is a replay and writes nothing.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
from fsspec.core import url_to_fs

from .buckets import check_bucket_id
from .codec import compress, key_fingerprint, seal
from .rolling import PartStats
from .state import PartRecord, SinkState, commit_state, load_state

if TYPE_CHECKING:
    from .sink import FileSink

# A test seam: called with (phase, batch_id) at "mid_write", "after_staging",
# "after_commit_record" and "mid_rename", so crash tests can stop the process there.
PhaseHook = Callable[[str, int], None]
INPROGRESS = ".inprogress"
#: Bucket directories whose names the writer keeps, the most recently used: a stream that moves on
#: to new buckets forever (``DateTimeBuckets``) must not keep every directory it ever wrote to.
LISTED_DIRECTORIES = 256


@dataclass
class _Part:
    record: PartRecord
    pending: list[bytes] = field(default_factory=list)
    pending_bytes: int = 0
    wrote_this_batch: bool = False

    def stats(self) -> PartStats:
        r = self.record
        return PartStats(r.length + self.pending_bytes, r.batches, r.created_ms, r.last_write_ms)


class SinkWriter:
    """Writes micro-batches into part files of one sink directory (one writer per directory)."""

    def __init__(self, sink: FileSink, hook: PhaseHook | None = None) -> None:
        self._sink = sink
        self._hook = hook or (lambda phase, batch_id: None)
        self._fs, root = url_to_fs(sink.path, **dict(sink.storage_options))
        self._root = root.rstrip("/")
        self._local = "file" in _protocols(self._fs)
        self._handles: OrderedDict[str, Any] = OrderedDict()
        self._handle_used_ms: dict[str, int] = {}
        self._now = 0
        self._unsynced_files: set[str] = set()  # written by this batch
        self._unsynced_dirs: set[str] = set()  # given a new part by this batch
        self._rollback_failure: BaseException | None = None
        # This writer id is kept only while the directory has no commit record.
        self._state = SinkState(writer_id=sink.writer_id or uuid.uuid4().hex[:12])
        self._parts: dict[str, _Part] = {}
        self._names_in_directory: OrderedDict[str, set[str]] = OrderedDict()  # least recently used first
        self._restore()

    @property
    def committed_batch_id(self) -> int:
        """The id of the last committed batch, -1 before the first."""
        return self._state.batch_id

    @property
    def open_handle_count(self) -> int:
        """How many part files the writer holds open right now."""
        return len(self._handles)

    # ---------------------------------------------------------------- recovery

    def _restore(self) -> None:
        """Forget everything uncommitted: close the streams, reload the newest record, recover the directory to it."""
        for path in list(self._handles):
            self._close_handle(path)
        state = load_state(self._fs, self._root)
        if state is not None:
            self._refuse_changed_settings(state)
        self._state = state or SinkState(writer_id=self._state.writer_id)
        self._parts = {}
        self._names_in_directory = OrderedDict()
        self._recover()

    def _settings(self) -> dict[str, str | None]:
        """What the bytes of a part depend on."""
        sink = self._sink
        return {"format": sink.format, "compression": sink.compression, "key_fingerprint": key_fingerprint(sink.key)}

    def _refuse_changed_settings(self, state: SinkState) -> None:
        """Appending to in-progress parts under other settings than they were written with would corrupt them."""
        if not state.open_parts:
            return
        for name, value in self._settings().items():
            recorded = state.settings.get(name, value)  # a version 1 record does not say
            if recorded != value:
                raise ValueError(
                    f"FileSink {name}={value!r} differs from {name}={recorded!r}, the setting that "
                    f"{len(state.open_parts)} in-progress part(s) under {self._root} were written with; "
                    "appending would corrupt them. Finish them with the old settings first "
                    "(writer().finish(processing_time_ms) on the sink as it was), then change it"
                )

    def _recover(self) -> None:
        fs = self._fs
        self._finish_renames(self._state.finalize, batch_id=self._state.batch_id, recovering=True)
        known = set()
        for rec in self._state.open_parts:
            known.add(rec.path)
            size = fs.size(rec.path)
            if size < rec.length:
                raise RuntimeError(
                    f"in-progress part {rec.path} has {size} bytes but {rec.length} were committed; "
                    "the sink directory was changed by someone else"
                )
            if size > rec.length:
                self._truncate(rec.path, rec.length)
            self._parts[rec.bucket] = _Part(rec)
        for path in fs.find(self._root) if fs.exists(self._root) else []:
            name = path.rsplit("/", 1)[-1]
            if name.startswith(".") and name.endswith(INPROGRESS) and path not in known:
                fs.rm_file(path)  # written by a batch that never committed

    def _truncate(self, path: str, length: int) -> None:
        if self._local:
            os.truncate(path, length)
        else:  # no truncate on object stores: rewrite the committed prefix
            self._fs.pipe_file(path, self._fs.cat_file(path, start=0, end=length) if length else b"")

    def _finish_renames(self, renames: list[tuple[str, str]], batch_id: int, recovering: bool = False) -> None:
        for i, (src, dst) in enumerate(renames):
            # Recovery is idempotent: a crash may have done some already. A batch renames the parts it just wrote.
            if not recovering or self._fs.exists(src):
                self._fs.mv(src, dst)
            if not recovering and i == 0:
                self._hook("mid_rename", batch_id)
        # Durable before the next record, which no longer lists them: else a crash leaves a stray in-progress file.
        for directory in sorted({dst.rsplit("/", 1)[0] for _, dst in renames}):
            self._sync(directory)

    def _sync(self, path: str) -> None:
        """Make a local file's data, or a local directory's entries, durable; other filesystems decide themselves."""
        if self._local:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    # ------------------------------------------------------------------ writing

    def write_batch(
        self, data: pa.Table | pd.DataFrame, batch_id: int, processing_time_ms: int, end_of_input: bool = False
    ) -> bool:
        """Write and commit one batch; False if ``batch_id`` was already committed (a replay).

        The pandas runner feeds its panes here, one step or micro-batch per call.
        A batch that raises is rolled back to the last commit, so the same
        writer can retry it (or write another) without losing or duplicating rows.
        """
        self._refuse_if_rollback_failed()
        if batch_id <= self._state.batch_id:
            return False
        self._run(to_table(data), batch_id, processing_time_ms, end_of_input)
        return True

    def finish(self, processing_time_ms: int) -> bool:
        """Finish every in-progress part, committed again under the last batch id; False if none was open.

        End of input for a run whose batches were all committed before: a new
        batch id would be skipped as a replay by a later, longer run of the same stream.
        """
        self._refuse_if_rollback_failed()
        if not self._parts:
            return False
        self._run(pa.table({}), self._state.batch_id, processing_time_ms, end_of_input=True)
        return True

    def _refuse_if_rollback_failed(self) -> None:
        if self._rollback_failure is not None:
            raise RuntimeError(
                f"SinkWriter cannot write: rolling back a failed batch failed too ({self._rollback_failure!r}); "
                "make a new writer with FileSink.writer(), which recovers the directory from its commit record"
            ) from self._rollback_failure

    def _run(self, data: pa.Table, batch_id: int, now: int, end_of_input: bool) -> None:
        try:
            self._stage_and_commit(data, batch_id, now, end_of_input)
        except BaseException:
            self._roll_back()
            raise

    def _roll_back(self) -> None:
        try:
            self._restore()
        except BaseException as failure:
            self._rollback_failure = failure  # half restored: refuse to write on top of it
            raise

    def _stage_and_commit(self, data: pa.Table, batch_id: int, now: int, end_of_input: bool) -> None:
        sink = self._sink
        self._now = now
        self._unsynced_files.clear()
        self._unsynced_dirs.clear()
        pending: list[tuple[str, str]] = []
        groups = _group(sink.buckets.assign(data, now) if data.num_rows else "", data.num_rows)
        for bucket, _ in groups:
            check_bucket_id(bucket, sink.buckets)
        for bucket, rows in groups:
            table = data if rows is None else data.take(pa.array(rows))
            if sink.file_format.bulk:
                pending.append(self._write_bulk(bucket, table, batch_id))
            else:
                self._write_rows(bucket, table, now, batch_id, pending)
        for bucket, part in list(self._parts.items()):
            stats = part.stats()
            if (
                end_of_input
                or sink.rolling.roll_on_batch_end(_after_batch(stats, part), part.wrote_this_batch)
                or sink.rolling.roll_on_processing_time(stats, now)
            ):
                pending.append(self._roll(part, batch_id))
            else:
                self._flush(part, batch_id)
        self._expire_handles(now)
        self._hook("after_staging", batch_id)
        self._commit(batch_id, pending)

    def _write_bulk(self, bucket: str, table: pa.Table, batch_id: int) -> tuple[str, str]:
        sink = self._sink
        body = sink.file_format.write_file(table, sink.compression)
        _, temp, final = self._new_names(bucket)
        self._fs.pipe_file(temp, seal(body, sink.key, 0, final=True))
        self._unsynced_files.add(temp)
        self._hook("mid_write", batch_id)
        return temp, final

    def _write_rows(
        self, bucket: str, table: pa.Table, now: int, batch_id: int, pending: list[tuple[str, str]]
    ) -> None:
        sink = self._sink
        body, ends = sink.file_format.encode(table)
        limit = sink.rolling.max_part_size
        start, row = 0, 0
        while row < len(ends):
            part = self._parts.get(bucket) or self._open_part(bucket, table, now)
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
            if sink.rolling.roll_on_write(part.stats()):
                pending.append(self._roll(part, batch_id))

    def _open_part(self, bucket: str, table: pa.Table, now: int) -> _Part:
        number, temp, final = self._new_names(bucket)
        part = _Part(PartRecord(bucket, number, temp, final, 0, 0, now, now, 0))
        header = self._sink.file_format.header(table)
        part.pending, part.pending_bytes = ([header], len(header)) if header else ([], 0)
        self._parts[bucket] = part
        return part

    def _new_names(self, bucket: str) -> tuple[int, str, str]:
        """The number, in-progress path and final path of the bucket's next part, in a directory that exists.

        The directory and its parents up to the root are synced before the commit.
        """
        number = self._state.next_part.get(bucket, 0)
        self._state.next_part[bucket] = number + 1
        name = self._sink.part_file_name(self._state.writer_id, number)
        levels = bucket.split("/") if bucket else []
        directory = "/".join([self._root, *levels])
        temp = f".{name}{INPROGRESS}"
        taken = self._names_in(directory)
        if name in taken or temp in taken:  # renaming onto it would lose rows
            raise ValueError(
                f"FileSink part {number} of bucket {bucket!r} would be named {name!r}, which another part already "
                f"has ({name if name in taken else temp!r} in {directory}); renaming onto it would lose its rows. "
                "If that part is another writer's, or, on a case-insensitive filesystem, one in a directory whose "
                "name differs only in case (ColumnBuckets of earlier releases named k=True what is now k=true), give "
                "this sink a prefix of its own, with_part_names(prefix='part2'); if this writer named it, a "
                "with_part_names fn must use the part number"
            )
        taken.update((temp, name))
        for depth in range(len(levels) + 1):
            self._unsynced_dirs.add("/".join([self._root, *levels[:depth]]))
        return number, f"{directory}/{temp}", f"{directory}/{name}"

    def _names_in(self, directory: str) -> set[str]:
        """The file names in a bucket directory, which is made if missing.

        Listed once (and after a rollback, or once ``LISTED_DIRECTORIES`` other
        directories were used since), then kept up to date by the writer, the
        directory's only one: no round trip per new part.
        """
        names = self._names_in_directory.pop(directory, None)
        if names is None:
            try:
                names = {path.rstrip("/").rsplit("/", 1)[-1] for path in self._fs.ls(directory, detail=False)}
            except FileNotFoundError:
                names = set()
            if not names:
                self._fs.makedirs(directory, exist_ok=True)
        self._names_in_directory[directory] = names
        while len(self._names_in_directory) > LISTED_DIRECTORIES:
            self._names_in_directory.popitem(last=False)
        return names

    def _flush(self, part: _Part, batch_id: int, final: bool = False) -> None:
        """Append the part's buffered rows as one segment (and the final one when rolling)."""
        if not part.pending and not (final and self._sink.key is not None):
            return
        rec, sink = part.record, self._sink
        plain = compress(b"".join(part.pending), sink.compression) if part.pending else b""
        segment = seal(plain, sink.key, rec.segments, final)
        handle = self._handle(rec.path)
        handle.write(segment)
        handle.flush()
        self._unsynced_files.add(rec.path)
        rec.length += len(segment)
        rec.segments += 1
        part.pending, part.pending_bytes = [], 0
        self._hook("mid_write", batch_id)

    def _roll(self, part: _Part, batch_id: int) -> tuple[str, str]:
        self._flush(part, batch_id, final=True)
        self._close_handle(part.record.path)
        del self._parts[part.record.bucket]
        return part.record.path, part.record.final_path

    def _commit(self, batch_id: int, pending: list[tuple[str, str]]) -> None:
        open_parts = []
        for part in self._parts.values():
            if part.wrote_this_batch:
                part.record.batches += 1
                part.wrote_this_batch = False
            open_parts.append(part.record)
        committed = dataclasses.replace(
            self._state,
            batch_id=batch_id,
            open_parts=[PartRecord(**vars(r)) for r in open_parts],
            finalize=pending,
            settings=self._settings(),
        )
        for path in sorted(self._unsynced_files) + sorted(self._unsynced_dirs):
            self._sync(path)  # the record must never promise bytes or files a crash can take back
        commit_state(self._fs, self._root, committed, self._sync)
        self._state = committed  # only now: until the record is written the batch is not committed
        self._hook("after_commit_record", batch_id)
        self._finish_renames(pending, batch_id)

    # ------------------------------------------------------- open-file cache

    def _handle(self, path: str) -> Any:
        """The open stream of a part, from the cache; evicts the least recently used one."""
        self._handle_used_ms[path] = self._now
        if path in self._handles:
            self._handles.move_to_end(path)
            return self._handles[path]
        while len(self._handles) >= self._sink.max_open_files:
            self._close_handle(next(iter(self._handles)))
        self._handles[path] = self._fs.open(path, "ab" if self._sink.appendable else "wb")
        return self._handles[path]

    def _close_handle(self, path: str) -> None:
        handle = self._handles.pop(path, None)
        self._handle_used_ms.pop(path, None)
        if handle is not None:
            handle.close()

    def _expire_handles(self, now: int) -> None:
        expiry = self._sink.expire_after_ms
        for path, used in list(self._handle_used_ms.items()):
            if expiry is not None and now - used >= expiry:
                self._close_handle(path)

    def close(self) -> None:
        """Close every open stream; parts stay in progress (committed) for the next writer."""
        for path in list(self._handles):
            self._close_handle(path)


def to_table(df: Any) -> pa.Table:
    """An Arrow table from pandas or Arrow (Spark frames go through ``spark.to_arrow``)."""
    if isinstance(df, pa.Table):
        return df
    if isinstance(df, pd.DataFrame):
        return pa.Table.from_pandas(df, preserve_index=False)
    raise TypeError(f"FileSink cannot write a {type(df).__name__}; pass a pandas, Arrow or Spark DataFrame")


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


def _protocols(fs: Any) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)
