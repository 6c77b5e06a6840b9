"""Part files move in-progress -> pending -> finished, and a replayed batch writes nothing."""

import json
import os
import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import storage.file_sink.directory as directory_module
import storage.file_sink.writer as writer_module
from storage.file_sink import CallableBuckets, ColumnBuckets, DamagedCommitRecordError, FileSink, RollingPolicy

from .helpers import as_old_record, batch, counted_calls, tree  # helpers also registers noappend:// and counting://


def test_finished_only_after_commit_and_in_progress_hidden(tmp_path):
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=2))
    writer = sink.writer()
    writer.write_batch(batch(0, 3), 0, 0)
    assert sorted(tree(tmp_path)) == [".part-w-0.jsonl.inprogress"]
    assert sink.read().empty
    writer.write_batch(batch(3, 3), 1, 1)  # second batch: rolled, committed, renamed
    assert sorted(tree(tmp_path)) == ["part-w-0.jsonl"]
    assert sink.read()["id"].tolist() == list(range(6))


def test_readers_skip_in_progress_files(tmp_path):
    sink = FileSink(str(tmp_path), format="parquet").with_writer_id("w")
    sink.write(batch(0, 4))
    (tmp_path / ".part-w-9.parquet.inprogress").write_bytes(b"garbage that is not parquet")
    assert pq.read_table(str(tmp_path)).num_rows == 4
    assert len(pd.read_parquet(str(tmp_path))) == 4


def test_replayed_batch_id_writes_nothing(tmp_path):
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    assert writer.write_batch(batch(0, 2), 0, 0)
    assert not writer.write_batch(batch(0, 2), 0, 0)
    writer.close()
    again = sink.writer()  # a restarted writer recognises it too
    assert not again.write_batch(batch(0, 2), 0, 0)
    assert again.write_batch(batch(2, 2), 1, 0)
    assert sink.read()["id"].tolist() == [0, 1, 2, 3]


def test_write_retried_with_the_same_batch_id_is_a_no_op(tmp_path):
    sink = FileSink(str(tmp_path))
    sink.write(pd.DataFrame({"a": [1, 2]}), batch_id=0)
    sink.write(pd.DataFrame({"a": [1, 2]}), batch_id=0)
    sink.write(pd.DataFrame({"a": [3]}))
    assert sink.read()["a"].tolist() == [1, 2, 3]


class Injected(RuntimeError):
    pass


def fail_at(phase, batch_id):
    """A hook that raises the first time the writer reaches ``phase`` of ``batch_id``."""
    armed = [True]

    def hook(seen_phase, seen_batch):
        if armed[0] and (seen_phase, seen_batch) == (phase, batch_id):
            armed[0] = False
            raise Injected(f"{phase} of batch {batch_id}")

    return hook


@pytest.mark.parametrize(
    ("phase", "committed"),
    [("mid_write", False), ("after_staging", False), ("after_commit_record", True), ("mid_rename", True)],
)
def test_a_failed_batch_retried_on_the_same_writer_loses_and_duplicates_nothing(tmp_path, phase, committed):
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_buckets(ColumnBuckets("k"))
    writer = sink.with_rolling_policy(RollingPolicy(max_batches=2)).writer(fail_at(phase, 1))
    writer.write_batch(batch(0, 4, buckets=2), 0, 0)
    with pytest.raises(Injected):
        writer.write_batch(batch(4, 4, buckets=2), 1, 0)  # rolls both parts: two renames
    assert writer.committed_batch_id == (1 if committed else 0)
    assert writer.write_batch(batch(4, 4, buckets=2), 1, 0) is not committed
    writer.write_batch(batch(8, 2, buckets=2), 2, 0, end_of_input=True)
    writer.close()
    sink.writer().close()  # a restart recovers nothing more
    assert sorted(sink.read()["id"]) == list(range(10))


@pytest.mark.parametrize("phase", ["mid_write", "after_staging", "after_commit_record", "mid_rename"])
def test_finish_rolls_every_open_part_under_the_last_batch_id_and_can_be_retried(tmp_path, phase):
    sink = FileSink(str(tmp_path)).with_buckets(ColumnBuckets("k")).with_rolling_policy(RollingPolicy(max_batches=5))
    sink = sink.with_encryption(b"0" * 16)  # rolling then writes a final segment: a mid_write to fail at
    first = sink.writer()
    first.write_batch(batch(0, 4, buckets=2), 0, 0)
    first.close()
    assert sink.read().empty
    writer = sink.writer(fail_at(phase, 0))  # batch 0's phases are reached again only by finish
    with pytest.raises(Injected):
        writer.finish(0)
    writer.finish(0)
    assert writer.committed_batch_id == 0 and not writer.finish(0)  # nothing left open
    writer.close()
    assert sorted(sink.read()["id"]) == list(range(4))


