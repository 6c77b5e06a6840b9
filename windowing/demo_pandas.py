"""The demo job: click sessions per user with early firings, late data and retractions.

Run with ``python -m windowing.demo_pandas``. It scripts a small stream with TestStream, runs it on
the pandas runner and prints every pane, so the output shows session merging
(a retraction before the merged session's pane) and a late firing.
"""

from __future__ import annotations

import pandas as pd

from accumulations import Count, Sum
from triggers import AtWatermark

from . import TestStream, windowed


def clicks_stream() -> TestStream:
    return (TestStream()
            .add_elements([{"user": "ann", "ts": 0, "amount": 5}, {"user": "bob", "ts": 2, "amount": 1}])
            .advance_processing_time(60)
            .add_elements([{"user": "ann", "ts": 40, "amount": 7}])
            .advance_watermark_to(100)
            .add_elements([{"user": "ann", "ts": 20, "amount": 3}])
            .advance_watermark_to_infinity())


def main() -> None:
    pd.set_option("display.width", 200)
    result = (windowed(clicks_stream(), time="ts", key="user")
              .sessions(30)
              .allowed_lateness(120)
              .trigger(AtWatermark().with_early_firings_every(1).with_late_firings_every(1))
              .accumulating_and_retracting()
              .run(total=Sum("amount"), clicks=Count()))
    print("Sessions of 30 time units per user; early firing per element, late firing per late element:\n")
    print(result.panes.to_string(index=False))
    print(f"\nDropped elements: {result.dropped_count}")


if __name__ == "__main__":
    main()
