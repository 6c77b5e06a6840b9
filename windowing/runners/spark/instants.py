"""Timestamp keys and values across the Python boundary as epoch microseconds.

pyspark hands a `timestamp` column to pandas as wall times and reads the function's output back so,
but not alike in every path: ``applyInPandasWithState`` on pyspark 4 wrote wall times back as UTC,
a column outside pandas' nanoseconds (1677 to 2262) failed or was shifted, and in a zone that sets its clocks
back two instants share a wall time (docs/spark.md, "Output types"). The workers receive timestamp keys and
built-ins' timestamp values as microseconds (with ``windowing.spark.combine=false`` every timestamp), hold them as
UTC wall times, exact (`planning.exact_instants`), and give them back as microseconds, which the JVM makes
timestamps (`query._finish`). ``zone`` is the zone of the wall times the workers hold: ``UTC``, or the session's for
a Fold's values and a table written before (`worker.BucketStep.as_written`). The workers make wall times with
`zoneinfo`'s rules (pandas 2's own, pytz's, know no daylight saving after 2037 and gave a time of the year 100 back
1.5 ms off) and read each back with the rules it was made with: pyspark's own for the packed rows it hands over.
Timestamps pyspark converts itself (lists of them) are handed over zone-aware (`zone_aware`).
"""

from __future__ import annotations

import sys
import warnings
import zoneinfo
from pathlib import Path
from types import FrameType
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ...errors import RepeatedWallTimeWarning
from .output_values import as_list, is_missing
from .wire import WIRE


def instants_restored(columns: dict[str, Any], names: Iterable[str], zone: str, like_pyspark: bool = False) -> dict[str, Any]:
    """``columns`` with each of ``names``, epoch microseconds (and its null flag, if shipped), as naive wall times in
    ``zone``, in microseconds: they reach the years 1 to 9999 as Spark's do. In ``UTC`` they are exact; in a zone
    that sets its clocks back, two instants of the repeated hour share one. ``like_pyspark``: made with pyspark's
    rules (the zone as pandas names it), as pyspark made the packed rows' wall times a window table holds
    (`instants_as_micros`); else with zoneinfo's."""
    out, rules = dict(columns), zone if like_pyspark else zone_rules(zone)
    for name in names:
        instants = np.asarray(out[name], dtype=np.int64).astype("datetime64[us]")
        flag = WIRE.null_flag(name)
        if flag in out:
            instants[np.asarray(out.pop(flag), dtype=bool)] = np.datetime64("NaT")
        out[name] = pd.Series(instants).dt.tz_localize("UTC").dt.tz_convert(rules).dt.tz_localize(None)
    return out


def instants_as_micros(values: Any, zone: str, made_by_pyspark: bool = False) -> np.ndarray:
    """Wall times in ``zone`` (Timestamps, datetimes or datetime64, naive; or zoned) as epoch microseconds, None where
    missing. A wall time of the hour the clocks go back is taken in standard time, as pyspark takes it.
    ``made_by_pyspark``: the wall times are pyspark's (packed rows), read back with the rules it made them with, the
    zone as pandas names it (pandas 2's, pytz's, know no daylight saving after 2037: read with zoneinfo's, a summer
    time of 2041 came back an hour early on pyspark 3.5); else they are `instants_restored`'s."""
    series = pd.Series(values).reset_index(drop=True)
    if not isinstance(series.dtype, pd.DatetimeTZDtype):
        series = _localized(series, zone, made_by_pyspark)
    micros = series.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(dtype="datetime64[us]").view(np.int64)
    missing = series.isna().to_numpy()
    if not missing.any():
        return micros
    out = micros.astype(object)
    out[missing] = None
    return out


