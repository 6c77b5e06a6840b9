"""JSON lines from Arrow columns with Arrow's compute kernels: no pandas, no Python object per value.

Each column becomes the JSON text of its values (numbers, ``true``/``false``,
quoted and escaped strings, ISO 8601 timestamps, ``null``), and each row the
join ``{"a":<a>,"b":<b>}\\n`` of them; the joined column's data buffer is the
part's bytes and its offsets are the row ends. Lists, structs and maps are
the joins of their children's texts, so a number inside them keeps every digit
as a column of numbers does. What ``json.loads`` reads back is what pandas'
``to_json`` (the encoder before) gave, except that floats and integers keep
every digit (pandas keeps 10 significant ones: ``1.2345678901234567e+19`` became
``1.23456789e+19``, and any list or struct column in a batch sent every column
through it), text is UTF-8 rather than ``\\u`` escapes, ``/`` is not escaped,
and timestamps with a time zone inside lists and structs end in ``Z`` as the
columns' do.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Rows encoded at a time: a join's 32-bit offsets hold 2 GiB.
_ROWS_PER_CHUNK = 1 << 16
_CONTROL = {i: json.dumps(chr(i))[1:-1] for i in range(32)}  # \n, \t, ..., \u0001


class _Unwritable(ValueError):
    """A value JSON lines has no text for; ``encode`` names the column."""


def encode(table: pa.Table) -> tuple[bytes, np.ndarray]:
    """The table as JSON lines and the end offset of every line."""
    texts = []
    for i, field in enumerate(table.schema):
        try:
            texts.append(_column_text(table.column(i), field.type))
        except _Unwritable as why:
            raise ValueError(f"jsonl format cannot write column {field.name!r} of type {field.type}: {why}") from why
    keys = [("{" if i == 0 else ",") + json.dumps(f.name) + ":" for i, f in enumerate(table.schema)]
    bodies, ends, done = [], [], 0
    for start in range(0, table.num_rows, _ROWS_PER_CHUNK):
        parts: list[pa.Array | str] = []
        for key, text in zip(keys, texts):
            parts += [key, text.slice(start, _ROWS_PER_CHUNK)]
        lines = pc.binary_join_element_wise(*parts, "}\n", "") if parts else pa.array(["{}\n"] * table.num_rows)
        lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
        offsets = np.frombuffer(lines.buffers()[1], np.int32, len(lines) + 1, 4 * lines.offset)
        body = lines.buffers()[2].slice(offsets[0], offsets[-1] - offsets[0]).to_pybytes()
        bodies.append(body)
        ends.append(offsets[1:].astype(np.int64) - offsets[0] + done)
        done += len(body)
    if not bodies:
        return b"", np.zeros(0, np.int64)
    return b"".join(bodies), np.concatenate(ends)


def as_float32(halves: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Half floats as float32, through NumPy: pyarrow 14 (Databricks Runtime 15.4's) casts no half floats."""
    chunks = [pa.array(chunk.to_numpy(zero_copy_only=False).astype(np.float32),
                       mask=chunk.is_null().to_numpy(zero_copy_only=False))
              for chunk in (halves.chunks if isinstance(halves, pa.ChunkedArray) else [halves])]
    return pa.chunked_array(chunks, pa.float32()) if isinstance(halves, pa.ChunkedArray) else chunks[0]


