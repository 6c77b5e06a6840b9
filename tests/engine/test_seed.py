"""One test per behaviour that seed 004 (Apex Malhar's WindowedOperator) states in prose."""

from __future__ import annotations

import pandas as pd
import pytest

from accumulations import Count, Sum, ToList
from triggers import AtWatermark
from windowing import TestStream, windowed


def rows(panes: pd.DataFrame, *columns: str) -> list[tuple]:
    return [tuple(r) for r in panes[list(columns)].itertuples(index=False)]


def elements(*triples) -> list[dict]:
    return [{"k": k, "ts": t, "x": x} for k, t, x in triples]


# ---- session windows: the four cases of the seed --------------------------------------------

def session_run(first, second, gap=10):
    stream = TestStream().add_elements(elements(*first)).add_elements(elements(*second)).advance_watermark_to_infinity()
    return (windowed(stream, time="ts", key="k").sessions(gap)
            .trigger(AtWatermark().with_early_firings_every(1))
            .accumulating_and_retracting().aggregate(Sum("x")))


def test_session_proto_window_fits_inside_an_existing_session_without_change():
    panes = session_run([("a", 0, 1), ("a", 8, 2)], [("a", 4, 4)])  # session [0, 18); proto [4, 14) fits
    step1 = panes[panes.step == 1]
    assert rows(step1, "window_start", "window_end", "value", "is_retraction", "pane_index") == [
        (0, 18, 3, True, 0), (0, 18, 7, False, 1)]


def test_session_proto_window_overlapping_one_session_extends_it_and_retracts_the_old_window():
    panes = session_run([("a", 10, 1)], [("a", 5, 2)])  # [10, 20) and proto [5, 15) -> [5, 20)
    step1 = panes[panes.step == 1]
    assert rows(step1, "window_start", "window_end", "value", "is_retraction", "pane_index") == [
        (10, 20, 1, True, 0), (5, 20, 3, False, 0)]


def test_session_proto_window_overlapping_two_sessions_merges_both_and_retracts_both():
    panes = session_run([("a", 0, 1), ("a", 20, 2)], [("a", 12, 4)])  # [0,10), [20,30), proto [12,22) -> only one
    assert rows(panes[panes.step == 1], "window_start", "window_end", "value", "is_retraction") == [
        (20, 30, 2, True), (12, 30, 6, False)]
    panes = session_run([("a", 0, 1), ("a", 15, 2)], [("a", 8, 4)])  # proto [8, 18) overlaps [0,10) and [15,25)
    assert rows(panes[panes.step == 1], "window_start", "window_end", "value", "is_retraction") == [
        (0, 10, 1, True), (15, 25, 2, True), (0, 25, 7, False)]


def test_session_proto_window_overlapping_nothing_becomes_a_new_session():
    panes = session_run([("a", 0, 1)], [("a", 10, 2)])  # touching [0,10) and [10,20): elements are gap apart
    final = panes[panes.timing == "ON_TIME"]
    assert rows(final, "window_start", "window_end", "value") == [(0, 10, 1), (10, 20, 2)]
    # no window was merged away: each retracts only its own EARLY pane, right before its ON_TIME pane
    assert rows(panes[panes.is_retraction], "window_start", "window_end", "value", "timing") == [
        (0, 10, 1, "EARLY"), (10, 20, 2, "EARLY")]


# ---- window options ---------------------------------------------------------------------------

def test_sliding_window_assigns_each_element_to_size_over_slide_windows():
    df = pd.DataFrame(elements(("a", 7, 1)))
    panes = windowed(df, time="ts", key="k").sliding(10, every=2).aggregate(Count())
    assert rows(panes, "window_start", "window_end") == [(-2, 8), (0, 10), (2, 12), (4, 14), (6, 16)]


