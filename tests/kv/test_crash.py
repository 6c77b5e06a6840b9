"""Crash tests: a writer killed (SIGKILL) at each named point, reopened, compared with a dict.

After a crash, reopening must give exactly the state of the last committed
batch; a restarted writer then skips the committed batches, redoes the rest,
and ends with the state of a run that never crashed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from storage import KVStore

from .crash_worker import model

SCRIPT = os.path.join(os.path.dirname(__file__), "crash_worker.py")
SETTINGS = {"flush_entries": 40, "flush_batches": 3, "max_file_size": 700, "block_size": 128, "lease": 600}
BATCHES = 9
COMPACT_AFTER = 5
#: Every crash point and a batch that reaches it with these settings.
POINTS = [
    ("claimed", -1),
    ("adopted", -1),
    ("mid_log", 1),
    ("after_log", 1),
    ("mid_log", 2),  # the batch whose commit flushes
    ("after_log", 2),
    ("flush_mid_write", 2),
    ("flush_before_meta", 2),
    ("flush_after_meta", 2),
    ("flush_mid_cleanup", 2),
    ("compact_mid_write", COMPACT_AFTER),
    ("compact_before_meta", COMPACT_AFTER),
    ("compact_after_meta", COMPACT_AFTER),
    ("compact_mid_cleanup", COMPACT_AFTER),
]


def run(path: str, crash: tuple[str, int] | None = None) -> int:
    spec = {"path": path, "settings": SETTINGS, "batches": BATCHES, "compact_after": COMPACT_AFTER,
            "crash": list(crash) if crash else None}
    return subprocess.run([sys.executable, SCRIPT, json.dumps(spec)], check=False).returncode


def content(path: str) -> tuple[int, dict[bytes, bytes]]:
    """Reopened as api.md's example does, without take_over: the killed writer's live lease held it for a minute."""
    with KVStore(path, **SETTINGS).open(0) as bucket:
        return bucket.committed_batch_id, dict(bucket.scan())


@pytest.mark.parametrize("point", POINTS, ids=[f"{p}-{b}" for p, b in POINTS])
def test_a_writer_killed_at_each_point_reopens_at_its_last_committed_batch(tmp_path, point):
    path = str(tmp_path / "store")
    assert run(path, crash=point) == -signal.SIGKILL  # the point was reached: the crash happened
    committed, state = content(path)
    assert committed < BATCHES - 1
    assert state == model(committed)  # exactly the last committed batch, nothing of the one cut short
    assert run(path) == 0  # the restart skips what is committed and redoes the rest
    assert content(path) == (BATCHES - 1, model(BATCHES - 1))


def test_two_crashes_in_a_row_and_a_crash_during_recovery(tmp_path):
    path = str(tmp_path / "store")
    assert run(path, crash=("flush_before_meta", 2)) == -signal.SIGKILL
    assert run(path, crash=("adopted", -1)) == -signal.SIGKILL
    assert run(path, crash=("compact_after_meta", COMPACT_AFTER)) == -signal.SIGKILL
    assert run(path) == 0
    assert content(path) == (BATCHES - 1, model(BATCHES - 1))


def test_a_clean_run_leaves_only_the_files_its_metadata_names(tmp_path):
    path = str(tmp_path / "store")
    assert run(path, crash=("flush_after_meta", 2)) == -signal.SIGKILL
    assert run(path) == 0
    bucket = tmp_path / "store" / "bucket-0"
    metas = os.listdir(bucket / "meta")
    assert len(metas) == 1 and len(os.listdir(bucket / "lease")) == 1
    meta = json.loads((bucket / "meta" / metas[0]).read_text())
    assert sorted(os.listdir(bucket / "data")) == sorted(f["name"] for f in meta["files"])
