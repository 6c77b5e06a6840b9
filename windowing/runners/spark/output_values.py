"""Output values as Spark takes them: each output column's description, and the worker's last step before pyspark
converts a pane's values (`spark_ready`), which refuses, naming the column and the value, what pyspark would fail on
without naming them or take changed without a word.
"""

from __future__ import annotations

import datetime
import decimal
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

NS_PER_US = 1_000


@dataclass(frozen=True)
class OutputColumn:
    name: str
    kind: str  # "key" | "time" | "value" | "timing" | "index" | "flag"
    source: str
    integral: bool = False
    bits: int = 64  # an integer type's width, or its elements' in an array: tinyint 8, smallint 16, int 32, bigint 64
    array: bool = False
    interval: bool = False  # a Spark day-time interval: the engine's timedeltas, to the microsecond
    whole_elements: bool = False  # an array of integers whose values come from code of the user's: checked
    sampled: str | None = None  # one of SAMPLED_CHECKED (an array's elements'), from the user's code or stated: checked
    stated: bool = False  # its type stated with spark_typed
    decimal: tuple[int, int] | None = None  # a Spark decimal's precision and scale: its whole digits checked
    floating: bool = False  # a built-in's double (a Mean of decimals, as Decimals) or a stated one: made floats, as a cast
    instant: bool = False  # a Spark timestamp, key or built-in's value: leaves as epoch microseconds (`instants`)
    zoned: bool = False  # timestamps pyspark converts itself (a list of them, a Fold's): handed over zone-aware
    exact: bool = False  # a key's or built-in's timestamps, held as UTC wall times (`planning.exact_instants`)
    own_values: bool = False  # values of the user's code (a Fold, Reduce or own accumulation; one stated): kinds checked
    shape: str | None = None  # its stated or sampled type (an array's elements') as a `SHAPES` entry, if it has one
    nested: tuple[str, Any] | None = None  # a map, struct or array of them, of the user's code: its type and `Kinds`


def spark_ready(values: pd.Series, col: OutputColumn) -> Any:
    """A pane column's values as pyspark converts them to ``col``'s Spark type without losing or changing one: what
    it would change without a word (wrap, parse, truncate) or fail on naming nothing is refused naming the value."""
    values = values.reset_index(drop=True)
    if col.integral and values.dtype.kind in "iu" and col.bits == 64:
        return values.to_numpy()
    if col.interval:
        values = check_kinds(values, col)
        return _interval_micros(values)
    values = check_kinds(values, col)
    if col.array:
        out = np.empty(len(values), dtype=object)
        out[:] = [None if is_missing(v) else as_list(v) for v in values]
        if col.sampled in _STRICT_KINDS:  # Arrow takes a number for a truth value in an array too
            _refuse_kind(pd.Series([v for cell in out if cell is not None for v in cell], dtype=object), col,
                         f"array<{col.sampled}>", _STRICT_KINDS[col.sampled])
        elif col.sampled in ("double", "float"):  # and parses "2.5", takes True for 1.0, refuses a Decimal on pyspark 3.5
            try:
                out[:] = [None if cell is None else [v if is_missing(v) else _leaf("double", v) for v in cell] for cell in out]
            except _Stray as refused:
                raise _astray(col, f"array<{col.sampled}>", refused.value) from None
        if col.whole_elements:  # Arrow would truncate a float into the array's integers without a word
            stray = next((v for cell in out if cell is not None for v in cell if not _is_whole(v, col.bits)), _ALL_WHOLE)
            if stray is not _ALL_WHOLE:
                raise _not_whole(col, stray, "'array<double>'")
        return out
    if col.integral:  # Python ints and None, exact: float64 would round beyond 2**53
        _refuse_parsed(values, col)
        try:
            whole = pd.array(values.to_numpy() if values.dtype.kind in "iu" else values.to_numpy(dtype=object),
                             dtype="Int64")
        except (TypeError, ValueError, OverflowError) as err:
            raise _not_whole(col, next((v for v in values if not _is_whole(v, 64)), None), "'double'") from err
        if col.bits < 64:  # pyspark 3.5 (and 4 with convertToArrowArraySafely off) wraps a value beyond the type
            limit = 2 ** (col.bits - 1)
            beyond = ((whole < -limit) | (whole >= limit)).fillna(False).to_numpy(dtype=bool)
            if beyond.any():
                raise _not_whole(col, int(whole[beyond][0]), "'bigint'")
        return values.to_numpy() if values.dtype.kind in "iu" else whole.to_numpy(dtype=object, na_value=None)  # type: ignore[arg-type]
    if col.decimal is not None:
        given = values
        if col.stated:  # a built-in's decimals have its input's scale already
            values = _at_scale(values, col.decimal[1])
        _check_decimal_digits(values, col, *col.decimal, given=given)
    if col.floating and values.dtype == object:  # a Decimal or an int beyond 2**53 as the nearest double, as a cast
        _refuse_parsed(values, col)
        try:
            return pd.to_numeric(values).to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            _check_sampled(values, col, col.sampled or "double")  # fails naming the value that is no number
            raise
    if col.sampled is not None:
        if col.sampled in ("double", "float"):
            _refuse_parsed(values, col)
        _check_sampled(values, col, col.sampled)
    return values.to_numpy()


