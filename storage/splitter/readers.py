"""Block readers: every record belongs to exactly one block.

The rule, as in Hadoop's line reader: a record belongs to the block that holds its
first byte. A block starting after its segment's start skips the record that the
previous block began (it looks one byte back for ``\\n``), and the last record that
starts inside a block is read to its end even past the block, up to the segment end.
Lines end at ``\\n``; one ``\\r`` before it is dropped (CRLF); a lone ``\\r`` is data.
Splitting on the byte ``\\n`` never cuts a multi-byte UTF-8 character, because no byte
of such a character is ``0x0A``.
"""

from __future__ import annotations

import warnings
from typing import IO, Sequence

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from storage.splitter.metadata import BlockMetadata

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
_TAIL_CHUNK = 1 << 20
#: Bytes read past a block's end in the same read as the block: enough for the end of its last
#: record unless that record is longer; then ``_TAIL_CHUNK``-sized reads follow.
_TAIL_GUESS = 64 << 10


class UnreadableFileWarning(UserWarning):
    """A file could not be read and was skipped (``strict=False``)."""


def _record_bytes(f: IO[bytes], block: BlockMetadata) -> tuple[int, bytes, int, int]:
    """The file offset of the block's first record, and its records as ``data[begin:stop]``.

    One read covers the block, the byte before it and ``_TAIL_GUESS`` bytes after it, which
    usually holds the end of the last record; the records are returned as bounds into that
    read, not copied (copying 32 MiB blocks was a visible part of a Spark task's Python time).
    """
    base = block.offset - 1 if block.offset > block.segment_start else block.offset
    want = min(block.end - base + _TAIL_GUESS, block.segment_end - base)
    f.seek(base)
    data = f.read(want)
    if base < block.offset:
        # A record starts at p in [offset, end) iff byte p-1 is '\n': search bytes offset-1 .. end-2.
        newline = data.find(b"\n", 0, block.end - base - 1)
        if newline < 0:
            return block.end, b"", 0, 0
        begin = newline + 1
    else:
        begin = 0
    if begin >= len(data):
        return block.end, b"", 0, 0
    # The last record starting in the block ends at the first '\n' at or after byte end-1.
    stop = data.find(b"\n", block.end - base - 1)
    if stop >= 0:
        return base + begin, data, begin, stop + 1
    if len(data) < want or base + len(data) >= block.segment_end:
        return base + begin, data, begin, len(data)
    parts, pos = [data[begin:]], base + len(data)  # a record longer than the tail chunk: read on
    while pos < block.segment_end:
        chunk = f.read(min(_TAIL_CHUNK, block.segment_end - pos))
        if not chunk:
            break
        newline = chunk.find(b"\n")
        if newline >= 0:
            parts.append(chunk[: newline + 1])
            break
        parts.append(chunk)
        pos += len(chunk)
    joined = b"".join(parts)
    return base + begin, joined, 0, len(joined)


def _read_records(fs: fsspec.AbstractFileSystem, block: BlockMetadata, strict: bool) -> tuple[int, bytes, int, int] | None:
    """``_record_bytes`` of the block's file; ``None`` (with an ``UnreadableFileWarning``) when the
    file cannot be read and not ``strict``, so the other blocks go on."""
    try:
        with fs.open(block.path, "rb") as f:
            return _record_bytes(f, block)
    except OSError as err:
        if strict:
            raise OSError(f"cannot read block {block.block_id} of file {block.path!r}: {err}") from err
        warnings.warn(f"skipped unreadable file {block.path!r}: {err}", UnreadableFileWarning, stacklevel=3)
        return None


