"""The splitter's Spark source on two executor JVMs (``local-cluster``), one killed mid-batch."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

import pandas as pd
import pytest

from tests import sparks

from .cluster_read import GATED

pytestmark = pytest.mark.spark


def test_a_killed_executor_mid_batch_leaves_every_line_read_exactly_once(tmp_path):
    """SIGKILL to an executor JVM inside a task of a micro-batch that is not the first: Spark runs the
    task again on the other executor (or the query restarts from its checkpoint), reading the same
    blocks, since a batch's blocks are fixed in its offset; every line lands exactly once."""
    (tmp_path / "in").mkdir()
    expected = []
    for f in range(4):
        rows = [f"file{f} line{i} " + "x" * (i % 37) for i in range(400)]
        (tmp_path / "in" / f"part{f}.txt").write_text("\n".join(rows) + "\n")
        expected += [(str(tmp_path / "in" / f"part{f}.txt"), row) for row in rows]
    (tmp_path / "armed").touch()
    driver = sparks.start_driver("tests.splitter.cluster_read", str(tmp_path))
    try:
        alive = lambda: driver.poll() is None  # noqa: E731
        app = sparks.wait_for(lambda: (tmp_path / "app_id").exists() and (tmp_path / "app_id").read_text(),
                              "the application id", alive=alive)
        killed = int(sparks.wait_for(lambda: (tmp_path / "reached").exists() and (tmp_path / "reached").read_text(),
                                     f"a task of micro-batch {GATED} at the gate", alive=alive))
        executors = sparks.executor_pids(app)
        assert killed in executors.values() and len(executors) == 2, (app, killed, executors)
        os.kill(killed, signal.SIGKILL)
        _, stderr = driver.communicate(timeout=600)
        assert driver.returncode == 0, stderr[-4000:]
        assert "Lost executor" in stderr  # Spark saw the kill while the query ran
    finally:
        sparks.kill_driver(driver)

    result = json.loads((tmp_path / "result.json").read_text())
    assert GATED in result["batches"] and len(result["batches"]) > GATED + 1  # batches before and after the kill
    rows = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "out").glob("batch=*"))], ignore_index=True)
    assert Counter(zip(rows["path"], rows["value"])) == Counter(expected)
    assert not rows.duplicated(["path", "offset"]).any()
