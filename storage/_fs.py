"""Small fsspec helpers the storage sidecars share: durability on the local disk, atomic small writes."""

from __future__ import annotations

import os
import uuid
from typing import Any

from fsspec.core import split_protocol, strip_protocol


def protocols(fs: Any) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)


def is_local(fs: Any) -> bool:
    return "file" in protocols(fs) or "local" in protocols(fs)


def absolute_if_local(path: str) -> str:
    """``path`` as any process resolves it alike: a local one made absolute here. A Spark worker resolved a
    relative one in its own working directory (or the driver after a notebook's ``%cd``), and wrote elsewhere."""
    if split_protocol(path)[0] not in (None, "file", "local"):
        return path
    return strip_protocol(path)


def fsync(path: str) -> None:
    """Make a local file's data, or a local directory's entries, durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def put_atomic(fs: Any, path: str, data: bytes, *, durable: bool = True) -> None:
    """Write a whole small file so that readers see all of it or nothing.

    Locally: a temporary name, fsync, rename, fsync of the directory. Other
    filesystems (object stores) publish an upload whole, so it is written in place.
    """
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    directory, name = path.rsplit("/", 1)
    temp = f"{directory}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
    with open(temp, "wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temp, path)
    if durable:
        fsync(directory)
