"""Where a micro-batch's Spark jobs spend their time, stage by stage: native Spark, the do-nothing floor, the engine.

    .venv/bin/python benchmarks/spark_stages.py --keys 1000 --windows fixed --rounds 3

``spark_bench.py`` times whole queries; this one reads Spark's event log of the same queries (same data, same
session settings, interleaved rounds) and splits each micro-batch's jobs into their two stages: the one before
the shuffle (the scan, and native's partial aggregation or the runner's ``mapInArrow`` fold; one task, since a
micro-batch is one Parquet file of one row group) and the stateful one after it (one task per shuffle
partition). For each it prints the median stage time (submission to completion) and the median task's wall
and JVM CPU milliseconds, over the micro-batches after the first (which plans the query), every round after
``--warmup-rounds`` not counted (default 1, as ``spark_bench.py``'s: the JVM's warm-up fell on the first side).
A second table splits the stateful task by Spark's own metrics of it (`STATEFUL_METRICS`): the rows' processing
with the exchanges with Python, the state store's commit, the time Python workers ran. ``--floor-no-timeout`` adds
``spark_bench.floor_no_timeout``, the folded floor without Spark's pass over timed-out keys: beside the folded
floor, what that pass costs a task. ``--floor-packed`` adds ``spark_bench.floor_packed``, the engine's own query whose
stateful call does nothing: beside the engine, what its step costs each stage. ``--conf KEY=VALUE`` sets a Spark
setting of the session, as in ``spark_bench.py``.

It also times what moving one micro-batch's rows into a Python worker and back costs by itself: a batch
query over one micro-batch's file written to the ``noop`` sink, once in the JVM only and once through a
``mapInArrow`` that returns nothing (median of ``--crossings`` runs each). Every runner that folds rows in
Python before the shuffle pays that crossing, which native Spark's partial aggregation does not.

``--baseline REV`` adds the engine of git revision ``REV`` as one more side (``spark_bench.baseline_package``): a
change to one stage shows there beside the same stage of the code before it, in the same session.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import spark_bench as bench  # noqa: E402

SIDE = "spark_stages.side"
BATCH = "streaming.sql.batchId"  # set by Structured Streaming on every job of a micro-batch
#: Spark's own metrics of a stateful task, milliseconds: the rows' processing (with a timeout, the timed-out keys'
#: too; on ``applyInPandasWithState`` the exchanges with the Python worker), the state store's commit, and the
#: time Python workers ran (logged by pyspark 4.3's Spark; none for native Spark's stateful operators).
STATEFUL_METRICS = ("time to update", "time to commit changes", "time to run Python workers")


def stage_times(log: Path, first_batch: int, last_batch: int) -> dict[str, dict[str, list[tuple[float, ...]]]]:
    """From the event log under ``log``: per side and stage (``before shuffle``, ``stateful``), the stage's wall
    milliseconds and its tasks' (wall, JVM CPU) milliseconds, for micro-batches ``first_batch..last_batch``; and
    per side, each stateful task's `STATEFUL_METRICS` (``stateful metrics``; None where the task has none)."""
    events = [json.loads(line) for path in sorted(log.rglob("*")) if path.is_file() and not path.name.startswith(".")
              and "appstatus" not in path.name for line in path.read_text().splitlines()]
    stage_of: dict[int, tuple[str, str]] = {}  # stage id: (side, kind)
    for event in events:
        if event["Event"] == "SparkListenerJobStart":
            properties = event.get("Properties", {})
            side, batch = properties.get(SIDE), properties.get(BATCH)
            if side is None or batch is None or not first_batch <= int(batch) <= last_batch:
                continue
            for info in event["Stage Infos"]:
                kind = "stateful" if info["Parent IDs"] else "before shuffle"
                stage_of[info["Stage ID"]] = (side, kind)
    out: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for event in events:
        if event["Event"] == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            if info["Stage ID"] in stage_of and "Submission Time" in info:
                side, kind = stage_of[info["Stage ID"]]
                out[side][f"{kind} stage"].append((info["Completion Time"] - info["Submission Time"],))
        elif event["Event"] == "SparkListenerTaskEnd" and event["Stage ID"] in stage_of:
            side, kind = stage_of[event["Stage ID"]]
            task, metrics = event["Task Info"], event["Task Metrics"]
            out[side][f"{kind} task"].append((task["Finish Time"] - task["Launch Time"], metrics["Executor CPU Time"] / 1e6))
            if kind == "stateful":
                updates = {item["Name"]: item.get("Update") for item in task.get("Accumulables", [])}
                out[side]["stateful metrics"].append(tuple(
                    None if updates.get(name) is None else float(updates[name]) for name in STATEFUL_METRICS))
    return out