def check_kinds(values: pd.Series, col: OutputColumn) -> pd.Series:
    """``values``, an array's cells as lists where their elements are checked (an iterator is read once: checking
    its elements used it up, and it came out empty); failing naming the column and the value where a pane of the user's code holds what the
    column's type, stated with ``spark_typed`` or sampled from one output, cannot: pyspark took a number for
    microseconds since 1970 in a timestamp (Spark's cast takes seconds), for days in a date, for nanoseconds in an
    interval, a string for its characters in an array, and failed with a bare error on a scalar in an array or a
    number in a map."""
    if not col.own_values:
        return values
    if col.nested is not None:
        return _checked_nested(values, col)
    shape = col.shape
    if col.array:
        _refuse(values, col, "an array", _is_collection)
        if shape is not None:  # its elements read here: each cell a list first, an iterator is read once
            values = pd.Series([None if is_missing(cell) else as_list(cell) for cell in values], dtype=object)
            elements = pd.Series([v for cell in values if cell is not None for v in cell], dtype=object)
            _refuse_kind(elements, col, f"array<{shape}>", SHAPES[shape])
    elif shape is not None and not (values.dtype.kind == "M" or isinstance(values.dtype, pd.DatetimeTZDtype)
                                    if shape != "interval" else values.dtype.kind == "m"):
        _refuse_kind(values, col, shape, SHAPES[shape])
    return values


Kinds = Any
"""A Spark type as the workers check values against it (`output_types.nested_kinds`): a leaf kind (`_leaf`:
``"int64"``, ``"double"``, ``"decimal:10:2"``, ``"timestamp"``, ...), or ``("array", element)``,
``("map", key, value)``, ``("struct", ((name, kinds), ...))``."""


class _Stray(Exception):
    """A value nested in a pane's value that its type cannot take, and where it sits (``at``, filled in on the way
    up, so a value that is taken costs no path)."""

    def __init__(self, value: Any, takes: str) -> None:
        super().__init__(takes)
        self.value, self.takes, self.at, self.of_key = value, takes, "", False


def _checked_nested(values: pd.Series, col: OutputColumn) -> pd.Series:
    """Each pane's value of a nested type (`_checked`), failing naming the column, the value and where it sits."""
    text, kinds = col.nested  # type: ignore[misc]
    out = []
    for value in values:
        try:
            out.append(_checked(value, kinds))
        except _Stray as stray:
            at = f"a key of {col.name}{stray.at}" if stray.of_key else f"{col.name}{stray.at}"
            raise _astray(col, text, stray.value, f", {stray.takes}" if stray.value is value else f", at {at}, {stray.takes}") from None
    return pd.Series(out, dtype=object)


