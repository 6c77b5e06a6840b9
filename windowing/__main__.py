"""The main job, on an embedded local Spark: ``make demo`` (``python -m windowing``).

Click events arrive as CSV files in a directory. The file splitter streams
them in blocks (``storage.FileSplitter``), the engine groups each user's
clicks into sessions with early firings and retractions (``windowed``), and
the exactly-once file sink writes the panes as JSON lines
(``storage.FileSink``). The job runs with ``trigger(availableNow=True)`` three
times, once per arriving file, over a growing directory, restarting from its
checkpoint, then prints the finished files' rows.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd

from accumulations import Count, Sum
from storage import FileSink, FileSplitter
from storage.file_sink import RollingPolicy
from triggers import AtWatermark

from . import windowed

CLICKS = [  # user, seconds after 12:00, amount
    [("ann", 0, 5), ("bob", 10, 1), ("ann", 70, 7)],
    [("ann", 400, 2), ("bob", 30, 4), ("cy", 500, 9)],     # bob's click at 30 s is out of order
    [("ann", 1300, 1), ("bob", 1400, 6), ("cy", 1500, 3)],  # moves the watermark past the first sessions
]


def write_clicks(directory: Path, part: int) -> None:
    lines = [f"{user},2026-11-22 12:{s // 60:02d}:{s % 60:02d},{amount}" for user, s, amount in CLICKS[part]]
    (directory / f"clicks-{part}.csv").write_text("\n".join(lines) + "\n")


def local_spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must run this venv's Python
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")  # pyspark's pandas-3 notice, per worker
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("windowing-demo")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.python.unix.domain.socket.enabled", "true")  # docs/spark.md, "Python workers over TCP"
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("windowing.spark.buckets", "4")  # a session setting: the builder's launcher warns of non-Spark keys
    return spark


def run_once(spark, inbox: Path, outbox: Path, checkpoints: Path) -> None:
    from pyspark.sql import functions as F
    lines = FileSplitter(str(inbox), pattern=r".*\.csv", block_size="64B", blocks_per_batch=2).read_stream(spark)
    fields = F.split("value", ",")
    clicks = lines.select(fields[0].alias("user"), F.to_timestamp(fields[1]).alias("ts"),
                          fields[2].cast("long").alias("amount"))
    panes = (windowed(clicks, time="ts", key="user")
             .sessions("5 minutes")
             .watermark("1 minute")
             .allowed_lateness("10 minutes")
             .trigger(AtWatermark().with_early_firings_every(1).with_late_firings_every(1))
             .accumulating_and_retracting()
             .aggregate(total=Sum("amount"), clicks=Count()))
    sink = FileSink(str(outbox), format="jsonl").with_rolling_policy(RollingPolicy.on_every_batch())
    sink.start(panes, checkpoint_location=str(checkpoints), trigger={"availableNow": True}).awaitTermination()


def main() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")  # its pandas-3 notice
    work = Path(tempfile.mkdtemp(prefix="windowing-demo-"))
    inbox, outbox, checkpoints = work / "inbox", work / "panes", work / "checkpoints"
    inbox.mkdir()
    print(f"[1/4] starting a local Spark (work directory {work})", flush=True)
    spark = local_spark()
    for part in range(len(CLICKS)):
        write_clicks(inbox, part)
        print(f"[{part + 2}/4] clicks-{part}.csv arrived; running the query until it is caught up", flush=True)
        run_once(spark, inbox, outbox, checkpoints)
    order = ["user", "window_start", "window_end", "pane_index", "is_retraction"]  # each retraction after its pane
    panes = FileSink(str(outbox), format="jsonl").read().sort_values(order, ignore_index=True)
    pd.set_option("display.width", 200)
    columns = ["user", "window_start", "window_end", "total", "clicks", "timing", "pane_index", "is_retraction"]
    print("\nPanes in the sink's finished files (sessions of 5 minutes, early firing per click):\n")
    print(panes[columns].to_string(index=False))
    print("\nSessions whose end the watermark has not passed yet stay open in the checkpoint.")
    spark.stop()


if __name__ == "__main__":
    main()
