"""Window state in a key-value store, one record per key, with a timer index (``.window_state(KVStore(path))``).

The store's bucket holds the whole window table of its keys: one record per key with all its windows,
every column (`windowing.window_table`). The runner keeps nothing that grows with the open windows
(an empty table for the dtypes on pandas, an empty state row on Spark), so a step's cost depends on
what it touches, not on what is stored.

A step steps every window of the keys it touches: the keys with new elements, and the keys a
timer index says are due. Each key has one index entry ``E`` at the earliest watermark at which
`keys_to_step` must step it (a window's end while it owes its ON_TIME pane or has an end-of-window
timer, its end plus the allowed lateness: its purge); with processing-time triggers also ``P`` at
its earliest timer after the processing time of the step that wrote it, and ``D`` while a timer at
or before that time is still pending (`AtWatermark`'s periodic firing, which a composite held back:
such a key is stepped in every step, as the trigger asks). Windows are independent per key and a
key's windows are stepped together (session merges, a closed window beside a new one), so stepping
the touched keys equals stepping the whole table. The step reads their records (one ``get_many``),
runs `windowing.engine.step` on them alone, and writes back the records whose bytes changed and the
index entries that moved.

Exactly once, without versions: every store key batch N writes or deletes gets an undo record
holding its value before N. A replay of batch N (the store committed N, the runner's state is at
N-1: Spark retrying the batch) reads through the undo records, so it sees the store as it was before
N, gives the first attempt's panes, and writes nothing. Batch N+1 deletes N's undo records: the
runner committed N, which is then never replayed.

Store keys (``due`` and ``next`` as int64 with the sign bit flipped, big-endian, so they sort as
numbers; the key as `state_codec.pickled` of its tuple of values, each spelt one way: `key_blobs`; the batch
id big-endian)::

    b"K" | pickled key                  -> the key's windows (`_Record`)
    b"E" | due | pickled key            -> b""   the key is due once the watermark reaches ``due``
    b"P" | next | pickled key           -> b""   a processing-time timer of the key's at ``next``
    b"D" | pickled key                  -> b""   a processing-time timer at or before its last step
    b"U" | batch id | store key         -> b"\\x01" + the value before that batch, or b"\\x00": absent
    b"R"                                -> b""   a pandas run wrote the bucket (`start_run`)

The store is any object with the `storage.KVStore` bucket interface: this module never imports `storage`.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from triggers import NO_TIME, TriggerContext

from . import state_classes
from .engine import step
from .errors import WindowingConfigError
from .spec import EngineSpec
from .state_codec import dumped, pickled
from .timeaxis import MAX_TIME, add_saturating
from .window_table import current_layout, table_columns

RECORD, DUE, PROCESSING, PENDING, UNDO = b"K", b"E", b"P", b"D", b"U"
_WINDOW_STATE_PREFIXES = (RECORD, DUE, PROCESSING, PENDING, UNDO)
PANDAS_RUN = b"R"
"""The key marking a bucket a pandas run wrote (`start_run`): it may clear it."""
PANDAS_BUCKET = 0
"""The bucket a pandas run writes: it has one group of keys."""
LAYOUT = 2
"""The layout of the rows of the records this release writes (`_Record.layout`): 1 added the processing-time
trigger's ``timer``, 2 its ``later`` timers (`triggers.Column.since`)."""
_ABSENT, _PRESENT = b"\x00", b"\x01"
_BIAS = 1 << 63
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
    def scan_table(self, start: bytes | None = None, end: bytes | None = None, *, prefix: bytes | None = None,
                   limit: int | None = None) -> pa.Table: ...


@dataclass(frozen=True)
class KeyedStepResult:
    """What a step gave, and what the bucket holds after it (for the runner's timeouts)."""

    panes: pd.DataFrame
    dropped: pd.DataFrame
    windows_left: bool
    """The bucket holds a window of some key."""
    undo_pending: bool
    """The bucket holds undo records that its next batch deletes: a bucket without windows must still be called once."""
    next_watermark_time: int
    """The earliest watermark at which a window is due (`windowing.engine.next_timers`); NO_TIME: none."""
    next_processing_time: int
    """The earliest processing time after this step's at which a trigger may fire; NO_TIME: none."""
    committed_batch_id: int
    """The bucket's last committed batch after the step (the runner keeps it, for `keyed_step`'s ``committed_at_least``)."""


