"""`next_timers`: when a window table next needs a step without new elements.

A streaming runner turns the processing-time timer into a timeout (Spark's
``ProcessingTimeTimeout``), so a timer that stays reported after its firing
calls the key again in every micro-batch for nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from accumulations import Sum
from triggers import NO_TIME, AfterAll, AfterAny, AfterCount, AfterEach, AfterProcessingTime, AfterWatermark, Never, OrFinally, Repeatedly
from windowing import TestStream, windowed
from windowing.engine import next_timers, step
from windowing.plan import make_plan, to_elements
from windowing.timeaxis import MIN_TIME, TimeAxis
from windowing.window_table import empty_state

ONE = pd.DataFrame({"k": ["a"], "ts": [1], "x": [1]})


def processing_timers(trigger, processing_times: list[int]) -> list[int]:
    """The processing-time timer after an element at processing time 0, then after a step without
    elements at each of ``processing_times`` (the watermark stays before the window's end)."""
    pipeline = windowed(ONE, time="ts", key="k").fixed(1000).trigger(trigger)
    axis = TimeAxis.of("ts", ONE["ts"])
    plan = make_plan(pipeline.strategy(Sum("x")), axis, ONE.dtypes.to_dict())
    elements = to_elements(plan, ONE, axis.to_internal(ONE["ts"]))
    state = step(plan.spec, empty_state(plan.spec, [ONE["k"].dtype]), elements, MIN_TIME, 0).state
    timers = [next_timers(plan.spec, state, 0)[1]]
    for processing_time in processing_times:
        state = step(plan.spec, state, elements.iloc[:0], MIN_TIME, processing_time).state
        timers.append(next_timers(plan.spec, state, processing_time)[1])
    return timers


@pytest.mark.parametrize("trigger, timers", [
    (AfterProcessingTime(5), [5, NO_TIME]),  # fired and finished: the window is closed
    (AfterEach(AfterProcessingTime(5), AfterCount(100)), [5, NO_TIME]),
    (Repeatedly(AfterProcessingTime(5)), [5, NO_TIME]),  # reset: no timer until the next element
    (AfterAll(AfterProcessingTime(5), Repeatedly(AfterCount(1))), [5, NO_TIME]),  # fired, and AfterAll goes on
    (OrFinally(AfterCount(100), AfterEach(AfterProcessingTime(5), Never())), [5, NO_TIME]),
    # due but held back until a second element arrives: no timer can release it
    (AfterAll(AfterProcessingTime(5), AfterCount(2)), [5, NO_TIME]),
    (AfterAll(AfterProcessingTime(5), AfterProcessingTime(20)), [5, 20]),
], ids=repr)
def test_a_fired_or_finished_processing_time_trigger_reports_no_timer(trigger, timers):
    assert processing_timers(trigger, [10]) == timers


def test_a_timer_outlives_its_triggers_reset_until_due_as_in_beam_java():
    """The AfterAny finished through its count at once, yet its AfterProcessingTime's timer stays (Java cannot
    delete it) and wakes the window at 500, where it is spent; the AfterProcessingTime(5) after it never started."""
    trigger = AfterEach(AfterAny(AfterProcessingTime(500), AfterCount(1)), AfterProcessingTime(5))
    assert processing_timers(trigger, [10, 500]) == [500, 500, NO_TIME]


def test_a_trigger_set_again_before_its_timer_is_due_has_both_timers_as_in_beam_java():
    """Java keys a window's timers by their time: the early AfterAny, reset by its first pane, sets 3 and then 5,
    and at 4 the timer of 3 wakes the window, whose AfterWatermark() in charge since the ON_TIME pane is satisfied:
    it finishes on an empty pane (not emitted), and the last element is dropped. The engine kept the latest timer
    only (5) and emitted that element in a LATE pane (the differential's reference, run by hand, agrees)."""
    trigger = AfterEach(AfterWatermark(early=AfterAny(AfterCount(1), AfterProcessingTime(3))), AfterWatermark())
    stream = (TestStream().add_elements(ONE.assign(ts=[1])).advance_processing_time(2).add_elements(ONE.assign(ts=[2]))
              .advance_watermark_to(10).advance_processing_time(2).add_elements(ONE.assign(ts=[3], x=[4])))
    result = windowed(stream, time="ts", key="k").fixed(10).allowed_lateness(20).discarding().trigger(trigger).run(Sum("x"))
    assert result.panes[["value", "timing", "step"]].values.tolist() == [[1, "EARLY", 0], [1, "EARLY", 2], [0, "ON_TIME", 3]]
    assert result.late_data[["x", "reason", "step"]].values.tolist() == [[4, "window closed (trigger finished)", 5]]


def test_a_merged_window_has_every_pending_timer_of_the_windows_merged():
    """The merged window waits for the earliest timer and keeps the others, one per time (`later`)."""
    from triggers import TriggerContext

    trigger = AfterProcessingTime(5)
    src = TriggerContext({"t.fire_at": np.array([NO_TIME, 9, NO_TIME]), "t.timer": np.array([4, 9, 7]),
                          "t.later": np.array([(9, 12), None, None], dtype=object)}, np.array([10, 20, 30]), MIN_TIME, 0)
    dst = TriggerContext(trigger.fresh_state(1), np.array([30]), MIN_TIME, 0)
    trigger.merge(src, np.array([0, 0, 0]), dst)
    assert (dst["timer"].tolist(), dst["later"].tolist(), dst["fire_at"].tolist()) == ([4], [(7, 9, 12)], [9])
