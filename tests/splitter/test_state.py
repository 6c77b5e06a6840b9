"""``SplitState`` hands out what the plain algorithm it replaced did, and writes the same state.

``ReferenceState`` is that algorithm, kept here as the model: every call sorts all remembered and
all listed files, and walks every remembered file to move the watermark. ``SplitState`` keeps
indexes so that a call costs time in the blocks it hands out; random listings and hand-outs must
give both the same blocks and the same ``to_json`` after every step. The model has a rule the old
algorithm lacked: the segment of a file listed smaller, unfinished or read to its end, is ended as
``[0, 0)``, the file rewritten (a finished one kept its size unless handed out in that listing). A
compressed file is handed out as any file, each segment one block whose id is the segment's start.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator

from hypothesis import example, given, settings
from hypothesis import strategies as st

from storage.splitter.metadata import BlockMetadata, FileMetadata
from storage.splitter.scanner import Listing
from storage.splitter.state import Entry, PathQueue, SplitState


@dataclass
class ReferenceState:
    """``SplitState`` as it was before its indexes (quadratic in the files known), the model of the test."""

    files: dict[str, Entry] = field(default_factory=dict)
    watermark: float | None = None

    def forgotten(self, mtime: float, slack: float | None) -> bool:
        return slack is not None and self.watermark is not None and mtime < self.watermark - slack

    def pending(self, stable: Listing, block_size: int) -> Iterator[tuple[FileMetadata, int]]:
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
        entry = self.files.get(path)
        if entry is None:
            start = 0
        elif not entry.done or size == entry.segment_end:
            return None
        else:
            start = entry.segment_end if size > entry.segment_end else 0
        return start if size > start else None

    def offers(self, path: str, size: int, mtime: float, slack: float | None) -> bool:
        if path not in self.files and self.forgotten(mtime, slack):
            return False
        return self._new_bytes_start(path, size) is not None

    def take(self, stable: Listing, block_size: int, limit: int | None, slack: float | None,
             now: float, changing: Listing | None = None) -> list[BlockMetadata]:
        for path, entry in list(self.files.items()):  # listed shrunk: rewritten, its segment ends as [0, 0)
            listed = stable.get(path) or (changing or {}).get(path)
            if listed is not None and listed[0] < entry.segment_end:
                self.files[path] = Entry(entry.mtime, 0, 0, 0)
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
    def from_json(cls, value: dict[str, Any]) -> "ReferenceState":
        files = {p: Entry(float(m), int(s), int(e), int(x)) for p, (m, s, e, x) in value["files"].items()}
        return cls(files, value["watermark"])


#: ``/d/f5.gz`` is compressed: each segment one block, id its start (grown: a new segment, a new id).
PATHS = [f"/d/f{i}" for i in range(5)] + ["/d/f5.gz"]
#: What happens to one file before a listing: its size (bytes, a few blocks at most) and mtime.
CHANGES = st.sampled_from(["grow", "shrink", "rewrite", "touch", "vanish"])
MTIMES = st.integers(0, 30).map(float)  # in any order, some ahead of the reader's clock

steps = st.lists(st.one_of(
    st.tuples(st.just("list"), st.lists(st.tuples(st.sampled_from(PATHS), CHANGES, st.integers(1, 9), MTIMES),
                                        max_size=6), st.sets(st.sampled_from(PATHS), max_size=2)),
    st.tuples(st.just("take"), st.sampled_from([None, 0, 1, 2, 3, 5]), st.integers(0, 8)),
    st.tuples(st.just("restore")),
    st.tuples(st.just("slack"), st.sampled_from([None, 0.0, 3.0, 10.0])),
), max_size=40)


def _changed(files: dict[str, tuple[int, float]], path: str, change: str, amount: int,
             mtime: float) -> dict[str, tuple[int, float]]:
    """``files`` after ``change`` to ``path``; a file not there appears (empty when shrunk or touched)."""
    files = dict(files)
    size = files.get(path, (0, mtime))[0]
    if change == "vanish":
        files.pop(path, None)
    elif change == "grow":
        files[path] = (size + amount, mtime)
    elif change == "shrink":
        files[path] = (max(0, size - amount), mtime)
    elif change == "touch":
        files[path] = (size, mtime)
    else:
        files[path] = (amount, mtime)  # rewritten
    return files


@settings(max_examples=400, deadline=None)
# A file read, then touched, then forgotten while the listing that shows it touched is still in use:
# read again from the start (the cost of forgetting), without a new listing.
@example(steps=[("list", [("/d/f0", "rewrite", 3, 5.0)]), ("take", None, 0),
                ("list", [("/d/f0", "touch", 1, 25.0), ("/d/f1", "rewrite", 1, 20.0)]), ("take", None, 0)],
         slack=3.0, block_size=4)
# A file left out as forgotten is offered again once a larger slack no longer forgets it.
@example(steps=[("list", [("/d/f0", "rewrite", 1, 9.0)]), ("take", None, 0), ("list", [("/d/f1", "rewrite", 1, 5.0)]),
                ("take", None, 0), ("slack", 10.0)], slack=0.0, block_size=4)
# A compressed file read whole, then grown (its new bytes a new segment, one block), then shrunk (read again whole).
@example(steps=[("list", [("/d/f5.gz", "rewrite", 9, 5.0)]), ("take", 1, 0), ("list", [("/d/f5.gz", "grow", 2, 6.0)]),
                ("take", None, 0), ("list", [("/d/f5.gz", "shrink", 4, 7.0)]), ("take", None, 0)],
         slack=None, block_size=4)
@given(steps=steps, slack=st.sampled_from([None, 0.0, 3.0, 10.0]), block_size=st.sampled_from([1, 3, 4, 8]))
def test_hands_out_the_same_blocks_and_keeps_the_same_state_as_the_plain_algorithm(
        steps: list[tuple[Any, ...]], slack: float | None, block_size: int) -> None:
    state, reference = SplitState(), ReferenceState()
    files: dict[str, tuple[int, float]] = {}
    listing: Listing = {}
    changing: Listing = {}
    now = 10.0
    for step in steps:
        if step[0] == "list":  # a new listing; hand-outs in between reuse the one before, as the planner does
            for path, change, amount, mtime in step[1]:
                files = _changed(files, path, change, amount, mtime)
            settling = step[2] if len(step) > 2 else set()  # still settling: left out of the listing
            listing = {path: seen for path, seen in files.items() if path not in settling}
            changing = {path: seen for path, seen in files.items() if path in settling}
        elif step[0] == "take":
            _, limit, tick = step
            now += tick
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                taken = state.take(listing, block_size, limit, slack, now, changing)
            assert taken == reference.take(listing, block_size, limit, slack, now, changing)
            assert not caught
            assert all(b.block_id == b.segment_start and b.end == b.segment_end for b in taken if b.path.endswith(".gz"))
        elif step[0] == "restore":  # a restart from the offset's JSON
            state = SplitState.from_json(json.loads(json.dumps(state.to_json())))
            reference = ReferenceState.from_json(json.loads(json.dumps(reference.to_json())))
        else:
            slack = step[1]
        assert json.dumps(state.to_json()) == json.dumps(reference.to_json())
        for path, (size, mtime) in listing.items():
            assert state.offers(path, size, mtime, slack) == reference.offers(path, size, mtime, slack)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        taken = state.take(listing, block_size, None, slack, now)
    assert taken == reference.take(listing, block_size, None, slack, now)
    assert json.dumps(state.to_json()) == json.dumps(reference.to_json())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "discard", "pop"]), st.sampled_from("abcd"), st.integers(0, 3)),
                max_size=300))
def test_path_queue_pops_the_smallest_key_of_the_paths_queued_now(operations: list[tuple[str, str, int]]) -> None:
    queue = PathQueue()
    model: dict[str, float] = {}
    for operation, path, key in operations:
        if operation == "put":
            queue.put(path, float(key))
            model[path] = float(key)
        elif operation == "discard":
            queue.discard(path)
            model.pop(path, None)
        else:
            smallest = min(model, key=lambda p: (model[p], p), default=None)
            assert queue.pop() == smallest
            if smallest is not None:
                del model[smallest]
    assert queue.first() == min(model, key=lambda p: (model[p], p), default=None)


def test_path_queue_keeps_no_more_than_a_bounded_backlog_of_old_keys() -> None:
    """A path whose key keeps changing leaves an old heap item each time: the heap is rebuilt before they pile up."""
    queue = PathQueue()
    for key in range(10_000):
        queue.put("/d/a", float(key % 7))
    assert len(queue._heap) <= 2 + 64
    assert queue.pop() == "/d/a" and queue.pop() is None
