"""Reads over a bucket's layers: in-memory runs (newest first), then the data files.

Every read is vectorized over its keys: a layer answers all the keys still
open with a handful of NumPy calls, and a key found in a newer layer (a value
or a delete) is not looked for in older ones. The data files of a bucket never
overlap, so a key is looked for in at most one of them, and there in one block.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .classes import class_of, count_up_to, merge_layers, ordered, width_classes
from .datafile import DataFile
from .keys import Run, concat_values, decode, encode, hashes, key_lengths, narrow, search, sortable, widen, width_for

_VALUE = pa.large_binary()
#: Above this many entries a layer's lookups sort their probes first (``searchsorted`` is then cache-friendly).
_SORT_PROBES_ABOVE = 1 << 16


class _Probes:
    """The keys of one ``get_many`` and the values found so far. Their rows are encoded once per width class
    (one long key does not widen the others) and re-encoded at each layer's width for the keys it may hold."""

    def __init__(self, keys: pa.LargeBinaryArray) -> None:
        self.count = len(keys)
        self.lengths = key_lengths(keys)
        self.classes = width_classes(width_for(self.lengths))
        self._slots = np.zeros(len(keys), np.int64)  # each key's row in its class's rows
        self._rows: dict[int, np.ndarray] = {}
        if not len(keys) or (self.classes == self.classes[0]).all():
            self._slots = np.arange(len(keys))
            self._rows[int(self.classes[0]) if len(keys) else 0] = encode(keys)
        else:
            for number in np.unique(self.classes):
                at = np.flatnonzero(self.classes == number)
                self._slots[at] = np.arange(len(at))
                self._rows[int(number)] = encode(keys.take(pa.array(at)))
        self.positions: list[np.ndarray] = []
        self.pieces: list[pa.Array] = []

    def width(self, number: int) -> int:
        """The width of the rows of the keys of width class ``number``."""
        return self._rows[number].shape[1]

    def rows(self, at: np.ndarray, width: int) -> np.ndarray:
        """The rows of the keys ``at`` at ``width`` (a key too long for it cut as ``narrow`` cuts it)."""
        classes = self.classes[at]
        if not len(at) or (classes == classes[0]).all():
            return narrow(self._rows[int(classes[0]) if len(at) else 0][self._slots[at]], width)
        out = np.empty((len(at), width), np.uint8)
        for number in np.unique(classes):
            mine = classes == number
            out[mine] = narrow(self._rows[int(number)][self._slots[at[mine]]], width)
        return out

    def found(self, positions: np.ndarray, values: pa.Array) -> None:
        self.positions.append(positions)
        self.pieces.append(values)

    def values(self) -> pa.LargeBinaryArray:
        """The values in the keys' order, null for keys not found."""
        n = self.count
        if not self.positions:
            return pa.nulls(n, _VALUE)
        where = np.concatenate(self.positions)
        values = concat_values(self.pieces + [pa.nulls(1, _VALUE)])
        take = np.full(n, len(where), np.int64)
        take[where] = np.arange(len(where))
        return values.take(pa.array(take))


def get_many(
    runs: list[Run], files: list[DataFile], firsts: list[bytes], keys: pa.LargeBinaryArray
) -> pa.LargeBinaryArray:
    """The value of each key (null where absent or deleted); ``runs`` newest first, ``files`` in key order."""
    probes = _Probes(keys)
    open_ = np.arange(len(keys))
    for run in runs:
        if not len(open_) or not len(run):
            continue
        found = _find(run, probes, open_)
        hit = found >= 0
        if hit.any():
            probes.found(open_[hit], run.values.take(pa.array(found[hit])))
            open_ = open_[~hit]
    if len(open_) and files:
        _from_files(files, firsts, probes, open_)
    return probes.values()


def _find(run: Run, probes: _Probes, open_: np.ndarray) -> np.ndarray:
    """Positions in ``run`` (keys of one width class) of the keys ``open_`` (indexes into the probes), -1 where
    absent: only keys of its class that fit its width are looked for."""
    found = np.full(len(open_), -1, np.int64)
    fit = (probes.classes[open_] == class_of(run)) & (probes.lengths[open_] <= run.width - 2)
    candidates = open_[fit] if not fit.all() else open_
    if not len(candidates):
        return found
    probe = probes.rows(candidates, run.width)
    h = hashes(probe)
    if len(run) > _SORT_PROBES_ABOVE and len(h) > 1:
        order = np.argsort(h)
        at = np.empty(len(order), np.int64)
        at[order] = run.find(probe[order], h[order])
    else:
        at = run.find(probe, h)
    found[np.flatnonzero(fit) if not fit.all() else slice(None)] = at
    return found


def _from_files(files: list[DataFile], firsts: list[bytes], probes: _Probes, open_: np.ndarray) -> None:
    """Route each open key to the one file whose range holds it (files never overlap), then look there. The keys
    of each width class are compared with the files' first keys at their own width (``narrow`` cuts a longer first
    key), so a long first key does not widen them."""
    widest = max(len(f) for f in firsts)
    bounds = np.concatenate([widen(np.frombuffer(f, np.uint8)[None, :], widest) for f in firsts])
    file_of = np.empty(len(open_), np.int64)
    classes = probes.classes[open_]
    for number in np.unique(classes):
        mine = classes == number
        width = probes.width(int(number))
        at = sortable(probes.rows(open_[mine], width))
        file_of[mine] = np.searchsorted(sortable(narrow(bounds, width)), at, side="right") - 1
    order = np.argsort(file_of, kind="stable")
    edges = np.searchsorted(file_of[order], np.arange(len(files) + 1))
    for number, data_file in enumerate(files):
        mine = open_[order[edges[number] : edges[number + 1]]]
        if len(mine):
            _from_file(data_file, probes, mine)


