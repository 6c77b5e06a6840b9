"""Ways to find the line ends of one 4 MiB piece in Python, against what ``chunk_batches`` does.

    .venv/bin/python benchmarks/splitter_newline_search.py [--repeat 100]

The newline search is the largest share of the splitter's Python time (docs/splitter.md, "Speed").
Prints milliseconds per piece (lines of 20 to 120 bytes, about 60,000 per piece) for the whole
``_chunk_piece`` and for each search; every search is checked to find the same line ends.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from storage.splitter.readers import CHUNK_BYTES, PIECE_BYTES, _chunk_piece  # noqa: E402


def numpy_flatnonzero(data: bytes) -> np.ndarray:
    """What ``_chunk_piece`` does."""
    return np.flatnonzero(np.frombuffer(data, np.uint8) == 10)


def two_level(data: bytes) -> np.ndarray:
    """Words of 8 bytes holding a newline first, then the bytes within those words."""
    hits = (np.frombuffer(data, np.uint8) == 10).view(np.uint64)
    words = np.flatnonzero(hits)
    within = np.flatnonzero(hits[words].view(np.uint8))
    return (words[within >> 3] << 3) | (within & 7)


def arrow_indices_nonzero(data: bytes) -> np.ndarray:
    view = pa.Array.from_buffers(pa.uint8(), len(data), [None, pa.py_buffer(data)])
    return pc.indices_nonzero(pc.equal(view, 10)).to_numpy().astype(np.int64)


def bytes_split(data: bytes) -> np.ndarray:
    parts = data.split(b"\n")
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    return np.cumsum(lengths + 1)[:-1] - 1


def mask_indexing(data: bytes) -> np.ndarray:
    return np.arange(len(data), dtype=np.int64)[np.frombuffer(data, np.uint8) == 10]


SEARCHES: dict[str, Callable[[bytes], np.ndarray]] = {
    "numpy flatnonzero (used)": numpy_flatnonzero, "two-level, 8-byte words": two_level,
    "Arrow indices_nonzero": arrow_indices_nonzero, "bytes.split + lengths": bytes_split,
    "boolean-mask indexing": mask_indexing,
}


def ms_per_call(fn: Callable[[], object], repeat: int) -> float:
    fn()
    begin = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - begin) / repeat * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    lines = b"\n".join(b"x" * int(n) for n in rng.integers(20, 121, PIECE_BYTES // 50))
    data = lines[: lines.rfind(b"\n", 0, PIECE_BYTES - 8) + 1]
    data = data[: len(data) // 8 * 8]  # whole words, for the two-level search
    expected = numpy_flatnonzero(data)
    print(f"{len(data):,} bytes, {len(expected):,} line ends")
    piece = ms_per_call(lambda: _chunk_piece("p", 0, 0, data, len(data), CHUNK_BYTES), args.repeat)
    print(f"| whole _chunk_piece | {piece:.2f} ms |")
    for name, search in SEARCHES.items():
        assert np.array_equal(search(data), expected), name
        print(f"| {name} | {ms_per_call(lambda search=search: search(data), args.repeat):.2f} ms |")


if __name__ == "__main__":
    main()
