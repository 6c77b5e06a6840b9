"""The sink tried as a hostile user would (issue 18's findings): each failure is loud and names what it is about."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest

import storage.file_sink.directory as directory_module
import storage.file_sink.reading as reading
import storage.file_sink.writer as writer_module
from storage._lease import Lease
from storage.file_sink import (
    ColumnBuckets,
    CommittedPartMissingError,
    CorruptPartError,
    DamagedCommitRecordError,
    FileSink,
    RollingPolicy,
    SinkFencedError,
    SinkHeldError,
)
from storage.file_sink.state import STATE_DIR

from .crash_writer import CRASH_EXIT, sink_from
from .helpers import as_old_record, batch, tree
from .test_crash_restore import run

# ---------------------------------------------------------------- a committed part that is gone


def test_a_pending_part_deleted_after_its_commit_is_an_error_naming_it_and_its_batch(tmp_path):
    # Killed after batch 1's commit record, before its renames; then a cleanup deletes the hidden pending parts.
    spec = {"sizes": [4, 4, 4], "buckets": 2, "policy": {"max_batches": 2}, "path": str(tmp_path)}
    assert run({**spec, "crash": ["after_commit_record", 1]}) == CRASH_EXIT
    pending = [p for p in tree(tmp_path) if p.endswith(".inprogress")]
    assert len(pending) == 2
    for name in pending:
        os.remove(tmp_path / name)
    sink = sink_from(spec)
    with pytest.raises(CommittedPartMissingError, match=r"part .*k=b0/part-w-0\.jsonl of batch 1 .* is neither "
                                                        r"pending \(.*\.part-w-0\.jsonl\.inprogress\) nor finished"):
        sink.writer()
    with pytest.raises(CommittedPartMissingError, match=r"finished part .*part-w-0\.jsonl is missing"):
        sink.read()


def test_an_in_progress_part_deleted_after_its_commit_is_an_error_naming_it(tmp_path):
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=5))
    writer = sink.writer()
    writer.write_batch(batch(0, 4), 0, 0)
    writer.close()
    os.remove(tmp_path / ".part-w-0.jsonl.inprogress")
    with pytest.raises(CommittedPartMissingError, match=r"in-progress part .*\.part-w-0\.jsonl\.inprogress of "
                                                        r"commit record 0 \(batch 0\) is missing: it holds \d+ "
                                                        r"committed bytes"):
        sink.writer()


# ---------------------------------------------------------------- one writer per directory


def test_a_second_writer_opened_beside_the_first_is_refused(tmp_path):
    sink = FileSink(str(tmp_path))
    first = sink.writer()
    with pytest.raises(SinkHeldError, match=rf"file sink {tmp_path} is held by another writer \(epoch 1, process "
                                            rf"{os.getpid()} on .*one writer per sink directory"):
        sink.writer()
    first.write_batch(batch(0, 3), 0, 0, end_of_input=True)
    first.close()
    assert sorted(sink.read()["id"]) == [0, 1, 2]


def test_a_second_writer_opened_after_the_first_commit_is_refused(tmp_path):
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy(max_batches=3))
    first = sink.writer()
    first.write_batch(batch(0, 3), 0, 0)
    with pytest.raises(SinkHeldError, match="is held by another writer"):
        sink.with_writer_id("other").writer()
    first.write_batch(batch(3, 3), 1, 0, end_of_input=True)
    first.close()
    assert sorted(sink.read()["id"]) == list(range(6))


HOLDER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from storage.file_sink import FileSink, RollingPolicy
    import pyarrow as pa
    writer = FileSink({path!r}).with_rolling_policy(RollingPolicy(max_batches=5)).writer()
    writer.write_batch(pa.table({{"id": [0, 1]}}), 0, 0)
    print("ready", flush=True)
    sys.stdin.readline()                     # the test takes the directory over meanwhile
    try:
        writer.write_batch(pa.table({{"id": [2, 3]}}), 1, 0)
        print("acknowledged", flush=True)
    except Exception as exc:
        print(type(exc).__name__, exc, flush=True)
""")


def test_a_writer_of_another_process_is_refused_and_a_take_over_fences_it_off(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=root, path=str(tmp_path))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy(max_batches=5))
        with pytest.raises(SinkHeldError, match=rf"process {holder.pid} on"):
            sink.writer()
        new = sink.writer(take_over=True)  # as if the holder were dead
        holder.stdin.write("\n")
        holder.stdin.flush()
        answer = holder.stdout.readline()
        assert answer.startswith("SinkFencedError") and "was taken over by a newer writer" in answer
        assert new.committed_batch_id == 0  # the holder's batch 0 counts; its batch 1 was refused, not half-written
        new.write_batch(pa.table({"id": [2, 3]}), 1, 0, end_of_input=True)
        new.close()
        assert sorted(sink.read()["id"]) == [0, 1, 2, 3]
    finally:
        holder.kill()
        holder.wait()


def test_a_writer_with_its_own_id_keeps_its_own_batch_ids(tmp_path):
    """Delta's txnAppId: a second writer's batch 0 is its own, not a replay of the first writer's batch 0."""
    FileSink(str(tmp_path)).write(batch(0, 3), batch_id=0)
    FileSink(str(tmp_path)).with_writer_id("second").write(batch(3, 3), batch_id=0)
    FileSink(str(tmp_path)).write(batch(6, 3), batch_id=0)  # the first writer's batch 0 again: a replay
    assert sorted(FileSink(str(tmp_path)).read()["id"]) == list(range(6))


