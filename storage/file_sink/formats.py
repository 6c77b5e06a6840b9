"""File formats: row formats append rows to a part, bulk formats write whole files.

A row format encodes a table to bytes plus the end offset of every row, so
the writer can cut a batch exactly where a part reaches its size limit.
A bulk format (Parquet, ORC, Avro) writes a complete file and is rolled every batch.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.orc as paorc
import pyarrow.parquet as pq

from .avro_types import arrow_field_stored, avro_type, check_long_holds, check_python_holds
from .column_types import check_orc_reads_back, nulls_as_strings, orc_writes, refuse_negative_scales
from .frames import as_frame
from .jsonl import as_float32
from .jsonl import encode as arrow_json_lines
from .part_schemas import schema_from_text, schema_text
from .typed_text import CSV_PARSE, csv_table, json_table


def _exact_integers(values: list[int | None]) -> Any:
    """Integers and nulls from JSON, exact: nullable int64, or Python ints where one is beyond 64 bits."""
    if all(v is None or -(2**63) <= v < 2**63 for v in values):
        return pd.array(values, dtype="Int64")
    return np.array(values, dtype=object)


def _line_ends(data: bytes) -> np.ndarray:
    """End offset (exclusive) of every newline-terminated line in ``data``."""
    return np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1


def _binary_as_base64(table: pa.Table) -> pa.Table:
    """Binary columns as base64 text, as Spark's JSON writer gives them: JSON has no bytes, and bytes need not be
    UTF-8."""
    for i, field in enumerate(table.schema):
        t = field.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
            text = [None if v is None else base64.b64encode(v).decode() for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.with_type(pa.string()), pa.array(text, pa.string()))
    return table


@dataclass(frozen=True)
class JsonLines:
    """One JSON object per line; timestamps in ISO 8601, bytes in base64."""

    name: ClassVar[str] = "jsonl"
    suffix: ClassVar[str] = ".jsonl"
    bulk: ClassVar[bool] = False

    def header(self, table: pa.Table) -> bytes:
        return b""

    def header_of(self, data: bytes) -> bytes:
        """The header a part's bytes start with (none)."""
        return b""

    def encode(self, table: pa.Table) -> tuple[bytes, np.ndarray]:
        return arrow_json_lines(_binary_as_base64(_in_microseconds(self.name, table)))

    def decode(self, data: bytes, schema: pa.Schema | None = None) -> pd.DataFrame:
        """The rows as the types of ``schema`` (the part's, when the records keep it); without it, as JSON has them."""
        rows = [json.loads(line) for line in data.splitlines() if line]
        if schema is not None:
            return as_frame(json_table(rows, schema))
        frame = pd.DataFrame(rows)
        for i, name in enumerate(frame.columns):
            if frame.dtypes.iloc[i] == np.float64:  # numbers beside nulls: integers stay exact, as as_frame keeps them
                values = [row.get(name) for row in rows]
                if all(v is None or type(v) is int for v in values):
                    frame.isetitem(i, _exact_integers(values))
        return frame


@dataclass(frozen=True)
class TextLines:
    """One value of the table's only column per line, as ``str(value)``; a value holding ``\\n`` or ``\\r`` is
    refused, since Spark's text reader (Hadoop's line reader) ends a line at either."""

    name: ClassVar[str] = "text"
    suffix: ClassVar[str] = ".txt"
    bulk: ClassVar[bool] = False

    def header(self, table: pa.Table) -> bytes:
        return b""

    def header_of(self, data: bytes) -> bytes:
        return b""

    def encode(self, table: pa.Table) -> tuple[bytes, np.ndarray]:
        if table.num_columns != 1:
            raise ValueError(
                f"text format writes one column, the batch has {table.num_columns}: "
                f"{table.column_names}; select the column to write first"
            )
        values = ["" if v is None else str(v) for v in table.column(0).to_pylist()]
        broken = next((v for v in values if "\n" in v or "\r" in v), None)
        if broken is not None:
            raise ValueError(
                f"text format cannot write column {table.column_names[0]!r}: its value {broken[:80]!r} holds a line "
                "break (\\n or \\r), where readers (Spark's text reader, read()) would split it into two rows; "
                "use jsonl or csv"
            )
        data = "".join(v + "\n" for v in values).encode()
        return data, _line_ends(data)

    def decode(self, data: bytes) -> pd.DataFrame:
        """Lines split at ``\\n`` only, what the writer ends them with (``str.splitlines`` also splits at
        ``\\x0c``, ``\\x85``, ``\\u2028``, ..., which a value may hold)."""
        text = data.decode()
        return pd.DataFrame({"value": text.removesuffix("\n").split("\n") if text else []})