def _column_text(column: pa.ChunkedArray, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """The JSON text of each value, ``null`` for nulls."""
    if pa.types.is_dictionary(kind):
        return _column_text(column.cast(kind.value_type), kind.value_type)
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind):
        text = column.cast(pa.string())
    elif pa.types.is_floating(kind):
        if pa.types.is_float16(kind):  # Arrow has no kernels for half floats; each is exact as a float32
            column, kind = as_float32(column), pa.float32()
        finite = pc.if_else(pc.is_finite(column), column, None)  # NaN and infinities have no JSON: null
        text = finite.cast(pa.string())
        if pc.any(pc.equal(finite, pc.floor(finite))).as_py():  # only whole numbers may lack a point
            text = pa.chunked_array([_with_point(chunk) for chunk in text.chunks], pa.string())
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = _quoted(column.cast(pa.string()))
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        text = _quoted(_utf8(column))  # inside lists and structs; a binary column is base64 already (formats.py)
    elif pa.types.is_decimal(kind):
        text = _quoted(column.cast(pa.string()))  # as pandas wrote them: strings, every digit of the scale
    elif pa.types.is_date(kind):
        text = _timestamps(column.cast(pa.timestamp("us")), pa.timestamp("us"))
    elif pa.types.is_timestamp(kind):
        text = _timestamps(column, kind)
    elif pa.types.is_time(kind):
        text = _times(column)
    elif pa.types.is_duration(kind):
        text = _durations(column, kind)
    elif pa.types.is_null(kind):
        text = column.cast(pa.string())
    elif pa.types.is_struct(kind) or pa.types.is_map(kind) or _is_list(kind):
        text = pa.chunked_array([_nested_text(chunk, kind) for chunk in column.chunks], pa.string())
    else:
        raise _Unwritable("JSON lines has no text for it; cast it (to a string, say), or use parquet")
    return text.fill_null("null")


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def _nested_text(chunk: pa.Array, kind: pa.DataType) -> pa.Array:
    """Structs as JSON objects, lists as arrays, maps as arrays of ``[key, value]`` (as pandas wrote them), each
    the join of its children's texts; null where the value is null."""
    if pa.types.is_fixed_size_list(kind):
        kind = pa.list_(kind.value_field)
        chunk = chunk.cast(kind)
    if pa.types.is_struct(kind):
        keys = [("{" if i == 0 else ",") + json.dumps(f.name) + ":" for i, f in enumerate(kind)]
        parts = [piece for key, child in zip(keys, chunk.flatten()) for piece in (key, _child_text(child))]
        text = pc.binary_join_element_wise(*parts, "}", "") if parts else pa.array(["{}"] * len(chunk), pa.string())
    else:
        if pa.types.is_map(kind):
            entries = pc.binary_join_element_wise("[", _child_text(chunk.keys), ",", _child_text(chunk.items), "]", "")
        else:
            entries = _child_text(chunk.values)
        lists = (pa.LargeListArray if pa.types.is_large_list(kind) else pa.ListArray).from_arrays(chunk.offsets, entries)
        text = pc.binary_join_element_wise("[", pc.binary_join(lists, ","), "]", "")
    return pc.if_else(chunk.is_valid(), text, None)


def _child_text(child: pa.Array) -> pa.Array:
    text = _column_text(pa.chunked_array([child], child.type), child.type)
    return text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text


