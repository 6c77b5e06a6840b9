"""Window state in a key-value store against the in-memory window table, same work, same run.

Run: ``.venv/bin/python benchmarks/window_state_spill.py [--sessions 20000 200000 2000000] [--batches 5]
[--touched K]``.

A streaming session job with ``ToList``: N open sessions (one per key, int64 keys), 10 values each,
then micro-batches that each add one element to 1% of the sessions (``--touched K``: to K sessions) (random keys, inside their
session: every touched session changes, none fires, none is purged). Per N and backend, in a
process of its own:

- ``memory``: the whole window table in memory, `windowing.engine.step` over it (what a pandas run,
  or a Spark worker after decoding its bucket's state row, holds and steps);
- ``store``: the light table in memory, payloads in a `storage.KVStore` (fsync off, default block
  cache of 256 MB), `windowing.window_state.spilled_step`, each micro-batch one committed batch.

The state is built in bulk (engine steps over chunks of sessions, the store's records put in
batches of 200k by a separate process), not event by event. Reported: the median micro-batch time
(wall, and the process's CPU time, which a loaded machine disturbs far less),
the first one's (the store's block cache starts empty in a new process: a worker's first micro-batch reads
the blocks it needs from the files), and the process's peak RSS (the in-memory table's build included:
that table is what it holds).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time

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
from windowing.state_codec import plain  # noqa: E402
from windowing.timeaxis import MIN_TIME, TimeAxis  # noqa: E402
from windowing.window_state import VERSION, heavy_columns, spilled_step, window_keys  # noqa: E402

GAP = 1_000
VALUES_PER_SESSION = 10
CHUNK = 100_000
PUT_BATCH = 200_000


def session_spec() -> EngineSpec:
    strategy = windowed(pd.DataFrame({"k": [0], "t": [0], "x": [0]}), time="t", key="k").sessions(GAP).strategy(ToList("x"))
    dtypes = {"k": np.dtype(np.int64), "t": np.dtype(np.int64), "x": np.dtype(np.int64)}
    return make_plan(strategy, TimeAxis.of("t", pd.Series([0])), dtypes).spec


def elements(keys: np.ndarray, times: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"_k0": keys, "_t": times, "_v0": pd.Series(values, dtype=object)})


def build_table(spec: EngineSpec, n: int) -> pd.DataFrame:
    """The window table of ``n`` sessions of 10 values each, stepped chunk by chunk of keys."""
    parts = []
    for first in range(0, n, CHUNK):
        keys = np.repeat(np.arange(first, min(first + CHUNK, n), dtype=np.int64), VALUES_PER_SESSION)
        offsets = np.tile(np.arange(VALUES_PER_SESSION, dtype=np.int64), len(keys) // VALUES_PER_SESSION)
        empty = step(spec, _empty(spec), elements(keys[:0], offsets[:0], offsets[:0]), MIN_TIME, 0).state
        parts.append(step(spec, empty, elements(keys, offsets, keys + offsets), MIN_TIME, 0).state)
    return pd.concat(parts, ignore_index=True)


def _empty(spec: EngineSpec) -> pd.DataFrame:
    from windowing.window_table import empty_state

    return empty_state(spec, [np.dtype(np.int64)])


def micro_batches(n: int, count: int, touched: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(7)
    return [elements(np.sort(rng.choice(n, touched, replace=False)).astype(np.int64),
                     np.full(touched, 5, dtype=np.int64), np.full(touched, 1_000_000 + b, dtype=np.int64))
            for b in range(count)]


def spill(spec: EngineSpec, n: int, path: str, light_path: str) -> None:
    """Build the table, put its payloads into the store at version 0, save the light table."""
    table = build_table(spec, n)
    heavy = heavy_columns(spec)
    keys = window_keys(0, spec, table)
    cells = zip(*[table[name].to_numpy() for name in heavy])
    values = [pickle.dumps(plain(row), protocol=4) for row in cells]
    with KVStore(path, fsync=False).open(0) as bucket:
        for batch, first in enumerate(range(0, n, PUT_BATCH)):
            bucket.begin(batch)
            bucket.put_many(pa.array([k + (0).to_bytes(8, "big") for k in keys[first:first + PUT_BATCH]], type=pa.binary()),
                            pa.array(values[first:first + PUT_BATCH], type=pa.binary()))
            bucket.commit()
        bucket.flush()
    light = table.drop(columns=heavy)
    light[VERSION] = np.zeros(n, dtype=np.int64)
    light.to_pickle(light_path)


def measure(backend: str, n: int, batches: int, touched: int, path: str, light_path: str,
            reopen: bool = False) -> dict[str, float]:
    spec = session_spec()
    inputs = micro_batches(n, batches, touched)
    times: list[float] = []
    cpu: list[float] = []
    if backend == "memory":
        table = build_table(spec, n)
        for frame in inputs:
            started, cpu_started = time.perf_counter(), time.process_time()
            table = step(spec, table, frame, MIN_TIME, 0).state
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
    else:
        light = pd.read_pickle(light_path)
        store = KVStore(path, fsync=False)
        kept = store.open(0) if not reopen else None
        for frame in inputs:
            started, cpu_started = time.perf_counter(), time.process_time()
            bucket = kept or store.open(0, take_over=True)  # --reopen: afresh each micro-batch, as a Spark worker
            light = spilled_step(spec, light, frame, MIN_TIME, 0, bucket, 0, bucket.committed_batch_id + 1).state
            if kept is None:
                bucket.close()
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        if kept is not None:
            kept.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"median_s": float(np.median(times)), "median_cpu_s": float(np.median(cpu)), "first_s": times[0],
            "peak_rss_mib": peak / 2**20}


def run(backend: str, n: int, batches: int, touched: int, reopen: bool) -> dict[str, float]:
    base = tempfile.mkdtemp(prefix="spill-bench-")
    try:
        path, light_path = os.path.join(base, "kv"), os.path.join(base, "light.pkl")
        if backend == "store":
            subprocess.run([sys.executable, __file__, "--child", "build", str(n), path, light_path], check=True)
        out = subprocess.run([sys.executable, __file__, "--child", backend, str(n), path, light_path, str(batches),
                              str(touched), str(int(reopen))],
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
    args = parser.parse_args()
    print(f"{'sessions':>10} {'touched':>8} {'backend':>8} {'micro-batch s':>14} {'cpu s':>7} {'first s':>8} "
          f"{'peak RSS MiB':>13}", flush=True)
    for n in args.sessions:
        touched = args.touched or max(1, n // 100)
        for backend in args.backends:
            result = run(backend, n, args.batches, touched, args.reopen)
            print(f"{n:>10} {touched:>8} {backend:>8} {result['median_s']:>14.3f} {result['median_cpu_s']:>7.3f} "
                  f"{result['first_s']:>8.3f} "
                  f"{result['peak_rss_mib']:>13.0f}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, n_given, store_path, light_file = sys.argv[2:6]
        if kind == "build":
            spill(session_spec(), int(n_given), store_path, light_file)
        else:
            print(json.dumps(measure(kind, int(n_given), int(sys.argv[6]), int(sys.argv[7]), store_path, light_file,
                                     bool(int(sys.argv[8])))))
    else:
        main()
