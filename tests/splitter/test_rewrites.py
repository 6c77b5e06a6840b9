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