def _csv_rows_only() -> pacsv.WriteOptions:
    """CSV rows without a header, ended by newlines (pyarrow 14, without ``eol``, ends them so already)."""
    try:
        return pacsv.WriteOptions(include_header=False, eol="\n")
    except TypeError:
        return pacsv.WriteOptions(include_header=False)


_CSV_ROWS = _csv_rows_only()


@dataclass(frozen=True)
class Csv:
    """CSV with a header line at the top of every part file."""

    name: ClassVar[str] = "csv"
    suffix: ClassVar[str] = ".csv"
    bulk: ClassVar[bool] = False

    def header(self, table: pa.Table) -> bytes:
        """The columns' names, quoted where they hold a delimiter, a quote, ``\n`` or ``\r``, ended by ``\n``."""
        out = io.StringIO()
        # csv.writer quotes a name holding a character of its line terminator: with "\n" alone, a name with "\r"
        # was written bare, and every CSV reader (read() too) ended the header line there.
        csv.writer(out, lineterminator="\r\n").writerow(table.column_names)
        return out.getvalue().removesuffix("\r\n").encode() + b"\n"

    def header_of(self, data: bytes) -> bytes:
        """The header line(s) a part's bytes start with (a quoted column name may hold a newline). Lines end at
        ``\n`` alone, as they are written: a ``\r`` is counted as any other character (Python's csv reader ends a
        line there, and refuses one unquoted, as in the headers of parts written by earlier releases)."""
        if not data:
            return b""
        lines = data.split(b"\n")
        reader = csv.reader(line.replace(b"\r", b" ").decode() + "\n" for line in lines)
        next(reader, None)
        return b"\n".join(lines[: reader.line_num]) + b"\n"

    def encode(self, table: pa.Table) -> tuple[bytes, np.ndarray]:
        refuse_negative_scales(self.name, table.schema)
        for field in table.schema:  # pyarrow's error names only the type
            if pa.types.is_nested(field.type):
                raise ValueError(
                    f"csv format cannot write column {field.name!r} of type {field.type}: CSV has no nested "
                    "values; cast it to a string (to_json), or use jsonl or parquet"
                )
        table = _as_csv_writes(table)
        sink = pa.BufferOutputStream()
        try:
            pacsv.write_csv(table, sink, _CSV_ROWS)
        except pa.ArrowInvalid as bad:
            raise _csv_unwritable(table, bad) from bad
        data = sink.getvalue().to_pybytes()
        ends = _line_ends(data)
        if len(ends) != table.num_rows:
            # A quoted value holds a newline: find the row ends one row at a time.
            pieces = []
            for i in range(table.num_rows):
                one = pa.BufferOutputStream()
                pacsv.write_csv(table.slice(i, 1), one, _CSV_ROWS)
                pieces.append(one.getvalue().to_pybytes())
            data, ends = b"".join(pieces), np.cumsum([len(p) for p in pieces])
        return _empty_lines_quoted(data, ends)

    def decode(self, data: bytes, schema: pa.Schema | None = None) -> pd.DataFrame:
        """The rows as the types of ``schema`` (the part's, when the records keep it); without it, inferred."""
        return as_frame(csv_table(data, schema) if schema is not None else pacsv.read_csv(pa.py_buffer(data), parse_options=CSV_PARSE))


def _as_csv_writes(table: pa.Table) -> pa.Table:
    """Timestamps with a time zone as their UTC instants (``...Z``): pyarrow's CSV writer gives a local time
    and its offset in whole minutes, so a zone's old offsets with seconds (New York's -04:56:02 before 1883)
    would read back seconds off. Half floats as the float32 of the same value (pyarrow 14 writes none). The
    part's recorded schema gives zone and type back."""
    for i, field in enumerate(table.schema):
        kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if pa.types.is_timestamp(kind) and kind.tz not in (None, "UTC"):
            utc = pa.timestamp(kind.unit, "UTC")
            table = table.set_column(i, field.with_type(utc), table.column(i).cast(kind).cast(utc))
        elif pa.types.is_float16(field.type):
            table = table.set_column(i, field.with_type(pa.float32()), as_float32(table.column(i)))
    return table


def _csv_unwritable(table: pa.Table, bad: pa.ArrowInvalid) -> ValueError:
    """pyarrow's error names no column: bytes that are not UTF-8 are what it refuses."""
    for field, column in zip(table.schema, table.columns):
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):
            try:
                column.cast(pa.string())  # checks that the bytes are UTF-8
            except pa.ArrowInvalid:
                return ValueError(f"csv format cannot write column {field.name!r}: its bytes are not all UTF-8 "
                                  "text; encode them first (base64), or use jsonl or parquet")
    return ValueError(f"csv format cannot write this batch: {bad}")


