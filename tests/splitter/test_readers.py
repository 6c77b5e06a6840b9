"""Block readers: every line is read exactly once across all blocks, whatever the block size."""

from __future__ import annotations

import io
from types import SimpleNamespace

import fsspec
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import FileSplitter
from storage.splitter import readers
from storage.splitter.metadata import BlockMetadata, FileMetadata
from storage.splitter.readers import (
    LINE_SCHEMA,
    PIECE_BYTES,
    SkippedBlock,
    UnreadableFileWarning,
    chunk_batches,
    read_block_table,
    read_csv_block,
    read_lines,
)

FS = fsspec.filesystem("file")

# Line content: any text without '\n', including multi-byte UTF-8 (é, 中, 😀) and lone '\r' (data, not a line end).
LINE = st.text(
    alphabet=st.one_of(st.sampled_from("ab é中😀,\t\r"), st.characters(blacklist_characters="\n", blacklist_categories=("Cs",))),
    max_size=30,
)


def plain_read(data: bytes) -> list[str]:
    """A plain read: split at '\\n', drop one '\\r' before it, no empty line after a final '\\n'; a
    '\\r' ending the file without a final '\\n' is data, as any lone '\\r'."""
    *ended, last = data.decode("utf-8").split("\n")
    return [line[:-1] if line.endswith("\r") else line for line in ended] + ([last] if last else [])


def all_blocks(path: str, block_size: int, segment_start: int = 0) -> list[BlockMetadata]:
    size = FS.size(path)
    return list(FileMetadata(path, size, 0.0, segment_start, block_size).blocks())


#: Strategies for ``write_lines`` and a block size: line lengths, line endings and block sizes from 1 byte.
FILES_AND_BLOCKS = dict(
    lines=st.lists(LINE, max_size=12),
    endings=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=12, max_size=12),
    final_newline=st.booleans(),
    block_size=st.integers(min_value=1, max_value=70),
    piece_bytes=st.integers(min_value=1, max_value=40),
)


def write_lines(tmp_path, lines: list[str], endings: list[str], final_newline: bool) -> tuple[str, bytes]:
    """A file of ``lines``, each followed by its ending (a lone ``\\r`` joins it to the next line); without
    ``final_newline`` the last ``\\n`` is left out, so a ``\\r`` may end the file."""
    text = "".join(line + endings[i] for i, line in enumerate(lines))
    if not final_newline:
        text = text.removesuffix("\n")
    data = text.encode("utf-8")
    path = str(tmp_path / "f.txt")
    with open(path, "wb") as f:
        f.write(data)
    return path, data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**FILES_AND_BLOCKS)
def test_every_line_read_exactly_once(tmp_path, lines, endings, final_newline, block_size, piece_bytes):
    path, data = write_lines(tmp_path, lines, endings, final_newline)
    blocks = all_blocks(path, block_size)
    frame = read_lines(FS, blocks)
    assert frame["value"].tolist() == plain_read(data)
    # Read in pieces of any size (a record longer than a piece is read on to its end), the same rows.
    in_pieces = pa.concat_tables([LINE_SCHEMA.empty_table()] + [read_block_table(FS, b, piece_bytes=piece_bytes) for b in blocks])
    assert in_pieces.to_pandas().equals(frame)
    # Offsets point at each line's first byte, and each line sits in the block holding that byte.
    for value, offset, block_id in zip(frame["value"], frame["offset"], frame["block_id"]):
        assert data[offset:].decode("utf-8").startswith(value)
        assert block_id == offset // block_size


