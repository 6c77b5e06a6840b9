"""The versioned encoding of a bucket's window table, as stored in Spark state.

A Spark stateful group (a *bucket* of keys, see `windowing.runners.spark`)
keeps one binary value: the window table of all its keys (one row per key and
open window, the columns of `windowing.engine`). Purged windows are not in
the table, so a key with no open window has no row and leaves the state.

Layout of version 1 (all integers little-endian)::

    b"WST1"            4 bytes   magic
    version            uint16    1
    meta length        uint32    n
    meta               n bytes   UTF-8 JSON: {"buckets": int, "objects": [column, ...]}
    body               rest      an Arrow IPC stream holding the table

Columns with a numeric, boolean or string dtype are stored as Arrow columns
of that type. Object columns (Python accumulators ``a<i>``, last emitted
outputs ``o<i>``, object keys) are stored as one pickle (protocol 4) per
cell in an Arrow binary column, and listed under ``"objects"``. Numpy
scalars are turned into Python numbers first, so a sample does not depend on
numpy's pickle layout.

A reader must decode every version it ever wrote: ``decode`` dispatches on
the version and a stored sample of each version is decoded by the tests.
"""

from __future__ import annotations

import json
import pickle
import struct
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .errors import WindowingConfigError

MAGIC = b"WST1"
VERSION = 1
_HEADER = struct.Struct("<4sHI")


def _plain(value: Any) -> Any:
    """Numpy scalars and arrays to Python values, recursively through containers."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, frozenset):
        return frozenset(_plain(v) for v in value)
    if isinstance(value, set):
        return {_plain(v) for v in value}
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def encode(table: pd.DataFrame, buckets: int) -> bytes:
    """The table as version-1 bytes; ``buckets`` is the bucket count it was written with."""
    arrays, objects = {}, []
    for name in table.columns:
        column = table[name]
        if column.dtype == object:
            objects.append(name)
            arrays[name] = pa.array([pickle.dumps(_plain(v), protocol=4) for v in column], type=pa.binary())
        else:
            arrays[name] = pa.array(column.to_numpy())
    batch = pa.record_batch(list(arrays.values()), names=list(arrays.keys()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    meta = json.dumps({"buckets": buckets, "objects": objects}, separators=(",", ":")).encode()
    return _HEADER.pack(MAGIC, VERSION, len(meta)) + meta + sink.getvalue().to_pybytes()


def decode(blob: bytes) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The table and the metadata of a stored state value (any version this code wrote)."""
    blob = bytes(blob)
    if len(blob) < _HEADER.size:
        raise WindowingConfigError(f"state value of {len(blob)} bytes is too short to be a window table")
    magic, version, meta_len = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise WindowingConfigError(f"state value starts with {magic!r}, not {MAGIC!r}: not a window table of this library")
    if version != 1:
        raise WindowingConfigError(
            f"state value has encoding version {version}; this library reads versions up to {VERSION}: "
            "upgrade the library, or restart the query from a new checkpoint")
    meta = json.loads(blob[_HEADER.size:_HEADER.size + meta_len])
    reader = pa.ipc.open_stream(blob[_HEADER.size + meta_len:])
    arrow = reader.read_all()
    columns: dict[str, Any] = {}
    objects = set(meta["objects"])
    for name in arrow.column_names:
        values = arrow.column(name)
        if name in objects:
            out = np.empty(len(values), dtype=object)
            out[:] = [pickle.loads(v) for v in values.to_pylist()]
            columns[name] = out
        else:
            columns[name] = values.to_numpy(zero_copy_only=False)
    return pd.DataFrame(columns, index=pd.RangeIndex(arrow.num_rows)), meta
