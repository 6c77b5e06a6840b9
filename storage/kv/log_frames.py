"""A failed commit's log frame on disk: taken back (the segment cut back, the object deleted), and put back where
its writer finds it was taken over meanwhile (`bucket.Bucket._take_back`)."""

from __future__ import annotations

import os
from typing import Any, Callable


def cut_segment(handle: Any, path: str, committed_length: int, sync: Callable[[str], None]) -> None:
    """Close a log segment and cut it back, durably, to the frames committed before a failed append."""
    try:
        handle.close()  # may still write buffered bytes of the failed frame: they are cut off next
    except OSError:
        pass
    os.truncate(path, committed_length)
    sync(path)


def put_back(path: str, committed_length: int, frame: bytes, sync: Callable[[str], None]) -> None:
    """Write a frame taken back after a failed append where it was, durably: a new owner may have adopted it."""
    with open(path, "r+b") as handle:
        handle.seek(committed_length)
        handle.write(frame)
    sync(path)


def remove_object(fs: Any, path: str) -> None:
    """Delete the log object of a failed commit, which the object store may have stored all the same."""
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass
