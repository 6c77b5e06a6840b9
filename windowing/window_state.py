"""Window state whose heavy payloads live in a key-value store (``.window_state(KVStore(path))``).

The window table keeps its small fields (keys, window, flags, counts, trigger state, vectorized
accumulator fields) where the runner keeps them: in memory (pandas) or in Spark's state row. The
heavy cells of a window, its Python accumulators ``a<i>`` (a `ToList`'s list) and last outputs
``o<i>``, move into the store as one record per window and version; the table keeps, in the
column ``payload_version``, the batch id its record was written at (-1: every heavy cell is None,
no record).

A step first picks the rows it can change (`rows_to_step`): every window of a key with new
elements, and every window of a key that has a window with a due timer or being purged. It reads
only their records, runs `windowing.engine.step` on them alone, writes a new version of each
record whose bytes changed, and leaves the other rows as they are. Windows are independent per
key, so this equals stepping the whole table (up to the order of rows and of panes in a step).

Exactly once: the runner's state of batch N and the store's batch N commit separately. A replay of
batch N (the runner's state still at N-1, the store at N) reads the versions the N-1 state names,
so a record is never overwritten: a new version gets a new store key, and the versions it
supersedes (and those of purged windows) are listed as garbage of batch N, deleted at the
bucket's next batch, when no state that can still be replayed names them. A replay finds the
store's batch already committed and only reads. Records are pickles of the cells made plain
(`state_codec`'s rule: numpy scalars as Python numbers), as the Spark state row stores them.

Store keys sort so that one key's windows are adjacent (docs/kv_store.md's key-design advice)::

    b"w" | bucket (uint32 BE) | key length (uint32 BE) | pickled key | start | end | version
    b"g" | batch id (uint64 BE) | the store key of a record that batch superseded

with start, end as int64 with the sign bit flipped, big-endian (so they sort as numbers), and
version as uint64 BE. The store is any object with the `storage.KVStore` interface: this module
never imports `storage`.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, Iterable, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from triggers import TriggerContext

from . import columns
from .engine import lateness_horizon, step
from .errors import WindowingConfigError
from .spec import EngineSpec, StepResult
from .state_codec import pickled
from .window_table import empty_state, frame_of, table_columns

VERSION = "payload_version"
"""The light table's column: the batch id a window's payload record was written at; -1: none."""
NO_RECORD = -1
RECORD, GARBAGE = b"w", b"g"
_SIGN = np.uint64(1 << 63)
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class StoreBucket(Protocol):
    """What a step needs of an open `storage.kv.Bucket`."""

    @property
    def committed_batch_id(self) -> int: ...
    def begin(self, batch_id: int) -> None: ...
    def commit(self) -> None: ...
    def get_many(self, keys: Any) -> Any: ...
    def put_many(self, keys: Any, values: Any) -> None: ...
    def delete_many(self, keys: Any) -> None: ...
    def scan_table(self, start: bytes | None = None, end: bytes | None = None, *, prefix: bytes | None = None) -> pa.Table: ...


def heavy_columns(spec: EngineSpec) -> list[str]:
    """The columns whose cells are Python objects: Python accumulators and last outputs."""
    names = [columns.accumulator(i) for i, agg in enumerate(spec.aggregations) if not agg.vectorized]
    return names + [columns.last_output(i) for i in range(len(spec.aggregations))]


def light_columns(spec: EngineSpec) -> list[str]:
    """The columns of a light table: the window table's without the heavy ones, then ``payload_version``."""
    heavy = set(heavy_columns(spec))
    return [name for name in table_columns(spec) if name not in heavy] + [VERSION]


def empty_light_state(spec: EngineSpec, key_dtypes: list[Any] | None = None) -> pd.DataFrame:
    """A light table with no windows."""
    table = empty_state(spec, key_dtypes).drop(columns=heavy_columns(spec))
    table[VERSION] = np.array([], dtype=np.int64)
    return table


def rows_to_step(spec: EngineSpec, light: pd.DataFrame, elements: pd.DataFrame, watermark: int,
                 processing_time: int) -> np.ndarray:
    """The rows a step may change: all windows of every key that has new elements or a window whose
    timer is due (the watermark passing its end, a processing-time timer) or that is being purged.

    A window outside them keeps every column: it receives nothing, is not evaluated, not purged, and
    its ``on_time_done`` and ``end_timer`` stay (they change only once the watermark passes its end).
    Whole keys are taken because a key's windows are stepped together (session merges, a closed
    window beside a new one); no step ever looks across keys.
    """
    n = len(light)
    if n == 0:
        return np.zeros(0, dtype=bool)
    end = light["end"].to_numpy()
    passed = end <= watermark
    closed = light["closed"].to_numpy()
    due = (end <= lateness_horizon(spec, watermark)) | (passed & (~light["on_time_done"].to_numpy()
                                                                    | light["end_timer"].to_numpy()))
    trigger_state = {name: light[name].to_numpy() for name in light.columns if name.startswith("t.")}
    due |= ~closed & spec.trigger.timer_due(TriggerContext(trigger_state, end, watermark, processing_time))
    if due.all():
        return due
    keys = spec.key_columns
    if len(elements) == 0 and not due.any():
        return due
    wanted = pd.concat([elements[keys], light.loc[due, keys]], ignore_index=True) if due.any() else elements[keys]
    if len(keys) == 1:
        return light[keys[0]].isin(wanted[keys[0]]).to_numpy() | due
    table_index = pd.MultiIndex.from_frame(light[keys])
    return np.asarray(table_index.isin(pd.MultiIndex.from_frame(wanted))) | due


def window_keys(bucket: int, spec: EngineSpec, table: pd.DataFrame) -> list[bytes]:
    """Per row, the store key of its window without the version: bucket, key, start, end."""
    head = RECORD + _U32.pack(bucket)
    key_parts = [pickled(k) for k in _key_tuples(spec, table)]
    bounds = np.empty((len(table), 2), dtype=">u8")
    bounds[:, 0] = table["start"].to_numpy(dtype=np.int64).view(np.uint64) ^ _SIGN
    bounds[:, 1] = table["end"].to_numpy(dtype=np.int64).view(np.uint64) ^ _SIGN
    raw = bounds.tobytes()
    return [head + _U32.pack(len(k)) + k + raw[16 * i:16 * i + 16] for i, k in enumerate(key_parts)]


def _key_tuples(spec: EngineSpec, table: pd.DataFrame) -> Iterable[tuple[Any, ...]]:
    return zip(*[table[name].to_numpy().tolist() for name in spec.key_columns])  # tolist: Python scalars


def _versioned(window_key: bytes, version: int) -> bytes:
    return window_key + _U64.pack(version)


def _payloads(table: pd.DataFrame, heavy: list[str]) -> list[bytes | None]:
    """Per row, the pickled heavy cells; None when they are all None (no record is written)."""
    cells = zip(*[table[name].to_numpy() for name in heavy])
    return [None if all(c is None for c in row) else pickled(row) for row in cells]


def _with_payloads(spec: EngineSpec, part: pd.DataFrame, blobs: list[bytes | None]) -> pd.DataFrame:
    """The window table of ``part``'s rows: its light columns and the heavy cells of ``blobs``."""
    heavy = heavy_columns(spec)
    cells = np.full((len(part), len(heavy)), None, dtype=object)
    for i, blob in enumerate(blobs):
        if blob is not None:
            cells[i, :] = pickle.loads(blob)
    full = {name: part[name] for name in part.columns if name != VERSION}
    for j, name in enumerate(heavy):
        column = np.empty(len(part), dtype=object)
        column[:] = list(cells[:, j]) if len(part) else []
        full[name] = pd.Series(column, index=part.index, dtype=object)
    return pd.DataFrame({name: full[name] for name in table_columns(spec)}, index=part.index).reset_index(drop=True)


def spilled_step(spec: EngineSpec, light: pd.DataFrame, elements: pd.DataFrame, watermark: int, processing_time: int,
                 store: StoreBucket, bucket: int, batch_id: int) -> StepResult:
    """`windowing.engine.step` over a light table whose payloads are in ``store`` (an open bucket).

    Returns the panes, the new light table and the dropped elements. Batch ``batch_id`` of the
    store is written and committed here, unless the store committed it already (a replay), when
    the step only reads; a step that changes no record writes nothing.
    """
    touched = rows_to_step(spec, light, elements, watermark, processing_time)
    columns_now = {name: light[name].to_numpy() for name in light.columns}  # NumPy: pandas' masked take costs more
    part = frame_of({name: values[touched] for name, values in columns_now.items()})
    window_key = window_keys(bucket, spec, part)
    versions = part[VERSION].to_numpy(dtype=np.int64)
    stored = versions != NO_RECORD
    blobs: list[bytes | None] = [None] * len(part)
    if stored.any():
        wanted = [_versioned(k, int(v)) for k, v, s in zip(window_key, versions, stored) if s]
        found = store.get_many(pa.array(wanted, type=pa.binary())).to_pylist()
        missing = [key for key, blob in zip(wanted, found) if blob is None]
        if missing:
            raise WindowingConfigError(
                f"the window state names {len(missing)} payload records that bucket {bucket} of the window-state store "
                f"lacks (the first: {missing[0]!r}); the store is not the one this query's state was written with: "
                "restore it, or start from a new checkpoint and an empty store")
        for row, blob in zip(np.flatnonzero(stored), found):
            blobs[row] = blob
    result = step(spec, _with_payloads(spec, part, blobs), elements, watermark, processing_time)

    new = result.state
    new_key = window_keys(bucket, spec, new)
    new_blobs = _payloads(new, heavy_columns(spec))
    before = {k: (int(v), blob) for k, v, blob in zip(window_key, versions, blobs)}
    new_versions = np.full(len(new), NO_RECORD, dtype=np.int64)
    writes: list[tuple[bytes, bytes]] = []
    for i, (key, blob) in enumerate(zip(new_key, new_blobs)):
        if blob is None:
            continue
        old_version, old_blob = before.get(key, (NO_RECORD, None))
        if old_blob == blob:
            new_versions[i] = old_version
        else:
            new_versions[i] = batch_id
            writes.append((_versioned(key, batch_id), blob))
    kept = {(key, int(v)) for key, v in zip(new_key, new_versions)}
    superseded = [_versioned(key, v) for key, (v, _) in before.items() if v != NO_RECORD and (key, v) not in kept]
    if batch_id > store.committed_batch_id:
        _write_batch(store, batch_id, writes, superseded)

    new_columns = {name: new_versions if name == VERSION else new[name].to_numpy() for name in columns_now}
    merged = frame_of(_put_back(columns_now, np.flatnonzero(touched), new_columns), copy=False)
    return StepResult(panes=result.panes, state=merged, dropped=result.dropped)


