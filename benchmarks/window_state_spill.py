"""Window state in a key-value store against the in-memory window table, same work, same run.

Run: ``.venv/bin/python benchmarks/window_state_spill.py [--sessions 20000 200000 2000000] [--batches 5]
[--touched K] [--reopen] [--block-cache 256MB]``.

A streaming session job with ``ToList``: N open sessions (one per key, int64 keys), 10 values each,
then micro-batches that each add one element to 1% of the sessions (``--touched K``: to K sessions) (random keys, inside their
session: every touched session changes, none fires, none is purged). Per N and backend, in a
process of its own:

- ``memory``: the whole window table in memory, `windowing.engine.step` over it (what a pandas run,
  or a Spark worker after decoding its bucket's state row, holds and steps);
- ``store``: the window table in a `storage.KVStore` (fsync off, block cache ``--block-cache``: the store's
  default of 256 MB unless given), one
  record per key and the timer index, `windowing.window_state.keyed_step`, each micro-batch one
  committed batch; the process holds no table.

The state is built in bulk (engine steps over chunks of 100k sessions, each chunk's records and
index entries put as one batch by a separate process), not event by event. Reported: the median micro-batch time
(wall, and the process's CPU time, which a loaded machine disturbs far less),
the first one's (the store's block cache starts empty in a new process: a worker's first micro-batch reads
the blocks it needs from the files), and the process's peak RSS (the in-memory table's build included:
that table is what it holds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from accumulations import ToList  # noqa: E402
from storage import KVStore  # noqa: E402
from windowing import windowed  # noqa: E402
from windowing.engine import step  # noqa: E402
from windowing.plan import make_plan  # noqa: E402
from windowing.spec import EngineSpec  # noqa: E402
from windowing.timeaxis import MIN_TIME, TimeAxis  # noqa: E402
from windowing.window_state import RECORD, keyed_step, records_of  # noqa: E402
from windowing.window_table import empty_state  # noqa: E402

GAP = 1_000
VALUES_PER_SESSION = 10
CHUNK = 100_000


def session_spec() -> EngineSpec:
    strategy = windowed(pd.DataFrame({"k": [0], "t": [0], "x": [0]}), time="t", key="k").sessions(GAP).strategy(ToList("x"))
    dtypes = {"k": np.dtype(np.int64), "t": np.dtype(np.int64), "x": np.dtype(np.int64)}
    return make_plan(strategy, TimeAxis.of("t", pd.Series([0])), dtypes).spec


def elements(keys: np.ndarray, times: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"_k0": keys, "_t": times, "_v0": pd.Series(values, dtype=object)})


def table_chunks(spec: EngineSpec, n: int) -> Iterator[pd.DataFrame]:
    """The window table of ``n`` sessions of 10 values each, stepped chunk by chunk of keys."""
    for first in range(0, n, CHUNK):
        keys = np.repeat(np.arange(first, min(first + CHUNK, n), dtype=np.int64), VALUES_PER_SESSION)
        offsets = np.tile(np.arange(VALUES_PER_SESSION, dtype=np.int64), len(keys) // VALUES_PER_SESSION)
        yield step(spec, _empty(spec), elements(keys, offsets, keys + offsets), MIN_TIME, 0).state


def _empty(spec: EngineSpec) -> pd.DataFrame:
    return empty_state(spec, [np.dtype(np.int64)])


def micro_batches(n: int, count: int, touched: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(7)
    return [elements(np.sort(rng.choice(n, touched, replace=False)).astype(np.int64),
                     np.full(touched, 5, dtype=np.int64), np.full(touched, 1_000_000 + b, dtype=np.int64))
            for b in range(count)]


def spill(spec: EngineSpec, n: int, path: str) -> None:
    """Build the table chunk by chunk, each chunk's records and index entries one batch of the store."""
    with KVStore(path, fsync=False).open(0) as bucket:
        for batch, table in enumerate(table_chunks(spec, n)):
            keys, values = [], []
            for key, record in records_of(spec, table, 0).items():
                entries = record.index(key)
                keys += [RECORD + key, *entries]
                values += [record.encoded(), *[b""] * len(entries)]
            bucket.begin(batch)
            bucket.put_many(pa.array(keys, type=pa.binary()), pa.array(values, type=pa.binary()))
            bucket.commit()
        bucket.flush()


def measure(backend: str, n: int, batches: int, touched: int, path: str, reopen: bool, block_cache: str) -> dict[str, float]:
    spec = session_spec()
    inputs = micro_batches(n, batches, touched)
    times: list[float] = []
    cpu: list[float] = []
    if backend == "memory":
        table = pd.concat(list(table_chunks(spec, n)), ignore_index=True)
        for frame in inputs:
            started, cpu_started = time.perf_counter(), time.process_time()
            table = step(spec, table, frame, MIN_TIME, 0).state
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
    else:
        template = _empty(spec)
        store = KVStore(path, fsync=False, block_cache=block_cache)
        kept = store.open(0) if not reopen else None
        for frame in inputs:
            started, cpu_started = time.perf_counter(), time.process_time()
            bucket = kept or store.open(0, take_over=True)  # --reopen: afresh each micro-batch, as a Spark worker
            keyed_step(spec, template, frame, MIN_TIME, 0, bucket, bucket.committed_batch_id + 1)
            if kept is None:
                bucket.close()
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        if kept is not None:
            kept.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"median_s": float(np.median(times)), "median_cpu_s": float(np.median(cpu)), "first_s": times[0],
            "peak_rss_mib": peak / 2**20}


def run(backend: str, n: int, batches: int, touched: int, reopen: bool, block_cache: str) -> dict[str, float]:
    base = tempfile.mkdtemp(prefix="spill-bench-")
    try:
        path = os.path.join(base, "kv")
        if backend == "store":
            subprocess.run([sys.executable, __file__, "--child", "build", str(n), path], check=True)
        out = subprocess.run([sys.executable, __file__, "--child", backend, str(n), path, str(batches),
                              str(touched), str(int(reopen)), block_cache],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[20_000, 200_000, 2_000_000])
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["memory", "store"])
    parser.add_argument("--touched", type=int, default=None,
                        help="sessions each micro-batch touches (default: 1%% of the open sessions)")
    parser.add_argument("--reopen", action="store_true",
                        help="open the store's bucket afresh for each micro-batch, as a Spark worker does (store only)")
    parser.add_argument("--block-cache", default="256MB", help="the store's block cache (store only)")
    args = parser.parse_args()
    print(f"{'sessions':>10} {'touched':>8} {'backend':>8} {'micro-batch s':>14} {'cpu s':>7} {'first s':>8} "
          f"{'peak RSS MiB':>13}", flush=True)
    for n in args.sessions:
        touched = args.touched or max(1, n // 100)
        for backend in args.backends:
            result = run(backend, n, args.batches, touched, args.reopen, args.block_cache)
            print(f"{n:>10} {touched:>8} {backend:>8} {result['median_s']:>14.3f} {result['median_cpu_s']:>7.3f} "
                  f"{result['first_s']:>8.3f} "
                  f"{result['peak_rss_mib']:>13.0f}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, n_given, store_path = sys.argv[2:5]
        if kind == "build":
            spill(session_spec(), int(n_given), store_path)
        else:
            print(json.dumps(measure(kind, int(n_given), int(sys.argv[5]), int(sys.argv[6]), store_path,
                                     bool(int(sys.argv[7])), sys.argv[8])))
    else:
        main()
