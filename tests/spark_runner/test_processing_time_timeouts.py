"""Processing-time firings on Spark: each happens in the first micro-batch whose timestamp reaches it.

Spark times a group out only when the batch timestamp is *after* the timeout
timestamp; a timeout set exactly at the firing time made the firing slip to
the next micro-batch, where new elements joined the pane (found by the
differential property test). And only the processing-time timeout calls a
bucket when no row arrived and the watermark did not move, so any trigger
with a processing-time part, late firings included, needs it.
"""

import pandas as pd
import pytest

from accumulations import Sum
from triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    AtWatermark,
    Default,
    OrFinally,
    Repeatedly,
)
from windowing import TestStream, windowed
from windowing.runners.spark import plan_spark

from .helpers import SimulatedQuery, assert_same_panes, events, spark_schema
from .test_adapter import _differential


def test_periodic_early_firing_is_not_delayed_into_the_next_batch_with_data():
    batches = [[("a", 14, 3), ("a", 118, 18)], [("a", 85, 28), ("a", 40, 39)], []]
    # Processing time: +1 s (first data), +10 s (the early firing is due: a no-data batch), +1 s ...
    _, actual, expected = _differential(batches, "global", "early_periodic_retracting", 1, [1], [1, 10, 1, 1, 1])
    assert list(expected["total"]) == [21]  # the pandas runner fires before the second batch's elements
    assert_same_panes(actual, expected)


LATE_BY_PROCESSING_TIME = [AfterWatermark(late=AfterProcessingTime("10 seconds")),
                           AfterWatermark(late=Repeatedly(AfterProcessingTime("10 seconds")))]


@pytest.mark.parametrize("trigger", LATE_BY_PROCESSING_TIME, ids=repr)
def test_a_late_firing_by_processing_time_happens_with_no_new_data(trigger):
    """The bucket is called when only processing time passed: with the event-time timeout it never was."""
    build = lambda source: (windowed(source, time="ts", key="user").fixed("1 minute").allowed_lateness("10 minutes")
                            .watermark("1 second").trigger(trigger).accumulating())
    first, later, late = events([("a", 1, 5)]), events([("b", 200, 1)]), events([("a", 30, 7)])
    query = SimulatedQuery(plan_spark(build(first).strategy(total=Sum("amount")), spark_schema(first), 1), 1000)
    query.batch(first, 1_000)
    query.batch(later, 2_000)
    query.batch(None, 2_500)  # the watermark passed a's window: ON_TIME
    query.batch(late, 3_000)  # a late element; its firing is due 10 s later
    for processing_ms in (15_000, 30_000):  # no new data
        query.batch(None, processing_ms)
    stream = (TestStream().add_elements(first).add_elements(later).advance_watermark_to(pd.Timestamp("2024-01-01 00:03:19"))
              .add_elements(late).advance_processing_time("20 seconds"))
    expected = build(stream).aggregate(total=Sum("amount"))
    expected = expected[expected["user"] == "a"]
    assert list(zip(expected["total"], expected["timing"])) == [(5, "ON_TIME"), (12, "LATE")]
    assert_same_panes(query.result(), expected)


@pytest.mark.parametrize("trigger, processing_time", [
    (Default(), False),
    (AtWatermark().with_early_firings_every(2).with_late_firings_every(1), False),
    (AfterWatermark(early=AfterCount(2), late=AfterCount(1)), False),
    (AtWatermark().with_late_firings_every("10 seconds"), True),
    (AfterWatermark(late=AfterAny(AfterCount(5), AfterProcessingTime("10 seconds"))), True),
    (Repeatedly(AfterEach(AfterCount(1), AfterProcessingTime("10 seconds"))), True),
    (OrFinally(Repeatedly(AfterCount(2)), until=AfterProcessingTime("1 minute")), True),
], ids=repr)
def test_the_timeout_mode_follows_every_part_of_the_trigger(trigger, processing_time):
    frame = events([("a", 1, 1)])
    w = windowed(frame, time="ts", key="user").fixed("10 seconds").allowed_lateness("1 minute").trigger(trigger)
    plan = plan_spark(w.strategy(v=Sum("amount")), spark_schema(frame), 2)
    assert plan.timeout == ("ProcessingTimeTimeout" if processing_time else "EventTimeTimeout")


def test_a_timer_held_back_by_a_count_does_not_call_the_bucket_in_every_batch():
    """``AfterAll`` waits for a second element after its processing-time part is due: once that
    time has passed, only a new element can fire the window, so no-data batches leave it alone."""
    frame = events([("a", 1, 5)])
    w = (windowed(frame, time="ts", key="user").global_window()
         .trigger(Repeatedly(AfterAll(AfterProcessingTime("5 seconds"), AfterCount(2)))))
    query = SimulatedQuery(plan_spark(w.strategy(total=Sum("amount")), spark_schema(frame), 1), 1000)
    query.batch(frame, 1_000)
    for processing_ms in (7_000, 8_000, 9_000, 10_000):
        query.batch(None, processing_ms)
    assert query.calls == 2  # the element, then the batch after the timer (6 s); none while the count is short
    query.batch(events([("a", 2, 1)]), 11_000)
    assert list(query.result()["total"]) == [6]
