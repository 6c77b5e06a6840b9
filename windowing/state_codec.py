"""The versioned encoding of a bucket's window table, as stored in Spark state.

A Spark stateful group (a *bucket* of keys, see `windowing.runners.spark`)
keeps one binary value: the window table of all its keys (one row per key and
open window, the columns of `windowing.window_table`). Purged windows are not in
the table, so a key with no open window has no row and leaves the state.

Layout of versions 2 and 3 (all integers little-endian)::

    b"WST1"            4 bytes   magic
    version            uint16    3
    meta length        uint32    n
    meta               n bytes   UTF-8 JSON: {"buckets": int, "objects": [column, ...],
                                              "values": [column, ...], "pipeline": {...},
                                              "placement": str}
    body               rest      an Arrow IPC stream holding the table (its buffers
                                 compressed: `COMPRESSIONS`)

Columns with a numeric, boolean or string dtype are stored as Arrow columns
of that type (a missing string, such as a null key, as an Arrow null). Object columns (Python accumulators ``a<i>``, last emitted
outputs ``o<i>``, object keys) whose cells are all None, or None and values
of one type among int, float, str and bool, are stored as an Arrow column of
those values and listed under ``"values"``: they come back as an object
column of the same Python values. Pickling them cell by cell was a sixth of a
Spark worker's Python time (``o<i>`` is all None unless panes are re-emitted).
Other object columns are stored as one pickle (protocol 4) per cell in an
Arrow binary column, and listed under ``"objects"``. Each cell is pickled as it
is, so an accumulator of one's own keeps its type: a NumPy array, a namedtuple,
a ``Counter``, a ``defaultdict``. (Earlier releases pickled a cell that held
NumPy objects as plain Python values, `plain`: an array came back a list, which
a fold's ``a + b`` then concatenated.) A cell holding NumPy objects needs a
NumPy that reads the writer's pickles: NumPy 2 reads NumPy 1's.

``"pipeline"`` (optional; absent in values written before it) describes what built the
table, for a restart to compare with its own (`windowing.runners.spark`). So does
``"placement"`` (optional; absent: buckets labelled by number), how the buckets were labelled.

Version 1 is version 2 without ``"values"``: every object column is pickled.

Version 3 has the bytes of version 2 and the window table of issue 15: trigger
state named by role (``t.early.count``, not ``t.0.0.count``) and the ``held``
and ``end_timer`` columns. Versions 1 and 2 hold tables of the earlier layout,
which `windowing.window_table.current_layout` brings up to date when the engine
steps them; the version number keeps a library that knows only the earlier
layout from misreading a table of this one.

The body's buffers are compressed by Arrow's IPC compression, zstd unless ``encode`` is told otherwise
(`COMPRESSIONS`); earlier bodies are not, and pyarrow's IPC reader takes every one, so the version did not
change. Why: Spark's JVM hands a bucket's state value to Python by pickling it as a string built byte by
byte (``PythonSQLUtils.toPyRow``), and keeps, copies and writes it to the checkpoint every micro-batch, and a
bucket's table has a row per key and open window; zstd makes it several times smaller (docs/spark.md,
"Compressed state values", with the benchmark's bytes per window).

A reader must decode every version it ever wrote: ``decode`` dispatches on
the version and a stored sample of each version is decoded by the tests.
"""

from __future__ import annotations

import json
import pickle
import struct
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from . import state_classes
from .errors import WindowingConfigError

MAGIC = b"WST1"
VERSION = 3
#: The Arrow IPC compressions a body is written with (`encode`), the default first.
COMPRESSIONS = ("zstd", "lz4", "none")
#: Whether this pyarrow was built with a codec (a name the tests can stand in for, as pyarrow's type is immutable).
_codec_available = pa.Codec.is_available
_HEADER = struct.Struct("<4sHI")
#: Tables of at least this many rows are compressed, and bodies of at least this many bytes (about such a table's)
#: decompressed, on Arrow's thread pool. Below, handing each column's buffers to the pool costs more than the codec's
#: work: docs/spark.md, "Compressed state values" (`benchmarks/state_codec_threads.py`).
THREADED_ROWS, THREADED_BYTES = 4096, 80 << 10
#: Python types an object column may hold (besides None) to be stored as Arrow values; one per column.
_VALUE_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_(),
                np.int64: pa.int64(), np.float64: pa.float64(), np.bool_: pa.bool_()}


