"""Statements of ../shared/api.md checked as a user calls them, where no other test checks them."""

from __future__ import annotations

import datetime as dt
import math
import re
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pandas as pd
import pendulum
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulations import Accumulation, BottomN, Count, Fold, Max, Mean, Min, Reduce, Sum, ToList, TopN, ToSet
from triggers import AfterCount, AfterProcessingTime, AfterWatermark, AtWatermark, OrFinally, Repeatedly
from windowing import TestStream, windowed
from windowing.errors import WindowingConfigError


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


@pytest.mark.parametrize("unit, start, end", [
    ("us", "1677-09-21 00:12:43.145225", "2262-04-11 23:47:16.854775"),
    ("ms", "1677-09-21 00:12:43.146", "2262-04-11 23:47:16.854"),
    ("s", "1677-09-21 00:12:44", "2262-04-11 23:47:16"),
])
def test_the_global_window_of_a_coarser_timestamp_column_spans_the_time_axis_rounded_inward(unit, start, end):
    # The axis's ends (pd.Timestamp.min and max) in the column's unit: rounding the start down put it before
    # pd.Timestamp.min and a microsecond before the Spark runner's; the unit's own extremes, years -290308 (us)
    # and beyond, no Spark timestamp or Python datetime holds.
    df = pd.DataFrame({"ts": pd.Series([pd.Timestamp("2024-01-01")]).astype(f"datetime64[{unit}]"), "x": [1]})
    panes = windowed(df, time="ts").global_window().aggregate(Sum("x"))
    assert panes["window_start"].dtype == panes["window_end"].dtype == df["ts"].dtype
    assert panes[["window_start", "window_end"]].values.tolist() == [[pd.Timestamp(start), pd.Timestamp(end)]]


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


@pytest.mark.parametrize("calendar", [pendulum.duration(months=1), pendulum.duration(years=1, days=2)])
def test_a_pendulum_duration_of_months_or_years_is_refused_and_an_interval_of_them_taken(calendar):
    # pendulum counts a month as 30 days: fixed "monthly" windows would silently be 30-day ones.
    frame = pd.DataFrame({"ts": [START], "x": [1]})
    with pytest.raises(WindowingConfigError, match=r"fixed\(size\)=.* has years or months, which have no fixed "
                                                   r"length \(pendulum counts a month as 30 days"):
        windowed(frame, time="ts").fixed(calendar)
    march = pendulum.datetime(2024, 3, 1) - pendulum.datetime(2024, 2, 1)  # an Interval: exactly 29 days
    assert march.months == 1
    panes = windowed(frame, time="ts").fixed(march).aggregate(Sum("x"))
    assert (panes["window_end"] - panes["window_start"]).tolist() == [pd.Timedelta(days=29)]


@pytest.mark.parametrize("text, days", [("1 week", 7), ("2 weeks", 14), ("1 Week 2 days", 9), ("1.5 weeks", 10.5)])
def test_weeks_are_taken_in_words_as_spark_takes_them(text, days):
    # window(ts, "1 week") runs on Spark; pandas reads only "1 W", so "1 week" was refused as no duration.
    frame = pd.DataFrame({"ts": [START], "x": [1]})
    panes = windowed(frame, time="ts").fixed(text).aggregate(Sum("x"))
    assert (panes["window_end"] - panes["window_start"]).tolist() == [pd.Timedelta(days=days)]


def test_a_word_that_only_begins_with_week_is_no_duration():
    with pytest.raises(WindowingConfigError, match=r"fixed\(size\)='1 weekly' is not a duration"):
        windowed(pd.DataFrame({"ts": [START], "x": [1]}), time="ts").fixed("1 weekly")


NANOSECONDS = pd.DataFrame({"ts": pd.to_datetime([0, 1400, 1600, 2900], unit="ns"), "x": [1, 2, 3, 4]})


@pytest.mark.parametrize("size", ["1500ns", pd.Timedelta("1500ns"), np.timedelta64(1500, "ns")], ids=repr)
def test_a_duration_keeps_its_nanoseconds_on_a_nanosecond_timestamp_column(size):
    # A datetime.timedelta held it: 1500 ns were rounded to 2 microseconds.
    panes = windowed(NANOSECONDS, time="ts").fixed(size).aggregate(ToList("x"))
    assert panes[["window_start", "window_end", "value"]].values.tolist() == [
        [pd.Timestamp(0), pd.Timestamp(1500), [1, 2]], [pd.Timestamp(1500), pd.Timestamp(3000), [3, 4]]]


@pytest.mark.parametrize("gap", ["1 ns", pd.Timedelta(1, "ns")], ids=repr)
def test_a_nanosecond_is_a_duration(gap):
    # It was rounded to zero and refused as "must be positive".
    panes = windowed(NANOSECONDS, time="ts").sessions(gap).trigger(AfterProcessingTime(gap)).aggregate(Count())
    assert (panes["window_end"] - panes["window_start"]).tolist() == [pd.Timedelta(1, "ns")] * 4


