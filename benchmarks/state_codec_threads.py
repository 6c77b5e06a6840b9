"""Milliseconds to encode and decode a bucket's state value on Arrow's thread pool and off it, by table size.

    .venv/bin/python benchmarks/state_codec_threads.py [--repeats 200]

`windowing.state_codec` compresses a table of at least ``THREADED_ROWS`` rows, and decompresses a body of at
least ``THREADED_BYTES`` bytes, on Arrow's thread pool, the rest on the calling thread. This times both ways for
tables of the window table's width (16 columns of int64 and bool, the key and bounds spread like real ones),
with the codec's thresholds forced to 0 (always the pool) or beyond the table (never): where the pool stops
paying is where the thresholds belong (the last column judges decoding by the whole value's bytes, a hundred or so
more than the body the codec judges). The bytes are the same either way (tests/spark_runner/test_state_codec.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from windowing import state_codec  # noqa: E402

ROWS = (31, 300, 1_000, 3_000, 10_000, 100_000)


def window_table(rows: int, seed: int = 1) -> pd.DataFrame:
    """A table shaped like a bucket's window table: a key, bounds, counters and flags (16 columns)."""
    rng = np.random.default_rng(seed)
    start = 1_700_000_000_000_000_000 + rng.integers(0, 600, rows) * 60_000_000_000
    table = {"_k0": rng.integers(0, 1 << 40, rows), "start": start, "end": start + 60_000_000_000}
    table.update({name: rng.integers(0, 2, rows).astype(bool) for name in
                  ("on_time_done", "closed", "held", "end_timer", "emitted")})
    table.update({"n_pending": rng.integers(0, 50, rows), "pane_index": rng.integers(0, 3, rows),
                  "last_timing": rng.integers(0, 3, rows).astype(np.int8), "a0.sum": rng.integers(0, 1 << 20, rows),
                  "a0.n": rng.integers(0, 50, rows)})
    table.update({f"t.{i}": rng.integers(0, 2, rows).astype(bool) for i in range(3)})
    return pd.DataFrame(table)


def ms_per_call(table: pd.DataFrame, on_the_pool: bool, repeats: int) -> tuple[float, float, int]:
    """Median milliseconds of `encode` and of `decode`, and the value's bytes, with the pool always or never."""
    state_codec.THREADED_ROWS = 0 if on_the_pool else len(table) + 1
    state_codec.THREADED_BYTES = 0 if on_the_pool else 1 << 62
    blob = state_codec.encode(table, 4)
    encoding, decoding = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        state_codec.encode(table, 4)
        encoding.append(time.perf_counter() - began)
        began = time.perf_counter()
        state_codec.decode(blob)
        decoding.append(time.perf_counter() - began)
    return statistics.median(encoding) * 1000, statistics.median(decoding) * 1000, len(blob)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200, help="calls timed per table and side (fewer beyond 10k rows)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    thresholds = state_codec.THREADED_ROWS, state_codec.THREADED_BYTES
    print(f"the codec's thresholds: {thresholds[0]:,} rows to encode, {thresholds[1]:,} bytes to decode on the pool")
    print("| rows | value bytes | encode ms, pool | encode ms, calling thread | decode ms, pool | decode ms, calling thread "
          "| the codec uses the pool to encode, to decode |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for rows in ROWS:
        table = window_table(rows)
        repeats = max(1, args.repeats // (10 if rows > 10_000 else 1))
        pool_encode, pool_decode, size = ms_per_call(table, True, repeats)
        own_encode, own_decode, _ = ms_per_call(table, False, repeats)
        used = f"{'yes' if rows >= thresholds[0] else 'no'}, {'yes' if size >= thresholds[1] else 'no'}"
        print(f"| {rows:,} | {size:,} | {pool_encode:.2f} | {own_encode:.2f} | {pool_decode:.2f} | {own_decode:.2f} | {used} |",
              flush=True)


if __name__ == "__main__":
    main()
