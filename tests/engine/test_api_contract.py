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
