"""The ends of the time axis: windows there are cut, not wrapped around, and times at the ends are refused.

An element at the last instants of 64 bits (or of pandas' timestamps) used to get a window whose end
wrapped around to the far past, and one at the first instants a start in the far future.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulations import Count, Sum
from windowing import TestStream, WindowingConfigError, windowed
from windowing.timeaxis import MAX_TIME, MIN_TIME
from windowing.windows import FixedWindows, SlidingWindows

NEAR = 10**6
times = st.one_of(st.integers(MIN_TIME, MIN_TIME + NEAR), st.integers(MAX_TIME - NEAR, MAX_TIME - 1),
                  st.integers(MIN_TIME, MAX_TIME - 1))
steps = st.one_of(st.integers(1, NEAR), st.integers(1, 2**60))


def exact_windows(t: int, size: int, every: int, offset: int) -> list[tuple[int, int]]:
    """Every window ``[s, s + size)`` holding ``t`` with ``s = offset + k*every``, in Python's
    unbounded integers, cut at the ends of the axis."""
    last = t - (t - offset) % every
    starts = [last - k * every for k in range(size // every + 1) if last - k * every > t - size]
    return [(max(s, MIN_TIME), min(s + size, MAX_TIME)) for s in starts]


@settings(max_examples=300)
@given(t=st.lists(times, min_size=1, max_size=4), size=steps, offset=st.integers(0, 2**63 - 1))
def test_fixed_windows_anywhere_on_the_axis_are_exact_arithmetic_cut_at_its_ends(t, size, offset):
    index, start, end = FixedWindows(size, offset).assign(np.array(t, dtype=np.int64))
    assert list(zip(index.tolist(), start.tolist(), end.tolist())) == [
        (i, *exact_windows(ti, size, size, offset)[0]) for i, ti in enumerate(t)]
    assert (start <= np.array(t)).all() and (np.array(t) < end).all()


@settings(max_examples=300)
@given(t=times, every=steps, per_element=st.integers(1, 4), uneven=st.integers(0, 2**62),
       offset=st.integers(0, 2**63 - 1))
def test_sliding_windows_anywhere_on_the_axis_are_exact_arithmetic_or_refused_before_its_start(
        t, every, per_element, uneven, offset):
    size = every * per_element + uneven % every  # a multiple of the slide or not
    expected = exact_windows(t, size, every, offset)
    window = SlidingWindows(size, every, offset)
    if t - (t - offset) % every - (len(expected) - 1) * every < MIN_TIME:  # cut there, two windows would share a start
        with pytest.raises(WindowingConfigError, match=r"whose windows would start before the time axis does"):
            window.assign(np.array([t], dtype=np.int64))
        return
    index, start, end = window.assign(np.array([t], dtype=np.int64))
    assert index.tolist() == [0] * len(expected) and len(expected) in (per_element, per_element + 1)
    assert list(zip(start.tolist(), end.tolist())) == expected


def test_the_last_fixed_window_of_a_numeric_axis_ends_at_its_end_and_fires_at_the_end_of_input():
    # Its end was start + 10, wrapped around to -9223372036854775806.
    top = np.iinfo(np.int64).max
    frame = pd.DataFrame({"ts": [top - 5, top - 15, top - 1], "x": [1, 2, 4]})
    panes = windowed(frame, time="ts").fixed(10).aggregate(Sum("x"))
    assert panes[["window_start", "window_end", "value", "timing"]].values.tolist() == [
        [top - 17, top - 7, 2, "ON_TIME"], [top - 7, top, 5, "ON_TIME"]]


def test_the_first_fixed_window_of_a_numeric_axis_starts_at_its_start():
    # Its start was wrapped around to 9223372036854775806.
    frame = pd.DataFrame({"ts": [MIN_TIME + 2, MIN_TIME + 9], "x": [1, 2]})
    panes = windowed(frame, time="ts").fixed(10).aggregate(Sum("x"))
    assert panes[["window_start", "window_end", "value"]].values.tolist() == [
        [np.iinfo(np.int64).min, MIN_TIME + 7, 1], [MIN_TIME + 7, MIN_TIME + 17, 2]]


def test_the_last_window_of_a_timestamp_axis_ends_at_the_last_timestamp_and_takes_late_data_until_the_end():
    last_hour = pd.Timestamp.max.floor("1h")
    stream = (TestStream()
              .add_elements(pd.DataFrame({"ts": [pd.Timestamp.max - pd.Timedelta("1s")], "x": [1]}))
              .advance_watermark_to(pd.Timestamp.max - pd.Timedelta("1ms"))
              .add_elements(pd.DataFrame({"ts": [last_hour], "x": [2]}))
              .advance_watermark_to_infinity())
    panes = windowed(stream, time="ts").fixed("1 hour").allowed_lateness("1 day").aggregate(n=Count(), total=Sum("x"))
    assert panes[["window_start", "window_end", "total", "timing", "step"]].values.tolist() == [
        [last_hour, pd.Timestamp.max, 3, "ON_TIME", 3]]


def test_sliding_windows_that_would_start_before_the_axis_are_refused_naming_the_column_and_its_time():
    frame = pd.DataFrame({"ts": [0, MIN_TIME + 5], "x": [1, 2]})
    with pytest.raises(WindowingConfigError, match=rf"sliding\(30, every=10\): time column 'ts' holds {MIN_TIME + 5}, "
                                                   r"whose windows would start before the time axis does"):
        windowed(frame, time="ts").sliding(30, every=10).aggregate(Sum("x"))
    stamps = pd.DataFrame({"ts": pd.Series([pd.Timestamp("1677-09-21 00:12:43.645225")]).astype("datetime64[us]"), "x": [1]})
    with pytest.raises(WindowingConfigError, match=r"sliding\('2 seconds', every='1 second'\): time column 'ts' holds "
                                                   r"1677-09-21 00:12:43.645225, whose windows would start before the time "
                                                   r"axis does \(1677-09-21 00:12:43.145225\)"):
        windowed(stamps, time="ts").sliding("2 seconds", every="1 second").aggregate(Sum("x"))


@pytest.mark.parametrize("ts", [np.iinfo(np.int64).max, np.iinfo(np.int64).min], ids=["end of time", "NaT's integer"])
def test_a_numeric_time_at_either_end_of_64_bits_is_refused_naming_it(ts):
    with pytest.raises(WindowingConfigError, match=rf"time column 'ts' has 1 time\(s\) outside the engine's range "
                                                   rf"\(64-bit integers from {MIN_TIME}, before {MAX_TIME}, the end of time\), "
                                                   rf"the first {ts}"):
        windowed(pd.DataFrame({"ts": [1, ts], "x": [1, 2]}), time="ts").fixed(10).aggregate(Sum("x"))


def test_the_last_timestamp_is_the_end_of_time_and_refused():
    with pytest.raises(WindowingConfigError, match=r"time column 'ts' has 1 time\(s\) outside the engine's nanosecond range "
                                                   r"\(from 1677-09-21 .*, before 2262-04-11 23:47:16.854775807, the end of time\)"):
        windowed(pd.DataFrame({"ts": [pd.Timestamp.max], "x": [1]}), time="ts").fixed("1 hour").aggregate(Sum("x"))