def _split_lines(start: int, data: bytes, begin: int = 0, stop: int | None = None) -> tuple[pa.Array, np.ndarray]:
    """Lines of ``data[begin:stop]`` (as UTF-8 strings) and their file offsets (``start`` is the
    first's), split by Arrow on a zero-copy view, not by a Python loop."""
    stop = len(data) if stop is None else stop
    if stop <= begin:
        return pa.array([], pa.string()), np.empty(0, np.int64)
    if data[stop - 1] == 10:  # the final '\n' ends the last line; it does not start an empty one
        stop -= 1
    body = pa.py_buffer(data).slice(begin, stop - begin)
    whole = pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, stop - begin], np.int32)), body])
    raw = pc.split_pattern(whole, pattern=b"\n").flatten()
    sizes = pc.binary_length(raw).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    offsets = start + np.cumsum(sizes) - sizes
    if data.find(b"\r", begin, stop) >= 0:
        raw = pc.replace_substring_regex(raw, pattern=r"\r\z", replacement=b"")
    try:
        values = raw.cast(pa.string())
    except pa.ArrowInvalid:  # invalid UTF-8: replace bad bytes, as Spark's text source does
        values = pa.array([b.decode("utf-8", errors="replace") for b in raw.to_pylist()], pa.string())
    return values, offsets


def read_block_table(fs: fsspec.AbstractFileSystem, block: BlockMetadata, *, strict: bool = True) -> pa.Table:
    """The lines of one block as an Arrow table with ``LINE_SCHEMA``.

    With ``strict=False`` an unreadable file gives an empty table and an
    ``UnreadableFileWarning`` naming the file, so the other blocks go on.
    """
    read = _read_records(fs, block, strict)
    if read is None:
        return LINE_SCHEMA.empty_table()
    values, offsets = _split_lines(*read)
    n = len(values)
    return pa.Table.from_arrays(
        [values, pa.repeat(pa.scalar(block.path, pa.string()), n),
         pa.array(np.full(n, block.block_id, np.int64)), pa.array(offsets)],
        schema=LINE_SCHEMA,
    )


#: Arrow schema of ``read_chunk_table``: a block's records in chunks, one row per chunk. Record
#: ``i`` of a chunk is ``text[offsets[i] - base : offsets[i] - base + lengths[i]]``, UTF-8.
CHUNK_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("block_id", pa.int64(), nullable=False),
        pa.field("base", pa.int64(), nullable=False),
        pa.field("text", pa.binary(), nullable=False),
        pa.field("offsets", pa.list_(pa.field("element", pa.int64(), nullable=False)), nullable=False),
        pa.field("lengths", pa.list_(pa.field("element", pa.int32(), nullable=False)), nullable=False),
    ]
)
#: Bytes of records per chunk: big enough that per-row costs (the Spark source converts rows one
#: at a time on the JVM) are spread over thousands of lines, small enough to stay far from the JVM's
#: huge-object allocations that whole 32 MiB blocks as one value caused.
CHUNK_BYTES = 256 << 10


def _chunks(path: str, block_id: int, base: np.ndarray, text: pa.Array, offsets: np.ndarray,
            lengths: np.ndarray, cuts: np.ndarray) -> pa.Table:
    """Rows of ``CHUNK_SCHEMA``: chunk ``j`` holds records ``cuts[j]:cuts[j + 1]``."""
    n = len(base)
    rows = pa.array(cuts.astype(np.int32))
    return pa.Table.from_arrays(
        [pa.repeat(pa.scalar(path, pa.string()), n), pa.array(np.full(n, block_id, np.int64)), pa.array(base), text,
         pa.ListArray.from_arrays(rows, pa.array(offsets)), pa.ListArray.from_arrays(rows, pa.array(lengths))],
        schema=CHUNK_SCHEMA,
    )


