"""Flush and compaction: merging changes into a bucket's sorted, non-overlapping data files.

The data files of a bucket split the key space into zones: file ``i`` holds
the keys from its first key up to the next file's first key. A flush sorts the
cache's changes into those zones and rewrites each zone it touches (the old
file's entries merged with the changes, deletes and overwritten values
dropped), cut into files of at most ``max_file_size``. Changes that all lie
past the last file's last key go into new files without rewriting it once it
is half full: monotonic keys (a timestamp first) never rewrite a file, random
keys rewrite every file they touch. This is HDHT's design and its advice.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .datafile import DataFile
from .format import DataFileBuilder, block_bounds
from .keys import Run, sortable, widen
from .settings import StoreSettings

if TYPE_CHECKING:
    from .catalog import Catalog

_BLOCK_HEADER = 32


def _stored_size(block: Run) -> int:
    """A block's size on disk before compression: header, keys, offsets, values."""
    offsets = np.frombuffer(block.values.buffers()[1], np.int64, len(block) + 1, block.values.offset * 8)
    return _BLOCK_HEADER + block.rows.nbytes + 8 * (len(block) + 1) + int(offsets[-1] - offsets[0])


class FileWriter:
    def __init__(self, catalog: Catalog, store: StoreSettings, hook: Callable[[str, int], None]) -> None:
        self._catalog, self._store, self._hook = catalog, store, hook
        self._written = 0

    def merge(
        self,
        files: list[dict[str, Any]],
        data: list[DataFile],
        changes: Run,
        batch_id: int,
        next_name: Callable[[str], str],
        stage: str,
    ) -> list[dict[str, Any]]:
        """The file list after merging ``changes`` (deletes included) into ``files``; new files are written."""
        self._written = 0
        if not len(changes):
            return list(files)
        if not files:
            out = self._write(changes.without_tombstones(), batch_id, next_name, stage)
            self._sync()
            return out
        zone = _zones(files, changes)
        out: list[dict[str, Any]] = []
        edges = np.flatnonzero(np.diff(zone)) + 1
        touched = {int(zone[c[0]]): c for c in np.split(np.arange(len(changes)), edges) if len(c)}
        for number, (entry, data_file) in enumerate(zip(files, data)):
            rows = touched.get(number)
            if rows is None:
                out.append(entry)
                continue
            part = changes.slice(int(rows[0]), int(rows[-1]) + 1)
            last = number == len(files) - 1
            if last and entry["size"] >= self._store.max_file_size // 2 and _after(part, entry["last"]):
                out.append(entry)  # appending past a full enough last file: no rewrite
                out.extend(self._write(part.without_tombstones(), batch_id, next_name, stage))
            else:
                merged = Run.merge([data_file.read_all(), part]).without_tombstones()
                out.extend(self._write(merged, batch_id, next_name, stage))
        self._sync()
        return out

    def compact(
        self, files: list[dict[str, Any]], data: list[DataFile], batch_id: int, next_name: Callable[[str], str]
    ) -> list[dict[str, Any]] | None:
        """Files after merging neighbours whose sizes add up to at most ``max_file_size``; None when none do.

        Deletes shrink files; this packs them again, so that a bucket's file
        count follows its live data, not its history.
        """
        groups: list[list[int]] = []
        total = 0
        for number, entry in enumerate(files):
            if groups and total + entry["size"] <= self._store.max_file_size:
                groups[-1].append(number)
                total += entry["size"]
            else:
                groups.append([number])
                total = entry["size"]
        if all(len(g) == 1 for g in groups):
            return None
        self._written = 0
        out: list[dict[str, Any]] = []
        for group in groups:
            if len(group) == 1:
                out.append(files[group[0]])
                continue
            merged = Run.merge([data[i].read_all() for i in group])
            out.extend(self._write(merged, batch_id, next_name, "compact"))
        self._sync()
        return out

    def _write(self, run: Run, batch_id: int, next_name: Callable[[str], str], stage: str) -> list[dict[str, Any]]:
        """``run`` as data files of at most ``max_file_size`` each (none when it is empty), written a block at a time."""
        store = self._store
        out: list[dict[str, Any]] = []
        current: tuple[str, Any, DataFileBuilder, int] | None = None  # name, handle, builder, first entry
        try:
            for start, stop in block_bounds(run, store.block_size):
                block = run.slice(start, stop)
                if current is not None:
                    builder = current[2]
                    room = store.max_file_size - builder.size - builder.index_bytes_per_block() * (len(builder._refs) + 1)
                    if len(block) and _stored_size(block) > room:
                        finishing, current = current, None
                        out.append(self._finish(finishing, run, start, batch_id, stage))
                if current is None:
                    name = next_name("kvd")
                    current = (name, self._open(name), DataFileBuilder(run.width, store.compression), start)
                current[1].write(current[2].block(block))
            if current is not None:
                finishing, current = current, None
                out.append(self._finish(finishing, run, len(run), batch_id, stage))
        except BaseException:
            if current is not None:
                current[1].close()  # a half-written file no metadata names: garbage the next cleanup deletes
            raise
        return out

    def _open(self, name: str) -> Any:
        catalog = self._catalog
        path = catalog.path("data", name)
        return open(path, "wb") if catalog.local else catalog.fs.open(path, "wb")

    def _finish(
        self, current: tuple[str, Any, DataFileBuilder, int], run: Run, stop: int, batch_id: int, stage: str
    ) -> dict[str, Any]:
        name, handle, builder, start = current
        try:
            handle.write(builder.finish())
            if self._catalog.local:
                handle.flush()
                if self._catalog.durable:
                    os.fsync(handle.fileno())
        finally:
            handle.close()
        self._written += 1
        if self._written == 1:
            self._hook(f"{stage}_mid_write", batch_id)
        return {
            "name": name,
            "size": builder.size,
            "count": builder.count,
            "first": run.rows[start].tobytes().hex(),
            "last": run.rows[stop - 1].tobytes().hex(),
        }

    def _sync(self) -> None:
        if self._written:
            self._catalog.sync(self._catalog.path("data"))


def _zones(files: list[dict[str, Any]], changes: Run) -> np.ndarray:
    """For each change, the file whose zone holds its key (keys before the first file go to the first)."""
    firsts = [bytes.fromhex(f["first"]) for f in files[1:]]
    if not firsts:
        return np.zeros(len(changes), np.int64)
    width = max(changes.width, max(len(f) for f in firsts))
    bounds = sortable(np.concatenate([widen(np.frombuffer(f, np.uint8)[None, :], width) for f in firsts]))
    return np.searchsorted(bounds, sortable(widen(changes.rows, width)), side="right")


def _after(part: Run, last_hex: str) -> bool:
    """Whether every key of ``part`` sorts after the key whose row is ``last_hex``."""
    last = np.frombuffer(bytes.fromhex(last_hex), np.uint8)[None, :]
    width = max(part.width, last.shape[1])
    return bool(sortable(widen(part.rows[:1], width))[0] > sortable(widen(last, width))[0])
