"""Compaction of finished parts: fewer parts, the same rows, one commit; a crash in it loses nothing."""

from __future__ import annotations

import os
import shutil

import fsspec.implementations.local
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.file_sink.directory as directory_module
from storage.file_sink import ColumnBuckets, FileSink, RollingPolicy, SinkHeldError
from storage.file_sink.compaction import Compacted

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


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_compaction_by_spark_tasks_merges_as_the_driver_does(spark, tmp_path, fmt):
    """``compact(spark=spark)``: a task per group (a DataFrame's, so Spark Connect runs it too:
    `tests/spark_runner/connect_driver.py`); the same parts and rows as without Spark."""
    by_driver, by_tasks = small_parts(tmp_path / "driver", fmt), small_parts(tmp_path / "tasks", fmt)
    before = by_id(by_tasks.read())
    assert by_driver.compact() == by_tasks.compact(spark=spark) == Compacted(12, 2)
    named = lambda sink: [(p.rsplit("/", 2)[-2], p.rsplit("-", 1)[-1]) for p in sink.finished_files()]  # noqa: E731
    assert named(by_tasks) == named(by_driver)  # bucket and number; the writer ids are random
    pd.testing.assert_frame_equal(by_id(by_tasks.read()), before)


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


#: Part-name functions that give each part number its own name, as the docs ask (some ignore the writer id).
NUMBERED_NAMES = [lambda w, n: f"out-{n}.dat", lambda w, n: str(n), lambda w, n: f"{w}-{n:04d}", lambda w, n: f"x{3 * n + 1}"]
FORMATS = ["jsonl", "csv", "text", "parquet", "orc", "avro"]


def numbered_sink(path, fmt, names, buckets):
    sink = FileSink(str(path), format=fmt).with_part_names(fn=names).with_rolling_policy(RollingPolicy.on_every_batch())
    return sink.with_buckets(ColumnBuckets("k")) if buckets and fmt != "text" else sink


def numbered_rows(fmt, start, n):
    table = rows(start, n)
    return pa.table({"value": [f"line {i}" for i in table["id"].to_pylist()]}) if fmt == "text" else table


def rows_of(frame: pd.DataFrame) -> list:
    if frame.empty:
        return []
    if "value" in frame:
        return sorted(frame["value"])
    return sorted(zip(frame["id"].astype(int), frame["s"]))


def expected(fmt, n):
    return rows_of(numbered_rows(fmt, 0, n).to_pandas())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(FORMATS), names=st.sampled_from(NUMBERED_NAMES), buckets=st.booleans(),
       steps=st.lists(st.one_of(st.integers(1, 5), st.sampled_from([("compact", 1), ("compact", 2), ("compact", 3)])),
                      min_size=1, max_size=10))
def test_compaction_keeps_every_row_whatever_numbered_names_the_parts_get(tmp_path_factory, fmt, names, buckets, steps):
    """Compacted outputs get names of their own (not a replaced part's, not one another's, not a later part's),
    whatever groups the target size makes: every row written reads back, also once a new writer recovered."""
    sink = numbered_sink(tmp_path_factory.mktemp(fmt), fmt, names, buckets)
    total = 0
    for step in steps + [("compact", 2)]:
        if isinstance(step, int):
            sink.write(numbered_rows(fmt, total, step))
            total += step
        elif sink.finished_files():
            sink.compact(target_size=step[1] * max(os.path.getsize(p) for p in sink.finished_files()) + 1)
        assert rows_of(sink.read()) == expected(fmt, total)
        sink.writer().close()  # a new writer recovers the directory to the newest record
        assert rows_of(sink.read()) == expected(fmt, total)
    assert [name for name in tree(sink.path) if os.path.basename(name).startswith(".")] == []


def test_two_groups_of_a_directory_get_names_of_their_own(tmp_path):
    sink = numbered_sink(tmp_path, "jsonl", lambda w, n: f"out-{n}.jsonl", buckets=False)
    for b in range(6):
        sink.write(rows(4 * b, 4))
    size = max(os.path.getsize(p) for p in sink.finished_files())
    assert sink.compact(target_size=2 * size + 1) == Compacted(replaced=6, written=3)
    assert sorted(os.listdir(tmp_path)) == ["_file_sink", "out-6.jsonl", "out-7.jsonl", "out-8.jsonl"]
    sink.write(rows(24, 4))  # the next writer numbers on after the compaction's outputs
    assert sorted(os.listdir(tmp_path))[-1] == "out-9.jsonl"
    assert rows_of(sink.read()) == rows_of(rows(0, 28).to_pandas())


