"""The runner's streaming query on two executor JVMs (``local-cluster``), one killed mid-batch."""

from __future__ import annotations

import json
import os
import time

import pandas as pd
import pytest

from accumulations import Count, Sum
from tests import sparks
from windowing import windowed

from .cluster_query import BLOCK
from .helpers import assert_same_panes, events
from .streaming import mirror, write_batch

pytestmark = pytest.mark.spark

ROWS = [("a", 1, 5), ("b", 3, 1), ("c", 4, 2), ("d", 6, 1), ("a", 12, 7), ("c", 14, 2), ("b", 15, 4), ("d", 18, 1),
        ("a", 22, 3), ("b", 24, 9), ("c", 25, 1), ("d", 27, 2), ("a", 31, 8), ("b", 33, 1), ("c", 36, 3), ("d", 38, 4)]
# Key a's element of amount BLOCK arrives in the fourth file, beside open windows of every key.
PARTS = [events(ROWS[i:i + 4]) for i in range(0, len(ROWS), 4)]
PARTS[3] = events(ROWS[12:16] + [("a", 39, BLOCK)])
PARTS += [events([("a", 44, 1), ("b", 45, 2)]), events([("z", 300, 0)])]


@pytest.mark.parametrize("store", ["default", "rocksdb"])
def test_a_killed_executor_mid_batch_leaves_exactly_the_uninterrupted_panes(tmp_path, store):
    """SIGKILL to the executor JVM running key a's stateful task, inside that task: Spark runs the task
    again on the other executor (or the query restarts from its checkpoint), which loads the bucket's
    state from the checkpoint; the panes are exactly the pandas runner's over the same micro-batches. On
    Spark's default state store and on RocksDB with changelog checkpointing (docs/databricks.md's advice),
    where the other executor loads the bucket's state from the checkpoint's RocksDB files."""
    now = time.time()
    for i, part in enumerate(PARTS):  # one file per micro-batch, in this order (by modification time)
        write_batch(tmp_path / "in", i, part)
        os.utime(tmp_path / "in" / f"part-{i:05d}.parquet", (now - 100 + i, now - 100 + i))
    (tmp_path / "armed").touch()
    driver = sparks.start_driver("tests.spark_runner.cluster_query", str(tmp_path), store)
    try:
        alive = lambda: driver.poll() is None
        app = sparks.wait_for(lambda: (tmp_path / "app_id").exists() and (tmp_path / "app_id").read_text(),
                              "the application id", alive=alive)
        killed = int(sparks.wait_for(lambda: (tmp_path / "reached").exists() and (tmp_path / "reached").read_text(),
                                     "a task adding the blocking element", alive=alive))
        executors = sparks.executor_pids(app)
        assert killed in executors.values() and len(executors) == 2, (app, killed, executors)
        os.kill(killed, 9)
        _, stderr = driver.communicate(timeout=600)
        assert driver.returncode == 0, stderr[-4000:]
    finally:
        sparks.kill_driver(driver)

    ran = json.loads((tmp_path / "inputs.json").read_text())
    # A rerun of the killed batch's read counts its rows again: only which batches read rows is compared.
    assert sum(n > 0 for n in ran["inputs"]) == len(PARTS)

    panes = pd.concat([pd.read_parquet(p).assign(batch=int(p.name.split("=")[1]))
                       for p in sorted((tmp_path / "out").glob("batch=*"))], ignore_index=True)
    expected = mirror(PARTS, ran["inputs"], lambda s: windowed(s, time="ts", key="user").fixed("10 seconds")
                      .watermark("5 seconds").aggregate(total=Sum("amount"), n=Count()))
    assert_same_panes(panes.drop(columns=["batch", "executor"]), expected)
    blocked = panes[(panes["user"] == "a") & (panes["total"] >= BLOCK)]  # key a's window made after the kill
    assert len(blocked) == 1 and blocked["executor"].iloc[0] != killed  # on the other executor (or a new one)
    assert bool(list((tmp_path / "chk" / "state").rglob("*.changelog"))) == (store == "rocksdb")