def _empty_lines_quoted(data: bytes, ends: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Rows written as empty lines, as ``""``: a null in a one-column table is an empty line, which CSV
    readers (pyarrow, pandas, Spark) skip, so the row would be lost; pandas' ``to_csv`` writes it so too."""
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    empty = np.flatnonzero(ends - starts == 1)
    if not len(empty):
        return data, ends
    pieces, done = [], 0
    for row in empty:
        pieces += [data[done : starts[row]], b'""']
        done = int(starts[row])
    pieces.append(data[done:])
    return b"".join(pieces), ends + 2 * np.cumsum(ends - starts == 1)


class BulkWriter:
    """Writes one bulk file onto ``out`` (a binary file-like), a table at a time; ``close`` ends the file."""

    def write(self, table: pa.Table) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _BulkFormat:
    """A format written as one complete file per part; compression is the format's own."""

    bulk: ClassVar[bool] = True
    uncompressed: ClassVar[str]

    def open_writer(self, out: Any, compression: str | None) -> BulkWriter:
        """A writer of one file onto ``out``; its schema is the first table's."""
        return _ArrowFileWriter(self, out, compression or self.uncompressed)

    def writer_for(self, out: pa.NativeFile, table: pa.Table, compression: str) -> Any:
        raise NotImplementedError

    def prepare(self, table: pa.Table) -> pa.Table:
        """The table as the file stores it."""
        return table

    def read_table(self, data: bytes) -> pa.Table:
        """A file's rows as the file stores them (what ``open_writer`` writes back unchanged)."""
        return self._read(pa.py_buffer(data))

    def decode(self, data: bytes) -> pd.DataFrame:
        return as_frame(self._read(pa.py_buffer(data)))


class _ArrowFileWriter(BulkWriter):
    """Parquet or ORC through pyarrow's writer classes, one row group or stripe per ``write``."""

    def __init__(self, fmt: _BulkFormat, out: Any, compression: str) -> None:
        self._fmt, self._out, self._compression = fmt, pa.PythonFile(out, mode="w"), compression
        self._writer: Any = None

    def write(self, table: pa.Table) -> None:
        table = self._fmt.prepare(table)
        if self._writer is None:
            self._writer = self._fmt.writer_for(self._out, table, self._compression)
        self._writer.write(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


#: Parquet metadata key of the Arrow schema a table had before its nanoseconds were written as microseconds.
PARQUET_ARROW_SCHEMA = b"file_sink.arrow_schema"


@dataclass(frozen=True)
class Parquet(_BulkFormat):
    """Apache Parquet; compression per column chunk.

    Nanosecond timestamps (pandas' usual unit), nested ones too, are written
    as microseconds: Spark cannot read Parquet's ``TIMESTAMP(NANOS)``. A value
    with digits below the microsecond is refused, not truncated. The table's
    own schema then rides along in the file's metadata (``file_sink.arrow_schema``),
    so ``decode`` gives back nanoseconds; other readers get microseconds.
    """

    name: ClassVar[str] = "parquet"
    suffix: ClassVar[str] = ".parquet"
    uncompressed: ClassVar[str] = "none"
    _read = staticmethod(pq.read_table)

    def prepare(self, table: pa.Table) -> pa.Table:
        refuse_negative_scales(self.name, table.schema)
        written = _in_microseconds(self.name, table)
        if any(not _microsecond_type(t, seconds_as="ms").equals(t) for t in table.schema.types):
            written = written.replace_schema_metadata(
                {**(table.schema.metadata or {}), PARQUET_ARROW_SCHEMA: schema_text(table.schema)})
        return written

    def writer_for(self, out: pa.NativeFile, table: pa.Table, compression: str) -> Any:
        return pq.ParquetWriter(out, table.schema, compression=compression)

    def decode(self, data: bytes) -> pd.DataFrame:
        table = self._read(pa.py_buffer(data))
        stored = (table.schema.metadata or {}).get(PARQUET_ARROW_SCHEMA)
        if stored is not None:
            written_from = schema_from_text(stored)
            restored = [_written_type_back(read, written) for read, written in zip(table.schema, written_from)]
            table = table.cast(pa.schema(restored, metadata=table.schema.metadata))
        return as_frame(table)


def _in_microseconds(fmt: str, table: pa.Table) -> pa.Table:
    """``table`` with its nanosecond timestamps, nested ones too, in microseconds, the finest unit
    Spark reads; a value with digits below the microsecond raises, naming its column, rather than
    being truncated."""
    schema = pa.schema([f.with_type(_microsecond_type(f.type)) for f in table.schema], metadata=table.schema.metadata)
    if schema.equals(table.schema):
        return table
    columns = []
    for field, column, target in zip(table.schema, table.columns, schema.types):
        try:
            columns.append(column.cast(target))
        except pa.ArrowInvalid as lost:
            raise ValueError(
                f"{fmt} format cannot write column {field.name!r} ({field.type}) in microseconds, the unit Spark "
                f"reads, without losing digits ({lost}, in nanoseconds since 1970); floor the column to microseconds "
                "first (pandas: .dt.floor('us')), or cast it to int64 to keep the nanoseconds"
            ) from lost
    return pa.Table.from_arrays(columns, schema=schema)


def _written_type_back(read: pa.Field, written: pa.Field) -> pa.Field:
    """The field as the table had it before Parquet stored its nanoseconds as micro- and its seconds as
    milliseconds (pyarrow reads seconds back as milliseconds, its schema in the file notwithstanding)."""
    if pa.types.is_dictionary(written.type) and not pa.types.is_dictionary(read.type):
        written = written.with_type(written.type.value_type)  # pyarrow reads a dictionary of timestamps as its values
    return written if _microsecond_type(written.type, seconds_as="ms").equals(read.type) else read


def _microsecond_type(t: pa.DataType, seconds_as: str = "s") -> pa.DataType:
    """``t`` with every nanosecond timestamp in it, nested ones too, in microseconds (and second ones in
    ``seconds_as``)."""
    if pa.types.is_timestamp(t):
        return pa.timestamp({"ns": "us", "s": seconds_as}.get(t.unit, t.unit), t.tz)
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, _microsecond_type(t.value_type, seconds_as), t.ordered)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_microsecond_type(f.type, seconds_as)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_microsecond_type(t.key_type, seconds_as), _microsecond_type(t.item_type, seconds_as),
                       t.keys_sorted)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_microsecond_type(t.value_type, seconds_as)), t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_microsecond_type(t.value_type, seconds_as)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_microsecond_type(t.value_type, seconds_as)))
    return t