def test_a_batch_refused_by_its_format_is_retried_with_fixed_rows(tmp_path):
    # The first bucket's rows are buffered before the second bucket's newline is refused.
    by_value = CallableBuckets(lambda row, now: "bad" if "\n" in row["v"] else "good")
    sink = FileSink(str(tmp_path), format="text").with_buckets(by_value)
    writer = sink.with_rolling_policy(RollingPolicy(max_batches=5)).writer()
    with pytest.raises(ValueError, match=r"cannot write column 'v': its value 'bad\\nrow' holds a line break"):
        writer.write_batch(pa.table({"v": ["ok-row", "bad\nrow"]}), 0, 0)
    assert writer.write_batch(pa.table({"v": ["ok-row", "fixed"]}), 0, 0, end_of_input=True)
    assert sorted(sink.read()["value"]) == ["fixed", "ok-row"]


def test_a_commit_record_that_fails_to_write_is_retried(tmp_path, monkeypatch):
    sink = FileSink(str(tmp_path), format="parquet")
    writer = sink.writer()
    real_commit = directory_module.commit_state
    calls = []

    def full_disk_once(*args):
        calls.append(args)
        if len(calls) == 1:
            raise OSError("No space left on device")
        real_commit(*args)

    monkeypatch.setattr(directory_module, "commit_state", full_disk_once)
    with pytest.raises(OSError, match="No space left"):
        writer.write_batch(pa.table({"id": [1, 2]}), 0, 0)
    assert writer.write_batch(pa.table({"id": [1, 2]}), 0, 0)  # not "already committed"
    assert writer.write_batch(pa.table({"id": [3]}), 1, 0)
    writer.close()
    sink.writer().close()
    assert sink.read()["id"].tolist() == [1, 2, 3]


def test_a_writer_whose_rollback_failed_refuses_to_write(tmp_path, monkeypatch):
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy(max_batches=5))
    writer = sink.writer(fail_at("after_staging", 1))
    writer.write_batch(batch(0, 2), 0, 0)
    real_load = writer_module.load_state

    def unreadable(*args):
        raise OSError("I/O error reading the commit record")

    monkeypatch.setattr(writer_module, "load_state", unreadable)
    with pytest.raises(OSError, match="I/O error"):
        writer.write_batch(batch(2, 2), 1, 0)
    monkeypatch.setattr(writer_module, "load_state", real_load)
    with pytest.raises(RuntimeError, match=r"rolling back a failed batch failed too .*make a new writer"):
        writer.write_batch(batch(2, 2), 1, 0)
    writer.close()
    sink.write(batch(2, 2), batch_id=1)
    assert sink.read()["id"].tolist() == [0, 1, 2, 3]


def test_restart_truncates_uncommitted_bytes_and_removes_stray_parts(tmp_path):
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=5))
    writer = sink.writer()
    writer.write_batch(batch(0, 2), 0, 0)
    writer.close()
    committed = (tmp_path / ".part-w-0.jsonl.inprogress").read_bytes()
    with open(tmp_path / ".part-w-0.jsonl.inprogress", "ab") as fh:
        fh.write(b'{"id": 99, "half a ro')  # a crashed batch's partial write
    (tmp_path / ".part-w-1.jsonl.inprogress").write_bytes(b"{}\n")  # a part it opened
    restarted = sink.writer()
    assert (tmp_path / ".part-w-0.jsonl.inprogress").read_bytes() == committed
    assert not (tmp_path / ".part-w-1.jsonl.inprogress").exists()
    restarted.write_batch(batch(2, 2), 1, 0, end_of_input=True)
    assert sink.read()["id"].tolist() == [0, 1, 2, 3]


