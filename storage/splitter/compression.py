"""Compressed files: which are read decompressed, stream by stream, and which are refused.

A file whose name ends in a codec's suffix below is a sequence of standard compressed streams (gzip
members, bzip2 or xz streams, zstandard frames, zlib streams: one, or several concatenated as ``cat a.gz
b.gz`` makes), as Flink's FileSource and Spark's text source read them: not splittable, so the planner
gives each segment of it one block (``metadata``). A segment ``[start, end)`` delivers the streams whose
last byte is in it: its reader decompresses bytes ``[0, end)`` stream by stream (``segment_content``) and
keeps those streams' content, read as a block of an uncompressed file (records' offsets are offsets in
the decompressed content of the whole file). Bytes that end inside a stream (a file still being
written) leave that stream to the segment that will hold its end. The suffix decides, in any case.
``.deflate`` is Hadoop's ``DefaultCodec``: zlib streams (what ``zlib.compress`` gives), which is what
``spark.read.text`` reads; raw deflate is refused by Spark too (``incorrect header check``).

Decompressing takes time linear in the bytes: each stream is fed to its own decompressor in chunks of
``CHUNK_BYTES``, so what is left over after a stream (``unused_data``) is at most a chunk, never a copy of
the rest of the file (``gzip.decompress`` copies the rest once per member: quadratic in the members).
"""

from __future__ import annotations

import bz2
import contextlib
import lzma
import zlib
from typing import Any, Callable, Iterator, NamedTuple

import pyarrow as pa

#: Suffix (any case) -> codec of the files read decompressed, stream by stream.
WHOLE_FILE_CODECS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".deflate": "zlib"}
#: Suffix (any case) -> why a file so named is not read (a warning, or an error with ``strict``).
REFUSED_SUFFIXES = {
    ".lz4": "Hadoop's Lz4Codec frames its blocks its own way, not as the LZ4 frame format",
    ".snappy": "Hadoop's SnappyCodec frames its blocks its own way, not as a standard Snappy stream",
    ".zip": "a zip file is an archive of files, not one compressed stream",
}


def codec_of(path: str) -> str | None:
    """The codec of a file read decompressed (``gzip``, ``bzip2``, ``xz``, ``zstd``, ``zlib``) by its name; ``None``
    for a file read in blocks."""
    lower = path.lower()
    return next((codec for suffix, codec in WHOLE_FILE_CODECS.items() if lower.endswith(suffix)), None)


def refusal(path: str) -> str | None:
    """Why a file of this name is not read; ``None`` when it is."""
    lower = path.lower()
    return next((why for suffix, why in REFUSED_SUFFIXES.items() if lower.endswith(suffix)), None)


#: Compressed bytes given to a decompressor at a time.
CHUNK_BYTES = 1 << 20


class Segment(NamedTuple):
    """What a segment of a compressed file delivers: ``content``, the decompressed streams that end in
    it, which start at byte ``before`` of the file's decompressed content; ``incomplete`` is where the
    stream that the bytes end inside starts (``None`` when they end at a stream's end)."""

    before: int
    content: bytes
    incomplete: int | None


class _EndsInsideStream(Exception):
    def __init__(self, start: int) -> None:
        super().__init__(start)
        self.start = start


def segment_content(data: bytes, path: str, start: int) -> Segment:
    """The streams of ``data`` (bytes ``[0, end)`` of the compressed file ``path``, its codec by name)
    whose end offset is in ``(start, end]``, decompressed, and the decompressed length of those before.

    Bytes that end inside a stream are no error (the file may still be written): that stream is left
    out and its start given as ``incomplete``. A corrupt stream (bad magic, a failed check), or bytes
    after a stream that are neither another stream nor allowed padding (zero bytes after a gzip member,
    zero bytes in fours after an xz stream, as ``gzip -d`` and ``xz -d`` accept them), raise ``OSError``
    naming the file, never part of the content.
    """
    before, parts, incomplete = 0, [], None
    try:
        for end, content in _file_streams(data, path):
            if end <= start:
                before += len(content)
            else:
                parts.append(content)
    except _EndsInsideStream as inside:
        incomplete = inside.start
    return Segment(before, b"".join(parts), incomplete)


def complete_streams(data: bytes, path: str) -> Iterator[bytes]:
    """The decompressed content of each whole stream of ``data`` (bytes ``[0, n)`` of the compressed file
    ``path``), in order and one at a time, so a caller that has seen enough decompresses no more; it
    stops where the bytes end inside a stream. A corrupt stream raises ``OSError`` naming the file."""
    with contextlib.suppress(_EndsInsideStream):
        for _, content in _file_streams(data, path):
            yield content


