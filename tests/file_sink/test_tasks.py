"""The executor-side protocol without Spark: task attempts write their partitions, the driver commits the reports.

Spark decides which attempt of a partition wins (one report per partition);
these tests play Spark: they run attempts (retried, duplicated, failing), pass
the winners' reports to the commit, and check that every row is in the output
exactly once, in ``read()`` and in a plain listing of the visible files.
"""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.file_sink import ColumnBuckets, FileSink, RollingPolicy
from storage.file_sink.commit import commit_batch
from storage.file_sink.directory import SinkDirectory
from storage.file_sink.tasks import TaskInfo, write_task

from .helpers import batch, tree

OWNER = "query-0123456789ab"


class Died(RuntimeError):
    """A task attempt stopped mid-write (an executor lost, a Python worker killed)."""


def hold(sink, owner=OWNER):
    """The query's lease, as ``FileSink.start`` claims it."""
    directory = SinkDirectory(sink)
    lease = directory.lease(owner)
    directory.claim(lease, take_over=False)
    return lease


def attempt(sink, batch_id, partition, rows, attempt_number=0, hook=None, end_of_input=False, now=0):
    task = TaskInfo(OWNER, batch_id, partition, attempt_number, now)
    return write_task(sink, task, [rows], end_of_input, hook or (lambda phase, b: None))


def die_at(phase):
    def hook(seen, batch_id):
        if seen == phase:
            raise Died(phase)
    return hook


def rows_of(sink):
    return sorted(sink.read()["id"].tolist()) if sink.finished_files() else []


def listed_rows(sink, root):
    """The rows of every visible file, read without the sink (a plain listing, as Spark or pandas reads)."""
    import json

    out = []
    for path, data in tree(root).items():
        if not any(part.startswith((".", "_")) for part in path.split(os.sep)):
            out += [json.loads(line)["id"] for line in data.decode().splitlines()]
    return sorted(out)


def test_two_partitions_of_one_batch_each_write_parts_the_driver_commits_once(tmp_path):
    sink = FileSink(str(tmp_path)).with_buckets(ColumnBuckets("k")).with_rolling_policy(RollingPolicy(max_batches=2))
    lease = hold(sink)
    reports = [attempt(sink, 0, 0, batch(0, 6, 2)), attempt(sink, 0, 1, batch(6, 6, 2))]
    assert rows_of(sink) == []  # nothing visible before the commit
    assert commit_batch(sink, 0, reports, lease, 0)
    assert rows_of(sink) == []  # committed, still in progress (rolled every 2 batches)
    reports = [attempt(sink, 1, 0, batch(12, 2, 2)), attempt(sink, 1, 1, batch(14, 2, 2))]
    assert commit_batch(sink, 1, reports, lease, 0)
    assert rows_of(sink) == listed_rows(sink, tmp_path) == list(range(16))
    finished = sorted(p.split(str(tmp_path))[1] for p in sink.finished_files())
    assert len(finished) == 4  # a part per partition and bucket, appended to across both batches


def test_a_retried_attempt_wins_and_the_failed_attempts_files_are_removed(tmp_path):
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy(max_batches=3))
    lease = hold(sink)
    commit_batch(sink, 0, [attempt(sink, 0, 0, batch(0, 3))], lease, 0)
    with pytest.raises(Died):
        attempt(sink, 1, 0, batch(3, 3), attempt_number=0, hook=die_at("mid_write"))  # appended, then died
    retry = attempt(sink, 1, 0, batch(3, 3), attempt_number=1)
    assert retry.superseded  # the slot's part had uncommitted bytes of the dead attempt: the retry copied it
    assert commit_batch(sink, 1, [retry], lease, 0, end_of_input=True)
    assert rows_of(sink) == listed_rows(sink, tmp_path) == list(range(6))
    assert [name for name in tree(tmp_path) if name.startswith(".")] == []  # no stray in-progress file


@pytest.mark.parametrize("winner", ["claimant", "copier"])
def test_duplicate_attempts_running_together_one_wins_and_nothing_is_duplicated(tmp_path, winner):
    """Two attempts of one partition (a speculative duplicate): the first claims the slot's open part and appends
    to it in place, the other copies the committed bytes into a part of its own; whichever Spark reports wins."""
    sink = FileSink(str(tmp_path), compression="gzip").with_rolling_policy(RollingPolicy(max_batches=5))
    lease = hold(sink)
    commit_batch(sink, 0, [attempt(sink, 0, 0, batch(0, 4))], lease, 0)
    claimed, copier_done, results = threading.Event(), threading.Event(), {}

    def first(phase, batch_id):  # holds the claim, before writing, until the duplicate has written everything
        if phase == "task_started":
            claimed.set()
            assert copier_done.wait(60)

    def run_first():
        results["claimant"] = attempt(sink, 1, 0, batch(4, 4), attempt_number=0, hook=first)

    thread = threading.Thread(target=run_first)
    thread.start()
    assert claimed.wait(60)
    results["copier"] = attempt(sink, 1, 0, batch(4, 4), attempt_number=1)
    copier_done.set()
    thread.join()
    assert not results["claimant"].superseded and results["copier"].superseded
    assert commit_batch(sink, 1, [results[winner]], lease, 0)
    assert commit_batch(sink, 2, [attempt(sink, 2, 0, batch(8, 2))], lease, 0, end_of_input=True)
    assert rows_of(sink) == list(range(10))
    assert [name for name in tree(tmp_path) if name.startswith(".")] == []  # the loser's files are gone


