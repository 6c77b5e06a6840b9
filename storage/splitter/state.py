"""What has been handed out: the splitter's only durable state.

Per remembered file it keeps the segment being read and how far blocks were handed
out, plus a modification-time watermark: the newest mtime of any fully handed-out
file, but never later than the reader's clock at the latest hand-out (capped again at every
hand-out, never moved back), so a file dated in the future by a writer whose clock is ahead
moves it no further than a file written at that moment would. Finished files older than
``watermark - slack`` are forgotten, and unknown files that old are never offered, so memory
stays bounded on a directory that grows forever.
The state is a small JSON value, stored in every stream offset.

A compressed file (``compression``) is handed out as any file: its first segment, then on growth a
segment of its new bytes, each one block (``metadata``) that delivers the streams ending in it; one
that shrinks is taken as rewritten and read again from byte 0.

A hand-out costs time in the blocks it hands out (and a pass over each new listing), not in
the files remembered: beside the durable state, ``SplitState`` keeps indexes of it, made
again whenever a state is made (restored from an offset included), and a queue of the listed
files that may have new bytes, made once per listing. None of them is written out.
"""

from __future__ import annotations

import heapq
import numbers
from dataclasses import dataclass, field
from typing import Any

from storage.splitter.metadata import BlockMetadata, FileMetadata
from storage.splitter.scanner import Listing


@dataclass(frozen=True)
class Entry:
    """A remembered file: segment ``[segment_start, segment_end)`` handed out up to ``emitted``."""

    mtime: float
    segment_start: int
    segment_end: int
    emitted: int

    @property
    def done(self) -> bool:
        return self.emitted >= self.segment_end


class PathQueue:
    """Paths by a number, smallest first (ties by path), each path queued at most once; a queued
    path's number can change, or the path go.

    A heap whose items are checked against ``keys`` when they come to the top: changing or
    removing a path leaves its old item behind, and the heap is rebuilt once those are the
    majority, so memory stays proportional to the paths queued.
    """

    def __init__(self, keys: dict[str, float] | None = None) -> None:
        self._keys: dict[str, float] = {} if keys is None else keys
        self._heap: list[tuple[float, str]] = []
        self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(key, path) for path, key in self._keys.items()]
        heapq.heapify(self._heap)

    def put(self, path: str, key: float) -> None:
        if self._keys.get(path) == key:
            return
        self._keys[path] = key
        heapq.heappush(self._heap, (key, path))
        if len(self._heap) > 2 * len(self._keys) + 64:
            self._rebuild()

    def discard(self, path: str) -> None:
        self._keys.pop(path, None)

    def first(self) -> str | None:
        """The path of the smallest number, left queued; ``None`` when none is."""
        while self._heap and self._keys.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][1] if self._heap else None

    def pop(self) -> str | None:
        path = self.first()
        if path is not None:
            heapq.heappop(self._heap)
            del self._keys[path]
        return path


