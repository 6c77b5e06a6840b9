"""What one vectorized KVStore call costs beyond its keys: get_many and put_many + commit, from 1 to 10,000 keys.

Run: ``.venv/bin/python benchmarks/kv_call_overhead.py [--keys N] [--repeat R]``. A bucket of N keys of 16
bytes with 100-byte values (flushed to data files, blocks cached) answers ``get_many`` of n random
existing keys, as a list of bytes and as an Arrow array; a batch of n puts is begun, written with
``put_many`` and committed (no fsync, no flush). In the same run, Python's ``sqlite3`` (WAL mode,
``synchronous=NORMAL``) does the same: ``SELECT ... WHERE k IN (...)`` in chunks of 500 (its limit on
parameters), and ``executemany`` of n upserts in one transaction. Each figure is the best of R calls (the machine may be loaded)
in microseconds; "per key" is the slope between 1,000 and 10,000 keys, "per call" the 1-key time.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from typing import Callable

import numpy as np
import pyarrow as pa

from storage import KVStore

SIZES = (1, 10, 100, 1_000, 10_000)


def best_us(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    if args.keys < max(SIZES):
        parser.error(f"--keys {args.keys:,} is fewer than the largest call's {max(SIZES):,} keys: its puts would "
                     f"have fewer values than keys; give --keys {max(SIZES):,} or more")
    rng = np.random.default_rng(7)
    keys = [bytes(k) for k in rng.integers(0, 256, (args.keys, 16), dtype=np.uint8)]
    values = [bytes(v) for v in rng.integers(0, 256, (args.keys, 100), dtype=np.uint8)]
    picks = {n: [keys[i] for i in rng.integers(0, args.keys, n)] for n in SIZES}
    fresh = {n: [bytes(k) for k in rng.integers(0, 256, (n, 16), dtype=np.uint8)] for n in SIZES}

    root = tempfile.mkdtemp(prefix="kv-overhead-")
    store = KVStore(os.path.join(root, "kv"), fsync=False, flush_entries=10**9, flush_batches=10**9)
    bucket = store.open(0)
    bucket.begin(0)
    bucket.put_many(keys, values)
    bucket.commit()
    bucket.flush()
    bucket.get_many(keys)  # every block cached
    batch_id = [0]

    def put_batch(n: int) -> None:
        batch_id[0] += 1
        bucket.begin(batch_id[0])
        bucket.put_many(fresh[n], values[:n])
        bucket.commit()

    db = sqlite3.connect(os.path.join(root, "sqlite.db"))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
    with db:
        db.executemany("INSERT INTO kv VALUES (?, ?)", zip(keys, values))

    def sqlite_get(ks: list[bytes]) -> list[bytes | None]:
        found: dict[bytes, bytes] = {}
        for i in range(0, len(ks), 500):
            chunk = ks[i:i + 500]
            found.update(db.execute(f"SELECT k, v FROM kv WHERE k IN ({','.join('?' * len(chunk))})", chunk))
        return [found.get(k) for k in ks]

    def sqlite_put(n: int) -> None:
        with db:
            db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", zip(fresh[n], values[:n]))

    rows = []
    for n in SIZES:
        arrow = pa.array(picks[n], pa.binary())
        assert bucket.get_many(picks[n]) == sqlite_get(picks[n])
        rows.append((n, {
            "get_many (list)": best_us(lambda n=n: bucket.get_many(picks[n]), args.repeat),
            "get_many (Arrow)": best_us(lambda arrow=arrow: bucket.get_many(arrow), args.repeat),
            "sqlite3 get": best_us(lambda n=n: sqlite_get(picks[n]), args.repeat),
            "put_many + commit": best_us(lambda n=n: put_batch(n), args.repeat),
            "sqlite3 put + commit": best_us(lambda n=n: sqlite_put(n), args.repeat),
        }))
    bucket.close()
    db.close()

    columns = list(rows[0][1])
    print("| keys per call | " + " | ".join(columns) + " |")
    print("| ---: | " + " | ".join("---:" for _ in columns) + " |")
    for n, figures in rows:
        print(f"| {n:,} | " + " | ".join(f"{figures[c]:,.0f}" for c in columns) + " |")
    by_size = dict(rows)
    slope = {c: (by_size[10_000][c] - by_size[1_000][c]) / 9_000 for c in columns}
    print("| per key (slope 1k to 10k) | " + " | ".join(f"{slope[c]:.2f}" for c in columns) + " |")
    print(f"\nmicroseconds, best of {args.repeat} calls; {args.keys:,} keys in the store; load average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
