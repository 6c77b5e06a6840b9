"""Statements of ../shared/api.md checked as a user calls them, where no other test checks them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from accumulations import Sum
from windowing import windowed


@pytest.mark.parametrize("dtype, low, high", [
    ("Int64", np.iinfo(np.int64).min, np.iinfo(np.int64).max),
    ("Int32", np.iinfo(np.int32).min, np.iinfo(np.int32).max),
    ("UInt32", 0, np.iinfo(np.uint32).max),
    ("Float64", -np.inf, np.inf),
])
def test_window_bounds_keep_a_nullable_numeric_time_columns_dtype(dtype, low, high):
    df = pd.DataFrame({"ts": pd.Series([1, 12], dtype=dtype), "x": [1, 2]})
    fixed = windowed(df, time="ts").fixed(10).aggregate(Sum("x"))
    everything = windowed(df, time="ts").global_window().aggregate(Sum("x"))
    for panes in (fixed, everything):
        assert panes["window_start"].dtype == dtype and panes["window_end"].dtype == dtype
    assert fixed["window_start"].tolist() == [0, 10] and fixed["window_end"].tolist() == [10, 20]
    assert everything[["window_start", "window_end"]].values.tolist() == [[low, high]]


@pytest.mark.parametrize("tz, start_in, end_in", [
    (None, None, None), ("UTC", "UTC", "UTC"),
    ("Europe/Berlin", "UTC", "Europe/Berlin"),  # east of UTC: the greatest wall time ends the type
    ("America/New_York", "America/New_York", "UTC"),  # west of UTC: the least wall time starts it
])
def test_the_global_window_of_a_timestamp_column_spans_the_least_and_greatest_timestamp_of_its_type(tz, start_in, end_in):
    times = pd.Series(pd.to_datetime([1, 2], unit="s", utc=True)).astype("datetime64[ns, UTC]")
    df = pd.DataFrame({"ts": times.dt.tz_convert(tz) if tz else times.dt.tz_localize(None), "x": [1, 2]})
    panes = windowed(df, time="ts").global_window().aggregate(Sum("x"))
    assert panes["window_start"].dtype == panes["window_end"].dtype == df["ts"].dtype
    assert panes["window_start"].tolist() == [pd.Timestamp.min.tz_localize(start_in)]
    assert panes["window_end"].tolist() == [pd.Timestamp.max.tz_localize(end_in)]