def _time(t: int) -> bytes:
    return _U64.pack(int(t) + _BIAS)


def _time_of(store_key: bytes) -> int:
    return int(_U64.unpack_from(store_key, 1)[0]) - _BIAS


def _until(prefix: bytes, time: int) -> bytes:
    """The end (exclusive) of a scan of ``prefix | time | ...`` entries at or before ``time``."""
    return prefix + _time(time + 1) if time < MAX_TIME else bytes([prefix[0] + 1])


def key_blobs(spec: EngineSpec, table: pd.DataFrame) -> list[bytes]:
    """Per row of ``table`` (a window table or a step's elements), its key as the store names it: equal for keys
    the engine groups as one (pandas' factorize: nulls are one key, 1 == 1.0 == True), however each table spells
    them (a step's elements may hold None where the table read back holds NaN). Coarser is harmless: a record
    may then hold the windows of several keys, which are stepped together."""
    if not len(table):
        return []
    return [pickled(key) for key in zip(*[_canonical_column(table[name]) for name in spec.key_columns])]


def _canonical_column(column: pd.Series) -> list[Any]:
    values = column.to_numpy()
    if values.dtype.kind in "iu":
        return values.tolist()
    if values.dtype.kind == "b":
        return values.astype(np.int64).tolist()
    if values.dtype.kind in "mM":
        return _nanoseconds(values)
    return [_canonical(value) for value in values.tolist()]


def _nanoseconds(values: np.ndarray) -> list[int | None]:
    """Instants or durations of any unit as whole nanoseconds (Python ints, exact beyond int64's nanosecond range),
    None for NaT: a step's elements may hold microseconds (a Spark timestamp) where the table read back holds
    Timestamps."""
    unit: Any
    unit, count = np.datetime_data(values.dtype)
    per_tick = int(np.timedelta64(count, unit) // np.timedelta64(1, "ns"))
    return [None if missing else ticks * per_tick
            for missing, ticks in zip(np.isnat(values).tolist(), values.view(np.int64).tolist())]


def _canonical(value: Any) -> Any:
    """One spelling of a key value: None for every null, a whole number as an int, a Decimal that equals a float as
    that float (else in its shortest form), an instant or a duration as its nanoseconds, a tuple or frozenset of
    such values, the rest as it is."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (np.datetime64, np.timedelta64)):
        return _nanoseconds(np.asarray([value]))[0]
    if isinstance(value, np.generic):
        return _canonical(value.item())
    if isinstance(value, (bool, float)):
        return None if value != value else int(value) if float(value).is_integer() else value
    if isinstance(value, decimal.Decimal):  # Decimal("1") == 1 and Decimal("1.5") == 1.5: the engine groups them as one
        if value.is_nan():
            return None
        if not value.is_finite():
            return float(value)
        if value == value.to_integral_value():
            return int(value)
        return float(value) if float(value) == value else value.normalize()
    if isinstance(value, datetime.datetime):
        return _nanoseconds(np.asarray([pd.Timestamp(value).to_datetime64()]))[0]
    if isinstance(value, datetime.timedelta):
        return _nanoseconds(np.asarray([pd.Timedelta(value).to_timedelta64()]))[0]
    if isinstance(value, tuple):
        return tuple(_canonical(item) for item in value)
    if isinstance(value, frozenset):  # equal sets may iterate in other orders, so pickle apart
        return ("frozenset", *sorted((_canonical(item) for item in value), key=repr))
    return value


@dataclass(frozen=True)
class _Record:
    """One key's windows, as its ``K`` record holds them: its index entries' times and its window rows."""

    due: int
    next_processing: int | None
    pending: bool
    rows: tuple[tuple[Any, ...], ...]
    layout: int = 0
    """`LAYOUT` for rows with every column of `table_columns`; an earlier one (0: records written before layouts) for
    rows without the trigger state columns added since (`windowing.window_table.current_layout` fills them)."""

    def index(self, key: bytes) -> list[bytes]:
        """The index entries that stand for this record."""
        entries = [DUE + _time(self.due) + key]
        if self.next_processing is not None:
            entries.append(PROCESSING + _time(self.next_processing) + key)
        if self.pending:
            entries.append(PENDING + key)
        return entries

    def encoded(self) -> bytes:
        return dumped((self.due, self.next_processing, self.pending, self.rows, self.layout))

    @staticmethod
    def decoded(blob: bytes) -> _Record:
        return _Record(*state_classes.loads(blob))


def records_of(spec: EngineSpec, table: pd.DataFrame, processing_time: int) -> dict[bytes, _Record]:
    """The records of ``table``'s keys, a window table made by a step at ``processing_time``."""
    if not len(table):
        return {}
    codes, keys = pd.factorize(pd.Series(key_blobs(spec, table), dtype=object))
    order = np.argsort(codes, kind="stable")
    firsts = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1]])
    rows = list(zip(*[_cells(table[name])[order].tolist() for name in table_columns(spec)]))
    end = table["end"].to_numpy(dtype=np.int64)
    owes = ~table["on_time_done"].to_numpy() | table["end_timer"].to_numpy()
    # Due at a watermark W exactly when the step's purge (end + lateness <= W) or its ON_TIME pane or end-of-window
    # timer (end <= W) needs the window: `windowing.engine.lateness_horizon`, `next_timers`.
    due = np.minimum(np.where(owes, end, NO_TIME), add_saturating(end, spec.allowed_lateness))
    future, past = _processing_timers(spec, table, processing_time)
    per_key = [np.minimum.reduceat(due[order], firsts).tolist(), np.minimum.reduceat(future[order], firsts).tolist(),
               np.logical_or.reduceat(past[order], firsts).tolist()]
    lasts = [*firsts[1:].tolist(), len(rows)]
    return {keys[code]: _Record(key_due, None if next_processing == NO_TIME else next_processing, pending,
                                tuple(rows[first:last]), LAYOUT)
            for code, (key_due, next_processing, pending, first, last)
            in enumerate(zip(*per_key, firsts.tolist(), lasts))}


