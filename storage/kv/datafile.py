"""Data files on any fsspec filesystem, read a block at a time through a shared LRU block cache."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from .errors import CorruptStoreError
from .format import FileIndex, decode_block, decode_index
from .keys import Run

#: How many bytes of a data file's end are read at once to get its footer and index.
_TAIL_READ = 64 * 1024


class BlockCache:
    """Decoded blocks (and data file indexes), least recently used evicted first, up to ``limit`` bytes.

    One per ``KVStore``, shared by its buckets. Files are immutable and uniquely
    named, so a cached block is never stale.

    A read never evicts a block that the same read used (`new_read` starts one): a
    batch of gets touches its blocks in key order, so over data a little larger
    than the cache plain LRU would evict, at every block, the one the next batch
    needs first, and miss every time; kept instead, the blocks that fit stay and
    only the rest are read from the file.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[tuple[str, int], tuple[Any, int, int]] = OrderedDict()
        self._bytes = 0
        self._read = 0
        self._lock = threading.Lock()
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def new_read(self) -> None:
        """Start a read (a `get_many`): the blocks it uses from now on are not evicted for its later ones."""
        with self._lock:
            self._read += 1

    def get(self, key: tuple[str, int]) -> Any:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries[key] = (entry[0], entry[1], self._read)
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: tuple[str, int], value: Any, nbytes: int) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if nbytes > self.limit:
                return
            victims, freed = [], 0
            for victim, (_, size, read) in self._entries.items():
                if self._bytes - freed + nbytes <= self.limit:
                    break
                if read == self._read:
                    return  # the room is held by blocks this read used: keep them, do not cache this one
                victims.append(victim)
                freed += size
            for victim in victims:
                del self._entries[victim]
            self._bytes += nbytes - freed
            self._entries[key] = (value, nbytes, self._read)

    def forget(self, path: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == path]:
                self._bytes -= self._entries.pop(key)[1]


class DataFile:
    """One immutable data file: its index read on first use, its blocks through the cache."""

    def __init__(self, fs: Any, path: str, size: int, cache: BlockCache) -> None:
        self.fs, self.path, self.size, self.cache = fs, path, size, cache

    def index(self) -> FileIndex:
        key = (self.path, -1)
        index = self.cache.get(key)
        if index is None:
            try:
                tail = self.fs.cat_file(self.path, start=max(0, self.size - _TAIL_READ), end=self.size)
            except FileNotFoundError:
                raise CorruptStoreError(self.path, "the data file is missing") from None
            if len(tail) < min(self.size, _TAIL_READ):  # another, shorter file would decode as valid: wrong reads
                raise CorruptStoreError(self.path, f"the data file is shorter than the {self.size} bytes the metadata "
                                                   "records (cut short, or replaced by another file)")
            index = decode_index(tail, self.size, self.path, lambda s, e: self.fs.cat_file(self.path, start=s, end=e))
            self.cache.put(key, index, index.first_rows.nbytes + 64 * len(index.blocks))
        return index

    def block(self, number: int, *, cache: bool = True) -> Run:
        key = (self.path, number)
        run = self.cache.get(key) if cache else None
        if run is None:
            index = self.index()
            ref = index.blocks[number]
            try:
                stored = self.fs.cat_file(self.path, start=ref.offset, end=ref.offset + ref.stored)
            except FileNotFoundError:
                raise CorruptStoreError(self.path, "the data file is missing") from None
            run = decode_block(stored, ref, index.codec, self.path)
            if cache:
                self.cache.put(key, run, run.nbytes + len(run) * 16)
        return run

    def blocks_for(self, sorted_keys: np.ndarray) -> np.ndarray:
        """For probe keys sorted as ``S`` rows at the width of the index's keys: the block each may be in (-1: before
        the first)."""
        firsts = self.index().first_rows
        starts = np.searchsorted(sorted_keys, firsts.view(f"S{firsts.shape[1]}").ravel(), side="left")
        return np.searchsorted(starts, np.arange(len(sorted_keys)), side="right") - 1
