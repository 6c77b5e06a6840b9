"""File and block metadata: the units of work the splitter hands out.

A block is a byte range of one *segment* of a file. A segment is the part of a file
offered at once: the whole file, or, when a file grows, only its new bytes. Block ids
are ``offset // block_size`` in file coordinates; a new segment that starts inside a block's
range repeats that block's id for its first block, so ``(path, block_id, segment_start)`` names
a block across segments.
A segment of a compressed file (``compression.codec_of``) is one block covering the segment, whatever
the block size: its bytes cannot be split. Its id is the segment's start (0 for the first): segments
of a file do not overlap, so ids stay unique across them, and a replay or a resumed state plans the
same segment, so the same id. (``offset // length`` would give a grown file's second segment id 0 again.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Iterable, Iterator

from storage.splitter.compression import codec_of

if TYPE_CHECKING:  # pandas is imported where frames are made: Spark's Python processes never need it
    import pandas as pd


@dataclass(frozen=True)
class FileMetadata:
    """One offered segment of a file: ``[segment_start, length)`` are its new bytes."""

    path: str
    length: int
    mtime: float
    segment_start: int
    block_size: int

    @property
    def compressed(self) -> bool:
        """Whether the file is compressed: the segment is then one block, id ``segment_start``."""
        return codec_of(self.path) is not None

    @property
    def block_ids(self) -> range:
        """Ids of the blocks that cover the segment; a lazy ``range``, never a list."""
        if self.length <= self.segment_start:
            return range(0)
        if self.compressed:
            return range(self.segment_start, self.segment_start + 1)
        return range(self.segment_start // self.block_size, (self.length - 1) // self.block_size + 1)

    @property
    def block_count(self) -> int:
        return len(self.block_ids)

    def blocks(self, start_offset: int | None = None) -> Iterator["BlockMetadata"]:
        """Yield the segment's blocks lazily, from ``start_offset`` (a block start) on."""
        first = self.segment_start if start_offset is None else start_offset
        if self.compressed:
            if first < self.length:
                yield BlockMetadata(self.path, self.segment_start, self.segment_start, self.length - self.segment_start,
                                    self.segment_start, self.length)
            return
        offset, step = first, self.block_size
        while offset < self.length:
            end = min((offset // step + 1) * step, self.length)
            yield BlockMetadata(self.path, offset // step, offset, end - offset, self.segment_start, self.length)
            offset = end


@dataclass(frozen=True)
class BlockMetadata:
    """Bytes ``[offset, offset + length)`` of ``path``; records are read up to ``segment_end``.

    A record belongs to this block when its first byte is in the range; a block that
    starts after ``segment_start`` skips the record already begun by the previous block.
    """

    path: str
    block_id: int
    offset: int
    length: int
    segment_start: int
    segment_end: int

    @property
    def end(self) -> int:
        return self.offset + self.length


BLOCK_COLUMNS = [f.name for f in fields(BlockMetadata)]
FILE_COLUMNS = ["path", "length", "mtime", "segment_start", "block_count", "block_ids"]


def files_frame(files: Iterable[FileMetadata]) -> pd.DataFrame:
    """Per-file metadata as a DataFrame (``block_ids`` holds lazy ranges)."""
    import pandas as pd

    rows = [
        {"path": f.path, "length": f.length, "mtime": f.mtime, "segment_start": f.segment_start,
         "block_count": f.block_count, "block_ids": f.block_ids}
        for f in files
    ]
    return pd.DataFrame(rows, columns=FILE_COLUMNS)


def blocks_frame(blocks: Iterable[BlockMetadata]) -> pd.DataFrame:
    """Per-block metadata as a DataFrame; ``blocks_from_frame`` turns it back."""
    import pandas as pd

    return pd.DataFrame([asdict(b) for b in blocks], columns=BLOCK_COLUMNS)


def blocks_from_frame(frame: pd.DataFrame) -> list[BlockMetadata]:
    return [
        BlockMetadata(str(r.path), int(r.block_id), int(r.offset), int(r.length), int(r.segment_start), int(r.segment_end))
        for r in frame.itertuples(index=False)
    ]