def test_a_sliding_windows_slide_need_not_divide_its_size_as_in_beam():
    # Windows [3k, 3k + 10): 7 lies in those starting at 6, 3 and 0 (not -3: [-3, 7) ends at it), 9 in four.
    df = pd.DataFrame(elements(("a", 7, 1), ("a", 9, 1)))
    panes = windowed(df, time="ts", key="k").sliding(10, every=3).aggregate(Count())
    assert rows(panes, "window_start", "window_end", "value") == [(0, 10, 2), (3, 13, 2), (6, 16, 2), (9, 19, 1)]
    seconds = windowed(df.assign(ts=pd.to_datetime(df.ts, unit="s")), time="ts", key="k").sliding(
        "10 seconds", every="7 seconds").aggregate(Count())
    assert sorted((s.second, e.second, n) for s, e, n in rows(seconds, "window_start", "window_end", "value")) == [
        (0, 10, 2), (7, 17, 2)]


def test_a_sliding_windows_slide_longer_than_its_size_is_refused_as_it_would_lose_elements():
    df = pd.DataFrame(elements(("a", 7, 1)))
    with pytest.raises(ValueError, match=r"sliding window every=12 is longer than size=10: the times between one "
                                         r"window's end and the next one's start would be in no window"):
        windowed(df, time="ts", key="k").sliding(10, every=12).aggregate(Count())


def test_global_window_holds_everything_until_end_of_input():
    df = pd.DataFrame(elements(("a", 1, 1), ("a", 10**9, 2)))
    panes = windowed(df, time="ts").global_window().aggregate(Sum("x"))
    assert rows(panes, "window_start", "window_end", "value", "timing") == [
        (-(2**63), 2**63 - 1, 3, "ON_TIME")]


# ---- keyed and not keyed --------------------------------------------------------------------------

def test_keyed_operator_keeps_state_per_key_and_window():
    df = pd.DataFrame(elements(("a", 1, 1), ("b", 2, 10), ("a", 3, 100)))
    panes = windowed(df, time="ts", key="k").fixed(10).aggregate(Sum("x"))
    assert rows(panes, "k", "value") == [("a", 101), ("b", 10)]


def test_not_keyed_operator_keeps_state_per_window_and_has_no_key_column():
    df = pd.DataFrame(elements(("a", 1, 1), ("b", 2, 10), ("a", 13, 100)))
    panes = windowed(df, time="ts").fixed(10).aggregate(Sum("x"))
    assert "k" not in panes.columns
    assert rows(panes, "window_start", "value") == [(0, 11), (10, 100)]


def test_key_may_be_several_columns():
    df = pd.DataFrame({"k": ["a", "a", "a"], "j": [1, 2, 1], "ts": [1, 2, 3], "x": [1, 2, 3]})
    panes = windowed(df, time="ts", key=["k", "j"]).fixed(10).aggregate(Sum("x"))
    assert rows(panes, "k", "j", "value") == [("a", 1, 4), ("a", 2, 2)]


@pytest.mark.parametrize("window", ["fixed", "sessions"])
def test_a_missing_key_is_one_key_of_its_own_and_its_panes_keep_it_missing(window):
    # None and NaN are one missing key, apart from the others, across steps; in an object
    # column its panes carry None, as the input did (grouping alone would turn it into NaN).
    first = pd.DataFrame({"k": pd.Series(["a", None], dtype=object), "ts": [1, 2], "x": [1, 10]})
    second = pd.DataFrame({"k": pd.Series([float("nan"), "a", None], dtype=object), "ts": [3, 4, 5], "x": [100, 1000, 10000]})
    stream = TestStream().add_elements(first).add_elements(second)
    panes = getattr(windowed(stream, time="ts", key="k"), window)(10).accumulating().aggregate(Sum("x"))
    assert panes["k"].dtype == object
    assert rows(panes, "k", "value") == [("a", 1001), (None, 10110)]


