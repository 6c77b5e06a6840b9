"""The six causes of disagreement with Beam Java that a randomized differential found (issue 15),
each on its minimal case: TestStream actions are steps 0, 1, ...; a pane is
``(step, key, window_start, window_end, value, timing, pane_index)``.

Beam Java is the reference of record: ``ReduceFnRunner`` (which windows a step calls the trigger
for, the final pane at garbage collection, ``needToEmit``), ``PaneInfoTracker`` (pane timing),
``MergingActiveWindowSet`` (which windows merge) and the trigger state machines. tests/beam
checks the same rules on random pipelines against Beam's own trigger state machines.
"""

from __future__ import annotations

import pandas as pd

from accumulations import Sum
from triggers import AfterCount, AfterEach, AfterWatermark, Repeatedly
from windowing import TestStream, windowed


def _add(*elements: tuple[str, int, int]) -> pd.DataFrame:
    keys, times, values = zip(*elements)
    return pd.DataFrame({"k": list(keys), "t": list(times), "v": list(values)})


def _panes(pipeline) -> list[tuple]:
    result = pipeline.run(Sum("v"))
    columns = ["step", "k", "window_start", "window_end", "value", "timing", "pane_index"]
    return [tuple(row) for row in result.panes[columns].itertuples(index=False)]


def test_an_empty_on_time_pane_fires_at_garbage_collection():
    """Cause 1: Beam promises every window that received elements an ON_TIME pane, empty or not
    (OnTimeBehavior.FIRE_ALWAYS), whatever the trigger: with lateness 0 the window is collected
    as the watermark passes its end, and its last pane is ON_TIME."""
    stream = TestStream().add_elements(_add(("a", 1, 1), ("a", 2, 2))).advance_watermark_to(10)
    pipeline = windowed(stream, time="t", key="k").fixed(10).trigger(Repeatedly(AfterCount(2))).discarding()
    assert _panes(pipeline) == [(0, "a", 0, 10, 3, "EARLY", 0), (1, "a", 0, 10, 0, "ON_TIME", 1)]


def test_a_pane_fired_at_garbage_collection_is_on_time_while_elements_hold_the_watermark():
    """Cause 2: the elements at 1 and 2 arrived before the watermark passed the end; their holds
    keep the output watermark behind it until the window fires, so its first pane, at garbage
    collection (end + lateness), is ON_TIME, not LATE (PaneInfoTracker)."""
    stream = (TestStream().add_elements(_add(("a", 1, 1), ("a", 2, 2)))
              .advance_watermark_to(10).advance_watermark_to(15))
    pipeline = (windowed(stream, time="t", key="k").fixed(10).allowed_lateness(5)
                .trigger(Repeatedly(AfterCount(3))).discarding())
    assert _panes(pipeline) == [(2, "a", 0, 10, 3, "ON_TIME", 0)]


def test_a_pane_is_late_once_the_watermark_passed_the_end_of_a_window_that_holds_nothing():
    """Cause 2, the other side: the EARLY pane released the window's holds, so once the watermark
    passed the end the output watermark did too, and the late element's pane is LATE."""
    stream = (TestStream().add_elements(_add(("a", 1, 1), ("a", 2, 2))).advance_watermark_to(10)
              .add_elements(_add(("a", 3, 4), ("a", 4, 8))))
    pipeline = (windowed(stream, time="t", key="k").fixed(10).allowed_lateness(20)
                .trigger(Repeatedly(AfterCount(2))).discarding())
    assert _panes(pipeline) == [(0, "a", 0, 10, 3, "EARLY", 0), (2, "a", 0, 10, 12, "LATE", 1)]


def test_an_element_beside_a_finished_session_starts_a_new_session():
    """Cause 3: AfterCount(2) fires and finishes [24,32); a session whose trigger finished leaves
    Beam Java's active windows, so the element at 29 does not merge with it: it starts [29,34),
    whose ON_TIME pane comes at end of input (step 2)."""
    stream = TestStream().add_elements(_add(("a", 24, 1), ("a", 27, 2))).add_elements(_add(("a", 29, 4)))
    result = windowed(stream, time="t", key="k").sessions(5).trigger(AfterCount(2)).accumulating().run(Sum("v"))
    columns = ["step", "k", "window_start", "window_end", "value", "timing", "pane_index"]
    assert [tuple(r) for r in result.panes[columns].itertuples(index=False)] == [
        (0, "a", 24, 32, 3, "EARLY", 0), (2, "a", 29, 34, 4, "ON_TIME", 0)]
    assert len(result.late_data) == 0


