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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from triggers import NO_TIME, duration_text, parse_duration

from .errors import WindowingConfigError

MIN_TIME = int(np.iinfo(np.int64).min) + 1  # pd.Timestamp.min in ns; iinfo.min is NaT
MAX_TIME = int(NO_TIME)
MIN_MICROS, MAX_MICROS = -(-MIN_TIME // 1000), MAX_TIME // 1000
"""The least and greatest whole microsecond on the axis (an epoch instant read with a unit)."""
NUMERIC_RANGE = f"64-bit integers from {MIN_TIME}, before {MAX_TIME}, the end of time"
"""The times a numeric column may hold, for the errors that refuse the others."""

NS_PER_MS = 1_000_000
"""Nanoseconds (a timestamp axis's unit) per millisecond (Spark's watermark's)."""

EPOCH_UNITS = ("s", "ms", "us", "ns")
"""``windowed(time_unit=...)``: the units of a column of epoch instants."""
MICROS_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
"""Microseconds per unit of the epoch units coarser than the axis's microsecond (nanoseconds are divided instead)."""
_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def add_saturating(times: np.ndarray, delta: int) -> np.ndarray:
    """``times + delta`` that sticks at MAX_TIME instead of overflowing."""
    return np.where(times > MAX_TIME - delta, MAX_TIME, times + delta)


def _nearest_micros(values: np.ndarray, unit: str) -> np.ndarray:
    """Finite floats in ``unit`` as the nearest int64 microseconds (half up), from their exact values.

    The whole units and the fraction are taken apart first, both exactly (a float minus its
    truncation is a float); the fraction's product with the unit is rounded, and its rounding error
    is taken exactly too (Dekker's product: the unit has few enough digits), so a product rounded onto
    or across half a microsecond (a float of seconds near the epoch, 1.5997815 s holding
    1599781.4999... us) goes the way its exact value goes. The Spark runner computes the same on the JVM.
    Nanoseconds: the whole nanoseconds decide, the fraction below one cannot reach the next half.
    """
    if unit == "ns":
        whole = np.floor(values).astype(np.int64)
        below = np.mod(whole, 1000)
        return (whole - below) // 1000 + (below >= 500)
    factor = MICROS_PER_UNIT[unit]
    whole = np.trunc(values)
    part = values - whole
    product = part * float(factor)
    split = DEKKER_SPLITTER * part
    high = split - (split - part)
    error = (high * float(factor) - product) + (part - high) * float(factor)
    floor = np.floor(product)
    above = product - floor  # exact wherever it is near one half
    return whole.astype(np.int64) * factor + floor.astype(np.int64) + ((above > 0.5) | ((above == 0.5) & (error >= 0)))


DEKKER_SPLITTER = 2.0**27 + 1
"""Veltkamp's constant: ``x`` as a high half of 26 bits and an exact low half (Dekker's exact product)."""


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


_NS_PER_DATETIME_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
"""Nanoseconds per unit of a ``datetime64`` column, coarsest first."""


def _holds_exactly(float_type: np.dtype[Any], values: np.ndarray) -> bool:
    """Whether ``float_type`` holds each int64 of ``values`` as it is."""
    back = values.astype(float_type).astype(np.float64)
    inside = np.abs(back) < 2.0**63  # a bound rounded up to 2**63 is no int64
    return bool(np.all(inside & (np.where(inside, back, 0.0).astype(np.int64) == values)))


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
    epoch_unit: str | None = None
    """``windowed(time_unit=...)``: the column holds numbers, epoch instants in this unit, read
    as timestamps (kind ``datetime``, naive, microseconds, as Beam keeps them)."""
    microseconds: bool = False
    """The column's instants are whole microseconds (epoch instants, Spark timestamps), so durations are taken to
    the nearest microsecond: window bounds between two microseconds could not be written back."""

    @classmethod
    def of(cls, column: str, series: pd.Series, where: str = "", epoch_unit: str | None = None) -> "TimeAxis":
        """The axis of a time column; ``where`` says which input it is from, for the error."""
        dtype = series.dtype
        if epoch_unit is not None:
            if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
                raise WindowingConfigError(
                    f"windowed(time_unit={epoch_unit!r}): time column {column!r}{where} has dtype {dtype}; time_unit "
                    "says that a column of numbers holds epoch instants: drop it for a column of timestamps")
            return cls(column, "datetime", unit="us", epoch_unit=epoch_unit, microseconds=True)
        if isinstance(dtype, pd.DatetimeTZDtype):
            return cls(column, "datetime", tz=str(dtype.tz), unit=dtype.unit)
        if pd.api.types.is_datetime64_dtype(dtype):
            return cls(column, "datetime", unit=np.datetime_data(dtype)[0])  # type: ignore[arg-type]  # a datetime64 dtype here
        if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
            return cls(column, "numeric", dtype=str(dtype))
        raise WindowingConfigError(
            f"time column {column!r}{where} has dtype {dtype}; it must hold timestamps or numbers "
            "(convert strings with pandas.to_datetime first)")

    def _kind_name(self) -> str:
        if self.kind == "numeric":
            return "numbers"
        if self.epoch_unit is not None:
            return f"epoch {_UNIT_NAMES[self.epoch_unit]} (time_unit={self.epoch_unit!r})"
        return f"timestamps in time zone {self.tz}" if self.tz else "timestamps without a time zone"

    def to_internal(self, series: pd.Series, where: str = "") -> np.ndarray:
        """The column as int64 instants; missing or fractional times, and times of another kind
        than the axis's, are refused. ``where`` says which input the column is from, for the errors."""
        found = TimeAxis.of(self.column, series, where, self.epoch_unit)
        if found.kind != self.kind or (found.tz is None) != (self.tz is None):
            raise WindowingConfigError(
                f"time column {self.column!r}{where} holds {found._kind_name()} (dtype {series.dtype}), but the first "
                f"elements' times are {self._kind_name()}; give every step's times as one type")
        missing = int(series.isna().sum())
        if missing:
            raise WindowingConfigError(
                f"time column {self.column!r}{where} has {missing} missing value(s); every element needs an event time")
        if self.epoch_unit is not None:  # nullable Int64 / Float64 columns as NumPy numbers (no NA is left)
            kind = "f" if pd.api.types.is_float_dtype(series.dtype) else \
                "u" if pd.api.types.is_unsigned_integer_dtype(series.dtype) else "i"
            raw = series.to_numpy(dtype={"f": np.float64, "u": np.uint64, "i": np.int64}[kind])
            micros, inside = self._epoch_micros(raw)
            if not inside.all():
                raise WindowingConfigError(
                    f"time column {self.column!r}{where} has {int((~inside).sum())} time(s) outside the engine's range "
                    f"{self._epoch_range()} (time_unit={self.epoch_unit!r}), the first {raw[~inside][0]}")
            return micros * 1000
        if self.kind == "datetime":
            values = series.dt.tz_convert("UTC").dt.tz_localize(None) if self.tz else series
            outside = (values < pd.Timestamp.min) | (values >= pd.Timestamp.max)
            if outside.any():
                raise WindowingConfigError(
                    f"time column {self.column!r}{where} has {int(outside.sum())} time(s) outside the engine's "
                    f"nanosecond range (from {pd.Timestamp.min}, before {pd.Timestamp.max}, the end of time), the "
                    f"first {series[outside].iloc[0]}")
            return values.astype("datetime64[ns]").to_numpy().view(np.int64)
        raw = series.to_numpy()
        if raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)):
                raise WindowingConfigError(
                    f"time column {self.column!r}{where} holds {raw[~np.isfinite(raw)][0]}, outside the engine's range "
                    f"({NUMERIC_RANGE}); every element needs a finite event time")
            if not np.all(raw == np.floor(raw)):
                raise WindowingConfigError(
                    f"time column {self.column!r}{where} holds non-integral numbers; use integers in one unit (e.g. "
                    "milliseconds), or give the unit of epoch instants, e.g. windowed(..., time_unit='s') for "
                    "time.time() seconds")
        if raw.dtype.kind == "f":  # the whole floats inside 64 bits are inside the range
            outside = (raw.astype(np.float64) <= -(2.0**63)) | (raw.astype(np.float64) >= 2.0**63)  # float16 holds no 2**63
        else:
            outside = (raw >= MAX_TIME) if raw.dtype.kind == "u" else (raw < MIN_TIME) | (raw >= MAX_TIME)
        if outside.any():
            raise WindowingConfigError(
                f"time column {self.column!r}{where} has {int(outside.sum())} time(s) outside the engine's range "
                f"({NUMERIC_RANGE}), the first {raw[outside][0]}")
        return raw.astype(np.int64)

    def _epoch_micros(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Epoch instants in ``epoch_unit`` as int64 microseconds, rounded to the nearest (half up),
        and where they are on the axis (a value elsewhere gives 0). The Spark runner computes the
        same on the JVM (`runners.spark._event_time`). Beam truncates, but a float carries binary
        error: 1.001 s is 1000999.9999999999 microseconds. A float is rounded as the number it
        holds, not as its product with the unit, which float arithmetic rounds first
        (1700000001.0000004 s holds ...0.48 us past the second; times 1e6 it is ...0.5 exactly)."""
        unit, raw = self.epoch_unit or "us", np.asarray(raw)
        if raw.dtype.kind == "f" or raw.dtype == object:
            raw = raw.astype(np.float64)
            scaled = raw / 1000.0 if unit == "ns" else raw * float(MICROS_PER_UNIT[unit])
            inside = np.abs(scaled) < 2.0**62  # also false for inf
            if unit == "ns":
                inside &= np.abs(raw) < 2.0**63  # whole nanoseconds in int64 (beyond, outside the axis anyway)
            micros = _nearest_micros(np.where(inside, raw, 0.0), unit)
        else:
            fits = raw <= 2**62 if raw.dtype.kind == "u" else np.ones(len(raw), dtype=bool)  # uint64 beyond int64
            ints = np.where(fits, raw, 0).astype(np.int64)
            if unit == "ns":
                micros, inside = ints // 1000 + (ints % 1000 >= 500), fits
            else:
                factor = MICROS_PER_UNIT[unit]
                inside = fits & (ints >= -(-MIN_MICROS // factor)) & (ints <= MAX_MICROS // factor)
                micros = np.where(inside, ints, 0) * factor
        inside &= (micros >= MIN_MICROS) & (micros <= MAX_MICROS)
        return np.where(inside, micros, 0), inside

    def _epoch_range(self) -> str:
        """The instants taken, once rounded to the nearest microsecond: the axis's first and last whole ones."""
        first, last = pd.Timestamp(MIN_MICROS, unit="us"), pd.Timestamp(MAX_MICROS, unit="us")
        return f"as epoch {_UNIT_NAMES[self.epoch_unit or 'us']}: {first} to {last}, to the nearest microsecond"

    def fine_enough_for(self, durations: list[int]) -> "TimeAxis":
        """This axis with bounds given in a unit that holds instants ``durations`` (nanoseconds) apart from the
        column's: a column of whole seconds with sessions("500ms") has window ends on half seconds, which
        ``datetime64[s]`` bounds truncated (every session printed as ``[t, t)``)."""
        if self.kind != "datetime":
            return self
        step = int(np.gcd.reduce(np.array([_NS_PER_DATETIME_UNIT[self.unit], *durations], dtype=np.int64)))
        unit = next(u for u, ns in _NS_PER_DATETIME_UNIT.items() if step % ns == 0)
        return self if unit == self.unit else replace(self, unit=unit)

    def window_bounds(self, starts: np.ndarray, ends: np.ndarray) -> tuple[pd.Series, pd.Series]:
        """``window_start`` and ``window_end`` back in one type (`from_internal` of both at once)."""
        both = self.from_internal(np.concatenate([np.asarray(starts, np.int64), np.asarray(ends, np.int64)]))
        return both.iloc[:len(starts)].reset_index(drop=True), both.iloc[len(starts):].reset_index(drop=True)

    def from_internal(self, values: np.ndarray, widen: bool = True) -> pd.Series:
        """Instants back in the column's own type; the ends of time become the type's extremes. Integer bounds that
        a column narrower than 64 bits cannot hold (an int8 column's session ending past 127) come back as
        ``int64`` rather than clipped, or with ``widen`` False (Spark's output type is the column's) are refused."""
        values = np.asarray(values, dtype=np.int64)
        if self.kind == "datetime":
            if self.tz and self.unit == "ns":
                values = np.clip(values, *_zone_extremes(self.tz))
            if self.unit != "ns" or self.microseconds:  # the axis's start rounded up into the unit, inward as its end is
                step = _NS_PER_DATETIME_UNIT["us" if self.unit == "ns" else self.unit]
                values = np.where(values == MIN_TIME, -(-MIN_TIME // step) * step, values)
            out = pd.Series(values.view("datetime64[ns]"))
            if self.unit != "ns":
                out = out.astype(f"datetime64[{self.unit}]")
            return out.dt.tz_localize("UTC").dt.tz_convert(self.tz) if self.tz else out
        dtype = pd.api.types.pandas_dtype(self.dtype)
        numpy_dtype: np.dtype[Any] = np.dtype(getattr(dtype, "numpy_dtype", dtype))  # type: ignore[arg-type]
        if numpy_dtype.kind == "f":  # whole numbers; past the float's 2**(mantissa + 1) a bound may round to a neighbour
            inner = values[(values != MIN_TIME) & (values != MAX_TIME)]
            held = next((t for t in dict.fromkeys([numpy_dtype, np.dtype(np.float64)][:2 if widen else 1])
                         if _holds_exactly(t, inner)), None)
            if held is None:
                widest = np.dtype(np.float64) if widen else numpy_dtype
                outside = next(v for v in inner if not _holds_exactly(widest, np.array([v])))
                raise WindowingConfigError(
                    f"a window bound, {outside}, is no {widest} (the nearest is {float(np.array([outside]).astype(widest)[0])!r}), "
                    f"so float time column {self.column!r} cannot give it exactly; cast the column to int64 first (or "
                    "give time_unit= for epoch instants)")
            if held != numpy_dtype:  # a float32 column's bounds past 2**24 as float64, as a narrow int's as int64
                numpy_dtype = held
                dtype = pd.api.types.pandas_dtype("Float64" if isinstance(dtype, pd.api.extensions.ExtensionDtype) else "float64")
            out = values.astype(numpy_dtype)
            out[values == MIN_TIME] = -np.inf
            out[values == MAX_TIME] = np.inf
        else:
            info = np.iinfo(numpy_dtype)
            inner = values[(values != MIN_TIME) & (values != MAX_TIME)]
            if len(inner) and (inner.min() < info.min or inner.max() > info.max):
                if not widen:
                    outside = inner[(inner < info.min) | (inner > info.max)][0]
                    raise WindowingConfigError(
                        f"a window bound, {outside}, lies outside the range of time column {self.column!r} "
                        f"({numpy_dtype}: {info.min} to {info.max}), whose type the bounds keep; cast the column "
                        "to a 64-bit integer first")
                info = np.iinfo(np.int64)
                dtype = pd.api.types.pandas_dtype("Int64" if isinstance(dtype, pd.api.extensions.ExtensionDtype) else "int64")
            out = np.clip(np.where(values == MIN_TIME, info.min, values), info.min, min(info.max, MAX_TIME)).astype(info.dtype)
            if info.max > MAX_TIME:  # uint64: the end of time is its maximum, beyond the axis's
                out[values == MAX_TIME] = info.max
        return pd.Series(out).astype(dtype)

    def duration(self, param: str, value: Any, where: str = "") -> int:
        """A duration in the axis's unit; strings and timedeltas need a timestamp column. ``where`` says which
        input the value is from, for the errors."""
        whole = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        parsed = value if whole else parse_duration(param, value, allow_zero=True)
        return self.units_of(param, value, parsed, where)

    def units_of(self, param: str, value: Any, parsed: Any, where: str = "") -> int:
        """A duration parsed already (``parsed``, of ``value`` as given) in the axis's unit."""
        if not isinstance(parsed, dt.timedelta) and parsed == 0:
            return 0  # zero needs no unit
        if isinstance(parsed, dt.timedelta):
            if self.kind == "numeric":
                raise WindowingConfigError(
                    f"{param}={duration_text(value)}{where} is a duration, but time column {self.column!r} is numeric; "
                    "give a plain number in the column's unit")
            if not self.microseconds:
                return int(pd.Timedelta(parsed).value)
            micros = pd.Timedelta(pd.Timedelta(parsed).to_pytimedelta()).value  # the nearest microsecond, Beam's precision
            if micros == 0 and parsed:
                read = f"read with time_unit={self.epoch_unit!r}" if self.epoch_unit else "(a Spark timestamp)"
                raise WindowingConfigError(
                    f"{param}={value!r}{where} is less than a microsecond, the precision of time column {self.column!r} {read}")
            return int(micros)
        if _is_number(parsed):
            if self.kind == "datetime":
                holds = f"is read as timestamps (time_unit={self.epoch_unit!r})" if self.epoch_unit else "holds timestamps"
                raise WindowingConfigError(
                    f"{param}={value!r}{where} is a plain number, but time column {self.column!r} {holds}; "
                    "give a duration such as '10 seconds'")
            if parsed < 0:
                raise WindowingConfigError(f"{param}={value!r}{where} must not be negative")
            if parsed != int(parsed):
                raise WindowingConfigError(f"{param}={value!r}{where} must be a whole number in the column's unit")
            return int(parsed)
        raise WindowingConfigError(f"{param}={value!r}{where} is not a duration")

    def instant(self, param: str, value: Any, where: str = "") -> int:
        """An instant (a watermark) in the axis's unit: a whole number on a numeric axis, a timestamp
        otherwise. ``where`` says which input the value is from, for the errors."""
        if self.kind == "numeric":
            if not _is_number(value) or isinstance(value, bool):
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
        if _is_number(value) and self.epoch_unit is not None and not isinstance(value, bool):
            micros, inside = self._epoch_micros(np.asarray([value]))
            if not inside[0]:
                raise WindowingConfigError(
                    f"{param}={value!r}{where} is beyond the time axis {self._epoch_range()} (time_unit="
                    f"{self.epoch_unit!r}); to end the input, use advance_watermark_to_infinity()")
            return int(micros[0]) * 1000
        if _is_number(value):
            raise WindowingConfigError(
                f"{param}={value!r}{where} is a plain number, but time column {self.column!r} holds timestamps; give a timestamp")
        try:
            stamp = pd.Timestamp(value)
        except (TypeError, ValueError):
            stamp = pd.NaT
        if stamp is pd.NaT:
            raise WindowingConfigError(f"{param}={value!r}{where} is not a timestamp")
        if stamp.tzinfo is None and self.tz:  # a wall time in the column's zone
            try:
                stamp = stamp.tz_localize(self.tz)
            except Exception as error:  # noqa: BLE001 - pytz's AmbiguousTimeError (pandas 2) is no ValueError (pandas 3's)
                if not isinstance(error, ValueError) and not type(error).__name__.endswith("TimeError"):
                    raise
                ambiguous = "Ambiguous" in type(error).__name__ or "infer dst" in str(error)
                raise WindowingConfigError(
                    f"{param}={value!r}{where} is a wall time without a zone, read in the zone of time column "
                    f"{self.column!r}, {self.tz}, where it is {'ambiguous' if ambiguous else 'no time'} (the clocks "
                    "change there); give a timestamp with its zone, e.g. pd.Timestamp(..., tz=...)") from None
        if stamp.tzinfo is not None:
            stamp = stamp.tz_convert("UTC").tz_localize(None)
        if not pd.Timestamp.min <= stamp <= pd.Timestamp.max:
            raise WindowingConfigError(
                f"{param}={value!r}{where} is beyond the time axis (nanosecond timestamps, {pd.Timestamp.min} to "
                f"{pd.Timestamp.max}); to end the input, use advance_watermark_to_infinity()")
        return int(stamp.as_unit("ns").value)


def _is_number(value: Any) -> bool:
    """A real number (NumPy's included), ``bool`` too; without narrowing its type to ``numbers.Real``,
    which the type checker cannot do arithmetic with."""
    return isinstance(value, numbers.Real)
