"""Block readers: every record belongs to exactly one block.

The rule, as in Hadoop's line reader: a record belongs to the block that holds its
first byte. A block starting after its segment's start skips the record that the
previous block began (it looks one byte back for ``\\n``), and the last record that
starts inside a block is read to its end even past the block, up to the segment end.
Lines end at ``\\n``; one ``\\r`` before it is dropped (CRLF); a lone ``\\r`` is data, also one
ending a file without a final ``\\n``.
Splitting on the byte ``\\n`` never cuts a multi-byte UTF-8 character, because no byte
of such a character is ``0x0A``.
A segment of a compressed file is one block (``metadata``): it delivers the streams that end in it
(``compression.segment_content``), decompressed in memory, and its records are read from their content as
from one block covering an uncompressed file; a line is whole within what one segment delivers.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Callable, Iterator, Sequence

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from storage.splitter.compression import codec_of, complete_streams, segment_content
from storage.splitter.metadata import BlockMetadata

if TYPE_CHECKING:  # pyarrow's to_pandas() imports pandas when a frame is asked for
    import pandas as pd

#: Arrow schema of the rows every line reader returns (and the Spark source emits). No column
#: is ever null, and saying so lets Spark's row conversion skip Arrow's null check per value
#: (in a JFR profile of the Spark source's tasks; the end-to-end gain was within noise).
LINE_SCHEMA = pa.schema(
    [
        pa.field("value", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("block_id", pa.int64(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
    ]
)
#: Bytes read at a time. Pieces this size keep the newline search's arrays in the CPU cache and
#: let memory be reused from piece to piece, where whole blocks needed arrays of a block's size;
#: a task's memory no longer grows with the block size.
PIECE_BYTES = 4 << 20
#: Read size while looking for the end of a record longer than a piece, or for a block's first record.
_PROBE_BYTES = 64 << 10


class UnreadableFileWarning(UserWarning):
    """A file, or a directory to list, could not be read and was skipped (``strict=False``)."""


@dataclass(frozen=True)
class SkippedBlock:
    """A block left unread because its file could not be read (``strict=False``), and why."""

    path: str
    block_id: int
    error: str


#: Told of each ``SkippedBlock``: the warning goes to the log of the process that read, which in
#: Spark is an executor's; this reaches the user (``FileSplitter.skipped_blocks``).
OnSkip = Callable[[SkippedBlock], None]


def _first_record(f: IO[bytes], block: BlockMetadata) -> int | None:
    """File offset of the first record starting in the block; ``None`` when none does.

    A record starts at ``p`` in ``[offset, end)`` iff ``p`` is the segment start or byte ``p - 1``
    is ``\n``: search bytes ``offset - 1 .. end - 2``.
    """
    if block.offset == block.segment_start:
        return block.offset
    pos = block.offset - 1
    while pos < block.end - 1:
        f.seek(pos)
        probe = f.read(min(_PROBE_BYTES, block.end - 1 - pos))
        if not probe:
            return None
        newline = probe.find(b"\n")
        if newline >= 0:
            return pos + newline + 1
        pos += len(probe)
    return None


def _rest_of_record(f: IO[bytes], head: bytes, segment_end: int) -> bytes:
    """``head`` (read up to the file position of ``f``) and the following bytes up to its first
    ``\n`` (included) or the segment end: a record longer than a piece."""
    parts, pos = [head], f.tell()
    while pos < segment_end:
        probe = f.read(min(_PROBE_BYTES, segment_end - pos))
        if not probe:
            break
        newline = probe.find(b"\n")
        if newline >= 0:
            parts.append(probe[: newline + 1])
            break
        parts.append(probe)
        pos += len(probe)
    return b"".join(parts)


def _record_pieces(f: IO[bytes], block: BlockMetadata, piece_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """The block's records as pieces ``(file offset, data, stop)`` of about ``piece_bytes``:
    ``data[:stop]`` is whole records, the first starting at the file offset.

    The last record starting in the block is read to its end, past the block if need be (up to
    the segment end). A piece ends at a record end, so the next piece is read from there; only a
    record longer than a piece is read on, and joined, until its end.
    """
    pos = _first_record(f, block)
    while pos is not None and pos < block.end:
        want = min(piece_bytes, block.segment_end - pos)
        f.seek(pos)
        data = f.read(want)
        if not data:
            return
        if len(data) > block.end - pos - 1:
            # The piece holds byte end-1: the block's last record ends at the first '\n' from there.
            stop = data.find(b"\n", block.end - pos - 1)
            if stop >= 0:
                yield pos, data, stop + 1
                return
        if len(data) < want or pos + len(data) >= block.segment_end:
            yield pos, data, len(data)  # the segment's (or a truncated file's) end ends the last record
            return
        last = data.rfind(b"\n")
        if last < 0:
            data = _rest_of_record(f, data, block.segment_end)
            last = len(data) - 1
        yield pos, data, last + 1
        pos += last + 1


def _pieces_of(fs: fsspec.AbstractFileSystem, block: BlockMetadata, strict: bool, piece_bytes: int,
               on_skip: OnSkip | None) -> Iterator[tuple[int, bytes, int]]:
    """``_record_pieces`` of the block's file. A file that cannot be opened or read before its first
    piece gives no piece, an ``UnreadableFileWarning`` and a call of ``on_skip`` unless ``strict``, so
    the other blocks go on; an error after a piece was given always raises (the block would be cut
    short silently)."""
    given = False
    try:
        with fs.open(block.path, "rb") as f:
            size = f.size if isinstance(getattr(f, "size", None), int) else fs.size(block.path)  # s3fs' open has it
            if size < block.segment_end:  # read at the listing's offsets, other bytes gave lines twice or none
                reason = (f"the file has {size} bytes, fewer than the {block.segment_end} its listing saw: truncated or "
                          "rewritten since its blocks were handed out; the block is skipped, and the file's new "
                          "content is read from byte 0 at the next listing")
                warnings.warn(f"skipped block {block.block_id} of file {block.path!r}: {reason}", UnreadableFileWarning,
                              stacklevel=3)
                if on_skip is not None:
                    on_skip(SkippedBlock(block.path, block.block_id, reason))
                return
            if codec_of(block.path) is not None:
                f, block = _decompressed(f, block)
            for piece in _record_pieces(f, block, piece_bytes):
                given = True
                yield piece
    except OSError as err:
        if strict or given:
            raise OSError(f"cannot read block {block.block_id} of file {block.path!r}: {err}") from err
        warnings.warn(f"skipped unreadable file {block.path!r}: {err}", UnreadableFileWarning, stacklevel=3)
        if on_skip is not None:
            on_skip(SkippedBlock(block.path, block.block_id, str(err)))


def _decompressed(f: IO[bytes], block: BlockMetadata) -> tuple[IO[bytes], BlockMetadata]:
    """The content of the streams of a compressed file that end in the block's segment, decompressed in
    memory, and the one block covering it, at its offsets in the file's decompressed content: its records
    are then read as an uncompressed file's. Bytes ``[0, segment_end)`` are read (the streams before the
    segment are decompressed only to find where its streams start and their decompressed length), so a
    replayed block reads the same ones. Bytes that end inside a stream (a file still being written) leave
    that stream out, with a warning, and no error: the segment that holds its end delivers it. A corrupt
    file raises ``OSError`` naming it, as an unreadable one does."""
    segment = segment_content(f.read(block.segment_end), block.path, block.segment_start)
    if segment.incomplete is not None:
        warnings.warn(f"compressed file {block.path!r} ends inside a stream at byte {block.segment_end} (the stream "
                      f"starts at byte {segment.incomplete}): the stream is not read yet; it will be read when "
                      f"the file grows", UnreadableFileWarning, stacklevel=4)
    start, end = segment.before, segment.before + len(segment.content)
    return _Shifted(segment.content, start), BlockMetadata(block.path, block.block_id, start, end - start, start, end)


class _Shifted(io.BytesIO):
    """Bytes that stand at offset ``base`` of a file: ``seek`` and ``tell`` take and give file offsets."""

    def __init__(self, data: bytes, base: int) -> None:
        super().__init__(data)
        self._base = base

    def seek(self, pos: int, whence: int = 0) -> int:
        return super().seek(pos - self._base if whence == 0 else pos, whence) + self._base

    def tell(self) -> int:
        return super().tell() + self._base


#: UTF-8's byte order mark: at a file's first byte it is no text (Hadoop's ``LineRecordReader``, behind Spark's text
#: and CSV readers, skips it there); anywhere else it is the character U+FEFF.
_BOM = b"\xef\xbb\xbf"


def _split_lines(start: int, data: bytes, stop: int, drop_bom: bool = True) -> tuple[pa.Array, np.ndarray]:
    """Lines of ``data[:stop]`` (as UTF-8 strings) and their file offsets (``start`` is the
    first's), split by Arrow on a zero-copy view, not by a Python loop. A byte order mark at the
    file's first byte is left out of the first line (its offset stays 0) unless ``drop_bom`` is
    false (the Spark source's chunk rows, whose first line the JVM cuts without it)."""
    if drop_bom and start == 0 and data[:stop] == _BOM:  # a file of a byte order mark alone holds no line
        return pa.array([], pa.string()), np.empty(0, np.int64)
    final_newline = data[stop - 1] == 10
    if final_newline:  # the final '\n' ends the last line; it does not start an empty one
        stop -= 1
    body = pa.py_buffer(data).slice(0, stop)
    whole = pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, stop], np.int32)), body])
    raw = pc.split_pattern(whole, pattern=b"\n").flatten()
    sizes = pc.binary_length(raw).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    offsets = start + np.cumsum(sizes) - sizes
    if data.find(b"\r", 0, stop) >= 0:  # drop the '\r' of '\r\n'
        kept = not final_newline and data[stop - 1] == 13  # a '\r' ending a last line without '\n' is data
        cut = pc.replace_substring_regex(raw.slice(0, len(raw) - kept), pattern=r"\r\z", replacement=b"")
        raw = pa.concat_arrays([cut, raw.slice(len(raw) - 1)]) if kept else cut
    if drop_bom and start == 0 and data.startswith(_BOM):  # a file's byte order mark is no text, as Hadoop's line reader drops it
        raw = pa.concat_arrays([pa.array([raw[0].as_py()[len(_BOM):]], pa.binary()), raw.slice(1)])
    try:
        values = raw.cast(pa.string())
    except pa.ArrowInvalid:  # invalid UTF-8: replace bad bytes, as Spark's text source does
        values = pa.array([b.decode("utf-8", errors="replace") for b in raw.to_pylist()], pa.string())
    return values, offsets