def test_a_bucket_name_too_long_for_the_filesystem_fails_the_attempt_before_it_writes(tmp_path):
    sink = FileSink(str(tmp_path)).with_buckets(ColumnBuckets("k"))
    lease = hold(sink)
    too_long = pa.table({"id": [0, 1], "k": ["a", "x" * 300]})
    with pytest.raises(ValueError, match=r"^ColumnBuckets column='k' has a value of 300 characters"):
        attempt(sink, 0, 0, too_long)
    assert os.listdir(tmp_path) == ["_file_sink"]  # not even the directory k=a
    assert commit_batch(sink, 0, [attempt(sink, 0, 0, too_long.slice(0, 1), attempt_number=1)], lease, 0,
                        end_of_input=True)
    assert rows_of(sink) == [0]


def test_a_batch_the_records_hold_is_not_committed_again(tmp_path):
    # The driver died after the commit record, before Spark marked the batch done: Spark replays it.
    sink = FileSink(str(tmp_path), format="parquet")
    lease = hold(sink)
    assert commit_batch(sink, 0, [attempt(sink, 0, 0, batch(0, 3)), attempt(sink, 0, 1, batch(3, 3))], lease, 0)
    replay = [attempt(sink, 0, 0, batch(0, 3)), attempt(sink, 0, 1, batch(3, 3))]
    assert all(r.skipped for r in replay)  # the tasks see the record and write nothing
    assert not commit_batch(sink, 0, replay, lease, 0)
    assert rows_of(sink) == list(range(6))


def test_a_replay_written_before_the_record_was_seen_is_deleted_not_committed(tmp_path):
    sink = FileSink(str(tmp_path), format="parquet")
    lease = hold(sink)
    early = [attempt(sink, 0, 0, batch(0, 3))]  # written before the first attempt's commit
    assert commit_batch(sink, 0, [attempt(sink, 0, 0, batch(0, 3))], lease, 0)
    assert not commit_batch(sink, 0, early, lease, 0)
    assert rows_of(sink) == list(range(3))
    assert [name for name in tree(tmp_path) if name.startswith(".")] == []


def test_an_idle_partitions_part_is_rolled_by_the_driver_on_processing_time(tmp_path):
    sink = FileSink(str(tmp_path)).with_encryption(b"k" * 16).with_rolling_policy(RollingPolicy(inactivity_ms=100))
    lease = hold(sink)
    commit_batch(sink, 0, [attempt(sink, 0, 0, batch(0, 2)), attempt(sink, 0, 1, batch(2, 2))], lease, 0)
    commit_batch(sink, 1, [attempt(sink, 1, 0, batch(4, 2), now=150)], lease, 150)  # partition 1 idle for 150 ms
    assert rows_of(sink) == [2, 3]  # partition 1's part, idle, rolled by the driver; partition 0's was written to
    commit_batch(sink, 2, [attempt(sink, 2, 0, batch(6, 1), now=160)], lease, 160, end_of_input=True)
    assert rows_of(sink) == list(range(7))