def test_object_store_rewrites_instead_of_truncating():
    sink = FileSink("memory://trunc/out").with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=3))
    writer = sink.writer()
    writer.write_batch(batch(0, 2), 0, 0)
    writer.close()
    import fsspec

    fs = fsspec.filesystem("memory")
    path = "/trunc/out/.part-w-0.jsonl.inprogress"
    committed = fs.cat_file(path)
    fs.pipe_file(path, committed + b"junk")
    sink.writer().write_batch(batch(2, 1), 1, 0, end_of_input=True)
    assert sink.read()["id"].tolist() == [0, 1, 2]


def test_a_filesystem_that_cannot_append_gets_finished_parts_every_batch():
    # noappend:// refuses mode "ab", so this passes only if no part is ever appended to.
    sink = FileSink("noappend://no-append/out", compression="gzip").with_writer_id("w")
    writer = sink.writer()
    for b in range(3):
        writer.write_batch(batch(3 * b, 3), b, 0)
        assert len(sink.finished_files()) == b + 1  # finished at the end of its batch, nothing in progress
    writer.close()
    assert [p.rsplit("/", 1)[-1] for p in sink.finished_files()] == [f"part-w-{n}.jsonl.gz" for n in range(3)]
    assert sink.read()["id"].tolist() == list(range(9))


def test_buckets_are_directories_and_interleave(tmp_path):
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_buckets(ColumnBuckets("k"))
    sink.write(batch(0, 6, buckets=2))
    assert sorted(tree(tmp_path)) == ["k=b0/part-w-0.jsonl", "k=b1/part-w-0.jsonl"]
    assert sorted(sink.read()["id"]) == list(range(6))


@pytest.mark.parametrize(
    ("name", "shown"),
    [(lambda w, n: f"_p{n}.jsonl", "'_p0.jsonl'"), (lambda w, n: f"a/{n}", "'a/0'"), (lambda w, n: 3, "3")],
)
def test_part_names_readers_would_skip_are_refused(tmp_path, name, shown):
    with pytest.raises(ValueError, match=f"part name fn gave {shown} for part 0; a part name is a non-empty str"):
        FileSink(str(tmp_path)).with_part_names(fn=name).write(batch(0, 1))
    assert tree(tmp_path) == {}


def test_a_part_name_taken_by_an_earlier_part_is_refused_before_anything_is_renamed(tmp_path):
    sink = FileSink(str(tmp_path)).with_part_names(fn=lambda writer, n: "out.jsonl")
    sink.write(batch(0, 2))
    with pytest.raises(ValueError, match=r"part 1 of bucket '' would be named 'out.jsonl', which another part"):
        sink.write(batch(2, 2))
    assert sink.read()["id"].tolist() == [0, 1]  # the finished part was not overwritten


def test_a_part_name_repeated_within_a_batch_is_refused(tmp_path):
    sink = FileSink(str(tmp_path)).with_part_names(fn=lambda writer, n: "out.jsonl")
    with pytest.raises(ValueError, match=r"part 1 of bucket '' would be named 'out.jsonl'"):
        sink.with_rolling_policy(RollingPolicy(max_part_size=40)).write(batch(0, 4))  # two parts
    assert tree(tmp_path) == {}


def test_a_record_the_directory_contradicts_is_reported(tmp_path):
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=5))
    writer = sink.writer()
    writer.write_batch(batch(0, 5), 0, 0)
    writer.close()
    os.truncate(tmp_path / ".part-w-0.jsonl.inprogress", 3)
    with pytest.raises(RuntimeError, match=r"has 3 bytes but \d+ were committed; the sink directory was changed by "
                                           r"someone else \(commit record \d+ \(batch 0\)\): the committed rows past "
                                           r"byte 3 would be lost. Restore the file"):
        sink.writer()


def test_pandas_panes_written_step_by_step(tmp_path):
    # The pandas runner's output: one DataFrame of panes per step, the step as batch id.
    panes = pd.DataFrame({"window_start": [0, 0, 10], "value": [5, 12, 3], "timing": ["EARLY", "ON_TIME", "ON_TIME"],
                          "step": [0, 1, 1]})
    sink = FileSink(str(tmp_path), format="csv")
    writer = sink.writer()
    for step, frame in panes.groupby("step"):
        writer.write_batch(frame, int(step), 0, end_of_input=step == 1)
    pd.testing.assert_frame_equal(sink.read(), panes)


def test_unknown_input_types_are_refused(tmp_path):
    with pytest.raises(TypeError, match="cannot write a list"):
        FileSink(str(tmp_path)).write([1, 2])