def zone_aware(values: Any, zone: str, made_by_pyspark: bool, lists: bool) -> np.ndarray:
    """Wall times in ``zone`` that pyspark converts itself (``lists`` of them: a ``ToList`` of timestamps; or a
    timestamp-typed ``Fold``'s) made zone-aware, with the rules they were made with (`instants_as_micros`): pyspark
    takes an aware one as it is, where it localized a naive one with its own rules, failing on one of the hour the
    clocks go back (``AmbiguousTimeError``, naming no column) and, on pyspark 3.5, putting a summer time after 2037
    an hour late where the wall times were zoneinfo's. A time of that hour is taken in standard time, as
    `instants_as_micros` takes it."""
    cells = [None if is_missing(cell) else as_list(cell) for cell in values] if lists else list(values)  # a set sorted
    flat = [item for cell in cells if cell is not None for item in cell] if lists else cells
    series = pd.Series(flat, dtype=object)
    zoned = np.array([getattr(item, "tzinfo", None) is not None for item in flat], dtype=bool)  # a Fold's own: kept
    naive = series.notna().to_numpy() & ~zoned
    aware = np.empty(len(flat), dtype=object)
    aware[naive] = _localized(series[naive], zone, made_by_pyspark).tolist()
    aware[zoned] = series[zoned].tolist()
    aware[~naive & ~zoned] = None
    if not lists:
        return aware
    out, start = np.empty(len(cells), dtype=object), 0
    for i, cell in enumerate(cells):
        if cell is not None:
            out[i], start = list(aware[start:start + len(cell)]), start + len(cell)
    return out


def _localized(wall_times: pd.Series, zone: str, made_by_pyspark: bool) -> pd.Series:
    """Naive wall times in ``zone`` as zone-aware microseconds, with pyspark's rules (the zone as pandas names it)
    where pyspark made them, else zoneinfo's; the hour the clocks go back in standard time, as pyspark takes it."""
    rules = zone if made_by_pyspark else zone_rules(zone)
    return wall_times.astype("datetime64[us]").dt.tz_localize(rules, ambiguous=False, nonexistent="shift_forward")


def zone_rules(zone: str) -> Any:
    """The zone as `zoneinfo` has it; a Spark zone zoneinfo does not name (an offset such as ``+01:00``) as pandas
    reads it."""
    try:
        return zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return zone


def warn_where_clocks_go_back(columns: list[str], zone: str) -> None:
    """Warn, naming ``columns`` (timestamp inputs and outputs the workers hold as wall times in ``zone``: a Fold's,
    Reduce's, own or `spark_typed` accumulation's, and nested ones), where ``zone`` sets its clocks back: the instants of the repeated hour
    would be read as the later one of each pair, silently, on every run (docs/spark.md, "Output types"). Said before
    the first run, while the zone can still change: a checkpoint holding timestamps is refused in another zone."""
    if not columns or not clocks_go_back(zone):
        return
    named = ", ".join(repr(name) for name in columns)
    warnings.warn(
        f"spark.sql.session.timeZone={zone!r} sets its clocks back (daylight saving), and the Python workers hold "
        f"{named} as wall times in it: two instants an hour apart in the hour the clocks go back share a wall time "
        "and are taken as the later one (keys and built-ins of a timestamp column are held exactly; these are a "
        "Fold's, Reduce's or own accumulation's, one typed with spark_typed, or timestamps nested in an array, map "
        "or struct). To keep them apart set the session's zone to 'UTC' before the query's first run (instants are "
        "unchanged; only how strings and naive datetimes are read and shown changes)",
        RepeatedWallTimeWarning, stacklevel=_first_frame_outside_the_package())


def clocks_go_back(zone: str) -> bool:
    """Whether ``zone``'s wall time runs back at any time from 1970 to 2050, by zoneinfo's rules: the hours of
    ``zone`` at instants six hours apart, which a step back makes less than six hours apart (a few ms)."""
    instants = pd.date_range("1970-01-01", "2051-01-01", freq="6h", tz="UTC")
    wall_times = instants.tz_convert(zone_rules(zone)).tz_localize(None).to_numpy()
    return bool((np.diff(wall_times) < np.timedelta64(6, "h")).any())


def _first_frame_outside_the_package() -> int:
    """The ``stacklevel`` of the user's call that reached the warning (the builder's depth varies by method)."""
    package, level = str(Path(__file__).parents[2]), 2
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(package):
        level, frame = level + 1, frame.f_back
    return level
