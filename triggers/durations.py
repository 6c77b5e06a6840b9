"""Durations at the edge: strings, timedeltas, pendulum durations or plain numbers."""

from __future__ import annotations

import datetime as dt
import math
import numbers
import re
from typing import Any, Callable, Union

import numpy as np
import pandas as pd

from .errors import WindowingConfigError

Duration = Union[str, dt.timedelta, np.timedelta64, int, float]

# A unit Spark's intervals take ("1 week", as in ``window(ts, "1 week")``) that pandas does not: it reads "W".
_WEEKS = re.compile(r"(?<=[\d.\s])weeks?\b", re.IGNORECASE)


def parse_duration(param: str, value: Duration, *, allow_zero: bool = False) -> pd.Timedelta | int | float:
    """Validate a duration; return a nanosecond ``pandas.Timedelta`` or, for a plain number, the number.

    A Timedelta keeps the nanoseconds a timestamp column holds (a ``datetime.timedelta`` rounds
    them to microseconds: "1500ns" windows were 2 µs long). Numbers are kept as they are: they are
    in the unit of a numeric time column, and only the runner knows whether the column is numeric. A value that is no
    duration, or one the 64-bit time axis cannot hold, raises ``WindowingConfigError`` (a
    ``ValueError``) naming the parameter, as every other bad setting.
    """
    if isinstance(value, bool):
        raise WindowingConfigError(f"{param}={value!r} is not a duration; give e.g. '10 seconds' or a timedelta")
    if isinstance(value, str):
        if _numeric_text(value):  # pandas reads "10" as 10 nanoseconds
            raise WindowingConfigError(
                f"{param}={value!r} has no unit; give e.g. '10 seconds', or a plain number for a numeric time column")
        text = _WEEKS.sub("W", value)
        parsed: pd.Timedelta | int | float = _nanoseconds(param, value, lambda: pd.Timedelta(text))
    elif isinstance(value, (dt.timedelta, np.timedelta64)):  # before numbers: a timedelta64 is a NumPy integer
        if (getattr(value, "years", 0) or getattr(value, "months", 0)) and not hasattr(value, "start"):
            raise WindowingConfigError(  # a pendulum Duration of calendar parts; an Interval (with a start) is exact
                f"{param}={value!r} has years or months, which have no fixed length (pendulum counts a month as "
                "30 days and a year as 365); give weeks, days or smaller units"
            )
        if isinstance(value, (pd.Timedelta, np.timedelta64)) or type(value) is dt.timedelta:
            parsed = _nanoseconds(param, value, lambda: pd.Timedelta(value))
        else:  # pendulum's own fields count calendar parts: its total_seconds is the length
            parsed = _nanoseconds(param, value, lambda: pd.Timedelta(dt.timedelta(seconds=value.total_seconds())))
    elif isinstance(value, numbers.Real):
        if not math.isfinite(value) or value >= 2**63:
            raise WindowingConfigError(
                f"{param}={value!r} must be a finite number below 2**63 (the time axis's 64 bits) in the "
                "time column's unit")
        parsed = value
    else:
        raise WindowingConfigError(f"{param}={value!r} is not a duration; give a string such as '10 seconds', a timedelta or a number")
    magnitude = parsed.value if isinstance(parsed, pd.Timedelta) else parsed  # pandas 2's total_seconds drops nanoseconds
    if magnitude < 0 or (magnitude == 0 and not allow_zero):
        bound = "must not be negative" if allow_zero else "must be positive"
        raise WindowingConfigError(f"{param}={value!r} {bound}")
    return parsed


def duration_text(value: Any) -> str:
    """A parsed duration as a user writes one (``'10 seconds'``), for reprs and errors: triggers keep
    their durations parsed, so a pandas Timedelta's repr would show what the user never wrote."""
    if isinstance(value, dt.timedelta):
        return repr(f"{value.total_seconds():g} seconds")
    return repr(value)


def _nanoseconds(param: str, value: Duration, convert: Callable[[], pd.Timedelta]) -> pd.Timedelta:
    """``convert()`` in nanoseconds; NaT (from ``""``) and what 64 bits of nanoseconds, the time axis,
    cannot hold are refused naming ``param`` (pandas raised AttributeError or OverflowError). pandas 2
    reports a string beyond them ("200000 days") as OutOfBoundsDatetime, pandas 3 as OutOfBoundsTimedelta:
    both are ValueErrors, which would call it no duration."""
    try:
        parsed = convert()
        if not pd.isna(parsed):
            return parsed.as_unit("ns")
    except (OverflowError, pd.errors.OutOfBoundsTimedelta, pd.errors.OutOfBoundsDatetime):
        raise WindowingConfigError(
            f"{param}={value!r} is beyond the time axis, which holds nanoseconds in 64 bits (about 292 years)") from None
    except ValueError:
        pass
    raise WindowingConfigError(f"{param}={value!r} is not a duration; give e.g. '10 seconds', '30 minutes' or '1 hour'")


def _numeric_text(text: str) -> bool:
    """Whether ``text`` is a number without a unit (timeaxis._is_number asks it of a value, not a string)."""
    try:
        float(text)
    except ValueError:
        return False
    return True