@pytest.mark.parametrize("window", ["fixed", "sessions"])
def test_nullable_integer_keys_stay_exact_with_a_missing_key(window):
    # A missing key turned the Int64 key column into float64: keys 2**53 and 2**53 + 1 were one key.
    big = 2**53
    first = pd.DataFrame({"k": pd.Series([big, None], dtype="Int64"), "ts": [1, 2], "x": [1, 10]})
    second = pd.DataFrame({"k": pd.Series([big + 1, None, big], dtype="Int64"), "ts": [3, 4, 5], "x": [100, 1000, 10000]})
    stream = TestStream().add_elements(first).add_elements(second)
    panes = getattr(windowed(stream, time="ts", key="k"), window)(10).accumulating().aggregate(Sum("x"))
    assert panes["k"].dtype == "Int64"
    assert rows(panes, "k", "value") == [(big, 10001), (pd.NA, 1010), (big + 1, 100)]


# ---- watermarks, lateness, dropping and purging ------------------------------------------------

def test_window_is_on_time_until_the_watermark_reaches_its_end():
    stream = (TestStream().add_elements(elements(("a", 1, 1)))
              .advance_watermark_to(9).advance_watermark_to(10))
    panes = windowed(stream, time="ts", key="k").fixed(10).trigger(AtWatermark()).aggregate(Sum("x"))
    assert rows(panes, "step", "timing", "value") == [(2, "ON_TIME", 1)]


def test_element_beyond_the_lateness_horizon_is_dropped_and_reported():
    stream = (TestStream().add_elements(elements(("a", 1, 1)))
              .advance_watermark_to(15)
              .add_elements(elements(("a", 2, 5))))  # window [0,10): 10 + 5 <= 15: beyond the horizon
    result = windowed(stream, time="ts", key="k").fixed(10).allowed_lateness(5).run(Sum("x"))
    assert rows(result.panes, "window_start", "value", "timing") == [(0, 1, "ON_TIME")]
    assert result.dropped_count == 1
    assert rows(result.late_data, "ts", "x", "window_start", "reason", "step") == [
        (2, 5, 0, "beyond allowed lateness", 2)]


def test_late_element_within_allowed_lateness_is_accepted_and_fires_late():
    stream = (TestStream().add_elements(elements(("a", 1, 1)))
              .advance_watermark_to(12)
              .add_elements(elements(("a", 2, 5))))  # 10 + 5 > 12: within the horizon
    panes = (windowed(stream, time="ts", key="k").fixed(10).allowed_lateness(5)
             .trigger(AtWatermark().with_late_firings_every(1)).accumulating().aggregate(Sum("x")))
    assert rows(panes, "step", "value", "timing", "pane_index") == [(1, 1, "ON_TIME", 0), (2, 6, "LATE", 1)]


def test_window_beyond_the_lateness_horizon_is_purged_with_its_state():
    # After the purge, an element for the same window may not resurrect the old accumulated value.
    stream = (TestStream().add_elements(elements(("a", 1, 1)))
              .advance_watermark_to(16)                       # purges [0, 10) (10 + 5 <= 16)
              .add_elements(elements(("a", 3, 7))))           # dropped: beyond the horizon
    result = (windowed(stream, time="ts", key="k").fixed(10).allowed_lateness(5)
              .trigger(AtWatermark().with_late_firings_every(1)).accumulating().run(Sum("x")))
    assert rows(result.panes, "value", "timing") == [(1, "ON_TIME")]
    assert result.dropped_count == 1


def test_watermark_from_delay_follows_max_event_time():
    stream = (TestStream().add_elements(elements(("a", 1, 1)))
              .add_elements(elements(("a", 25, 2)))   # max event time 25, delay 5 -> watermark 20 from the next step
              .add_elements(elements(("a", 30, 4))))
    panes = windowed(stream, time="ts", key="k").fixed(10).watermark(5).aggregate(Sum("x"))
    assert rows(panes, "step", "window_start", "timing") == [(2, 0, "ON_TIME"), (3, 20, "ON_TIME"), (3, 30, "ON_TIME")]


