"""One bucket of the store, opened by its only writer: batches, the log, the cache, reads.

A batch's writes stay in memory until ``commit()``, which appends them to the
bucket's write-ahead log as one frame and makes it durable: that is the commit
point. The committed writes are then kept in the *uncommitted cache* (HDHT's
name: committed, but not yet in data files) until a flush merges them into the
sorted data files and writes a new metadata version. See docs/kv_store.md.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, suppress
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from .._units import is_whole_number
from .catalog import Catalog, Meta, sequenced_name
from .classes import by_class, from_writes, merge
from .datafile import DataFile
from .errors import CorruptStoreError, FencedError, KVStoreError
from .files import FileWriter
from .format import encode_frame
from .keys import MAX_KEY_BYTES, Run, as_binary, check_key_lengths, concat_values, is_view, successor
from .log_frames import cut_segment, put_back, remove_object
from .log_replay import replay_log
from .reads import get_many, scan
from .recovery_checks import refuse_later_data_files, refuse_missing_data_files
from .settings import StoreSettings

#: A test seam: called with (point, batch_id) at each crash point (docs/kv_store.md lists them).
Hook = Callable[[str, int], None]
_VALUE = pa.large_binary()
#: The largest batch id: a log frame keeps it as a signed 64-bit integer, as Spark's batch ids are.
_MAX_BATCH_ID = 2**63 - 1


class Bucket:
    """A bucket opened for writing; use it as a context manager (``with store.open(3) as b``)."""

    def __init__(self, store: StoreSettings, bucket: int, take_over: bool = False, hook: Hook | None = None) -> None:
        self._store = store
        self._hook: Hook = hook or (lambda point, batch_id: None)
        self.bucket = bucket
        self._catalog = Catalog(store.fs, f"{store.root}/bucket-{bucket}", bucket, store.lease, store.fsync)
        self._files = FileWriter(self._catalog, store, self._hook)
        self._batch: int | None = None
        self._keys: list[Any] = []
        self._values: list[Any] = []
        self._chunks: list[tuple[pa.Array, pa.Array]] = []
        self._batch_runs: list[Run] | None = None  # the batch's writes, one run per width class
        self._runs: list[Run] = []  # the uncommitted cache: a run per batch and width class, each class oldest first
        self._batches_since_flush = 0
        self._segment: tuple[str, Any] | None = None  # the local log segment appended to: path, handle
        self._seq = 0
        self._closed = self._released = False
        self._broken: str | None = None  # why the log may hold a frame of a failed commit: every call refuses
        self._catalog.claim(take_over)
        self._hook("claimed", -1)
        try:
            self._recover()
        except BaseException:
            # A damaged bucket, or a read that failed: the next open should see the damage or try again, not find
            # the lease held by a writer that never came to be (``BucketHeldError`` naming this very process).
            self._catalog.release()
            raise

    # ------------------------------------------------------------------ state

    @property
    def committed_batch_id(self) -> int:
        """The id of the last committed batch; -1 for a new bucket."""
        return self._meta.batch_id

    @property
    def batch_id(self) -> int | None:
        """The batch begun and not yet committed, or None."""
        return self._batch

    @property
    def cached_entries(self) -> int:
        """Entries committed but not yet flushed to data files (a key written twice counts twice)."""
        return sum(len(r) for r in self._runs)

    @property
    def cached_bytes(self) -> int:
        """The memory the uncommitted cache's entries take (keys as rows, values, their indexes)."""
        return sum(r.nbytes for r in self._runs)

    @property
    def data_files(self) -> list[str]:
        """The data files holding the flushed state, in key order."""
        return [f["name"] for f in self._meta.files]

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        """Load the newest metadata, replay the committed log after it, and adopt the result under this epoch."""
        catalog = self._catalog
        try:
            meta = catalog.load_meta() or Meta(epoch=0, token="00000000", version=-1)
            self._hook("loaded", meta.batch_id)
            runs, batch_id, log, batches = replay_log(catalog, meta)
            data_names = refuse_missing_data_files(catalog, meta)
            refuse_later_data_files(self._store, catalog, meta, batch_id, data_names)
        except (CorruptStoreError, FileNotFoundError):
            # A newer writer that claimed the bucket meanwhile may have deleted what this one listed (its flush
            # dropped the log segments, its cleanup the metadata): then this writer is fenced, and nothing is damaged.
            catalog.confirm("recover the bucket")
            raise
        # One run per width class at once: left as one run per batch, the first reads would merge them two at a
        # time, each merge sorting the growing run again (a worker that reopens its bucket every micro-batch paid
        # that each time).
        self._runs = merge(runs)
        self._batches_since_flush = batches
        adopted = Meta(
            epoch=catalog.epoch,
            token=catalog.token,
            version=meta.version + 1,
            batch_id=batch_id,
            flushed_batch_id=meta.flushed_batch_id,
            files=meta.files,
            log=log,
            tail_from=0,
        )
        catalog.write_meta(adopted)
        self._meta = adopted
        self._open_files()
        self._hook("adopted", -1)
        catalog.confirm("clean up")
        for sub, names in catalog.unreferenced(adopted, data_names).items():
            catalog.remove(sub, names)

    def _open_files(self) -> None:
        store = self._store
        path = self._catalog.path
        self._data = [DataFile(store.fs, path("data", f["name"]), f["size"], store.cache) for f in self._meta.files]
        self._firsts = [bytes.fromhex(f["first"]) for f in self._meta.files]

    # ------------------------------------------------------------------ batches

    def begin(self, batch_id: int) -> None:
        """Start batch ``batch_id``; a batch begun and not committed (a failed attempt) is discarded first."""
        self._check_open()
        if not is_whole_number(batch_id) or not 0 <= batch_id <= _MAX_BATCH_ID:
            raise ValueError(
                f"batch_id={batch_id!r} must be an int from 0 to 2**63 - 1 (Spark's batch id, a step number; "
                "the log keeps it as a signed 64-bit integer)"
            )
        self._discard()
        if batch_id <= self.committed_batch_id:
            raise ValueError(
                f"batch_id={batch_id} is at or below committed_batch_id={self.committed_batch_id} of bucket "
                f"{self.bucket}: that batch is already applied and is never applied twice. A replayed batch "
                "(Spark retrying it) must be skipped: compare with committed_batch_id first"
            )
        self._catalog.renew()
        self._batch = int(batch_id)

    def put(self, key: bytes, value: bytes) -> None:
        """Write ``value`` under ``key`` in the current batch."""
        self._check_batch("put")
        _check_one_key("put", key)
        if not isinstance(value, bytes):
            raise TypeError(f"put value must be bytes, not {type(value).__name__} (delete(key) deletes a key)")
        self._keys.append(key)
        self._values.append(value)
        self._batch_runs = None

    def delete(self, key: bytes) -> None:
        """Delete ``key`` in the current batch (deleting an absent key is allowed)."""
        self._check_batch("delete")
        _check_one_key("delete", key)
        self._keys.append(key)
        self._values.append(None)
        self._batch_runs = None

    def put_many(self, keys: Any, values: Any) -> None:
        """Write many pairs: lists of bytes, or Arrow binary, NumPy object or pandas columns; a None value deletes."""
        self._check_batch("put_many")
        k = as_binary(keys, "keys")
        check_key_lengths(k, "keys")
        v = as_binary(values, "values", nulls=True)
        if len(k) != len(v):
            raise ValueError(f"put_many got {len(k)} keys and {len(v)} values; give one value per key")
        self._flush_singles()
        self._chunks.append((k, v))
        self._batch_runs = None

    def delete_many(self, keys: Any) -> None:
        """Delete many keys in the current batch."""
        self._check_batch("delete_many")
        k = as_binary(keys, "keys")
        check_key_lengths(k, "keys")
        self._flush_singles()
        self._chunks.append((k, pa.nulls(len(k), _VALUE)))
        self._batch_runs = None

    def commit(self) -> None:
        """Make the current batch durable: from now on it is ``committed_batch_id``, after any crash."""
        self._check_batch("commit")
        batch_id = self._batch
        assert batch_id is not None
        runs = self._writes()
        self._append_log(encode_frame(batch_id, runs, self._meta.batch_id), batch_id)
        # The frame is durable, so the batch is committed even if what follows raises: a retry must find it
        # committed, not log it a second time.
        self._meta.batch_id = batch_id
        self._batch = None
        self._clear_writes()
        self._runs.extend(run for run in runs if len(run))
        self._batches_since_flush += 1
        self._hook("after_log", batch_id)
        self._catalog.confirm(f"commit batch {batch_id}")
        self._catalog.renew()
        store = self._store
        if (self.cached_entries >= store.flush_entries or self.cached_bytes >= store.flush_bytes
                or self._batches_since_flush >= store.flush_batches):
            self.flush()

    def _append_log(self, frame: bytes, batch_id: int) -> None:
        """Append the batch's frame and make it durable; an append that fails takes its frame back first."""
        catalog = self._catalog
        if not catalog.local:  # object stores: one new object per commit, never an append
            self._hook("mid_log", batch_id)
            path = catalog.path("log", self._next_name("wal"))
            try:
                catalog.fs.pipe_file(path, frame)
            except BaseException:
                self._take_back(batch_id, lambda: remove_object(catalog.fs, path),
                                lambda: catalog.fs.pipe_file(path, frame))
                raise
            return
        if self._segment is None:
            path = catalog.path("log", self._next_name("wal"))
            self._segment = (path, open(path, "ab"))
            catalog.sync(catalog.path("log"))
        path, handle = self._segment
        committed_length = handle.tell()
        try:
            half = len(frame) // 2
            handle.write(frame[:half])
            handle.flush()
            self._hook("mid_log", batch_id)
            handle.write(frame[half:])
            handle.flush()
            if catalog.durable:
                os.fsync(handle.fileno())
        except BaseException:
            self._segment = None  # the next commit starts a new segment
            try:
                self._take_back(batch_id, lambda: cut_segment(handle, path, committed_length, catalog.sync),
                                lambda: put_back(path, committed_length, frame, catalog.sync))
            except FencedError:
                with suppress(OSError):
                    handle.close()  # the frame stays: it may be the new owner's now
                raise
            raise
        if handle.tell() >= self._store.max_log_segment:
            self._close_segment()

    def _take_back(self, batch_id: int, remove_frame: Callable[[], None], restore_frame: Callable[[], None]) -> None:
        """Remove what a failed append wrote of its frame. Left there, a torn frame would end the log at
        reopening, dropping the batches committed after it, and a whole frame whose fsync failed would hold the
        batch a second time once it is retried. When removing it fails too, the bucket refuses every further
        call: only reopening it tells whether the batch was committed. A writer taken over leaves the frame
        (`FencedError`), checked before and after the removal (then the frame is put back): its new owner may
        have adopted the batch from the log, and taking it back cut a committed segment short, which every open
        then refused."""
        doing, removed = f"take back the log frame of batch {batch_id} after its commit failed", False
        try:
            self._catalog.confirm(doing)
            remove_frame()
            removed = True
            self._catalog.confirm(doing)
        except FencedError:
            if removed:
                try:
                    restore_frame()
                except FileNotFoundError:
                    pass  # the new owner's cleanup removed the segment: it holds no frame it adopted
                except OSError as exc:
                    self._broken = f"bucket {self.bucket} could not put back the log frame of batch {batch_id} ({exc})"
            raise
        except OSError as exc:
            self._broken = (
                f"bucket {self.bucket} could not take back the log frame of batch {batch_id} after its commit "
                f"failed ({exc}), so the log may hold that batch or not; close it and open it again "
                f"(store.open({self.bucket})): committed_batch_id then tells whether batch {batch_id} was committed"
            )

    def _close_segment(self) -> None:
        if self._segment is not None:
            self._segment[1].close()
            self._segment = None

    def _next_name(self, kind: str) -> str:
        name = sequenced_name(self._catalog.epoch, self._seq, self._catalog.token, kind)
        self._seq += 1
        return name

    # ------------------------------------------------------------------ flush and compaction

    def flush(self) -> None:
        """Write the uncommitted cache into data files now, and drop the log it came from."""
        self._check_open()
        if not self._runs and not self._meta.log and self._seq == self._meta.tail_from:
            return  # nothing committed since the last metadata: no log to drop either
        # A zombie is refused before it rewrites anything: the new owner may have deleted the files it would merge.
        self._catalog.confirm("flush")
        changes = merge(self._runs)
        self._runs = changes  # the same data: the runs merged are freed while the files are rewritten
        self._close_segment()
        with self._fenced_if_taken_over("flush its data files"):  # taken over during the rewrite
            files = self._files.merge(
                self._meta.files, self._data, changes, self._meta.batch_id, self._next_name, "flush"
            )
        self._publish(files, "flush")
        self._runs = []
        self._batches_since_flush = 0

    def compact(self) -> None:
        """Flush, then merge neighbouring data files whose sizes add up to at most ``max_file_size``."""
        self.flush()
        self._catalog.confirm("compact")  # before rewriting anything (a flush with nothing to write checks nothing)
        with self._fenced_if_taken_over("compact its data files"):  # a zombie: the new owner deleted them
            files = self._files.compact(self._meta.files, self._data, self._meta.batch_id, self._next_name)
        if files is not None:
            self._publish(files, "compact")

    def _publish(self, files: list[dict[str, Any]], stage: str) -> None:
        """Write the metadata version listing ``files`` (the commit point of a flush), then delete what it obsoletes."""
        catalog, old = self._catalog, self._meta
        batch_id = old.batch_id
        meta = Meta(
            epoch=catalog.epoch,
            token=catalog.token,
            version=old.version + 1,
            batch_id=batch_id,
            flushed_batch_id=batch_id,
            files=files,
            log=[],
            tail_from=self._seq,
        )
        self._hook(f"{stage}_before_meta", batch_id)
        catalog.write_meta(meta)
        self._meta = meta
        for stale in {f["name"] for f in old.files} - {f["name"] for f in files}:
            self._store.cache.forget(catalog.path("data", stale))
        self._open_files()
        self._hook(f"{stage}_after_meta", batch_id)
        catalog.confirm(f"delete the files its {stage} replaced")
        garbage = catalog.unreferenced(meta)
        for sub in ("data", "log", "meta"):
            for name in garbage[sub]:
                catalog.remove(sub, [name])
                self._hook(f"{stage}_mid_cleanup", batch_id)

    # ------------------------------------------------------------------ reads

    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, or None."""
        _check_one_key("get", key)
        return self.get_many([key])[0]

    def get_many(self, keys: Any) -> Any:
        """Committed values of ``keys`` in order, None where absent; an Arrow array in, an Arrow array out."""
        self._check_open()
        return _like(keys, self._get(self._committed_runs(), keys, "get_many"))

    def get_uncommitted(self, key: bytes) -> bytes | None:
        """This batch's write of ``key`` if any, else its committed value."""
        _check_one_key("get_uncommitted", key)
        return self.get_uncommitted_many([key])[0]

    def get_uncommitted_many(self, keys: Any) -> Any:
        self._check_open()
        runs = self._committed_runs()
        if self._batch is not None:
            runs = [*self._writes(), *runs]
        return _like(keys, self._get(runs, keys, "get_uncommitted_many"))

    def _get(self, runs: list[Run], keys: Any, call: str) -> pa.LargeBinaryArray:
        keys = as_binary(keys, "keys")
        check_key_lengths(keys, f"{call} keys")  # the reader's own refusal named neither the call nor the key
        self._store.cache.new_read()
        with self._fenced_if_taken_over("read its data files"):
            return get_many(runs, self._data, self._firsts, keys)

    @contextmanager
    def _fenced_if_taken_over(self, doing: str) -> Iterator[None]:
        """A data file found missing or damaged is checked against the lease first: a newer writer that took the
        bucket over deletes the files its flushes replace, and then this writer is fenced, not reading damage."""
        try:
            yield
        except CorruptStoreError:
            self._catalog.confirm(doing)
            raise

    def scan_table(self, start: bytes | None = None, end: bytes | None = None, *, prefix: bytes | None = None,
                   limit: int | None = None) -> pa.Table:
        """Committed pairs with ``start <= key < end`` (None: unbounded), or those whose key starts with ``prefix``,
        sorted by key, as an Arrow table with columns ``key`` and ``value``; with ``limit``, the first ``limit``
        pairs, found without reading the rest of the range (the smallest key of an index, say)."""
        self._check_open()
        if limit is not None and (not is_whole_number(limit) or limit < 0):
            raise ValueError(f"scan limit={limit!r} must be a whole number >= 0, or None for the whole range")
        limit = None if limit is None else int(limit)
        for name, bound in (("start", start), ("end", end), ("prefix", prefix)):
            if bound is not None and not isinstance(bound, bytes):
                raise TypeError(f"scan {name}={bound!r} must be bytes or None")
            if bound is not None:
                _check_one_key("scan", bound, name)
        if prefix is not None:
            if start is not None or end is not None:
                raise ValueError("scan takes either prefix= or start and end, not both")
            start, end = prefix, successor(prefix)
        with self._fenced_if_taken_over("read its data files"):
            keys, values = scan(self._committed_runs(), self._data, self._firsts, start, end, limit)  # newest first
        return pa.table({"key": keys.cast(pa.binary()), "value": values.cast(pa.binary())})

    def scan(
        self, start: bytes | None = None, end: bytes | None = None, *, prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Committed ``(key, value)`` pairs with ``start <= key < end``, sorted (see ``scan_table``)."""
        table = self.scan_table(start, end, prefix=prefix, limit=limit)
        return zip(table.column("key").to_pylist(), table.column("value").to_pylist())

    def _committed_runs(self) -> list[Run]:
        """The cache's runs, newest first within each width class, after merging small newer runs into older ones
        of their class (a few runs per class at most)."""
        groups = by_class(self._runs)
        for runs in groups:
            while len(runs) > 1 and (len(runs[-2]) <= 2 * len(runs[-1]) or len(runs) > 8):
                runs[-2:] = [Run.merge(runs[-2:])]
        self._runs = [run for runs in groups for run in runs]
        return list(reversed(self._runs))

    # ------------------------------------------------------------------ batch buffer

    def _flush_singles(self) -> None:
        if self._keys:
            self._chunks.append((pa.array(self._keys, _VALUE), pa.array(self._values, _VALUE)))
            self._keys, self._values = [], []

    def _writes(self) -> list[Run]:
        """The current batch's writes as one run per width class (the last write of a key wins)."""
        if self._batch_runs is None:
            self._flush_singles()
            if not self._chunks:
                self._batch_runs = [Run.empty()]
            else:
                keys = concat_values([k for k, _ in self._chunks])
                values = pa.concat_arrays([v for _, v in self._chunks]) if len(self._chunks) > 1 else self._chunks[0][1]
                self._batch_runs = from_writes(keys, values)
                self._chunks = [(keys, values)]
        return self._batch_runs

    def _clear_writes(self) -> None:
        self._keys, self._values, self._chunks, self._batch_runs = [], [], [], None

    def _discard(self) -> None:
        self._batch = None
        self._clear_writes()

    def _check_open(self) -> None:
        if self._closed:
            raise KVStoreError(f"bucket {self.bucket} is closed; open it again with store.open({self.bucket})")
        if self._broken is not None:
            raise KVStoreError(self._broken)

    def _check_batch(self, what: str) -> None:
        self._check_open()
        if self._batch is None:
            raise KVStoreError(
                f"{what} needs a batch: call begin(batch_id) first (committed_batch_id={self.committed_batch_id})"
            )

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Discard an uncommitted batch, close the log and free the bucket for the next writer."""
        if not self._closed:
            self._discard()
            self._close_segment()
            self._closed = True
        if not self._released:  # a release that failed (the lease's write) is tried again by the next close()
            self._catalog.release()
            self._released = True

    def __enter__(self) -> Bucket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Bucket {self.bucket} of {self._store.path!r}, committed_batch_id={self.committed_batch_id}>"


def _check_one_key(call: str, key: Any, name: str = "key") -> None:
    """A single key is bytes, as ``put`` and ``delete`` take it (a str is refused, not taken as UTF-8), and no longer
    than a key may be (a read of a longer one failed naming neither the call nor the argument)."""
    if not isinstance(key, bytes):
        raise TypeError(f"{call} {name}={key!r} must be bytes, not {type(key).__name__}")
    if len(key) > MAX_KEY_BYTES:
        raise ValueError(
            f"{call} {name}: a key of {len(key):,} bytes is longer than the {MAX_KEY_BYTES:,} a key may have "
            "(a data block keeps its row width in 16 bits), so none is stored"
        )


def _like(keys: Any, values: pa.LargeBinaryArray) -> Any:
    """The values in the kind of column the keys came in: Arrow, pandas, NumPy, or a list of bytes."""
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        if is_view(keys.type):
            return values.cast(pa.binary_view())
        large = pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)
        return values if large else values.cast(pa.binary())
    if isinstance(keys, pd.Series):
        return pd.Series(values.to_pylist(), index=keys.index, dtype=object, name=keys.name)
    if isinstance(keys, np.ndarray):
        out = np.empty(len(values), dtype=object)
        out[:] = values.to_pylist()
        return out
    return values.to_pylist()