def line_batches(fs: fsspec.AbstractFileSystem, block: BlockMetadata, *, strict: bool = True,
                 piece_bytes: int = PIECE_BYTES, on_skip: OnSkip | None = None) -> Iterator[pa.RecordBatch]:
    """The lines of one block as Arrow batches with ``LINE_SCHEMA``, one per piece read.

    With ``strict=False`` a file that cannot be read gives no batch, an ``UnreadableFileWarning``
    naming the file and a ``SkippedBlock`` for ``on_skip``, so the other blocks go on.
    """
    for start, data, stop in _pieces_of(fs, block, strict, piece_bytes, on_skip):
        values, offsets = _split_lines(start, data, stop)
        n = len(values)
        yield pa.RecordBatch.from_arrays(
            [values, pa.repeat(pa.scalar(shown_path(block.path), pa.string()), n),
             pa.array(np.full(n, block.block_id, np.int64)), pa.array(offsets)],
            schema=LINE_SCHEMA,
        )


def read_block_table(fs: fsspec.AbstractFileSystem, block: BlockMetadata, *, strict: bool = True,
                     piece_bytes: int = PIECE_BYTES, on_skip: OnSkip | None = None) -> pa.Table:
    """``line_batches`` of one block as one Arrow table."""
    batches = line_batches(fs, block, strict=strict, piece_bytes=piece_bytes, on_skip=on_skip)
    return pa.Table.from_batches(list(batches), LINE_SCHEMA)


