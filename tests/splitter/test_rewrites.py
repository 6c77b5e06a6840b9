"""A file rewritten with shorter content while its blocks are still being handed out: every line of
the new content is read once (the rest of the old segment read the new bytes at the old offsets,
then the whole file again from byte 0)."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from storage import FileSplitter
from tests.splitter.fakes import Clock, write

_lines = st.lists(st.integers(0, 12), min_size=1, max_size=25)  # extra bytes per line


@settings(max_examples=80, deadline=None)
@given(old=_lines, new=_lines, block_size=st.integers(1, 16), blocks_per_batch=st.integers(1, 4),
       batches_before=st.integers(0, 4), settling=st.booleans(), restart=st.booleans())
def test_a_file_rewritten_shorter_while_handed_out_gives_each_new_line_once(old, new, block_size, blocks_per_batch,
                                                                             batches_before, settling, restart):
    """``settling``: the listing after the rewrite sees it still being written; ``restart``: the
    splitter after the rewrite restores the state of the one before."""
    old_text = "".join(f"old{i}{'o' * extra}\n" for i, extra in enumerate(old))
    new_text = "".join(f"new{i}{'n' * extra}\n" for i, extra in enumerate(new))
    assume(len(new_text) < len(old_text))
    with tempfile.TemporaryDirectory() as directory:
        clock = Clock()
        path = Path(directory, "a.log")
        write(path, old_text, clock.now - 100)

        def splitter() -> FileSplitter:
            return FileSplitter(directory, block_size=block_size, blocks_per_batch=blocks_per_batch, settle=2,
                                scan_interval=0, clock=clock, sleep=clock.sleep)

        first = splitter()
        before: list[str] = []
        for _ in range(batches_before):
            before += list(first.read_lines(first.blocks()[1])["value"])
        write(path, new_text, clock.now - (0 if settling else 10))
        second = first
        if restart:
            second = splitter()
            second.restore(first.state())
        after: list[str] = []
        while not (blocks := second.blocks()[1]).empty:
            after += list(second.read_lines(blocks)["value"])
        assert before == old_text.splitlines()[:len(before)]
        assert Counter(after) == Counter(new_text.splitlines())


@settings(max_examples=80, deadline=None)
@given(old=_lines, new=_lines, more=_lines, block_size=st.integers(1, 16), older_unread=st.booleans(),
       restart=st.booleans())
def test_a_read_file_listed_shorter_is_read_again_from_byte_0_whatever_it_grows_to(old, new, more, block_size,
                                                                                   older_unread, restart):
    # Truncated (logrotate's copytruncate: to 0 bytes) or rewritten shorter, listed so, then written on: the state
    # kept the old size unless the file was handed out in the listing that saw it shorter, so what was written
    # after was read from the old size on (lines lost, a fragment of one read), or not at all. ``older_unread``:
    # another file with blocks left is handed out first in that listing's batch.
    old_text = "".join(f"old{i}{'o' * extra}\n" for i, extra in enumerate(old))
    new_text = "".join(f"new{i}{'n' * extra}\n" for i, extra in enumerate(new))[:len(old_text) - 1]
    new_text = new_text[:new_text.rfind("\n") + 1]  # whole lines, fewer bytes than before: none at all included
    more_text = "".join(f"more{i}{'m' * extra}\n" for i, extra in enumerate(more))
    with tempfile.TemporaryDirectory() as directory:
        clock = Clock()
        path = Path(directory, "b.log")
        write(path, old_text, clock.now - 100)

        def splitter() -> FileSplitter:
            return FileSplitter(directory, block_size=block_size, blocks_per_batch=1, settle=2, scan_interval=0,
                                clock=clock, sleep=clock.sleep)

        first = splitter()
        read: list[str] = []
        while not (blocks := first.blocks()[1]).empty:
            read += list(first.read_lines(blocks)["value"])
        assert read == old_text.splitlines()
        clock.now += 10
        if older_unread:
            write(Path(directory, "a.log"), "a line\n" * (block_size + 1), clock.now - 60)
        write(path, new_text, clock.now - 10)
        after = list(first.read_lines(first.blocks()[1])["value"])  # lists b.log shorter
        second = first
        if restart:
            second = splitter()
            second.restore(first.state())
        clock.now += 10
        write(path, new_text + more_text, clock.now - 10)
        while not (blocks := second.blocks()[1]).empty:
            after += list(second.read_lines(blocks)["value"])
        expected = (new_text + more_text).splitlines() + (["a line"] * (block_size + 1) if older_unread else [])
        assert Counter(after) == Counter(expected)
