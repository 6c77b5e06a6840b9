"""A writer process for the crash tests: applies numbered batches to one bucket and is killed at a chosen point.

Usage: ``python crash_worker.py '<json spec>'``. The spec names the store's path
and settings, the number of batches, the batch to compact after, and optionally
a crash point ``[point, batch_id]``: the process kills itself with SIGKILL the
first time the bucket reaches that point of that batch. Batches already
committed are skipped, as a Spark task replaying them would.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from storage import KVStore  # noqa: E402


def batch_ops(batch_id: int) -> list[tuple[bytes, bytes | None]]:
    """The writes of batch ``batch_id``: the same on every run; overwrites and deletes of earlier keys."""
    rng = random.Random(batch_id)
    if batch_id == 5:  # deletes that shrink the files, so that compaction has files to merge
        return [(b"key-%03d" % k, None) for k in range(0, 61, 2)]
    ops = []
    for _ in range(rng.randint(0, 30)):
        key = b"key-%03d" % rng.randint(0, 60)
        ops.append((key, None if rng.random() < 0.2 else b"v%d-" % batch_id + key))
    return ops


def model(upto: int) -> dict[bytes, bytes]:
    """The bucket's content once batches 0 .. ``upto`` are applied."""
    state: dict[bytes, bytes] = {}
    for batch_id in range(upto + 1):
        for key, value in batch_ops(batch_id):
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    return state


def main(spec: dict) -> None:
    crash = tuple(spec["crash"]) if spec.get("crash") else None

    def hook(point: str, batch_id: int) -> None:
        if (point, batch_id) == crash:
            os.kill(os.getpid(), signal.SIGKILL)

    store = KVStore(spec["path"], **spec["settings"])
    with store.open(0, take_over=True, hook=hook) as bucket:
        for batch_id in range(spec["batches"]):
            if batch_id <= bucket.committed_batch_id:
                continue
            bucket.begin(batch_id)
            ops = batch_ops(batch_id)
            half = len(ops) // 2
            for key, value in ops[:half]:
                bucket.put(key, value) if value is not None else bucket.delete(key)
            bucket.put_many([k for k, _ in ops[half:]], [v for _, v in ops[half:]])
            bucket.commit()
            if batch_id == spec.get("compact_after"):
                bucket.compact()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