def test_equal_early_and_late_triggers_keep_their_own_state():
    """Cause 4: the early and the late AfterCount(2) are equal values, yet each keeps its own count
    (state named by role: early, late), as in Beam."""
    stream = (TestStream().add_elements(_add(("a", 1, 1))).add_elements(_add(("a", 2, 10))).advance_watermark_to(10)
              .add_elements(_add(("a", 4, 100))).add_elements(_add(("a", 5, 1000))).advance_watermark_to(100))
    pipeline = (windowed(stream, time="t", key="k").fixed(10).allowed_lateness(20)
                .trigger(AfterWatermark(early=AfterCount(2), late=AfterCount(2))).discarding())
    assert _panes(pipeline) == [
        (1, "a", 0, 10, 11, "EARLY", 0), (2, "a", 0, 10, 0, "ON_TIME", 1), (4, "a", 0, 10, 1100, "LATE", 2)]


def test_a_session_bridged_to_a_finished_session_keeps_its_own_extent_and_trigger_state():
    """Cause 5: [14,19) fires ON_TIME and finishes; b@19 opens [19,24); b@18 bridges both, but only
    the open one merges: [18,24) with a fresh count, which the two elements make fire EARLY."""
    stream = (TestStream().add_elements(_add(("b", 14, 1))).advance_watermark_to(20)
              .add_elements(_add(("b", 19, 2))).add_elements(_add(("b", 18, 4))))
    pipeline = (windowed(stream, time="t", key="k").sessions(5).allowed_lateness(20)
                .trigger(AfterWatermark(early=AfterCount(2))).discarding())
    assert _panes(pipeline) == [
        (1, "b", 14, 19, 1, "ON_TIME", 0), (3, "b", 18, 24, 6, "EARLY", 0), (4, "b", 18, 24, 0, "ON_TIME", 1)]


def test_a_step_without_data_does_not_fire_or_finish_a_trigger():
    """Cause 6: after AfterCount(2) fires (LATE), AfterEach runs AfterWatermark, which got no element
    and set no timer: the data-less step 2 must not call it (it would fire an empty pane, finish
    and close the window); the element at 3 then fires it with everything so far."""
    stream = (TestStream().advance_watermark_to(15).add_elements(_add(("a", 1, 1), ("a", 2, 2)))
              .advance_watermark_to(16).add_elements(_add(("a", 3, 4))))
    result = (windowed(stream, time="t", key="k").fixed(10).allowed_lateness(10)
              .trigger(AfterEach(AfterCount(2), AfterWatermark())).accumulating().run(Sum("v")))
    columns = ["step", "k", "window_start", "window_end", "value", "timing", "pane_index"]
    assert [tuple(r) for r in result.panes[columns].itertuples(index=False)] == [
        (1, "a", 0, 10, 3, "LATE", 0), (3, "a", 0, 10, 7, "LATE", 1)]
    assert len(result.late_data) == 0


def test_a_session_merge_holds_the_watermark_anew_but_its_own_proto_session_merges_nothing():
    """Cause 2 in sessions: a merge releases the merged windows' holds and holds again only if the
    merged window ends after the watermark (WatermarkHold.onMerge); an element whose proto-session is
    the open session itself merges nothing (MergingActiveWindowSet), and the session keeps its hold."""
    def final_timing(elements_after: tuple) -> list[tuple]:
        stream = (TestStream().add_elements(_add(("a", 25, 1), ("a", 27, 2))).advance_watermark_to(31)
                  .add_elements(_add(elements_after)))
        return _panes(windowed(stream, time="t", key="k").sessions(4).allowed_lateness(10)
                      .trigger(AfterCount(4)).discarding())

    assert final_timing(("a", 26, 4)) == [(3, "a", 25, 31, 7, "LATE", 0)]  # [26,30) fits inside [25,31): a merge
    stream = TestStream().add_elements(_add(("a", 25, 1))).advance_watermark_to(29).add_elements(_add(("a", 25, 2)))
    panes = _panes(windowed(stream, time="t", key="k").sessions(4).allowed_lateness(10).trigger(AfterCount(3)).discarding())
    assert panes == [(3, "a", 25, 29, 3, "ON_TIME", 0)]  # [25,29) again: no merge, the hold of 25 stays