def _checked(value: Any, kinds: Kinds) -> Any:
    """``value`` as pyspark converts it to ``kinds`` unchanged: arrays as lists (an iterator is read once), Rows and
    named tuples as dicts (Arrow takes a tuple by position, not name), leaves as `_leaf` makes them; `_Stray` where
    pyspark would take it changed without a word (an int for microseconds in a timestamp, 7.5 truncated in a bigint,
    a str's characters for an array, a dict's key the struct has not dropped) or fail naming neither."""
    if is_missing(value):
        return value
    if isinstance(kinds, str):
        return _leaf(kinds, value)
    if kinds[0] == "array":
        if not _is_collection(value):
            raise _Stray(value, "where it takes an array")
        elements = as_list(value)
        if _plain(kinds[1], elements):
            return elements
        out = []
        for i, element in enumerate(elements):
            try:
                out.append(_checked(element, kinds[1]))
            except _Stray as stray:
                stray.at = f"[{i}]{stray.at}"
                raise
        return out
    if kinds[0] == "map":
        if not isinstance(value, dict):
            raise _Stray(value, "where it takes a map")
        if _plain(kinds[1], value.keys()) and _plain(kinds[2], value.values()):
            return value
        mapped = {}
        for key, item in value.items():
            try:
                if is_missing(key):
                    raise _Stray(key, "which a map cannot hold")
                _checked(key, kinds[1])  # kept as it is: a key must stay hashable
            except _Stray as stray:
                stray.at, stray.of_key = "", True
                raise
            try:
                mapped[key] = _checked(item, kinds[2])
            except _Stray as stray:
                stray.at = f"[{key!r}]{stray.at}"
                raise
        return mapped
    fields = dict(kinds[1])
    if isinstance(value, tuple) and (getattr(value, "__fields__", None) or hasattr(value, "_fields")):  # a Row, a named tuple
        value = dict(zip(getattr(value, "__fields__", None) or value._fields, value))  # type: ignore[attr-defined]
    if isinstance(value, dict):
        unknown = next((name for name in value if name not in fields), _NONE_ASTRAY)
        if unknown is not _NONE_ASTRAY:  # Arrow drops it without a word
            raise _Stray(value, f"with a field {unknown!r} the struct has not")
        pairs = list(value.items())
    elif isinstance(value, (tuple, list)) and len(value) == len(fields):
        pairs = list(zip(fields, value))
    else:
        raise _Stray(value, f"where it takes a struct of {len(fields)} fields (a dict, or a tuple in their order)")
    out_fields = {}
    for name, item in pairs:
        try:
            out_fields[name] = _checked(item, fields[name])
        except _Stray as stray:
            stray.at = f".{name}{stray.at}"
            raise
    return out_fields if isinstance(value, dict) else tuple(out_fields.values())


def _plain(kinds: Kinds, values: Any) -> bool:
    """Whether ``values`` are all of the one Python type that leaf ``kinds`` takes as it is (an int within 64 bits
    for a bigint): most of them are, and checked by `_checked` one by one they cost a call each."""
    plain = _PLAIN.get(kinds) if isinstance(kinds, str) else None
    if plain is None or not all(type(value) is plain for value in values):
        return False
    return plain is not int or not values or -(2**63) <= min(values) and max(values) < 2**63


_PLAIN = {"int64": int, "double": float, "string": str, "boolean": bool, "binary": bytes}


