"""Streaming checkpoints written by the Spark runner of 04d14e3, whose window tables numbered the state
of nested triggers by position (``t.0.0.count``); since issue 15 it is named by role
(``t.early.count``). `test_old_checkpoints.py` restarts them with today's code.

Each case runs `BEFORE` through that code, one file per micro-batch, and stops with windows open in
both phases of ``AfterWatermark``: counting early elements, and (after their ON_TIME pane) counting
late ones towards ``AfterCount(3)``. The trigger nests ``Repeatedly`` and ``OrFinally`` in the early
and late roles, so every kind of renamed prefix is in the table. The test feeds `AFTER`: the late
counts must carry over, or the late panes come out later than the pandas runner's.

Made with the code of 04d14e3, once per pyspark the tests run on::

    git worktree add /tmp/old 04d14e3
    PYTHONPATH=/tmp/old .venv/bin/python tests/spark_runner/data/numbered_checkpoints.py
    PYTHONPATH=/tmp/old .venv-spark35/bin/python tests/spark_runner/data/numbered_checkpoints.py
    git worktree remove --force /tmp/old

Each writes ``numbered-<pyspark major.minor>/<case>/``: ``checkpoint/``, the query's, and ``old.json``:
the rows each micro-batch read and the panes it emitted (see `old_checkpoints`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("old_checkpoints", HERE / "old_checkpoints.py")
old = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(old)

# (key, seconds after old.EPOCH, value); the watermark trails the largest time by 5 s.
BEFORE = [
    [(1, 1, 1), (1, 2, 2), (2, 3, 4), (None, 4, 8), (2, 12, 16)],  # key 1 fires EARLY in [0,10)
    [(1, 25, 32)],                                                 # the watermark passes 20 s: ON_TIME panes
    [(1, 5, 64), (2, 6, 128), (2, 7, 256), (None, 14, 512), (3, 28, 0)],  # late: key 1 counts 1, key 2 counts 2
]  # key 3 moves the watermark to 23 s, so a data-less batch ends the run (a restart replays none of it)
AFTER = [
    [(1, 8, 1024), (2, 9, 2048)],  # key 2's third late element: LATE
    [(1, 3, 4096), (None, 38, 8192)],  # key 1's third: LATE
    [(3, 100, 0)],  # the watermark passes every window but this one's
]
CASES = {"fixed-numbered": "fixed", "sessions-numbered": "sessions"}


def pipeline(stream, case: str):
    """The windowed aggregation of ``case`` over ``stream`` (a Spark stream, or a TestStream)."""
    from accumulations import Count, Sum
    from triggers import AfterCount, AfterWatermark, OrFinally, Repeatedly
    from windowing import windowed

    w = windowed(stream, time="ts", key="k").watermark("5 seconds").allowed_lateness("60 seconds")
    w = w.fixed("10 seconds") if CASES[case] == "fixed" else w.sessions("10 seconds")
    trigger = AfterWatermark(early=Repeatedly(AfterCount(2)), late=OrFinally(AfterCount(3), until=AfterCount(5)))
    return w.trigger(trigger).accumulating().aggregate(total=Sum("v"), n=Count())


def main() -> None:
    old.write_fixtures("numbered", CASES, lambda spark, case, source, checkpoint: old.run(
        spark, case, source, checkpoint, BEFORE, build=pipeline, combine="true"))


if __name__ == "__main__":
    main()
