"""Compression and encryption of part files, one segment per flush.

Every flush of a row-format part appends one self-contained segment: a
compressed member (gzip, zstd, ... members concatenate into a valid stream),
then, with a key, one AES-GCM record. Segments are what make truncation safe:
the committed length of a part always ends on a segment boundary.

Encrypted record: ``flag:u8 | length:u32 | nonce:12 | ciphertext+tag``. The
associated data binds the segment's index and its flag, and a file is valid
only if its last record carries the final flag: a reordered, altered, dropped
or truncated segment fails authentication, so no unauthenticated plaintext is
ever returned.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

import pyarrow as pa
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import CorruptPartError

# Codec name -> file extension, for codecs pyarrow can stream.
ROW_CODECS: dict[str, str] = {"gzip": ".gz", "bz2": ".bz2", "zstd": ".zst", "lz4": ".lz4", "brotli": ".br"}
AES_KEY_BYTES = (16, 24, 32)
_HEADER = struct.Struct(">BI")
_NONCE = 12
_AAD = struct.Struct(">8sQB")
_MAGIC = b"fsinkgcm"
FINAL, MORE = 1, 0


def key_fingerprint(key: bytes | None) -> str | None:
    """A keyed hash of a constant: tells keys apart in the commit record without revealing them."""
    if key is None:
        return None
    return hmac.new(key, b"storage.file_sink key fingerprint", hashlib.sha256).hexdigest()[:16]


def compress(data: bytes, codec: str | None) -> bytes:
    """One independently decodable compressed member of ``data``."""
    if codec is None:
        return data
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, codec) as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


def decompress(data: bytes, codec: str | None) -> bytes:
    """All members of a file, decompressed and concatenated."""
    if codec is None or not data:
        return data
    return pa.CompressedInputStream(pa.py_buffer(data), codec).read()


def seal(plain: bytes, key: bytes | None, index: int, final: bool) -> bytes:
    """The on-disk form of segment number ``index``; plaintext when there is no key."""
    if key is None:
        return plain
    flag = FINAL if final else MORE
    nonce = os.urandom(_NONCE)
    sealed = AESGCM(key).encrypt(nonce, plain, _AAD.pack(_MAGIC, index, flag))
    return _HEADER.pack(flag, len(sealed)) + nonce + sealed


def unseal(data: bytes, key: bytes | None, finished: bool = True) -> bytes:
    """The plaintext of a file, after every segment is authenticated; a finished one must end with its final
    segment, an in-progress one has none yet."""
    if key is None:
        return data
    aead, pos, index, plain, last_flag = AESGCM(key), 0, 0, [], MORE
    while pos < len(data):
        if last_flag == FINAL:
            raise CorruptPartError(f"data follows the final segment at byte {pos}")
        if len(data) - pos < _HEADER.size + _NONCE:
            raise CorruptPartError(f"truncated segment header at byte {pos}")
        flag, length = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size + _NONCE
        if start + length > len(data):
            raise CorruptPartError(f"segment {index} at byte {pos} is truncated")
        nonce = data[pos + _HEADER.size : start]
        try:
            plain.append(aead.decrypt(nonce, data[start : start + length], _AAD.pack(_MAGIC, index, flag)))
        except InvalidTag as exc:
            raise CorruptPartError(f"segment {index} at byte {pos} failed authentication") from exc
        pos, index, last_flag = start + length, index + 1, flag
    if finished and last_flag != FINAL:
        raise CorruptPartError("file ends without its final segment: it was truncated")
    return b"".join(plain)