def chunk_records(fs, blocks, chunk_bytes: int, piece_bytes: int = PIECE_BYTES) -> list[tuple]:
    """``(value, path, block_id, offset)`` cut out of ``chunk_batches``' rows as the Spark source's
    ``substr`` does (strict UTF-8 decoding: the chunk text must already be valid)."""
    records = []
    for block in blocks:
        for row in (row for batch in chunk_batches(fs, block, chunk_bytes=chunk_bytes, piece_bytes=piece_bytes)
                    for row in batch.to_pylist()):
            for start, length in zip(row["starts"], row["lengths"], strict=True):
                value = row["text"][start : start + length].decode("utf-8")
                records.append((value, row["path"], row["block_id"], row["base"] + start))
    return records


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    **FILES_AND_BLOCKS,
    chunk_bytes=st.integers(min_value=1, max_value=40),
)
def test_chunk_rows_hold_the_same_records_as_line_rows(tmp_path, lines, endings, final_newline, block_size, piece_bytes,
                                                       chunk_bytes):
    path, data = write_lines(tmp_path, lines, endings, final_newline)
    blocks = all_blocks(path, block_size)
    records = chunk_records(FS, blocks, chunk_bytes, piece_bytes)
    assert [value for value, *_ in records] == plain_read(data)
    assert records == list(read_lines(FS, blocks).itertuples(index=False, name=None))


def test_chunk_rows_of_a_long_record_invalid_utf8_and_an_empty_file(tmp_path):
    cases = {"long.txt": b"short\r\n" + b"x" * 50 + b"\n\nend\r", "bad.txt": b"ok\n\xff\xfe\r\n\xe2\x82\nz",
             "empty.txt": b""}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        blocks = all_blocks(str(tmp_path / name), 8)
        for chunk_bytes in (1, 5, 1 << 20):
            want = list(read_lines(FS, blocks).itertuples(index=False, name=None))
            assert chunk_records(FS, blocks, chunk_bytes) == want, (name, chunk_bytes)
    middle_of_the_long_record = all_blocks(str(tmp_path / "long.txt"), 8)[3]
    assert list(chunk_batches(FS, middle_of_the_long_record)) == []  # no batch, not an empty chunk


def test_a_file_name_that_is_not_utf8_is_read_its_bytes_escaped_in_the_path_column(tmp_path):
    """Arrow's strings refused the name (UnicodeEncodeError naming no file), and the other files' lines, handed
    out with it, were lost."""
    import os

    (tmp_path / "good.log").write_bytes(b"good\n")
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xff.log"), "wb") as f:
        f.write(b"bad\n")
    splitter = FileSplitter(str(tmp_path), settle=0)
    frame = splitter.read_lines()
    assert sorted(zip(frame["path"], frame["value"])) == [
        (f"{tmp_path}/bad\\xff.log", "bad"), (f"{tmp_path}/good.log", "good")]
    blocks = all_blocks(os.path.join(str(tmp_path), os.fsdecode(b"bad\xff.log")), 8)  # the chunk rows of Spark's
    assert [row[:2] for row in chunk_records(FS, blocks, 1 << 20)] == [("bad", f"{tmp_path}/bad\\xff.log")]


@pytest.mark.parametrize(("data", "lines"), [(b"one\r\ntwo\rthree\r", ["one", "two\rthree\r"]), (b"\r", ["\r"])])
def test_a_carriage_return_ending_a_file_without_a_final_newline_is_data(tmp_path, data, lines):
    """Only '\\n' or '\\r\\n' ends a line: a final lone '\\r' stays in the line rows and the chunk rows."""
    (tmp_path / "f.txt").write_bytes(data)
    for block_size in (4, 1024):
        blocks = all_blocks(str(tmp_path / "f.txt"), block_size)
        assert read_lines(FS, blocks)["value"].tolist() == lines
        assert [value for value, *_ in chunk_records(FS, blocks, chunk_bytes=3)] == lines


def test_line_longer_than_several_blocks_belongs_to_its_first_block(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"short\n" + b"x" * 50 + b"\nend")
    blocks = all_blocks(str(path), 8)
    per_block = {b.block_id: read_block_table(FS, b)["value"].to_pylist() for b in blocks}
    assert per_block[0] == ["short", "x" * 50]
    assert per_block[7] == ["end"]
    assert sum(len(v) for v in per_block.values()) == 3


def test_multibyte_character_cut_by_a_block_boundary(tmp_path):
    path = tmp_path / "utf8.txt"
    path.write_bytes("é中😀\n中é\n".encode())
    for size in range(1, 16):
        assert read_lines(FS, all_blocks(str(path), size))["value"].tolist() == ["é中😀", "中é"]