def plain(value: Any) -> Any:
    """Numpy scalars and arrays to Python values, recursively through containers."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, frozenset):
        return frozenset(plain(v) for v in value)
    if isinstance(value, set):
        return {plain(v) for v in value}
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def dumped(value: Any) -> bytes:
    """``value`` pickled (protocol 4); one of a class pickle cannot find by its name (defined in a notebook's or a
    script's ``__main__`` and rebuilt on a Spark worker, or inside a function) with its class as a reference to
    the running pipeline's (`state_classes`). Earlier, a streaming query or a ``window_state`` run with such an
    accumulator died with pickle's error at its first state write."""
    try:
        return pickle.dumps(value, protocol=4)
    except Exception as error:  # noqa: BLE001 - pickle's errors, or a __reduce__'s own: named below if they stay
        try:
            return state_classes.dumps(value)
        except Exception as by_name:  # noqa: BLE001 - whatever pickling raises: named with the value it failed on
            culprit = _first_unpicklable(value, lambda part, protocol: state_classes.dumps(part))
            raise TypeError(
                f"a window's state holds {type(culprit).__name__} {_shortened(culprit)}, which pickle cannot store "
                f"({by_name}); the state is kept between steps as pickles: an accumulator (or key) must be "
                "picklable, without open files, locks, generators or functions") from error


def _first_unpicklable(value: Any, dumps: Any) -> Any:
    """The innermost part of ``value`` (through tuples, lists, sets and dicts' values) that ``dumps`` fails on."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list, set, frozenset)) else ()
    for item in items:
        try:
            dumps(item, protocol=4)
        except Exception:  # noqa: BLE001 - as in `dumped`
            return _first_unpicklable(item, dumps)
    return value


def _shortened(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def pickled(value: Any) -> bytes:
    """``value`` pickled (protocol 4), its numpy scalars and arrays as Python values when it holds any: equal
    values give equal bytes, as a key a store names must (a state cell is pickled as it is: `encode`). Walking
    every value costs more than pickling it, so only a pickle naming numpy is redone from `plain`; a tuple's equal
    items are made one object first (`_one_object_per_value`)."""
    if isinstance(value, tuple) and _may_hold_equal_items(value):
        value = _one_object_per_value(value, {})
    blob = dumped(value)
    return dumped(_one_object_per_value(plain(value), {})) if b"numpy" in blob else blob


def _may_hold_equal_items(value: tuple[Any, ...]) -> bool:
    """Whether ``value`` may hold two equal items (a key of distinct flat values passes quickly)."""
    if len(value) < 2:
        return bool(value) and type(value[0]) is tuple
    try:
        if len(set(value)) < len(value):
            return True
    except TypeError:  # unhashable items
        return True
    return tuple in map(type, value)


def _one_object_per_value(value: Any, seen: dict[tuple[type, Any], Any]) -> Any:
    """``value`` with its equal items (through tuples) as one object: pickle writes an object it met before as a
    reference to the first, so a key of two equal strings gave other bytes when they were one object (two key
    columns of one literal) than when they were two (read from a file), and the store split the key."""
    if value is None or isinstance(value, (int, float)):  # pickle writes these whole each time: kept as they are
        return value
    if isinstance(value, tuple):
        value = tuple(_one_object_per_value(item, seen) for item in value)
    try:
        return seen.setdefault((type(value), value), value)
    except TypeError:  # unhashable: pickled as it is
        return value


def _as_values(column: pd.Series) -> pa.Array | None:
    """The object column as Arrow values when that keeps every cell's Python value, else None."""
    cells = column.to_numpy()
    kinds = set(map(type, cells)) - {type(None)}
    if not kinds:
        return pa.nulls(len(cells))
    kind = _VALUE_TYPES.get(kinds.pop()) if len(kinds) == 1 else None
    if kind is None:
        return None
    try:
        return pa.array(cells, type=kind, from_pandas=False)
    except (pa.ArrowInvalid, OverflowError, UnicodeError):  # an int beyond int64, a lone surrogate
        return None


def encode(table: pd.DataFrame, buckets: int, pipeline: Mapping[str, str] | None = None,
           placement: str | None = None, compression: str = COMPRESSIONS[0], store_batch: int | None = None) -> bytes:
    """The table as version-3 bytes; ``buckets`` is the bucket count it was written with, ``pipeline``
    what built it, ``placement`` how buckets were labelled (`windowing.runners.spark.Bucketing`),
    ``compression`` one of `COMPRESSIONS` (`checked_compression`), ``store_batch`` the batch the bucket's
    window-state store had committed (`windowing.window_state.keyed_step`)."""
    arrays, objects, values = {}, [], []
    for name, column in table.items():  # not table[name]: a lookup on a new frame builds its column index's hash table
        if column.dtype == object:
            as_values = _as_values(column)
            if as_values is not None:
                values.append(name)
                arrays[name] = as_values
            else:
                objects.append(name)
                arrays[name] = pa.array([dumped(v) for v in column], type=pa.binary())
        else:  # a str column holds NaN (or NA) for a missing value, a null key: stored as Arrow null
            arrays[name] = pa.array(column.to_numpy(), from_pandas=isinstance(column.dtype, pd.StringDtype))
    batch = pa.record_batch(list(arrays.values()), names=list(arrays.keys()))
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression,
                                     use_threads=batch.num_rows >= THREADED_ROWS)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    described = {"buckets": buckets, "objects": objects, "values": values}
    if pipeline is not None:
        described["pipeline"] = dict(pipeline)
    if placement is not None:
        described["placement"] = placement
    if store_batch is not None:
        described["store_batch"] = store_batch
    meta = json.dumps(described, separators=(",", ":")).encode()
    return _HEADER.pack(MAGIC, VERSION, len(meta)) + meta + sink.getvalue().to_pybytes()


