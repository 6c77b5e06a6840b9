"""What reading a compressed file costs the splitter, against the same lines uncompressed.

    .venv/bin/python benchmarks/splitter_compressed.py [--lines 1000000] [--streams 1,10000] [--repeat 3]

Writes one file of ``--lines`` lines (20 to 80 random letters) per codec, as one stream and as ``N`` streams
one after the other (as a per-write gzip appender or ``cat`` makes), and the same lines uncompressed;
prints the best of ``--repeat`` whole reads (``FileSplitter.read_lines()``, pandas) in seconds, and the
rate in MB of content per second. A compressed file is one block per segment (docs/splitter.md,
"Compressed files"), so its time is one task's; the uncompressed file is read in 32 MiB blocks here too.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import lzma
import os
import sys
import tempfile
import time
import zlib

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from storage import FileSplitter  # noqa: E402


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


CODECS = {".gz": lambda d: gzip.compress(d, 6), ".bz2": bz2.compress, ".xz": lzma.compress, ".zst": _zstd,
          ".deflate": zlib.compress}


def lines_of(n: int) -> bytes:
    """``n`` lines of random lowercase letters (compressing about as well as words do: about 1.7 to 1)."""
    rng = np.random.default_rng(0)
    ends = np.cumsum(rng.integers(21, 82, n))  # each line's length with its newline
    text = rng.integers(ord("a"), ord("z") + 1, int(ends[-1]), dtype=np.uint8)
    text[ends - 1] = ord("\n")
    return text.tobytes()


def streams_of(data: bytes, codec: str, streams: int) -> bytes:
    """``data`` as ``streams`` streams, each cut at a line end."""
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1
    cuts = [0, *(int(ends[len(ends) * i // streams - 1]) for i in range(1, streams)), len(data)]
    return b"".join(CODECS[codec](data[a:b]) for a, b in zip(cuts, cuts[1:]))


def best_read(path: str, repeat: int) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(repeat):
        began = time.perf_counter()
        rows = len(FileSplitter(path, settle=0, block_size=32 << 20).read_lines())
        best = min(best, time.perf_counter() - began)
    return best, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--streams", default="1,10000", help="stream counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = lines_of(args.lines)
    mb = len(data) / 1e6
    print(f"content: {args.lines:,} lines, {mb:.1f} MB; best of {args.repeat} whole reads (read_lines)\n")
    print("| file | streams | file MB | seconds | content MB/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        plain = os.path.join(folder, "plain.log")
        with open(plain, "wb") as out:
            out.write(data)
        seconds, rows = best_read(plain, args.repeat)
        assert rows == args.lines, (plain, rows)
        print(f"| uncompressed | - | {mb:.1f} | {seconds:.2f} | {mb / seconds:.0f} |")
        for codec in CODECS:
            for streams in (int(s) for s in args.streams.split(",")):
                path = os.path.join(folder, f"x{streams}.log{codec}")
                with open(path, "wb") as out:
                    out.write(streams_of(data, codec, streams))
                seconds, rows = best_read(path, args.repeat)
                assert rows == args.lines, (path, rows)
                size = os.path.getsize(path) / 1e6
                print(f"| {codec} | {streams:,} | {size:.1f} | {seconds:.2f} | {mb / seconds:.0f} |")
                os.remove(path)


if __name__ == "__main__":
    main()