def test_segment_of_a_grown_file_starts_at_a_line(tmp_path):
    path = tmp_path / "grown.txt"
    path.write_bytes(b"old1\nold2\nnew1\nnew2")
    blocks = all_blocks(str(path), 3, segment_start=10)
    assert read_lines(FS, blocks)["value"].tolist() == ["new1", "new2"]
    assert read_lines(FS, blocks)["offset"].tolist() == [10, 15]


def test_unreadable_file_warns_or_raises_when_strict(tmp_path):
    missing = BlockMetadata(str(tmp_path / "gone.txt"), 0, 0, 10, 0, 10)
    skipped: list[SkippedBlock] = []
    with pytest.warns(UnreadableFileWarning, match="gone.txt"):
        assert read_block_table(FS, missing, strict=False, on_skip=skipped.append).num_rows == 0
    with pytest.warns(UnreadableFileWarning, match="gone.txt"):
        assert list(chunk_batches(FS, missing, strict=False, on_skip=skipped.append)) == []
    with pytest.warns(UnreadableFileWarning, match="gone.txt"):
        assert read_csv_block(FS, missing, ["a"], strict=False, on_skip=skipped.append).empty
    assert [(s.path, s.block_id) for s in skipped] == [(missing.path, 0)] * 3
    with pytest.raises(OSError, match="cannot read block 0 of file .*gone.txt"):
        list(chunk_batches(FS, missing, strict=True))
    with pytest.raises(OSError, match="cannot read block 0 of file .*gone.txt"):
        read_block_table(FS, missing, strict=True)


class _FailingFile(io.BytesIO):
    """A file whose reads after the first ``good_reads`` fail, as on a disk or network gone away."""

    def __init__(self, data: bytes, good_reads: int) -> None:
        super().__init__(data)
        self.good_reads = good_reads

    def read(self, size: int = -1) -> bytes:
        if self.good_reads == 0:
            raise OSError("connection reset")
        self.good_reads -= 1
        return super().read(size)


def test_a_read_error_after_part_of_a_block_raises_even_when_not_strict():
    data = b"one\ntwo\nthree\n"
    block = BlockMetadata("flaky.txt", 0, 0, len(data), 0, len(data))
    failing_at = lambda good_reads: SimpleNamespace(open=lambda path, mode: _FailingFile(data, good_reads),  # noqa: E731
                                                    size=lambda path: len(data))
    with pytest.warns(UnreadableFileWarning, match="flaky.txt"):  # nothing read yet: skipped like a missing file
        assert read_block_table(failing_at(0), block, strict=False, piece_bytes=5).num_rows == 0
    # One piece was given: skipping the rest would cut the block short without a trace.
    with pytest.raises(OSError, match="cannot read block 0 of file 'flaky.txt': connection reset"):
        read_block_table(failing_at(1), block, strict=False, piece_bytes=5)
    assert read_block_table(failing_at(9), block, strict=False, piece_bytes=5)["value"].to_pylist() == ["one", "two", "three"]


def test_invalid_utf8_is_replaced_not_fatal(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"ok\n\xff\xfe\n")
    assert read_lines(FS, all_blocks(str(path), 4))["value"].tolist() == ["ok", "\ufffd\ufffd"]