#: Arrow schema of ``chunk_batches``: a block's records in chunks, one row per chunk. Record
#: ``i`` of a chunk is ``text[starts[i] : starts[i] + lengths[i]]``, UTF-8, at file offset
#: ``base + starts[i]`` (the Spark source leaves a byte order mark at file offset 0 out of it).
#: Starts are relative and 32-bit (a chunk is far below 2 GiB): 4 bytes less per
#: record for the Python worker to send and the JVM to convert than absolute 64-bit offsets.
CHUNK_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("block_id", pa.int64(), nullable=False),
        pa.field("base", pa.int64(), nullable=False),
        pa.field("text", pa.binary(), nullable=False),
        pa.field("starts", pa.list_(pa.field("element", pa.int32(), nullable=False)), nullable=False),
        pa.field("lengths", pa.list_(pa.field("element", pa.int32(), nullable=False)), nullable=False),
    ]
)
#: Bytes of records per chunk: big enough that per-row costs (the Spark source converts rows one
#: at a time on the JVM) are spread over thousands of lines, small enough to stay far from the JVM's
#: huge-object allocations that whole 32 MiB blocks as one value caused.
CHUNK_BYTES = 256 << 10


def _chunks(path: str, block_id: int, base: np.ndarray, text: pa.Array, starts: np.ndarray,
            lengths: np.ndarray, cuts: np.ndarray) -> pa.RecordBatch:
    """Rows of ``CHUNK_SCHEMA``: chunk ``j`` holds records ``cuts[j]:cuts[j + 1]``, ``starts`` relative
    to its own text."""
    n = len(base)
    rows = pa.array(cuts.astype(np.int32))
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(shown_path(path), pa.string()), n), pa.array(np.full(n, block_id, np.int64)), pa.array(base), text,
         pa.ListArray.from_arrays(rows, pa.array(starts.astype(np.int32))),
         pa.ListArray.from_arrays(rows, pa.array(lengths.astype(np.int32)))],
        schema=CHUNK_SCHEMA,
    )