def test_a_name_fn_that_gives_a_taken_name_is_refused_and_changes_nothing(tmp_path):
    sink = numbered_sink(tmp_path, "jsonl", lambda w, n: f"out-{min(n, 1)}.jsonl", buckets=False)
    for b in range(2):
        sink.write(rows(4 * b, 4))
    before = tree(tmp_path)
    with pytest.raises(ValueError, match="would be named .*out-1.jsonl.*which another part already has"):
        sink.compact()
    assert tree(tmp_path) == before  # the outputs written are deleted; the parts are as they were


class CrashingFileSystem:
    """Raises at the ``at``-th change a local filesystem is asked for (a write, rename or delete), as a process
    dying there would stop; -1 never. ``changes`` counts them."""

    def __init__(self, monkeypatch, at):
        self.at, self.changes = at, 0
        cls = fsspec.implementations.local.LocalFileSystem
        for name in ("_open", "mv", "rm_file", "rm", "makedirs"):
            real = getattr(cls, name)
            monkeypatch.setattr(cls, name, self._crashing(real, writes=name != "_open"))

    def _crashing(self, real, writes):
        def change(fs, path, *args, **kwargs):
            mode = args[0] if args else kwargs.get("mode", "rb")
            if writes or "r" not in mode:
                self.changes += 1
                if self.changes - 1 == self.at:
                    raise OSError("the process died here")
            return real(fs, path, *args, **kwargs)

        return change


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_compaction_that_stops_at_any_change_loses_and_duplicates_nothing(tmp_path, monkeypatch, fmt):
    base = tmp_path / "parts"
    sink = numbered_sink(base, fmt, lambda w, n: f"out-{n}.dat", buckets=True)
    for b in range(8):
        sink.write(numbered_rows(fmt, 4 * b, 4))
    target = 2 * max(os.path.getsize(p) for p in sink.finished_files()) + 1
    shutil.copytree(base, tmp_path / "clean")
    with monkeypatch.context() as patch:
        counter = CrashingFileSystem(patch, at=-1)
        assert numbered_sink(tmp_path / "clean", fmt, sink.part_name, True).compact(target_size=target).written == 8
    for at in range(counter.changes):
        path = tmp_path / f"crash{at}"
        shutil.copytree(base, path)
        crashed = numbered_sink(path, fmt, sink.part_name, True)
        with monkeypatch.context() as patch:
            CrashingFileSystem(patch, at)
            with pytest.raises(OSError, match="died"):
                crashed.compact(target_size=target)
        assert rows_of(crashed.read()) == expected(fmt, 32), at
        crashed.writer(take_over=True).close()  # recovery finishes or forgets the compaction
        assert rows_of(crashed.read()) == expected(fmt, 32), at
        assert [name for name in tree(path) if os.path.basename(name).startswith(".")] == [], at
        crashed.write(numbered_rows(fmt, 32, 4))
        crashed.compact()
        assert rows_of(crashed.read()) == expected(fmt, 36), at


def test_csv_parts_under_another_header_are_merged_apart(tmp_path):
    """Two bounded writes with the columns in another order: each part's rows stay under their own header."""
    sink = FileSink(str(tmp_path), format="csv")
    for frame in [{"user": ["alice"], "amount": [10]}, {"user": ["carol"], "amount": [30]},
                  {"amount": [20], "user": ["bob"]}, {"amount": [40], "user": ["dave"]}]:
        sink.write(pd.DataFrame(frame))
    before = sink.read()
    assert sink.compact() == Compacted(replaced=4, written=2)
    after = sink.read()
    pd.testing.assert_frame_equal(after.sort_values("user", ignore_index=True), before.sort_values("user", ignore_index=True))
    assert dict(zip(after["user"], after["amount"])) == {"alice": 10, "bob": 20, "carol": 30, "dave": 40}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers=st.lists(st.tuples(st.permutations(["id", "s", "k"]), st.booleans()), min_size=2, max_size=7),
       codec=st.sampled_from([None, "gzip"]), key=st.sampled_from([None, b"k" * 16]), parts_per_group=st.integers(2, 4))
def test_csv_reads_the_same_rows_after_compaction_whatever_the_headers(tmp_path_factory, headers, codec, key,
                                                                        parts_per_group):
    """Parts of random column orders (some without column k), merged in groups of random target sizes."""
    sink = FileSink(str(tmp_path_factory.mktemp("csv")), format="csv", compression=codec)
    sink = sink.with_encryption(key) if key else sink
    for i, (order, with_k) in enumerate(headers):
        sink.write(rows(3 * i, 3).select([c for c in order if with_k or c != "k"]))
    before = by_id(sink.read())
    sink.compact(target_size=parts_per_group * max(os.path.getsize(p) for p in sink.finished_files()))
    pd.testing.assert_frame_equal(by_id(sink.read()), before, check_like=True)
    assert rows_of(before) == rows_of(rows(0, 3 * len(headers)).to_pandas())
    sink.writer().close()
    pd.testing.assert_frame_equal(by_id(sink.read()), before, check_like=True)