def _read_orc(source: Any) -> pa.Table:
    """pyarrow's ORC reader, saying why it fails on a timestamp beyond pandas' nanoseconds (a global window's
    bounds, a 9999-12-31 "valid to"): the part is sound, and Spark reads it."""
    try:
        return paorc.read_table(source)
    except pa.ArrowInvalid as exc:
        if "out of range for nanosecond resolution" not in str(exc):
            raise
        raise ValueError(
            f"pyarrow reads ORC timestamps as nanoseconds, and the part holds one outside them (1677-09-21 to "
            f"2262-04-11): {exc}; its rows are intact and Spark reads them (spark.read.orc), or write parquet or "
            "avro, which read() reads at any date"
        ) from exc


@dataclass(frozen=True)
class Orc(_BulkFormat):
    """Apache ORC; compression per stripe. Category columns are written, and read back, as their values."""

    name: ClassVar[str] = "orc"
    suffix: ClassVar[str] = ".orc"
    uncompressed: ClassVar[str] = "uncompressed"
    _read = staticmethod(_read_orc)

    def prepare(self, table: pa.Table) -> pa.Table:
        """Dictionary (pandas category) columns as their values, which ORC stores, and nulls as strings of nulls
        (`nulls_as_strings`); a type ORC cannot hold refused naming the column (pyarrow's error names only the type)."""
        refuse_negative_scales(self.name, table.schema)
        fields = [f.with_type(nulls_as_strings(f.type.value_type if pa.types.is_dictionary(f.type) else f.type))
                  for f in table.schema]
        for field in fields:
            if not orc_writes(field.type):
                raise ValueError(
                    f"orc format cannot write column {field.name!r} of type {field.type}; cast it (unsigned "
                    "integers to a wider signed one, half floats to float32, durations to int64, ...) or use parquet"
                )
        schema = pa.schema(fields, metadata=table.schema.metadata)
        table = table if schema.equals(table.schema) else table.cast(schema)
        for field, column in zip(table.schema, table.columns):
            check_orc_reads_back(field, column)
        return table

    def writer_for(self, out: pa.NativeFile, table: pa.Table, compression: str) -> Any:
        return paorc.ORCWriter(out, compression=compression)

    def decode_as(self, data: bytes, schema: pa.Schema) -> pd.DataFrame:
        """The part's rows as the types written (``schema``; categories as their values, which ORC stores): pyarrow
        reads every ORC timestamp as nanoseconds, and a nested one reached pandas as an integer of them."""
        table = self._read(pa.py_buffer(data))
        for field in schema:  # written as strings of nulls (`prepare`), which Arrow casts to no null
            if pa.types.is_null(field.type) and field.name in table.column_names:
                position = table.column_names.index(field.name)
                table = table.set_column(position, table.field(position).with_type(pa.null()), pa.nulls(len(table)))
        written = pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema],
                            metadata=table.schema.metadata)
        try:
            table = table.cast(written)
        except (pa.ArrowException, ValueError):  # not the schema it was written from: as pyarrow reads it
            pass
        return as_frame(table)