def shown_path(path: str) -> str:
    """``path`` as the ``path`` column holds it: a local name that is not UTF-8 (Python's surrogate escapes, which
    Arrow's strings refuse) with each such byte as ``\\xff``. The read failed there, naming no file, and lost the
    lines of the other files' blocks handed out with it."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path


def _chunk_piece(path: str, block_id: int, start: int, data: bytes, stop: int, chunk_bytes: int) -> pa.RecordBatch:
    """The records of ``data[:stop]`` (the first at file offset ``start``) as chunk rows."""
    body = pa.py_buffer(data).slice(0, stop)
    whole = pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, stop], np.int32)), body])
    try:
        whole.cast(pa.string())
    except pa.ArrowInvalid:  # invalid UTF-8: one chunk per line, holding the line with bad bytes replaced
        values, offsets = _split_lines(start, data, stop, drop_bom=False)
        text = values.cast(pa.binary())
        lengths = pc.binary_length(text).to_numpy()
        return _chunks(path, block_id, offsets, text, np.zeros(len(offsets)), lengths, np.arange(len(offsets) + 1))
    view = np.frombuffer(data, np.uint8, stop)
    ends = np.flatnonzero(view == 10)
    ended = len(ends)
    if view[-1] != 10:
        ends = np.append(ends, stop)  # the last record has no final '\n'
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    lengths = ends - starts
    if data.find(b"\r", 0, stop) >= 0:  # drop the '\r' of '\r\n'; a last record without '\n' keeps its '\r' (data)
        lengths[:ended] -= (lengths[:ended] > 0) & (view[np.maximum(ends[:ended] - 1, 0)] == 13)
    # Chunk j starts at the first record starting at or after j * chunk_bytes.
    cuts = np.unique(np.searchsorted(starts, np.arange(0, stop, chunk_bytes)))
    cuts = np.append(cuts[cuts < len(starts)], len(starts))
    first = starts[cuts[:-1]]
    text = pa.Array.from_buffers(pa.binary(), len(cuts) - 1, [None, pa.py_buffer(np.append(first, stop).astype(np.int32)), body])
    return _chunks(path, block_id, start + first, text, starts - np.repeat(first, np.diff(cuts)), lengths, cuts)


def chunk_batches(fs: fsspec.AbstractFileSystem, block: BlockMetadata, *, strict: bool = True,
                  chunk_bytes: int = CHUNK_BYTES, piece_bytes: int = PIECE_BYTES,
                  on_skip: OnSkip | None = None) -> Iterator[pa.RecordBatch]:
    """The records of one block as rows of ``CHUNK_SCHEMA``, each about ``chunk_bytes`` of the file,
    in one Arrow batch per piece read.

    The same records as ``line_batches`` (same reading rules), but with the record bounds beside
    the bytes instead of one row per record, so the Spark source hands the JVM one row per chunk
    and the JVM cuts the records out with ``substr``. ``text`` is a zero-copy view of the bytes
    read, ``\r\n`` included (``lengths`` leave the ``\r`` out). A piece with invalid UTF-8 takes
    ``line_batches``' replaced lines instead, one chunk per line (rare, slower).
    """
    for start, data, stop in _pieces_of(fs, block, strict, piece_bytes, on_skip):
        if not (start == 0 and data[:stop] == _BOM):  # a file of a byte order mark alone holds no line
            yield _chunk_piece(block.path, block.block_id, start, data, stop, chunk_bytes)


def read_lines(fs: fsspec.AbstractFileSystem, blocks: Sequence[BlockMetadata], *, strict: bool = True,
               on_skip: OnSkip | None = None) -> pd.DataFrame:
    """The lines of several blocks as one pandas DataFrame (columns of ``LINE_SCHEMA``)."""
    tables = [read_block_table(fs, b, strict=strict, on_skip=on_skip) for b in blocks]
    return pa.concat_tables([LINE_SCHEMA.empty_table(), *tables]).to_pandas()


#: What a blank CSV line holds: characters up to U+0020, those Java's ``String.trim`` strips. Spark's
#: CSV reader skips a line that is empty once trimmed (``CSVExprUtils.filterCommentAndEmpty``), and
#: the blank lines before the header (``CSVExprUtils.extractHeader``).
_BLANK_BYTES = bytes(range(0x21))
_BLANK_CHARACTERS = _BLANK_BYTES.decode("ascii")


def csv_schema(column_names: Sequence[str]) -> pa.Schema:
    """Arrow schema of ``read_csv_table``: the CSV columns as strings, then where each record is."""
    return pa.schema([pa.field(name, pa.string()) for name in column_names] + list(LINE_SCHEMA)[1:])


def read_csv_table(
    fs: fsspec.AbstractFileSystem,
    block: BlockMetadata,
    column_names: Sequence[str],
    *,
    header: bool = True,
    strict: bool = True,
    on_skip: OnSkip | None = None,
) -> pa.Table:
    """CSV records (no newlines inside values) of one block as an Arrow table with ``csv_schema``.

    Every column is a string, because each block would otherwise infer its own types; an empty field, quoted
    or not, is null, as Spark's CSV reader reads it. Blank lines
    (empty, or only characters up to U+0020: spaces, tabs, ``\r``, other control characters) are
    skipped, as Spark's CSV reader skips the lines that Java's ``String.trim`` empties. With
    ``header``, the file's first non-blank line is the header and is not a record, in whichever
    block (or segment) it starts, as in Spark, which skips the blank lines before the header.
    ``path``, ``block_id`` and ``offset`` locate each record; a record belongs to the block holding
    its first byte, as lines do. A record holding a lone ``\r`` is refused: Arrow's parser would end
    a record there, where the lines do not, and the records would lose their offsets.
    """
    schema = csv_schema(column_names)
    lines = read_block_table(fs, block, strict=strict, on_skip=on_skip)
    keep = pc.not_equal(pc.utf8_ltrim(lines["value"], characters=_BLANK_CHARACTERS), "")
    if header and pc.any(keep).as_py():
        # The header is the file's first non-blank line: this block's first one, when only blank lines come before it.
        first = pc.index(keep, True).as_py()
        if codec_of(block.path) is not None:  # the segment's content starts the file's, or follows the header's
            here = lines["offset"][0].as_py() == 0 or _only_blank_streams(fs, block)
        else:
            here = block.offset == 0 or _only_blank_lines(fs, block, lines["offset"][0].as_py())
        if here:
            keep = pc.and_(keep, pc.not_equal(lines["offset"], lines["offset"][first]))
    lines = lines.filter(keep)
    if len(lines) == 0:
        return schema.empty_table()
    values = lines["value"].combine_chunks()
    carriage_returns = pc.match_substring(values, "\r")
    if pc.any(carriage_returns).as_py():
        offset = lines["offset"].filter(carriage_returns)[0].as_py()
        raise ValueError(
            f"cannot read the record at offset {offset} of file {block.path!r} as CSV: it holds a lone \\r (not "
            f"part of \\r\\n), which a CSV parser takes for a line end and the block reader for data; fix the file"
        )
    unclosed = pc.and_(pc.match_substring(values, '"'), pc.invert(pc.match_substring_regex(values, _QUOTED_LINE)))
    if pc.any(unclosed).as_py():
        offset = lines["offset"].filter(unclosed)[0].as_py()
        raise ValueError(
            f"cannot read the record at offset {offset} of file {block.path!r} as CSV: it opens a quoted value that "
            "its line does not close; a record is one line here, and Arrow's parser would run the value on into the "
            "next line's, or close it where the block ends (rows that differ by block size); fix the file"
        )
    # After an empty first line, which the parser skips: it drops a byte order mark at the start of its text, and a
    # record of U+FEFF first that starts a block would lose it, where one inside the block keeps it.
    text = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(values) + 1], pa.int32()),
                                                   pa.concat_arrays([pa.array([""], pa.string()), values])), "\n")[0]
    malformed: list[pacsv.InvalidRow] = []

    def refuse(row: pacsv.InvalidRow) -> str:
        malformed.append(row)
        return "error"

    longest = pc.max(pc.binary_length(values)).as_py() or 0
    try:
        records = pacsv.read_csv(
            pa.BufferReader(text.as_buffer()),
            # Arrow parses in blocks of 1 MiB by default, and a record across more than two fails ("straddling object
            # straddles two block boundaries"): a record above 1 to 2 MiB failed, by where it fell.
            read_options=pacsv.ReadOptions(column_names=list(column_names), block_size=max(1 << 20, 2 * longest + 2)),
            parse_options=pacsv.ParseOptions(newlines_in_values=False, invalid_row_handler=refuse),
            convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in column_names},
                                                 strings_can_be_null=True, null_values=[""]),
        )
    except pa.ArrowInvalid as err:
        raise _malformed_csv(block, lines, malformed, err) from err
    if records.num_rows != len(lines):  # a value run on over a line end, which the check above should have caught
        raise ValueError(f"cannot read block {block.block_id} of file {block.path!r} as CSV: its {len(lines)} lines "
                         f"parsed as {records.num_rows} records; a quoted value runs over a line end")
    return pa.Table.from_arrays([*records.columns, lines["path"], lines["block_id"], lines["offset"]], schema=schema)


#: A CSV line whose quoted values all close on it (RFC 4180, a quote inside doubled): every field is empty, starts
#: with another character than a quote (a quote later in it is data), or is quoted and closed, by a quote that no
#: quote follows (that would be a doubled one), then maybe other characters up to the comma, as Arrow's parser takes
#: them (``"ab"c"d`` is ``abc"d``).
_QUOTED_FIELD = r'(?:"(?:[^"]|"")*"(?:[^,"][^,]*)?|[^,"][^,]*|)'
_QUOTED_LINE = rf"^{_QUOTED_FIELD}(?:,{_QUOTED_FIELD})*$"


def _only_blank_lines(fs: fsspec.AbstractFileSystem, block: BlockMetadata, stop: int) -> bool:
    """Whether bytes ``[0, stop)`` of the block's file are blank lines only: every byte, line ends
    included, is at most ``0x20`` (no byte of a multi-byte UTF-8 character is), after a byte order mark.

    Reads up to the first other byte, by ranges (``cat_file``, so a remote file is not read ahead):
    one read of a few bytes unless the file starts with blank lines.
    """
    pos, size = 0, 64
    try:
        while pos < stop:
            probe = fs.cat_file(block.path, start=pos, end=min(stop, pos + size))
            text = probe[len(_BOM):] if pos == 0 and probe.startswith(_BOM) else probe  # no text (``_split_lines``)
            if not probe or text.translate(None, _BLANK_BYTES):
                return False
            pos, size = pos + len(probe), _PROBE_BYTES
    except OSError as err:
        raise OSError(f"cannot read block {block.block_id} of file {block.path!r}: {err}") from err
    return True


def _only_blank_streams(fs: fsspec.AbstractFileSystem, block: BlockMetadata) -> bool:
    """Whether the streams of the block's compressed file before its segment hold blank lines only (after a
    byte order mark), as ``_only_blank_lines`` for an uncompressed file: those streams are decompressed one
    by one up to the first that holds text, so with the header in the file's first stream only that one is."""
    try:
        with fs.open(block.path, "rb") as f:
            data = f.read(block.segment_start)
        at_start = True
        for content in complete_streams(data, block.path):
            if at_start and content:
                content, at_start = content.removeprefix(_BOM), False
            if content.translate(None, _BLANK_BYTES):
                return False
    except OSError as err:
        raise OSError(f"cannot read block {block.block_id} of file {block.path!r}: {err}") from err
    return True