def open_part_sink(tmp_path, key=None, **settings):
    """A sink whose first batch leaves its part in progress."""
    sink = FileSink(str(tmp_path), **settings).with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=2))
    sink = sink.with_encryption(key) if key else sink
    writer = sink.writer()
    writer.write_batch(batch(0, 2), 0, 0)
    writer.close()
    return sink


K1, K2 = b"1" * 16, b"2" * 16


@pytest.mark.parametrize(
    ("before", "after", "match"),
    [
        ({}, {"compression": "gzip"}, r"compression='gzip' differs from compression=None"),
        ({}, {"format": "csv"}, r"format='csv' differs from format='jsonl'"),
        ({}, {"key": K1}, r"key_fingerprint='[0-9a-f]{16}' differs from key_fingerprint=None"),
        ({"key": K1}, {"key": K2}, r"key_fingerprint='[0-9a-f]{16}' differs from key_fingerprint='[0-9a-f]{16}'"),
        ({"key": K1}, {}, r"key_fingerprint=None differs from key_fingerprint='[0-9a-f]{16}'"),
    ],
)
def test_a_restart_with_other_settings_refuses_to_append_to_open_parts(tmp_path, before, after, match):
    open_part_sink(tmp_path, **before)
    files = tree(tmp_path)
    with pytest.raises(ValueError, match=match + r", the setting that 1 in-progress part\(s\) .* Finish them"):
        open_part_sink(tmp_path, **after)
    assert tree(tmp_path) == files  # nothing recovered, truncated or deleted


def test_settings_may_change_once_the_parts_are_finished(tmp_path):
    sink = open_part_sink(tmp_path)
    sink.writer().finish(0)
    zipped = sink.with_compression("gzip").with_encryption(K1)
    zipped.write(batch(2, 2))
    old, new = (tmp_path / "part-w-0.jsonl").read_bytes(), (tmp_path / "part-w-1.jsonl.gz").read_bytes()
    assert old.startswith(b'{"id":0') and b"row-2" not in new  # each part under its own settings
    record = (tmp_path / "_file_sink" / f"{2:020d}.json").read_text()  # 0: the first batch, 1: finish, 2: write
    assert K1.decode() not in record and '"compression": "gzip"' in record  # the key itself is never stored


