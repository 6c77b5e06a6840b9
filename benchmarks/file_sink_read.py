"""What typed reading back costs: ``FileSink.read()`` of JSON lines and CSV parts decoded with each part's recorded
schema, against the same parts decoded as their text gives them (no schema, as before version 5 of the records),
with Parquet's ``read()`` of the same rows beside them; and what naming a batch's schema costs a write call.

``.venv/bin/python benchmarks/file_sink_read.py [--rows N] [--repeat R]`` (no Spark). One bucket, one part per
format; each figure is the best of R reads. The rows: an int64 id, a timestamp, a float, a short string, a date.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from storage.file_sink import FileSink  # noqa: E402
from storage.file_sink.codec import decompress, unseal  # noqa: E402
from storage.file_sink.part_schemas import SchemaBook, widened  # noqa: E402


def rows(n: int) -> pd.DataFrame:
    seconds = pd.to_datetime(np.arange(n) * 10**9)
    return pd.DataFrame({"id": np.arange(n), "at": seconds, "x": np.random.default_rng(7).random(n),
                         "user": [f"user-{i % 1000}" for i in range(n)], "day": seconds.date})


def best(repeat: int, fn) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    frame = rows(args.rows)
    print(f"{args.rows:,} rows; best of {args.repeat} reads, seconds\n")
    print("| format | read() typed | the same parts untyped | typed / untyped | column types read back |")
    print("| --- | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as work:
        for fmt in ("jsonl", "csv", "parquet"):
            sink = FileSink(os.path.join(work, fmt), format=fmt)
            sink.write(frame)
            typed = best(args.repeat, sink.read)
            texts = [decompress(unseal(Path(p).read_bytes(), sink.key), sink.compression) for p in sink.finished_files()]
            if fmt == "parquet":
                untyped, ratio = "", ""
            else:
                fmt_of, parts = sink.file_format, texts
                plain = best(args.repeat, lambda fmt_of=fmt_of, parts=parts: [fmt_of.decode(t) for t in parts])
                untyped, ratio = f"{plain:.2f}", f"{typed / plain:.2f}"
            kinds = ", ".join(str(t) for t in sink.read().dtypes)
            print(f"| {fmt} | {typed:.2f} | {untyped} | {ratio} | {kinds} |")
    schema = pa.Table.from_pandas(frame.head(1), preserve_index=False).schema
    book = SchemaBook()
    key = book.name(schema)
    calls = 20_000
    start = time.perf_counter()
    for _ in range(calls):
        book.name(widened(book.schema(key), schema.remove_metadata()))
    print(f"\nnaming a batch's schema (widened with the part's): {(time.perf_counter() - start) / calls * 1e6:.1f} "
          "microseconds a write call")


if __name__ == "__main__":
    main()