def _cells(column: pd.Series) -> np.ndarray:
    """A column's values as a record holds them: instants and durations as Timestamps and Timedeltas, which NumPy's
    ``tolist`` made nanoseconds as ints (read back into a Spark table of Python objects, a timestamp key came out
    1000 times later)."""
    return column.astype(object).to_numpy() if column.dtype.kind in "mM" else column.to_numpy()


def _processing_timers(spec: EngineSpec, table: pd.DataFrame, processing_time: int) -> tuple[np.ndarray, np.ndarray]:
    """Per window, its earliest processing-time timer after ``processing_time`` (NO_TIME: none) and whether one
    at or before it is pending; none for triggers without processing-time timers. A closed window's timer counts
    too: it fires nothing, but the step that finds it due consumes it, as a step of the whole table does (left
    unconsumed, the store kept a timer the table had dropped: state that differed, no pane in the cases tried)."""
    future = np.full(len(table), NO_TIME, dtype=np.int64)
    past = np.zeros(len(table), dtype=bool)
    if not spec.trigger.uses_processing_time():
        return future, past
    end = table["end"].to_numpy(dtype=np.int64)
    trigger_state = {name: table[name].to_numpy() for name in table.columns if name.startswith("t.")}
    for timer in spec.trigger.processing_timers(TriggerContext(trigger_state, end, 0, processing_time)):
        future = np.minimum(future, np.where(timer > processing_time, timer, NO_TIME))
        past |= timer <= processing_time
    return future, past


class _View:
    """The bucket as it was before batch ``batch_id`` when the store committed that batch (a replay): the
    committed values overlaid with the batch's undo records; else the committed values."""

    def __init__(self, store: StoreBucket, replayed_batch: int | None):
        self.store = store
        self.before: dict[bytes, bytes | None] = {}
        if replayed_batch is not None:
            undo = store.scan_table(prefix=UNDO + _U64.pack(replayed_batch))
            for key, value in zip(undo.column("key").to_pylist(), undo.column("value").to_pylist()):
                self.before[key[9:]] = value[1:] if value[:1] == _PRESENT else None

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        values = self.store.get_many(pa.array(keys, type=pa.binary())).to_pylist() if keys else []
        if self.before:
            values = [self.before.get(key, value) for key, value in zip(keys, values)]
        return values

    def keys_between(self, start: bytes, end: bytes) -> list[bytes]:
        keys = self.store.scan_table(start, end).column("key").to_pylist()
        if not self.before:
            return keys
        present = set(keys)
        for key, value in self.before.items():
            if start <= key < end:
                if value is None:
                    present.discard(key)
                else:
                    present.add(key)
        return sorted(present)