def _malformed_csv(block: BlockMetadata, lines: pa.Table, malformed: list, err: Exception) -> ValueError:
    """A CSV error naming the file and the record's offset: a record is never dropped or padded
    silently; the file, or ``columns``, has to be fixed."""
    where = f"block {block.block_id} of file {block.path!r}"
    if malformed:
        offsets = lines.filter(pc.equal(lines["value"], malformed[0].text))["offset"]
        if len(offsets):
            where = f"the record at offset {offsets[0].as_py()} of file {block.path!r}"
    return ValueError(f"cannot read {where} as CSV: {err}")


def read_csv(fs: fsspec.AbstractFileSystem, blocks: Sequence[BlockMetadata], column_names: Sequence[str], *,
             header: bool = True, strict: bool = True, on_skip: OnSkip | None = None) -> pd.DataFrame:
    """The CSV records of several blocks as one pandas DataFrame (columns of ``csv_schema``)."""
    tables = [read_csv_table(fs, b, column_names, header=header, strict=strict, on_skip=on_skip) for b in blocks]
    return pa.concat_tables([csv_schema(column_names).empty_table(), *tables]).to_pandas()


def read_csv_block(
    fs: fsspec.AbstractFileSystem,
    block: BlockMetadata,
    column_names: Sequence[str],
    *,
    header: bool = True,
    strict: bool = True,
    on_skip: OnSkip | None = None,
) -> pd.DataFrame:
    """``read_csv_table`` as a pandas DataFrame: CSV columns as strings, then ``path``, ``block_id``, ``offset``."""
    return read_csv_table(fs, block, column_names, header=header, strict=strict, on_skip=on_skip).to_pandas()