def read_chunk_table(fs: fsspec.AbstractFileSystem, block: BlockMetadata, *, strict: bool = True,
                     chunk_bytes: int = CHUNK_BYTES) -> pa.Table:
    """The records of one block as rows of ``CHUNK_SCHEMA``, each about ``chunk_bytes`` of the file.

    The same records as ``read_block_table`` (same reading rules), but with the record bounds
    beside the bytes instead of one row per record, so the Spark source hands the JVM one row per
    chunk and the JVM cuts the records out with ``substr``. ``text`` is a zero-copy view of the
    bytes read, ``\\r\\n`` included (``lengths`` leave the ``\\r`` out). A block with invalid UTF-8
    takes ``read_block_table``'s replaced lines instead, one chunk per line (rare, slower).
    """
    read = _read_records(fs, block, strict)
    if read is None or read[3] <= read[2]:
        return CHUNK_SCHEMA.empty_table()
    start, data, begin, stop = read
    body = pa.py_buffer(data).slice(begin, stop - begin)
    whole = pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, stop - begin], np.int32)), body])
    try:
        whole.cast(pa.string())
    except pa.ArrowInvalid:  # invalid UTF-8: one chunk per line, holding the line with bad bytes replaced
        values, offsets = _split_lines(start, data, begin, stop)
        text = values.cast(pa.binary())
        lengths = pc.binary_length(text).to_numpy().astype(np.int32)
        return _chunks(block.path, block.block_id, offsets, text, offsets, lengths, np.arange(len(offsets) + 1))
    view = np.frombuffer(data, np.uint8, stop - begin, begin)
    ends = np.flatnonzero(view == 10)  # relative to begin, like every position below
    if view[-1] != 10:
        ends = np.append(ends, stop - begin)  # the last record has no final '\n'
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    carriage_return = (ends > starts) & (view[np.maximum(ends - 1, 0)] == 13)
    lengths = (ends - starts - carriage_return).astype(np.int32)
    # Chunk j starts at the first record starting at or after j * chunk_bytes.
    cuts = np.unique(np.searchsorted(starts, np.arange(0, stop - begin, chunk_bytes)))
    cuts = np.append(cuts[cuts < len(starts)], len(starts))
    bounds = np.append(starts[cuts[:-1]], stop - begin).astype(np.int32)
    text = pa.Array.from_buffers(pa.binary(), len(cuts) - 1, [None, pa.py_buffer(bounds), body])
    return _chunks(block.path, block.block_id, start + starts[cuts[:-1]], text, start + starts, lengths, cuts)


def read_lines(fs: fsspec.AbstractFileSystem, blocks: Sequence[BlockMetadata], *, strict: bool = True) -> pd.DataFrame:
    """The lines of several blocks as one pandas DataFrame (columns of ``LINE_SCHEMA``)."""
    tables = [read_block_table(fs, b, strict=strict) for b in blocks]
    return pa.concat_tables([LINE_SCHEMA.empty_table(), *tables]).to_pandas()


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
) -> pa.Table:
    """CSV records (no newlines inside values) of one block as an Arrow table with ``csv_schema``.

    Every column is a string, because each block would otherwise infer its own types. With
    ``header``, the file's first line is the header and is not a record. Empty lines are
    skipped. ``path``, ``block_id`` and ``offset`` locate each record; a record belongs to the
    block holding its first byte, as lines do.
    """
    schema = csv_schema(column_names)
    lines = read_block_table(fs, block, strict=strict)
    keep = pc.not_equal(lines["value"], "")
    if header and block.segment_start == 0 and block.offset == 0 and len(lines):
        keep = pc.and_(keep, pc.not_equal(lines["offset"], 0))
    lines = lines.filter(keep)
    if len(lines) == 0:
        return schema.empty_table()
    values = lines["value"].combine_chunks()
    text = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values), "\n")[0]
    records = pacsv.read_csv(
        pa.BufferReader(text.as_buffer()),
        read_options=pacsv.ReadOptions(column_names=list(column_names)),
        parse_options=pacsv.ParseOptions(newlines_in_values=False),
        convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in column_names}),
    )
    return pa.Table.from_arrays([*records.columns, lines["path"], lines["block_id"], lines["offset"]], schema=schema)


def read_csv_block(
    fs: fsspec.AbstractFileSystem,
    block: BlockMetadata,
    column_names: Sequence[str],
    *,
    header: bool = True,
    strict: bool = True,
) -> pd.DataFrame:
    """``read_csv_table`` as a pandas DataFrame: CSV columns as strings, then ``path``, ``block_id``, ``offset``."""
    return read_csv_table(fs, block, column_names, header=header, strict=strict).to_pandas()