def test_a_writer_dropped_without_close_gives_the_directory_up(tmp_path):
    sink = FileSink(str(tmp_path))
    sink.writer().write_batch(batch(0, 2), 0, 0)
    sink.writer().write_batch(batch(2, 2), 1, 0, end_of_input=True)
    assert sorted(sink.read()["id"]) == [0, 1, 2, 3]


# ---------------------------------------------------------------- damaged and truncated parts


FORMATS = [
    ("jsonl", None, None), ("jsonl", "gzip", None), ("jsonl", "zstd", b"k" * 16),
    ("csv", None, None), ("csv", "bz2", b"k" * 16),
    ("text", None, None),
    ("parquet", None, None), ("parquet", "zstd", b"k" * 16),
    ("orc", None, None), ("orc", "zlib", None),
    ("avro", None, None), ("avro", "deflate", b"k" * 16),
]


def two_parts(tmp_path, fmt, codec, key):
    sink = FileSink(str(tmp_path), format=fmt, compression=codec).with_rolling_policy(RollingPolicy.on_every_batch())
    if key:
        sink = sink.with_encryption(key)
    rows = (lambda start: pa.table({"value": [f"row-{i}" for i in range(start, start + 20)]}))
    sink.write(rows(0))
    sink.write(rows(20))
    first, second = sink.finished_files()
    return sink, second


def cut_at_a_row_boundary(data: bytes, fmt: str) -> bytes:
    """The part without its last row, where a row format ends one (so the format itself cannot tell)."""
    if fmt in ("jsonl", "csv", "text"):
        return data[: data.rstrip(b"\n").rfind(b"\n") + 1]
    return data[: len(data) - 7]