def keys_to_step(spec: EngineSpec, view: _View, elements: pd.DataFrame, watermark: int, processing_time: int) -> list[bytes]:
    """The keys a step at ``watermark`` and ``processing_time`` may change: those with new elements and those the
    index says are due (a window the watermark passes or purges, a processing-time timer at or before
    ``processing_time``); every other key keeps every column (it receives nothing and fires nothing)."""
    keys = dict.fromkeys(key_blobs(spec, elements))
    keys.update(dict.fromkeys(entry[9:] for entry in view.keys_between(DUE, _until(DUE, watermark))))
    if spec.trigger.uses_processing_time():
        keys.update(dict.fromkeys(entry[9:] for entry in view.keys_between(PROCESSING, _until(PROCESSING, processing_time))))
        keys.update(dict.fromkeys(entry[1:] for entry in view.keys_between(PENDING, bytes([PENDING[0] + 1]))))
    return list(keys)


def windows_of(spec: EngineSpec, template: pd.DataFrame, records: Iterable[_Record]) -> pd.DataFrame:
    """The window table of ``records``' rows, with ``template``'s columns and dtypes.

    A record's row holds its cells in the order of `table_columns`; one written before `LAYOUT` lacks the
    trigger state columns added since, and one written before `EngineSpec.keeps_last_outputs` holds each
    window's last outputs whether the pipeline needs them or not: `windowing.window_table.current_layout`
    brings them up to date (a store holds such records until a step rewrites their key).
    """
    names = list(template.columns)
    by_layout: dict[int, list[tuple[Any, ...]]] = {LAYOUT: []}
    for record in records:
        by_layout.setdefault(record.layout, []).extend(record.rows)
    rows = by_layout.pop(LAYOUT)
    if any(len(row) != len(names) for row in rows):
        raise _written_by_another_pipeline(len(next(row for row in rows if len(row) != len(names))), len(names))
    table = _frame(template, names, rows)
    if not by_layout:
        return table
    return pd.concat([table, *(frame for layout, earlier in sorted(by_layout.items())
                               for frame in _earlier_windows(spec, template, layout, earlier))], ignore_index=True)


