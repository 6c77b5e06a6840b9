"""Sizes and durations in the storage sidecars' settings: ``"64MB"``, ``30``, ``timedelta(minutes=1)``.

Shared by the splitter's options and the key-value store's settings, so both
accept the same spellings and word their errors the same way: naming the
parameter and the value.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Union

import numpy as np

Seconds = Union[float, int, timedelta, str]
Size = Union[int, str]

_SIZE_UNITS = {"": 1, "b": 1, "kb": 1024, "kib": 1024, "mb": 1024**2, "mib": 1024**2, "gb": 1024**3, "gib": 1024**3}
_SIZE_RE = re.compile(r"\s*(\d+)\s*([a-zA-Z]*)\s*")


def is_whole_number(value: Any) -> bool:
    """An int or a NumPy integer (what a pandas column or a NumPy array hands out), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def parse_size(name: str, value: Size) -> int:
    """Bytes from an int or a string such as ``"64MB"`` (units are powers of 1024)."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be a number of bytes such as 1048576 or '1MB'")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.fullmatch(str(value))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise ValueError(f"{name}={value!r} is not a size; use bytes such as 1048576 or '64MB'")
        size = int(match.group(1)) * _SIZE_UNITS[unit]
    if size <= 0:
        raise ValueError(f"{name}={value!r} must be positive: a size of at least one byte")
    return size


def parse_seconds(name: str, value: Seconds | None, *, allow_none: bool = False, positive: bool = False) -> float | None:
    """Seconds from a number, a ``timedelta`` or a numeric string; never negative, and with ``positive`` more than
    0 and finite."""
    if value is None and allow_none:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):  # float(True) is 1.0: a flag passed where seconds were meant
        raise ValueError(f"{name}={value!r} must be a number of seconds or a timedelta, not a bool")
    else:
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"{name}={value!r} must be a number of seconds or a timedelta") from None
    if positive and not 0 < seconds < float("inf"):
        raise ValueError(f"{name}={value!r} must be more than 0 seconds and finite")
    if seconds < 0 or seconds != seconds:
        raise ValueError(f"{name}={value!r} must be zero or more seconds")
    return seconds
