"""Writes ``state_v3_processing_time.bin``: a bucket's window table with `AfterProcessingTime` state, saved
by the adapter of c1a7665, whose tables had no ``timer`` column (the timer of an `AfterProcessingTime`
that fired or was reset was gone). `test_state_codec.py` resumes it with today's code; the sample is never
regenerated. Made with that commit's code::

    mkdir /tmp/old && git archive c1a7665 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/spark_runner/data/processing_time_sample.py
"""

from __future__ import annotations

from pathlib import Path

from accumulations import Sum
from tests.spark_runner.helpers import events, shipped, spark_schema
from triggers import AfterEach, AfterProcessingTime, Repeatedly
from windowing import windowed
from windowing.engine import step
from windowing.runners.spark import plan_spark
from windowing.runners.spark.planning import SparkPlan

SAMPLE = Path(__file__).resolve().parent / "state_v3_processing_time.bin"
T0 = 1_704_067_200 * 10**9  # 2024-01-01 in ns: the watermark, before every window's end
SECOND = 10**9
#: (user, seconds after T0, amount) rows of each step, and its processing time. a's first element starts the
#: 5 s delay at 0, fires at 5 s (EARLY) and moves the AfterEach on; a's second starts the 2 s delay at 6 s, b's
#: first the 5 s one.
STEPS = [([("a", 1, 1)], 0), ([], 5 * SECOND), ([("a", 2, 2), ("b", 3, 4)], 6 * SECOND)]


def plan() -> SparkPlan:
    frame = events([("a", 1, 5)])
    w = windowed(frame, time="ts", key="user").fixed("1 minute").trigger(
        AfterEach(AfterProcessingTime("5 seconds"), Repeatedly(AfterProcessingTime("2 seconds"))))
    return plan_spark(w.strategy(total=Sum("amount")), spark_schema(frame), 4)


def written() -> bytes:
    """The bucket's state value after `STEPS`, as this code's adapter saves it."""
    sample_plan = plan()
    adapter = sample_plan.adapter
    table = adapter.fresh_state()
    for rows, processing_time in STEPS:
        elements = adapter.elements([shipped(events(rows), sample_plan).drop(columns="_wm_ms")])
        table = step(adapter.plan.spec, table, elements, T0, processing_time).state
    return adapter.save(table)


if __name__ == "__main__":
    SAMPLE.write_bytes(written())