def test_a_duration_on_a_time_unit_column_is_in_whole_microseconds_as_beam_keeps_time():
    micros = pd.DataFrame({"ts": [0.0, 1.4e-6, 1.6e-6, 2.9e-6], "x": [1, 2, 3, 4]})
    panes = windowed(micros, time="ts", time_unit="s").fixed("1500ns").allowed_lateness("0s").aggregate(ToList("x"))
    assert panes[["window_end", "value"]].values.tolist() == [[pd.Timestamp(2000), [1, 2]], [pd.Timestamp(4000), [3, 4]]]
    with pytest.raises(WindowingConfigError, match=r"fixed\(size\)='1 ns' is less than a microsecond, the precision of "
                                                   r"time column 'ts' read with time_unit='s'"):
        windowed(micros, time="ts", time_unit="s").fixed("1 ns").aggregate(Count())


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


# ---- an empty input, late data, epoch numbers ------------------------------------------------

EVENTS = pd.DataFrame({"user": ["a", "b", "a"], "ts": [1, 2, 12], "amount": [5, 7, 1], "price": [1.5, 2.5, 0.5],
                       "name": ["x", "y", "z"], "when": pd.to_datetime([1, 2, 3], unit="s")})
EVERY_KIND = dict(total=Sum("amount"), n=Count(), mean=Mean("price"), low=Min("amount"), first=Min("name"),
                  last=Max("when"), all=ToList("amount"), names=ToSet("name"), product=Product("amount"),
                  halves=Fold("price", 0, lambda a, v: a + v / 2, lambda a, b: a + b))


@pytest.mark.parametrize("key", ["user", "amount", ["user", "price"], None])
@pytest.mark.parametrize("as_stream", [False, True])
def test_an_empty_input_has_the_output_types_of_a_non_empty_one(key, as_stream):
    # Before: windowed(df.iloc[:0], ...) gave the key and every value column as float64.
    def run(frame):
        source = TestStream().add_elements(frame).advance_watermark_to(5) if as_stream else frame
        return windowed(source, time="ts", key=key).fixed(10).run(**EVERY_KIND)

    full, empty = run(EVENTS), run(EVENTS.iloc[:0])
    assert len(full.panes) and not len(empty.panes)
    assert empty.panes.dtypes.to_dict() == full.panes.dtypes.to_dict()


@pytest.mark.parametrize("empty", [pd.DataFrame({"user": [], "ts": [], "amount": []}), pd.DataFrame({"ts": []}),
                                   pd.DataFrame({"user": pd.Series([], dtype=object), "ts": pd.Series([], dtype=object)})],
                         ids=["float64 columns", "no key column", "object columns"])
@pytest.mark.parametrize("times", [[1, 2], pd.to_datetime(["2024-01-01 00:00:01", "2024-01-01 00:00:02"])],
                         ids=["numbers", "timestamps"])
@pytest.mark.parametrize("keys", [[2**53, 2**53 + 1], ["a", "b"]], ids=["big ints", "strings"])
def test_a_stream_whose_first_step_has_no_rows_gives_the_panes_of_one_without_it(empty, times, keys):
    # Before: the run was planned by the first step's dtypes, rows or none: pandas' float64 of an empty column made
    # keys 2**53 and 2**53 + 1 one key and their sum one short, string keys failed to convert to float (naming no
    # column), timestamps were refused as a numeric time column, and an empty step without the key column was refused.
    rows = pd.DataFrame({"user": keys, "ts": times, "amount": [2**53 + 1, 1]})
    size = 10 if isinstance(times, list) else "10 seconds"

    def panes(stream):
        return windowed(stream.add_elements(rows).advance_watermark_to_infinity(), time="ts", key="user").fixed(size) \
            .aggregate(Sum("amount"))

    with_empty, without = panes(TestStream().add_elements(empty)), panes(TestStream())
    pd.testing.assert_frame_equal(with_empty.drop(columns="step"), without.drop(columns="step"))
    assert with_empty["value"].tolist() == [2**53 + 1, 1]


def test_late_data_has_the_inputs_columns_also_when_nothing_was_dropped():
    # Before: a bounded run that dropped nothing had only window_start, window_end and reason.
    late = (TestStream().add_elements(EVENTS).advance_watermark_to(30)
            .add_elements(EVENTS.assign(ts=[3, 4, 5])))  # behind the watermark, no allowed lateness: dropped
    dropped = windowed(late, time="ts", key="user").fixed(10).run(Sum("amount")).late_data
    assert len(dropped) == 3
    for source in (EVENTS, EVENTS.iloc[:0], TestStream().add_elements(EVENTS).advance_watermark_to_infinity()):
        nothing = windowed(source, time="ts", key="user").fixed(10).run(Sum("amount")).late_data
        assert len(nothing) == 0
        expected = dropped if isinstance(source, TestStream) else dropped.drop(columns="step")
        assert nothing.dtypes.to_dict() == expected.dtypes.to_dict()
        assert list(nothing.columns) == list(EVENTS.columns) + ["window_start", "window_end", "reason"] + \
            (["step"] if isinstance(source, TestStream) else [])