@pytest.mark.parametrize(("fmt", "codec", "key"), FORMATS)
def test_a_truncated_part_is_detected_and_named_in_every_format(tmp_path, fmt, codec, key):
    sink, damaged = two_parts(tmp_path, fmt, codec, key)
    data = Path(damaged).read_bytes()
    plain = fmt in ("jsonl", "csv", "text") and codec is None and key is None
    Path(damaged).write_bytes(cut_at_a_row_boundary(data, fmt) if plain else data[: len(data) // 2])
    with pytest.raises(CorruptPartError, match=rf"finished part {damaged} "):
        sink.read()


@pytest.mark.parametrize(("fmt", "codec", "key"), FORMATS)
def test_a_changed_byte_is_detected_and_named_in_every_format(tmp_path, fmt, codec, key):
    sink, damaged = two_parts(tmp_path, fmt, codec, key)
    data = bytearray(Path(damaged).read_bytes())
    data[len(data) // 2] ^= 1  # one bit flipped: the length is unchanged
    Path(damaged).write_bytes(bytes(data))
    with pytest.raises(CorruptPartError, match=rf"finished part {damaged} (cannot be read back: \w+|has the "
                                               r"\d+ bytes committed, but not the same ones \(CRC-32)"):
        sink.read()


def test_a_part_appended_to_after_its_commit_is_detected(tmp_path):
    sink, damaged = two_parts(tmp_path, "jsonl", None, None)
    with open(damaged, "ab") as fh:
        fh.write(b'{"value": "a row nobody committed"}\n')
    with pytest.raises(CorruptPartError, match=rf"finished part {damaged} has \d+ bytes, but \d+ were committed: "
                                               r"it was appended to or replaced since"):
        sink.read()


def test_lengths_come_from_the_manifest_once_old_records_are_pruned(tmp_path):
    sink = FileSink(str(tmp_path), format="csv").with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    for batch_id in range(25):  # manifests after commits 9 and 19; records before 19 pruned
        writer.write_batch(pa.table({"value": [batch_id]}), batch_id, 0)
    writer.close()
    names = sorted(os.listdir(tmp_path / "_file_sink"))
    assert [name.split(".")[0] for name in names if name.endswith(".manifest")] == [f"{19:020d}"]  # 9's pruned
    assert f"{5:020d}.json" not in names
    first = min(sink.finished_files())  # finished by batch 0, known through the manifest only
    with open(first, "r+b") as fh:
        fh.truncate(os.path.getsize(first) - 2)  # "0\n" gone: the header alone is a valid CSV
    with pytest.raises(CorruptPartError, match=rf"finished part {first} has \d+ bytes, but \d+ were committed"):
        sink.read()


# ---------------------------------------------------------------- damaged commit records


def listing(root: Path) -> dict[str, int]:
    """Every file below ``root``, the sink's own included, with its size."""
    return {str(path.relative_to(root)): path.stat().st_size for path in root.rglob("*") if path.is_file()}


def record(root: Path, sequence: int) -> Path:
    return root / "_file_sink" / f"{sequence:020d}.json"


def three_batches(tmp_path):
    """Records 0 to 2; batch 2's rows are in an in-progress part only record 2 knows."""
    sink = FileSink(str(tmp_path)).with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=2))
    writer = sink.writer()
    for batch_id in range(3):  # batch 1 rolls part 0, batch 2 opens part 1
        writer.write_batch(batch(3 * batch_id, 3), batch_id, 0)
    writer.close()
    return sink


DAMAGE = {
    "truncated": lambda data: data[:40],
    "zeroed": lambda data: bytes(len(data)),
    "other bytes": lambda data: b"\xff\xfe" + data[2:],
    "empty": lambda data: b"",
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_newest_record_is_refused_by_name_not_taken_for_a_fence(tmp_path, damage):
    # Earlier, the writer went back to record 1, deleted batch 2's part as a stray, then its commit found record
    # 2's name taken: SinkFencedError, "taken over". read() went back without a word.
    sink = three_batches(tmp_path)
    damaged = record(tmp_path, 2)
    damaged.write_bytes(DAMAGE[damage](damaged.read_bytes()))
    files = listing(tmp_path)
    refused = (rf"commit record {damaged} \({damaged.stat().st_size} bytes: \w+: .*\) is damaged: on the local disk "
               r"a record is published whole .* it was truncated, zeroed or overwritten since\. The sink goes no "
               r"further rather than go back to the newest record that reads, record 1 \(batch 1 of 'w'\), .* "
               r"Restore it from a backup; or move it out of _file_sink/ to go back to that record, knowing")
    with pytest.raises(DamagedCommitRecordError, match=refused):
        sink.writer()
    with pytest.raises(DamagedCommitRecordError, match=refused):
        sink.read()
    assert listing(tmp_path) == files  # nothing recovered, deleted or written, not even a lease


def test_a_damaged_record_with_none_before_it_is_refused(tmp_path):
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy(max_batches=2))
    sink.write(batch(0, 2))
    record(tmp_path, 0).write_bytes(b"")
    with pytest.raises(DamagedCommitRecordError, match=r"newest record that reads, no record \(as before the first "
                                                       r"commit\), .* to go back to no record"):
        sink.writer()


def test_a_batch_crashed_before_its_renames_is_not_dropped_by_read_when_its_record_is_damaged(tmp_path):
    # Killed after batch 1's record, before its renames: read() takes the pending parts from the record. Earlier,
    # with that record damaged, read() went back to record 0, which knows them as in progress, and read no row.
    spec = {"sizes": [4, 4], "buckets": 1, "policy": {"max_batches": 2}, "path": str(tmp_path)}
    assert run({**spec, "crash": ["after_commit_record", 1]}) == CRASH_EXIT
    assert len(sink_from(spec).read()) == 8
    os.truncate(record(tmp_path, 1), 10)
    with pytest.raises(DamagedCommitRecordError, match=r"00000000000000000001\.json \(10 bytes: JSONDecodeError"):
        sink_from(spec).read()


def test_a_damaged_record_moved_away_goes_back_to_the_record_before(tmp_path):
    sink = three_batches(tmp_path / "out")
    os.rename(record(tmp_path / "out", 2), tmp_path / "damaged.json")  # out of the sink directory
    writer = sink.writer()
    assert writer.committed_batch_id == 1  # batch 2 is forgotten: its part is deleted as a stray, and written again
    assert writer.write_batch(batch(6, 3), 2, 0, end_of_input=True)
    writer.close()
    assert sorted(sink.read()["id"]) == list(range(9))


def test_a_damaged_record_the_newest_needs_for_lengths_is_refused(tmp_path):
    # Records 0 to 8 hold the lengths of the parts they finished until the manifest of commit 9.
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    for batch_id in range(9):
        writer.write_batch(batch(batch_id, 1), batch_id, 0)
    record(tmp_path, 1).write_bytes(b"{}")
    files = {name: size for name, size in listing(tmp_path).items() if "lease" not in name}
    refused = (rf"commit record {record(tmp_path, 1)} \(2 bytes: KeyError: 'version'\) is damaged: .* Commit \d+ "
               r"reads the parts finished since the last manifest from the records before it, and only this one knows "
               r"the parts it finished or removed")
    with pytest.raises(DamagedCommitRecordError, match=refused):
        sink.read()  # earlier: read the part of batch 1 unchecked
    with pytest.raises(DamagedCommitRecordError, match=refused):
        writer.write_batch(batch(9, 1), 9, 0)  # earlier: a manifest without that part, unchecked from then on
    writer.close()
    assert not any(name.endswith(".manifest") for name in os.listdir(tmp_path / "_file_sink"))
    assert {name: size for name, size in listing(tmp_path).items() if "lease" not in name} == files  # rolled back


def test_a_writer_whose_record_number_another_writer_took_is_still_fenced(tmp_path):
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    first = sink.writer()
    first.write_batch(batch(0, 2), 0, 0)
    second = sink.writer(take_over=True)
    second.write_batch(batch(2, 2), 1, 0)  # record 1
    with pytest.raises(SinkFencedError, match=r"commit 00000000000000000001\.json under .* was published by another "
                                              r"writer first: this writer was taken over"):
        first.write_batch(batch(4, 2), 1, 0)
    second.close()
    assert sorted(sink.read()["id"]) == [0, 1, 2, 3]


def test_a_torn_newest_record_elsewhere_is_skipped_and_overwritten(tmp_path):
    # Where a crash can tear a record (no atomic rename), the next commit overwrites it.
    path = f"memory://{tmp_path.name}/out"
    sink = FileSink(path).with_writer_id("w").with_rolling_policy(RollingPolicy(max_batches=5))
    writer = sink.writer()
    writer.write_batch(batch(0, 2), 0, 0)
    writer.write_batch(batch(2, 2), 1, 0)  # appended to the part batch 0 opened
    writer.close()
    fs = fsspec.filesystem("memory")
    torn = f"/{tmp_path.name}/out/_file_sink/{1:020d}.json"
    fs.pipe_file(torn, fs.cat_file(torn)[:40])
    writer = sink.writer()
    assert writer.committed_batch_id == 0  # the part is truncated back to batch 0's rows
    writer.write_batch(batch(2, 2), 1, 0, end_of_input=True)
    writer.close()
    assert json.loads(fs.cat_file(torn))["owners"] == {"w": 1}
    assert sorted(sink.read()["id"]) == [0, 1, 2, 3]


# ---------------------------------------------------------------- arguments and paths


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"batch_id": -1}, ValueError, r"write_batch batch_id=-1 must be 0 or more"),
        ({"batch_id": "3"}, TypeError, r"write_batch batch_id='3' must be an int, not str"),
        ({"batch_id": 2.5}, TypeError, r"write_batch batch_id=2\.5 must be an int, not float"),
        ({"batch_id": True}, TypeError, r"write_batch batch_id=True must be an int, not bool"),
        ({"processing_time_ms": "now"}, TypeError, r"write_batch processing_time_ms='now' must be an int, not str"),
        ({"processing_time_ms": -5}, ValueError, r"write_batch processing_time_ms=-5 must be 0 or more"),
    ],
)
def test_bad_batch_arguments_are_refused_naming_the_parameter_and_the_value(tmp_path, arguments, error, match):
    writer = FileSink(str(tmp_path)).writer()
    with pytest.raises(error, match=match):
        writer.write_batch(batch(0, 2), **{"batch_id": 0, "processing_time_ms": 0, **arguments})
    assert writer.write_batch(batch(0, 2), 0, 0, end_of_input=True)  # nothing was dropped or committed
    writer.close()
    assert sorted(FileSink(str(tmp_path)).read()["id"]) == [0, 1]