def _file_streams(data: bytes, path: str) -> Iterator[tuple[int, bytes]]:
    """`_streams` of the file ``path`` (its codec by name), a corrupt stream raised as ``OSError`` naming the file."""
    codec = codec_of(path)
    if codec is None:
        raise ValueError(f"{path!r} is not named as a compressed file ({sorted(WHOLE_FILE_CODECS)})")
    try:
        yield from _streams(memoryview(data), codec)
    except (EOFError, ValueError, OSError, zlib.error, lzma.LZMAError, pa.ArrowException) as err:
        raise OSError(f"cannot decompress {codec} file {path!r}, corrupt: {err}") from err


def decompress(data: bytes, path: str) -> bytes:
    """The decompressed content of the whole compressed file ``data``; ``OSError`` when it is corrupt or
    ends inside a stream."""
    segment = segment_content(data, path, -1)
    if segment.incomplete is not None:
        raise OSError(f"cannot decompress {codec_of(path)} file {path!r}: it ends inside a stream, at byte "
                      f"{len(data)} (the stream starts at byte {segment.incomplete})")
    return segment.content


_DECOMPRESSORS: dict[str, Callable[[], Any]] = {
    "gzip": lambda: zlib.decompressobj(wbits=31),
    "zlib": zlib.decompressobj,
    "bzip2": bz2.BZ2Decompressor,
    "xz": lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ),
}


def _streams(data: memoryview, codec: str) -> Iterator[tuple[int, bytes]]:
    """``(end offset, decompressed content)`` of each stream of ``data``, in order; every byte belongs to
    a stream or to padding allowed between streams. Raises ``_EndsInsideStream`` when the bytes end inside one."""
    if codec == "zstd":
        yield from _zstd_frames(data)
        return
    pos = 0
    while True:
        pos = _padding_end(data, pos, codec) if pos else pos
        if pos >= len(data):
            return
        stream, start, parts = _DECOMPRESSORS[codec](), pos, []
        while not stream.eof:
            if pos >= len(data):
                raise _EndsInsideStream(start)
            chunk = data[pos:pos + CHUNK_BYTES]
            parts.append(stream.decompress(chunk))
            pos += len(chunk)
        pos -= len(stream.unused_data)
        yield pos, b"".join(parts)


def _padding_end(data: memoryview, pos: int, codec: str) -> int:
    """Where the zero bytes from ``pos`` (after a stream) end: gzip and xz allow them (xz in fours)."""
    if codec not in ("gzip", "xz"):
        return pos
    end = pos
    while end < len(data) and data[end] == 0:
        end += 1
    if codec == "xz" and (end - pos) % 4:
        raise ValueError(f"{end - pos} zero bytes at byte {pos} after a stream: xz stream padding is in fours")
    return end


_ZSTD_MAGIC = 0xFD2FB528


def _zstd_frames(data: memoryview) -> Iterator[tuple[int, bytes]]:
    """Zstandard frames: their bounds read from the frame and block headers (RFC 8878), each frame
    decompressed by Arrow on its own; skippable frames give nothing."""
    pos = 0
    while pos < len(data):
        start = pos
        magic = _int(data, pos, 4, start)
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
            pos += 8 + _int(data, pos + 4, 4, start)
            if pos > len(data):
                raise _EndsInsideStream(start)
            continue
        if magic != _ZSTD_MAGIC:
            raise ValueError(f"no zstandard frame at byte {pos} (magic {magic:#010x})")
        descriptor = _int(data, pos + 4, 1, start)
        single = descriptor >> 5 & 1
        pos += 5 + (1 - single) + (0, 1, 2, 4)[descriptor & 3] + (single, 2, 4, 8)[descriptor >> 6]
        last = False
        while not last:
            header = _int(data, pos, 3, start)
            last, kind, size = bool(header & 1), header >> 1 & 3, header >> 3
            if kind == 3:
                raise ValueError(f"reserved zstandard block type at byte {pos}")
            pos += 3 + (1 if kind == 1 else size)
        pos += 4 * (descriptor >> 2 & 1)  # the content checksum
        if pos > len(data):
            raise _EndsInsideStream(start)
        frame = pa.py_buffer(data[start:pos])
        yield pos, pa.CompressedInputStream(pa.BufferReader(frame), "zstd").read()


def _int(data: memoryview, pos: int, size: int, start: int) -> int:
    """The little-endian integer of ``size`` bytes at ``pos``; the bytes ending before it end inside the
    frame that starts at ``start``."""
    if pos + size > len(data):
        raise _EndsInsideStream(start)
    return int.from_bytes(data[pos:pos + size], "little")
