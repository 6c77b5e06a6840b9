"""The bytes on disk: runs as blocks, log frames, data files with their index.

A run (``keys.Run``) is stored as one self-describing block, read back without
copying (NumPy and Arrow views of the bytes)::

    header  magic "KVR1", count u32, width u16, flags u16, data length u64, pad to 24
    rows    count x width bytes (the encoded keys, sorted)
    offsets (count + 1) x int64 (value offsets)
    valid   count bytes, padded to 8 (only in log frames: 0 marks a delete)
    data    the value bytes

Each block has its own row width, so a long key widens only its own block.

A log frame is one committed batch: ``magic | payload length u64 | batch id
i64 | crc32 u32`` then the payload, the batch's runs as blocks one after
another (one per width class, see ``classes``). The magic is "KVW3": its
payload starts with the bucket's committed batch id before it (i64), which
recovery checks against the batch the log before it ends at, so a segment
missing from the middle of the log (deleted, emptied, an object lost) is
found, not replayed around. Earlier releases wrote "KVW1" (one block, the
only kind of frame before width classes) and "KVW2" (several), without it;
both are read. The CRC covers the batch id and the payload, so a frame cut
short or half-written by a crash is told from a whole one.

A data file is its blocks, each possibly compressed, then a JSON index (per
block: offset, stored and raw length, CRC32, count, and a key to find it by)
and a footer ``index length u64 | index crc32 u32 | magic``. Files of magic
"KVDATA01" have blocks all as wide as the file's longest key and index each
block by its first key, all at that width; files of "KVDATA02" have blocks at
their own widths and index each block by the shortest prefix of its first
key above the key before it (the empty key for the first block), so that the
index stays short when keys are long. Both are read.
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
from .keys import Run, decode, encode, widen

_BLOCK = struct.Struct("<4sIHHQ4x")
_BLOCK_MAGIC = b"KVR1"
_HAS_VALID = 1
FRAME = struct.Struct("<4sQqI")
_ONE_BLOCK_FRAME, _FRAME_MAGIC, _CHAINED_FRAME = b"KVW1", b"KVW2", b"KVW3"
_FRAME_MAGICS = (_ONE_BLOCK_FRAME, _FRAME_MAGIC, _CHAINED_FRAME)
_PREVIOUS = struct.Struct("<q")
_FOOTER = struct.Struct("<QI8s")
_OLD_FILE_MAGIC, _FILE_MAGIC = b"KVDATA01", b"KVDATA02"
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
    run, end = _decode_block_at(view, 0, where)
    if end != len(view):
        raise CorruptStoreError(where, f"a block's sections add up to {end} bytes, not {len(view)}")
    return run


def _decode_blocks(buf: memoryview, where: str) -> list[Run]:
    """The runs of blocks one after another, filling ``buf``."""
    runs, pos = [], 0
    while pos < len(buf):
        run, pos = _decode_block_at(buf, pos, where)
        runs.append(run)
    return runs


def _decode_block_at(view: memoryview, pos: int, where: str) -> tuple[Run, int]:
    """The run of the block at ``pos`` and where the block ends."""
    if len(view) - pos < _BLOCK.size:
        raise CorruptStoreError(where, f"a block of {len(view) - pos} bytes is shorter than its header")
    magic, n, width, flags, data_len = _BLOCK.unpack_from(view, pos)
    if magic != _BLOCK_MAGIC or width % 8:
        raise CorruptStoreError(where, "a block does not start with its header")
    rows_start = pos + _BLOCK.size
    rows_end = rows_start + n * width
    offsets_end = rows_end + (n + 1) * 8
    valid_end = offsets_end + (_pad8(n) if flags & _HAS_VALID else 0)
    end = valid_end + data_len
    if end > len(view):
        raise CorruptStoreError(where, f"a block's sections add up to {end - pos} bytes, only {len(view) - pos} are there")
    rows = np.frombuffer(view, np.uint8, n * width, rows_start).reshape(n, width)
    offsets = pa.py_buffer(view[rows_end:offsets_end])
    validity = None
    if flags & _HAS_VALID:
        valid = np.frombuffer(view, np.uint8, n, offsets_end).astype(bool)
        validity = pa.array(valid).buffers()[1]
    values = pa.Array.from_buffers(_VALUE, n, [validity, offsets, pa.py_buffer(view[valid_end:end])])
    return Run(rows, values), end


# ------------------------------------------------------------------------------- log frames


def encode_frame(batch_id: int, runs: list[Run], previous: int | None) -> bytes:
    """The frame of batch ``batch_id``, whose writes are ``runs``, committed after batch ``previous`` (-1 for none);
    ``previous=None`` writes the frame of earlier releases, which does not say."""
    parts = [part for run in runs for part in _run_parts(run)]
    if previous is not None:
        parts.insert(0, _PREVIOUS.pack(previous))
    magic = _CHAINED_FRAME if previous is not None else _ONE_BLOCK_FRAME if len(runs) == 1 else _FRAME_MAGIC
    crc = _crc_seed(magic, batch_id)
    for part in parts:
        crc = zlib.crc32(part, crc)
    length = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
    return b"".join([FRAME.pack(magic, length, batch_id, crc), *parts])


def _crc_seed(magic: bytes, batch_id: int) -> int:
    """The CRC of a frame's batch id, where its payload's CRC starts; a "KVW3" frame's covers its magic too, so a
    damaged magic that names another kind of frame fails the CRC rather than misread the payload."""
    packed = struct.pack("<q", batch_id)
    return zlib.crc32(magic + packed if magic == _CHAINED_FRAME else packed)


def decode_frames(
    data: bytes, where: str, *, tail: bool, after: int = -1
) -> tuple[list[tuple[int, int | None, list[Run]]], int]:
    """The whole frames at the start of ``data`` (batch id, the batch before it or None in a frame of an earlier
    release, runs) and the length they take.

    With ``tail`` (the end of the log, where a crash may have cut a frame) a
    frame that is cut short or fails its CRC ends the log there, if it is the
    last: when a whole frame of a later batch follows what it holds
    (``find_frame`` from ``_contents_end``), it is damage to committed bytes,
    not a torn append, and raises. Without
    ``tail`` (bytes the metadata says were committed) any bad frame is
    corruption. ``after`` is the last batch id before ``data``.
    """
    frames, pos, last = [], 0, after
    while pos < len(data):
        problem = None
        if len(data) - pos < FRAME.size:
            problem = f"{len(data) - pos} bytes at offset {pos} are too short for a frame header"
        else:
            magic, length, batch_id, crc = FRAME.unpack_from(data, pos)
            end = pos + FRAME.size + length
            if magic not in _FRAME_MAGICS:
                problem = f"no frame starts at offset {pos}"
            elif end > len(data):
                problem = f"the frame at offset {pos} needs {length} bytes, only {len(data) - pos - FRAME.size} follow"
            else:
                payload = memoryview(data)[pos + FRAME.size : end]
                if zlib.crc32(payload, _crc_seed(magic, batch_id)) != crc:
                    problem = f"the frame at offset {pos} fails its CRC"
        if problem is not None:
            if not tail:
                raise CorruptStoreError(where, f"committed log bytes are damaged: {problem}")
            found = find_frame(data, _contents_end(data, pos), last)
            if found is not None:
                raise CorruptStoreError(where, damaged_tail(problem, last, found, "in this segment"))
            break  # a torn tail: the batch it held was never committed
        previous = None
        if magic == _CHAINED_FRAME:
            if len(payload) < _PREVIOUS.size:
                raise CorruptStoreError(where, f"the frame at offset {pos} is too short for the batch before it")
            previous, payload = _PREVIOUS.unpack_from(payload)[0], payload[_PREVIOUS.size :]
        runs = [decode_run(payload, where)] if magic == _ONE_BLOCK_FRAME else _decode_blocks(payload, where)
        frames.append((batch_id, previous, runs))
        last = batch_id
        pos = end
    return frames, pos


def _contents_end(data: bytes, pos: int) -> int:
    """Where the search for a later frame past the bad frame at ``pos`` starts: past what that frame holds.

    Its blocks, walked from header to header (each states its sections' sizes), end where the next frame
    starts; a frame inside a value is inside a block and skipped. A block cut short by the end of ``data``
    means the frame runs to the end (a torn append, nothing after it here). The walk stops at the frame's
    declared end too, so a damaged block header that claims to reach past it does not hide the next frame,
    and a damaged length field (longer, or past the end) does not either, as the blocks end before it. A
    header without a frame's magic states no extent: the search starts at the next byte.
    """
    if len(data) - pos < FRAME.size or data[pos : pos + 4] not in _FRAME_MAGICS:
        return pos + 1
    declared_end = pos + FRAME.size + FRAME.unpack_from(data, pos)[1]
    at = pos + FRAME.size + (_PREVIOUS.size if data[pos : pos + 4] == _CHAINED_FRAME else 0)
    if at > len(data):
        return len(data)
    while at < min(declared_end, len(data)):
        if len(data) - at < _BLOCK.size:
            return len(data)
        magic, n, width, flags, data_len = _BLOCK.unpack_from(data, at)
        if magic != _BLOCK_MAGIC:
            return at
        end = at + _BLOCK.size + n * width + (n + 1) * 8 + (_pad8(n) if flags & _HAS_VALID else 0) + data_len
        if end > len(data):
            return min(declared_end, len(data))
        at = end
    return min(at, declared_end)


def find_frame(data: bytes, start: int, after: int) -> tuple[int, int] | None:
    """The offset and batch id of the first whole frame at or after ``start`` whose CRC holds and whose batch id is
    above ``after``, or None. Only read past a bad frame of the log's tail: a crash cuts short the last frame only,
    so a whole later frame means the bad one is damage. Bytes of a torn frame's payload that merely look like a
    frame header are not taken for one: the whole frame must pass its CRC."""
    view = memoryview(data)
    pos = start
    while True:
        hits = [i for i in (data.find(m, pos) for m in _FRAME_MAGICS) if i >= 0]
        if not hits:
            return None
        pos = min(hits)
        if len(data) - pos >= FRAME.size:
            magic, length, batch_id, crc = FRAME.unpack_from(data, pos)
            end = pos + FRAME.size + length
            if (batch_id > after and end <= len(data)
                    and zlib.crc32(view[pos + FRAME.size : end], _crc_seed(magic, batch_id)) == crc):
                return pos, batch_id
        pos += 1


def damaged_tail(problem: str, last: int, found: tuple[int, int], where_found: str) -> str:
    """The problem a CorruptStoreError states for a bad frame in the log's tail followed by a whole one."""
    at, batch_id = found
    return (
        f"the log is damaged: {problem}, yet a whole frame of batch {batch_id} follows "
        f"({where_found}, at offset {at}): a crash cuts short only the last frame, so this is damage to committed "
        f"batches after batch {last}, not a torn tail, and dropping it would lose them"
    )


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
    codec: str | None
    blocks: list[BlockRef]
    #: (blocks, width): the key each block is found by, at the width of the longest of them. Block ``i`` holds the
    #: keys from ``first_rows[i]`` up to (not including) ``first_rows[i + 1]``; the first is the file's first key
    #: (format 1) or the empty key (format 2).
    first_rows: np.ndarray
    #: The last batch the file holds, as its writer's metadata then stood (None in files of earlier releases).
    batch: int | None = None


class DataFileBuilder:
    """The bytes of one data file, a block at a time: ``block`` for each, then ``finish`` for the index."""

    def __init__(self, codec: str | None) -> None:
        self.codec = codec
        self.size = 0
        self.count = 0
        self._refs: list[list[int]] = []
        self._firsts: list[str] = []
        self._index_bytes = 0
        self.first_key_hex = ""  # the file's first key as a row, as the metadata lists it
        self._last = b""  # the last key of the last block written

    def block(self, run: Run) -> bytes:
        raw = encode_run(run)
        stored = raw if self.codec is None else pa.compress(raw, self.codec, asbytes=True)
        first = decode(run.rows[:1])[0].as_py()
        if not self._refs:
            self.first_key_hex = _row_hex(first)
        self._firsts.append(_row_hex(_separator(self._last, first) if self._refs else b""))
        self._index_bytes += _index_bytes(len(self._firsts[-1]) // 2)
        self._refs.append([self.size, len(stored), len(raw), zlib.crc32(stored), len(run)])
        self._last = decode(run.rows[-1:])[0].as_py()
        self.size += len(stored)
        self.count += len(run)
        return stored

    def index_bytes_with(self, block: Run) -> int:
        """About what the index takes with ``block`` added (its key is at most as wide as the block's rows)."""
        return self._index_bytes + _index_bytes(block.width)

    def finish(self, batch_id: int) -> bytes:
        """The index and footer; the index names ``batch_id``, the last batch the file holds (`Bucket._recover`)."""
        index = json.dumps({"codec": self.codec, "blocks": self._refs, "first": self._firsts, "batch": batch_id})
        tail = index.encode() + _FOOTER.pack(len(index), zlib.crc32(index.encode()), _FILE_MAGIC)
        self.size += len(tail)
        return tail


def _index_bytes(width: int) -> int:
    """About what one block adds to the index: its key in hex and its numbers."""
    return 2 * width + 80


def _row_hex(key: bytes) -> str:
    return encode(pa.array([key], _VALUE)).tobytes().hex()


def _separator(before: bytes, first: bytes) -> bytes:
    """The shortest prefix of ``first`` above ``before`` (a key below it): what a block is found by."""
    common = next((i for i, (a, b) in enumerate(zip(before, first)) if a != b), min(len(before), len(first)))
    return first[: common + 1]


def decode_index(tail: bytes, size: int, where: str, read: Any) -> FileIndex:
    """The index of a data file of ``size`` bytes from its last bytes (``read(start, end)`` fetches more)."""
    if len(tail) < _FOOTER.size:
        raise CorruptStoreError(where, f"{size} bytes are too few for a data file footer")
    length, crc, magic = _FOOTER.unpack_from(tail, len(tail) - _FOOTER.size)
    if magic not in (_FILE_MAGIC, _OLD_FILE_MAGIC) or length > size - _FOOTER.size:
        raise CorruptStoreError(where, "the data file footer is damaged (or the file was cut short)")
    index_start = size - _FOOTER.size - length
    have = size - len(tail)
    end = size - _FOOTER.size
    raw = tail[index_start - have : len(tail) - _FOOTER.size] if index_start >= have else read(index_start, end)
    if zlib.crc32(raw) != crc:
        raise CorruptStoreError(where, "the data file index fails its CRC")
    meta = json.loads(raw)
    firsts = [np.frombuffer(bytes.fromhex(first), np.uint8)[None, :] for first in meta["first"]]
    width = max(first.shape[1] for first in firsts)
    first_rows = np.concatenate([widen(first, width) for first in firsts])
    return FileIndex(meta["codec"], [BlockRef(*ref) for ref in meta["blocks"]], first_rows, meta.get("batch"))


def decode_block(stored: bytes, ref: BlockRef, codec: str | None, where: str) -> Run:
    if len(stored) != ref.stored or zlib.crc32(stored) != ref.crc:
        raise CorruptStoreError(where, f"the block at offset {ref.offset} fails its CRC")
    raw = stored if codec is None else pa.decompress(stored, ref.raw, codec, asbytes=True)
    return decode_run(raw, where)