@dataclass(frozen=True)
class Avro(_BulkFormat):
    """Apache Avro object container files (fastavro); compression per block.

    Every column is a nullable field: booleans, integers, floats, decimals
    (``bytes`` with the ``decimal`` logical type), strings, binary, dates, and timestamps (``timestamp-micros``, or
    ``local-timestamp-micros`` without a time zone; ``-millis`` for ms;
    seconds widened, nanoseconds in microseconds as Parquet's). Dictionary
    (pandas category) columns are written as their values. The Arrow schema
    rides along in the file's metadata (``arrow.schema``), so ``decode``
    gives back the same column types; other Avro readers ignore it.
    """

    name: ClassVar[str] = "avro"
    suffix: ClassVar[str] = ".avro"
    uncompressed: ClassVar[str] = "null"

    def open_writer(self, out: Any, compression: str | None) -> BulkWriter:
        return _AvroWriter(out, compression or self.uncompressed)

    def decode(self, data: bytes) -> pd.DataFrame:
        import fastavro

        reader = fastavro.reader(io.BytesIO(data))
        records = list(reader)
        stored = reader.metadata.get("arrow.schema")
        if stored is None:  # written by another Avro writer
            return pd.DataFrame.from_records(records)
        schema = schema_from_text(stored)
        # Arrow builds no dictionary of timestamps or dates from Python objects: categories are made in pandas.
        plain = pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema],
                          metadata=schema.metadata)
        frame = as_frame(pa.Table.from_pylist(records, schema=plain))
        for i, field in enumerate(schema):
            if pa.types.is_dictionary(field.type):
                frame.isetitem(i, frame.iloc[:, i].astype(pd.CategoricalDtype(ordered=field.type.ordered)))
        return frame

    def read_table(self, data: bytes) -> pa.Table:
        import fastavro

        reader = fastavro.reader(io.BytesIO(data))
        records = list(reader)
        stored = reader.metadata.get("arrow.schema")
        return pa.Table.from_pylist(records, schema=schema_from_text(stored) if stored else None)


class _AvroWriter(BulkWriter):
    """Avro rows go through Python objects: the part's tables are kept and written when it is closed."""

    def __init__(self, out: Any, codec: str) -> None:
        self._out, self._codec, self._tables = out, codec, []

    def write(self, table: pa.Table) -> None:
        refuse_negative_scales(Avro.name, table.schema)
        table = _in_microseconds(Avro.name, table)
        for field, column in zip(table.schema, table.columns):
            check_long_holds(field, column)
            check_python_holds(field, column)
        self._tables.append(table.cast(pa.schema([arrow_field_stored(f) for f in table.schema],
                                                 metadata=table.schema.metadata)))

    def close(self) -> None:
        import fastavro

        if not self._tables:
            return
        table = pa.concat_tables(self._tables)
        # A column all None in a pandas batch is Arrow's null type: Avro's null, not a union of it with itself.
        fields = [{"name": f.name, "type": "null" if pa.types.is_null(f.type) else ["null", avro_type(f)]}
                  for f in table.schema]
        schema = fastavro.parse_schema({"type": "record", "name": "Row", "fields": fields})
        meta = {"arrow.schema": schema_text(table.schema)}
        fastavro.writer(self._out, schema, table.to_pylist(), codec=self._codec, metadata=meta)


Format = JsonLines | TextLines | Csv | Parquet | Orc | Avro

FORMATS: dict[str, type[Format]] = {f.name: f for f in (JsonLines, TextLines, Csv, Parquet, Orc, Avro)}
# Codecs each bulk format compresses with internally (its own names).
BULK_CODECS: dict[str, tuple[str, ...]] = {
    "parquet": ("snappy", "gzip", "zstd", "lz4", "brotli"),
    "orc": ("snappy", "zlib", "zstd", "lz4"),
    "avro": ("deflate", "bzip2", "xz"),  # the ones fastavro writes without further packages
}
