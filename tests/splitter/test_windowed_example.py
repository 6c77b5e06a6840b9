"""The docs' streaming example (splitter -> parsed columns -> ``windowed(...)`` -> sink), run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.spark_runner.streaming import batch_inputs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "splitter.md"

LOG = """\
2026-11-22T10:00:01 alice 5
2026-11-22T10:00:03 bob 1
2026-11-22T10:00:07 alice 2

2026-11-22T10:00:12 alice 7
2026-11-22T10:00:14 carol 2
2026-11-22T10:00:18 bob 4
2026-11-22T10:00:25 alice 3
2026-11-22T11:00:00 zed 0
"""

#: (user, window start, total, n): every window the closing event at 11:00 pushes the watermark past.
EXPECTED = [
    ("alice", "10:00:00", 7, 2), ("alice", "10:00:10", 7, 1), ("alice", "10:00:20", 3, 1),
    ("bob", "10:00:00", 1, 1), ("bob", "10:00:10", 4, 1), ("carol", "10:00:10", 2, 1),
]


def docs_example() -> str:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(r"<!-- windowed-example -->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/splitter.md lost its windowed example"
    return match.group(1)


@pytest.mark.spark
def test_docs_example_reads_a_directory_through_the_splitter_into_windowed_panes(spark, tmp_path):
    data, out, chk = tmp_path / "events", tmp_path / "out", tmp_path / "chk"
    data.mkdir()
    (data / "events.log").write_text(LOG)
    (data / "notes.txt").write_text("not an event\n")  # filtered out by the example's pattern
    code = docs_example()
    for placeholder, real in [("/data/events", data), ("/out/panes", out / "panes"), ("/chk/panes", chk)]:
        assert placeholder in code
        code = code.replace(placeholder, str(real))
    assert 'block_size="128MB"' in code
    code = code.replace('block_size="128MB"', 'block_size="64B"')  # several blocks, several micro-batches
    namespace = {"spark": spark}
    exec(compile(code, str(DOCS), "exec"), namespace)
    query = namespace["query"]
    try:
        query.processAllAvailable()
        query.processAllAvailable()  # the no-data batch that fires the windows the watermark passed
    finally:
        query.stop()
    # The source's rows are chunks of lines, one per 64-byte block here (each holds a line start).
    inputs = batch_inputs(query)
    assert sum(inputs) == -(-len(LOG.encode()) // 64) and len(inputs) >= 2

    panes = spark.read.parquet(str(out / "panes")).toPandas()
    assert set(panes["timing"]) == {"ON_TIME"}
    assert not panes["is_retraction"].any()
    got = sorted(
        (r.user, r.window_start.strftime("%H:%M:%S"), int(r.total), int(r.n)) for r in panes.itertuples()
    )
    assert got == EXPECTED
