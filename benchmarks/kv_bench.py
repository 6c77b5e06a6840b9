"""KVStore against rocksdict and sqlite3 (WAL mode), same work, same run.

Run: ``.venv/bin/python benchmarks/kv_bench.py [--keys N] [--batch B]`` (rocksdict
comes with ``pip install -e '.[bench]'``). Each engine runs in its own process
(its peak memory is that process's), on N keys of 16 bytes with 100-byte
values, random and monotonic:

- puts: N / B batches of B puts, one commit (transaction, write batch) each;
  the store's time includes its flushes and closing the bucket;
- cold gets: the database reopened (a cold block cache; the OS page cache
  stays warm), then N random existing keys read in batches of B, values
  returned in order;
- cached gets: the same reads again;
- scans: N / B range reads of B consecutive keys each (monotonic keys only,
  where a range has B keys).

Peak memory is the process's peak RSS; "of which the engine" takes off the
peak before the engine started (the benchmark's own lists of keys and values).

Durability: ``--sync`` commits with an fsync each (KVStore fsync=True,
rocksdict ``WriteOptions.sync``, sqlite ``synchronous=FULL``); by default all
three survive the process dying but not the machine (KVStore fsync=False,
rocksdict's default, sqlite's WAL with ``synchronous=NORMAL``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

KEY_BYTES, VALUE_BYTES = 16, 100


def make_keys(n: int, kind: str) -> list[bytes]:
    if kind == "monotonic":
        return [i.to_bytes(KEY_BYTES, "big") for i in range(n)]
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, (n, KEY_BYTES), dtype=np.uint8)
    return [bytes(row) for row in raw]


def make_values(n: int) -> list[bytes]:
    raw = np.random.default_rng(2).integers(0, 256, (n, VALUE_BYTES), dtype=np.uint8)
    return [bytes(row) for row in raw]


def disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


class KV:
    name = "KVStore"

    def __init__(self, path: str, sync: bool, arrow: bool) -> None:
        from storage import KVStore

        self.make = lambda: KVStore(path, fsync=sync)
        self.arrow = arrow
        if arrow:
            self.name = "KVStore (Arrow columns)"

    def column(self, items: list[bytes]) -> Any:
        if not self.arrow:
            return items
        import pyarrow as pa

        return pa.array(items, pa.binary())

    def put_batches(self, batches: list[tuple[list[bytes], list[bytes]]]) -> None:
        with self.make().open(0) as bucket:
            for batch_id, (keys, values) in enumerate(batches):
                bucket.begin(batch_id)
                bucket.put_many(self.column(keys), self.column(values))
                bucket.commit()
            bucket.flush()

    def open(self) -> None:
        self.bucket = self.make().open(0)

    def get_batches(self, batches: list[list[bytes]]) -> int:
        found = 0
        for keys in batches:
            values = self.bucket.get_many(self.column(keys))
            found += len(values) - (values.null_count if self.arrow else values.count(None))
        return found

    def scans(self, ranges: list[tuple[bytes, bytes]]) -> int:
        return sum(self.bucket.scan_table(lo, hi).num_rows for lo, hi in ranges)

    def close(self) -> None:
        self.bucket.close()


class Rocks:
    name = "rocksdict"

    def __init__(self, path: str, sync: bool) -> None:
        self.path, self.sync = path, sync

    def _db(self) -> Any:
        from rocksdict import Options, Rdict, WriteOptions

        db = Rdict(self.path, Options(raw_mode=True))
        options = WriteOptions()
        options.sync = self.sync
        db.set_write_options(options)
        return db

    def put_batches(self, batches: list[tuple[list[bytes], list[bytes]]]) -> None:
        from rocksdict import WriteBatch

        db = self._db()
        for keys, values in batches:
            batch = WriteBatch(raw_mode=True)
            for key, value in zip(keys, values):
                batch.put(key, value)
            db.write(batch)
        db.close()

    def open(self) -> None:
        self.db = self._db()

    def get_batches(self, batches: list[list[bytes]]) -> int:
        return sum(len(keys) - self.db.get(keys).count(None) for keys in batches)

    def scans(self, ranges: list[tuple[bytes, bytes]]) -> int:
        from rocksdict import ReadOptions

        rows = 0
        for lo, hi in ranges:
            options = ReadOptions()
            options.set_iterate_upper_bound(hi)
            rows += sum(1 for _ in self.db.items(from_key=lo, read_opt=options))
        return rows

    def close(self) -> None:
        self.db.close()


class Sqlite:
    name = "sqlite3 (WAL)"

    def __init__(self, path: str, sync: bool) -> None:
        os.makedirs(path, exist_ok=True)
        self.file, self.sync = os.path.join(path, "kv.db"), sync

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.file, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if self.sync else 'NORMAL'}")
        db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        return db

    def put_batches(self, batches: list[tuple[list[bytes], list[bytes]]]) -> None:
        db = self._db()
        for keys, values in batches:
            db.execute("BEGIN")
            db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", zip(keys, values))
            db.execute("COMMIT")
        db.close()

    def open(self) -> None:
        self.db = self._db()

    def get_batches(self, batches: list[list[bytes]]) -> int:
        found = 0
        for keys in batches:
            rows: dict[bytes, bytes] = {}
            for start in range(0, len(keys), 30_000):  # sqlite's limit on host parameters
                part = keys[start : start + 30_000]
                query = f"SELECT k, v FROM kv WHERE k IN ({','.join('?' * len(part))})"
                rows.update(self.db.execute(query, part).fetchall())
            found += sum(rows.get(k) is not None for k in keys)  # the values in the keys' order
        return found

    def scans(self, ranges: list[tuple[bytes, bytes]]) -> int:
        query = "SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k"
        return sum(len(self.db.execute(query, r).fetchall()) for r in ranges)

    def close(self) -> None:
        self.db.close()


ENGINES: dict[str, Callable[[str, bool], Any]] = {
    "kv": lambda path, sync: KV(path, sync, False), "kv-arrow": lambda path, sync: KV(path, sync, True),
    "rocksdict": lambda path, sync: Rocks(path, sync), "sqlite": lambda path, sync: Sqlite(path, sync)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run_engine(engine: str, kind: str, n: int, batch: int, sync: bool, path: str) -> dict[str, Any]:
    """One engine, one key kind, in this process."""
    keys, values = make_keys(n, kind), make_values(n)
    db = ENGINES[engine](path, sync)
    put_batches = [(keys[i : i + batch], values[i : i + batch]) for i in range(0, n, batch)]
    out: dict[str, Any] = {"engine": db.name, "keys": kind}
    out["data_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the benchmark's own lists
    out["put_s"], _ = timed(lambda: db.put_batches(put_batches))
    out["disk_bytes_per_key"] = disk_bytes(path) / n
    rng = np.random.default_rng(3)
    probe = [keys[i] for i in rng.integers(0, n, n)]
    get_batches = [probe[i : i + batch] for i in range(0, n, batch)]
    db.open()
    out["cold_get_s"], found = timed(lambda: db.get_batches(get_batches))
    assert found == n, f"{db.name} found {found} of {n} keys"
    out["cached_get_s"], found = timed(lambda: db.get_batches(get_batches))
    if kind == "monotonic":
        ranges = [(keys[i], keys[i + batch] if i + batch < n else b"\xff" * KEY_BYTES) for i in range(0, n, batch)]
        out["scan_s"], rows = timed(lambda: db.scans(ranges))
        assert rows == n, f"{db.name} scanned {rows} of {n} rows"
    db.close()
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--sync", action="store_true", help="fsync every commit in all three engines")
    parser.add_argument("--engines", default="kv,kv-arrow,rocksdict,sqlite")
    parser.add_argument("--kinds", default="random,monotonic")
    parser.add_argument("--repeat", type=int, default=1, help="run each engine this many times, keep the best figures")
    parser.add_argument("--one", nargs=2, metavar=("ENGINE", "KIND"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_engine(args.one[0], args.one[1], args.keys, args.batch, args.sync, args.dir)))
        return
    engines = args.engines.split(",")
    for engine in engines:
        if engine not in ENGINES:
            parser.error(f"--engines: {engine!r} is none of {', '.join(ENGINES)}")
        if engine == "rocksdict" and importlib.util.find_spec("rocksdict") is None:
            parser.error("--engines: rocksdict is not installed in this interpreter: install the bench extra "
                         "(.venv/bin/pip install -e '.[bench]') or leave it out (--engines kv,kv-arrow,sqlite)")
    results = []
    for kind in args.kinds.split(","):
        for engine in engines:
            runs = []
            for _ in range(args.repeat):  # on a shared machine the best of a few runs is the least disturbed
                directory = tempfile.mkdtemp(prefix=f"kvbench-{engine}-")
                try:
                    command = [sys.executable, __file__, "--one", engine, kind, "--dir", directory, "--keys",
                               str(args.keys), "--batch", str(args.batch)] + (["--sync"] if args.sync else [])
                    done = subprocess.run(command, capture_output=True, text=True)
                    if done.returncode:
                        sys.exit(f"{engine} ({kind} keys) failed:\n{done.stderr}")
                    runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
                    print(json.dumps(runs[-1]), file=sys.stderr)
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
            best = {k: min(r[k] for r in runs) if k.endswith("_s") else runs[0][k] for k in runs[0]}
            best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
            results.append(best)
    n = args.keys
    print(f"\n{n:,} keys of {KEY_BYTES} bytes, values of {VALUE_BYTES} bytes, batches of {args.batch:,}, "
          f"{'fsync per commit' if args.sync else 'no fsync'}, best of {args.repeat}; "
          "throughput in thousands of keys per second\n")
    print("| keys | engine | batched puts | cold batched gets | cached batched gets | scans | disk bytes/key "
          "| peak RSS MB | of which the engine |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        scan = f"{n / r['scan_s'] / 1e3:,.0f}" if "scan_s" in r else ""
        print(f"| {r['keys']} | {r['engine']} | {n / r['put_s'] / 1e3:,.0f} | {n / r['cold_get_s'] / 1e3:,.0f} | "
              f"{n / r['cached_get_s'] / 1e3:,.0f} | {scan} | {r['disk_bytes_per_key']:.0f} | {r['peak_rss_mb']:.0f} | "
              f"{r['peak_rss_mb'] - r.get('data_rss_mb', 0):.0f} |")


if __name__ == "__main__":
    main()
