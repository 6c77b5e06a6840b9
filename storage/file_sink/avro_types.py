"""Avro's side of Arrow's column types: the Avro type each column is written as, and what Avro cannot hold.

Kept apart from ``formats``, which writes the Avro files, as pure type mapping (no I/O).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def check_long_holds(field: pa.Field, column: pa.ChunkedArray) -> None:
    """Refuse a uint64 beyond Avro's signed long when it is written, naming it, rather than at the part's close
    (fastavro's "do not match ['null', 'long']", after the batch that brought it was accepted)."""
    if field.type != pa.uint64() or column.null_count == len(column):
        return
    largest = pc.max(column).as_py()
    if largest > 2**63 - 1:
        raise ValueError(
            f"avro format cannot write column {field.name!r}: it holds {largest}, beyond Avro's long "
            f"(at most {2**63 - 1}; Avro has no unsigned integers); cast it to a decimal or a string, or use parquet"
        )


def check_python_holds(field: pa.Field, column: pa.ChunkedArray) -> None:
    """Refuse a date or timestamp outside the years 1 to 9999 when it is written, naming its column: fastavro takes
    the rows as Python dates and datetimes, which end there, and the conversion failed at the part's close with a
    bare ``OverflowError: date value out of range``."""
    t = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
    if not (pa.types.is_date(t) or pa.types.is_timestamp(t)) or column.null_count == len(column):
        return
    extremes = pc.min_max(column.cast(t))
    for end in ("min", "max"):
        try:
            extremes[end].as_py()
        except (OverflowError, ValueError) as exc:
            value = pa.array([extremes[end]], t)  # Arrow writes what Python cannot hold
            shown = pc.strftime(value.cast(pa.timestamp("s")) if pa.types.is_date(t) else value,
                                format="%Y-%m-%d" if pa.types.is_date(t) else "%Y-%m-%dT%H:%M:%S")[0].as_py()
            raise ValueError(
                f"avro format cannot write column {field.name!r} of type {field.type}: it holds a value outside the "
                f"years 1 to 9999, {shown} ({exc}), which the Avro writer's Python dates and datetimes cannot hold; "
                "cast it to int64, or use parquet"
            ) from exc


def arrow_field_stored(field: pa.Field) -> pa.Field:
    """The column type Avro stores: timestamps in ms or us, everything else as it is."""
    t = field.type
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", field.name):
        raise ValueError(
            f"avro format cannot name a field {field.name!r}: Avro names are letters, digits and '_', "
            "not starting with a digit; rename the column"
        )
    if pa.types.is_timestamp(t) and t.unit == "s":
        return field.with_type(pa.timestamp("us", tz=t.tz))
    return field


def avro_type(field: pa.Field) -> Any:
    t = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "int" if t.bit_width < 32 or (t.bit_width == 32 and pa.types.is_signed_integer(t)) else "long"
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return "float" if pa.types.is_float32(t) else "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_decimal(t):  # Avro's decimal: the unscaled integer's two's-complement bytes
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    if pa.types.is_timestamp(t):
        unit = "millis" if t.unit == "ms" else "micros"
        return {"type": "long", "logicalType": f"{'' if t.tz else 'local-'}timestamp-{unit}"}
    raise ValueError(
        f"avro format cannot write column {field.name!r} of type {field.type}; "
        "cast it to a number, decimal, string, binary, date or timestamp, or use parquet"
    )
