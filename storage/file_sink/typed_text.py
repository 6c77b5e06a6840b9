"""JSON lines and CSV parts read back as the Arrow types they were written from (the part's recorded schema).

The inverse of what ``jsonl.encode`` and pyarrow's CSV writer make of each
type: ISO 8601 text for timestamps (``Z`` for the UTC instant of one with a
time zone) and dates, ``HH:MM:SS.ffffff`` for times, ``P<d>DT<h>H<m>M<s>S`` for
durations, decimal text, base64 for a JSON column of bytes (text inside lists
and structs). Values go to Arrow as integers in the type's unit, so years
beyond Python's datetimes (0 and below, 10000 and above) read back too.
"""

from __future__ import annotations

import base64
import re
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

CSV_PARSE = pacsv.ParseOptions(newlines_in_values=True)
"""How parts are parsed: a quoted value may hold a newline (the writer quotes it), and without this pyarrow splits
its input into blocks of 1 MiB at newlines, so a part longer than that failed where a block cut such a value."""
_TICKS_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_DURATION = re.compile(r"P(-?\d+)DT(\d+)H(\d+)M(\d+)(?:\.(\d+))?S")


def json_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows parsed from JSON lines as a table of ``schema`` (its categories unordered, see ``readable``)."""
    schema = readable(schema)
    columns = [_array([row.get(field.name) for row in rows], field.type) for field in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def readable(schema: pa.Schema) -> pa.Schema:
    """``schema`` as text gives it back: a category column's categories are the values its rows hold, in the order
    they come, so an ordered one is read unordered (its order, and categories no row holds, are not in the text)."""
    return pa.schema([f.with_type(pa.dictionary(f.type.index_type, f.type.value_type)) if pa.types.is_dictionary(
        f.type) else f for f in schema], metadata=schema.metadata)


def _array(values: list[Any], kind: pa.DataType, base64_bytes: bool = True) -> pa.Array:
    """A column of ``kind``; a column of bytes is base64 (``formats._binary_as_base64``), not a category of bytes,
    which is written as text as bytes inside lists and structs are."""
    if pa.types.is_dictionary(kind):  # pyarrow makes dictionaries of Python values for text only
        return _array(values, kind.value_type, base64_bytes=False).dictionary_encode().cast(kind)
    if pa.types.is_float16(kind):  # pyarrow makes no half floats of Python floats
        mask = np.array([v is None for v in values], bool)
        halves = np.array([0.0 if v is None else v for v in values], np.float32).astype(np.float16)
        return pa.array(halves, pa.float16(), mask=mask)
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):  # the usual columns: numpy parses them at once
        texts = np.array([None if v is None else v.removesuffix("Z").removeprefix("+") for v in values],
                         "datetime64[us]")
        micros = pa.array(texts.astype(np.int64), mask=np.isnat(texts))
        unit = kind.unit if pa.types.is_timestamp(kind) else "s" if pa.types.is_date32(kind) else "ms"
        ticks = pc.divide(micros, 10**6 // _TICKS_PER_SECOND[unit]) if unit in ("s", "ms") else pc.multiply(
            micros, _TICKS_PER_SECOND[unit] // 10**6)
        if pa.types.is_date32(kind):
            ticks = pc.divide(ticks, 86_400)
        return ticks.cast(pa.int32() if pa.types.is_date32(kind) else pa.int64()).view(kind)
    if _plain(kind):
        return pa.array(values, kind)
    return pa.array([_value(v, kind, base64_bytes) for v in values], kind)


def _plain(kind: pa.DataType) -> bool:
    """Whether JSON's own values are the type's (numbers, booleans, text, null)."""
    return (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
            or pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind))


def _is_binary(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)


def _value(value: Any, kind: pa.DataType, base64_bytes: bool = False) -> Any:
    """A JSON value as pyarrow takes it for ``kind``."""
    if value is None:
        return None
    if pa.types.is_dictionary(kind):
        return _value(value, kind.value_type, base64_bytes)
    if pa.types.is_float16(kind):  # pyarrow 14 takes half floats inside lists and structs as numpy's only
        return np.float16(value)
    if pa.types.is_timestamp(kind):
        return _iso_ticks(value, kind.unit)
    if pa.types.is_date32(kind):
        return _iso_ticks(value, "s") // 86_400
    if pa.types.is_date64(kind):
        return _iso_ticks(value, "ms")
    if pa.types.is_time(kind):
        return _time_ticks(value, kind.unit)
    if pa.types.is_duration(kind):
        return _duration_ticks(value, kind.unit)
    if pa.types.is_decimal(kind):
        return Decimal(value)
    if _is_binary(kind):
        return base64.b64decode(value) if base64_bytes else value.encode()
    if pa.types.is_struct(kind):
        return {f.name: _value(value.get(f.name), f.type) for f in kind}
    if pa.types.is_map(kind):
        return [(_value(k, kind.key_type), _value(v, kind.item_type)) for k, v in value]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return [_value(v, kind.value_type) for v in value]
    return value


def _iso_ticks(text: str, unit: str) -> int:
    """An ISO 8601 time as written (microseconds, a sign before years beyond four digits, ``Z``) in ``unit``s since
    1970; exact, as the writer kept every digit of the unit or refused the value."""
    micros = int(np.datetime64(text.removesuffix("Z").removeprefix("+"), "us").astype(np.int64))
    return _scaled(micros, 10**6, _TICKS_PER_SECOND[unit])


def _time_ticks(text: str, unit: str) -> int:
    hours, minutes, seconds = text.split(":")
    whole, _, fraction = seconds.partition(".")
    micros = ((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 10**6 + int(fraction.ljust(6, "0") or 0)
    return _scaled(micros, 10**6, _TICKS_PER_SECOND[unit])


def _duration_ticks(text: str, unit: str) -> int:
    found = _DURATION.fullmatch(text)
    if found is None:
        raise ValueError(f"not a duration as the writer gives them: {text!r}")
    days, hours, minutes, seconds = (int(found.group(i)) for i in range(1, 5))
    nanos = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    nanos = nanos * 10**9 + int((found.group(5) or "").ljust(9, "0") or 0)
    return _scaled(nanos, 10**9, _TICKS_PER_SECOND[unit])


def _scaled(ticks: int, per_second: int, target_per_second: int) -> int:
    if target_per_second >= per_second:
        return ticks * (target_per_second // per_second)
    return ticks // (per_second // target_per_second)


def csv_table(data: bytes, schema: pa.Schema) -> pa.Table:
    """A CSV part as a table of ``schema``: ``"02134"`` stays text, an unquoted empty field is null and a quoted one
    the empty string (pyarrow's writer gives them so), ``NA`` or ``null`` in a text column are text, ``nan`` a NaN.

    A part of one column writes a null as ``""`` (an empty line would be skipped), so there a quoted empty field
    of another type than text or bytes is null."""
    schema = readable(schema)
    one_column = len(schema) == 1 and not _text_or_bytes(schema.types[0])
    options = pacsv.ConvertOptions(
        column_types={f.name: _csv_type(f.type) for f in schema},
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=one_column,
    )
    try:
        table = pacsv.read_csv(pa.py_buffer(data), parse_options=CSV_PARSE, convert_options=options)
    except pa.ArrowInvalid:
        # pyarrow's parser overflows on a nanosecond timestamp in int64's first second (pd.Timestamp.min, which its
        # writer writes): such columns are read as text, and parsed by NumPy
        nanos = {f.name for f in schema if _nanosecond_timestamp(f.type)}
        if not nanos:
            raise
        options.column_types = {**options.column_types, **dict.fromkeys(nanos, pa.string())}
        table = pacsv.read_csv(pa.py_buffer(data), parse_options=CSV_PARSE, convert_options=options)
        table = pa.table([_parsed_nanoseconds(column, f.type) if f.name in nanos else column
                          for column, f in zip(table.columns, schema)], names=table.column_names)
    columns = [_as_type(column, f.type) for column, f in zip(table.columns, schema)]
    return pa.Table.from_arrays(columns, schema=schema)


def _nanosecond_timestamp(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return _nanosecond_timestamp(kind.value_type)
    return pa.types.is_timestamp(kind) and kind.unit == "ns"


def _parsed_nanoseconds(column: pa.ChunkedArray, kind: pa.DataType) -> pa.Array:
    """A column of CSV's timestamp text (``Z`` after a zoned one's UTC instant) as timestamps of ``kind``'s zone."""
    kind = kind.value_type if pa.types.is_dictionary(kind) else kind
    texts = np.array([None if v is None else v.removesuffix("Z") for v in column.to_pylist()], "datetime64[ns]")
    return pa.array(texts.astype(np.int64), mask=np.isnat(texts)).view(kind)


