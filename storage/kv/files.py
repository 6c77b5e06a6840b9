"""Flush and compaction: merging changes into a bucket's sorted, non-overlapping data files.

The data files of a bucket split the key space into zones: file ``i`` holds
the keys from its first key up to the next file's first key. A flush sorts the
cache's changes into those zones and rewrites each zone it touches (the old
file's entries merged with the changes, deletes and overwritten values
dropped), cut into files of at most ``max_file_size``. Changes that all lie
past the last file's last key go into new files without rewriting it once it
is half full: monotonic keys (a timestamp first) never rewrite a file, random
keys rewrite every file they touch. This is HDHT's design and its advice.

A rewrite streams: it reads an old file a block at a time, merges each block
with the changes that fall in it, and writes full blocks as they come, so a
flush holds the cache's changes and a few blocks, never a whole file.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np

from .classes import by_class, concat, merge_layers, ordered_blocks, split
from .datafile import DataFile
from .format import DataFileBuilder
from .keys import Run, decode, encode, narrow, sortable, widen
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
        changes: list[Run],
        batch_id: int,
        next_name: Callable[[str], str],
        stage: str,
    ) -> list[dict[str, Any]]:
        """The file list after merging ``changes`` (one run per width class, deletes included) into ``files``;
        new files are written."""
        self._written = 0
        if not any(len(c) for c in changes):
            return list(files)
        if not files:
            out = self._write([[c.without_tombstones() for c in changes]], batch_id, next_name, stage)
            self._sync()
            return out
        bounds = _file_firsts(files[1:])
        cuts = [np.searchsorted(_zones(bounds, c), np.arange(len(files) + 1)) for c in changes]
        out: list[dict[str, Any]] = []
        for number, (entry, data_file) in enumerate(zip(files, data)):
            part = [c.slice(int(at[number]), int(at[number + 1])) for c, at in zip(changes, cuts)]
            part = [p for p in part if len(p)]
            if not part:
                out.append(entry)
                continue
            last = number == len(files) - 1
            if last and entry["size"] >= self._store.max_file_size // 2 and _after(part, entry["last"]):
                out.append(entry)  # appending past a full enough last file: no rewrite
                out.extend(self._write([[p.without_tombstones() for p in part]], batch_id, next_name, stage))
            else:
                out.extend(self._write(_merged_blocks(data_file, part), batch_id, next_name, stage))
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
            out.extend(self._write(_blocks_of([data[i] for i in group]), batch_id, next_name, "compact"))
        self._sync()
        return out

    def _write(
        self, layers: Iterable[list[Run]], batch_id: int, next_name: Callable[[str], str], stage: str
    ) -> list[dict[str, Any]]:
        """``layers`` (each one run per width class, in key order one after another) as data files of at most
        ``max_file_size`` each: none when they are empty; written a block at a time as the layers come."""
        store = self._store
        out: list[dict[str, Any]] = []
        current: tuple[str, Any, DataFileBuilder] | None = None  # name, handle, builder
        last = np.zeros((0, 8), np.uint8)  # the row of the last key written to the current file
        try:
            for block in _rebuffered(layers, store.block_size):
                if current is not None:
                    builder = current[2]
                    if builder.size + builder.index_bytes_with(block) + _stored_size(block) > store.max_file_size:
                        finishing, current = current, None
                        out.append(self._finish(finishing, last, batch_id, stage))
                if current is None:
                    name = next_name("kvd")
                    current = (name, self._open(name), DataFileBuilder(store.compression))
                current[1].write(current[2].block(block))
                last = block.rows[-1:]
            if current is not None:
                finishing, current = current, None
                out.append(self._finish(finishing, last, batch_id, stage))
        except BaseException:
            if current is not None:
                current[1].close()  # a half-written file no metadata names: garbage the next cleanup deletes
            raise
        return out

    def _open(self, name: str) -> Any:
        catalog = self._catalog
        path = catalog.path("data", name)
        return open(path, "wb") if catalog.local else catalog.fs.open(path, "wb")

    def _finish(self, current: tuple[str, Any, DataFileBuilder], last: np.ndarray, batch_id: int, stage: str) -> dict[str, Any]:
        name, handle, builder = current
        try:
            handle.write(builder.finish(batch_id))
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
            "first": builder.first_key_hex,
            "last": encode(decode(last)).tobytes().hex(),  # at its own width, not its block's
        }

    def _sync(self) -> None:
        if self._written:
            self._catalog.sync(self._catalog.path("data"))


def _file_firsts(files: list[dict[str, Any]]) -> np.ndarray:
    """The first keys of ``files`` as rows of one width (each file's keys have a width of their own)."""
    if not files:
        return np.zeros((0, 8), np.uint8)
    firsts = [np.frombuffer(bytes.fromhex(f["first"]), np.uint8)[None, :] for f in files]
    width = max(f.shape[1] for f in firsts)
    return np.concatenate([widen(f, width) for f in firsts])


def _zones(bounds: np.ndarray, changes: Run) -> np.ndarray:
    """For each change, its zone: zone ``i`` holds the keys from ``bounds[i - 1]`` (inclusive) to ``bounds[i]``;
    zone 0 everything before ``bounds[0]``. Compared at the changes' width: a longer bound is cut to it (``narrow``
    keeps its order against the changes' keys), so a long bound does not widen the changes."""
    if not len(bounds):
        return np.zeros(len(changes), np.int64)
    return np.searchsorted(sortable(narrow(bounds, changes.width)), sortable(changes.rows), side="right")


def _merged_blocks(data_file: DataFile, changes: list[Run]) -> Iterator[list[Run]]:
    """``data_file``'s entries merged with ``changes`` (one run per width class; a newer value wins, deletes
    dropped), a block at a time: each block with the changes from its first key to the next block's (changes
    before the first go with it), as one run per width class."""
    firsts = data_file.index().first_rows
    cuts = [np.searchsorted(_zones(firsts[1:], c), np.arange(len(firsts) + 1)) for c in changes]
    for number in range(len(firsts)):
        block = data_file.block(number, cache=False)
        mine = [c.slice(int(at[number]), int(at[number + 1])) for c, at in zip(changes, cuts)]
        yield [run.without_tombstones() for run in merge_layers([block, *mine])]


def _blocks_of(data_files: list[DataFile]) -> Iterator[list[Run]]:
    """Every block of neighbouring ``data_files``, in key order, as one run per width class, without filling the
    block cache."""
    for data_file in data_files:
        for number in range(len(data_file.index().blocks)):
            yield split(data_file.block(number, cache=False))


def _rebuffered(layers: Iterable[list[Run]], block_size: int) -> Iterator[Run]:
    """``layers`` (in key order) as blocks of about ``block_size`` bytes, each at its own width: what is left of a
    layer after its full blocks waits for the next one, so that merging block by block does not leave small
    blocks behind."""
    pending: list[Run] = []
    for layer in layers:
        layer = [run for run in layer if len(run)]
        if not layer:
            continue
        if pending:
            layer = _joined(pending, layer)
        blocks = ordered_blocks(layer, block_size)
        yield from blocks[:-1]
        pending = split(blocks[-1])
    if pending:
        yield from ordered_blocks(pending, block_size)


def _joined(older: list[Run], newer: list[Run]) -> list[Run]:
    """Two layers, every key of ``older`` before every key of ``newer``, as one: run by run of each width class."""
    return [concat(runs) if len(runs) > 1 else runs[0] for runs in by_class([*older, *newer])]


def _after(part: list[Run], last_hex: str) -> bool:
    """Whether every key of ``part`` (one run per width class) sorts after the key whose row is ``last_hex``."""
    last = np.frombuffer(bytes.fromhex(last_hex), np.uint8)[None, :]
    return all(sortable(narrow(last, run.width))[0] < sortable(run.rows[:1])[0] for run in part)