def _leaf(kind: str, value: Any) -> Any:
    """``value`` (not missing) as pyspark takes it for leaf ``kind`` unchanged, or `_Stray`: a number for a
    double (a Decimal as a float, as a cast: pyspark 3.5 refused it), a whole number for an integer (3.0 as 3, as for a
    scalar), a number rounded half up to a decimal's scale (as Spark's cast and a scalar), NumPy's times and
    durations as Python's (pyspark failed on them naming nothing)."""
    truth = isinstance(value, (bool, np.bool_))  # Arrow takes True for 1
    if kind in _STRICT_KINDS:
        if isinstance(value, _STRICT_KINDS[kind]):
            return value
    elif kind == "double":
        if isinstance(value, (int, float, np.integer, np.floating)) and not truth:
            return value
        if isinstance(value, decimal.Decimal):
            return float(value)
    elif kind in ("int8", "int16", "int32", "int64"):
        bits = int(kind[3:])
        if _is_whole(value, bits):
            return value
        whole = isinstance(value, (float, np.floating, decimal.Decimal)) and math.isfinite(value) and value == int(value)
        if whole and _is_whole(int(value), bits):
            return int(value)
    elif kind.startswith("decimal:"):
        precision, scale = (int(part) for part in kind.split(":")[1:])
        if isinstance(value, (int, float, np.integer, np.floating, decimal.Decimal)) and not truth:
            exact = _rounded(value, scale)
            if exact.is_finite() and (not exact or exact.adjusted() < precision - scale):
                return exact
            raise _Stray(value, f"where it takes a decimal({precision},{scale}), of {precision - scale} digits before "
                                "the point")
    elif kind in ("date", "timestamp", "timestamp_ntz"):
        if isinstance(value, np.datetime64):
            stamp = pd.Timestamp(value)
            return stamp.date() if kind == "date" else stamp.to_pydatetime(warn=False)
        if isinstance(value, datetime.datetime) or (isinstance(value, datetime.date) and kind == "timestamp"):
            return value  # a date in a timestamp is midnight, a datetime in a date its day: as Spark casts them
        if isinstance(value, datetime.date) and kind == "date":
            return value
    elif kind == "interval":
        if isinstance(value, np.timedelta64):
            return pd.Timedelta(value).to_pytimedelta()
        if isinstance(value, datetime.timedelta):
            return value
    else:
        return value  # a type the workers do not check
    raise _Stray(value, f"where it takes {_LEAF_NAMES.get(kind.split(':')[0], kind)}")


def _is_collection(value: Any) -> bool:
    return type(value) is list or (isinstance(value, Iterable) and not isinstance(value, (str, bytes, bytearray, dict)))


def _refuse_kind(values: pd.Series, col: OutputColumn, spark_type: str, kinds: tuple[type, ...]) -> None:
    """Fail naming the column and the first value that is none of ``kinds`` and not missing."""
    _refuse(values, col, spark_type, lambda value: isinstance(value, kinds))


def _refuse(values: pd.Series, col: OutputColumn, spark_type: str, accepts: Callable[[Any], bool]) -> None:
    """Fail naming the column and the first value that ``accepts`` refuses and that is not missing."""
    stray = next((v for v in values if not accepts(v) and not is_missing(v)), _NONE_ASTRAY)
    if stray is not _NONE_ASTRAY:
        raise _astray(col, spark_type, stray)


def _astray(col: OutputColumn, spark_type: str, stray: Any, where: str = "") -> TypeError:
    """The error of a pane value that column ``col`` of ``spark_type``, stated or sampled, cannot hold (``where``
    it sits in a nested value, if it does)."""
    if col.stated:
        return TypeError(f"output column {col.name!r} is {spark_type}, as stated with windowing.spark_typed, but a pane "
                         f"holds {stray!r}, a {type(stray).__name__}{where}; state a type that holds every pane's value")
    return TypeError(
        f"output column {col.name!r} is {spark_type}, as the accumulation's output for one sample value was, but a "
        f"pane holds {stray!r}, a {type(stray).__name__}{where}; for an accumulation of your own, Fold or Reduce whose "
        "output type depends on the values, state the type that holds every pane's value with "
        "windowing.spark_typed(acc, ...) (any Spark DDL type)")


