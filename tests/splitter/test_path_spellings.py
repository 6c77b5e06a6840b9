"""Overlapping ``paths`` spelled differently name each file once: the scanner keys files by name."""

from __future__ import annotations

import pytest

from storage import FileSplitter
from tests.splitter.fakes import write


@pytest.mark.parametrize("second", ["/a.log", "/./a.log", "//a.log", "/x/../a.log", "/./", "/x/..", ""])
def test_a_file_under_two_spellings_of_overlapping_paths_is_read_once(tmp_path, second):
    (tmp_path / "x").mkdir()
    write(tmp_path / "a.log", "a1\na2\n", 0.0)
    lines = FileSplitter([str(tmp_path), str(tmp_path) + second], settle=0).read_lines()
    assert lines[["value", "path"]].values.tolist() == [["a1", str(tmp_path / "a.log")],
                                                          ["a2", str(tmp_path / "a.log")]]


def test_a_dot_dot_after_a_symbolic_link_keeps_the_meaning_the_os_gives_it(tmp_path):
    """``link/..`` is the parent of the link's target for the OS, not ``tmp_path``."""
    write(tmp_path / "a.log", "here\n", 0.0)
    write(tmp_path / "elsewhere" / "deep" / "a.log", "there\n", 0.0)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere" / "deep" / "sub", target_is_directory=True)
    (tmp_path / "elsewhere" / "deep" / "sub").mkdir()
    assert list(FileSplitter(str(tmp_path / "link" / ".." / "a.log"), settle=0).read_lines()["value"]) == ["there"]


def test_a_restart_from_state_naming_files_as_the_paths_were_written_reads_nothing_again(tmp_path):
    """State written before the paths were normalised names files under the path as written."""
    write(tmp_path / "a.log", "a1\na2\n", 0.0)
    write(tmp_path / "sub" / "b.log", "b1\n", 0.0)
    spelled = str(tmp_path) + "/./sub/.."
    old_state = {"files": {f"{spelled}/a.log": [0.0, 0, 6, 6], f"{spelled}/sub/b.log": [0.0, 0, 3, 3]},
                 "watermark": 0.0}
    splitter = FileSplitter(spelled, settle=0)
    splitter.restore(old_state)
    assert splitter.read_lines().empty
    assert sorted(splitter.state()["files"]) == [str(tmp_path / "a.log"), str(tmp_path / "sub" / "b.log")]
    write(tmp_path / "a.log", "a1\na2\na3\n", 10.0)  # grown: only the new line
    splitter.trigger_scan()
    assert list(splitter.read_lines()["value"]) == ["a3"]


def test_a_state_naming_files_under_none_of_the_paths_forgets_them_with_a_warning(tmp_path):
    # A state of another splitter (or of paths narrowed since) was read on: its unfinished segments were handed
    # out, files of another directory read by a splitter of this one.
    write(tmp_path / "other" / "o.log", "".join(f"o{i}\n" for i in range(20)), 0.0)
    write(tmp_path / "mine" / "m.log", "m1\nm2\n", 0.0)
    other = FileSplitter(str(tmp_path / "other"), block_size=16, settle=0)
    other.blocks(2)
    mine = FileSplitter(str(tmp_path / "mine"), block_size=16, settle=0)
    with pytest.warns(UserWarning, match=r"restore\(\): 1 file\(s\) of the state are under none of paths=.*o\.log"):
        mine.restore(other.state())
    assert list(mine.read_lines()["value"]) == ["m1", "m2"]
    assert list(mine.state()["files"]) == [str(tmp_path / "mine" / "m.log")]
