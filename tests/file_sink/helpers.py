"""Shared test helpers: batches of rows and a listing of a sink's directory tree."""

from __future__ import annotations

import os

import pyarrow as pa


def batch(start: int, n: int, buckets: int = 1) -> pa.Table:
    """Rows ``start .. start+n-1`` with a bucket column ``k`` cycling over ``buckets`` values."""
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "k": [f"b{i % buckets}" for i in ids], "s": [f"row-{i}" for i in ids]})


def tree(root: str) -> dict[str, bytes]:
    """Every file below ``root`` except the commit records, by relative path."""
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            if not rel.startswith("_file_sink"):
                with open(path, "rb") as fh:
                    out[rel] = fh.read()
    return out
