"""Milliseconds per call of the Spark runner's stateful function, without Spark.

    .venv/bin/python benchmarks/step_bench.py [--steps 100] [--baseline REV --repeats 3]

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

``--baseline REV`` times the ``windowing/`` package of git revision ``REV`` too (as ``spark_bench.py``'s
``--baseline``), each shape ``--repeats`` times, the two sides taking turns: this machine's speed drifts by
a third between minutes, more than a change of a millisecond a call, so only sides timed side by side
compare. Each cell is then the median of the repeats.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

MINUTE_US = 60_000_000


def ms_per_call(keys: int, elements: int, steps: int, seed: int = 1, package: str = "windowing") -> tuple[float, float, int]:
    """Mean wall milliseconds of a call with ``elements`` new elements, and of the call without
    elements that follows in the next (no-data) micro-batch at the moved watermark, over ``steps``
    pairs after 20 warm-up pairs; and the open windows at the end. ``package``: the engine's package
    (`spark_bench.baseline_package` names another revision's)."""
    from pyspark.sql import types as T

    from accumulations import Sum

    windowed = importlib.import_module(package).windowed
    step = importlib.import_module(f"{package}.engine").step
    plan_spark = importlib.import_module(f"{package}.runners.spark").plan_spark
    WIRE = importlib.import_module(f"{package}.runners.spark.wire").WIRE

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
    parser.add_argument("--baseline", metavar="REV", default=None,
                        help="also time the windowing/ package of git revision REV, taking turns with this checkout's")
    parser.add_argument("--repeats", type=int, default=None,
                        help="times each shape per side, the sides taking turns (default 3 with --baseline, else 1)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/spark_bench"))
    args = parser.parse_args()
    repeats = (3 if args.baseline else 1) if args.repeats is None else args.repeats
    if repeats < 1:
        parser.error(f"--repeats must be at least 1, not {repeats}")
    sides = [("this checkout", "windowing")]
    if args.baseline:
        from spark_bench import baseline_package

        try:
            sides.append((f"at {args.baseline}", baseline_package(args.baseline, args.work)))
        except ValueError as err:
            parser.error(str(err))
    side_column = "| side " if len(sides) > 1 else ""
    print(f"{side_column}| keys in the bucket | elements per call | ms per call with elements | ms per call without "
          "(next watermark) | open windows |")
    print("| --- " * (5 + bool(side_column)) + "|")
    for keys, elements in ((31, 500), (31, 15_600), (3_125, 15_600)):
        timed: dict[str, list[tuple[float, float, int]]] = {name: [] for name, _ in sides}
        for repeat in range(repeats):
            for name, package in sides if repeat % 2 == 0 else sides[::-1]:
                timed[name].append(ms_per_call(keys, elements, args.steps, package=package))
        for name, _ in sides:
            data, no_data = (statistics.median(run[i] for run in timed[name]) for i in (0, 1))
            side = f"| {name} " if side_column else ""
            print(f"{side}| {keys:,} | {elements:,} | {data:.1f} | {no_data:.1f} | {timed[name][0][2]:,} |", flush=True)


if __name__ == "__main__":
    main()
