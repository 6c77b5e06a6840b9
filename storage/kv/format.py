"""The bytes on disk: runs as blocks, log frames, data files with their index.

A run (``keys.Run``) is stored as one self-describing block, read back without
copying (NumPy and Arrow views of the bytes)::

    header  magic "KVR1", count u32, width u16, flags u16, data length u64, pad to 24
    rows    count x width bytes (the encoded keys, sorted)
    offsets (count + 1) x int64 (value offsets)
    valid   count bytes, padded to 8 (only in log frames: 0 marks a delete)
    data    the value bytes

A log frame is one committed batch: ``magic "KVW1" | payload length u64 |
batch id i64 | crc32 u32`` then the payload (a block). The CRC covers the batch
id and the payload, so a frame cut short or half-written by a crash is told
from a whole one.

A data file is its blocks, each possibly compressed, then a JSON index (per
block: offset, stored and raw length, CRC32, count, first key) and a footer
``index length u64 | index crc32 u32 | magic "KVDATA01"``.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .errors import CorruptStoreError
from .keys import Run

_BLOCK = struct.Struct("<4sIHHQ4x")
_BLOCK_MAGIC = b"KVR1"
_HAS_VALID = 1
FRAME = struct.Struct("<4sQqI")
_FRAME_MAGIC = b"KVW1"
_FOOTER = struct.Struct("<QI8s")
_FILE_MAGIC = b"KVDATA01"
_VALUE = pa.large_binary()


def _pad8(n: int) -> int:
    return -(-n // 8) * 8


def encode_run(run: Run) -> bytes:
    """One block holding ``run`` (its deletes included)."""
    return b"".join(_run_parts(run))


def _run_parts(run: Run) -> list[Any]:
    """The pieces of a block, views of the run's buffers where they can be: joined once by the caller."""
    n, width = run.rows.shape
    _, offsets_buf, data_buf = run.values.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, n + 1, run.values.offset * 8)
    start, stop = int(offsets[0]), int(offsets[-1])
    data = memoryview(data_buf.slice(start, stop - start)) if data_buf is not None and stop > start else b""
    parts: list[Any] = [b"", memoryview(np.ascontiguousarray(run.rows).reshape(-1)), (offsets - start).tobytes()]
    flags = 0
    if run.values.null_count:
        flags |= _HAS_VALID
        valid = run.values.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8).tobytes()
        parts.append(valid + b"\0" * (_pad8(n) - n))
    parts.append(data)
    parts[0] = _BLOCK.pack(_BLOCK_MAGIC, n, width, flags, stop - start)
    return parts


def decode_run(buf: bytes | memoryview, where: str) -> Run:
    """The run of one block; ``where`` names it in errors."""
    view = memoryview(buf)
    if len(view) < _BLOCK.size:
        raise CorruptStoreError(where, f"a block of {len(view)} bytes is shorter than its header")
    magic, n, width, flags, data_len = _BLOCK.unpack_from(view)
    if magic != _BLOCK_MAGIC or width % 8:
        raise CorruptStoreError(where, "a block does not start with its header")
    pos = _BLOCK.size
    rows_end = pos + n * width
    offsets_end = rows_end + (n + 1) * 8
    valid_end = offsets_end + (_pad8(n) if flags & _HAS_VALID else 0)
    if valid_end + data_len != len(view):
        raise CorruptStoreError(where, f"a block's sections add up to {valid_end + data_len} bytes, not {len(view)}")
    rows = np.frombuffer(view, np.uint8, n * width, pos).reshape(n, width)
    offsets = pa.py_buffer(view[rows_end:offsets_end])
    validity = None
    if flags & _HAS_VALID:
        valid = np.frombuffer(view, np.uint8, n, offsets_end).astype(bool)
        validity = pa.array(valid).buffers()[1]
    values = pa.Array.from_buffers(_VALUE, n, [validity, offsets, pa.py_buffer(view[valid_end:])])
    return Run(rows, values)


# ------------------------------------------------------------------------------- log frames


def encode_frame(batch_id: int, run: Run) -> bytes:
    parts = _run_parts(run)
    crc = zlib.crc32(struct.pack("<q", batch_id))
    for part in parts:
        crc = zlib.crc32(part, crc)
    length = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
    return b"".join([FRAME.pack(_FRAME_MAGIC, length, batch_id, crc), *parts])


