"""Compressed files are read whole, as one block: the same rows as the same content uncompressed."""

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


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gz_file_is_an_unreadable_file_named_never_garbage_rows(tmp_path, damage):
    data = compressed(".gz", b"one\ntwo\n" * 50, members=2)
    damaged = data[:-10] if damage == "truncated" else data[:30] + b"\x00garbage\x00" + data[39:]
    (tmp_path / "bad.log.gz").write_bytes(damaged)
    (tmp_path / "good.log").write_text("good\n")
    why = r"cannot decompress gzip file '.*bad\.log\.gz', truncated or corrupt"
    with pytest.raises(OSError, match=rf"cannot read block 0 of file '.*bad\.log\.gz': {why}"):
        FileSplitter(str(tmp_path), settle=0, strict=True).read_lines()
    splitter = FileSplitter(str(tmp_path), settle=0)
    with pytest.warns(UnreadableFileWarning, match=rf"skipped unreadable file '.*bad\.log\.gz': {why}"):
        assert splitter.read_lines()["value"].tolist() == ["good"]
    [skipped] = splitter.skipped_blocks
    assert isinstance(skipped, SkippedBlock) and skipped.path.endswith("bad.log.gz") and skipped.block_id == 0


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


def test_a_compressed_file_that_grows_is_not_read_again_and_says_so_one_that_shrinks_is_read_again(tmp_path):
    """Appended bytes of a compressed file are no stream of their own (a gzip member appended is, but an
    appender cannot be told from a rewrite), and reading it whole again would repeat its records: its
    new size is taken as read, with a warning naming it. A file that shrinks is rewritten, as for any file."""
    path = tmp_path / "a.log.gz"
    first = compressed(".gz", b"a1\na2\n")
    _rewrite(path, first, 1_000)
    splitter = FileSplitter(str(tmp_path), settle=0, scan_interval=0)
    assert splitter.read_lines()["value"].tolist() == ["a1", "a2"]
    _rewrite(path, first + compressed(".gz", b"a3\n"), 2_000)
    with pytest.warns(UnreadableFileWarning, match=r"compressed file '.*a\.log\.gz' grew from \d+ to \d+ bytes after "
                                                   r"it was read whole: .* not read; write a new file instead"):
        assert splitter.read_lines().empty
    assert splitter.read_lines().empty  # the new size is taken as read: no second warning
    _rewrite(path, compressed(".gz", b"b1\n"), 3_000)  # shrank: rewritten, read again whole
    assert splitter.read_lines()["value"].tolist() == ["b1"]
    _rewrite(path, compressed(".gz", b"b2\n"), 4_000)  # same size: touched, as for any file
    assert splitter.read_lines().empty


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
