"""Shared test helpers: batches of rows, a listing of a sink's directory tree, filesystems like object stores."""

from __future__ import annotations

import json
import os
from collections import Counter

import fsspec
import pyarrow as pa
from fsspec.implementations.memory import MemoryFileSystem


def batch(start: int, n: int, buckets: int = 1) -> pa.Table:
    """Rows ``start .. start+n-1`` with a bucket column ``k`` cycling over ``buckets`` values."""
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "k": [f"b{i % buckets}" for i in ids], "s": [f"row-{i}" for i in ids]})


def tree(root: str) -> dict[str, bytes]:
    """Every file below ``root`` except the sink's own (commit records, lease), by relative path."""
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            if "_file_sink" not in rel.split(os.sep):
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


class CountingFileSystem(NoAppendFileSystem):
    """``counting://``: ``noappend://`` that counts the calls made to it, by method (see ``counted_calls``).

    Only the caller's calls count, not those one method makes to another: each
    is one round trip on an object store.
    """

    protocol = ("counting",)
    calls: Counter[str] = Counter()
    _depth = 0

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("counting://"))


def _counted(name):
    inner = getattr(NoAppendFileSystem, name)

    def method(self, *args, **kwargs):
        if not self._depth:
            CountingFileSystem.calls[name] += 1
        self._depth += 1
        try:
            return inner(self, *args, **kwargs)
        finally:
            self._depth -= 1

    return method


for _name in ("exists", "info", "ls", "find", "makedirs", "open", "pipe_file", "cat_file", "mv", "rm_file"):
    setattr(CountingFileSystem, _name, _counted(_name))

fsspec.register_implementation("noappend", NoAppendFileSystem, clobber=True)
fsspec.register_implementation("counting", CountingFileSystem, clobber=True)


def counted_calls() -> Counter[str]:
    """The calls counted by ``counting://`` as registered last: this module is imported under two names
    (``file_sink.helpers`` by the tests, ``tests.file_sink.helpers`` by ``crash_writer.py``)."""
    return fsspec.get_filesystem_class("counting").calls


def as_version_4(path):
    """Rewrite the record at ``path`` as a release writing version 4 did: no schemas."""
    record = json.loads(path.read_text())
    del record["schemas"], record["manifest_file"]
    for part in record["open_parts"]:
        del part["schema"]
    record["finished"] = [entry[:3] for entry in record["finished"]]
    path.write_text(json.dumps({**record, "version": 4}))


def as_version_5(path):
    """Rewrite the record at ``path`` as a release writing version 5 did, its manifest named ``<number>.manifest``."""
    record = json.loads(path.read_text())
    if record["manifest_file"]:
        (path.parent / record["manifest_file"]).rename(path.parent / f"{record['manifest']:020d}.manifest")
    del record["manifest_file"]
    path.write_text(json.dumps({**record, "version": 5}))


def as_old_record(path, version, root):
    """Rewrite the record at ``path`` as releases writing ``version`` 1 or 2 did: absolute paths under ``root``."""
    record = json.loads(path.read_text())
    for name in ("sequence", "owner", "owners", "finished", "removed", "manifest", "chain_from", "schemas",
                 "manifest_file"):
        del record[name]  # added by versions 4 to 6
    for part in record["open_parts"]:
        del part["slot"], part["schema"]
        part["path"], part["final_path"] = f"{root}/{part['path']}", f"{root}/{part['final_path']}"
    record["finalize"] = [[f"{root}/{src}", f"{root}/{dst}"] for src, dst in record["finalize"]]
    if version == 1:
        del record["settings"]
    path.write_text(json.dumps({**record, "version": version}))
