"""The file sink on a ``local-cluster[2,1,1024]`` Spark: two executor JVMs, tasks that die, an executor killed,
a duplicate attempt, the driver killed and the queries restarted. Two local-cluster starts in all (about 20 s
each): ``cluster_driver.py faults`` (killed by the test once every query stopped) and ``... resume``.

Every row must be in the output exactly once, read by ``FileSink.read()`` and by a plain listing of the
visible files (each decoded on its own, without the sink's records), for JSON lines and Parquet, with and
without compression and encryption; the windowed query's panes must be the pandas runner's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from storage.file_sink.codec import decompress, unseal
from storage.file_sink.formats import FORMATS
from tests import sparks
from tests.file_sink.cluster_driver import ALL_FILES, KILL_POINTS, ROWS_PER_FILE, WINDOWED, pane_parts, sinks

pytestmark = pytest.mark.spark

DRIVER = "tests.file_sink.cluster_driver"


def listed_rows(sink) -> list[int]:
    """The ids in every visible file below the sink, each file decoded alone (hidden files skipped)."""
    ids = []
    for directory, folders, files in os.walk(sink.path):
        folders[:] = [f for f in folders if not f.startswith((".", "_"))]
        for name in files:
            if name.startswith((".", "_")):
                continue
            data = unseal(Path(directory, name).read_bytes(), sink.key)
            if not FORMATS[sink.format].bulk:
                data = decompress(data, sink.compression)
            ids += sink.file_format.decode(data)["id"].tolist()
    return sorted(ids)


def marker(work: Path, name: str) -> str:
    return (work / "markers" / name).read_text()


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    """Run the faults, kill the driver once every query stopped at its point, resume; the work directory."""
    work = tmp_path_factory.mktemp("cluster")
    driver = sparks.start_driver(DRIVER, str(work), "faults")
    try:
        sparks.wait_for(lambda: (work / "markers" / "all-stopped").exists(), "every query stopped for the kill",
                        timeout=1500, poll=1.0, alive=lambda: driver.poll() is None)
    except AssertionError:
        sparks.kill_driver(driver)
        raise AssertionError(f"the faults run failed:\n{log_tail(work, 'faults')}") from None
    sparks.kill_driver(driver)
    try:
        sparks.run_driver(DRIVER, str(work), "resume", timeout=1200)
    except AssertionError:
        raise AssertionError(f"the resumed run failed:\n{log_tail(work, 'resume')}") from None
    return work


def log_tail(work: Path, mode: str) -> str:
    lines = (work / f"driver-{mode}.log").read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("\tat "))[-6000:]


@pytest.mark.parametrize("name", list(KILL_POINTS))
def test_every_row_exactly_once_after_every_fault(cluster_run, name):
    sink = sinks(cluster_run)[name]
    expected = list(range(ALL_FILES * ROWS_PER_FILE))
    assert sorted(sink.read()["id"]) == expected
    assert listed_rows(sink) == expected
    hidden = [f for _, _, files in os.walk(sink.path) for f in files if f.endswith(".inprogress")]
    assert hidden == []  # the bounded runs finished every part; the losers' files are gone


def started(work: Path, prefix: str) -> int:
    """How many attempts of a task started (markers ``<prefix>-t<task id>-started``)."""
    return len([m for m in os.listdir(work / "markers") if m.startswith(prefix + "-t") and m.endswith("-started")])


@pytest.mark.parametrize("name", list(KILL_POINTS))
def test_the_faults_happened(cluster_run, name):
    work = cluster_run
    # Batch 0: both partitions wrote at once, one per executor JVM.
    assert marker(work, f"{name}-b0-p0-first") != marker(work, f"{name}-b0-p1-first")
    # Batch 1: the task died mid-write, another attempt wrote the partition.
    assert (work / "markers" / f"{name}-b1-died").exists() and started(work, f"{name}-b1-p0") >= 2
    # Batch 2: a duplicate attempt wrote (and claimed the slot) while the real one ran; Spark never reported it.
    duplicate = json.loads(marker(work, f"{name}-b2-duplicate-report"))
    assert duplicate["rows"] == 10 and not duplicate["skipped"] and not duplicate["superseded"]
    # Batch 3: the executor was killed mid-write and the task ran again.
    assert (work / "markers" / f"{name}-b3-killed-executor").exists() and started(work, f"{name}-b3-p0") >= 2
    # Batch 4: the query stopped at its point and the driver was killed there.
    assert (work / "markers" / f"{name}-stopped").exists()
    assert (work / "markers" / "resumed").exists()


@pytest.mark.parametrize("name", list(WINDOWED))
def test_a_windowed_query_with_an_executor_killed_ends_with_the_pandas_runners_panes(cluster_run, name):
    """On Spark's default state store (``panes``) and on RocksDB with changelog checkpointing
    (``panes-rocksdb``, docs/databricks.md's advice), whose changelog files the checkpoint must hold."""
    from storage.file_sink import FileSink
    from tests.spark_runner.helpers import assert_same_panes
    from tests.spark_runner.streaming import mirror
    from tests.spark_runner.test_spark_stream import _on_time

    work = cluster_run
    assert (work / "markers" / f"{name}-b1-killed-executor").exists() and started(work, f"{name}-b1-p0") >= 2
    inputs = json.loads((work / f"{name}-inputs.json").read_text())
    expected = mirror(pane_parts(), inputs, _on_time)
    actual = FileSink(str(work / name), format="parquet").read()
    for column in ("window_start", "window_end"):  # Spark's timestamps, with the session's zone, UTC
        actual[column] = actual[column].dt.tz_convert("UTC").dt.tz_localize(None)
    assert len(expected) > 0
    assert_same_panes(actual, pd.DataFrame(expected))
    changelogs = list((work / "checkpoints" / name / "state").rglob("*.changelog"))
    assert bool(changelogs) == (name == "panes-rocksdb")
