"""The scanner: lists files and decides which are stable enough to read.

A file is stable once its size and mtime have stayed the same for ``settle`` seconds (a
writer is probably done): its mtime is that old, or the scans have seen the same size and
mtime for that long (an mtime ahead of this clock, from a writer whose clock is ahead).
Two scans moments apart that agree prove nothing. On a backend that keeps no modification
time (``memory://``) only the scans can tell: the size must stay the same ``settle`` seconds.
The others are *settling*, and the scanner says from when each can be stable, so that a
caller can list again then instead of after ``scan_interval``.
The scanner remembers only the previous scan's observations, never what was read:
that belongs to ``SplitState``, which travels in the stream's offsets.
"""

from __future__ import annotations

import posixpath
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterator, Mapping

import fsspec

from storage.splitter.compression import refusal
from storage.splitter.config import SplitterConfig
from storage.splitter.readers import UnreadableFileWarning


class UnsettledFileWarning(UserWarning):
    """A bounded run ended while a file it listed was still changing: the file was left for the next run."""


#: ``path -> (size, mtime)`` as observed by one scan.
Listing = Mapping[str, tuple[int, float]]


def _mtime(info: Mapping) -> float | None:
    """Modification time in epoch seconds from an fsspec ``info`` dict, whatever the backend calls it;
    ``None`` when it keeps none (``memory://`` keeps only ``created``)."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified"):
        seconds = _epoch_seconds(info.get(key))
        if seconds is not None:
            return seconds
    return None


def _epoch_seconds(value: object) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


@dataclass(frozen=True)
class Settling:
    """A listed file that may still be written: what the scan saw, and the clock time from which
    it counts as stable if it does not change."""

    size: int
    mtime: float
    stable_at: float


def _hidden(path: str) -> bool:
    """Whether the file or directory is hidden ('.git', '_temporary'): nothing in it is read."""
    return posixpath.basename(path).startswith((".", "_"))


class Scanner:
    """Lists the configured paths and keeps the files that are stable."""

    def __init__(self, config: SplitterConfig, fs: fsspec.AbstractFileSystem, roots: tuple[str, ...],
                 clock: Callable[[], float]) -> None:
        self._config = config
        self._fs = fs
        self._roots = roots
        self._clock = clock
        self._previous: dict[str, tuple[int, float]] = {}
        #: When a scan first saw each file's current size and mtime.
        self._since: dict[str, float] = {}
        self._only: frozenset[str] | None = None
        #: The files the last scan found not yet stable.
        self.settling: dict[str, Settling] = {}
        #: Refused files (``.lz4``, ``.snappy``, ``.zip``) already warned about (`_refuse`).
        self._refused: set[str] = set()

    @property
    def frozen(self) -> bool:
        """Whether the listing is fixed: a bounded run, which ends once these files are read."""
        return self._only is not None

    def freeze(self) -> None:
        """From now on list only the files seen so far (bounded reads ignore later files)."""
        if self._only is None:
            self._only = frozenset(self._previous)

    def _walk(self) -> Iterator[tuple[str, Mapping]]:
        """Every file below the roots, with its info; a root that is a file is yielded as it is."""
        for root in self._roots:
            if self._fs.isfile(root):
                yield root, self._fs.info(root)
                continue
            for path, info in self._find(root).items():
                relative = posixpath.relpath(path, root)
                hidden_dir = any(_hidden(part) for part in relative.split("/")[:-1])
                if info.get("islink") and info.get("type") != "file":
                    info = self._link_target(path)
                if info.get("type") == "file" and not hidden_dir:
                    yield path, info

    def _find(self, root: str) -> dict[str, Mapping]:
        """What ``root`` holds, and with ``recursive`` what its directories hold, by path.

        A filesystem with a listing of its own (an object store's flat one) raises on a listing
        error. ``fsspec``'s walk, behind the others, leaves out a directory it cannot list without
        a word, whatever ``on_error`` says for the directories below the first, so they are walked
        here, and such a directory warns, or raises with ``strict``; hidden ones are not entered.
        """
        if type(self._fs).find is not fsspec.AbstractFileSystem.find:
            return self._fs.find(root, maxdepth=None if self._config.recursive else 1, detail=True)
        found: dict[str, Mapping] = {}
        directories = [root]
        while directories:
            directory = directories.pop()
            try:
                listing = self._fs.ls(directory, detail=True)
            except FileNotFoundError:  # removed since its parent was listed: nothing to miss
                continue
            except OSError as err:
                self._unlistable(directory, err)
                continue
            for info in listing:
                path = info["name"].rstrip("/")
                if info["type"] != "directory":
                    found[path] = info
                elif self._config.recursive and path != directory and not _hidden(path):
                    directories.append(path)
        return dict(sorted(found.items()))

    def _refuse(self, path: str, why: str) -> None:
        """A file the splitter cannot read (``compression.REFUSED_SUFFIXES``): an error with ``strict``, else a
        warning the first time a scan finds it (it is never offered)."""
        refused = (f"compressed file {path!r} is not read: {why}; decompress it into the watched paths, or "
                   "recompress it as .gz, .bz2, .xz, .zst or .deflate, which are read decompressed")
        if self._config.strict:
            raise ValueError(refused)
        if path not in self._refused:
            self._refused.add(path)
            warnings.warn(refused, UnreadableFileWarning, stacklevel=4)

    def _unlistable(self, directory: str, err: OSError) -> None:
        if self._config.strict:
            raise OSError(f"cannot list directory {directory!r}: {err}") from err
        warnings.warn(f"skipped a directory that cannot be listed, {directory!r}: {err}; its files are not read",
                      UnreadableFileWarning, stacklevel=5)

    def _link_target(self, path: str) -> Mapping:
        """What a symbolic link found while walking points to (fsspec walks without following links,
        as 'other'); a broken link or a loop is nothing to read."""
        try:
            return self._fs.info(path)
        except OSError:
            return {}

    def scan(self) -> Listing:
        """List now; return the stable files (those still being written wait for a later scan)."""
        now = self._clock()
        observed: dict[str, tuple[int, float]] = {}
        undated: set[str] = set()  # no modification time: only the scans can tell they stopped changing
        for path, info in self._walk():
            named = path in self._roots
            if self._config.accepts(posixpath.basename(path), named) and (self._only is None or path in self._only):
                why = refusal(path)
                if why is not None:
                    self._refuse(path, why)
                    continue
                mtime = _mtime(info)
                if mtime is None:
                    undated.add(path)
                    mtime = _epoch_seconds(info.get("created")) or 0.0
                observed[path] = (int(info["size"]), mtime)
        stable: dict[str, tuple[int, float]] = {}
        since = {path: self._since[path] if self._previous.get(path) == seen else now
                 for path, seen in observed.items()}
        self.settling = {}
        for path, (size, mtime) in observed.items():
            unchanged_since = since[path] if path in undated else min(mtime, since[path])
            stable_at = unchanged_since + self._config.settle
            if stable_at <= now:
                stable[path] = (size, mtime)
            else:
                self.settling[path] = Settling(size, mtime, stable_at)
        self._previous, self._since = observed, since
        return stable