@dataclass
class SplitState:
    """Remembered files and the mtime watermark; ``to_json``/``from_json`` round-trip exactly.

    ``files`` is changed by ``take`` only, which keeps the indexes beside it up to date.
    """

    files: dict[str, Entry] = field(default_factory=dict)
    watermark: float | None = None
    #: Paths of the segments still being handed out: few, as a ``take`` stops inside one segment at most.
    _unfinished: set[str] = field(init=False, repr=False, compare=False)
    #: Finished files by mtime, oldest first (to forget) and newest first (to move the watermark).
    _oldest_done: PathQueue = field(init=False, repr=False, compare=False)
    _newest_done: PathQueue = field(init=False, repr=False, compare=False)
    #: The listing the queue below was made from, and the slack it left out forgotten files by.
    _listing: Listing | None = field(init=False, repr=False, compare=False)
    _slack: float | None = field(init=False, repr=False, compare=False)
    #: Listed paths that may have bytes not yet offered, by listed mtime: every such path is queued
    #: (``_requeue`` puts it back whenever its entry changes), some queued ones no longer have any.
    _fresh: PathQueue = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        done = {path: entry.mtime for path, entry in self.files.items() if entry.done}
        self._unfinished = {path for path, entry in self.files.items() if not entry.done}
        self._oldest_done = PathQueue(done)
        self._newest_done = PathQueue({path: -mtime for path, mtime in done.items()})
        self._listing, self._slack, self._fresh = None, None, PathQueue()

    def forgotten(self, mtime: float, slack: float | None) -> bool:
        """Whether an unknown file with this mtime counts as already read (below the watermark)."""
        return slack is not None and self.watermark is not None and mtime < self.watermark - slack

    def _new_bytes_start(self, path: str, size: int) -> int | None:
        """Where the bytes not yet offered of a listed file of ``size`` start; ``None`` when there
        are none, or when its remembered segment is still being handed out (``take`` does that first)."""
        entry = self.files.get(path)
        if entry is None:
            start = 0
        elif not entry.done or size == entry.segment_end:
            return None
        else:  # grew: only the new bytes; shrank: rewritten, read it again
            start = entry.segment_end if size > entry.segment_end else 0
        return start if size > start else None

    def offers(self, path: str, size: int, mtime: float, slack: float | None) -> bool:
        """Whether a listed file of this size and mtime has blocks to hand out once it is stable."""
        if path not in self.files and self.forgotten(mtime, slack):
            return False
        return self._new_bytes_start(path, size) is not None

    def take(self, stable: Listing, block_size: int, limit: int | None, slack: float | None,
             now: float, changing: Listing | None = None) -> list[BlockMetadata]:
        """Hand out at most ``limit`` blocks (all when ``None``), lazily per file, and record them;
        ``now`` is the reader's clock, beyond which the watermark does not move.

        Order is deterministic: unfinished segments first, then new ones by (mtime, path).
        ``stable`` must not change once given: a new listing is a new mapping, and only a new
        one (or another ``slack``) is gone through whole, to queue its files with new bytes.
        ``changing`` are the files the same listing found still settling: never handed out, but
        one seen smaller than its unfinished segment ends that segment too (``_abandon_shrunk``).
        """
        if stable is not self._listing or slack != self._slack:
            self._queue_listing(stable, slack, changing or {})
        self._abandon_shrunk(stable, changing or {})
        taken: list[BlockMetadata] = []
        for path in sorted(self._unfinished, key=lambda p: (self.files[p].mtime, p)):
            entry = self.files[path]
            meta = FileMetadata(path, entry.segment_end, entry.mtime, entry.segment_start, block_size)
            if self._hand_out(meta, entry.emitted, taken, limit):
                break
        else:  # every unfinished segment went whole: new bytes next
            while (limit is None or len(taken) < limit) and (candidate := self._fresh.pop()) is not None:
                size, mtime = stable[candidate]
                start = self._new_bytes_start(candidate, size)
                if start is None or (candidate not in self.files and self.forgotten(mtime, slack)):
                    continue
                self._hand_out(FileMetadata(candidate, size, mtime, start, block_size), start, taken, limit)
        self._advance(slack, now)
        return taken

    def _queue_listing(self, stable: Listing, slack: float | None, changing: Listing) -> None:
        self._listing, self._slack = stable, slack
        self._restart_shrunk(stable, changing)
        self._fresh = PathQueue({path: mtime for path, (size, mtime) in stable.items()
                                 if self._new_bytes_start(path, size) is not None
                                 and not (path not in self.files and self.forgotten(mtime, slack))})

    def _restart_shrunk(self, stable: Listing, changing: Listing) -> None:
        """Remember a finished file listed smaller than its segment (rewritten, or truncated as logrotate's
        ``copytruncate`` does) as read to byte 0 of nothing, ``[0, 0)``: whatever it holds when next handed out is
        read from byte 0. (Before, the state kept the old size unless the file was handed out in the listing that
        saw it smaller: a file truncated to 0 and written again was read from the old size on, or not at all.)"""
        for listing in (stable, changing):
            for path, (size, _) in listing.items():
                entry = self.files.get(path)
                if entry is not None and entry.done and size < entry.segment_end:
                    self._remember(path, Entry(entry.mtime, 0, 0, 0))

    def _abandon_shrunk(self, stable: Listing, changing: Listing) -> None:
        """End the unfinished segments of files listed smaller than the segment's end (rewritten): the
        rest would read the new content at the old offsets, then the new content again from byte 0.
        Such a segment becomes ``[0, 0)``, finished as if read to its end, so every byte the file holds
        is new: read from byte 0 once stable. A file not listed (deleted, or in a directory that
        could not be listed) keeps its segment: the listing cannot tell which."""
        for path in list(self._unfinished):
            listed = stable.get(path) or changing.get(path)
            if listed is not None and listed[0] < self.files[path].segment_end:
                self._remember(path, Entry(self.files[path].mtime, 0, 0, 0))

    def _hand_out(self, meta: FileMetadata, resume: int, taken: list[BlockMetadata], limit: int | None) -> bool:
        """Append the segment's blocks from ``resume`` to ``taken`` up to ``limit`` and record how far
        they went; whether the limit is reached."""
        before = len(taken)
        for block in meta.blocks(resume):
            if limit is not None and len(taken) >= limit:
                break
            taken.append(block)
        if len(taken) > before:
            self._remember(meta.path, Entry(meta.mtime, meta.segment_start, meta.length, taken[-1].end))
        return limit is not None and len(taken) >= limit

    def _remember(self, path: str, entry: Entry) -> None:
        self.files[path] = entry
        if entry.done:
            self._unfinished.discard(path)
            self._oldest_done.put(path, entry.mtime)
            self._newest_done.put(path, -entry.mtime)
        else:
            self._unfinished.add(path)
            self._oldest_done.discard(path)
            self._newest_done.discard(path)
        self._requeue(path)

    def _requeue(self, path: str) -> None:
        """Queue a listed file whose entry changed if that left it bytes to offer (its segment finished
        while the listing shows it grown or rewritten, or it was forgotten)."""
        listed = self._listing.get(path) if self._listing is not None else None
        if listed is not None and self._new_bytes_start(path, listed[0]) is not None:
            self._fresh.put(path, listed[1])

    def _advance(self, slack: float | None, now: float) -> None:
        newest = self._newest_done.first()
        if newest is not None:
            reached = min(self.files[newest].mtime, now)
            self.watermark = reached if self.watermark is None else max(reached, self.watermark)
        if slack is not None and self.watermark is not None:
            horizon = self.watermark - slack
            while (oldest := self._oldest_done.first()) is not None and self.files[oldest].mtime < horizon:
                del self.files[oldest]
                self._oldest_done.discard(oldest)
                self._newest_done.discard(oldest)
                self._requeue(oldest)

    def to_json(self) -> dict[str, Any]:
        files = {p: [e.mtime, e.segment_start, e.segment_end, e.emitted] for p, e in sorted(self.files.items())}
        return {"files": files, "watermark": self.watermark}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "SplitState":
        """The state ``to_json`` wrote; a ValueError naming the part that no state holds (a damaged one read
        lines from inside others, skipped some, or none at all without a word)."""
        files, watermark = value["files"], value["watermark"]
        if not isinstance(files, dict):
            raise ValueError(f"'files' is a {type(files).__name__}, not a dict of path to entry")
        if watermark is not None and not _finite(watermark):
            raise ValueError(f"'watermark' is {watermark!r}, not None or a finite number of seconds")
        return cls({path: _entry(path, entry) for path, entry in files.items()}, watermark)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value - value == 0


def _entry(path: Any, value: Any) -> Entry:
    """The entry of ``path`` as ``to_json`` wrote it: [mtime, segment_start, segment_end, emitted], where
    0 <= segment_start <= emitted <= segment_end."""
    fields = list(value) if isinstance(value, (list, tuple)) else []
    offsets = fields[1:]
    whole = all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in offsets)
    if not isinstance(path, str) or len(fields) != 4 or not _finite(fields[0]) or not whole \
            or not 0 <= offsets[0] <= offsets[2] <= offsets[1]:
        raise ValueError(f"file {path!r} has entry {value!r}, not [mtime, segment_start, segment_end, emitted] with "
                         "0 <= segment_start <= emitted <= segment_end")
    return Entry(float(fields[0]), *map(int, offsets))