def test_write_refuses_a_bad_batch_id_too(tmp_path):
    with pytest.raises(TypeError, match=r"FileSink.write batch_id='3' must be an int"):
        FileSink(str(tmp_path)).write(batch(0, 2), batch_id="3")


def test_a_sink_path_that_is_a_file_is_refused_naming_it(tmp_path):
    """Writing and reading failed with a bare NotADirectoryError on '<path>/_file_sink/lease'."""
    (tmp_path / "afile").write_text("not a sink\n")
    sink = FileSink(str(tmp_path / "afile"))
    refused = rf"FileSink path '{tmp_path}/afile' is a file, not a directory"
    with pytest.raises(NotADirectoryError, match=refused):
        sink.write(batch(0, 2))
    with pytest.raises(NotADirectoryError, match=refused):
        sink.read()
    assert (tmp_path / "afile").read_text() == "not a sink\n"


def test_reading_a_path_that_does_not_exist_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"FileSink path '.*a/mistyped/path' does not exist"):
        FileSink(str(tmp_path / "a" / "mistyped" / "path")).read()
    assert FileSink(str(tmp_path)).read().empty  # an existing directory with nothing finished is empty


def test_the_commit_record_keeps_the_writers_batch_ids_and_the_finished_parts(tmp_path):
    FileSink(str(tmp_path)).with_buckets(ColumnBuckets("k")).write(batch(0, 2, 2), batch_id=4)
    record = json.loads((tmp_path / "_file_sink" / f"{0:020d}.json").read_text())
    assert record["owners"] == {"default": 4} and record["version"] == 6
    part = f"part-{record['writer_id']}-0.jsonl"
    assert sorted(path for path, *_ in record["finished"]) == [f"k=b0/{part}", f"k=b1/{part}"]
    assert all(length == os.path.getsize(tmp_path / path) for path, length, *_ in record["finished"])
    assert {schema for *_, schema in record["finished"]} == set(record["schemas"])  # one text per schema named


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_copy_of_a_part_beside_it_is_not_read_twice(tmp_path, fmt):
    """The records know every part finished since version 4; a file none finished (a part copied by hand, another
    tool's output) was read as well, its rows twice."""
    sink, second = two_parts(tmp_path, fmt, None, None)
    copy = Path(second).with_name(f"{Path(second).stem} (copy){Path(second).suffix}")
    shutil.copyfile(second, copy)
    with pytest.warns(UserWarning, match=r"skipped 1 file\(s\) no commit record finished \(part-.* \(copy\)") as told:
        values = sink.read()["value"].tolist()
    assert sorted(values) == sorted(f"row-{i}" for i in range(40))
    assert told[0].filename == __file__  # the warning points at the call of read()


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_damaged_or_missing_manifest_is_named(tmp_path, damage):
    """It failed with a bare JSONDecodeError or FileNotFoundError naming nothing."""
    sink = FileSink(str(tmp_path), format="csv").with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    for batch_id in range(12):  # a manifest after commit 9
        writer.write_batch(pa.table({"value": [batch_id]}), batch_id, 0)
    writer.close()
    [manifest] = (tmp_path / "_file_sink").glob(f"{9:020d}.*.manifest")
    if damage == "truncated":
        manifest.write_bytes(manifest.read_bytes()[:10])
    else:
        manifest.unlink()
    problem = r"does not read \(10 bytes: JSONDecodeError" if damage == "truncated" else "is missing"
    with pytest.raises(DamagedCommitRecordError, match=rf"file sink manifest {manifest} {problem}"):
        sink.read()


def in_progress_names(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob(".*.inprogress"))


@pytest.mark.parametrize("prefix_length", [4, 233])  # 233: the in-progress name is 255 bytes, the most allowed
def test_taking_over_a_live_writer_again_and_again_keeps_the_copys_name_within_the_limit(tmp_path, prefix_length):
    """A take-over copies the live writer's in-progress parts. The copy was named by adding ``.e<epoch>`` to the
    part's in-progress name: one more each take-over (``.e2.e3``), and past the name limit for a part name near it,
    so the take-over failed with ``OSError: File name too long``. Now it is the final name and the epoch, or where
    that is too long the epoch and a digest of it."""
    sink = (FileSink(str(tmp_path)).with_writer_id("w").with_part_names(prefix="p" * prefix_length)
            .with_rolling_policy(RollingPolicy(max_batches=10)))
    first = sink.writer()
    first.write_batch(batch(0, 2), 0, 0)  # part 0 stays in progress
    lengths = []
    for batch_id in (1, 2, 3):
        taker = sink.writer(take_over=True)
        taker.write_batch(batch(2 * batch_id, 2), batch_id, 0)  # appends to the copy of part 0
        names = in_progress_names(tmp_path)
        assert len(names) == 1 and all(len(n.encode()) <= 255 for n in names)
        lengths.append(len(names[0]))
    assert len(set(lengths)) == 1  # no longer with each take-over
    taker.finish(processing_time_ms=0)
    taker.close()
    assert sorted(sink.read()["id"]) == list(range(8))