def test_a_windowed_result_unpacks_into_panes_and_late_data():
    late = TestStream().add_elements(EVENTS).advance_watermark_to(30).add_elements(EVENTS.assign(ts=[3, 4, 5]))
    result = windowed(late, time="ts", key="user").fixed(10).run(Sum("amount"))
    panes, late_data = result  # api.md: WindowedResult(panes, late_data)
    assert panes is result.panes and late_data is result.late_data and len(late_data) == 3
    # and indexes as that pair does (it was a dataclass that only unpacked: result[0] raised TypeError)
    assert len(result) == 2 and result[0] is panes and result[1] is late_data and result[-1] is late_data
    assert result.dropped_count == 3


def test_the_triggers_take_their_sub_triggers_by_the_names_api_md_gives_them():
    # api.md: Repeatedly(t), OrFinally(t, until); `trigger=` (the field's name) still works.
    assert Repeatedly(t=AfterCount(2)) == Repeatedly(AfterCount(2)) == Repeatedly(trigger=AfterCount(2))
    assert OrFinally(t=AfterCount(1), until=AfterCount(3)) == OrFinally(AfterCount(1), AfterCount(3)) == \
        OrFinally(trigger=AfterCount(1), until=AfterCount(3))


def test_the_spark_helpers_import_from_windowing_without_pyspark():
    # api.md: `windowing` holds the Spark runner; its helpers load pyspark only when a Spark input runs.
    code = "import sys, windowing; from windowing import SparkRun, spark_typed; print('pyspark' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "False"


@pytest.mark.parametrize("column", ["reason", "window_start", "window_end", "step"])
def test_run_refuses_an_input_column_that_late_data_would_overwrite_and_aggregate_takes_it(column):
    # Before: a key named 'reason' came back in late_data as the runner's reason ('beyond allowed lateness'), and
    # a bounded input's own 'step' column was dropped from late_data: the dropped rows lost those values.
    events = EVENTS.assign(**{column: ["x", "y", "z"]})
    late = (TestStream().add_elements(events).advance_watermark_to(30).add_elements(events.assign(ts=[3, 4, 5])))
    with pytest.raises(WindowingConfigError, match=rf"run\(\): the input's column '{column}' clashes with the column "
                                                   rf"'{column}' that late_data adds"):
        windowed(late, time="ts", key="user").fixed(10).run(Sum("amount"))
    panes = windowed(late, time="ts", key="user").fixed(10).aggregate(Sum("amount"))
    assert sorted(panes["value"]) == [1, 5, 7]  # the late elements dropped
    bounded = windowed(events, time="ts", key="user").fixed(10)
    if column == "step":  # a bounded run's late_data has no step of its own: the input's is kept
        assert list(bounded.run(Sum("amount")).late_data.columns) == list(events.columns) + ["window_start", "window_end", "reason"]
    else:
        with pytest.raises(WindowingConfigError, match=f"input's column '{column}'"):
            bounded.run(Sum("amount"))


