"""Statements of ../shared/api.md checked as a user calls them, where no other test checks them."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pendulum
import pytest

from accumulations import Accumulation, BottomN, Count, Reduce, Sum, TopN
from triggers import AfterProcessingTime, AfterWatermark, AtWatermark, Repeatedly
from windowing import TestStream, windowed


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


def test_panes_have_the_output_columns_in_order_with_their_types():
    stream = TestStream().add_elements([{"user": "a", "ts": 1, "amount": 5}]).advance_watermark_to_infinity()
    panes = windowed(stream, time="ts", key="user").fixed(10).aggregate(total=Sum("amount"), n=Count())
    assert list(panes.columns) == ["user", "window_start", "window_end", "total", "n", "timing", "pane_index",
                                   "is_retraction", "step"]
    assert panes["window_start"].dtype == panes["window_end"].dtype == np.int64
    assert panes["pane_index"].dtype == panes["step"].dtype == np.int64 and panes["is_retraction"].dtype == bool
    assert panes["timing"].tolist() == ["ON_TIME"] and isinstance(panes["timing"].iloc[0], str)
    assert "step" not in windowed(pd.DataFrame({"ts": [1], "amount": [5]}), time="ts").aggregate(Sum("amount"))


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


START = pd.Timestamp("2024-01-01")


def _elements_every_second(*seconds: int) -> list[dict]:
    return [{"ts": START + pd.Timedelta(seconds=s), "x": s} for s in seconds]


def _script(duration) -> TestStream:
    return (TestStream().add_elements(_elements_every_second(1)).advance_processing_time(duration(5))
            .add_elements(_elements_every_second(2)).advance_processing_time(duration(5))
            .advance_watermark_to(START + pd.Timedelta(minutes=1)).add_elements(_elements_every_second(3))
            .advance_processing_time(duration(10)))


@pytest.mark.parametrize("trigger", [
    lambda d: AtWatermark().with_early_firings_every(d(5)).with_late_firings_every(d(10)),
    lambda d: AfterWatermark(early=AfterProcessingTime(d(5)), late=AfterProcessingTime(d(10))),
])
def test_a_pendulum_duration_works_wherever_a_timedelta_does(trigger):
    def panes(duration):
        return (windowed(_script(duration), time="ts").fixed(duration(60)).allowed_lateness(duration(600))
                .watermark(duration(3600)).trigger(trigger(duration)).accumulating().aggregate(Sum("x")))

    with_timedelta = panes(lambda s: dt.timedelta(seconds=s))
    with_pendulum = panes(lambda s: pendulum.duration(seconds=s))
    pd.testing.assert_frame_equal(with_pendulum, with_timedelta)
    assert with_pendulum[["value", "timing", "step"]].values.tolist() == [
        [1, "EARLY", 1], [3, "EARLY", 3], [3, "ON_TIME", 4], [6, "LATE", 6]]


def test_processing_time_is_the_scripts_not_the_wall_clocks():
    # Between steps real time passes, far more than a microsecond: a clock read would fire EARLY panes.
    stream = TestStream()
    for second in range(5):
        stream = stream.add_elements(_elements_every_second(second))
    stream = stream.advance_processing_time("1 microsecond").advance_watermark_to_infinity()
    panes = (windowed(stream, time="ts").fixed("1 minute").trigger(Repeatedly(AfterProcessingTime("1 microsecond")))
             .aggregate(Sum("x")))
    # ... and at end of input the window's ON_TIME pane, empty: Beam promises one (OnTimeBehavior.FIRE_ALWAYS).
    assert panes[["value", "timing", "step"]].values.tolist() == [[10, "EARLY", 5], [0, "ON_TIME", 6]]


class Product(Accumulation[int, int, int]):
    """A user's accumulation: only the interface api.md shows."""

    def __init__(self, column: str):
        self.column = column

    def default_accumulated_value(self) -> int:
        return 1

    def accumulate(self, accumulated: int, value: int) -> int:
        return accumulated * value

    def merge(self, accumulated1: int, accumulated2: int) -> int:
        return accumulated1 * accumulated2

    def get_output(self, accumulated: int) -> int:
        return accumulated


def test_user_and_collection_accumulations_fold_merge_and_retract():
    # Step 1's element merges the sessions [1, 11) and [12, 23) into [1, 23): every accumulator merges.
    stream = (TestStream().add_elements([{"ts": 1, "x": 3}, {"ts": 12, "x": 5}, {"ts": 13, "x": 2}])
              .add_elements([{"ts": 6, "x": 4}]).advance_watermark_to_infinity())
    panes = (windowed(stream, time="ts").sessions(10).trigger(AtWatermark().with_early_firings_every(1))
             .accumulating_and_retracting()
             .aggregate(product=Product("x"), top=TopN("x", 2), bottom=BottomN("x", n=2),
                        largest=Reduce("x", max)))
    merged = panes[(panes["step"] == 1) & ~panes["is_retraction"]]
    assert merged[["window_start", "window_end", "product", "top", "bottom", "largest", "pane_index"]].values.tolist() == [
        [1, 23, 120, [5, 4], [2, 3], 5, 0]]
    retracted = panes[(panes["step"] == 1) & panes["is_retraction"]]
    assert retracted[["window_start", "product", "top", "bottom", "largest"]].values.tolist() == [
        [1, 3, [3], [3], 3], [12, 10, [5, 2], [2, 5], 5]]
