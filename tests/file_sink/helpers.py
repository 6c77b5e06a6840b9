"""Shared test helpers: batches of rows, a listing of a sink's directory tree, a filesystem that cannot append."""

from __future__ import annotations

import os

import fsspec
import pyarrow as pa
from fsspec.implementations.memory import MemoryFileSystem


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


class NoAppendFileSystem(MemoryFileSystem):
    """``noappend://``: an in-memory filesystem that, like an object store, cannot open a file for append."""

    protocol = ("noappend",)

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("noappend://"))

    def _open(self, path, mode="rb", *args, **kwargs):
        if "a" in mode:
            raise NotImplementedError(f"noappend:// cannot open {path} with mode {mode!r}")
        return super()._open(path, mode, *args, **kwargs)


fsspec.register_implementation("noappend", NoAppendFileSystem, clobber=True)
