"""What a format cannot hold, refused when a batch is written, naming the column: rows a part would take and
then not give back (or that pyarrow's writers fail on naming no column, or abort the process on).

Pure type checks (no I/O), kept apart from ``formats``, which writes the files; Avro's are in ``avro_types``.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc


def refuse_negative_scales(fmt: str, schema: pa.Schema) -> None:
    """Refuse a decimal of negative scale (``decimal128(5, -2)`` counts hundreds), nested ones too, naming its
    column: pyarrow's ORC writer aborted the Python process on one, Parquet and Avro refused it naming no column,
    and CSV read it back as a float, its digits beyond 2**53 lost. JSON lines writes its digits, and keeps it."""
    for field in schema:
        decimal = _negative_scale(field.type)
        if decimal is not None:
            raise ValueError(
                f"{fmt} format cannot write column {field.name!r} of type {field.type}: {decimal} has a negative "
                f"scale; cast it to a decimal of scale 0 and precision {decimal.precision - decimal.scale}, which "
                "holds the same values, or use jsonl"
            )


def _negative_scale(t: pa.DataType) -> Any:
    """The decimal type of negative scale in ``t`` (itself, or inside it), or None."""
    if pa.types.is_decimal(t):
        return t if t.scale < 0 else None
    if pa.types.is_dictionary(t):
        return _negative_scale(t.value_type)
    return next((found for found in map(_negative_scale, _children(t)) if found is not None), None)


def _children(t: pa.DataType) -> list[pa.DataType]:
    """The types a struct, map or list holds; none for another type."""
    if pa.types.is_struct(t):
        return [t.field(i).type for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [t.key_type, t.item_type]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_type]
    return []


def nulls_as_strings(t: pa.DataType) -> pa.DataType:
    """``t`` with Arrow's null type, nested ones too, as strings: a pandas column whose objects are all None (an
    optional column empty in one batch, such as ``run()``'s ``reason`` and ``element`` in a batch without late data)
    is Arrow's null type, which ORC cannot hold, and strings of nulls keep every value (none)."""
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(nulls_as_strings(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(nulls_as_strings(t.key_type), t.item_field.with_type(nulls_as_strings(t.item_type)),
                       keys_sorted=t.keys_sorted)
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(nulls_as_strings(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(nulls_as_strings(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(nulls_as_strings(t.value_type)), t.list_size)
    return t


def orc_writes(t: pa.DataType) -> bool:
    """Whether pyarrow's ORC writer takes the type (nested types by their children)."""
    if _children(t):
        return all(orc_writes(child) for child in _children(t))
    return (pa.types.is_boolean(t) or pa.types.is_signed_integer(t) or pa.types.is_float32(t)
            or pa.types.is_float64(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_decimal128(t))


def check_orc_reads_back(field: pa.Field, column: pa.ChunkedArray) -> None:
    """Refuse a timestamp, nested ones too, that pyarrow's ORC reader, which reads them as nanoseconds, cannot
    read back (outside 1677 to 2262, such as a global window's bounds or a 9999-12-31 "valid to"): pyarrow 14
    reads year 3000 as 1830-11-23 without a word, later releases refuse the part, so read() and compact() could
    not be trusted (a nested one was written, and every read() of the sink failed after it)."""
    for times in _timestamps_in(column):
        if times.type.unit == "ns" or times.null_count == len(times):
            continue
        per_ns = {"s": 10**9, "ms": 10**6, "us": 10**3}[times.type.unit]
        extremes = pc.min_max(times.cast(pa.int64()))
        for tick in (extremes["min"].as_py(), extremes["max"].as_py()):
            if not pd.Timestamp.min.value <= tick * per_ns <= pd.Timestamp.max.value:
                raise ValueError(
                    f"orc format cannot write column {field.name!r}: it holds {np.datetime64(tick, times.type.unit)}, "
                    f"outside {pd.Timestamp.min} to {pd.Timestamp.max}, the nanosecond timestamps pyarrow reads ORC "
                    "back in (read() and compact() would fail, or on pyarrow 14 read another date); write parquet or "
                    "avro, which keep any date, or replace such values first"
                )


def _timestamps_in(values: pa.ChunkedArray | pa.Array) -> Iterator[pa.Array]:
    """The timestamp arrays in ``values``: itself, or the values its structs, maps and lists hold."""
    if isinstance(values, pa.ChunkedArray):
        for chunk in values.chunks:
            yield from _timestamps_in(chunk)
    elif pa.types.is_timestamp(values.type):
        yield values
    elif pa.types.is_struct(values.type):
        for child in values.flatten():  # a null struct's fields null
            yield from _timestamps_in(child)
    elif pa.types.is_map(values.type):
        yield from _timestamps_in(values.keys)
        yield from _timestamps_in(values.items)
    elif _children(values.type):
        yield from _timestamps_in(values.flatten())
