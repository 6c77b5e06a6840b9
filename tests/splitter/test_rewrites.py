"""A file rewritten with shorter content while its blocks are still being handed out: every line of
the new content is read once (the rest of the old segment read the new bytes at the old offsets,
then the whole file again from byte 0)."""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path

import pytest
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


def test_a_file_shrunk_between_the_hand_out_of_its_blocks_and_their_read_skips_them_naming_it(tmp_path):
    """The blocks read the file's new bytes at the listing's offsets without a word: a file rewritten shorter gave
    its new lines twice (then again from byte 0), and lines appended then cut by a copytruncate went unreported."""
    import warnings

    def lines(prefix: str, n: int) -> str:
        return "".join(f"{prefix}{i:03d}\n" for i in range(n))

    def drain(splitter: FileSplitter) -> list[str]:
        out: list[str] = []
        while not (blocks := splitter.blocks()[1]).empty:
            out += list(splitter.read_lines(blocks)["value"])
        return out

    rewritten = tmp_path / "rewritten" / "a.log"
    rewritten.parent.mkdir()
    rewritten.write_text(lines("a", 10))
    splitter = FileSplitter(str(rewritten.parent), settle=0, scan_interval=0, block_size=8, blocks_per_batch=100)
    _, blocks = splitter.blocks()
    rewritten.write_text(lines("b", 3))  # shorter, before its blocks are read
    with pytest.warns(UserWarning, match=r"skipped block \d+ of file .*a\.log.*fewer than the 50 its listing saw") as warned:
        got = list(splitter.read_lines(blocks)["value"])
    named = {int(m.group(1)) for w in warned if (m := re.search(r"skipped block (\d+) of file", str(w.message)))}
    assert named == set(range(7))
    assert got + drain(splitter) == lines("b", 3).splitlines()
    assert {s.block_id for s in splitter.skipped_blocks} == set(range(7))

    truncated = tmp_path / "truncated" / "app.log"
    truncated.parent.mkdir()
    truncated.write_text(lines("a", 3))
    splitter = FileSplitter(str(truncated.parent), settle=0, scan_interval=0)
    got = drain(splitter)
    with truncated.open("a") as f:
        f.write(lines("b", 3))
    _, blocks = splitter.blocks()
    truncated.write_text("")  # a copytruncate, before the appended lines' block is read
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got += list(splitter.read_lines(blocks)["value"])
    with truncated.open("a") as f:
        f.write(lines("c", 2))
    assert got + drain(splitter) == lines("a", 3).splitlines() + lines("c", 2).splitlines()
    assert [(s.path, s.block_id) for s in splitter.skipped_blocks] == [(str(truncated), 0)]
