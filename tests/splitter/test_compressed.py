"""Compressed files: each segment one block, delivering the streams that end in it; the same rows as the
same content uncompressed."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import FileSplitter
from storage.splitter import UnreadableFileWarning
from storage.splitter.metadata import FileMetadata
from storage.splitter.readers import SkippedBlock, read_lines
from tests.splitter.test_readers import FILES_AND_BLOCKS, plain_read, write_lines


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


#: Suffix -> one stream (member, frame) of the data; several are concatenated.
CODECS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress, ".zst": _zstd, ".deflate": zlib.compress}


def compressed(suffix: str, data: bytes, members: int = 1) -> bytes:
    """``data`` compressed as ``members`` streams one after the other (``cat a.gz b.gz``)."""
    cuts = [len(data) * i // members for i in range(members + 1)]
    return b"".join(CODECS[suffix](data[cuts[i]:cuts[i + 1]]) for i in range(members))


#: Lines with CRLF, empty lines, invalid UTF-8, a multi-byte character and no final newline.
TEXT = b"ts,user\r\n\r\n1,alice \xc3\xa9\n2,b\xff\n\n3,carol"


def rows(frame) -> list[tuple]:
    """The rows without ``path`` and ``block_id``: the value(s) and the offset."""
    return [tuple(r) for r in frame.drop(columns=["path", "block_id"]).itertuples(index=False)]


@pytest.mark.parametrize("members", [1, 3])
@pytest.mark.parametrize("suffix", sorted(CODECS))
def test_a_compressed_file_gives_the_rows_of_its_content_uncompressed(tmp_path, suffix, members):
    (tmp_path / "c").mkdir()
    (tmp_path / "p").mkdir()
    (tmp_path / "c" / f"x{suffix.upper() if suffix == '.gz' else suffix}").write_bytes(compressed(suffix, TEXT, members))
    (tmp_path / "p" / "x").write_bytes(TEXT)
    for options in ({}, {"format": "csv", "columns": "ts long, user"}):
        splitter = FileSplitter(str(tmp_path / "c"), settle=0, block_size=3, **options)
        _, blocks = splitter.blocks()
        assert blocks[["block_id", "offset", "segment_start"]].values.tolist() == [[0, 0, 0]]
        frame = splitter.read_records(blocks)
        plain = FileSplitter(str(tmp_path / "p"), settle=0, block_size=3, **options).read_records()
        assert rows(frame) == rows(plain) and len(frame) > 2
        assert set(frame["block_id"]) == {0}
    assert rows(frame) == [("1", "alice é", 11), ("2", "b\ufffd", 22), ("3", "carol", 28)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**FILES_AND_BLOCKS, suffix=st.sampled_from(sorted(CODECS)), members=st.integers(1, 3))
def test_every_line_of_a_compressed_file_read_exactly_once(tmp_path, lines, endings, final_newline, block_size,
                                                           piece_bytes, suffix, members):
    """``test_readers.test_every_line_read_exactly_once`` on the file compressed: one block whatever the
    block size, the lines of the plain read, offsets into the decompressed bytes."""
    path, data = write_lines(tmp_path, lines, endings, final_newline)
    Path(path + suffix).write_bytes(compressed(suffix, data, members))
    fs = fsspec.filesystem("file")
    blocks = list(FileMetadata(path + suffix, fs.size(path + suffix), 0.0, 0, block_size).blocks())
    assert [(b.block_id, b.offset, b.end) for b in blocks] == [(0, 0, fs.size(path + suffix))]
    frame = read_lines(fs, blocks)
    assert frame["value"].tolist() == plain_read(data)
    assert frame["offset"].tolist() == read_lines(fs, list(FileMetadata(path, len(data), 0.0, 0, 7).blocks()))[
        "offset"].tolist()


@pytest.mark.parametrize("damage", ["corrupt first", "corrupt second", "garbage after"])
def test_a_damaged_gz_file_is_an_unreadable_file_named_never_garbage_rows(tmp_path, damage):
    data = compressed(".gz", b"one\ntwo\n" * 50, members=2)
    first = len(compressed(".gz", b"one\ntwo\n" * 25))
    damaged = {"corrupt first": data[:30] + b"\x00garbage\x00" + data[39:],
               "corrupt second": data[:first + 20] + b"\xff" * 8 + data[first + 28:],
               "garbage after": data + b"garbage" + compressed(".gz", b"three\n")}[damage]
    (tmp_path / "bad.log.gz").write_bytes(damaged)
    (tmp_path / "good.log").write_text("good\n")
    why = r"cannot decompress gzip file '.*bad\.log\.gz', corrupt"
    with pytest.raises(OSError, match=rf"cannot read block 0 of file '.*bad\.log\.gz': {why}"):
        FileSplitter(str(tmp_path), settle=0, strict=True).read_lines()
    splitter = FileSplitter(str(tmp_path), settle=0)
    with pytest.warns(UnreadableFileWarning, match=rf"skipped unreadable file '.*bad\.log\.gz': {why}"):
        assert splitter.read_lines()["value"].tolist() == ["good"]
    [skipped] = splitter.skipped_blocks
    assert isinstance(skipped, SkippedBlock) and skipped.path.endswith("bad.log.gz") and skipped.block_id == 0


@pytest.mark.parametrize("strict", [False, True])
def test_a_truncated_file_gives_its_whole_streams_and_a_warning_never_an_error(tmp_path, strict):
    """Bytes that end inside a stream are a file still being written: no error, even with ``strict``."""
    data = compressed(".gz", b"one\ntwo\n" * 50, members=2)
    (tmp_path / "cut.log.gz").write_bytes(data[:-10])
    first = len(compressed(".gz", b"one\ntwo\n" * 25))
    splitter = FileSplitter(str(tmp_path), settle=0, strict=strict)
    ends = rf"compressed file '.*cut\.log\.gz' ends inside a stream at byte {len(data) - 10} \(the stream starts at " \
           rf"byte {first}\): .* it will be read when the file grows"
    with pytest.warns(UnreadableFileWarning, match=ends) as caught:
        assert splitter.read_lines()["value"].tolist() == ["one", "two"] * 25
        assert splitter.read_lines().empty
    assert len(caught) == 1 and not splitter.skipped_blocks


@pytest.mark.parametrize(("suffix", "why"), [
    (".lz4", "Hadoop's Lz4Codec frames its blocks its own way"),
    (".snappy", "Hadoop's SnappyCodec frames its blocks its own way"),
    (".zip", "a zip file is an archive of files, not one compressed stream"),
])
@pytest.mark.parametrize("strict", [False, True])
def test_lz4_snappy_and_zip_files_are_refused_saying_why(tmp_path, suffix, why, strict):
    (tmp_path / "app.log").write_text("plain\n")
    (tmp_path / f"app.log.1{suffix.upper() if strict else suffix}").write_bytes(b"\x04\x22\x4d\x18 not lines")
    splitter = FileSplitter(str(tmp_path), settle=0, strict=strict)
    refused = rf"compressed file '.*app\.log\.1{suffix}' is not read: {why}.*; decompress it"
    if strict:
        with pytest.raises(ValueError, match=refused.replace(suffix, suffix.upper())):
            splitter.read_lines()
        return
    with pytest.warns(UnreadableFileWarning, match=refused) as caught:
        assert splitter.read_lines()["value"].tolist() == ["plain"]
        assert splitter.read_lines().empty  # warned once
    assert len(caught) == 1


def _rewrite(path: Path, data: bytes, mtime: float) -> None:
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


@pytest.mark.parametrize("suffix", sorted(CODECS))
def test_streams_appended_to_a_compressed_file_are_read_as_a_new_segment_one_that_shrinks_is_read_again(
        tmp_path, suffix):
    """Streams appended after a read are a new segment, one block (id its start) delivering them, offsets
    going on in the decompressed content. A file that shrinks is rewritten; same size, touched."""
    path = tmp_path / f"a.log{suffix}"
    first = compressed(suffix, b"a1\na2\n")
    _rewrite(path, first, 1_000)
    splitter = FileSplitter(str(tmp_path), settle=0, scan_interval=0)
    assert rows(splitter.read_lines()) == [("a1", 0), ("a2", 3)]
    _rewrite(path, first + compressed(suffix, b"a3\n") + compressed(suffix, b"a4\n"), 2_000)
    _, blocks = splitter.blocks()
    assert blocks[["block_id", "offset", "segment_start"]].values.tolist() == [[len(first)] * 3]
    frame = splitter.read_records(blocks)
    assert rows(frame) == [("a3", 6), ("a4", 9)] and set(frame["block_id"]) == {len(first)}
    assert splitter.read_lines().empty
    _rewrite(path, compressed(suffix, b"b1\n"), 3_000)  # shrank: rewritten, read again whole
    assert splitter.read_lines()["value"].tolist() == ["b1"]
    _rewrite(path, compressed(suffix, b"b2\n"), 4_000)  # same size: touched, as for any file
    assert splitter.read_lines().empty


@pytest.mark.parametrize("suffix", sorted(CODECS))
@pytest.mark.parametrize("before", [b"", b"\n", b"\xef\xbb\xbf \t\r\n\n", b"ts,user\n"])
def test_a_csv_header_in_a_later_segment_is_no_record_when_only_blank_lines_came_before(tmp_path, suffix, before):
    """The header is the file's first non-blank line (after a byte order mark), also when the streams before
    it were delivered by an earlier segment: the same records as the whole content read uncompressed."""
    first, rest = before, b"" if before.startswith(b"ts") else b"ts,user\n"
    path = tmp_path / "c" / f"x.csv{suffix}"
    path.parent.mkdir()
    _rewrite(path, compressed(suffix, first), 1_000)
    splitter = FileSplitter(str(path.parent), settle=0, scan_interval=0, format="csv", columns="ts long, user")
    seen = rows(splitter.read_records())
    _rewrite(path, compressed(suffix, first) + compressed(suffix, rest + b"1,a\n\n2,b\n"), 2_000)
    _, blocks = splitter.blocks()
    assert blocks["segment_start"].tolist() == [len(compressed(suffix, first))]
    seen += rows(splitter.read_records(blocks))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "x.csv").write_bytes(first + rest + b"1,a\n\n2,b\n")
    plain = FileSplitter(str(tmp_path / "p"), settle=0, format="csv", columns="ts long, user").read_records()
    assert seen == rows(plain) and [r[:2] for r in seen] == [("1", "a"), ("2", "b")]


@pytest.mark.parametrize("strict", [False, True])
def test_a_compressed_file_handed_out_half_written_is_read_once_complete_every_line_once(tmp_path, strict):
    """A writer paused longer than ``settle`` mid-stream: the segment handed out delivers the whole streams,
    warns of the one cut short, and a replay of it (once the file is complete) reads the same; the grown
    file's new segment delivers the rest. A restart from the state before the batch reads all once."""
    full = b"".join(gzip.compress(b"".join(b"line %d\n" % i for i in half)) for half in (range(50), range(50, 100)))
    path = tmp_path / "x.log.gz"
    _rewrite(path, full[:len(full) * 3 // 4], 1_000)
    splitter = FileSplitter(str(tmp_path), settle=0, scan_interval=0, strict=strict)
    before = splitter.state()
    _, blocks = splitter.blocks()
    with pytest.warns(UnreadableFileWarning, match=r"ends inside a stream"):
        seen = splitter.read_lines(blocks)["value"].tolist()
    assert seen == [f"line {i}" for i in range(50)]
    _rewrite(path, full, 2_000)  # the writer finishes
    with pytest.warns(UnreadableFileWarning, match=r"ends inside a stream"):
        assert splitter.read_lines(blocks)["value"].tolist() == seen  # a replay: the same bytes, the same rows
    seen += splitter.read_lines()["value"].tolist()
    assert seen == [f"line {i}" for i in range(100)]
    restarted = FileSplitter(str(tmp_path), settle=0, strict=strict)
    restarted.restore(before)
    assert restarted.read_lines()["value"].tolist() == seen


@pytest.mark.parametrize(("suffix", "padding"), [(".gz", b"\0" * 7), (".xz", b"\0" * 8)])
def test_zero_padding_after_and_between_gzip_members_and_xz_streams_is_accepted(tmp_path, suffix, padding):
    """``gzip -d`` ignores trailing zero bytes; the xz format allows stream padding, zero bytes in fours."""
    stream = CODECS[suffix]
    (tmp_path / f"a{suffix}").write_bytes(stream(b"a\n") + padding + stream(b"b\n") + padding)
    assert FileSplitter(str(tmp_path), settle=0, strict=True).read_lines()["value"].tolist() == ["a", "b"]
    (tmp_path / f"a{suffix}").write_bytes(stream(b"a\n") + b"\0" * 3)
    refused = r"corrupt: 3 zero bytes at byte \d+ after a stream: xz stream padding is in fours" if suffix == ".xz" else None
    if refused:
        with pytest.raises(OSError, match=refused):
            FileSplitter(str(tmp_path), settle=0, strict=True).read_lines()


def test_a_file_of_many_streams_reads_every_line(tmp_path):
    """20,000 gzip members (a per-write appender's file): each decompressed on its own, in time linear in
    the file (``gzip.decompress`` copies the rest once per member)."""
    (tmp_path / "many.log.gz").write_bytes(b"".join(gzip.compress(b"%d\n" % i, mtime=0) for i in range(20_000)))
    frame = FileSplitter(str(tmp_path), settle=0, strict=True).read_lines()
    assert frame["value"].tolist() == [str(i) for i in range(20_000)]


def test_a_restart_reads_a_compressed_file_exactly_once(tmp_path):
    """State handed over after each batch of one block, as an offset carries it: the compressed file's
    one block is handed out once, before or after the restart."""
    (tmp_path / "a.log").write_text("".join(f"a{i}\n" for i in range(10)))
    (tmp_path / "b.log.gz").write_bytes(compressed(".gz", b"".join(f"b{i}\n".encode() for i in range(10)), 2))
    (tmp_path / "c.log.zst").write_bytes(compressed(".zst", b"c0\nc1\n"))
    expected = sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)] + ["c0", "c1"])
    for crash_after in range(1, 8):
        seen: list[str] = []
        splitter = FileSplitter(str(tmp_path), settle=0, block_size=8, blocks_per_batch=1)
        for _ in range(crash_after):
            seen += splitter.read_lines(splitter.blocks()[1])["value"].tolist()
        restarted = FileSplitter(str(tmp_path), settle=0, block_size=8, blocks_per_batch=1)
        restarted.restore(splitter.state())
        seen += restarted.read_lines()["value"].tolist()
        assert sorted(seen) == expected, crash_after