def test_a_read_while_the_writer_commits_reads_the_newer_commit(tmp_path, monkeypatch):
    # The tenth commit writes a manifest and prunes the records the ninth chains to: a read that had loaded the ninth
    # failed with "commit record 0 is missing", or took the missing manifest for damage to restore from a backup.
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    for batch_id in range(9):
        writer.write_batch(pa.table({"id": [batch_id]}), batch_id, 0)
    loaded = reading.load_state

    def a_commit_just_after_the_first_load(fs, root):
        state = loaded(fs, root)
        if state.batch_id == 8:
            writer.write_batch(pa.table({"id": [9]}), 9, 0)
        return state

    monkeypatch.setattr(reading, "load_state", a_commit_just_after_the_first_load)
    assert sorted(sink.read()["id"]) == list(range(10))
    writer.close()


def test_a_commit_landing_while_read_lists_the_parts_is_not_warned_of_as_foreign_files(tmp_path, monkeypatch):
    # read() warned that the new commit's part was "not this sink's parts": a false alarm of foreign files in the
    # output. A file of another tool is still named (test_a_copy_of_a_part_beside_it_is_not_read_twice).
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    writer.write_batch(pa.table({"id": [1]}), 0, 0)
    listed = reading.finished_files

    def a_commit_before_the_listing(config):
        writer.write_batch(pa.table({"id": [2]}), 1, 1)
        return listed(config)

    monkeypatch.setattr(reading, "finished_files", a_commit_before_the_listing)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(sink.read()["id"]) == [1]  # as of the commit it started from
    writer.close()


@pytest.mark.parametrize("taker", ["writer", "query"])
@pytest.mark.parametrize("first", [0, 1])
def test_a_writer_taken_over_before_its_commit_record_is_fenced_off_by_it(tmp_path, monkeypatch, first, taker):
    # The writer stalls after staging batch `first` and before its record; another takes the sink over then (a
    # writer, or a query starting: `SinkDirectory.take`). Its recovery deleted the parts staged, the old writer's
    # record, published after, named them: the new writer's batch was refused as "published by another writer
    # first" and every read failed on the missing parts.
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    taken_over = []
    commit_state = directory_module.commit_state

    def a_take_over_first(fs, root, state, *args):
        if state.batch_id == first and not taken_over:
            if taker == "writer":
                taken_over.append(sink.writer(take_over=True))
            else:
                directory = directory_module.SinkDirectory(sink)
                lease = directory.lease("query-1")
                directory.take(lease, take_over=True)
                taken_over.append(lease)
        return commit_state(fs, root, state, *args)

    monkeypatch.setattr(directory_module, "commit_state", a_take_over_first)
    old = sink.writer()
    if first:
        old.write_batch(pa.table({"id": [0]}), 0, 0)
    with pytest.raises(SinkFencedError):
        old.write_batch(pa.table({"id": [-1]}), first, 0)
    new = taken_over[0]
    if taker == "query":
        new.release()
        assert sorted(sink.read().get("id", [])) == [0][1 - first:]
        return
    assert new.committed_batch_id == first - 1
    new.write_batch(pa.table({"id": [10]}), first, 0)
    new.close()
    assert sorted(sink.read()["id"]) == [0, 10][1 - first:]


def test_a_writer_taken_over_just_after_its_commit_record_counts_and_the_fence_follows_it(tmp_path, monkeypatch):
    # Its record published between the new writer's load of the newest one and its fence: the batch counts (not
    # acknowledged to the old writer, whose lease is gone), and the new writer fences off at the next number.
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    old = sink.writer()
    old.write_batch(pa.table({"id": [0]}), 0, 0)
    monkeypatch.setattr(old.lease, "renew", lambda force=False: None)  # renewed just before it was taken over
    loaded = writer_module.load_state

    def the_old_commit_lands_after_the_load(fs, root):
        state = loaded(fs, root)
        monkeypatch.setattr(writer_module, "load_state", loaded)
        with pytest.raises(SinkFencedError):
            old.write_batch(pa.table({"id": [1]}), 1, 0)
        return state

    monkeypatch.setattr(writer_module, "load_state", the_old_commit_lands_after_the_load)
    new = sink.writer(take_over=True)
    assert new.committed_batch_id == 1
    new.write_batch(pa.table({"id": [2]}), 2, 0)
    new.close()
    assert sorted(sink.read()["id"]) == [0, 1, 2]


def test_a_take_over_after_a_compaction_killed_before_its_deletions_deletes_the_parts_it_replaced(tmp_path, monkeypatch):
    # The fence record, the newest again under the next number, dropped the compaction's removals: recovery deleted
    # none, and every row of the replaced parts was on disk twice, for any plain listing (Spark, Hive).
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    for batch_id in range(3):
        writer.write_batch(pa.table({"id": [batch_id]}), batch_id, 0)
    writer.close()

    class Killed(BaseException):
        pass

    def killed_at_its_deletions(directory, paths):
        if paths:
            raise Killed

    with monkeypatch.context() as killed:
        killed.setattr(directory_module.SinkDirectory, "remove", killed_at_its_deletions)
        killed.setattr(Lease, "release", lambda lease: None)  # a killed writer's lease stays
        with pytest.raises(Killed):
            sink.compact()
    sink.writer(take_over=True).close()
    assert len(finished := [name for name in os.listdir(tmp_path) if not name.startswith(("_", "."))]) == 1, finished
    assert sorted(sink.read()["id"]) == [0, 1, 2]


