"""Reads over a bucket's layers: in-memory runs (newest first), then the data files.

Every read is vectorized over its keys: a layer answers all the keys still
open with a handful of NumPy calls, and a key found in a newer layer (a value
or a delete) is not looked for in older ones. The data files of a bucket never
overlap, so a key is looked for in at most one of them, and there in one block.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .datafile import DataFile
from .keys import Run, concat_values, encode, hashes, key_lengths, narrow, search, sortable, widen

_VALUE = pa.large_binary()
#: Above this many entries a layer's lookups sort their probes first (``searchsorted`` is then cache-friendly).
_SORT_PROBES_ABOVE = 1 << 16


class _Probes:
    """The keys of one ``get_many`` (rows at their own width) and the values found so far."""

    def __init__(self, keys: pa.LargeBinaryArray) -> None:
        self.lengths = key_lengths(keys)
        self.rows = encode(keys)
        self.positions: list[np.ndarray] = []
        self.pieces: list[pa.Array] = []

    def found(self, positions: np.ndarray, values: pa.Array) -> None:
        self.positions.append(positions)
        self.pieces.append(values)

    def values(self) -> pa.LargeBinaryArray:
        """The values in the keys' order, null for keys not found."""
        n = len(self.rows)
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
    """Positions in ``run`` of the keys ``open_`` (indexes into the probes), -1 where absent."""
    found = np.full(len(open_), -1, np.int64)
    fit = probes.lengths[open_] <= run.width - 2
    candidates = open_[fit] if not fit.all() else open_
    probe = narrow(probes.rows[candidates], run.width)
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
    """Route each open key to the one file whose range holds it (files never overlap), then look there."""
    width = max(probes.rows.shape[1], max(len(f) for f in firsts))
    probe = sortable(widen(probes.rows[open_], width))
    order = np.argsort(probe, kind="stable")
    ordered = open_[order]
    bounds = np.array([sortable(widen(np.frombuffer(f, np.uint8)[None, :], width))[0] for f in firsts])
    starts = np.searchsorted(probe[order], bounds, side="left")
    for number, data_file in enumerate(files):
        stop = starts[number + 1] if number + 1 < len(files) else len(ordered)
        mine = ordered[starts[number] : stop]
        if len(mine):
            _from_file(data_file, probes, mine)


def _from_file(data_file: DataFile, probes: _Probes, mine: np.ndarray) -> None:
    """Look up the keys ``mine`` (sorted) in one data file, block by block."""
    width = data_file.index().width
    mine = mine[probes.lengths[mine] <= width - 2]
    if not len(mine):
        return
    probe = narrow(probes.rows[mine], width)
    probe_hashes = hashes(probe)
    block_of = data_file.blocks_for(sortable(probe))
    edges = np.concatenate([[0], np.flatnonzero(np.diff(block_of)) + 1, [len(mine)]])
    for start, stop in zip(edges[:-1].tolist(), edges[1:].tolist()):  # the probes are sorted: one slice per block
        number = int(block_of[start])
        if number < 0:
            continue
        block = data_file.block(number)
        at = block.find(probe[start:stop], probe_hashes[start:stop])
        hit = at >= 0
        if hit.any():
            probes.found(mine[start:stop][hit], block.values.take(at[hit]))


def scan(runs: list[Run], files: list[DataFile], firsts: list[bytes], start: bytes | None, stop: bytes | None,
         limit: int | None = None) -> Run:
    """The live entries with ``start <= key < stop`` (None: open), sorted; ``runs`` newest first; with ``limit``,
    the first ``limit`` of them, reading only as much of each layer as they need."""
    bound_keys = [k for k in (start, stop) if k is not None]
    bound_rows = encode(pa.array(bound_keys, _VALUE)) if bound_keys else None
    lo_rows = bound_rows[:1] if start is not None else None
    hi_rows = bound_rows[-1:] if stop is not None else None
    run_slices = [run.slice(*run.bounds(lo_rows, hi_rows)) for run in reversed(runs)]  # oldest first, as merge takes
    if limit is None:
        return Run.merge([*_files_range(files, firsts, lo_rows, hi_rows), *run_slices]).without_tombstones()
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
        merged = Run.merge(layers).without_tombstones()
        if not cut_layers:
            return merged.slice(0, min(limit, len(merged)))
        width = max(layer.width for layer in cut_layers)
        last = min((widen(layer.rows[-1:], width) for layer in cut_layers), key=lambda rows: sortable(rows)[0])
        final = merged.slice(0, search(sortable(merged.rows), last, merged.width, "right")) if len(merged) else merged
        if len(final) >= limit:
            return final.slice(0, limit)
        take *= 4


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
        index = data_file.index()
        block_firsts = sortable(index.first_rows)
        first_block = 0 if lo_rows is None else max(0, search(block_firsts, lo_rows, index.width, "right") - 1)
        last_block = len(block_firsts) if hi_rows is None else search(block_firsts, hi_rows, index.width, "left")
        for block_number in range(first_block, last_block):
            if at_most is not None and sum(len(r) for r in out) >= at_most:
                return out
            block = data_file.block(block_number)
            lo, hi = block.bounds(lo_rows, hi_rows)
            if hi > lo:
                out.append(block.slice(lo, hi))
    return out