def test_csv_records_across_blocks(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n1,x\r\n22,yy\n\n333,zzz")
    blocks = all_blocks(str(path), 5)
    frames = [read_csv_block(FS, b, ["a", "b"]) for b in blocks]

    rows = pd.concat(frames, ignore_index=True)
    assert rows[["a", "b"]].values.tolist() == [["1", "x"], ["22", "yy"], ["333", "zzz"]]
    assert rows["offset"].tolist() == [4, 9, 16]


def test_a_csv_splitter_reads_records_and_a_text_splitter_lines(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"a,b\n1,x\n22,yy\n")
    (tmp_path / "b.csv").write_bytes(b"a,b\n333,zzz\n")
    records = FileSplitter(str(tmp_path), format="csv", columns="a long, b", block_size=6, settle=0).read_records()
    assert records.sort_values(["path", "offset"])[["a", "b", "offset"]].values.tolist() == [
        ["1", "x", 4], ["22", "yy", 8], ["333", "zzz", 4]]
    assert FileSplitter(str(tmp_path), settle=0).read_records()["value"].tolist().count("a,b") == 2


def test_a_malformed_csv_record_is_refused_with_its_file_and_offset(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n1,x\n2,y,extra\n3,z\n")
    [block] = all_blocks(str(path), 1024)
    with pytest.raises(ValueError, match=rf"cannot read the record at offset 8 of file '{path}' as CSV: .*"
                                         r"Expected 2 columns, got 3: 2,y,extra"):
        read_csv_block(FS, block, ["a", "b"], strict=False)


@pytest.mark.parametrize(("data", "offset"), [(b'h\n"abc\nx\n', 2), (b'h\n"\n1\n', 2), (b'h\n1,"a""b\n2\n', 2),
                                            (b'h\n"x",y\n"ab,c\n', 8), (b'h\n"ab""\n1\n', 2)])
def test_a_csv_record_that_opens_a_quote_its_line_does_not_close_is_refused_at_every_block_size(tmp_path, data,
                                                                                                  offset):
    """Arrow's parser ran the quoted value on into the next line (an ArrowInvalid naming neither file nor offset)
    or closed it where the block ended (the quote dropped, no error): rows that differed by block size."""
    (tmp_path / "f.csv").write_bytes(data)
    for block_size in (1, 2, 3, 5, 8, 64):
        splitter = FileSplitter(str(tmp_path), format="csv", columns="a, b", block_size=block_size, settle=0)
        with pytest.raises(ValueError, match=rf"cannot read the record at offset {offset} of file .*f.csv' as CSV: it "
                                             "opens a quoted value that its line does not close"):
            splitter.read_records()


def test_csv_lines_parsed_into_fewer_records_are_refused_not_paired_with_the_wrong_offsets(tmp_path, monkeypatch):
    """The guard behind the unclosed-quote check, for a line that check would miss: a quoted value run on over
    a line end gives fewer records than lines, and records zipped with the lines' offsets would be shifted."""
    monkeypatch.setattr(readers, "_QUOTED_LINE", "")  # the check above passes every line
    path = tmp_path / "t.csv"
    path.write_bytes(b'a,b\n"1\n2",x\n3,z\n')
    [block] = all_blocks(str(path), 1024)
    with pytest.raises(ValueError, match=rf"cannot read block 0 of file '{path}' as CSV: its 3 lines parsed as 2 "
                                         "records; a quoted value runs over a line end"):
        read_csv_block(FS, block, ["a", "b"], strict=False)


def test_quoted_csv_values_closed_on_their_line_read_as_arrow_reads_them(tmp_path):
    (tmp_path / "f.csv").write_bytes(b'h\n"a,b","c""d"\n"ab"c"d,e\nab"c,\n"",""""\n')
    records = FileSplitter(str(tmp_path), format="csv", columns="a, b", block_size=4, settle=0).read_records()
    assert records[["a", "b"]].fillna("null").values.tolist() == [["a,b", 'c"d'], ['abc"d', "e"], ['ab"c', "null"],
                                                                   ["null", '"']]


def test_a_csv_record_longer_than_arrows_parse_block_is_read(tmp_path):
    """Arrow parses in blocks of 1 MiB, and a record across more than two failed ("straddling object straddles two
    block boundaries"): 3 MiB failed, and 1.5 MB after 800 KB of short records."""
    for short, long in ((0, 3 << 20), (200_000, 1_500_000)):
        (tmp_path / "f.csv").write_bytes(b"a,b\n" + b"s,1\n" * short + b"x" * long + b",2\n")
        records = FileSplitter(str(tmp_path), format="csv", columns="a, b", settle=0).read_records()
        assert len(records) == short + 1 and records["a"].iloc[-1] == "x" * long and records["b"].iloc[-1] == "2"


@pytest.mark.parametrize(("data", "offset"), [
    (b"a,b\n1,x\r2,y\n3,z\n", 4), (b"a,b\r\n1,x\r\n \rz\r\n2,y\r\n", 10), (b"a,b\n1,x\r2,y\n\r\r\n3,z\n", 4),
    (b"a,b\r\n1,x\r", 5)])
def test_a_csv_record_holding_a_lone_carriage_return_is_refused_with_its_file_and_offset(tmp_path, data, offset):
    """Arrow's CSV parser ends a record at a lone \\r where the lines do not: a cryptic ArrowInvalid
    about column lengths, or records at the wrong offsets. A blank line holding one (``\r\r\n``) is
    skipped instead, as any blank line."""
    path = tmp_path / "t.csv"
    path.write_bytes(data)
    [block] = all_blocks(str(path), 1024)
    with pytest.raises(ValueError, match=rf"cannot read the record at offset {offset} of file '{path}' as CSV: "
                                         r"it holds a lone \\r \(not part of \\r\\n\)"):
        read_csv_block(FS, block, ["a", "b"])


#: What Java's ``String.trim`` strips: Spark's CSV reader skips a line that is empty once trimmed.
#: (Python's ``str.strip()`` strips more: U+0085, U+00A0, U+2028, ..., which Spark keeps.)
JAVA_TRIM = "".join(map(chr, range(0x21)))


def csv_reference(data: bytes, header: bool) -> list[tuple[str, int]]:
    """``(record, offset)`` as Spark's CSV reader takes them: blank lines (empty after Java's
    ``trim``) skipped, and with ``header`` the first non-blank line of the file, wherever it is,
    is the header."""
    records, offset = [], 0
    for raw in data.split(b"\n"):
        line = (raw[:-1] if raw.endswith(b"\r") and offset + len(raw) < len(data) else raw).decode("utf-8")
        if line.strip(JAVA_TRIM):
            records.append((line, offset))
        offset += len(raw) + 1
    return records[1:] if header else records


def csv_records(blocks: list[BlockMetadata], header: bool, columns: int = 1) -> list[tuple[str, int]]:
    """The records of the blocks, each read on its own, with their columns joined by commas."""
    names = ["a", "b"][:columns]
    frames = [read_csv_block(FS, b, names, header=header) for b in blocks]
    return [(",".join(row[:-1]), row[-1]) for frame in frames for row in frame[[*names, "offset"]].itertuples(index=False)]


@pytest.mark.parametrize("data", [
    b"\na,b\n1,2\n", b"\r\na,b\n1,2\n", b"\n\r\n\n\na,b\n1,2\n\n3,4", b"a,b\n1,2\n", b"\n\n\n", b"", b"\n\na,b",
    b"\n\na,b\n", b"\n" * 20 + b"a,b\n" + b"\n" * 7 + b"1,2\r\n3,4\n",
    # Blank lines: spaces, tabs and other control characters up to 0x20, a lone \r among them included.
    b"a,b\n1,2\n   \n\t\n3,4\n \n", b" \na,b\n1,2\n", b"\t\r\n\x0b\x0c\na,b\n \n1,2\n\t\t\n3,4", b"  \n\t\r\n\x0c",
    b"\x00\n\x1f\x01\r\na,b\n\x00\n1,2", b"a,b\n1,2\n\r\r\n3,4\n \r \n5,6", b"a,b\n1,2\n\r", b"\r\r\na,b\r\n1,2",
    b" \t" * 40 + b"\n" + b"\x0b" * 70 + b"\r\na,b\n \n1,2\n",  # more than the first ranged read (64 bytes) before the header
    # Not blank: characters above U+0020 that Python's str.strip() would strip too, and padded records.
    "a,b\n\u00a0,x\n \u00a0 , y \n\x7f,z\n\x85,w\n\u2028,v\n 1 , 2 \n".encode(), " \n\u00a0,\x85\n\ta,b\n1,2".encode(),
])
@pytest.mark.parametrize("header", [True, False])
def test_the_csv_header_is_the_first_non_blank_line_of_the_file_whatever_the_block(tmp_path, data, header):
    """As in Spark (CSVExprUtils.extractHeader drops the blank lines before the header, and
    filterCommentAndEmpty the blank lines after it): with leading blank lines the header is still no
    record, also when it starts in a later block, and a blank line is never a record."""
    path = tmp_path / "t.csv"
    path.write_bytes(data)
    expected = csv_reference(data, header)
    for block_size in range(1, len(data) + 2):
        assert csv_records(all_blocks(str(path), block_size), header, columns=2) == expected, block_size


class _RangeRecorder:
    """The local file system, keeping the ranges read by ``cat_file``."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []

    def open(self, path, mode):
        return FS.open(path, mode)

    def cat_file(self, path, start, end):
        self.ranges.append((start, end))
        return FS.cat_file(path, start=start, end=end)


@pytest.mark.parametrize("blank", [b"", b" \t\r\n" * 100])
def test_a_later_block_looks_for_the_header_by_small_ranged_reads_up_to_the_first_non_blank_byte(tmp_path, blank):
    """A block after byte 0 holding a non-blank line reads the file from byte 0 to see whether only
    blank lines come before its first line: one read of 64 bytes when the file starts with its header,
    one more (up to the block's first line) when 400 bytes of blank lines come first; never past that."""
    path = tmp_path / "t.csv"
    path.write_bytes(blank + b"a,b\n" + b"1,2\n" * 500)
    fs = _RangeRecorder()
    rows = []
    for block in all_blocks(str(path), 256):
        fs.ranges.clear()
        table = read_csv_block(fs, block, ["a", "b"])
        rows += table[["a", "b"]].values.tolist()
        if block.offset == 0 or block.end <= len(blank):
            assert fs.ranges == [], block  # the file's first block, or one of blank lines only
        else:  # every line is 4 bytes: the block's first one starts at the first multiple of 4
            assert fs.ranges == [(0, 64)] + ([(64, -(-block.offset // 4) * 4)] if blank else []), block
    assert rows == [["1", "2"]] * 500


def test_text_lines_keep_blank_lines_as_spark_read_text_does(tmp_path):
    """Only CSV skips blank lines: with format="text" a line of spaces, tabs or control characters is a record."""
    (tmp_path / "t.txt").write_bytes(b"a\n \n\t\r\n\x0b\x0c\n\n\x00\nb")
    for block_size in (1, 3, 1024):
        lines = FileSplitter(str(tmp_path), block_size=block_size, settle=0).read_records()["value"].tolist()
        assert lines == ["a", " ", "\t", "\x0b\x0c", "", "\x00", "b"], block_size


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.one_of(
        st.just(""),
        st.text(alphabet="abé中😀", min_size=1, max_size=6),
        st.text(alphabet=" \t\x0b\x0c\x00\x1f\r", min_size=1, max_size=4),  # blank (a lone \r is blank too)
        st.text(alphabet="a中 \t\x0b\x00\u00a0\x85\x7f", min_size=1, max_size=5).filter(lambda s: s.strip(JAVA_TRIM)),
    ), max_size=10),
    crlf=st.lists(st.booleans(), min_size=10, max_size=10),
    final_newline=st.booleans(),
    block_size=st.integers(min_value=1, max_value=40),
    cut=st.integers(min_value=0, max_value=10),
)
def test_csv_records_with_a_header_after_blank_lines_in_blocks_and_segments(tmp_path, lines, crlf, final_newline,
                                                                            block_size, cut):
    """Blocks and segments of any size, read separately: every record once, blank lines never, and
    the header (the first non-blank line) never; a file grown by whole lines is read as two segments."""
    text = "".join(line + ("\r\n" if crlf[i] else "\n") for i, line in enumerate(lines))
    data = (text if final_newline else text.removesuffix("\n").removesuffix("\r")).encode("utf-8")
    path = tmp_path / "t.csv"
    path.write_bytes(data)
    cut = min(cut, len(lines))
    grown_at = min(len("".join(line + ("\r\n" if crlf[i] else "\n") for i, line in enumerate(lines[:cut])).encode()),
                   len(data))
    blocks = list(FileMetadata(str(path), grown_at, 0.0, 0, block_size).blocks())
    blocks += list(FileMetadata(str(path), len(data), 0.0, grown_at, block_size).blocks())
    assert csv_records(blocks, header=True) == csv_reference(data, header=True)
    assert csv_records(blocks, header=False) == csv_reference(data, header=False)
