"""A writer process for the crash tests: runs batches, and dies at a chosen phase.

Usage: ``python crash_writer.py '<json spec>'``. The spec names the sink
settings, the batch sizes, the first batch to (re)play and optionally a crash
point ``[phase, batch_id]``: the process calls ``os._exit(17)`` the first time
the writer reaches that phase of that batch, as a killed process would stop.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from storage.file_sink import ColumnBuckets, FileSink, RollingPolicy  # noqa: E402
from tests.file_sink.helpers import batch  # noqa: E402

CRASH_EXIT = 17


def sink_from(spec: dict) -> FileSink:
    policy = RollingPolicy(**spec.get("policy", {}))
    sink = FileSink(spec["path"], format=spec.get("format", "jsonl"), compression=spec.get("compression"))
    sink = sink.with_writer_id("w").with_rolling_policy(policy).with_open_files(spec.get("max_open", 100))
    if spec.get("key"):
        sink = sink.with_encryption(bytes.fromhex(spec["key"]))
    return sink.with_buckets(ColumnBuckets("k"))


def main(spec: dict) -> None:
    crash = tuple(spec["crash"]) if spec.get("crash") else None

    def hook(phase: str, batch_id: int) -> None:
        if (phase, batch_id) == crash:
            os._exit(CRASH_EXIT)

    writer = sink_from(spec).writer(hook)
    sizes = spec["sizes"]
    for batch_id in range(spec.get("start", 0), len(sizes)):
        rows = batch(sum(sizes[:batch_id]), sizes[batch_id], spec.get("buckets", 1))
        writer.write_batch(rows, batch_id, 1000 * batch_id, end_of_input=batch_id == len(sizes) - 1)
    writer.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
