"""Compressed files: which are read whole, decompressed, and which are refused.

A file whose name ends in a codec's suffix below is one standard compressed stream (or several
concatenated, as ``cat a.gz b.gz`` makes), as Flink's FileSource and Spark's text source read
them: not splittable, so the planner gives it one block covering the whole file, and its reader
decompresses it in memory and reads the decompressed bytes as one block of an uncompressed file
(records' offsets are offsets in the decompressed bytes). The suffix decides, in any case.
``.deflate`` is Hadoop's ``DefaultCodec``: zlib streams (what ``zlib.compress`` gives), which is what
``spark.read.text`` reads; raw deflate is refused by Spark too (``incorrect header check``).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from typing import Any, Callable

import pyarrow as pa

#: Suffix (any case) -> codec of the files read whole, decompressed.
WHOLE_FILE_CODECS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".deflate": "zlib"}
#: Suffix (any case) -> why a file so named is not read (a warning, or an error with ``strict``).
REFUSED_SUFFIXES = {
    ".lz4": "Hadoop's Lz4Codec frames its blocks its own way, not as the LZ4 frame format",
    ".snappy": "Hadoop's SnappyCodec frames its blocks its own way, not as a standard Snappy stream",
    ".zip": "a zip file is an archive of files, not one compressed stream",
}


def codec_of(path: str) -> str | None:
    """The codec of a file read whole (``gzip``, ``bzip2``, ``xz``, ``zstd``, ``zlib``) by its name; ``None``
    for a file read in blocks."""
    lower = path.lower()
    return next((codec for suffix, codec in WHOLE_FILE_CODECS.items() if lower.endswith(suffix)), None)


def refusal(path: str) -> str | None:
    """Why a file of this name is not read; ``None`` when it is."""
    lower = path.lower()
    return next((why for suffix, why in REFUSED_SUFFIXES.items() if lower.endswith(suffix)), None)


def decompress(data: bytes, path: str) -> bytes:
    """The decompressed bytes of the whole file ``path`` (its codec by name), every member or frame of it.

    A truncated or corrupt file, or bytes after the last stream that are not another one, raise
    ``OSError`` naming the file, never part of the content.
    """
    codec = codec_of(path)
    try:
        if codec == "gzip":
            return gzip.decompress(data)
        if codec == "bzip2":
            return _streams(data, bz2.BZ2Decompressor)
        if codec == "xz":
            return _streams(data, lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ))
        if codec == "zstd":
            return pa.CompressedInputStream(pa.BufferReader(data), "zstd").read() if data else b""
        if codec == "zlib":
            return _streams(data, zlib.decompressobj)
    except (EOFError, ValueError, OSError, zlib.error, lzma.LZMAError) as err:
        raise OSError(f"cannot decompress {codec} file {path!r}, truncated or corrupt: {err}") from err
    raise ValueError(f"{path!r} is not named as a compressed file ({sorted(WHOLE_FILE_CODECS)})")


def _streams(data: bytes, decompressor: Callable[[], Any]) -> bytes:
    """Streams one after the other, each by a new ``decompressor``: every byte must belong to one.
    ``bz2.decompress`` and ``lzma.decompress`` drop bytes after a stream that are not a whole stream
    without a word, and ``zlib.decompress`` stops after the first stream (Hadoop's DefaultCodec, as
    ``spark.read.text``, reads them all)."""
    parts, rest = [], data
    while rest:
        stream = decompressor()
        parts.append(stream.decompress(rest))
        if not stream.eof:
            raise EOFError(f"the file ({len(data)} bytes) ends inside a stream")
        rest = stream.unused_data
    return b"".join(parts)
