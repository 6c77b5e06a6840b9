"""Compaction of finished parts: fewer parts, the same rows, one commit; a crash in it loses nothing."""

from __future__ import annotations

import os

import pandas as pd
import pyarrow as pa
import pytest

import storage.file_sink.directory as directory_module
from storage.file_sink import ColumnBuckets, FileSink, RollingPolicy, SinkHeldError

from .helpers import tree


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "k": [f"b{i % 2}" for i in ids], "s": [f"row,\n{i}" for i in ids]})


def small_parts(tmp_path, fmt, codec=None, key=None, batches=6):
    sink = FileSink(str(tmp_path), format=fmt, compression=codec).with_buckets(ColumnBuckets("k"))
    sink = sink.with_rolling_policy(RollingPolicy.on_every_batch())
    if key:
        sink = sink.with_encryption(key)
    for b in range(batches):
        table = rows(4 * b, 4)
        sink.write(table)
    return sink


def by_id(frame: pd.DataFrame) -> pd.DataFrame:
    key = "id" if "id" in frame else "value"
    return frame.sort_values(key, kind="stable").reset_index(drop=True)


CASES = [("jsonl", None, None), ("jsonl", "zstd", b"k" * 16), ("csv", None, None), ("csv", "gzip", b"k" * 32),
         ("parquet", None, None), ("parquet", "zstd", b"k" * 16), ("orc", "zlib", None), ("avro", None, b"k" * 16)]


@pytest.mark.parametrize(("fmt", "codec", "key"), CASES)
def test_compaction_merges_each_buckets_parts_and_keeps_every_row(tmp_path, fmt, codec, key):
    sink = small_parts(tmp_path, fmt, codec, key)
    before = by_id(sink.read())
    assert len(sink.finished_files()) == 12
    done = sink.compact()
    assert (done.replaced, done.written) == (12, 2)
    assert len(sink.finished_files()) == 2 and {p.split("/")[-2] for p in sink.finished_files()} == {"k=b0", "k=b1"}
    pd.testing.assert_frame_equal(by_id(sink.read()), before)
    assert [name for name in tree(tmp_path) if os.path.basename(name).startswith(".")] == []
    sink.write(rows(100, 2))  # the sink goes on writing after a compaction
    assert len(sink.read()) == len(before) + 2


def test_a_text_part_compacts_too(tmp_path):
    sink = FileSink(str(tmp_path), format="text").with_rolling_policy(RollingPolicy.on_every_batch())
    for b in range(3):
        sink.write(pa.table({"value": [f"line {b}.{i}" for i in range(3)]}))
    before = sorted(sink.read()["value"])
    assert (sink.compact().replaced, len(sink.finished_files())) == (3, 1)
    assert sorted(sink.read()["value"]) == before


def test_groups_stay_below_the_target_size_and_big_parts_stay_as_they_are(tmp_path):
    sink = small_parts(tmp_path, "jsonl", batches=8)
    sizes = sorted(os.path.getsize(p) for p in sink.finished_files())
    target = 3 * max(sizes)
    done = sink.compact(target_size=target)
    assert done.written >= 4 and all(os.path.getsize(p) <= target for p in sink.finished_files())
    assert sorted(sink.read()["id"]) == list(range(32))


def test_a_compaction_that_stops_after_its_commit_is_finished_by_the_next_writer(tmp_path, monkeypatch):
    sink = small_parts(tmp_path, "parquet", "snappy")
    before = by_id(sink.read())
    real = directory_module.SinkDirectory.finish_renames

    def crash_before_renaming(self, renames, state, recovering=False, hook=None):
        if not recovering and renames:
            raise OSError("the process died here")
        return real(self, renames, state, recovering, hook)

    monkeypatch.setattr(directory_module.SinkDirectory, "finish_renames", crash_before_renaming)
    with pytest.raises(OSError, match="died"):
        sink.compact()
    monkeypatch.setattr(directory_module.SinkDirectory, "finish_renames", real)
    assert sink.finished_files() == []  # the inputs are gone, the new parts not yet renamed in
    pd.testing.assert_frame_equal(by_id(sink.read()), before)  # read() reads them where the commit left them
    sink.writer().close()  # recovery renames them
    assert len(sink.finished_files()) == 2
    pd.testing.assert_frame_equal(by_id(sink.read()), before)


def test_compaction_is_refused_while_a_writer_holds_the_directory(tmp_path):
    sink = small_parts(tmp_path, "jsonl", batches=2)
    writer = sink.writer()
    with pytest.raises(SinkHeldError, match="is held by another writer"):
        sink.compact()
    writer.close()
    assert sink.compact().written == 2


def test_a_bad_target_size_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"compact target_size=0 must be a positive number of bytes"):
        FileSink(str(tmp_path)).compact(target_size=0)