def _at_scale(values: pd.Series, scale: int) -> pd.Series:
    """Numbers as Decimals rounded to ``scale`` fractional digits half up, as Spark casts to a decimal (a ``Mean``
    stated ``decimal(5,0)``: 6.5 is 7; pyspark's conversion truncated it to 6, or failed, on pyspark 3.5)."""
    return pd.Series([value if is_missing(value) or isinstance(value, (str, bytes, bool, np.bool_)) else _rounded(value, scale)
                      for value in values], dtype=object)


def _rounded(value: Any, scale: int) -> decimal.Decimal:
    """A number as a Decimal rounded to ``scale`` fractional digits half up (an infinity as it is)."""
    exact = value if isinstance(value, decimal.Decimal) else decimal.Decimal(repr(float(value)) if isinstance(
        value, (float, np.floating)) else int(value))  # repr(np.float64(6.5)) is "np.float64(6.5)" on NumPy 2
    return exact.quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP, context=_WIDE) if exact.is_finite() else exact


def _refuse_parsed(values: pd.Series, col: OutputColumn) -> None:
    """Fail naming the column and the value where a number column holds a str, bytes or bool: pandas' conversions
    parse "02134" as 2134 and "1_000" as 1000, and take True for 1, where the pandas runner gives them as they are."""
    if values.dtype != object:
        return
    stray = next((v for v in values if isinstance(v, (str, bytes, bool, np.bool_))), None)
    if stray is None:
        return
    spark_type = _INTEGER_TYPES[col.bits] if col.integral else col.sampled or "double"
    instead = "'boolean'" if isinstance(stray, (bool, np.bool_)) else "'string'"
    raise TypeError(
        f"output column {col.name!r} is {spark_type}{', as stated with windowing.spark_typed,' if col.stated else ''} "
        f"but a pane holds {stray!r}, a {type(stray).__name__}, which Spark would take for a number; state the type "
        f"that holds every pane's value, e.g. windowing.spark_typed(acc, {instead})")


def _check_decimal_digits(values: pd.Series, col: OutputColumn, precision: int, scale: int, given: pd.Series) -> None:
    """Fail naming the column and the value (as ``given``, before rounding to the scale) where a decimal has more
    whole digits than its Spark type holds (a sum past 38 digits): pyspark's conversion failed naming neither,
    pointing to a setting that turns the check off."""
    whole = precision - scale
    at = next((i for i, v in enumerate(values)
               if isinstance(v, decimal.Decimal) and v.is_finite() and v and v.adjusted() >= whole), None)
    if at is not None:
        stray = given.iloc[at] if given.iloc[at] == values.iloc[at] else f"{given.iloc[at]} ({values.iloc[at]} at its scale)"
        raise OverflowError(
            f"output column {col.name!r} is decimal({precision},{scale}), but a pane holds {stray}, more than its {whole} "
            "digits before the point (Spark's own sum fails there too, NUMERIC_VALUE_OUT_OF_RANGE); cast the column to "
            "a decimal of fewer fractional digits, or to double, before windowed()")


#: Spark types of a sampled output column (`output_types`) whose values the workers check before pyspark converts them.
SAMPLED_CHECKED = ("boolean", "string", "binary", "double", "float")


