"""Speed of the pandas runner against a plain pandas groupby on the same data.

    .venv/bin/python benchmarks/engine_pandas.py [--events 5000000] [--keys 1000 100000] [--rounds 3]

Each case runs in a fresh subprocess so its peak memory (max RSS) is its own; its time is the
median of ``--rounds`` runs there.
Data: ``--events`` events over 4 hours, timestamps up to 30 s out of order,
uniformly random keys. Cases: fixed 1-minute windows with Sum and an
on-time trigger; 5-minute sessions with Sum; the same data through a
TestStream of 10 steps (streaming); and ``groupby([key, window]).sum()``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np
import pandas as pd

HOURS = 4


def make_events(n: int, keys: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = np.sort(rng.integers(0, HOURS * 3600 * 10**9, n))
    jitter = rng.integers(0, 30 * 10**9, n)  # up to 30 s out of order
    ts = pd.to_datetime(np.maximum(base - jitter, 0), unit="ns")
    return pd.DataFrame({"user": rng.integers(0, keys, n), "ts": ts, "amount": rng.integers(1, 100, n)})


def run_case(case: str, n: int, keys: int, rounds: int = 1) -> dict:
    """The median of ``rounds`` timed runs in this process: a run's time varies up to threefold with
    how much of its memory the allocator must fault in afresh from the OS, most often in the first."""
    df = make_events(n, keys)
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        out = _pipeline(case, df)
        seconds.append(time.perf_counter() - start)
    import resource
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"case": case, "keys": keys, "events": n, "seconds": statistics.median(seconds), "rows_out": len(out),
            "peak_mib": peak_mib}


def _pipeline(case: str, df: pd.DataFrame) -> pd.DataFrame | pd.Series:
    from accumulations import Sum
    from triggers import AtWatermark
    from windowing import TestStream, windowed

    if case == "groupby":
        window = df.ts.dt.floor("1min")
        out = df.groupby(["user", window])["amount"].sum()
    elif case == "fixed":
        out = windowed(df, time="ts", key="user").fixed("1 minute").trigger(AtWatermark()).aggregate(Sum("amount"))
    elif case == "sessions":
        out = windowed(df, time="ts", key="user").sessions("5 minutes").trigger(AtWatermark()).aggregate(Sum("amount"))
    elif case == "fixed-stream-10-steps":
        stream = TestStream()
        ordered = df.sort_values("ts").reset_index(drop=True)
        for bounds in np.array_split(np.arange(len(ordered)), 10):
            part = ordered.iloc[bounds[0]:bounds[-1] + 1]
            stream = stream.add_elements(part).advance_watermark_to(part.ts.max() - pd.Timedelta("1 minute"))
        out = windowed(stream, time="ts", key="user").fixed("1 minute").trigger(AtWatermark()).aggregate(Sum("amount"))
    else:
        raise SystemExit(f"unknown case {case!r}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--cases", nargs="+", default=["groupby", "fixed", "sessions", "fixed-stream-10-steps"])
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per case; the median is reported")
    parser.add_argument("--one", nargs=4, metavar=("CASE", "EVENTS", "KEYS", "ROUNDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_case(args.one[0], *map(int, args.one[1:]))))
        return
    results = []
    total = len(args.keys) * len(args.cases)
    for keys in args.keys:
        for case in args.cases:
            print(f"[{len(results) + 1}/{total}] {case} with {keys} keys ...", file=sys.stderr, flush=True)
            out = subprocess.run([sys.executable, __file__, "--one", case, str(args.events), str(keys), str(args.rounds)],
                                 check=True, capture_output=True, text=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("| keys | case | events/s | time vs groupby | peak MiB |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for r in results:
        base = next(b for b in results if b["keys"] == r["keys"] and b["case"] == "groupby")
        print(f"| {r['keys']:,} | {r['case']} | {r['events'] / r['seconds']:,.0f} | "
              f"{r['seconds'] / base['seconds']:.2f}x | {r['peak_mib']:,.0f} |")


if __name__ == "__main__":
    main()
