"""File formats: row formats append rows to a part, bulk formats write whole files.

A row format encodes a table to bytes plus the end offset of every row, so
the writer can cut a batch exactly where a part reaches its size limit.
A bulk format (Parquet, ORC) writes a complete file and is rolled every batch.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.orc as paorc
import pyarrow.parquet as pq


def _line_ends(data: bytes) -> np.ndarray:
    """End offset (exclusive) of every newline-terminated line in ``data``."""
    return np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1


def _iso_microseconds(column: pd.Series) -> pd.Series:
    """Timestamps as the strings pandas' ``to_json(date_format="iso", date_unit="us")`` writes.

    Byte for byte the same (floored to the microsecond, UTC with ``Z`` when
    tz-aware, ``None`` for NaT), but vectorized: pandas formats tz-aware
    columns one Python object at a time, ~60 us a value.
    """
    aware = column.dt.tz is not None
    values = (column.dt.tz_convert("UTC").dt.tz_localize(None) if aware else column).to_numpy()
    values = values.astype("datetime64[us]")
    out = np.datetime_as_string(values, unit="us", timezone="UTC" if aware else "naive").astype(object)
    out[np.isnat(values)] = None
    return pd.Series(out, index=column.index, dtype=object)


@dataclass(frozen=True)
class JsonLines:
    """One JSON object per line; timestamps in ISO 8601."""

    name: ClassVar[str] = "jsonl"
    suffix: ClassVar[str] = ".jsonl"
    bulk: ClassVar[bool] = False

    def header(self, table: pa.Table) -> bytes:
        return b""

    def encode(self, table: pa.Table) -> tuple[bytes, np.ndarray]:
        frame = table.to_pandas()
        for i, dtype in enumerate(frame.dtypes):
            if isinstance(dtype, pd.DatetimeTZDtype) or (isinstance(dtype, np.dtype) and dtype.kind == "M"):
                frame.isetitem(i, _iso_microseconds(frame.iloc[:, i]))
        text = frame.to_json(orient="records", lines=True, date_format="iso", date_unit="us")
        data = text.encode()
        if data and not data.endswith(b"\n"):
            data += b"\n"
        return data, _line_ends(data)

    def decode(self, data: bytes) -> pd.DataFrame:
        return pd.DataFrame([json.loads(line) for line in data.splitlines() if line])


@dataclass(frozen=True)
class TextLines:
    """One value of the table's only column per line, as ``str(value)``."""

    name: ClassVar[str] = "text"
    suffix: ClassVar[str] = ".txt"
    bulk: ClassVar[bool] = False

    def header(self, table: pa.Table) -> bytes:
        return b""

    def encode(self, table: pa.Table) -> tuple[bytes, np.ndarray]:
        if table.num_columns != 1:
            raise ValueError(
                f"text format writes one column, the batch has {table.num_columns}: "
                f"{table.column_names}; select the column to write first"
            )
        values = ["" if v is None else str(v) for v in table.column(0).to_pylist()]
        if any("\n" in v for v in values):
            raise ValueError("text format cannot write a value containing a newline; use jsonl or csv")
        data = "".join(v + "\n" for v in values).encode()
        return data, _line_ends(data)

    def decode(self, data: bytes) -> pd.DataFrame:
        return pd.DataFrame({"value": data.decode().splitlines()})


@dataclass(frozen=True)
class Csv:
    """CSV with a header line at the top of every part file."""

    name: ClassVar[str] = "csv"
    suffix: ClassVar[str] = ".csv"
    bulk: ClassVar[bool] = False

    def header(self, table: pa.Table) -> bytes:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow(table.column_names)
        return out.getvalue().encode()

    def encode(self, table: pa.Table) -> tuple[bytes, np.ndarray]:
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False, eol="\n"))
        data = sink.getvalue().to_pybytes()
        ends = _line_ends(data)
        if len(ends) == table.num_rows:
            return data, ends
        # A quoted value holds a newline: find the row ends one row at a time.
        pieces = []
        for i in range(table.num_rows):
            one = pa.BufferOutputStream()
            pacsv.write_csv(table.slice(i, 1), one, pacsv.WriteOptions(include_header=False, eol="\n"))
            pieces.append(one.getvalue().to_pybytes())
        return b"".join(pieces), np.cumsum([len(p) for p in pieces])

    def decode(self, data: bytes) -> pd.DataFrame:
        return pacsv.read_csv(pa.py_buffer(data)).to_pandas()


class _BulkFormat:
    """A format written as one complete file per part; compression is the format's own."""

    bulk: ClassVar[bool] = True
    uncompressed: ClassVar[str]

    def write_file(self, table: pa.Table, compression: str | None) -> bytes:
        sink = pa.BufferOutputStream()
        self._write(table, sink, compression=compression or self.uncompressed)
        return sink.getvalue().to_pybytes()

    def decode(self, data: bytes) -> pd.DataFrame:
        return self._read(pa.py_buffer(data)).to_pandas()


@dataclass(frozen=True)
class Parquet(_BulkFormat):
    """Apache Parquet; compression per column chunk."""

    name: ClassVar[str] = "parquet"
    suffix: ClassVar[str] = ".parquet"
    uncompressed: ClassVar[str] = "none"
    _write = staticmethod(pq.write_table)
    _read = staticmethod(pq.read_table)


@dataclass(frozen=True)
class Orc(_BulkFormat):
    """Apache ORC; compression per stripe."""

    name: ClassVar[str] = "orc"
    suffix: ClassVar[str] = ".orc"
    uncompressed: ClassVar[str] = "uncompressed"
    _write = staticmethod(paorc.write_table)
    _read = staticmethod(paorc.read_table)


Format = JsonLines | TextLines | Csv | Parquet | Orc

FORMATS: dict[str, type[Format]] = {f.name: f for f in (JsonLines, TextLines, Csv, Parquet, Orc)}
# Codecs each bulk format compresses with internally (its own names).
BULK_CODECS: dict[str, tuple[str, ...]] = {
    "parquet": ("snappy", "gzip", "zstd", "lz4", "brotli"),
    "orc": ("snappy", "zlib", "zstd", "lz4"),
}
