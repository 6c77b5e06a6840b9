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

import io
import warnings
from typing import IO, Sequence

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from storage.splitter.metadata import BlockMetadata

#: Arrow schema of the rows every line reader returns (and the Spark source emits).
LINE_SCHEMA = pa.schema(
    [("value", pa.string()), ("path", pa.string()), ("block_id", pa.int64()), ("offset", pa.int64())]
)
_TAIL_CHUNK = 1 << 20


class UnreadableFileWarning(UserWarning):
    """A file could not be read and was skipped (``strict=False``)."""


def _record_bytes(f: IO[bytes], block: BlockMetadata) -> tuple[int, bytes]:
    """The file offset of the block's first record and the bytes of all its records."""
    if block.offset > block.segment_start:
        f.seek(block.offset - 1)
        head = f.read(block.length + 1)
        # A record starts at p in [offset, end) iff byte p-1 is '\n': search bytes offset-1 .. end-2.
        newline = head.find(b"\n", 0, block.length)
        if newline < 0:
            return block.end, b""
        start, buf = block.offset + newline, head[newline + 1 :]
    else:
        f.seek(block.offset)
        start, buf = block.offset, f.read(block.length)
    if buf and not buf.endswith(b"\n") and block.end < block.segment_end:
        parts, pos = [buf], block.end
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
        buf = b"".join(parts)
    return start, buf


def _split_lines(start: int, buf: bytes) -> tuple[pa.Array, np.ndarray]:
    """Lines (as UTF-8 strings) and their file offsets, split by Arrow, not a Python loop."""
    if not buf:
        return pa.array([], pa.string()), np.empty(0, np.int64)
    body = buf[:-1] if buf.endswith(b"\n") else buf
    raw = pc.split_pattern(pa.array([body], pa.binary()), pattern=b"\n").flatten()
    sizes = pc.binary_length(raw).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    offsets = start + np.cumsum(sizes) - sizes
    if b"\r" in body:
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
    try:
        with fs.open(block.path, "rb") as f:
            start, buf = _record_bytes(f, block)
    except OSError as err:
        if strict:
            raise OSError(f"cannot read block {block.block_id} of file {block.path!r}: {err}") from err
        warnings.warn(f"skipped unreadable file {block.path!r}: {err}", UnreadableFileWarning, stacklevel=2)
        return LINE_SCHEMA.empty_table()
    values, offsets = _split_lines(start, buf)
    n = len(values)
    return pa.Table.from_arrays(
        [values, pa.repeat(pa.scalar(block.path, pa.string()), n),
         pa.array(np.full(n, block.block_id, np.int64)), pa.array(offsets)],
        schema=LINE_SCHEMA,
    )


def read_lines(fs: fsspec.AbstractFileSystem, blocks: Sequence[BlockMetadata], *, strict: bool = True) -> pd.DataFrame:
    """The lines of several blocks as one pandas DataFrame (columns of ``LINE_SCHEMA``)."""
    tables = [read_block_table(fs, b, strict=strict) for b in blocks]
    return pa.concat_tables([LINE_SCHEMA.empty_table(), *tables]).to_pandas()


def read_csv_block(
    fs: fsspec.AbstractFileSystem,
    block: BlockMetadata,
    column_names: Sequence[str],
    *,
    header: bool = True,
    strict: bool = True,
) -> pd.DataFrame:
    """CSV records (no newlines inside values) of one block, all columns as strings.

    Strings, because each block would otherwise infer its own types. With ``header``,
    the file's first line is the header and is not a record. Empty lines are skipped.
    ``path``, ``block_id`` and ``offset`` columns locate each record.
    """
    lines = read_block_table(fs, block, strict=strict)
    keep = pc.not_equal(lines["value"], "")
    if header and block.segment_start == 0 and block.offset == 0 and len(lines):
        keep = pc.and_(keep, pc.not_equal(lines["offset"], 0))
    lines = lines.filter(keep)
    if len(lines) == 0:
        records = pd.DataFrame({name: pd.Series([], dtype=object) for name in column_names})
    else:
        text = "\n".join(lines["value"].to_pylist()).encode("utf-8")
        records = pacsv.read_csv(
            io.BytesIO(text),
            read_options=pacsv.ReadOptions(column_names=list(column_names)),
            convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in column_names}),
        ).to_pandas()
    locate = lines.drop_columns(["value"]).to_pandas()
    return pd.concat([records.reset_index(drop=True), locate.reset_index(drop=True)], axis=1)