def stateful_row(side: str, tasks: list[tuple[float, ...]], metrics: list[tuple[float | None, ...]]) -> dict[str, object]:
    """A side's stateful tasks, median wall milliseconds and median of each of `STATEFUL_METRICS`."""
    row: dict[str, object] = {"side": side, "task wall ms": round(float(np.median([t[0] for t in tasks])))}
    for i, name in enumerate(STATEFUL_METRICS):
        values = [m[i] for m in metrics if m[i] is not None]
        row[f"{name} ms"] = round(float(np.median(values))) if values else "-"
    return row


def crossing_ms(spark, file: Path, runs: int) -> tuple[float, float]:
    """Median milliseconds of a batch query over ``file`` to the ``noop`` sink: in the JVM only, and through a
    ``mapInArrow`` that takes every row into Python and returns none."""
    rows = spark.read.parquet(str(file))

    def nothing(batches):
        for batch in batches:
            yield batch.slice(0, 0)

    through_python = rows.mapInArrow(nothing, rows.schema)
    times: dict[str, list[float]] = {"jvm": [], "python": []}
    for run in range(runs + 2):  # two to warm up
        for name, frame in (("jvm", rows), ("python", through_python)):
            began = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            if run >= 2:
                times[name].append((time.perf_counter() - began) * 1000)
    return float(np.median(times["jvm"])), float(np.median(times["python"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--windows", choices=["fixed", "sessions"], default="fixed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="rounds run first and not counted (default 1), as spark_bench.py's")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--crossings", type=int, default=10)
    parser.add_argument("--work", type=Path, default=Path("/tmp/spark_bench"))
    parser.add_argument("--baseline", metavar="REV", default=None,
                        help="also run the engine of git revision REV (its windowing/ package) beside this checkout's")
    parser.add_argument("--floor-no-timeout", action="store_true",
                        help="also run spark_bench.floor_no_timeout: the folded floor without Spark's timeout pass")
    parser.add_argument("--floor-packed", action="store_true",
                        help="also run spark_bench.floor_packed: the engine's query with a stateful call that does nothing")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the session (repeatable), as spark_bench.py's --conf")
    args = parser.parse_args()
    for name, value in (("--events", args.events), ("--keys", args.keys), ("--rounds", args.rounds),
                        ("--shuffle-partitions", args.shuffle_partitions), ("--crossings", args.crossings)):
        if value < 1:
            parser.error(f"{name} {value}: give at least 1")
    if args.warmup_rounds < 0:
        parser.error(f"--warmup-rounds {args.warmup_rounds}: give 0 or more")
    if args.batches < 3:
        parser.error(f"--batches {args.batches}: give at least 3 (the first micro-batch plans the query and is left out)")
    try:
        builder_settings, session_settings = bench.split_settings(args.conf)
    except ValueError as err:
        parser.error(str(err))

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Spark's workers unpickle the sides' functions by reference to this directory's spark_bench module.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    try:
        baseline = bench.baseline_package(args.baseline, args.work) if args.baseline else None  # before the workers start
    except ValueError as err:
        parser.error(str(err))
    from pyspark.sql import SparkSession

    log = args.work / "event-log"
    shutil.rmtree(log, ignore_errors=True)
    shutil.rmtree(args.work / "chk", ignore_errors=True)  # the checkpoints of an earlier run (`spark_bench.run_query`)
    log.mkdir(parents=True)
    builder = (SparkSession.builder.master("local[2]").appName("spark_stages")
               .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "3g")
               .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", str(log))
               .config("spark.eventLog.compress", "false"))
    for key, value in builder_settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in session_settings.items():
        spark.conf.set(key, value)
    # The settings as the session holds them (read back, as spark_bench.py prints them).
    settings = "".join(f", {key}={spark.conf.get(key, None)}" for key in [*builder_settings, *session_settings])
    spark.sparkContext.setLogLevel("ERROR")

    sessions = args.windows == "sessions"
    data = bench.make_data(args.work, args.events, args.keys, args.batches, sessions)
    sides = [("native", bench.native_sessions if sessions else bench.native_fixed),
             ("floor folded", bench.floor_folded),
             ("engine", bench.engine_sessions if sessions else bench.engine_fixed)]
    if args.floor_no_timeout:
        sides.insert(2, ("floor no timeout", bench.floor_no_timeout))
    if args.floor_packed:
        sides.insert(-1, ("floor packed", bench.floor_packed(args.windows)))
    if baseline is not None:
        sides.append((f"engine at {args.baseline}", bench.engine_at(baseline)(args.windows)))
    for round_, name, counted in bench.planned_rounds(args.warmup_rounds, args.rounds):
        for side, build in sides if round_ % 2 == 0 else sides[::-1]:
            # The query's thread inherits the label, so its jobs carry it; a warm-up round's jobs go unlabelled,
            # and `stage_times` leaves them out.
            spark.sparkContext.setLocalProperty(SIDE, side if counted else None)
            bench.run_query(spark, data, build, args.work / "chk")
        print(f"{name} done", flush=True)
    spark.sparkContext.setLocalProperty(SIDE, None)
    jvm, python = crossing_ms(spark, sorted(data.glob("*.parquet"))[0], args.crossings)
    spark.stop()
    shutil.rmtree(args.work / "chk", ignore_errors=True)

    times = stage_times(log, 1, args.batches - 1)
    print(f"\n{args.events} events, {args.keys} keys, {args.windows} windows, {args.batches} micro-batches, local[2], "
          f"{args.shuffle_partitions} shuffle partitions; medians over micro-batches 1 to {args.batches - 1} "
          f"of {args.rounds} interleaved rounds after {args.warmup_rounds} not counted"
          + settings)
    rows = []
    for side, _ in sides:
        row: dict[str, object] = {"side": side}
        for kind in ("before shuffle", "stateful"):
            stages, tasks = times[side][f"{kind} stage"], times[side][f"{kind} task"]
            row[f"{kind}: stage ms"] = round(float(np.median([s[0] for s in stages])))
            row[f"{kind}: task wall ms"] = round(float(np.median([t[0] for t in tasks])))
            row[f"{kind}: task JVM CPU ms"] = round(float(np.median([t[1] for t in tasks])))
        rows.append(row)
    print(bench.table(rows))
    print("\nthe stateful tasks by Spark's own metrics (median ms per task; time to update: the rows and the timed-out "
          "keys, with the Python exchanges; \"-\": the side's tasks have no such metric)")
    print(bench.table([stateful_row(side, times[side]["stateful task"], times[side]["stateful metrics"])
                       for side, _ in sides]))
    print(f"\none micro-batch's file ({args.events // args.batches} rows) to the noop sink, batch query, median of "
          f"{args.crossings}: {jvm:.0f} ms in the JVM only, {python:.0f} ms through a mapInArrow returning nothing")


if __name__ == "__main__":
    main()