def test_a_take_over_taken_over_itself_before_its_fence_leaves_the_newer_writer_alone(tmp_path, monkeypatch):
    # B claimed; C took over and finished its fence and recovery; B's fence then found its number taken, fenced
    # again at the next one, the number C's next commit needed, and C's batch was refused as published first.
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    running = sink.writer()
    running.write_batch(pa.table({"id": [0]}), 0, 0)
    loaded, newest = writer_module.load_state, []

    def c_takes_over_while_b_restores(fs, root):
        if not newest:
            monkeypatch.setattr(writer_module, "load_state", loaded)
            newest.append(sink.writer(take_over=True))
        return loaded(fs, root)

    monkeypatch.setattr(writer_module, "load_state", c_takes_over_while_b_restores)
    with pytest.raises(SinkFencedError, match=r"taken over by a newer writer \(epoch 3; this one is epoch 2\)"):
        sink.writer(take_over=True)
    newest[0].write_batch(pa.table({"id": [1]}), 1, 0)
    newest[0].close()
    running.close()
    assert sorted(sink.read()["id"]) == [0, 1]


def test_a_take_over_taken_over_while_its_fence_lands_recovers_nothing(tmp_path, monkeypatch):
    # B's fence record landed; C took over, fenced after it and committed a batch; B, not checking its lease after
    # its fence, recovered on and deleted C's in-progress parts, and batch 1 was lost.
    rolling = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    running = rolling.writer()
    running.write_batch(pa.table({"id": [0]}), 0, 0)
    commit_state, newest, armed = directory_module.commit_state, [], [True]

    def c_takes_over_as_the_fence_lands(fs, root, state, *args):
        commit_state(fs, root, state, *args)
        if armed:
            armed.pop()
            newest.append(FileSink(str(tmp_path)).writer(take_over=True))  # its parts stay in progress
            newest[0].write_batch(pa.table({"id": [1]}), 1, 0)

    monkeypatch.setattr(directory_module, "commit_state", c_takes_over_as_the_fence_lands)
    with pytest.raises(SinkFencedError, match=r"taken over by a newer writer \(epoch 3; this one is epoch 2\)"):
        rolling.writer(take_over=True)
    monkeypatch.undo()
    newest[0].write_batch(pa.table({"id": [2]}), 2, 0)
    newest[0].finish(0)
    newest[0].close()
    running.close()
    assert sorted(rolling.read()["id"]) == [0, 1, 2]


@pytest.mark.parametrize("taker_ends", ["killed", "failed", "torn"])
def test_a_take_over_that_ends_before_its_detach_leaves_the_detach_to_the_next_writer(tmp_path, monkeypatch, taker_ends):
    # A runs; B takes it over and fences it off, then is killed (its lease stays, its process gone) or fails (its
    # lease released) before it detached A's in-progress parts. The next writer C took the directory as clean (B
    # dead or gone), appended to A's parts, which A still appended to: C's committed part was corrupt on read.
    # "torn": B killed and its lease file left empty (written without fsync), which tells nothing of the mark.
    sink = FileSink(str(tmp_path))
    running = sink.writer()
    running.write_batch(pa.table({"id": [0]}), 0, 0)

    class Killed(BaseException):
        pass

    taker = []

    def recovery_ends(directory, state):
        taker.append(directory)
        raise OSError("the taker's recovery failed") if taker_ends == "failed" else Killed

    with monkeypatch.context() as ending:
        ending.setattr(directory_module.SinkDirectory, "recover", recovery_ends)
        if taker_ends != "failed":
            ending.setattr(Lease, "release", lambda lease: None)  # a killed writer's lease stays
        with pytest.raises((Killed, OSError)):
            sink.writer(take_over=True)
    taker_lease = max((tmp_path / STATE_DIR / "lease").iterdir())
    taker_token = json.loads(taker_lease.read_text())["token"]
    if taker_ends == "torn":
        taker_lease.write_text("")
    monkeypatch.setattr(directory_module, "holder_is_dead", lambda held: held.get("token") == taker_token)
    successor = sink.writer()  # no take_over: the taker is dead, or released its lease
    successor.write_batch(pa.table({"id": [1]}), 1, 0)
    with pytest.raises(SinkFencedError):
        running.write_batch(pa.table({"id": [99]}), 1, 0)  # appends to its parts, then finds its record taken
    successor.write_batch(pa.table({"id": [2]}), 2, 0)
    successor.finish(0)
    successor.close()
    assert sorted(sink.read()["id"]) == [0, 1, 2]


def test_a_take_over_that_detached_leaves_a_clean_directory(tmp_path):
    # The mark that a detach is owed goes once it is done: the writer after a finished take-over fences nothing.
    sink = FileSink(str(tmp_path))
    running = sink.writer()
    running.write_batch(pa.table({"id": [0]}), 0, 0)
    sink.writer(take_over=True).close()
    records = sorted(os.listdir(tmp_path / STATE_DIR))
    sink.writer().close()
    assert sorted(os.listdir(tmp_path / STATE_DIR)) == records
    running.close()