def _utf8(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Bytes as the text they encode, refused where they are not UTF-8 (JSON has no bytes)."""
    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid as bad:
        raise _Unwritable(
            f"bytes inside lists, structs and categories are written as text and these are not UTF-8 ({bad}); "
            "encode them first (base64), or use parquet"
        ) from bad


def _times(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Times of day quoted as Python's ``isoformat`` (pandas) writes them: ``HH:MM:SS``, then ``.ffffff`` unless
    zero; a time with digits below the microsecond, which Python's times cannot hold, is refused."""
    try:
        micros = column.cast(pa.time64("us"))
    except pa.ArrowInvalid as lost:
        raise _Unwritable(f"times are written in microseconds ({lost}); floor them, or cast to int64") from lost
    text = micros.cast(pa.string())
    text = pc.if_else(pc.ends_with(text, ".000000"), pc.utf8_slice_codeunits(text, 0, 8), text)
    return pc.binary_join_element_wise('"', text, '"', "")


def _durations(column: pa.ChunkedArray, kind: pa.DurationType) -> pa.Array:
    """Durations quoted as pandas 3's ``to_json`` writes them, ``P1DT2H3M4.500S``: days (negative for a negative
    duration, the rest counted up from them), then the second's fraction in milli-, micro- or nanoseconds, the
    coarsest that holds it, unless zero (pandas 2 took every unit for nanoseconds)."""
    nanos_per_tick = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[kind.unit]
    ticks = column.cast(pa.int64()).fill_null(0).to_numpy()
    days, rest = np.divmod(ticks, 86_400 * 10**9 // nanos_per_tick)
    hours, rest = np.divmod(rest, 3_600 * 10**9 // nanos_per_tick)
    minutes, rest = np.divmod(rest, 60 * 10**9 // nanos_per_tick)
    seconds, rest = np.divmod(rest, 10**9 // nanos_per_tick)
    nanos = rest * nanos_per_tick
    padded = {d: pc.utf8_lpad(pa.array(nanos // 10 ** (9 - d)).cast(pa.string()), d, "0") for d in (3, 6, 9)}
    fraction = pc.if_else(pa.array(nanos % 10**6 == 0), padded[3],
                          pc.if_else(pa.array(nanos % 10**3 == 0), padded[6], padded[9]))
    fraction = pc.if_else(pa.array(nanos != 0), pc.binary_join_element_wise(".", fraction, ""), "")
    numbers = [pa.array(n).cast(pa.string()) for n in (days, hours, minutes, seconds)]
    text = pc.binary_join_element_wise('"P', numbers[0], "DT", numbers[1], "H", numbers[2], "M", numbers[3],
                                       fraction, 'S"', "")
    return pc.if_else(column.is_valid().combine_chunks(), text, None)


def _with_point(text: pa.StringArray) -> pa.StringArray:
    """Floats as Arrow writes them, ``.0`` added where there is neither a point nor an exponent: Arrow writes
    5.0 as ``5``, which would read back as an int."""
    offsets = np.frombuffer(text.buffers()[1], np.int32, len(text) + 1, 4 * text.offset)
    if text.buffers()[2] is None:
        return text
    raw = np.frombuffer(text.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    marks = np.concatenate([[0], np.cumsum((raw == 46) | (raw == 101))])  # "." and "e"
    starts, ends = offsets[:-1] - offsets[0], offsets[1:] - offsets[0]
    bare = (marks[ends] == marks[starts]) & (ends > starts)
    if not bare.any():
        return text
    return pc.binary_join_element_wise(text, pa.array(np.where(bare, ".0", "")), "")


def _timestamps(column: pa.ChunkedArray, kind: pa.TimestampType) -> pa.Array:
    """Quoted ISO 8601 in microseconds, ``Z`` after those with a time zone (written in UTC).

    Arrow's cast to text gives every value in years 0 to 9999 as the 26 bytes
    ``YYYY-MM-DD HH:MM:SS.ffffff``; numpy lays them into a fixed-width byte matrix
    with the quotes, the ``T`` and the ``Z``, which becomes the array's data as it
    is: three times faster than computing the digits with numpy, 20 times
    faster than Arrow's ``strftime``.
    """
    micros = column.cast(pa.timestamp("us")).cast(pa.int64()).combine_chunks()  # with a zone: the UTC instant
    valid = micros.is_valid().to_numpy(zero_copy_only=False)
    us = micros.fill_null(0).to_numpy()
    if len(us) and (us.min() < _YEAR_0_US or us.max() >= _YEAR_10000_US):  # beyond four digits: numpy's own
        text = np.datetime_as_string(us.astype("datetime64[us]"), unit="us", timezone="UTC" if kind.tz else "naive")
        return pa.array([f'"{_iso_year(t)}"' for t in text], pa.string(), mask=~valid)
    width = 29 if kind.tz else 28
    out = np.empty((len(us), width), np.uint8)
    if len(us):
        text = pa.array(us, pa.int64()).cast(pa.timestamp("us")).cast(pa.string())
        out[:, 1:27] = np.frombuffer(text.buffers()[2], np.uint8, 26 * len(us)).reshape(len(us), 26)
    out[:, 0] = out[:, -1] = ord('"')
    out[:, 11] = ord("T")
    if kind.tz:
        out[:, 27] = ord("Z")
    offsets = np.arange(0, (len(us) + 1) * width, width, dtype=np.int32)
    text = pa.StringArray.from_buffers(len(us), pa.py_buffer(offsets), pa.py_buffer(out.tobytes()))
    return pc.if_else(pa.array(valid), text, None) if not valid.all() else text


def _iso_year(text: str) -> str:
    """numpy's text of a time with its year as ISO 8601 and Java write it: four digits at least, a sign beyond
    9999 or below 0 (``+10000-01-01...``, ``-0001-12-31...``; numpy writes ``10000`` and ``-001``)."""
    cut = text.index("-", 1)  # the year ends at the first '-' after a sign
    year = int(text[:cut])
    return (f"+{year}" if year > 9999 else f"{year:05d}" if year < 0 else f"{year:04d}") + text[cut:]


#: The first microsecond of the years 0 and 10000 (proleptic Gregorian, since 1970): four-digit years between.
_YEAR_0_US = -62_167_219_200_000_000
_YEAR_10000_US = 253_402_300_800_000_000


def _quoted(text: pa.ChunkedArray) -> pa.ChunkedArray:
    """Strings as JSON strings: backslashes, quotes and control characters escaped (where there are any)."""
    if _has_special_bytes(text):
        text = pc.replace_substring(text, "\\", "\\\\")
        text = pc.replace_substring(text, '"', '\\"')
        for code, escaped in _CONTROL.items():
            text = pc.replace_substring(text, chr(code), escaped)
    return pc.binary_join_element_wise('"', text, '"', "")


def _has_special_bytes(text: pa.ChunkedArray) -> bool:
    """Whether any byte of the strings' data is a quote, a backslash or a control character (one numpy pass)."""
    for chunk in text.chunks:
        data = chunk.buffers()[2]
        if data is None or not len(chunk):
            continue
        offsets = np.frombuffer(chunk.buffers()[1], np.int32, len(chunk) + 1, 4 * chunk.offset)
        raw = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]]  # a slice's own bytes only
        if ((raw < 32) | (raw == 34) | (raw == 92)).any():
            return True
    return False