def _text_or_bytes(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return _text_or_bytes(kind.value_type)
    return (pa.types.is_string(kind) or pa.types.is_large_string(kind) or _is_binary(kind))


def _as_type(column: pa.ChunkedArray, kind: pa.DataType) -> pa.ChunkedArray:
    if column.type.equals(kind):
        return column
    if pa.types.is_dictionary(kind):  # pyarrow 14 casts no text to a dictionary
        return column.cast(kind.value_type).dictionary_encode().cast(kind)
    if pa.types.is_null(kind):  # a column all null when written: empty fields, read as text
        return pa.chunked_array([pa.nulls(len(column))], kind)
    if pa.types.is_float16(kind):  # nor any number to a half float
        return pa.chunked_array([_array(chunk.to_pylist(), kind) for chunk in column.chunks], kind)
    return column.cast(kind)


def _csv_type(kind: pa.DataType) -> pa.DataType:
    """The type pyarrow's CSV reader reads a column written from ``kind`` as, cast to ``kind`` after."""
    if pa.types.is_duration(kind):
        return pa.int64()  # written as the count of its unit
    if pa.types.is_dictionary(kind):
        return _csv_type(kind.value_type)
    if pa.types.is_null(kind):
        return pa.string()
    if pa.types.is_float16(kind):  # pyarrow's CSV reader makes no half floats
        return pa.float32()
    if isinstance(kind, pa.Decimal256Type):  # nor 256-bit decimals: their text is cast
        return pa.string()
    return kind