@pytest.mark.parametrize("rolling", ["by_size", "by_batch"])
def test_a_writer_taken_over_that_writes_again_touches_none_of_its_successors_parts(tmp_path, rolling):
    # Both named their next part by the writer id and number of the same record: the old writer, rolling on,
    # appended its refused batch into the new writer's in-progress part of that name (every read() then failed,
    # and a plain listing read rows of a batch never acknowledged), or left a file of that name, which failed the
    # new writer's next batch as named like another writer's part.
    policy = RollingPolicy(max_part_size=40) if rolling == "by_size" else RollingPolicy(max_batches=1)
    sink = FileSink(str(tmp_path), format="jsonl").with_writer_id("w").with_rolling_policy(policy)
    old = sink.writer()
    old.write_batch(pa.table({"id": [0, 1]}), 0, 0)
    new = sink.writer(take_over=True)
    if rolling == "by_size":
        new.write_batch(pa.table({"id": [100, 101, 102, 103]}), 1, 1)  # rolls part 0, opens the next part
    with pytest.raises(SinkFencedError):
        old.write_batch(pa.table({"id": list(range(200, 210))}), 1, 1)
    new.write_batch(pa.table({"id": [300]}), 2, 2)
    new.finish(3)
    new.close()
    acknowledged = [0, 1, 100, 101, 102, 103, 300] if rolling == "by_size" else [0, 1, 300]
    assert sorted(sink.read()["id"]) == acknowledged
    listed = [json.loads(line)["id"] for name in os.listdir(tmp_path) if not name.startswith(("_", "."))
              for line in (tmp_path / name).read_text().splitlines()]
    assert sorted(listed) == acknowledged
    assert any(name.startswith("part-w.e2-") for name in os.listdir(tmp_path))  # the new writer's parts: epoch 2


@pytest.mark.parametrize("writer_id, epoch, named", [("w", 3, "w.e3"), ("w.e3", 5, "w.e5"), ("a.eb", 2, "a.eb.e2"),
                                                     ("3f2a9c1b2d4e", 7, "3f2a9c1b2d4e.e7")])
def test_a_take_over_names_new_parts_by_the_old_writer_id_and_its_epoch_once(writer_id, epoch, named):
    assert directory_module.taken_over_writer_id(writer_id, epoch) == named


@pytest.mark.parametrize("first, then", [(dict(format="jsonl"), dict(format="csv")),
                                         (dict(format="csv"), dict(format="jsonl", compression="gzip")),
                                         (dict(format="jsonl", compression="zstd"), dict(format="parquet")),
                                         (dict(format="parquet"), dict(format="csv"))])
def test_parts_finished_before_a_change_of_format_read_and_compact_as_they_were_written(tmp_path, first, then):
    # A change of format or compression after finish() is allowed, and the parts finished before keep theirs; read()
    # decoded every part with the new settings (a CSV read of JSON lines parts gave a column named '{"id":0}' and
    # rows of garbage, with a warning only), and compact() merged them into the new format, garbage for good.
    def run(settings, ids, batch_id):
        writer = FileSink(str(tmp_path), **settings).with_rolling_policy(RollingPolicy.on_every_batch()).writer()
        for offset, row in enumerate(ids):
            writer.write_batch(pa.table({"id": [row]}), batch_id + offset, 0)
        writer.finish(0)
        writer.close()

    run(first, [0, 1, 2], 0)
    written_first = {name for name in os.listdir(tmp_path) if name[:1] not in "._"}
    run(then, [3, 4, 5], 3)
    sink = FileSink(str(tmp_path), **then)
    assert sorted(sink.read()["id"]) == [0, 1, 2, 3, 4, 5]
    sink.compact()
    assert sorted(sink.read()["id"]) == [0, 1, 2, 3, 4, 5]
    assert len(written_first) == 3 and written_first <= set(os.listdir(tmp_path))  # left as they were written
    assert len([name for name in os.listdir(tmp_path) if name[:1] not in "._"]) == 4  # the other three merged


def test_a_parts_name_is_only_a_guess_at_its_format_after_the_readers_own(tmp_path):
    # A text sink naming its parts .csv, read without repeating with_part_names: the name's format was taken over
    # the reader's, and its lines were parsed as CSV (the header eaten, the columns split).
    writer = FileSink(str(tmp_path / "text"), format="text").with_part_names(suffix=".csv").writer()
    writer.write_batch(pa.table({"line": ["a,b", "1,2", "3,4"]}), 0, 0)
    writer.finish(0)
    writer.close()
    assert FileSink(str(tmp_path / "text"), format="text").read().to_dict("list") == {"value": ["a,b", "1,2", "3,4"]}
    # A file no commit finished (read in a directory of records before version 4) is read as the reader says, as
    # before: a stray notes.txt beside JSON lines parts failed loudly, and would have been added as rows.
    sink = FileSink(str(tmp_path / "old")).with_writer_id("w").with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    writer.write_batch(pa.table({"id": [1, 2]}), 0, 0)
    writer.finish(0)
    writer.close()
    as_old_record(max((tmp_path / "old" / STATE_DIR).glob("*.json")), 2, tmp_path / "old")
    (tmp_path / "old" / "notes.txt").write_text("hello\nworld\n")
    with pytest.raises(CorruptPartError, match=r"notes\.txt cannot be read back: JSONDecodeError"):
        FileSink(str(tmp_path / "old")).read()