def test_a_derived_watermark_counts_whole_milliseconds_of_timestamps_as_sparks_does():
    # Spark keeps event times in ms for its watermark: the largest, 19.000500 s, makes it 19.000 s, which has not
    # passed the end of the window [12.000123 s, 19.000123 s); 19.001 s has. Integer axes keep their units.
    at = lambda micros: pd.Timestamp("2024-01-01") + pd.Timedelta(microseconds=micros)
    stream = (TestStream().add_elements([{"k": "a", "ts": at(12_000_123), "x": 1}, {"k": "b", "ts": at(19_000_500), "x": 2}])
              .add_elements([]).add_elements([{"k": "c", "ts": at(19_001_000), "x": 4}]).add_elements([]))
    panes = windowed(stream, time="ts", key="k").sessions("7 seconds").watermark("0 seconds").aggregate(Sum("x"))
    assert rows(panes[panes["k"] == "a"], "step", "timing") == [(3, "ON_TIME")]
    numeric = (TestStream().add_elements(elements(("a", 12, 1), ("b", 19, 2))).add_elements([]))
    panes = windowed(numeric, time="ts", key="k").sessions(7).watermark(0).aggregate(Sum("x"))
    assert rows(panes[panes["k"] == "a"], "step", "timing") == [(1, "ON_TIME")]


# ---- triggers -------------------------------------------------------------------------------------

def test_on_time_trigger_fires_when_the_window_flips_from_early_to_late():
    stream = TestStream().add_elements(elements(("a", 1, 1), ("a", 2, 2))).advance_watermark_to(10)
    panes = windowed(stream, time="ts", key="k").fixed(10).trigger(AtWatermark()).aggregate(Sum("x"))
    assert rows(panes, "step", "value", "timing") == [(1, 3, "ON_TIME")]


def test_early_firings_by_count_fire_every_n_elements():
    stream = (TestStream().add_elements(elements(("a", 1, 1)))
              .add_elements(elements(("a", 2, 2)))
              .add_elements(elements(("a", 3, 4), ("a", 4, 8))))
    panes = (windowed(stream, time="ts", key="k").fixed(10)
             .trigger(AtWatermark().with_early_firings_every(2)).accumulating().aggregate(Sum("x")))
    assert rows(panes, "step", "value", "timing") == [(1, 3, "EARLY"), (2, 15, "EARLY"), (3, 15, "ON_TIME")]


def test_early_firings_by_processing_time_fire_every_period_even_without_new_elements():
    # Numeric time columns take durations as numbers; use timestamps for a duration-based period.
    ts = lambda s: pd.Timestamp("2026-01-01") + pd.Timedelta(seconds=s)  # noqa: E731
    stream = (TestStream().add_elements([{"k": "a", "ts": ts(1), "x": 1}])
              .advance_processing_time("10 seconds")
              .advance_processing_time("10 seconds")
              .advance_watermark_to(ts(60)))
    panes = (windowed(stream, time="ts", key="k").fixed("1 minute")
             .trigger(AtWatermark().with_early_firings_every("10 seconds")).accumulating().aggregate(Sum("x")))
    assert rows(panes, "step", "value", "timing") == [(1, 1, "EARLY"), (2, 1, "EARLY"), (3, 1, "ON_TIME")]


def test_late_firings_by_count_fire_every_n_late_elements():
    stream = (TestStream().add_elements(elements(("a", 1, 1)))
              .advance_watermark_to(10)
              .add_elements(elements(("a", 2, 2)))
              .add_elements(elements(("a", 3, 4))))
    panes = (windowed(stream, time="ts", key="k").fixed(10).allowed_lateness(100)
             .trigger(AtWatermark().with_late_firings_every(2)).accumulating().aggregate(Sum("x")))
    assert rows(panes, "step", "value", "timing") == [(1, 1, "ON_TIME"), (3, 7, "LATE")]


def test_without_late_firings_late_elements_are_dropped_not_lost_silently():
    stream = (TestStream().add_elements(elements(("a", 1, 1)))
              .advance_watermark_to(10)
              .add_elements(elements(("a", 2, 2))))
    result = (windowed(stream, time="ts", key="k").fixed(10).allowed_lateness(100)
              .trigger(AtWatermark()).run(Sum("x")))
    assert rows(result.panes, "value", "timing") == [(1, "ON_TIME")]
    assert rows(result.late_data, "x", "reason") == [(2, "window closed (trigger finished)")]