def test_a_new_query_finishes_the_parts_an_earlier_one_left_open(tmp_path):
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy(max_batches=5))
    lease = hold(sink)
    commit_batch(sink, 0, [attempt(sink, 0, 0, batch(0, 2))], lease, 0)
    lease.release()
    other = hold(sink, "query-another")
    report = write_task(sink, TaskInfo("query-another", 0, 0, 0, 0), [batch(2, 2)])
    assert commit_batch(sink, 0, [report], other, 0)  # its batch 0 is its own, not the first query's
    assert rows_of(sink) == [0, 1]  # the first query's part, finished; the new one's is in progress


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fmt=st.sampled_from(["jsonl", "csv", "parquet"]),
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["ok", "fail-first", "duplicate"])),
                 min_size=1, max_size=3),
        min_size=1, max_size=4),
    max_batches=st.integers(1, 3),
    buckets=st.integers(1, 2),
    encrypted=st.booleans(),
)
def test_the_output_is_the_input_whatever_attempts_fail_or_duplicate(
    tmp_path_factory, fmt, batches, max_batches, buckets, encrypted
):
    """Reference model: the committed output is every input row once, whatever the attempts did."""
    root = tmp_path_factory.mktemp("out")
    sink = FileSink(str(root), format=fmt).with_buckets(ColumnBuckets("k"))
    if fmt != "parquet":
        sink = sink.with_rolling_policy(RollingPolicy(max_batches=max_batches))
    if encrypted:
        sink = sink.with_encryption(b"e" * 16)
    lease = hold(sink)
    expected, start = [], 0
    for batch_id, partitions in enumerate(batches):
        reports = []
        for partition, (size, fate) in enumerate(partitions):
            rows = batch(start, size, buckets)
            start += size
            expected += rows["id"].to_pylist()
            if fate == "fail-first" and size:  # a task of no rows writes nothing to die in
                with pytest.raises(Died):  # a hook that never fired would leave the failure untested
                    attempt(sink, batch_id, partition, rows, 0, hook=die_at("mid_write"))
            winner = attempt(sink, batch_id, partition, rows, 1 if fate != "ok" else 0)
            if fate == "duplicate":
                attempt(sink, batch_id, partition, rows, 2)  # finished after the winner; Spark drops its report
            reports.append(winner)
        last = batch_id == len(batches) - 1
        commit_batch(sink, batch_id, reports, lease, 0, end_of_input=last)
    out = sink.read()
    assert sorted(out["id"].tolist() if len(out) else []) == sorted(expected)
    assert not [name for name in tree(root) if os.path.basename(name).startswith(".")]


def open_files_under(root) -> list[str]:
    """The files under ``root`` this process holds open (Linux: its descriptors in /proc)."""
    fds = "/proc/self/fd"
    paths = []
    for fd in os.listdir(fds):
        try:
            paths.append(os.readlink(f"{fds}/{fd}"))
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return [p for p in paths if p.startswith(str(root))]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads open descriptors from /proc")
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_failed_attempt_leaves_no_file_open(tmp_path, monkeypatch, fmt):
    """A task that raises mid-write closes its part files, unfinished: Python workers are reused, and the traceback
    Spark keeps would otherwise hold them open."""
    from storage.file_sink import parts

    monkeypatch.setattr(parts, "SPILL_BYTES", 1)  # a bulk part's bytes go to its file at once
    monkeypatch.setattr(parts, "ROW_GROUP_BYTES", 1)
    sink = FileSink(str(tmp_path), format=fmt)
    if fmt == "jsonl":
        sink = sink.with_rolling_policy(RollingPolicy(max_batches=3))

    def rows_then_failure():
        yield batch(0, 3)
        raise Died("the input failed")

    with pytest.raises(Died) as failure:
        if fmt == "jsonl":  # dies once its rows are appended
            write_task(sink, TaskInfo(OWNER, 0, 0, 0, 0), [batch(0, 3)], hook=die_at("mid_write"))
        else:  # its input fails once a row group went out
            write_task(sink, TaskInfo(OWNER, 0, 0, 0, 0), rows_then_failure())
    assert [name for name in tree(tmp_path) if ".inprogress" in name]  # it had written a part
    assert failure.traceback  # the frames, and what they refer to, are still alive here
    assert open_files_under(tmp_path) == []


def test_a_stream_evicted_on_a_filesystem_that_cannot_append_rolls_its_part_not_overwrites_it(tmp_path, monkeypatch):
    """On an object store a part evicted from the open-file cache and flushed again was reopened with "wb": its
    earlier bytes were written over, and the committed batch read back as a CorruptPartError (rows lost)."""
    from storage.file_sink import parts

    monkeypatch.setattr(parts, "FLUSH_BYTES", 64)  # several flushes per bucket and record batch
    sink = (FileSink(f"noappend://{tmp_path}", format="jsonl").with_buckets(ColumnBuckets("k"))
            .with_rolling_policy(RollingPolicy.on_every_batch()).with_open_files(1))
    lease = hold(sink)

    def rows(k, start, n):
        return pa.table({"k": [k] * n, "id": list(range(start, start + n))})

    task = TaskInfo(OWNER, 0, 0, 0, 0)  # one partition's record batches: a, b, a (each flushed, evicting the other)
    report = write_task(sink, task, [rows("a", 0, 20), rows("b", 20, 20), rows("a", 40, 20)], False, lambda p, b: None)
    assert commit_batch(sink, 0, [report], lease, 0)
    lease.release()
    # A writer's batch: a little of "a" buffered, then enough of "b" to flush: rolling "a" at the batch's end
    # evicts "b"'s stream, which rolls "b" before the end of batch reaches it.
    writer = sink.writer()
    writer.write_batch(pa.concat_tables([rows("a", 60, 1), rows("b", 61, 20)]), batch_id=1, processing_time_ms=0)
    writer.close()
    assert rows_of(sink) == list(range(81))