def _put_back(table: dict[str, np.ndarray], taken: np.ndarray, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``table`` with its rows at ``taken`` replaced by ``rows``: into those places while they last, then the rest
    appended, or the places left over removed. A copy, never a change of ``table``'s arrays (a replay may step
    the same state again); one key's rows keep their order, the only order a step depends on."""
    n_rows = len(next(iter(rows.values())))
    fill, drop = taken[:n_rows], taken[n_rows:]
    if len(drop):  # fewer rows came back: the places of the others go, so the filled ones move up
        fill = np.searchsorted(np.delete(np.arange(len(next(iter(table.values())))), drop), fill)
    out = {}
    for name, values in table.items():
        column, new = (np.delete(values, drop) if len(drop) else values.copy()), rows[name]
        if column.dtype != new.dtype:
            column = column.astype(np.result_type(column.dtype, new.dtype))
        column[fill] = new[:len(fill)]
        out[name] = np.concatenate([column, new[len(fill):]]) if n_rows > len(fill) else column
    return out


def _write_batch(store: StoreBucket, batch_id: int, writes: list[tuple[bytes, bytes]], superseded: list[bytes]) -> None:
    """Batch ``batch_id`` of the store: delete the garbage of earlier batches, write the new records, list
    the records this batch superseded as its garbage. Nothing at all if there is nothing to do."""
    garbage = store.scan_table(GARBAGE, GARBAGE + _U64.pack(batch_id)).column("key")
    if not writes and not superseded and len(garbage) == 0:
        return
    store.begin(batch_id)
    if len(garbage):
        markers = garbage.combine_chunks()
        store.delete_many(pa.array([m[9:] for m in markers.to_pylist()], type=pa.binary()))
        store.delete_many(markers)
    if writes:
        keys, values = zip(*writes)
        store.put_many(pa.array(keys, type=pa.binary()), pa.array(values, type=pa.binary()))
    if superseded:
        marker = GARBAGE + _U64.pack(batch_id)
        store.put_many(pa.array([marker + key for key in superseded], type=pa.binary()),
                       pa.array([b""] * len(superseded), type=pa.binary()))
    store.commit()


def garbage_pending(store: StoreBucket) -> bool:
    """Whether a batch listed records that a later batch of this bucket must delete: a bucket left with no
    window must still be called once more (the Spark runner keeps its state and a timeout for that)."""
    return store.scan_table(prefix=GARBAGE).num_rows > 0


def collect_garbage(store: StoreBucket, batch_id: int) -> None:
    """Delete, in batch ``batch_id``, the records earlier batches superseded (the end of a run that will not be
    replayed: the pandas runner)."""
    if batch_id > store.committed_batch_id:
        _write_batch(store, batch_id, [], [])


def clear(store: StoreBucket, batch_id: int) -> None:
    """Delete every record and garbage mark in batch ``batch_id``: a run that starts from no state (pandas)
    owns nothing an earlier run left behind (a run that crashed before its end)."""
    leftovers = [store.scan_table(prefix=prefix).column("key") for prefix in (RECORD, GARBAGE)]
    if sum(len(keys) for keys in leftovers) == 0:
        return
    store.begin(batch_id)
    for keys in leftovers:
        if len(keys):
            store.delete_many(keys.combine_chunks())
    store.commit()
