"""Durations at the edge: strings, timedeltas, pendulum durations or plain numbers."""

from __future__ import annotations

import datetime as dt
import numbers
from typing import Union

import pandas as pd

from .errors import WindowingConfigError

Duration = Union[str, dt.timedelta, int, float]


def parse_duration(param: str, value: Duration, *, allow_zero: bool = False) -> dt.timedelta | int | float:
    """Validate a duration; return a ``timedelta`` or, for a plain number, the number.

    Numbers are kept as they are: they are in the unit of a numeric time
    column, and only the runner knows whether the column is numeric. A value that is no
    duration raises ``WindowingConfigError`` (a ``ValueError``), as every other bad setting.
    """
    if isinstance(value, bool):
        raise WindowingConfigError(f"{param}={value!r} is not a duration; give e.g. '10 seconds' or a timedelta")
    if isinstance(value, str):
        try:
            parsed: dt.timedelta | int | float = pd.Timedelta(value).to_pytimedelta()
        except ValueError:
            raise WindowingConfigError(f"{param}={value!r} is not a duration; give e.g. '10 seconds', '30 minutes' or '1 hour'") from None
    elif isinstance(value, dt.timedelta):
        if (getattr(value, "years", 0) or getattr(value, "months", 0)) and not hasattr(value, "start"):
            raise WindowingConfigError(  # a pendulum Duration of calendar parts; an Interval (with a start) is exact
                f"{param}={value!r} has years or months, which have no fixed length (pendulum counts a month as "
                "30 days and a year as 365); give weeks, days or smaller units"
            )
        parsed = dt.timedelta(seconds=value.total_seconds()) if type(value) is not dt.timedelta else value
    elif isinstance(value, numbers.Real):
        parsed = value
    else:
        raise WindowingConfigError(f"{param}={value!r} is not a duration; give a string such as '10 seconds', a timedelta or a number")
    magnitude = parsed.total_seconds() if isinstance(parsed, dt.timedelta) else parsed
    if magnitude < 0 or (magnitude == 0 and not allow_zero):
        bound = "must not be negative" if allow_zero else "must be positive"
        raise WindowingConfigError(f"{param}={value!r} {bound}")
    return parsed