def decode_frames(data: bytes, where: str, *, tail: bool) -> tuple[list[tuple[int, Run]], int]:
    """The whole frames at the start of ``data`` and the length they take.

    With ``tail`` (the end of the log, where a crash may have cut a frame) a
    frame that is cut short or fails its CRC ends the log there; without it
    (bytes the metadata says were committed) it is corruption.
    """
    frames, pos = [], 0
    while pos < len(data):
        problem = None
        if len(data) - pos < FRAME.size:
            problem = f"{len(data) - pos} bytes at offset {pos} are too short for a frame header"
        else:
            magic, length, batch_id, crc = FRAME.unpack_from(data, pos)
            end = pos + FRAME.size + length
            if magic != _FRAME_MAGIC:
                problem = f"no frame starts at offset {pos}"
            elif end > len(data):
                problem = f"the frame at offset {pos} needs {length} bytes, only {len(data) - pos - FRAME.size} follow"
            else:
                payload = memoryview(data)[pos + FRAME.size : end]
                if zlib.crc32(payload, zlib.crc32(struct.pack("<q", batch_id))) != crc:
                    problem = f"the frame at offset {pos} fails its CRC"
        if problem is not None:
            if tail:
                break  # a torn tail: the batch it held was never committed
            raise CorruptStoreError(where, f"committed log bytes are damaged: {problem}")
        frames.append((batch_id, decode_run(payload, where)))
        pos = end
    return frames, pos


# ------------------------------------------------------------------------------- data files


@dataclass
class BlockRef:
    offset: int
    stored: int
    raw: int
    crc: int
    count: int


@dataclass
class FileIndex:
    width: int
    codec: str | None
    blocks: list[BlockRef]
    first_rows: np.ndarray  # (blocks, width): the first key of each block


def block_bounds(run: Run, block_size: int) -> list[tuple[int, int]]:
    """``run`` cut into blocks of about ``block_size`` bytes (at least one entry each)."""
    offsets = np.frombuffer(run.values.buffers()[1], np.int64, len(run) + 1, run.values.offset * 8)
    ends = np.cumsum(np.diff(offsets) + run.width + 8)
    bounds, start = [], 0
    while start < len(run):
        stop = int(np.searchsorted(ends, (ends[start - 1] if start else 0) + block_size, side="right"))
        stop = min(max(stop, start + 1), len(run))
        bounds.append((start, stop))
        start = stop
    return bounds


class DataFileBuilder:
    """The bytes of one data file, a block at a time: ``block`` for each, then ``finish`` for the index."""

    def __init__(self, width: int, codec: str | None) -> None:
        self.width, self.codec = width, codec
        self.size = 0
        self.count = 0
        self._refs: list[list[int]] = []
        self._firsts: list[str] = []

    def block(self, run: Run) -> bytes:
        raw = encode_run(run)
        stored = raw if self.codec is None else pa.compress(raw, self.codec, asbytes=True)
        self._refs.append([self.size, len(stored), len(raw), zlib.crc32(stored), len(run)])
        self._firsts.append(run.rows[0].tobytes().hex())
        self.size += len(stored)
        self.count += len(run)
        return stored

    @property
    def first_key_hex(self) -> str:
        """The file's first key (its first block's), as the metadata lists it."""
        return self._firsts[0]

    def index_bytes_per_block(self) -> int:
        """About what each block adds to the index (its first key in hex and its numbers)."""
        return 2 * self.width + 80

    def finish(self) -> bytes:
        index = json.dumps({"width": self.width, "codec": self.codec, "blocks": self._refs, "first": self._firsts})
        tail = index.encode() + _FOOTER.pack(len(index), zlib.crc32(index.encode()), _FILE_MAGIC)
        self.size += len(tail)
        return tail


def decode_index(tail: bytes, size: int, where: str, read: Any) -> FileIndex:
    """The index of a data file of ``size`` bytes from its last bytes (``read(start, end)`` fetches more)."""
    if len(tail) < _FOOTER.size:
        raise CorruptStoreError(where, f"{size} bytes are too few for a data file footer")
    length, crc, magic = _FOOTER.unpack_from(tail, len(tail) - _FOOTER.size)
    if magic != _FILE_MAGIC or length > size - _FOOTER.size:
        raise CorruptStoreError(where, "the data file footer is damaged (or the file was cut short)")
    index_start = size - _FOOTER.size - length
    have = size - len(tail)
    end = size - _FOOTER.size
    raw = tail[index_start - have : len(tail) - _FOOTER.size] if index_start >= have else read(index_start, end)
    if zlib.crc32(raw) != crc:
        raise CorruptStoreError(where, "the data file index fails its CRC")
    meta = json.loads(raw)
    width = meta["width"]
    first = np.frombuffer(bytes.fromhex("".join(meta["first"])), np.uint8).reshape(-1, width)
    return FileIndex(width, meta["codec"], [BlockRef(*ref) for ref in meta["blocks"]], first)


def decode_block(stored: bytes, ref: BlockRef, codec: str | None, where: str) -> Run:
    if len(stored) != ref.stored or zlib.crc32(stored) != ref.crc:
        raise CorruptStoreError(where, f"the block at offset {ref.offset} fails its CRC")
    raw = stored if codec is None else pa.decompress(stored, ref.raw, codec, asbytes=True)
    return decode_run(raw, where)