def test_a_version_1_commit_record_is_still_read(tmp_path):
    sink = open_part_sink(tmp_path)
    as_old_record(tmp_path / "_file_sink" / f"{0:020d}.json", 1, tmp_path)
    writer = sink.writer()  # settings unknown: not checked; the next commit records them
    assert writer.committed_batch_id == 0
    writer.write_batch(batch(2, 2), 1, 0)
    assert sink.read()["id"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("moved", [False, True])
def test_a_version_2_record_with_absolute_paths_recovers_in_place_and_moved(tmp_path, moved):
    def sink_at(root):
        return FileSink(str(root)).with_writer_id("w").with_buckets(ColumnBuckets("k"))

    writer = sink_at(tmp_path / "old").with_rolling_policy(RollingPolicy(max_batches=2)).writer()
    writer.write_batch(batch(0, 4, buckets=2), 0, 0)  # one in-progress part per bucket
    writer.close()
    as_old_record(tmp_path / "old" / "_file_sink" / f"{0:020d}.json", 2, tmp_path / "old")
    with open(tmp_path / "old" / "k=b0" / ".part-w-0.jsonl.inprogress", "ab") as fh:
        fh.write(b'{"id": 99, "half a ro')  # a crashed batch's partial write, to truncate on recovery
    root = tmp_path / "new" if moved else tmp_path / "old"
    if moved:
        shutil.move(tmp_path / "old", root)
    sink = sink_at(root)
    sink.writer().write_batch(batch(4, 4, buckets=2), 1, 0, end_of_input=True)
    assert sorted(tree(root)) == ["k=b0/part-w-0.jsonl", "k=b1/part-w-0.jsonl"]
    assert sorted(sink.read()["id"]) == list(range(8))
    assert sorted(os.listdir(tmp_path)) == ["new" if moved else "old"]


def test_a_moved_version_2_record_whose_old_path_is_ambiguous_is_refused(tmp_path):
    # Buckets '' and 'x': a part finished in <old>/x/ may be bucket 'x' below <old> or bucket '' below <old>/x.
    sink = FileSink(str(tmp_path / "old")).with_buckets(CallableBuckets(lambda row, now: "x" if row["id"] else ""))
    writer = sink.with_rolling_policy(RollingPolicy.on_every_batch()).writer()
    writer.write_batch(batch(0, 1), 0, 0)
    writer.write_batch(batch(1, 1), 1, 0)  # the newest record's only path is the rename into <old>/x/
    writer.close()
    record = tmp_path / "old" / "_file_sink" / f"{1:020d}.json"
    as_old_record(record, 2, tmp_path / "old")
    assert sorted(json.loads(record.read_text())["next_part"]) == ["", "x"]
    shutil.move(tmp_path / "old", tmp_path / "new")
    with pytest.raises(RuntimeError, match=r"holds absolute paths \(version 1 or 2\) below another base path, which "
                                           r"cannot be told from them .* write the next batch at the old path first"):
        FileSink(str(tmp_path / "new")).writer()


def test_a_commit_record_named_by_another_number_is_refused_naming_it(tmp_path):
    """The newest record by name decides: a copy of record 4 named 50 was taken for the newest commit, so the writer
    went back to batch 4 (committing 5, 6, 7 again after it, then failing on a part name taken) and read() left the
    rows of batches 5 and 6 out with a warning."""
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    for batch_id in range(5):
        sink.write(batch(batch_id, 1), batch_id=batch_id)
    misnamed = tmp_path / "_file_sink" / f"{50:020d}.json"
    shutil.copy(tmp_path / "_file_sink" / f"{4:020d}.json", misnamed)
    refused = rf"file sink commit record {misnamed} \(\d+ bytes: ValueError: it holds commit 4, not commit 50 as its name"
    with pytest.raises(DamagedCommitRecordError, match=refused):
        sink.writer()
    with pytest.raises(DamagedCommitRecordError, match=refused):
        sink.read()
    misnamed.unlink()  # as the message says: moved out, the directory goes on
    sink.write(batch(5, 1), batch_id=5)
    assert sorted(sink.read()["id"]) == list(range(6))


@pytest.mark.parametrize(("written", "reader", "named"), [
    ({"format": "csv"}, {}, "FileSink format='jsonl' differs from format='csv'"),
    ({"compression": "gzip"}, {}, "FileSink compression=None differs from compression='gzip'"),
    ({}, {"format": "parquet"}, "FileSink format='parquet' differs from format='jsonl'"),
])
def test_read_with_another_format_or_compression_than_written_says_which(tmp_path, written, reader, named):
    """It failed as damage: ``CorruptPartError: finished part ... cannot be read back: JSONDecodeError``."""
    FileSink(str(tmp_path), **written).write(batch(0, 2))
    with pytest.raises(ValueError, match=rf"{named}, which the parts under .* were written with \(commit record 0\); "
                                         r"read them with FileSink\("):
        FileSink(str(tmp_path), **reader).read()
    assert sorted(FileSink(str(tmp_path), **written).read()["id"]) == [0, 1]


def test_a_bulk_format_reads_whatever_its_compression(tmp_path):
    FileSink(str(tmp_path), format="parquet", compression="zstd").write(batch(0, 2))
    assert sorted(FileSink(str(tmp_path), format="parquet").read()["id"]) == [0, 1]  # Parquet names its codec


def test_a_commit_record_of_an_unknown_version_is_refused_not_skipped(tmp_path):
    sink = open_part_sink(tmp_path)
    path = tmp_path / "_file_sink" / f"{0:020d}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "version": 99}))
    with pytest.raises(RuntimeError, match="commit record version 99 is unknown; this release reads versions 1 to 6"):
        sink.writer()
    assert (tmp_path / ".part-w-0.jsonl.inprogress").exists()  # not deleted as a stray of no commit


def record_fsyncs(monkeypatch, root):
    """Replace os.fsync by a recorder of the synced paths (relative to ``root``, '.' for it) in order."""
    synced = []

    def fsync(fd):
        synced.append(os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), root))

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_parts_and_the_record_are_fsynced_before_the_commit_and_renames_after(tmp_path, monkeypatch):
    synced = record_fsyncs(monkeypatch, tmp_path)
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_buckets(ColumnBuckets("k"))
    writer = sink.with_rolling_policy(RollingPolicy(max_batches=2)).writer(lambda phase, b: synced.append(phase))
    writer.write_batch(batch(0, 2), 0, 0)  # opens k=b0/.part-w-0.jsonl.inprogress
    record = os.path.join("_file_sink", f".{0:020d}.json.tmp")
    assert synced == [
        "mid_write", "after_staging",
        "k=b0/.part-w-0.jsonl.inprogress", ".", "k=b0",  # the part's bytes and its new directory entries
        ".", record, "_file_sink",  # the record's directory (new), its bytes before the rename, then the rename
        "after_commit_record",
    ]
    synced.clear()
    writer.write_batch(batch(2, 2), 1, 0)  # appends to the part and rolls it
    assert synced == [
        "mid_write", "after_staging",
        "k=b0/.part-w-0.jsonl.inprogress",  # once, though it was appended to and then sealed
        os.path.join("_file_sink", f".{1:020d}.json.tmp"), "_file_sink",
        "after_commit_record", "mid_rename",
        "k=b0",  # the rename to part-w-0.jsonl, before the next record forgets it was due
    ]