def checked_compression(compression: str, setting: str) -> str:
    """``compression`` (any case) if `encode` can write it with this pyarrow, else an error naming ``setting``."""
    name = compression.strip().lower()
    if name not in COMPRESSIONS:
        raise WindowingConfigError(f"{setting}={compression!r} must be one of {', '.join(map(repr, COMPRESSIONS))} "
                                   "(how a bucket's state value is compressed)")
    if name != "none" and not _codec_available(name):
        raise WindowingConfigError(f"{setting}={compression!r}: this pyarrow was built without {name}; "
                                   f"set {setting} to another of {', '.join(map(repr, COMPRESSIONS))}")
    return name


def decode(blob: bytes) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The table and the metadata of a stored state value (any version this code wrote)."""
    blob = bytes(blob)
    if len(blob) < _HEADER.size:
        raise WindowingConfigError(f"state value of {len(blob)} bytes is too short to be a window table")
    magic, version, meta_len = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise WindowingConfigError(f"state value starts with {magic!r}, not {MAGIC!r}: not a window table of this library")
    if version not in (1, 2, 3):
        raise WindowingConfigError(
            f"state value has encoding version {version}; this library reads versions up to {VERSION}: "
            "upgrade the library, or restart the query from a new checkpoint")
    meta = json.loads(blob[_HEADER.size:_HEADER.size + meta_len])
    body = blob[_HEADER.size + meta_len:]
    reader = pa.ipc.open_stream(body, options=pa.ipc.IpcReadOptions(use_threads=len(body) >= THREADED_BYTES))
    arrow = reader.read_all()
    columns: dict[str, Any] = {}
    objects, value_columns = set(meta["objects"]), set(meta.get("values", ()))
    for name in arrow.column_names:
        values = arrow.column(name)
        if name in objects or name in value_columns:
            out = np.empty(len(values), dtype=object)
            if values.type == pa.null():
                out.fill(None)
            else:
                out[:] = values.to_pylist() if name in value_columns else [state_classes.loads(v) for v in values.to_pylist()]
            columns[name] = pd.Series(out, dtype=object, copy=False)  # pandas 3 would infer str from strings
        else:
            columns[name] = values.to_numpy(zero_copy_only=False)
    return pd.DataFrame(columns, index=pd.RangeIndex(arrow.num_rows)), meta