def _check_sampled(values: pd.Series, col: OutputColumn, spark_type: str) -> None:
    """Fail naming the column, a value and `spark_typed` where pyspark's own conversion (the same Arrow call)
    would fail with "Could not convert 2 with type int: tried to convert to boolean", naming neither."""
    import pyarrow as pa

    arrow_type = {"boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary(), "double": pa.float64(),
                  "float": pa.float32()}[spark_type]
    if spark_type in _STRICT_KINDS:  # Arrow takes a number for a truth value (13 is True) or for bytes (13 is b"\r")
        _refuse_kind(values, col, spark_type, _STRICT_KINDS[spark_type])
    try:
        pa.Array.from_pandas(values, type=arrow_type, safe=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as err:
        raise _astray(col, spark_type, next((v for v in values if not _converts(v, arrow_type)), None)) from err


def _converts(value: Any, arrow_type: Any) -> bool:
    import pyarrow as pa

    try:
        pa.Array.from_pandas(pd.Series([value], dtype=object), type=arrow_type, safe=False)
    except Exception:
        return False
    return True


SHAPES: dict[str, tuple[type, ...]] = {"date": (datetime.date, np.datetime64),
                                       "timestamp": (datetime.date, np.datetime64),  # a date: midnight, as Spark casts it
                                       "timestamp_ntz": (datetime.datetime, np.datetime64),  # pyspark takes no date
                                       "interval": (datetime.timedelta, np.timedelta64)}
"""Stated or sampled Spark types (`OutputColumn.shape`) and the Python values each takes."""
_STRICT_KINDS: dict[str, tuple[type, ...]] = {"boolean": (bool, np.bool_), "string": (str,), "binary": (bytes, bytearray)}
_LEAF_NAMES = {"int8": "a tinyint", "int16": "a smallint", "int32": "an int", "int64": "a bigint",
               "interval": "an interval", "double": "a double", "date": "a date",
               "timestamp": "a timestamp", "timestamp_ntz": "a timestamp_ntz", "boolean": "a boolean",
               "string": "a string", "binary": "a binary"}
_NONE_ASTRAY = object()
_WIDE = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_ALL_WHOLE = object()
_INTEGER_TYPES = {8: "tinyint", 16: "smallint", 32: "int", 64: "bigint"}


def _not_whole(col: OutputColumn, value: Any, instead: str) -> TypeError:
    spark_type = _INTEGER_TYPES[col.bits]
    spark_type = f"array<{spark_type}>" if col.array else spark_type
    if col.stated:
        return TypeError(
            f"output column {col.name!r} is {spark_type}, as stated with windowing.spark_typed, but a pane holds "
            f"{value!r}, not a whole number of {col.bits} bits; state a type that holds every pane's value, e.g. {instead}")
    return TypeError(
        f"output column {col.name!r} is {spark_type}, but a pane holds {value!r}, not a whole number of {col.bits} "
        "bits; for an accumulation of your own, Fold or Reduce whose output type depends on the values, state it with "
        f"windowing.spark_typed(acc, {instead}) (any Spark DDL type)")


def _interval_micros(values: pd.Series) -> np.ndarray:
    """Timedeltas (a column of them, or Timedelta objects) as a Spark interval holds them, in microseconds: a
    ``Mean``'s nanoseconds rounded half away from zero, as Spark's ``avg`` of an interval rounds them (pyspark's
    conversion refused them as losing data)."""
    deltas = pd.to_timedelta(values).to_numpy(dtype="timedelta64[ns]")
    missing = np.isnat(deltas)
    ns = np.where(missing, 0, deltas.view(np.int64))
    micros = np.where(ns < 0, -((500 - ns) // NS_PER_US), (ns + 500) // NS_PER_US).astype("timedelta64[us]")
    micros[missing] = np.timedelta64("NaT", "us")
    return micros


def is_missing(value: Any) -> bool:
    """None, or a scalar pandas takes for missing (NaN, NaT, NA)."""
    return value is None or bool(pd.api.types.is_scalar(value) and pd.isna(value))


def _is_whole(value: Any, bits: int) -> bool:
    """An integer of ``bits`` bits (not a bool), or missing: what an integer column of that width takes."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return bool(-2 ** (bits - 1) <= value < 2 ** (bits - 1))
    return is_missing(value)


def as_list(value: Any) -> list[Any]:
    """A collection as the list of an array column: a set sorted (docs/spark.md: `ToSet` is sorted), where it sorts."""
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    return list(value)