def test_other_filesystems_are_not_fsynced(monkeypatch):
    synced = record_fsyncs(monkeypatch, "/")
    FileSink("memory://no-fsync/out").write(batch(0, 2))
    assert synced == []


def test_every_directory_level_of_a_new_part_is_fsynced_before_the_commit(tmp_path, monkeypatch):
    synced = record_fsyncs(monkeypatch, tmp_path)
    sink = FileSink(str(tmp_path), format="parquet").with_buckets(CallableBuckets(lambda row, now: "y=2024/m=01"))
    sink.writer(lambda phase, b: synced.append(phase)).write_batch(batch(0, 2), 0, 0)
    before_commit = synced[: synced.index("after_commit_record")]
    assert {".", "y=2024", "y=2024/m=01"} <= set(before_commit)


def test_a_bucket_directory_is_listed_once_not_checked_per_part():
    # Each call is a round trip on an object store; counting:// counts them (and cannot append, like one).
    sink = FileSink("counting://calls/out", format="parquet").with_writer_id("w").with_buckets(ColumnBuckets("k"))
    writer = sink.writer()
    calls = counted_calls()
    calls.clear()
    writer.write_batch(batch(0, 4, buckets=2), 0, 0)
    assert calls["ls"] == 4  # k=b0/ and k=b1/ for their part names, _file_sink/ for old records, the lease
    assert calls["makedirs"] == 2  # k=b0/, k=b1/ (_file_sink/ was made for the lease when the writer opened)
    for batch_id in (1, 2):
        calls.clear()
        writer.write_batch(batch(4 * batch_id, 4, buckets=2), batch_id, 0)
        assert calls == {
            "pipe_file": 3, "mv": 3,  # per part and for the record: upload, then rename to its final name
            "exists": 1,  # _file_sink/, before writing the record
            "ls": 2, "cat_file": 1,  # the records, to prune old ones; the lease, still this writer's (fencing)
        }
    writer.close()
    same_name = FileSink("counting://calls/same", format="parquet").with_part_names(fn=lambda w, n: "p.parquet")
    writer = same_name.writer()
    writer.write_batch(batch(0, 1), 0, 0)
    with pytest.raises(ValueError, match="would be named 'p.parquet', which another part already has"):
        writer.write_batch(batch(1, 1), 1, 0)  # the writer knows the names it gave without asking


def test_the_writer_keeps_the_names_of_recent_bucket_directories_only(monkeypatch):
    """A stream that moves on to new buckets forever must not keep every directory's names; a directory
    listed again still refuses a name already there."""
    from storage.file_sink import writer as writer_module

    monkeypatch.setattr(writer_module, "LISTED_DIRECTORIES", 2)
    sink = (FileSink("counting://calls/recent", format="parquet").with_buckets(ColumnBuckets("k"))
            .with_part_names(fn=lambda w, n: "p.parquet"))  # one part per bucket; a second one clashes
    writer = sink.writer()
    calls = counted_calls()
    calls.clear()
    writer.write_batch(batch(0, 4, buckets=4), 0, 0)
    assert calls["ls"] == 4 + 2  # each of the 4 bucket directories once, then the records and the lease
    assert len(writer._names._names_in_directory) == 2  # k=b2/ and k=b3/; k=b0/ and k=b1/ were let go
    with pytest.raises(ValueError, match=r"bucket 'k=b0' would be named 'p.parquet', which another part already has"):
        writer.write_batch(batch(0, 1), 1, 0)  # k=b0/ is listed again, and its part is found
