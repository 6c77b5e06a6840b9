"""Bad configuration raises a clear error naming the parameter and the value."""

from __future__ import annotations

import datetime as dt
import re

import numpy as np
import pandas as pd
import pytest

import triggers
from accumulations import BottomN, Count, InnerJoin, Max, Sum, ToList, TopN
from triggers import AfterCount, AfterEach, AfterProcessingTime, AtWatermark, Repeatedly
from windowing import TestStream, WindowingConfigError, windowed

DF = pd.DataFrame({"k": ["a"], "ts": [1], "x": [1]})
TS_DF = DF.assign(ts=pd.to_datetime(DF.ts, unit="s"))


@pytest.mark.parametrize("build, message", [
    (lambda: windowed(DF, time="ts").fixed("ten minutes"), r"fixed\(size\)='ten minutes' is not a duration"),
    (lambda: windowed(DF, time="ts").fixed(-5), r"fixed\(size\)=-5 must be positive"),
    (lambda: windowed(DF, time="ts").sessions(0), r"sessions\(gap\)=0 must be positive"),
    # The last window option won without a word.
    (lambda: windowed(DF, time="ts").fixed(10).sessions(5),
     r"\.sessions\(5\) after \.fixed\(10\): a pipeline has one window option; keep one of them"),
    (lambda: windowed(DF, time="ts").global_window().sliding(10, every=5), r"\.sliding\(10, every=5\) after \.global_window\(\)"),
    (lambda: windowed(DF, time="ts").sliding(10, every=0), r"sliding\(every\)=0 must be positive"),
    (lambda: windowed(DF, time="ts").allowed_lateness(-1), r"allowed_lateness\(lateness\)=-1 must not be negative"),
    (lambda: windowed(DF, time="ts").watermark("soon"), r"watermark\(delay\)='soon' is not a duration"),
    (lambda: windowed(DF, time="ts").trigger("at watermark"), r"trigger\(trigger='at watermark'\) is not a trigger"),
    (lambda: windowed(DF, time=3), r"windowed\(time=3\)"),
    (lambda: windowed(DF, time="ts", key=7), r"windowed\(key=7\)"),
    (lambda: AfterCount(0), r"AfterCount\(n\)=0 must be a positive integer"),
    (lambda: AfterProcessingTime("-1 second"), r"AfterProcessingTime\(delay\)='-1 second' must be positive"),
    (lambda: Repeatedly(5), r"Repeatedly\(trigger\)=5 is not a trigger"),
    (lambda: Repeatedly(), r"Repeatedly\(t=None, trigger=None\): give the sub-trigger once"),
    (lambda: AfterEach(), r"AfterEach\(\) needs at least one trigger"),
    (lambda: AtWatermark().with_early_firings_every(0), r"with_early_firings_every\(count\)=0 must be a positive integer"),
    (lambda: AtWatermark().with_late_firings_every("often"), r"with_late_firings_every\(duration\)='often' is not a duration"),
    (lambda: AtWatermark().with_late_firings_every(None), r"with_late_firings_every\(every=None\): give a count"),
    (lambda: AtWatermark().with_early_firings_every(None), r"with_early_firings_every\(every=None\): give a count"),
    # Before: the second call replaced the first without a word (the count's early panes went missing), where the
    # seed's operator fires by a count and by a duration side by side.
    (lambda: AtWatermark().with_early_firings_every(2).with_early_firings_every(5.0),
     r"with_early_firings_every\(\) was given already; give it once. For firings by a count and by processing time "
     r"together, use AfterWatermark\(early=Repeatedly\(AfterAny\(AfterCount\(n\), AfterProcessingTime\(duration\)\)\)\)"),
    (lambda: AtWatermark().with_late_firings_every(1).with_early_firings_every(3).with_late_firings_every("5 seconds"),
     r"\.with_late_firings_every\('5 seconds'\): with_late_firings_every\(\) was given already"),
    (lambda: Sum(""), r"Sum\(column=''\): column must be a non-empty column name"),
    (lambda: TopN("x", n=0), r"TopN\(n=0\): n must be a positive integer"),
    # Left out, a required column named the base class (`_Numeric.__init__()` for Sum, `TopN.__init__()` for BottomN).
    (lambda: Sum(), r"Sum\(\) needs the column it reads, e.g. Sum\('amount'\)"),
    (lambda: Max(), r"Max\(\) needs the column it reads"),
    (lambda: BottomN(), r"BottomN\(\) needs the column it reads"),
    (lambda: BottomN("x"), r"BottomN\(\) needs n, how many values to keep, e.g. BottomN\('x', 3\)"),
    (lambda: InnerJoin(), r"InnerJoin\(\) needs the column it reads"),
    (lambda: ToList(), r"ToList\(\) needs the column it reads"),
    (lambda: TestStream().advance_processing_time("-5 seconds"), r"advance_processing_time\(duration\)='-5 seconds' must be positive"),
    (lambda: TestStream().add_elements("a,1"), r"add_elements\(elements=str\): give a pandas DataFrame or a list of dicts"),
    (lambda: TestStream().add_elements([{"ts": 1}, 2]), r"add_elements\(elements=\[\.\.\.\]\): item 1 is 2 \(int\); a list "
                                                         r"holds one dict per element"),
    (lambda: TestStream().advance_watermark_to(None), r"advance_watermark_to\(time=None\): use advance_watermark_to_infinity\(\)"),
    (lambda: windowed(DF, time="ts", key="timing"), r"windowed\(key='timing'\): key column 'timing' clashes with the output column"),
    (lambda: windowed(DF, time="ts", key=["k", "window_start"]), r"key column 'window_start' clashes with the output column"),
    (lambda: windowed(DF, time="ts", key="step"), r"windowed\(key='step'\): key column 'step' clashes"),
    (lambda: windowed(DF, time="ts", key=["k", "k"]), r"windowed\(key=\['k', 'k'\]\) names column 'k' twice"),
    (lambda: windowed(DF, time="ts", time_unit="sec"), r"windowed\(time_unit='sec'\): give the unit of the epoch instants"),
])
def test_builder_refuses_bad_values(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize("build, param", [
    (lambda d: windowed(DF, time="ts").fixed(d), "fixed(size)"),
    (lambda d: windowed(DF, time="ts").allowed_lateness(d), "allowed_lateness(lateness)"),
    (lambda d: AfterProcessingTime(d), "AfterProcessingTime(delay)"),
    (lambda d: AtWatermark().with_early_firings_every(d), "with_early_firings_every(duration)"),
    (lambda d: TestStream().advance_processing_time(d), "advance_processing_time(duration)"),
])
@pytest.mark.parametrize("duration", ["10 secnds", True, [10], "-10 seconds"])
def test_a_bad_duration_is_a_windowing_config_error_wherever_it_is_given(build, param, duration):
    # A typo raised a plain ValueError while every other bad setting raised WindowingConfigError.
    with pytest.raises(WindowingConfigError, match=rf"{re.escape(param)}={re.escape(repr(duration))} ") as raised:
        build(duration)
    assert isinstance(raised.value, ValueError)  # `except ValueError` keeps working
    assert triggers.WindowingConfigError is WindowingConfigError


@pytest.mark.parametrize("frame, build, message", [
    (TS_DF, lambda w: w.fixed(""), r"fixed\(size\)='' is not a duration"),
    (TS_DF, lambda w: w.fixed("10"), r"fixed\(size\)='10' has no unit; give e.g. '10 seconds'"),
    (DF, lambda w: w.fixed(float("nan")), r"fixed\(size\)=nan must be a finite number below 2\*\*63 \(the time axis's 64 bits\)"),
    (DF, lambda w: w.fixed(float("inf")), r"fixed\(size\)=inf must be a finite number below 2\*\*63"),
    (DF, lambda w: w.fixed(1e20), r"fixed\(size\)=1e\+20 must be a finite number below 2\*\*63"),
    (DF, lambda w: w.fixed(2**64), r"fixed\(size\)=18446744073709551616 must be a finite number below 2\*\*63"),
    (DF, lambda w: w.sessions(2**63), r"sessions\(gap\)=9223372036854775808 must be a finite number below 2\*\*63"),
    (DF, lambda w: w.sliding(2**63, every=2**62), r"sliding\(size\)=9223372036854775808 must be a finite number below"),
    (TS_DF, lambda w: w.fixed(dt.timedelta(days=200000)),
     r"fixed\(size\)=datetime.timedelta\(days=200000\) is beyond the time axis, which holds nanoseconds in 64 bits"),
    (TS_DF, lambda w: w.allowed_lateness(dt.timedelta(days=200000)), r"allowed_lateness\(lateness\)=.* is beyond the time axis"),
    (TS_DF, lambda w: w.watermark(dt.timedelta(days=200000)), r"watermark\(delay\)=.* is beyond the time axis"),
    (TS_DF, lambda w: w.fixed("200000 days"), r"fixed\(size\)='200000 days' is beyond the time axis"),
    # The value as NumPy writes it: np.timedelta64('NaT'), numpy.timedelta64('NaT') on NumPy 1
    (TS_DF, lambda w: w.fixed(np.timedelta64("NaT")), rf"fixed\(size\)={re.escape(repr(np.timedelta64('NaT')))} is not a duration"),
])
def test_a_duration_that_is_none_or_beyond_the_time_axis_is_refused_naming_it(frame, build, message):
    # These raised AttributeError (NaT), ValueError or OverflowError from pandas or NumPy when the pipeline ran.
    with pytest.raises(WindowingConfigError, match=message):
        build(windowed(frame, time="ts")).aggregate(Sum("x"))


def test_a_numpy_timedelta_is_a_duration():
    # It was taken for a plain number: refused on a timestamp axis, a TypeError on a numeric one.
    panes = windowed(TS_DF.assign(ts=pd.to_datetime([15], unit="s")), time="ts").fixed(np.timedelta64(10, "s")).aggregate(Sum("x"))
    assert panes["window_start"].tolist() == [pd.Timestamp(10, unit="s")]
    size = re.escape(repr(np.timedelta64(10, "s")))  # np.timedelta64(10,'s'), numpy.timedelta64(10,'s') on NumPy 1
    with pytest.raises(WindowingConfigError, match=rf"fixed\(size\)={size} is a duration, but time column 'ts' is "):
        windowed(DF, time="ts").fixed(np.timedelta64(10, "s")).aggregate(Sum("x"))


@pytest.mark.parametrize("run, message", [
    (lambda: windowed(DF, time="when").aggregate(Sum("x")), r"time='when' is not a column of the input"),
    (lambda: windowed(DF, time="ts", key="user").aggregate(Sum("x")), r"key='user' is not a column of the input"),
    (lambda: windowed(DF, time="ts").aggregate(Sum("amount")), r"Sum\(column\)='amount' is not a column"),
    (lambda: windowed(DF, time="ts").aggregate(), r"aggregate\(\) needs an accumulation"),
    (lambda: windowed(DF, time="ts").aggregate(Sum("x"), Count()), r"got 2 unnamed accumulations"),
    (lambda: windowed(DF, time="ts").aggregate(timing=Count()), r"clashes with the output column 'timing'"),
    # Taken: the panes had a column without a name, which Spark's writers and Parquet refuse.
    (lambda: windowed(DF, time="ts").aggregate(**{"": Count()}), r"aggregate\(\*\*\{'': Count\(\)\}\): an output column "
                                                                  r"needs a name"),
    # A DataFrame's panes have no step: the refusal said they did.
    (lambda: windowed(DF, time="ts").aggregate(step=Count()), r"clashes with the output column 'step' of a TestStream's panes "
                                                              r"\(reserved for every source, so a pipeline runs on each\)"),
    (lambda: windowed(DF.rename(columns={"k": "step"}), time="ts", key="step"), r"key column 'step' clashes with the output "
                                                                                r"column 'step' of a TestStream's panes"),
    (lambda: windowed(DF, time="ts").aggregate(Sum("x"), value=Count()),
     r"aggregate\(Sum\('x'\), value=Count\(\)\): the unnamed accumulation's output column is 'value' too"),
    (lambda: windowed(DF.rename(columns={"k": "value"}), time="ts", key="value").aggregate(Sum("x")),
     r"windowed\(key='value'\) clashes with the output column 'value' of aggregate\(\.\.\.\)"),
    (lambda: windowed(DF, time="ts", key="k").aggregate(k=Sum("x")),
     r"windowed\(key='k'\) clashes with the output column 'k' of aggregate\(k=\.\.\.\)"),
    (lambda: windowed(DF, time="ts").aggregate(total=42), r"aggregate\(total=42\) is not an Accumulation"),
    (lambda: windowed(DF, time="ts").fixed("1 minute").aggregate(Sum("x")),
     r"fixed\(size\)='1 minute' is a duration, but time column 'ts' is numeric"),
    (lambda: windowed(TS_DF, time="ts").fixed(60).aggregate(Sum("x")),
     r"fixed\(size\)=60 is a plain number, but time column 'ts' holds timestamps"),
    (lambda: windowed(DF.assign(ts=["x"]), time="ts").aggregate(Sum("x")), r"time column 'ts' has dtype"),
    (lambda: windowed(DF.assign(ts=[1.5]), time="ts").aggregate(Sum("x")),
     r"time column 'ts' holds non-integral numbers; .* or give the unit of epoch instants, e.g. windowed\(\.\.\., time_unit='s'\)"),
    (lambda: windowed(TS_DF, time="ts", time_unit="s").aggregate(Sum("x")),
     r"windowed\(time_unit='s'\): time column 'ts' has dtype datetime64\[\w+\]; .* drop it for a column of timestamps"),
    (lambda: windowed(DF.assign(ts=[1.5]), time="ts", time_unit="s").fixed(10).aggregate(Sum("x")),
     r"fixed\(size\)=10 is a plain number, but time column 'ts' is read as timestamps \(time_unit='s'\); give a duration"),
    (lambda: windowed(DF.assign(ts=[1e13]), time="ts", time_unit="s").aggregate(Sum("x")),
     r"time column 'ts' has 1 time\(s\) outside the engine's range as epoch seconds: 1677-09-21 00:12:43.145225 to "
     r"2262-04-11 23:47:16.854775, to the nearest microsecond \(time_unit='s'\), "
     r"the first 10000000000000.0"),
    (lambda: windowed(DF.assign(ts=[float("inf")]), time="ts", time_unit="ms").aggregate(Sum("x")),
     r"time column 'ts' has 1 time\(s\) outside the engine's range as epoch milliseconds"),
    (lambda: windowed(TestStream().add_elements(DF).advance_watermark_to(1e300), time="ts", time_unit="s").aggregate(Sum("x")),
     r"advance_watermark_to\(time\)=1e\+300 at action 1 is beyond the time axis as epoch seconds.*use advance_watermark_to_infinity"),
    (lambda: windowed(pd.DataFrame({"ts": [1, None], "x": [1, 2]}), time="ts").aggregate(Sum("x")),
     r"time column 'ts' has 1 missing value"),
    (lambda: windowed([1, 2], time="ts").aggregate(Sum("x")), r"windowed\(source=list\)"),
    (lambda: windowed(pd.concat([DF, DF[["x"]]], axis=1), time="ts", key="k").aggregate(Sum("x")),
     r"Sum\(column\)='x' names 2 columns of the input; rename or drop all but one"),
    (lambda: windowed(pd.concat([DF, DF[["k"]]], axis=1), time="ts", key="k").aggregate(Sum("x")),
     r"key='k' names 2 columns of the input"),
    (lambda: windowed(DF.assign(k=[["a"]]), time="ts", key="k").aggregate(Sum("x")),
     r"key column 'k' holds values that do not hash \(unhashable type: 'list'\); a key groups elements by equal values"),
    (lambda: windowed(TestStream().add_elements(DF).add_elements(DF.assign(k=[{"a": 1}])), time="ts", key="k").aggregate(Sum("x")),
     r"key column 'k' at action 1 holds values that do not hash \(unhashable type: 'dict'\)"),
    # Columns of another unit built from NumPy's: pandas 2 parses strings to nanoseconds, refusing these times itself.
    (lambda: windowed(pd.DataFrame({"ts": np.array(["2024-01-01", "3000-01-01", "1500-01-01"], dtype="datetime64[us]"),
                                    "x": [1, 2, 3]}), time="ts").fixed("1 hour").aggregate(Sum("x")),
     r"time column 'ts' has 2 time\(s\) outside the engine's nanosecond range "
     r"\(from 1677-09-21 .*, before 2262-04-11 .*, the end of time\), "
     r"the first 3000-01-01 00:00:00"),
    (lambda: windowed(pd.DataFrame({"ts": pd.Series(np.array(["2262-04-13T12:00"], dtype="datetime64[s]")).dt.tz_localize("Asia/Tokyo"),
                                    "x": [1]}), time="ts").aggregate(Sum("x")),
     r"time column 'ts' has 1 time\(s\) outside"),
    (lambda: windowed(TestStream().add_elements(DF).advance_watermark_to(5).advance_watermark_to(3), time="ts")
     .aggregate(Sum("x")), r"advance_watermark_to\(3\) at action 2 moves the watermark backwards"),
    (lambda: windowed(TestStream().add_elements(DF).advance_processing_time(2**62).advance_processing_time(2**62), time="ts")
     .aggregate(Sum("x")), r"advance_processing_time\(4611686018427387904\) at action 2 takes processing time to "
                           r"9223372036854775808 \(in the axis's unit, .*\) since the start, beyond the time axis"),
])
def test_running_refuses_inconsistent_configuration(run, message):
    with pytest.raises(ValueError, match=message):
        run()


@pytest.mark.parametrize("trigger, message", [
    (AtWatermark().with_early_firings_every("10 seconds"), r"with_early_firings_every\(duration\)='10 seconds' is a duration"),
    (AtWatermark().with_late_firings_every("1 minute"), r"with_late_firings_every\(duration\)='60 seconds' is a duration"),
    (AfterProcessingTime("10 seconds"), r"AfterProcessingTime\(delay\)='10 seconds' is a duration"),
])
def test_a_trigger_duration_on_a_numeric_column_is_named_as_a_duration_not_a_timedelta_repr(trigger, message):
    # The message showed the parsed value: with_early_firings_every(duration)=Timedelta('0 days 00:00:10').
    with pytest.raises(WindowingConfigError, match=message + r", but time column 'ts' is numeric"):
        windowed(DF, time="ts").fixed(5).trigger(trigger).aggregate(Sum("x"))


@pytest.mark.parametrize("build, message", [
    (lambda w: w.fixed(2.5), r"fixed\(size\)=2.5 must be a whole number in the column's unit"),
    (lambda w: w.sessions(0.5), r"sessions\(gap\)=0.5 must be a whole number in the column's unit"),
    (lambda w: w.fixed(0), r"fixed\(size\)=0 must be positive"),
    (lambda w: w.allowed_lateness(-1), r"allowed_lateness\(lateness\)=-1 must not be negative"),
])
def test_a_fractional_or_negative_number_on_an_integer_column_says_which(build, message):
    # A fraction was told "must be a non-negative whole number" where 0 was told "must be positive".
    with pytest.raises(WindowingConfigError, match=message):
        build(windowed(DF, time="ts")).aggregate(Sum("x"))


@pytest.mark.parametrize("frame, duration, message", [
    (DF, "10 seconds", r"advance_processing_time\(duration\)='10 seconds' at action 1 is a duration, but time column 'ts' "
                       r"is numeric; give a plain number"),
    (TS_DF, 10, r"advance_processing_time\(duration\)=10 at action 1 is a plain number, but time column 'ts' holds "
                r"timestamps; give a duration such as '10 seconds'"),
])
def test_a_processing_time_duration_of_the_other_kind_is_named_as_given_with_its_action(frame, duration, message):
    # The message showed the parsed value (Timedelta('0 days 00:00:10')) and ran the action into it ("at action 1=10").
    stream = TestStream().add_elements(frame).advance_processing_time(duration)
    with pytest.raises(WindowingConfigError, match=message):
        windowed(stream, time="ts").fixed(5 if frame is DF else "5 seconds").aggregate(Sum("x"))


@pytest.mark.parametrize("frame, watermark, message", [
    (DF, -5.5, r"advance_watermark_to\(time\)=-5.5 at action 1 must be a whole number in the unit of time column 'ts'"),
    (DF, float("nan"), r"advance_watermark_to\(time\)=nan at action 1 must be a whole number"),
    (DF, float("inf"), r"advance_watermark_to\(time\)=inf at action 1 must be a whole number .*use advance_watermark_to_infinity\(\)"),
    (DF, 2**70, r"advance_watermark_to\(time\)=1180591620717411303424 at action 1 is beyond the time axis"),
    (DF, "5", r"advance_watermark_to\(time\)='5' at action 1 must be a number: time column 'ts' is numeric"),
    (TS_DF, 5, r"advance_watermark_to\(time\)=5 at action 1 is a plain number, but time column 'ts' holds timestamps"),
    (TS_DF, "soon", r"advance_watermark_to\(time\)='soon' at action 1 is not a timestamp"),
    (TS_DF, pd.NaT, r"advance_watermark_to\(time\)=NaT at action 1 is not a timestamp"),
    (TS_DF, "3000-01-01", r"advance_watermark_to\(time\)='3000-01-01' at action 1 is beyond the time axis \(nanosecond "
                          r"timestamps, 1677-09-21 .* to 2262-04-11 .*\); to end the input, use advance_watermark_to_infinity\(\)"),
])
def test_a_watermark_the_time_axis_cannot_hold_exactly_is_refused(frame, watermark, message):
    # -5.5 was truncated to -5: the window [-10, -5) fired ON_TIME before the watermark reached its end.
    stream = TestStream().add_elements(frame).advance_watermark_to(watermark)
    with pytest.raises(WindowingConfigError, match=message):
        windowed(stream, time="ts").fixed(5 if frame is DF else "5 seconds").aggregate(Sum("x"))


@pytest.mark.parametrize("first, later, message", [
    (DF, DF.assign(ts=["5"]), r"time column 'ts' at action 1 has dtype (str|object); it must hold timestamps or numbers"),
    (DF, DF.assign(ts=[True]), r"time column 'ts' at action 1 has dtype bool"),
    (DF, TS_DF, r"time column 'ts' at action 1 holds timestamps without a time zone \(dtype datetime64\[\w+\]\), but "
                r"the first elements' times are numbers; give every step's times as one type"),
    (TS_DF, DF, r"time column 'ts' at action 1 holds numbers \(dtype int64\), but the first elements' times are "
                r"timestamps without a time zone"),
    (TS_DF, TS_DF.assign(ts=TS_DF.ts.dt.tz_localize("UTC")),
     r"holds timestamps in time zone UTC \(dtype datetime64\[\w+, UTC\]\), but the first elements' times are timestamps "
     r"without a time zone"),
    (DF, DF.assign(ts=[2.5]), r"time column 'ts' at action 1 holds non-integral numbers"),
    (DF, DF.assign(ts=[float("nan")]), r"time column 'ts' at action 1 has 1 missing value"),
])
def test_a_later_steps_times_of_another_type_are_refused_naming_the_step(first, later, message):
    stream = TestStream().add_elements(first).add_elements(later)
    with pytest.raises(WindowingConfigError, match=message):
        windowed(stream, time="ts").aggregate(Sum("x"))


@pytest.mark.parametrize("build, shown", [
    (lambda w: w.fixed(10, offset=3), ".fixed(10, offset=3)"),
    (lambda w: w.sliding("10 seconds", every="5 seconds", offset="1 second"),
     ".sliding('10 seconds', every='5 seconds', offset='1 second')"),
    (lambda w: w.sliding(10, every=5).allowed_lateness(5), ".sliding(10, every=5).allowed_lateness(5)"),
])
def test_repr_reads_like_the_calls_that_built_the_pipeline(build, shown):
    assert repr(build(windowed(DF, time="ts", key="k"))) == f"windowed(<DataFrame>, time='ts', key='k'){shown}"


@pytest.mark.parametrize("watermark, time_dtype", [(5, "int64"), (pd.Timestamp("2026-01-01"), "datetime64[ns]")])
def test_a_keyed_test_stream_without_elements_fires_no_pane(watermark, time_dtype):
    # It was refused with "key='k' is not a column of the input; it has ['ts']".
    panes = windowed(TestStream().advance_watermark_to(watermark), time="ts", key="k").aggregate(Sum("x"))
    assert len(panes) == 0 and list(panes.columns)[:2] == ["k", "window_start"]
    assert str(panes["window_start"].dtype) == time_dtype


def test_a_later_step_without_a_column_the_pipeline_reads_is_refused_naming_its_action():
    # The refusal said the column was "not a column of the input", which the first step's elements had.
    stream = (TestStream().add_elements(DF).advance_watermark_to(5).add_elements([{"k": "a", "ts": 3}]))
    with pytest.raises(WindowingConfigError, match=r"add_elements\(...\) at action 2: Sum\(column\)='x' is not a "
                                                   r"column of the input; it has \['k', 'ts'\]"):
        windowed(stream, time="ts", key="k").fixed(10).aggregate(Sum("x"))


def test_top_n_takes_a_numpy_integer_as_after_count_does():
    # Before: TopN("v", np.int64(2)) was refused as no positive integer, where AfterCount(np.int64(1)) is taken.
    frame = pd.DataFrame({"ts": [1, 2, 3], "v": [5, 9, 7]})
    panes = windowed(frame, time="ts").fixed(10).aggregate(TopN("v", np.int64(2)))
    assert panes["value"].tolist() == [[9, 7]]
    with pytest.raises(WindowingConfigError, match=r"TopN\(n=(np.)?True_?\): n must be a positive integer"):  # NumPy 1: True
        TopN("v", np.True_)


def test_sliding_windows_too_many_per_element_are_refused_and_an_infinite_time_is_named():
    # Before: sliding("1 day", every="1 ns") ran out of memory (NumPy asked for 629 TiB), and an infinite float
    # time (no time_unit) was refused as a "non-integral number".
    frame = pd.DataFrame({"ts": pd.to_datetime([1], unit="s")})
    with pytest.raises(WindowingConfigError, match=r"sliding\(size='1 day', every='1 ns'\) puts each element in "
                                                   r"86,400,000,000,000 windows, more than 1,000,000; slide by a longer step"):
        windowed(frame, time="ts").sliding("1 day", every="1 ns").aggregate(Count())
    with pytest.raises(WindowingConfigError, match=r"time column 'ts' holds inf, outside the engine's range"):
        windowed(pd.DataFrame({"ts": [1.0, float("inf")]}), time="ts").fixed(10).aggregate(Count())