# ---- accumulation modes and fire_only_updated_panes ----------------------------------------------

def mode_stream():
    return (TestStream().add_elements(elements(("a", 1, 1)))
            .add_elements(elements(("a", 2, 2)))
            .advance_watermark_to(10))


def mode_run(builder):
    return builder(windowed(mode_stream(), time="ts", key="k").fixed(10)
                   .trigger(AtWatermark().with_early_firings_every(1))).aggregate(Sum("x"))


def test_discarding_mode_discards_the_state_after_each_firing():
    panes = mode_run(lambda b: b.discarding())
    assert rows(panes, "value", "timing", "is_retraction") == [(1, "EARLY", False), (2, "EARLY", False), (0, "ON_TIME", False)]


def test_accumulating_mode_keeps_the_state_until_purged():
    panes = mode_run(lambda b: b.accumulating())
    assert rows(panes, "value", "timing", "is_retraction") == [(1, "EARLY", False), (3, "EARLY", False), (3, "ON_TIME", False)]


def test_accumulating_and_retracting_mode_retracts_the_previous_value_before_each_new_pane():
    # As the seed operator: a retraction precedes every pane that replaces an earlier one,
    # the unchanged ON_TIME pane included, so emitted minus retracted is the current value.
    panes = mode_run(lambda b: b.accumulating_and_retracting())
    assert rows(panes, "value", "timing", "pane_index", "is_retraction") == [
        (1, "EARLY", 0, False), (1, "EARLY", 0, True), (3, "EARLY", 1, False), (3, "EARLY", 1, True),
        (3, "ON_TIME", 2, False)]


def test_accumulating_and_retracting_with_fire_only_updated_panes_skips_the_unchanged_pane_and_its_retraction():
    panes = mode_run(lambda b: b.accumulating_and_retracting().fire_only_updated_panes())
    assert rows(panes, "value", "timing", "pane_index", "is_retraction") == [
        (1, "EARLY", 0, False), (1, "EARLY", 0, True), (3, "EARLY", 1, False)]


def test_fire_only_updated_panes_suppresses_a_firing_equal_to_the_previous_one():
    panes = mode_run(lambda b: b.accumulating().fire_only_updated_panes())
    assert rows(panes, "value", "timing") == [(1, "EARLY"), (3, "EARLY")]


def test_fire_only_updated_panes_with_discarding_is_refused_when_the_pipeline_is_built():
    with pytest.raises(ValueError, match=r"fire_only_updated_panes\(\) with discarding\(\)"):
        mode_run(lambda b: b.discarding().fire_only_updated_panes())


def test_collection_accumulation_runs_on_the_per_window_path():
    df = pd.DataFrame(elements(("a", 1, "x"), ("a", 2, "y"), ("b", 3, "z")))
    panes = windowed(df, time="ts", key="k").fixed(10).aggregate(items=ToList("x"))
    assert [sorted(v) for v in panes["items"]] == [["x", "y"], ["z"]]


def test_dropped_pairs_of_one_key_do_not_shift_the_keys_of_the_others():
    # Sliding windows give two pairs per element; dropping b's and a@0's pairs leaves as many
    # pairs as elements (positions 0, 0, 3, 3), which once passed for "every element, in order".
    stream = (TestStream().add_elements(elements(("a", 84, 27), ("a", 104, -4)))
              .add_elements(elements(("a", 97, 0), ("b", 0, 0), ("a", 0, 0), ("a", 105, 0))))
    result = (windowed(stream, time="ts", key="k").sliding(20, every=10).allowed_lateness(20)
              .watermark(5).run(Sum("x")))
    assert set(result.panes["k"]) == {"a"}
    assert rows(result.late_data, "k", "ts") == [("b", 0), ("b", 0), ("a", 0), ("a", 0)]
