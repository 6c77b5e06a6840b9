"""Streaming checkpoints written by the Spark runner of d7403b6, whose window tables held timestamp keys and
built-ins' timestamp values (a Min, a ToList) as wall times in the session zone; today's tables hold them as UTC
wall times, exact, and say so in their state rows (`pipelines.EXACT_INSTANTS`). `test_old_checkpoints.py`
restarts these in the same zone: a bucket written the old way must go on the old way, its new rows one key with
its old ones, its values given back as the instants they were.

The session zone is America/Los_Angeles, and the instants are summer ones, of 2024 and of 2041 (after 2037, where
pytz's rules, which pyspark 3.5's pandas uses, know no daylight saving), a null among them. None is in the hour the
clocks go back, which the old tables could not keep apart: the panes are the pandas runner's.

Made with the code of d7403b6, once per pyspark the tests run on::

    git worktree add /tmp/old d7403b6
    PYTHONPATH=/tmp/old .venv/bin/python tests/spark_runner/data/wall_time_checkpoints.py
    PYTHONPATH=/tmp/old .venv-spark35/bin/python tests/spark_runner/data/wall_time_checkpoints.py
    git worktree remove --force /tmp/old

Each writes ``wall-times-<pyspark major.minor>/<case>/``: ``checkpoint/``, the query's, ``store/``, the windows'
KVStore where the case keeps them there, and ``old.json``: the rows each micro-batch read and the panes it emitted
(timestamps as epoch microseconds).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("old_checkpoints", HERE / "old_checkpoints.py")
old = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(old)

ZONE = "America/Los_Angeles"
SCHEMA = "k timestamp, ts timestamp, v timestamp"
EPOCH = dt.datetime(2024, 1, 1)
SUMMER = dt.datetime(2024, 7, 4, 19)  # 12:00 in Los Angeles
LATE_SUMMER = dt.datetime(2041, 7, 1, 16)  # 09:00 in Los Angeles, daylight saving time by zoneinfo's rules
KEYS = {"a": SUMMER, "b": LATE_SUMMER, "n": None}
VALUES = {"s": SUMMER, "s1": SUMMER + dt.timedelta(microseconds=1), "l": LATE_SUMMER, "n": None}

# (key, seconds after EPOCH, value): the watermark trails the largest time by 5 s.
BEFORE = [
    [("a", 1, "s"), ("b", 2, "l"), ("n", 3, "s1"), ("a", 4, "n"), ("b", 12, "s")],
    [("a", 17, "l"), ("b", 21, "n"), ("n", 22, "s")],  # the watermark passes 10 s
    [("a", 31, "s1"), ("b", 32, "s"), ("n", 33, "l")],
]  # stopped at watermark 28 s: windows from 20 s on stay open in the state
AFTER = [
    [("a", 34, "l"), ("b", 35, "s1"), ("n", 36, "n")],
    [("b", 37, "l"), ("a", 38, "s")],
    [("a", 100, "s")],  # the watermark passes every window but this one's
]

# case: (aggregations, windowing.spark.combine, windows in a KVStore, windows): lifted (Counts only: the keys),
# packed and unpacked rows, packed with `.window_state(store)` (its record keys are spelled from the keys the workers
# hold), and sessions that fire early and retract (their tables hold the last outputs too)
CASES = {"keys-lifted": ("counts", "true", False, "fixed"), "values-packed": ("values", "true", False, "fixed"),
         "values-rows": ("values", "false", False, "fixed"), "values-store": ("values", "true", True, "fixed"),
         "sessions-retracting": ("values", "true", False, "sessions")}


def pipeline(stream, case: str, store: Path | None = None):
    """The windowed aggregation of ``case`` over ``stream`` (a Spark stream, or a TestStream), with its windows in
    a KVStore at ``store`` where the case says so."""
    from accumulations import Count, Max, Min, ToList
    from storage import KVStore
    from triggers import AtWatermark
    from windowing import windowed

    w = windowed(stream, time="ts", key="k").watermark("5 seconds")
    if CASES[case][3] == "sessions":
        w = w.sessions("10 seconds").trigger(AtWatermark().with_early_firings_every(1)).accumulating_and_retracting()
    else:
        w = w.fixed("10 seconds")
    if CASES[case][2] and store is not None:
        w = w.window_state(KVStore(str(store)))
    if CASES[case][0] == "counts":
        return w.aggregate(n=Count("v"), rows=Count())
    return w.aggregate(lo=Min("v"), hi=Max("v"), all=ToList("v"), n=Count("v"))


def frame(rows, zoned: bool = True):
    """Rows as a pandas frame: ``zoned``, UTC instants, as written to a source file; else naive UTC wall times,
    as the pandas runner takes them."""
    import pandas as pd

    def column(times):
        naive = pd.Series(times, dtype="datetime64[us]")
        return naive.dt.tz_localize("UTC") if zoned else naive

    keys, secs, values = zip(*rows) if rows else ((), (), ())
    return pd.DataFrame({"k": column([KEYS[k] for k in keys]),
                         "ts": column([EPOCH + dt.timedelta(seconds=s) for s in secs]),
                         "v": column([VALUES[v] for v in values])})


def run(spark, case: str, source: Path, checkpoint: Path, parts) -> tuple[list[int], list[dict]]:
    """`old_checkpoints.run` of ``case``'s query in the session zone `ZONE`, its windows in a KVStore beside
    ``checkpoint`` where the case says so; the panes' timestamps as epoch microseconds."""
    from pyspark.sql import functions as F

    instants = ("k", "window_start", "window_end", "lo", "hi", "all")

    def collected(batch):
        micros = [F.transform(c, F.unix_micros).alias(c) if c == "all" else F.unix_micros(c).alias(c)
                  for c in instants if c in batch.columns]
        return [r.asDict() for r in batch.select(*micros, *[c for c in batch.columns if c not in instants]).collect()]

    spark.conf.set("spark.sql.session.timeZone", ZONE)
    try:
        return old.run(spark, case, source, checkpoint, parts, build=lambda s, c: pipeline(s, c, checkpoint.parent / "store"),
                       combine=CASES[case][1], schema=SCHEMA, framed=frame, collected=collected)
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def main() -> None:
    old.write_fixtures("wall-times", CASES, lambda spark, case, source, checkpoint: run(spark, case, source, checkpoint, BEFORE))


if __name__ == "__main__":
    main()
