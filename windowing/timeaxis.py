"""The time axis: how a time column maps to the engine's int64 instants.

Inside the engine every instant and duration is an int64: nanoseconds since
the epoch (UTC) for timestamp columns, the column's own unit for numeric
columns. `MIN_TIME` and `MAX_TIME` are the ends of time (the global window's
bounds, the watermark before any data and at the end of input).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from triggers import NO_TIME, parse_duration

from .errors import WindowingConfigError

MIN_TIME = int(np.iinfo(np.int64).min) + 1  # pd.Timestamp.min in ns; iinfo.min is NaT
MAX_TIME = int(NO_TIME)


def add_saturating(times: np.ndarray, delta: int) -> np.ndarray:
    """``times + delta`` that sticks at MAX_TIME instead of overflowing."""
    return np.where(times > MAX_TIME - delta, MAX_TIME, times + delta)


@functools.lru_cache
def _zone_extremes(tz: str) -> tuple[int, int]:
    """The least and greatest instants a nanosecond timestamp in zone ``tz`` holds.

    Its wall time must fit in 64 bits too: east of UTC the greatest is before MAX_TIME, west of
    UTC the least is after MIN_TIME (else reading the global window's bound raises).
    """
    margin = 2 * 86_400 * 10**9  # farther from the ends than any UTC offset
    first = pd.Timedelta(pd.Timestamp(MIN_TIME + margin, tz="UTC").tz_convert(tz).utcoffset()).value
    last = pd.Timedelta(pd.Timestamp(MAX_TIME - margin, tz="UTC").tz_convert(tz).utcoffset()).value
    return MIN_TIME - min(first, 0), MAX_TIME - max(last, 0)


@dataclass(frozen=True)
class TimeAxis:
    """A time column's type: ``datetime`` (with its tz and unit) or ``numeric`` (with its dtype)."""

    column: str
    kind: str  # "datetime" | "numeric"
    tz: str | None = None
    unit: str = "ns"
    dtype: str = "int64"
    """The numeric column's dtype as pandas names it (``Int64`` for nullable integers), so that
    window bounds come back in the column's own type."""

    @classmethod
    def of(cls, column: str, series: pd.Series, where: str = "") -> "TimeAxis":
        """The axis of a time column; ``where`` says which input it is from, for the error."""
        dtype = series.dtype
        if isinstance(dtype, pd.DatetimeTZDtype):
            return cls(column, "datetime", tz=str(dtype.tz), unit=dtype.unit)
        if pd.api.types.is_datetime64_dtype(dtype):
            return cls(column, "datetime", unit=np.datetime_data(dtype)[0])
        if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
            return cls(column, "numeric", dtype=str(dtype))
        raise WindowingConfigError(
            f"time column {column!r}{where} has dtype {dtype}; it must hold timestamps or numbers "
            "(convert strings with pandas.to_datetime first)")

    def _kind_name(self) -> str:
        if self.kind == "numeric":
            return "numbers"
        return f"timestamps in time zone {self.tz}" if self.tz else "timestamps without a time zone"

    def to_internal(self, series: pd.Series, where: str = "") -> np.ndarray:
        """The column as int64 instants; missing or fractional times, and times of another kind
        than the axis's, are refused. ``where`` says which input the column is from, for the errors."""
        found = TimeAxis.of(self.column, series, where)
        if found.kind != self.kind or (found.tz is None) != (self.tz is None):
            raise WindowingConfigError(
                f"time column {self.column!r}{where} holds {found._kind_name()} (dtype {series.dtype}), but the first "
                f"elements' times are {self._kind_name()}; give every step's times as one type")
        missing = int(series.isna().sum())
        if missing:
            raise WindowingConfigError(f"time column {self.column!r}{where} has {missing} missing value(s); every element needs an event time")
        if self.kind == "datetime":
            values = series.dt.tz_convert("UTC").dt.tz_localize(None) if self.tz else series
            outside = (values < pd.Timestamp.min) | (values > pd.Timestamp.max)
            if outside.any():
                raise WindowingConfigError(
                    f"time column {self.column!r}{where} has {int(outside.sum())} time(s) outside the engine's "
                    f"nanosecond range ({pd.Timestamp.min} to {pd.Timestamp.max}), the first "
                    f"{series[outside].iloc[0]}")
            return values.astype("datetime64[ns]").to_numpy().view(np.int64)
        raw = series.to_numpy()
        if raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)) or not np.all(raw == np.floor(raw)):
                raise WindowingConfigError(
                    f"time column {self.column!r}{where} holds non-integral numbers; use integers in one unit (e.g. milliseconds)")
        return raw.astype(np.int64)

    def from_internal(self, values: np.ndarray) -> pd.Series:
        """Instants back in the column's own type; the ends of time become the type's extremes."""
        values = np.asarray(values, dtype=np.int64)
        if self.kind == "datetime":
            if self.tz and self.unit == "ns":
                values = np.clip(values, *_zone_extremes(self.tz))
            out = pd.Series(values.view("datetime64[ns]"))
            if self.unit != "ns":
                out = out.astype(f"datetime64[{self.unit}]")
            return out.dt.tz_localize("UTC").dt.tz_convert(self.tz) if self.tz else out
        dtype = pd.api.types.pandas_dtype(self.dtype)
        numpy_dtype = np.dtype(getattr(dtype, "numpy_dtype", dtype))
        if numpy_dtype.kind == "f":
            out = values.astype(numpy_dtype)
            out[values == MIN_TIME] = -np.inf
            out[values == MAX_TIME] = np.inf
        else:
            info = np.iinfo(numpy_dtype)
            out = np.clip(np.where(values == MIN_TIME, info.min, values), info.min, info.max).astype(numpy_dtype)
        return pd.Series(out).astype(dtype)

    def duration(self, param: str, value: Any) -> int:
        """A duration in the axis's unit; strings and timedeltas need a timestamp column."""
        parsed = parse_duration(param, value, allow_zero=True) if not isinstance(value, (int, np.integer)) or isinstance(value, bool) else value
        if not isinstance(parsed, dt.timedelta) and parsed == 0:
            return 0  # zero needs no unit
        if isinstance(parsed, dt.timedelta):
            if self.kind == "numeric":
                raise WindowingConfigError(
                    f"{param}={value!r} is a duration, but time column {self.column!r} is numeric; "
                    "give a plain number in the column's unit")
            return int(pd.Timedelta(parsed).value)
        if isinstance(parsed, numbers.Real):
            if self.kind == "datetime":
                raise WindowingConfigError(
                    f"{param}={value!r} is a plain number, but time column {self.column!r} holds timestamps; "
                    "give a duration such as '10 seconds'")
            if parsed < 0 or parsed != int(parsed):
                raise WindowingConfigError(f"{param}={value!r} must be a non-negative whole number in the column's unit")
            return int(parsed)
        raise WindowingConfigError(f"{param}={value!r} is not a duration")

    def instant(self, param: str, value: Any, where: str = "") -> int:
        """An instant (a watermark) in the axis's unit: a whole number on a numeric axis, a timestamp
        otherwise. ``where`` says which input the value is from, for the errors."""
        if self.kind == "numeric":
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise WindowingConfigError(f"{param}={value!r}{where} must be a number: time column {self.column!r} is numeric")
            if not math.isfinite(value) or value != math.floor(value):
                raise WindowingConfigError(
                    f"{param}={value!r}{where} must be a whole number in the unit of time column {self.column!r}, as its "
                    "times are" + ("; to end the input, use advance_watermark_to_infinity()" if value == math.inf else ""))
            if not MIN_TIME <= value < MAX_TIME:
                raise WindowingConfigError(
                    f"{param}={value!r}{where} is beyond the time axis (64-bit integers); to end the input, use "
                    "advance_watermark_to_infinity()")
            return int(value)
        if isinstance(value, numbers.Real):
            raise WindowingConfigError(
                f"{param}={value!r}{where} is a plain number, but time column {self.column!r} holds timestamps; give a timestamp")
        try:
            stamp = pd.Timestamp(value)
        except (TypeError, ValueError):
            stamp = pd.NaT
        if stamp is pd.NaT:
            raise WindowingConfigError(f"{param}={value!r}{where} is not a timestamp")
        if stamp.tzinfo is None and self.tz:
            stamp = stamp.tz_localize(self.tz)
        if stamp.tzinfo is not None:
            stamp = stamp.tz_convert("UTC").tz_localize(None)
        if not pd.Timestamp.min <= stamp <= pd.Timestamp.max:
            raise WindowingConfigError(
                f"{param}={value!r}{where} is beyond the time axis (nanosecond timestamps, {pd.Timestamp.min} to "
                f"{pd.Timestamp.max}); to end the input, use advance_watermark_to_infinity()")
        return int(stamp.as_unit("ns").value)
