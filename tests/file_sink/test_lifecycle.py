"""Part files move in-progress -> pending -> finished, and a replayed batch writes nothing."""

import os

import pandas as pd
import pyarrow.parquet as pq
import pytest

from storage.file_sink import ColumnBuckets, FileSink, RollingPolicy

from .helpers import batch, tree  # helpers also registers noappend://


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


def test_a_record_the_directory_contradicts_is_reported(tmp_path):
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=5))
    writer = sink.writer()
    writer.write_batch(batch(0, 5), 0, 0)
    writer.close()
    os.truncate(tmp_path / ".part-w-0.jsonl.inprogress", 3)
    with pytest.raises(RuntimeError, match="were committed; the sink directory was changed"):
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
