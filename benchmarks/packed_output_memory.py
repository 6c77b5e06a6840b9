"""Memory of the Spark runner's packed output (`windowing.runners.spark.worker.packed_output`) against the
pane frame it packs: what a task holds when it returns a micro-batch's panes packed.

    .venv/bin/python benchmarks/packed_output_memory.py [--panes 1000000]

The panes have the benchmark's shape (``spark_bench.py``'s fixed windows): an int64 key, window bounds and
sum, the timing as a categorical, the pane index and the retraction flag. Printed: bytes per pane of the
frame's columns and of the packed rows, traced by ``tracemalloc`` (NumPy and Python allocations).
"""

from __future__ import annotations

import argparse
import os
import sys
import tracemalloc

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from windowing.runners.spark.worker import packed_output  # noqa: E402


def panes(count: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    start = rng.integers(0, 10**12, count) // 60_000_000 * 60_000_000
    return pd.DataFrame({
        "key": rng.integers(0, 100_000, count),
        "window_start": start,
        "window_end": start + 60_000_000,
        "total": rng.integers(0, 10**6, count),
        "timing": pd.Categorical.from_codes(rng.integers(0, 3, count), categories=["EARLY", "ON_TIME", "LATE"]),
        "pane_index": rng.integers(0, 5, count),
        "is_retraction": rng.integers(0, 2, count).astype(bool),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--panes", type=int, default=1_000_000)
    args = parser.parse_args()
    tracemalloc.start()
    frame = panes(args.panes)
    frame_bytes = tracemalloc.get_traced_memory()[0]
    packed = list(packed_output([frame]))
    packed_bytes = tracemalloc.get_traced_memory()[0] - frame_bytes
    print(f"{args.panes:,} panes: the frame {frame_bytes / args.panes:.0f} bytes a pane, "
          f"packed ({len(packed)} rows) {packed_bytes / args.panes:.0f} bytes a pane")


if __name__ == "__main__":
    main()