def _frame(template: pd.DataFrame, names: list[str], rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """The columns ``names`` of ``rows``, with ``template``'s dtypes (object for a column it lacks)."""
    cells = list(zip(*rows)) if rows else [()] * len(names)
    columns: dict[str, Any] = {}
    for name, values in zip(names, cells):
        dtype = template[name].dtype if name in template else np.dtype(object)
        if pd.api.types.is_integer_dtype(dtype) and not isinstance(dtype, np.dtype):
            # nullable integers (Int64, UInt64): Python ints and None, as the engine holds them (`plan._values`);
            # as Int64 the engine's to_numpy made them float64, 2**53 + 1 a float 2**53
            columns[name] = pd.Series([None if value is None or value is pd.NA else value for value in values], dtype=object)
        elif not isinstance(dtype, np.dtype):  # a key column of another pandas dtype (strings)
            columns[name] = pd.Series(list(values), dtype=dtype)
        elif dtype.kind == "O":
            columns[name] = pd.Series(np.fromiter(values, dtype=object, count=len(rows)), dtype=object, copy=False)
        elif dtype.kind in "mM":  # Timestamps and Timedeltas (records written before: nanoseconds as ints), NaT
            columns[name] = pd.Series(list(values), dtype=object).astype(dtype).to_numpy()  # NumPy cuts Timedeltas to us
        elif dtype.kind == "b" and any(value is None or value != value for value in values):
            # A null among booleans (a nullable boolean key on Spark, kept as NaN by the table written): True,
            # False and None, as the step's elements hold it; NumPy would make None False and NaN True.
            columns[name] = pd.Series([None if value is None or value != value else bool(value) for value in values],
                                      dtype=object)
        else:
            try:
                columns[name] = np.array(values, dtype=dtype)
            except (TypeError, ValueError):
                if dtype.kind not in "iu":
                    raise
                # A null among integers (a nullable bigint key on Spark): Python ints and None, the engine's form
                # of such a column (`windowing.runners.spark.combine.nulls_restored`).
                columns[name] = pd.Series([None if value is None or value != value else value for value in values],
                                          dtype=object)
    return pd.DataFrame(columns, index=pd.RangeIndex(len(rows)))


def _earlier_windows(spec: EngineSpec, template: pd.DataFrame, layout: int, rows: list[tuple[Any, ...]]) -> list[pd.DataFrame]:
    """The windows of rows of an earlier ``layout``, in this release's: their cells are those of `table_columns`
    but for the trigger state columns added since (`triggers.Column.since`), with every last output (records
    written before layouts) or the pipeline's."""
    added = {name for name, column in spec.trigger.columns().items() if column.since > layout}
    layouts = {len(written): written for written in (
        [name for name in table_columns(spec, last_outputs=last_outputs) if name not in added]
        for last_outputs in (True, spec.keeps_last_outputs))}
    widths = {len(row) for row in rows}
    if not widths <= set(layouts):
        raise _written_by_another_pipeline(min(widths - set(layouts)), len(template.columns))
    return [current_layout(spec, _frame(template, layouts[width], [row for row in rows if len(row) == width]))
            for width in sorted(widths)]


def _written_by_another_pipeline(cells: int, expected: int) -> WindowingConfigError:
    return WindowingConfigError(
        f"the window state's records hold {cells} cells per window, not the {expected} of this "
        "pipeline's window table: the store was written by another pipeline; restore the pipeline, or "
        "start from a new checkpoint and an empty store")


def keyed_step(spec: EngineSpec, template: pd.DataFrame, elements: pd.DataFrame, watermark: int, processing_time: int,
               store: StoreBucket, batch_id: int, committed_at_least: int | None = None) -> KeyedStepResult:
    """`windowing.engine.step` over the window table that ``store`` (an open bucket) holds, as batch ``batch_id``.

    ``template``: a window table without rows, for the columns' dtypes. The batch is written and committed here,
    unless the store committed it already (a replay), when the step only reads; a step that changes nothing and
    has no undo records to delete writes nothing. ``committed_at_least``: the batch the bucket had committed by
    the runner's last step, as its own state recorded it; a bucket that committed less lost batches since (a
    deleted store, an older copy restored, a damaged log), and the step refuses to run on what is left.
    """
    committed = store.committed_batch_id
    if committed_at_least is not None and committed < committed_at_least:
        raise WindowingConfigError(
            f"the window state's store committed batch {committed} in this bucket, but the query's checkpoint "
            f"recorded batch {committed_at_least} committed there: the store lost batches (deleted, an older copy "
            "restored, a damaged log), and their windows with them: restore it, or start from a new checkpoint and "
            "an empty store")
    if batch_id < committed:
        raise WindowingConfigError(
            f"batch {batch_id} of the window state is behind its store, whose bucket committed batch {committed}: only "
            "the last batch can be replayed, so the store is not the one this query's state was written with: restore "
            "it, or start from a new checkpoint and an empty store")
    replay = batch_id == committed
    view = _View(store, batch_id if replay else None)
    keys = keys_to_step(spec, view, elements, watermark, processing_time)
    blobs = view.get_many([RECORD + key for key in keys])
    before = {key: (blob, _Record.decoded(blob)) for key, blob in zip(keys, blobs) if blob is not None}
    result = step(spec, windows_of(spec, template, (record for _, record in before.values())), elements, watermark,
                  processing_time)
    if not replay:
        after = records_of(spec, result.state, processing_time)
        _write_batch(store, batch_id, _changes(keys, before, after))
    return KeyedStepResult(result.panes, result.dropped, *_after(store))


def _changes(keys: list[bytes], before: dict[bytes, tuple[bytes, _Record]],
             after: dict[bytes, _Record]) -> dict[bytes, tuple[bytes | None, bytes | None]]:
    """Per store key the step changes: its value before and after (None: absent)."""
    changes: dict[bytes, tuple[bytes | None, bytes | None]] = {}
    for key in dict.fromkeys([*keys, *after]):  # the same keys, as key_blobs spells keys alike
        old_blob, old = before.get(key, (None, None))
        new = after.get(key)
        new_blob = None if new is None else new.encoded()
        if new_blob == old_blob:
            continue
        changes[RECORD + key] = (old_blob, new_blob)
        old_index = set() if old is None else set(old.index(key))
        new_index = set() if new is None else set(new.index(key))
        changes.update({entry: (b"", None) for entry in old_index - new_index})
        changes.update({entry: (None, b"") for entry in new_index - old_index})
    return changes


def _write_batch(store: StoreBucket, batch_id: int, changes: dict[bytes, tuple[bytes | None, bytes | None]]) -> None:
    """Batch ``batch_id``: delete the undo records of the batches before (the runner committed them), apply
    ``changes`` with their undo records. Nothing at all if there is nothing to do."""
    stale = store.scan_table(UNDO, UNDO + _U64.pack(batch_id)).column("key")
    if not changes and len(stale) == 0:
        return
    store.begin(batch_id)
    if len(stale):
        store.delete_many(stale.combine_chunks())
    if changes:
        undo = UNDO + _U64.pack(batch_id)
        keys = list(changes) + [undo + key for key in changes]
        values = [new for _, new in changes.values()]
        values += [_ABSENT if old is None else _PRESENT + old for old, _ in changes.values()]
        store.put_many(pa.array(keys, type=pa.binary()), pa.array(values, type=pa.binary()))
    store.commit()


def _first(store: StoreBucket, prefix: bytes) -> bytes | None:
    """The first committed store key starting with ``prefix``, or None."""
    keys = store.scan_table(prefix=prefix, limit=1).column("key")
    return keys[0].as_py() if len(keys) else None


def _after(store: StoreBucket) -> tuple[bool, bool, int, int, int]:
    """What the bucket holds after its last committed batch: windows, undo records, its next timers; and that batch."""
    due, processing = _first(store, DUE), _first(store, PROCESSING)
    return (due is not None, _first(store, UNDO) is not None, NO_TIME if due is None else _time_of(due),
            NO_TIME if processing is None else _time_of(processing), store.committed_batch_id)


def end_run(store: StoreBucket, batch_id: int) -> None:
    """End a pandas run in batch ``batch_id``: delete the undo records of its batches (no replay follows a pandas
    run). Every window was purged at the end of its input, so the bucket keeps only the run's mark."""
    _write_batch(store, batch_id, {})


def start_run(store: StoreBucket, batch_id: int, buckets: list[int]) -> None:
    """Start a pandas run in batch ``batch_id``: delete what an earlier pandas run of the bucket left (it crashed: a
    run starts from no windows) and mark the bucket as a pandas run's. ``buckets``: those of the store.

    Refused, nothing deleted, where the store is not a pandas run's: a key window state never writes (someone else's
    data); a bucket written before without the mark, windows or none (a Spark query's bucket 0, whose next batch
    would find its store ahead of it); buckets besides this one (a Spark query's)."""
    leftovers = store.scan_table().column("key")
    keys = leftovers.to_pylist()
    foreign = next((key for key in keys if key != PANDAS_RUN and key[:1] not in _WINDOW_STATE_PREFIXES), None)
    if foreign is not None:
        raise WindowingConfigError(
            f"window_state(store): {store!r} holds {foreign[:40]!r}, a key window state never writes; a run starts by "
            "clearing its bucket, so it refuses a store that holds other data: give window state a store of its own")
    others = [bucket for bucket in buckets if bucket != PANDAS_BUCKET]
    marked = PANDAS_RUN in keys
    if others or not marked and (keys or store.committed_batch_id >= 0):
        held = f"buckets {buckets}" if others else "window state that no pandas run marked as its own"
        raise WindowingConfigError(
            f"window_state(store): {store!r} holds {held}: a Spark query's (a pandas run writes bucket {PANDAS_BUCKET} "
            "only), or a pandas run's of a release before the mark; a run starts by clearing its bucket, so it "
            "refuses: give the pandas run a store of its own, or delete the path of an earlier pandas run's store")
    store.begin(batch_id)
    store.delete_many(leftovers.combine_chunks())
    store.put_many(pa.array([PANDAS_RUN], type=pa.binary()), pa.array([b""], type=pa.binary()))
    store.commit()