def _from_file(data_file: DataFile, probes: _Probes, mine: np.ndarray) -> None:
    """Look up the keys ``mine`` in one data file, block by block, each at its block's width."""
    route = sortable(probes.rows(mine, data_file.index().first_rows.shape[1]))
    order = np.argsort(route, kind="stable")  # keys cut alike by ``narrow`` go to the same block
    mine, route = mine[order], route[order]
    block_of = data_file.blocks_for(route)
    edges = np.concatenate([[0], np.flatnonzero(np.diff(block_of)) + 1, [len(mine)]])
    for start, stop in zip(edges[:-1].tolist(), edges[1:].tolist()):  # the probes are sorted: one slice per block
        number = int(block_of[start])
        if number < 0:
            continue
        block = data_file.block(number)
        here = mine[start:stop]
        here = here[probes.lengths[here] <= block.width - 2]
        if not len(here):
            continue
        probe = probes.rows(here, block.width)
        at = block.find(probe, hashes(probe))
        hit = at >= 0
        if hit.any():
            probes.found(here[hit], block.values.take(at[hit]))


def scan(runs: list[Run], files: list[DataFile], firsts: list[bytes], start: bytes | None, stop: bytes | None,
         limit: int | None = None) -> tuple[pa.LargeBinaryArray, pa.LargeBinaryArray]:
    """The keys and values of the live entries with ``start <= key < stop`` (None: open), sorted; ``runs`` newest
    first; with ``limit``, the first ``limit`` of them, reading only as much of each layer as they need."""
    bound_keys = [k for k in (start, stop) if k is not None]
    bound_rows = encode(pa.array(bound_keys, _VALUE)) if bound_keys else None
    lo_rows = bound_rows[:1] if start is not None else None
    hi_rows = bound_rows[-1:] if stop is not None else None
    run_slices = [run.slice(*run.bounds(lo_rows, hi_rows)) for run in reversed(runs)]  # oldest first, as merge takes
    if limit is None:
        return ordered(_live(merge_layers([*_files_range(files, firsts, lo_rows, hi_rows), *run_slices])))
    # Take ``take`` entries from the front of every layer; a layer cut short may hold keys between its last one
    # taken and the others', so only keys up to the smallest such last key are final. Deletes may hide entries:
    # when too few live ones remain, take four times as many.
    take = max(limit, 1)
    while True:
        file_entries = _files_range(files, firsts, lo_rows, hi_rows, at_most=take)
        layers = [*file_entries, *(s.slice(0, take) for s in run_slices)]
        cut_layers = [layer for layer, whole in zip(layers, [*[None] * len(file_entries), *run_slices])
                      if whole is not None and len(whole) > take]
        if sum(len(f) for f in file_entries) >= take and file_entries:
            cut_layers.append(file_entries[-1])  # the files may go on after the rows taken from them
        merged = _live(merge_layers(layers))
        if cut_layers:
            last = min(decode(layer.rows[-1:])[0].as_py() for layer in cut_layers)
            if count_up_to(merged, last) < limit:
                take *= 4
                continue
        keys, values = ordered(merged)
        return keys.slice(0, limit), values.slice(0, limit)


def _live(runs: list[Run]) -> list[Run]:
    return [live for live in (run.without_tombstones() for run in runs) if len(live)] or [Run.empty()]


def _before(rows: np.ndarray, first: bytes) -> bool:
    """Whether the key of ``rows`` sorts at or before the key whose row is ``first``."""
    width = max(rows.shape[1], len(first))
    return bool(sortable(widen(rows, width))[0] <= sortable(widen(np.frombuffer(first, np.uint8)[None, :], width))[0])


def _files_range(files: list[DataFile], firsts: list[bytes], lo_rows: np.ndarray | None, hi_rows: np.ndarray | None,
                 at_most: int | None = None) -> list[Run]:
    """The entries of the data files (in key order, not overlapping) in the range, as slices of their blocks in
    key order; with ``at_most``, blocks are read only until that many entries are in hand."""
    out: list[Run] = []
    for number, data_file in enumerate(files):
        if hi_rows is not None and _before(hi_rows, firsts[number]):
            break  # this file starts at or after the end
        if lo_rows is not None and number + 1 < len(files) and not _before(lo_rows, firsts[number + 1]):
            continue  # the next file starts at or before the start
        block_rows = data_file.index().first_rows
        block_firsts, width = sortable(block_rows), block_rows.shape[1]
        first_block = 0 if lo_rows is None else max(0, search(block_firsts, lo_rows, width, "right") - 1)
        last_block = len(block_firsts) if hi_rows is None else search(block_firsts, hi_rows, width, "left")
        for block_number in range(first_block, last_block):
            if at_most is not None and sum(len(r) for r in out) >= at_most:
                return out
            block = data_file.block(block_number)
            lo, hi = block.bounds(lo_rows, hi_rows)
            if hi > lo:
                out.append(block.slice(lo, hi))
    return out
