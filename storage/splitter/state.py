"""What has been handed out: the splitter's only durable state.

Per remembered file it keeps the segment being read and how far blocks were handed
out, plus a modification-time watermark: the newest mtime of any fully handed-out
file, but never later than the reader's clock when it was handed out (a file dated in the
future by a writer whose clock is ahead would otherwise make honest files after it look
read). Finished files older than ``watermark - slack`` are forgotten, and unknown files
that old are never offered, so memory stays bounded on a directory that grows forever.
The state is a small JSON value, stored in every stream offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

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


@dataclass
class SplitState:
    """Remembered files and the mtime watermark; ``to_json``/``from_json`` round-trip exactly."""

    files: dict[str, Entry] = field(default_factory=dict)
    watermark: float | None = None

    def forgotten(self, mtime: float, slack: float | None) -> bool:
        """Whether an unknown file with this mtime counts as already read (below the watermark)."""
        return slack is not None and self.watermark is not None and mtime < self.watermark - slack

    def pending(self, stable: Listing, block_size: int) -> Iterator[tuple[FileMetadata, int]]:
        """Segments with blocks still to hand out, with the offset to resume at.

        Order is deterministic: unfinished segments first, then new ones by (mtime, path).
        """
        for path in sorted(self.files, key=lambda p: (self.files[p].mtime, p)):
            entry = self.files[path]
            if not entry.done:
                yield FileMetadata(path, entry.segment_end, entry.mtime, entry.segment_start, block_size), entry.emitted
        fresh = []
        for path, (size, mtime) in stable.items():
            start = self._new_bytes_start(path, size)
            if start is not None:
                fresh.append(FileMetadata(path, size, mtime, start, block_size))
        for meta in sorted(fresh, key=lambda m: (m.mtime, m.path)):
            yield meta, meta.segment_start

    def _new_bytes_start(self, path: str, size: int) -> int | None:
        """Where the bytes not yet offered of a listed file of ``size`` start; ``None`` when there
        are none, or when its remembered segment is still being handed out (``pending`` does that)."""
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
             now: float) -> list[BlockMetadata]:
        """Hand out at most ``limit`` blocks (all when ``None``), lazily per file, and record them;
        ``now`` is the reader's clock, beyond which the watermark does not move."""
        taken: list[BlockMetadata] = []
        for meta, resume in self.pending(stable, block_size):
            if (meta.path not in self.files) and self.forgotten(meta.mtime, slack):
                continue
            for block in meta.blocks(resume):
                if limit is not None and len(taken) >= limit:
                    break
                taken.append(block)
                self.files[meta.path] = Entry(meta.mtime, meta.segment_start, meta.length, block.end)
            if limit is not None and len(taken) >= limit:
                break
        self._advance(slack, now)
        return taken

    def _advance(self, slack: float | None, now: float) -> None:
        done = [min(e.mtime, now) for e in self.files.values() if e.done]
        if done:
            self.watermark = max([*done, *([self.watermark] if self.watermark is not None else [])])
        if slack is not None and self.watermark is not None:
            self.files = {p: e for p, e in self.files.items() if not (e.done and e.mtime < self.watermark - slack)}

    def to_json(self) -> dict[str, Any]:
        files = {p: [e.mtime, e.segment_start, e.segment_end, e.emitted] for p, e in sorted(self.files.items())}
        return {"files": files, "watermark": self.watermark}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "SplitState":
        files = {p: Entry(float(m), int(s), int(e), int(x)) for p, (m, s, e, x) in value["files"].items()}
        return cls(files, value["watermark"])
