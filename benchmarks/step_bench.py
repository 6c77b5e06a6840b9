"""Milliseconds per call of the Spark runner's stateful function, without Spark.

    .venv/bin/python benchmarks/step_bench.py [--steps 100]

One call is what ``BucketStep.run_stream`` does for a bucket in a micro-batch:
decode the bucket's window table, take the new elements, run the engine step,
encode the table, and build the output panes. Shapes like the benchmark's
buckets (``spark_bench.py``, 32 buckets, 1k or 100k keys): session windows of
5 minutes, one minute of event time per micro-batch, the watermark 10 s
behind, and after each micro-batch the no-data one that fires the windows
the watermark passed. With packed rows the number of calls, not of rows, is
what the bucket count changes (docs/spark.md, "Key buckets"), so this is the
cost one more bucket adds to every micro-batch. No JVM: pyspark's own cost per
call (about 2 ms by our brief; not measured here) comes on top.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

MINUTE_US = 60_000_000


def ms_per_call(keys: int, elements: int, steps: int, seed: int = 1) -> tuple[float, float, int]:
    """Mean wall milliseconds of a call with ``elements`` new elements, and of the call without
    elements that follows in the next (no-data) micro-batch at the moved watermark, over ``steps``
    pairs after 20 warm-up pairs; and the open windows at the end."""
    from pyspark.sql import types as T

    from accumulations import Sum
    from windowing import windowed
    from windowing.engine import step
    from windowing.runners.spark import plan_spark
    from windowing.runners.spark.wire import WIRE

    schema = T.StructType([T.StructField("key", T.LongType()), T.StructField("ts", T.TimestampType()),
                           T.StructField("amount", T.LongType())])
    sample = pd.DataFrame({"key": [0], "ts": pd.to_datetime([0]), "amount": [0]})
    pipeline = windowed(sample, time="ts", key="key").sessions("5 minutes").watermark("10 seconds")
    adapter = plan_spark(pipeline.strategy(value=Sum("amount")), schema, 32, combine=False).adapter
    spec, rng, t0 = adapter.plan.spec, np.random.default_rng(seed), 1_700_000_000_000_000
    blob, spent, windows = adapter.save(adapter.fresh_state()), [0.0, 0.0], 0

    def call(frame: pd.DataFrame, watermark_us: int) -> float:
        nonlocal blob, windows
        began = time.perf_counter()
        new = adapter.elements([frame])
        result = step(spec, adapter.load(blob), new, watermark_us * 1000, 0)
        blob = adapter.save(result.state)
        adapter.output(result.panes, result.dropped, new)
        windows = len(result.state)
        return time.perf_counter() - began

    for i in range(20 + steps):
        micros = t0 + i * MINUTE_US + np.sort(rng.integers(0, MINUTE_US, elements))
        frame = pd.DataFrame({"_k0": rng.integers(0, keys, elements), "_t": micros,
                              "_v0": rng.integers(1, 100, elements)})
        for name in adapter.nullable:  # the stream's nullable Parquet columns arrive with their null flags: none null here
            frame[WIRE.null_flag(name)] = np.zeros(elements, dtype=bool)
        data = call(frame, t0 + i * MINUTE_US - 10_000_000)
        no_data = call(frame.iloc[:0], t0 + (i + 1) * MINUTE_US - 10_000_000)
        if i >= 20:
            spent[0], spent[1] = spent[0] + data, spent[1] + no_data
    return spent[0] / steps * 1000, spent[1] / steps * 1000, windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    print("| keys in the bucket | elements per call | ms per call with elements | ms per call without (next watermark) "
          "| open windows |")
    print("| --- | --- | --- | --- | --- |")
    for keys, elements in ((31, 500), (31, 15_600), (3_125, 15_600)):
        data, no_data, windows = ms_per_call(keys, elements, args.steps)
        print(f"| {keys:,} | {elements:,} | {data:.1f} | {no_data:.1f} | {windows:,} |", flush=True)


if __name__ == "__main__":
    main()
