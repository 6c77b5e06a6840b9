"""``KVStore``: the store's settings, its block cache, and the way into its buckets."""

from __future__ import annotations

import os
import pickle
from datetime import timedelta
from typing import Any, Mapping

from fsspec.core import url_to_fs

from .._fs import absolute_if_local
from .._units import is_whole_number, parse_seconds, parse_size
from .bucket import Bucket, Hook
from .datafile import BlockCache
from .settings import StoreSettings

#: Block codecs pyarrow compresses with (``pa.compress``); None stores blocks as they are.
CODECS = (None, "lz4", "zstd", "snappy", "gzip", "brotli")


class KVStore:
    """An embedded key-value store on any fsspec path, in buckets with one writer each (HDHT's design).

    ``flush_entries`` and ``flush_batches`` (HDHT's defaults: a million entries,
    120 batches) say when the cache of committed writes is flushed to data
    files, and ``flush_bytes`` bounds its memory whatever the size of its
    entries (a flush holds the cache twice over, merged); data files hold at most ``max_file_size`` bytes (twice
    ``block_size`` or more) in blocks of about ``block_size``; ``block_cache`` bounds the decoded blocks kept in memory,
    shared by the buckets opened from this object. A log segment is rolled at
    ``max_log_segment`` bytes. A writer's ``lease`` (seconds or a timedelta)
    keeps other writers out until it runs out or the writer closes the bucket.
    ``fsync=False`` skips the fsyncs of the local disk: a commit then survives
    the process dying but not the machine. See docs/kv_store.md.
    """

    def __init__(
        self,
        path: str,
        *,
        flush_entries: int = 1_000_000,
        flush_batches: int = 120,
        flush_bytes: int | str = "32MB",
        max_file_size: int | str = "128MB",
        block_size: int | str = "1MB",
        block_cache: int | str = "256MB",
        max_log_segment: int | str = "64MB",
        compression: str | None = None,
        lease: float | timedelta | str = 60,
        fsync: bool = True,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str) or not path.strip():  # str(None) would make a store under ./None; "" is ./
            raise ValueError(f"KVStore path={path!r} must be a non-empty str or an os.PathLike: a local path or an "
                             "fsspec URL")
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise ValueError(
                f"KVStore storage_options={storage_options!r} must be a dict of the filesystem's options, or None"
            )
        for name, value in (("flush_entries", flush_entries), ("flush_batches", flush_batches)):
            if not is_whole_number(value) or value < 1:
                raise ValueError(f"KVStore {name}={value!r} must be an int of 1 or more")
        if compression not in CODECS:
            raise ValueError(f"KVStore compression={compression!r} is not one of {CODECS}")
        if not isinstance(fsync, bool):
            raise ValueError(f"KVStore fsync={fsync!r} must be True or False")
        path = absolute_if_local(path)
        self._settings = (path, tuple(sorted({
            "flush_entries": flush_entries, "flush_batches": flush_batches, "flush_bytes": flush_bytes,
            "max_file_size": max_file_size,
            "block_size": block_size, "block_cache": block_cache, "max_log_segment": max_log_segment,
            "compression": compression, "lease": lease, "fsync": fsync,
            "storage_options": tuple(sorted(dict(storage_options or {}).items())),
        }.items())))
        self.path = path
        self.flush_entries = flush_entries = int(flush_entries)
        self.flush_batches = flush_batches = int(flush_batches)
        self.flush_bytes = parse_size("flush_bytes", flush_bytes)
        self.max_file_size = parse_size("max_file_size", max_file_size)
        self.block_size = parse_size("block_size", block_size)
        if self.max_file_size < 2 * self.block_size:
            raise ValueError(
                f"KVStore max_file_size={max_file_size!r} must be at least twice block_size={block_size!r}: a data "
                "file holds whole blocks and their index, so a smaller one could not be honoured; lower block_size"
            )
        self.max_log_segment = parse_size("max_log_segment", max_log_segment)
        # An endless lease would keep a crashed writer's buckets from every other writer but take_over=True.
        self.lease: float = parse_seconds("KVStore lease", lease, positive=True)  # type: ignore[assignment]  # never None
        self.compression = compression
        self.fsync = fsync
        self.storage_options = dict(storage_options or {})
        self.cache = BlockCache(parse_size("block_cache", block_cache))
        self.fs, root = url_to_fs(self.path, **self.storage_options)
        self.root = root.rstrip("/")
        self._parsed = StoreSettings(
            path=self.path, fs=self.fs, root=self.root, cache=self.cache, flush_entries=flush_entries,
            flush_batches=flush_batches, flush_bytes=self.flush_bytes, max_file_size=self.max_file_size, block_size=self.block_size,
            max_log_segment=self.max_log_segment, compression=compression, lease=self.lease, fsync=fsync)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its settings (Spark ships it to its workers); a worker process shares one block cache
        among the copies it unpickles, so the tasks it runs one after another find their blocks cached."""
        return (_shared, (self._settings,))

    def open(self, bucket: int, *, take_over: bool = False, hook: Hook | None = None) -> Bucket:
        """Open ``bucket`` (an int of 0 or more) as its only writer; ``BucketHeldError`` while another holds it.

        ``take_over=True`` claims it even then, fencing the holder off: for a
        writer known to be gone, such as the failed attempt of a Spark task.
        ``hook`` is a test seam called at each crash point.
        """
        if not is_whole_number(bucket) or bucket < 0:
            raise ValueError(f"KVStore bucket={bucket!r} must be an int of 0 or more (a Spark partition id, a key hash)")
        return Bucket(self._parsed, int(bucket), take_over=take_over, hook=hook)

    def buckets(self) -> list[int]:
        """The buckets that exist under the store's path."""
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        ids = [n.rstrip("/").rsplit("/", 1)[-1].removeprefix("bucket-") for n in names]
        return sorted(int(i) for i in ids if i.isdigit())

    def __repr__(self) -> str:
        return f"KVStore({self.path!r}, flush_entries={self.flush_entries}, flush_batches={self.flush_batches})"


_STORES: dict[bytes, KVStore] = {}


def _shared(settings: tuple[str, tuple[tuple[str, Any], ...]]) -> KVStore:
    """The process's store for ``settings``, made on first use. Found by the settings' pickle: fsspec options may
    nest dicts and lists (s3fs's ``client_kwargs``), which no dict can be keyed by."""
    named = pickle.dumps(settings, protocol=4)
    store = _STORES.get(named)
    if store is None:
        path, options = settings
        kwargs = dict(options)
        kwargs["storage_options"] = dict(kwargs["storage_options"])
        store = _STORES[named] = KVStore(path, **kwargs)
    return store