@pytest.mark.parametrize("writer_id", ["w", "w" * 40])
def test_a_take_over_whose_new_writer_id_would_pass_the_name_limit_keeps_the_sink_writable(tmp_path, writer_id):
    # The writer id that names a successor's parts is the old one and its epoch: where a prefix left no room for it,
    # every batch of the successor was refused, after clean restarts too. A digest of the old id takes its place
    # (a long one), or the old id where nothing else fits (a short one).
    room = 255 - len(f".-{writer_id}-0.jsonl{directory_module.INPROGRESS}")
    sink = (FileSink(str(tmp_path)).with_part_names(prefix="p" * room).with_writer_id(writer_id)
            .with_rolling_policy(RollingPolicy(max_batches=1)))
    old = sink.writer()
    old.write_batch(pa.table({"id": [0]}), 0, 0)
    new = sink.writer(take_over=True)
    new.write_batch(pa.table({"id": [1]}), 1, 0)
    new.close()
    again = sink.writer()
    again.write_batch(pa.table({"id": [2]}), 2, 0)
    again.finish(0)
    again.close()
    assert sorted(sink.read()["id"]) == [0, 1, 2]


def test_a_foreign_file_is_still_warned_of_when_a_commit_lands_while_read_lists_the_parts(tmp_path, monkeypatch):
    sink = FileSink(str(tmp_path)).with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    writer.write_batch(pa.table({"id": [1]}), 0, 0)
    (tmp_path / "copy.jsonl").write_text('{"id": 1}\n')
    listed = reading.finished_files

    def a_commit_before_the_listing(config):
        writer.write_batch(pa.table({"id": [2]}), 1, 1)
        return listed(config)

    monkeypatch.setattr(reading, "finished_files", a_commit_before_the_listing)
    with pytest.warns(UserWarning, match=r"skipped 1 file\(s\) no commit record finished \(copy\.jsonl\)"):
        assert sorted(sink.read()["id"]) == [1]
    writer.close()


def test_a_text_part_of_json_strings_reads_as_text_after_a_change_to_json_lines(tmp_path):
    # Decoded as JSON lines first (every line parses), each row became a null: the format its name says (.txt) was
    # never tried.
    text = FileSink(str(tmp_path), format="text").writer()
    text.write_batch(pa.table({"value": ['{"id": 1}', '{"id": 2}']}), 0, 0)
    text.finish(0)
    text.close()
    lines = FileSink(str(tmp_path), format="jsonl").writer()
    lines.write_batch(pa.table({"id": [3]}), 1, 0)
    lines.finish(0)
    lines.close()
    back = FileSink(str(tmp_path), format="jsonl").read()
    assert sorted(back["value"].dropna()) == ['{"id": 1}', '{"id": 2}'] and back["id"].dropna().tolist() == [3]


def test_in_progress_parts_whose_commit_records_were_deleted_are_refused_not_deleted(tmp_path):
    """_file_sink/ deleted by hand: the next writer deleted the hidden parts, which held committed rows, and
    went on from batch -1 without a word."""
    sink = FileSink(str(tmp_path), format="jsonl").with_writer_id("w")  # parts stay in progress after a batch
    writer = sink.writer()
    writer.write_batch(pa.table({"id": [1, 2, 3]}), batch_id=0, processing_time_ms=0)
    writer.close()
    shutil.rmtree(tmp_path / STATE_DIR)
    with pytest.raises(DamagedCommitRecordError, match=r"in-progress part .*\.part-w-0\.jsonl\.inprogress is in .*but "
                                                       r"its commit records \(_file_sink/\) are not"):
        sink.writer()
    with pytest.raises(DamagedCommitRecordError):  # refused again, not taken as a crash before the first commit
        sink.writer()
    assert (tmp_path / ".part-w-0.jsonl.inprogress").read_text().count("id") == 3


def test_a_first_writer_racing_another_is_refused_as_held_not_told_the_records_were_deleted(tmp_path, monkeypatch):
    """B found no _file_sink/, then A claimed the directory and wrote a part before B looked for parts: B was told
    the records were deleted and to move the parts (A's live ones) away."""
    sink = FileSink(str(tmp_path / "out"), format="jsonl").with_writer_id("w")
    refuse = directory_module.SinkDirectory._refuse_parts_without_records
    writers: list = []

    def a_starts_first(directory):
        if not writers:
            writers.append(None)  # A's own claim checks too
            writers[0] = sink.writer()
            writers[0].write_batch(pa.table({"id": [1]}), batch_id=0, processing_time_ms=0)  # a part in progress
        return refuse(directory)

    monkeypatch.setattr(directory_module.SinkDirectory, "_refuse_parts_without_records", a_starts_first)
    with pytest.raises(SinkHeldError):
        sink.writer()
    writers[0].close()


@pytest.mark.parametrize("outer_first", [True, False], ids=["outer records there", "outer's first writer"])
def test_the_in_progress_parts_of_a_sink_inside_another_sinks_directory_are_its_own(tmp_path, outer_first):
    """The outer sink's writer deleted the inner sink's in-progress part, which held its committed rows (the inner
    sink then failed with CommittedPartMissingError), or, as its first writer, said its own records were deleted."""
    outer = FileSink(str(tmp_path), format="jsonl").with_writer_id("outer")
    inner = FileSink(str(tmp_path / "events"), format="jsonl").with_writer_id("inner")
    for sink, rows in ([(outer, [0])] if outer_first else []) + [(inner, [1, 2])]:
        writer = sink.writer()
        writer.write_batch(pa.table({"id": rows}), batch_id=0, processing_time_ms=0)  # parts stay in progress
        writer.close()
    outer.writer().close()
    assert (tmp_path / "events" / ".part-inner-0.jsonl.inprogress").exists()
    writer = inner.writer()
    writer.finish(processing_time_ms=1)
    writer.close()
    assert sorted(inner.read()["id"]) == [1, 2]