def test_a_time_function_returning_a_series_is_matched_to_the_rows_by_its_index():
    # Before: a Series in another order was taken by position, so x=3 at 15 s fell into [0, 10) with x=1.
    frame = pd.DataFrame({"ms": [15000, 1000, 2000], "x": [3, 1, 2]}, index=[2, 0, 1])
    panes = windowed(frame, time=lambda d: d.ms.sort_index() // 1000).fixed(10).aggregate(ToList("x"))
    assert panes[["window_start", "value"]].values.tolist() == [[0, [1, 2]], [10, [3]]]
    doubled = frame.set_axis([0, 0, 1])
    with pytest.raises(WindowingConfigError, match="returned a Series whose index differs from the input's"):
        windowed(doubled, time=lambda d: d.ms.reset_index(drop=True) // 1000).fixed(10).aggregate(ToList("x"))


@pytest.mark.parametrize("time, shape", [(lambda d: 5, r"int of shape \(\)"), (lambda d: [1, 2], r"list of shape \(2,\)"),
                                         (lambda d: np.ones((3, 2)), r"ndarray of shape \(3, 2\)")])
def test_a_time_function_must_return_one_time_per_row(time, shape):
    # A scalar was repeated over every row (every element at t=5, silently); a wrong length failed in pandas.
    frame = pd.DataFrame({"x": [1, 2, 3]})
    with pytest.raises(WindowingConfigError, match=rf"windowed\(time=.*\) returned {shape} for 3 rows; return one time per row"):
        windowed(frame, time=time).fixed(10).aggregate(Sum("x"))


@pytest.mark.parametrize("name", ["start", "end", "_k0", "_first", "_out1"])
def test_an_aggregation_named_like_a_column_of_the_engine_s_own_is_an_ordinary_name(name):
    # Before: the engine's pane frame held outputs under the users' names beside its own columns, so
    # aggregate(start=...) overwrote window_start and aggregate(_k0=...) the key.
    panes = windowed(EVENTS, time="ts", key="user").fixed(10).aggregate(**{name: Sum("amount"), "n": Count()})
    assert panes[["user", "window_start", "window_end", name, "n"]].values.tolist() == [
        ["a", 0, 10, 5, 1], ["a", 10, 20, 1, 1], ["b", 0, 10, 7, 1]]


SECONDS = pd.DataFrame({"ts": np.array(["2020-01-01T00:00:00", "2020-01-01T00:00:01"], dtype="datetime64[s]"),
                        "x": [1, 2]})


@pytest.mark.parametrize("windows, unit, ends", [
    (lambda p: p.sessions("500ms"), "ms", ["00:00:00.500", "00:00:01.500"]),
    (lambda p: p.fixed("800ms"), "ms", ["00:00:00.800", "00:00:01.600"]),
    (lambda p: p.fixed("1 minute"), "s", ["00:01:00"]),
])
def test_window_bounds_of_a_coarse_timestamp_column_come_in_a_unit_that_holds_them(windows, unit, ends):
    # Before: bounds came back in the column's datetime64[s], truncated: each session printed as [t, t).
    panes = windows(windowed(SECONDS, time="ts")).aggregate(ToList("x"))
    assert str(panes["window_end"].dtype) == f"datetime64[{unit}]"
    assert panes["window_end"].tolist() == [pd.Timestamp(f"2020-01-01 {end}") for end in ends]
    assert (panes["window_start"] < panes["window_end"]).all()


@pytest.mark.parametrize("dtype", ["int8", "uint16", "Int8"])
def test_window_bounds_beyond_a_narrow_integer_column_come_back_as_64_bit_integers(dtype):
    # Before: clipped to the column's type, so an int8 session [1, 215) printed as [1, 127) and the sliding
    # windows before 0 of a uint16 column all started at 0.
    frame = pd.DataFrame({"ts": pd.array([1, 15], dtype=dtype), "x": [1, 2]})
    sessions = windowed(frame, time="ts").sessions(200).aggregate(ToList("x"))
    assert sessions[["window_start", "window_end"]].values.tolist() == [[1, 215]]
    sliding = windowed(frame, time="ts").sliding(20, every=5).aggregate(ToList("x"))
    assert sorted(sliding["window_start"]) == [-15, -10, -5, 0, 5, 10, 15]
    widened = "Int64" if dtype == "Int8" else "int64"
    for panes, fits in ((sessions, dtype == "uint16"), (sliding, dtype != "uint16")):  # 215 > 127; -15 < 0
        assert {str(panes[c].dtype) for c in ("window_start", "window_end")} == {dtype if fits else widened}
    fits = windowed(frame, time="ts").fixed(10).aggregate(ToList("x"))
    assert str(fits["window_start"].dtype) == dtype and fits["window_end"].tolist() == [10, 20]
    whole = windowed(frame, time="ts").global_window().aggregate(ToList("x"))  # the type's extremes, as before
    info = np.iinfo(dtype.lower())
    assert whole[["window_start", "window_end"]].values.tolist() == [[info.min, info.max]]


@pytest.mark.parametrize("dtype", ["float32", "Float32", "float16"])
def test_window_bounds_a_narrow_float_column_cannot_hold_come_back_as_float64(dtype):
    # Before: cast back into the column's float type, rounded: a float32 column's minute windows [1699999980, 1700000040)
    # and [1700000100, 1700000160) printed as [1700000000, 1700000000) and [1700000128, 1700000128), empty windows.
    times, size = ([2000, 2048], 7) if dtype == "float16" else ([1700000000, 1700000128], 60)
    frame = pd.DataFrame({"ts": pd.array(times, dtype=dtype), "x": [1, 2]})
    panes = windowed(frame, time="ts").fixed(size).aggregate(ToList("x"))
    starts = [t - t % size for t in times]
    assert panes[["window_start", "window_end"]].values.tolist() == [[s, s + size] for s in starts]
    assert {str(panes[c].dtype) for c in ("window_start", "window_end")} == {"Float64" if dtype == "Float32" else "float64"}
    fits = windowed(frame, time="ts").fixed(64 if dtype == "float16" else 128).aggregate(ToList("x"))  # bounds it holds keep it
    assert {str(fits[c].dtype) for c in ("window_start", "window_end")} == {dtype}


@pytest.mark.parametrize("times, size, bound, nearest", [([2.0**60], 10, 2**60 - 6, "1.152921504606847e+18"),
                                                         ([2.0**53 + 2], 3, 2**53 + 1, "9007199254740992.0")])
def test_a_window_bound_no_float64_holds_is_refused_naming_it(times, size, bound, nearest):
    # Before: rounded to a neighbouring float without a word: a window [2**60 - 6, 2**60 + 4) printed as [2**60, 2**60),
    # one starting at 2**53 + 1 as starting at 2**53.
    frame = pd.DataFrame({"ts": times, "x": [1]})
    with pytest.raises(WindowingConfigError, match=re.escape(f"a window bound, {bound}, is no float64 (the nearest is {nearest}), so "
                                                             "float time column 'ts' cannot give it exactly; cast the column to int64")):
        windowed(frame, time="ts").fixed(size).aggregate(ToList("x"))


MICROS_2024 = 1_704_067_200_000_000


@settings(max_examples=200, deadline=None)
@given(micros=st.lists(st.integers(-(2**51), 2**51), min_size=1, max_size=20, unique=True),
       unit=st.sampled_from(["s", "ms", "us", "ns"]), floats=st.booleans())
def test_epoch_numbers_with_a_time_unit_are_read_as_the_nearest_microsecond(micros, unit, floats):
    # A float carries binary error (1.001 s is 1000999.9999999999 us); read to the nearest
    # microsecond, every instant within 2**51 us of the epoch comes back exactly.
    per_unit = {"s": 10**6, "ms": 10**3, "us": 1, "ns": 10**-3}[unit]
    exact = [m / per_unit if floats or unit == "s" or unit == "ms" else m * 1000 if unit == "ns" else m for m in micros]
    values = np.asarray(exact, dtype=np.float64 if floats or unit in ("s", "ms") else np.int64)
    frame = pd.DataFrame({"ts": values, "id": range(len(values))})
    panes = windowed(frame, time="ts", time_unit=unit).fixed("1 microsecond").aggregate(ToList("id"))
    assert panes["window_start"].dtype == "datetime64[us]"
    got = {int(start.value // 1000): ids[0] for start, ids in zip(panes["window_start"], panes["value"])}
    assert got == {m: i for i, m in enumerate(micros)}


def _nearest_micro_of(value: float, unit: str) -> int:
    """The exact value a float holds, in microseconds, rounded half up: the reference."""
    exact = Fraction(value) * {"s": 10**6, "ms": 10**3, "us": 1, "ns": Fraction(1, 1000)}[unit]
    return math.floor(exact + Fraction(1, 2))


# Floats whose product with their unit float arithmetic rounds onto half a microsecond, among others:
# time.time() seconds hold steps of 2**-22 s (0.24 us), so about one in eight lands there.
_NEAR_HALF = st.builds(lambda second, steps: second + steps * 2.0**-22,
                       st.integers(0, 4_000_000_000), st.integers(0, 2**22 - 1))
# The float nearest a half microsecond written in decimal (1.5997815 s): near the epoch the product's rounding
# crossed the half in half of them until this release (rounded 1599781.4999... us up).
_HALF_LITERAL = st.builds(lambda micros, per_second: (micros + 0.5) / per_second, st.integers(0, 2**40), st.sampled_from([1e6, 1e3]))


@settings(max_examples=300, deadline=None)
@given(unit=st.sampled_from(["s", "ms", "us", "ns"]), data=st.data())
def test_epoch_floats_are_read_as_the_microsecond_nearest_the_number_they_hold(unit, data):
    per_second = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]
    anywhere = st.floats(0.0, 9e9 * per_second)  # the axis ends about 9.2e9 s from the epoch
    near = st.one_of(_NEAR_HALF, _HALF_LITERAL.map(lambda seconds: seconds * per_second), st.floats(0.0, 16 * per_second))
    signed = st.tuples(st.one_of(near, anywhere), st.booleans()).map(lambda pair: -pair[0] if pair[1] else pair[0])
    values = data.draw(st.lists(signed, min_size=1, max_size=20, unique=True))
    frame = pd.DataFrame({"ts": np.asarray(values, dtype=np.float64), "id": range(len(values))})
    panes = windowed(frame, time="ts", time_unit=unit).fixed("1 microsecond").aggregate(ToList("id"))
    got = {i: int(start.value // 1000) for start, ids in zip(panes["window_start"], panes["value"]) for i in ids}
    assert got == {i: _nearest_micro_of(v, unit) for i, v in enumerate(values)}


@pytest.mark.parametrize("unit, values, expected_micros", [
    # 1700000001.000000477 s and ...0.715 s: their products with 1e6 are rounded to ...0.5 and ...0.75
    ("s", [1700000001.0000004, 1700000001.0000007], [1_700_000_001_000_000, 1_700_000_001_000_001]),
    ("ns", [1499, 1500, -1500, -1501], [1, 2, -1, -2]),  # half a microsecond rounds up
    ("us", [2.5, -2.5, 2.4999], [3, -2, 2]),
    ("s", [1.001, 1700000000.123456], [1_001_000, 1_700_000_000_123_456]),
    # nullable integers stay exact: as float64, 1_700_000_000_123_456_500 ns would be 128 ns off
    ("ns", pd.array([1_700_000_000_123_456_500, 1_700_000_000_123_456_499], dtype="Int64"),
     [1_700_000_000_123_457, 1_700_000_000_123_456]),
])
def test_epoch_numbers_round_half_a_microsecond_up(unit, values, expected_micros):
    frame = pd.DataFrame({"ts": values, "id": range(len(values))})
    panes = windowed(frame, time="ts", time_unit=unit).fixed("1 microsecond").aggregate(ToList("id"))
    got = {ids[0]: int(start.value // 1000) for start, ids in zip(panes["window_start"], panes["value"])}
    assert [got[i] for i in range(len(values))] == expected_micros


def test_time_dot_time_seconds_window_like_the_timestamps_they_stand_for():
    seconds = MICROS_2024 / 1e6 + np.array([0.25, 9.999, 12.0, 31.5])
    frame = pd.DataFrame({"user": ["a", "a", "b", "a"], "ts": seconds, "amount": [5, 7, 1, 2]})
    # datetime64[us], as bounds of epoch instants are: pandas 2 reads numbers with a unit as nanoseconds
    stamps = frame.assign(ts=pd.to_datetime(np.floor(seconds * 1e6 + 0.5).astype(np.int64), unit="us").as_unit("us"))

    def build(source, **unit):
        return (windowed(source, time="ts", key="user", **unit).fixed("10 seconds").allowed_lateness("5 seconds")
                .trigger(AtWatermark().with_late_firings_every(1)).run(total=Sum("amount")))

    expected = build(stamps).panes
    pd.testing.assert_frame_equal(build(frame, time_unit="s").panes, expected)
    # A TestStream's watermark may be given in the column's unit, or as a timestamp.
    late = frame.iloc[[0]].assign(amount=100)
    for mark in (MICROS_2024 / 1e6 + 20, pd.Timestamp(MICROS_2024 + 20_000_000, unit="us")):
        result = build(TestStream().add_elements(frame.iloc[:3]).advance_watermark_to(mark).add_elements(late), time_unit="s")
        assert result.late_data[["user", "ts", "amount", "reason"]].values.tolist() == [
            ["a", seconds[0], 100, "beyond allowed lateness"]]
    assert repr(windowed(frame, time="ts", time_unit="s")) == "windowed(<DataFrame>, time='ts', key=None, time_unit='s')"


@pytest.mark.parametrize("dtype", ["uint64", "UInt64", "uint32", "int64"])
def test_the_global_window_of_an_integer_column_spans_its_types_extremes(dtype):
    # api.md: "global window: minimum and maximum of that type"; a uint64 column's ended at 2**63 - 1, the axis's end.
    frame = pd.DataFrame({"ts": pd.array([1, 5], dtype=dtype), "x": [1, 2]})
    whole = windowed(frame, time="ts").global_window().aggregate(ToList("x"))
    info = np.iinfo(dtype.lower())
    assert whole[["window_start", "window_end"]].values.tolist() == [[info.min, info.max]]
    assert str(whole["window_end"].dtype) == dtype


@pytest.mark.parametrize("keys", [[-0.0, 0.0], [0.0, -0.0], [-0.0]], ids=str)
def test_a_float_key_of_minus_zero_is_the_key_zero_as_spark_groups_it(keys):
    # Before: the pane's key kept the sign of the first element seen (-0.0 where Spark's groupBy gives 0.0).
    frame = pd.DataFrame({"k": np.array(keys, dtype=np.float32), "t": range(len(keys)), "x": 1})
    panes = windowed(frame, time="t", key="k").fixed(10).aggregate(Count())
    assert [math.copysign(1.0, k) for k in panes["k"]] == [1.0] and panes["value"].tolist() == [len(keys)]
    assert panes["k"].dtype == np.float32


@pytest.mark.parametrize("keys", [[-0.0, 0.0], [0.0, -0.0], [-0.0, "a"], [np.float32(-0.0), 0.0]], ids=str)
def test_a_float_key_of_minus_zero_in_an_object_column_is_the_key_zero(keys):
    # Before: an object column's -0.0 kept its sign in the pane's key when seen first, where a float column's did not.
    frame = pd.DataFrame({"k": pd.Series(keys, dtype=object), "t": range(len(keys)), "x": 1})
    panes = windowed(frame, time="t", key="k").fixed(10).aggregate(Count())
    zeros = [k for k in panes["k"] if not isinstance(k, str)]
    assert [math.copysign(1.0, k) for k in zeros] == [1.0] and panes["value"].sum() == len(keys)
    assert frame["k"].map(lambda k: isinstance(k, str) or math.copysign(1.0, k)).tolist().count(-1.0) == 1  # untouched


def test_a_float_key_of_minus_zero_beside_keys_of_another_type_in_a_test_stream_is_the_key_zero():
    # Before: a TestStream whose steps' keys differ in type holds them as objects, and -0.0 kept its sign there.
    stream = (TestStream().add_elements([{"k": -0.0, "ts": 1, "x": 1}, {"k": 0.0, "ts": 2, "x": 1}])
              .add_elements([{"k": "a", "ts": 3, "x": 1}]))
    panes = windowed(stream, time="ts", key="k").fixed(10).aggregate(Count())
    assert [(k if isinstance(k, str) else math.copysign(1.0, k), n) for k, n in zip(panes["k"], panes["value"])] == [
        (1.0, 2), ("a", 1)]


def test_an_accumulation_of_your_own_that_names_no_column_fails_saying_to_set_self_column():
    # Before: Python's "unsupported operand type(s) for +: 'int' and 'NoneType'" alone: api.md lists the five methods
    # of an accumulation, not the attribute that names its column, and such a class receives None per element.
    class MySum(Accumulation):
        def __init__(self, col):
            self.col = col

        def default_accumulated_value(self):
            return 0

        def accumulate(self, accumulated, value):
            return accumulated + value

        def merge(self, a, b):
            return a + b

        def get_output(self, accumulated):
            return accumulated

    frame = pd.DataFrame({"ts": [1, 2], "amount": [1, 2]})
    for source in (frame, TestStream().add_elements(frame)):
        with pytest.raises(TypeError, match=r"aggregate\(value=MySum\(\)\): unsupported operand .*; it reads no column, so "
                                            r"each value it takes is None: .* names the column it reads in self.column"):
            windowed(source, time="ts").fixed(10).aggregate(MySum("amount"))


def test_from_storage_import_star_gives_the_three_components():
    # Before: storage's lazy attributes were in no __all__, so the star import gave none of them.
    names: dict[str, object] = {}
    exec("from storage import *", names)
    assert {"FileSink", "FileSplitter", "KVStore"} <= set(names)
    import storage

    assert {"FileSink", "FileSplitter", "KVStore"} <= set(dir(storage))  # dir() listed only Any and kv


def test_arrow_backed_timestamps_and_durations_are_read_as_pandas_own():
    # Before: a time column of timestamp[us][pyarrow] (dtype_backend="pyarrow") was refused as holding neither
    # timestamps nor numbers, a Min of one failed with NumPy's "Cannot interpret 'timestamp[us][pyarrow]' as a data
    # type", a Sum of Arrow durations was refused as no timedeltas.
    pa = pytest.importorskip("pyarrow")
    times = pd.to_datetime([1, 2, 12], unit="s")
    arrow = pd.DataFrame({"ts": pd.array(times, dtype=pd.ArrowDtype(pa.timestamp("us", tz="UTC"))),
                          "k": pd.array(times.floor("10s"), dtype=pd.ArrowDtype(pa.timestamp("ms"))),
                          "d": pd.array(pd.to_timedelta([1, 2, 4], unit="s"), dtype=pd.ArrowDtype(pa.duration("us")))})
    native = pd.DataFrame({"ts": times.as_unit("us").tz_localize("UTC"), "k": times.floor("10s").as_unit("ms"),
                           "d": pd.to_timedelta([1, 2, 4], unit="s").as_unit("us")})
    for source in (arrow, TestStream().add_elements(arrow.iloc[:2]).add_elements(arrow.iloc[2:])):
        expected_source = native if isinstance(source, pd.DataFrame) else \
            TestStream().add_elements(native.iloc[:2]).add_elements(native.iloc[2:])
        got = windowed(source, time="ts", key="k").fixed("10 seconds").aggregate(first=Min("k"), total=Sum("d"))
        expected = windowed(expected_source, time="ts", key="k").fixed("10 seconds").aggregate(first=Min("k"), total=Sum("d"))
        pd.testing.assert_frame_equal(got, expected)
        assert got["total"].tolist() == [pd.Timedelta(3, "s"), pd.Timedelta(4, "s")]


def test_dropped_rows_of_an_input_with_a_column_name_twice_are_given_as_they_were():
    # Before: a TestStream step that dropped a row failed with "'DataFrame' object has no attribute 'dtype'" when
    # its input had a column name twice, one the pipeline does not read (which it allows), in aggregate() too.
    first = pd.DataFrame([[1, 5, 0, 1]], columns=["ts", "v", "x", "x"])
    second = pd.DataFrame([[2, 6, 0.5, 1]], columns=["ts", "v", "x", "x"])
    stream = TestStream().advance_watermark_to(20).add_elements(first).add_elements(second)
    run = windowed(stream, time="ts").fixed(10).run(Sum("v"))
    assert run.panes.empty
    assert run.late_data.iloc[:, :4].values.tolist() == [[1, 5, 0, 1], [2, 6, 0.5, 1]]
    assert windowed(stream, time="ts").fixed(10).aggregate(Sum("v")).empty


@pytest.mark.parametrize("mark, what", [("2024-11-03 01:30", "ambiguous"), ("2024-03-10 02:30", "no time")])
def test_a_watermark_without_a_zone_that_the_columns_zone_cannot_read_is_refused_naming_it(mark, what):
    # A watermark without a zone is a wall time in the time column's zone (05:00 here is 10:00 UTC); one the clocks
    # make ambiguous or skip failed with pandas' bare "Cannot infer dst time from 2024-11-03 01:30:00".
    frame = pd.DataFrame({"ts": pd.to_datetime(["2024-11-03 01:30"]).tz_localize("America/New_York", ambiguous=[True])})
    read = windowed(TestStream().add_elements(frame).advance_watermark_to(pd.Timestamp("2024-11-03 05:00")), time="ts")
    assert read.fixed("1 hour").aggregate(Count())["step"].tolist() == [1]  # fired by that watermark, past 06:30 UTC
    stream = TestStream().add_elements(frame).advance_watermark_to(pd.Timestamp(mark))
    with pytest.raises(WindowingConfigError, match=re.escape(
            f"advance_watermark_to(time)=Timestamp('{mark}:00') at action 1 is a wall time without a zone, read in the "
            f"zone of time column 'ts', America/New_York, where it is {what} (the clocks change there)")):
        windowed(stream, time="ts").fixed("1 hour").aggregate(Count())


def test_a_test_stream_without_elements_or_watermarks_is_planned_on_timestamps_where_its_durations_are():
    # Before: planned on numbers, so fixed("10 seconds") was refused as a duration on a numeric column 'ts', a
    # column the stream does not have; a timestamp watermark alone made it work.
    for stream in (TestStream(), TestStream().advance_processing_time("5 seconds")):
        panes = windowed(stream, time="ts").fixed("10 seconds").aggregate(Count())
        assert panes.empty and str(panes["window_start"].dtype).startswith("datetime64")
    assert str(windowed(TestStream(), time="ts").fixed(10).aggregate(Count())["window_start"].dtype) == "int64"


def test_a_time_function_whose_series_misses_rows_is_refused_saying_so():
    # Before: "time column '<time function>' has 1 missing value(s)", as if the input lacked times.
    frame = pd.DataFrame({"t": [1, 2, 3]})
    with pytest.raises(WindowingConfigError, match=r"returned a Series of 2 times whose index has no label for 1 of the "
                                                   r"input's 3 rows \(the first 2\); return one time per row"):
        windowed(frame, time=lambda f: f["t"].iloc[:2]).fixed(10).aggregate(Count())
    reordered = windowed(frame, time=lambda f: f["t"].sort_values(ascending=False)).fixed(10).aggregate(Count())
    assert reordered["value"].tolist() == [3]  # matched by label, as before


def test_binary_keys_window_as_any_other_key():
    # Before: on pandas 2 (pyspark 3.5's workers) every pipeline keyed by bytes failed with "Cannot use .str.contains
    # with values of inferred dtype 'bytes'", naming no column; pandas 3 ran it.
    frame = pd.DataFrame({"k": [b"a", b"a\x00", b"a", None, b""], "ts": [1, 2, 3, 4, 5], "v": [1, 2, 4, 8, 16]})
    panes = windowed(frame, time="ts", key="k").fixed(10).aggregate(Sum("v"))
    assert sorted(zip(panes["k"].tolist(), panes["value"].tolist()), key=repr) == [
        (None, 8), (b"", 16), (b"a", 5), (b"a\x00", 2)]


def test_a_float32_columns_bound_no_float64_holds_is_named_as_such():
    # A review found the first version named 16777223 (a bound float64 holds, float32 not) as no float64.
    frame = pd.DataFrame({"ts": np.array([16777220, 2.0**54], dtype=np.float32)})
    with pytest.raises(WindowingConfigError, match=r"a window bound, 18014398509481987, is no float64 \(the nearest is "
                                                   r"1.8014398509481988e\+16\)"):
        windowed(frame, time="ts").sessions(3).aggregate(Count())
