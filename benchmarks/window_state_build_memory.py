"""A Python worker's memory while it builds window state in the store: the building phase of
``window_state_spark.py`` without Spark, to see where the peak comes from.

    .venv/bin/python benchmarks/window_state_build_memory.py [--sessions 1000000] [--per-batch 10000]
        [--flush-entries N] [--flush-bytes SIZE] [--max-file-size SIZE]

One bucket of a `storage.KVStore` (its defaults unless given, fsync off) gets ``--sessions`` sessions of 10 values each
(`window_state_spill.session_spec`: ``ToList`` over sessions), ``--per-batch`` new sessions per micro-batch
in a random key order (as hashed keys arrive), each micro-batch one `windowing.window_state.keyed_step`
with the bucket opened afresh, as a Spark worker does. Printed every 10 micro-batches and whenever the peak
moves: the process's resident memory, its peak (``ru_maxrss``), the store's cached (unflushed) entries, its
data files and its block cache.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from window_state_spill import _empty, elements, session_spec  # noqa: E402

from storage import KVStore  # noqa: E402
from windowing.timeaxis import MIN_TIME  # noqa: E402
from windowing.window_state import keyed_step  # noqa: E402


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--per-batch", type=int, default=10_000)
    parser.add_argument("--flush-entries", type=int, default=None, help="the store's flush_entries (default: its own)")
    parser.add_argument("--flush-bytes", default=None, help="the store's flush_bytes (default: its own)")
    parser.add_argument("--max-file-size", default=None, help="the store's max_file_size (default: its own)")
    args = parser.parse_args()
    spec = session_spec()
    given = {"flush_entries": args.flush_entries, "flush_bytes": args.flush_bytes, "max_file_size": args.max_file_size}
    settings = {name: value for name, value in given.items() if value is not None}
    store = KVStore(tempfile.mkdtemp(prefix="window-state-build-"), fsync=False, **settings)
    order = np.random.default_rng(1).permutation(args.sessions).astype(np.int64)
    values = np.tile(np.arange(10, dtype=np.int64), args.per_batch)
    peak_before, total_cpu = 0.0, 0.0
    for batch in range(args.sessions // args.per_batch):
        keys = np.repeat(order[batch * args.per_batch:(batch + 1) * args.per_batch], 10)
        with store.open(0, take_over=True) as bucket:
            started = time.process_time()
            keyed_step(spec, _empty(spec), elements(keys, values, keys + values), MIN_TIME, 0, bucket, batch)
            cpu = time.process_time() - started
            cached, files = bucket.cached_entries, len(bucket.data_files)
        total_cpu += cpu
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if batch % 10 == 0 or peak > peak_before + 20:
            print(f"micro-batch {batch}: resident {resident_mib():.0f} MiB, peak {peak:.0f} MiB, cached entries {cached}, "
                  f"data files {files}, block cache {store.cache.nbytes / 2**20:.0f} MiB, CPU {cpu:.2f} s", flush=True)
        peak_before = peak
    print(f"peak {peak_before:.0f} MiB, CPU {total_cpu:.1f} s in all micro-batches", flush=True)


if __name__ == "__main__":
    main()
