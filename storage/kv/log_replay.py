"""Recovery's reading of a bucket's write-ahead log: the committed segments the metadata lists, then the tail.

A crash cuts short only the last frame of the tail, so a bad frame there ends the log, unless a whole frame of a
later batch follows it (in that segment or a later one): then it is damage to committed batches, refused.
"""

from __future__ import annotations

from typing import Any

from .catalog import Catalog, Meta, parse_sequenced
from .classes import split
from .errors import CorruptStoreError
from .format import damaged_tail, decode_frames, find_frame
from .keys import Run


def replay_log(catalog: Catalog, meta: Meta) -> tuple[list[Run], int, list[list[Any]], int]:
    """The runs the log after ``meta`` replays to, the last batch id, the segments replayed with their lengths, and
    how many batches it replayed (for ``flush_batches``: a batch's runs are one per width class)."""
    runs: list[Run] = []
    batch_id, log, batches = meta.flushed_batch_id, [], 0
    for name, length in meta.log:
        path = catalog.path("log", name)
        data = _read_log(catalog, path, length)
        frames, _ = decode_frames(data, path, tail=False)
        batch_id, batches = _replay(frames, batch_id, runs, path), batches + len(frames)
        log.append([name, length])
    tail = []
    for name in catalog.names("log"):
        parsed = parse_sequenced(name)
        if parsed and parsed[0] == meta.epoch and parsed[2] == meta.token and parsed[1] >= meta.tail_from:
            tail.append((parsed[1], name))
    tail_names = [name for _, name in sorted(tail)]
    for i, name in enumerate(tail_names):
        path = catalog.path("log", name)
        data = _read_log(catalog, path, None)
        frames, used = decode_frames(data, path, tail=True, after=batch_id)
        batch_id, batches = _replay(frames, batch_id, runs, path), batches + len(frames)
        if used:
            log.append([name, used])
        if used < len(data):
            # A torn frame ends the log: nothing the writer wrote after it was committed. A later segment
            # holding a whole frame says otherwise (a failed append is cut back before the next segment
            # starts), so the bad frame is damage.
            _check_nothing_after(catalog, path, used, batch_id, [catalog.path("log", later) for later in tail_names[i + 1 :]])
            break
    if batch_id < meta.batch_id:
        raise CorruptStoreError(
            catalog.path("meta", meta.name),
            f"the log holds batches up to {batch_id}, the metadata says {meta.batch_id} were committed",
        )
    return runs, batch_id, log, batches


def _check_nothing_after(catalog: Catalog, path: str, pos: int, batch_id: int, later: list[str]) -> None:
    """Raise if a tail segment in ``later`` holds a whole frame after the bad one at ``pos`` of ``path``."""
    for other in later:
        found = find_frame(_read_log(catalog, other, None), 0, batch_id)
        if found is not None:
            where = f"in the later segment {other}"
            problem = f"the frame at offset {pos} is cut short or fails its CRC"
            raise CorruptStoreError(path, damaged_tail(problem, batch_id, found, where))


def _read_log(catalog: Catalog, path: str, length: int | None) -> bytes:
    fs = catalog.fs
    try:
        data = fs.cat_file(path) if length is None else fs.cat_file(path, start=0, end=length)
    except FileNotFoundError:
        raise CorruptStoreError(path, "a committed log segment is missing") from None
    if length is not None and len(data) < length:
        raise CorruptStoreError(path, f"the log segment has {len(data)} bytes, {length} were committed")
    return data


def _replay(frames: list[tuple[int, int | None, list[Run]]], batch_id: int, runs: list[Run], path: str) -> int:
    for frame_batch, previous, frame_runs in frames:
        if frame_batch <= batch_id:
            raise CorruptStoreError(path, f"batch {frame_batch} follows batch {batch_id} in the log")
        if previous is not None and previous != batch_id:
            raise CorruptStoreError(
                path, f"the frame of batch {frame_batch} was committed after batch {previous}, but the log before it "
                f"ends at batch {batch_id}: a log segment in between is missing or was emptied, and replaying around "
                "it would lose its batches and keep the later ones"
            )
        runs.extend(piece for run in frame_runs for piece in split(run))  # a frame of the old format: one run
        batch_id = frame_batch
    return batch_id
