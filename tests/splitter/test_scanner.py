"""Scanner and hand-out: recursion, regex, stability, growth, new files, bounded memory, bad input."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import FileSplitter
from storage.splitter import SplitterConfig, UnreadableFileWarning, UnsettledFileWarning
from tests.splitter.fakes import Clock, append, write


def all_lines(splitter: FileSplitter) -> list[str]:
    return sorted(splitter.read_lines()["value"])


def test_recursion_hidden_and_temporary_files(tmp_path):
    write(tmp_path / "a.txt", "a\n")
    write(tmp_path / "sub" / "b.txt", "b\n")
    write(tmp_path / ".hidden.txt", "h\n")
    write(tmp_path / "_SUCCESS", "s\n")
    write(tmp_path / "c.txt.tmp", "t\n")
    write(tmp_path / ".git" / "d.txt", "g\n")
    assert all_lines(FileSplitter(str(tmp_path), settle=0)) == ["a", "b"]
    assert all_lines(FileSplitter(str(tmp_path), recursive=False, settle=0)) == ["a"]


def test_regex_matches_whole_file_name(tmp_path):
    write(tmp_path / "x.log", "log\n")
    write(tmp_path / "x.log.1", "rotated\n")
    write(tmp_path / "y.csv", "csv\n")
    assert all_lines(FileSplitter(str(tmp_path), pattern=r".*\.log", settle=0)) == ["log"]


def test_several_paths_including_a_single_file(tmp_path):
    one = write(tmp_path / "d1" / "a.txt", "a\n")
    write(tmp_path / "d2" / "b.txt", "b\n")
    assert all_lines(FileSplitter([one, str(tmp_path / "d2")], settle=0)) == ["a", "b"]


def test_file_being_written_waits_until_stable_then_growth_offers_new_bytes_only(tmp_path):
    clock = Clock()
    path = tmp_path / "grow.txt"
    write(path, "one\n", mtime=clock.now)
    splitter = FileSplitter(str(tmp_path), settle=60, scan_interval=5, clock=clock, sleep=clock.sleep)
    _, blocks = splitter.blocks()  # first sight, mtime is fresh: it may still be written, so wait
    assert clock.slept == [60]
    assert splitter.read_lines(blocks)["value"].tolist() == ["one"]
    append(path, "two\nthree\n", mtime=clock.now)
    clock.now += 5
    frame = splitter.read_lines()  # size changed since the last scan: wait until its mtime is settle old
    assert clock.slept == [60, 55]
    assert frame["value"].tolist() == ["two", "three"]
    assert frame["offset"].tolist() == [4, 8]


@pytest.mark.parametrize("continuous", [True, False])
def test_reading_right_after_a_file_is_dropped_waits_for_it_to_settle(tmp_path, continuous):
    """A new user's first call, or a bounded run, must not end with nothing because the file is seconds old."""
    clock = Clock()
    write(tmp_path / "a.txt", "a1\na2\n", mtime=clock.now - 0.5)
    assert all_lines(FileSplitter(str(tmp_path), continuous=continuous, clock=clock, sleep=clock.sleep)) == ["a1", "a2"]
    assert clock.slept == [1.5]  # until its mtime is settle (2 s) old, then one more listing

    write(tmp_path / "b.txt", "b1\n", mtime=clock.now)
    splitter = FileSplitter(str(tmp_path / "b.txt"), continuous=continuous, blocks_per_batch=1, clock=clock,
                            sleep=clock.sleep)
    _, blocks = splitter.blocks()
    assert splitter.read_lines(blocks)["value"].tolist() == ["b1"]
    assert clock.slept == [1.5, 2]
    assert splitter.blocks()[1].empty  # the run's end: nothing left, nothing settling, no wait
    assert clock.slept == [1.5, 2]


def test_stable_blocks_go_at_once_and_a_settling_file_waits_until_nothing_else_is_left(tmp_path):
    clock = Clock()
    old = write(tmp_path / "old.txt", "o\n", mtime=clock.now - 100)
    new = write(tmp_path / "new.txt", "n\n", mtime=clock.now - 0.5)
    splitter = FileSplitter(str(tmp_path), blocks_per_batch=1, clock=clock, sleep=clock.sleep)
    assert splitter.blocks()[0]["path"].tolist() == [old]
    assert clock.slept == []
    assert splitter.blocks()[0]["path"].tolist() == [new]  # listed again when it can be stable,
    assert clock.slept == [1.5]  # not after scan_interval (10 s)
    write(tmp_path / "later.txt", "l\n", mtime=clock.now)
    assert splitter.blocks()[1].empty  # no listing is due: a continuous run sees it later
    assert clock.slept == [1.5]


def test_a_file_only_touched_is_not_waited_for(tmp_path):
    clock = Clock()
    path = tmp_path / "a.txt"
    write(path, "a\n", mtime=clock.now - 100)
    splitter = FileSplitter(str(tmp_path), scan_interval=0, clock=clock, sleep=clock.sleep)
    assert all_lines(splitter) == ["a"]
    os.utime(path, (clock.now, clock.now))  # same size, new mtime: nothing new to read once stable
    assert splitter.read_lines().empty
    assert clock.slept == []


@pytest.mark.parametrize("continuous", [False, True])
def test_a_file_that_keeps_changing_is_left_for_the_next_run_after_settle_seconds(tmp_path, continuous):
    clock = Clock()
    busy = tmp_path / "busy.txt"
    write(tmp_path / "done.txt", "d\n", mtime=clock.now - 100)
    write(busy, "b0\n", mtime=clock.now)
    written = ["b0"]

    def writer_at_work() -> None:
        written.append(f"b{len(written)}")
        append(busy, written[-1] + "\n", mtime=clock.now)

    clock.while_asleep = writer_at_work
    first = FileSplitter(str(tmp_path), settle=2, continuous=continuous, clock=clock, sleep=clock.sleep)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert all_lines(first) == ["d"]
    assert sum(clock.slept) == 2  # never longer than settle, however long the writer goes on
    if continuous:  # a later listing reads it; nothing to warn about
        assert caught == []
    else:
        [warning] = caught
        assert warning.category is UnsettledFileWarning
        assert str(busy) in str(warning.message) and "next run reads them" in str(warning.message)

    clock.while_asleep = lambda: None  # the writer is done
    nxt = FileSplitter(str(tmp_path), continuous=continuous, clock=clock, sleep=clock.sleep)
    nxt.restore(first.state())
    assert all_lines(nxt) == sorted(written)  # nothing of it was marked as read


def test_files_added_while_running_need_a_scan(tmp_path):
    clock = Clock()
    write(tmp_path / "a.txt", "a\n")
    splitter = FileSplitter(str(tmp_path), settle=0, scan_interval=30, clock=clock)
    assert all_lines(splitter) == ["a"]
    write(tmp_path / "b.txt", "b\n")
    assert splitter.read_lines().empty  # the interval has not passed: no new listing
    splitter.trigger_scan()
    assert all_lines(splitter) == ["b"]
    write(tmp_path / "c.txt", "c\n")
    clock.now += 30
    assert all_lines(splitter) == ["c"]
    assert splitter.read_lines().empty  # nothing is handed out twice


def test_scan_trigger_file_makes_another_splitter_scan_at_once(tmp_path):
    """``trigger_scan()`` reaches a splitter elsewhere (a Spark source's process) through the file."""
    clock = Clock()
    data, marker = tmp_path / "in", str(tmp_path / "in" / "_scan_now")
    write(data / "a.txt", "a\n")
    reader = FileSplitter(str(data), settle=0, scan_interval=3600, scan_trigger_file=marker, clock=clock)
    assert all_lines(reader) == ["a"]
    write(data / "b.txt", "b\n")
    assert reader.read_lines().empty  # an hour to the next listing
    requester = FileSplitter(str(data), settle=0, scan_trigger_file=marker)
    requester.trigger_scan()
    assert all_lines(reader) == ["b"]  # the marker is never read as data
    write(data / "c.txt", "c\n")
    assert reader.read_lines().empty  # one request, one listing
    requester.trigger_scan()
    assert all_lines(reader) == ["c"]


def test_scan_trigger_file_inside_paths_must_be_hidden(tmp_path):
    with pytest.raises(ValueError, match=r"scan_trigger_file='.*scan_now' is inside paths and would be read as data"):
        FileSplitter(str(tmp_path), scan_trigger_file=str(tmp_path / "scan_now"))
    FileSplitter(str(tmp_path), scan_trigger_file=str(tmp_path / ".scan_now"))
    FileSplitter(str(tmp_path), scan_trigger_file=str(tmp_path.parent / "elsewhere"))


def test_scan_trigger_file_inside_paths_is_found_however_either_is_spelled(tmp_path, monkeypatch):
    """The check compared the strings, so '/d/./scan_now' or relative paths let the trigger's token be read as data."""
    message = r"is inside paths and would be read as data"
    with pytest.raises(ValueError, match=message):
        FileSplitter(str(tmp_path), scan_trigger_file=f"{tmp_path.parent}/./{tmp_path.name}/scan_now")
    monkeypatch.chdir(tmp_path.parent)
    with pytest.raises(ValueError, match=message):
        FileSplitter(tmp_path.name, scan_trigger_file=str(tmp_path / "scan_now"))
    with pytest.raises(ValueError, match=message):
        SplitterConfig(paths=("memory://d/",), scan_trigger_file="memory://d/x/../scan_now")
    SplitterConfig(paths=("memory://d",), scan_trigger_file="memory://other/scan_now")


def test_bounded_mode_ignores_files_that_appear_later(tmp_path):
    write(tmp_path / "a.txt", "a\n")
    splitter = FileSplitter(str(tmp_path), settle=0, scan_interval=0, continuous=False)
    assert all_lines(splitter) == ["a"]
    write(tmp_path / "b.txt", "b\n")
    assert splitter.read_lines().empty


def test_blocks_are_handed_out_lazily_and_never_twice(tmp_path):
    write(tmp_path / "big.txt", "".join(f"line {i}\n" for i in range(1000)))  # 8890 bytes
    splitter = FileSplitter(str(tmp_path), block_size=100, blocks_per_batch=7, settle=0)
    seen, lines = [], []
    while True:
        files, blocks = splitter.blocks()
        if blocks.empty:
            break
        assert len(blocks) <= 7
        assert files["block_count"].iloc[0] == 89  # the whole segment, described without listing it
        seen.extend(blocks["block_id"])
        lines.extend(splitter.read_lines(blocks)["value"])
    assert seen == list(range(89))
    assert lines == [f"line {i}" for i in range(1000)]


def test_remembered_files_stay_bounded_by_the_watermark(tmp_path):
    clock = Clock()
    splitter = FileSplitter(str(tmp_path), settle=0, scan_interval=0, watermark_slack=150, clock=clock)
    for i in range(20):  # a directory that keeps growing, one file every 100 s
        write(tmp_path / f"f{i:02}.txt", f"{i}\n", mtime=clock.now)
        assert splitter.read_lines()["value"].tolist() == [str(i)]
        assert splitter.remembered <= 2  # only files within 150 s of the newest are remembered
        clock.now += 100
    # A late file older than the watermark minus the slack is treated as already read: the trade-off.
    write(tmp_path / "late.txt", "late\n", mtime=clock.now - 1000)
    write(tmp_path / "new.txt", "new\n", mtime=clock.now)
    assert splitter.read_lines()["value"].tolist() == ["new"]


def test_without_slack_every_file_is_remembered(tmp_path):
    for i in range(5):
        write(tmp_path / f"f{i}.txt", f"{i}\n", mtime=1000.0 + i * 1000)
    splitter = FileSplitter(str(tmp_path), settle=0, watermark_slack=None)
    assert len(splitter.read_lines()) == 5
    assert splitter.remembered == 5


def test_state_round_trip_resumes_mid_file(tmp_path):
    write(tmp_path / "a.txt", "".join(f"{i}\n" for i in range(100)))
    first = FileSplitter(str(tmp_path), block_size=16, blocks_per_batch=3, settle=0)
    head = first.read_lines(first.blocks()[1])
    second = FileSplitter(str(tmp_path), block_size=16, settle=0)
    second.restore(first.state())
    assert second.state() == first.state()
    rest = second.read_lines()
    assert list(head["value"]) + list(rest["value"]) == [str(i) for i in range(100)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pattern": "(unclosed"}, r"pattern='\(unclosed' is not a valid regular expression"),
        ({"pattern": 123}, r"pattern=123 must be a regular expression in a string"),
        ({"pattern": ""}, r"pattern='' matches no file name \(it must match the whole name\); give None for every file"),
        ({"settle": "inf"}, r"settle='inf' must be a finite number of seconds: no file would ever be stable"),
        ({"block_size": 0}, r"block_size=0 must be positive"),
        ({"block_size": -5}, r"block_size=-5 must be positive"),
        ({"block_size": "lots"}, r"block_size='lots' is not a size"),
        ({"blocks_per_batch": 0}, r"blocks_per_batch=0 must be a positive integer"),
        ({"blocks_per_batch": 2.9}, r"blocks_per_batch=2.9 must be a positive integer"),
        ({"recursive": "false"}, r"recursive='false' must be True or False"),
        ({"continuous": "no"}, r"continuous='no' must be True or False"),
        ({"strict": 1}, r"strict=1 must be True or False"),
        ({"quick_ack": "false"}, r"quick_ack='false' must be True or False"),
        ({"format": "csv", "columns": "a", "header": None}, r"header=None must be True or False"),
        ({"scan_interval": -1}, r"scan_interval=-1 must be zero or more seconds"),
        ({"watermark_slack": "soon"}, r"watermark_slack='soon' must be a number of seconds"),
        # A smaller slack counted a settling file as read once a file dated ahead of the clock moved the watermark
        ({"watermark_slack": 1, "settle": 2}, r"watermark_slack=1 must be at least settle=2: a file is handed out"),
        ({"format": "json"}, r"format='json' is not supported; use one of \['text', 'csv'\]"),
        ({"format": "csv"}, r"format='csv' needs columns, the CSV column names in file order"),
        ({"columns": "a, b"}, r"columns=.* only apply to format='csv'; format='text'"),
        ({"format": "csv", "columns": "a, offset long"}, r"\['offset'\] repeated or taken by \['path', 'block_id', 'offset'\]"),
        ({"format": "csv", "columns": "a, a"}, r"\['a'\] repeated"),
        ({"format": "csv", "columns": "a lng"},
         r"columns='a lng': column 'a' has type 'lng', which is not supported; use one of string, boolean, .*long"),
        ({"format": "csv", "columns": [("a", "string"), ("b", "array<int>")]}, r"column 'b' has type 'array<int>'"),
        ({"format": "csv", "columns": "a long not null"}, r"column 'a' has type 'long not null'"),
        ({"format": "csv", "columns": "a decimal(40, 2)"},
         r"column 'a' has type 'decimal\(40, 2\)'; a decimal needs a precision of 1 to 38 and a scale of 0 to"),
        ({"format": "csv", "columns": "a decimal(3,5)"}, r"column 'a' has type 'decimal\(3,5\)'; a decimal needs"),
        ({"format": "csv", "columns": "a`b long"},
         r"columns='a`b long': cannot read a column at 'a`b long'; .* in backticks, doubling a backtick inside"),
        ({"format": "csv", "columns": "a, b,"}, r"columns='a, b,': cannot read a column at 'b,'"),
        ({"format": "csv", "columns": "a, `` long"}, r"columns='a, `` long' has an empty column name"),
        ({"format": "csv", "columns": 5}, r"columns=5: 5 is not a column; give a string of 'name type' columns"),
        ({"format": "csv", "columns": [("a",)]}, r"columns=\[\('a',\)\]: \('a',\) is not a column"),
        ({"format": "csv", "columns": ["a", ("b", 5)]}, r"columns=\['a', \('b', 5\)\]: \('b', 5\) is not a column"),
        ({"paths": 123}, r"paths=123 must be one or more non-empty path strings"),
        ({"paths": None}, r"paths=None must be one or more non-empty path strings"),
        ({"paths": ["a", 1]}, r"paths=\['a', 1\] must be one or more non-empty path strings"),
        ({"scan_trigger_file": 123}, r"scan_trigger_file=123 must be a path string"),
        ({"storage_options": "abc"}, r"storage_options='abc' must be a mapping of fsspec option names to values"),
        ({"storage_options": {1: "x"}}, r"storage_options=\{1: 'x'\} must be a mapping of fsspec option names"),
    ],
)
def test_bad_parameters_name_the_parameter_and_value(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        FileSplitter(**{"paths": str(tmp_path), **kwargs})


def test_columns_as_a_dict_keep_their_types(tmp_path):
    """A dict was taken as its keys: every type dropped for string, without a word."""
    splitter = FileSplitter(str(tmp_path), format="csv", columns={"ts": "timestamp", "amount": "long"})
    assert splitter.config.columns == (("ts", "timestamp"), ("amount", "long"))


@pytest.mark.parametrize("limit", [-1, 0, 2.5, "3", True])
def test_a_bad_blocks_limit_is_refused(tmp_path, limit):
    """-1 handed out no block (a loop until empty stopped with data left), 0 the default, 2.5 was taken."""
    with pytest.raises(ValueError, match=rf"blocks\(limit={limit!r}\): limit must be an int of 1 or more, or None"):
        FileSplitter(str(tmp_path)).blocks(limit)


def test_restoring_what_is_not_a_state_says_so(tmp_path):
    """A bare KeyError: 'files', also for a Spark offset of the splitter's source, whose 'state' is the state."""
    splitter = FileSplitter(str(tmp_path))
    for bad in ({}, None, {"state": splitter.state(), "version": 1}):
        hint = r" \(a Spark offset of the splitter's source: pass its 'state'\)" if bad else ""
        with pytest.raises(ValueError, match=rf"not a state of FileSplitter.state\(\){hint}; a state is a dict"):
            splitter.restore(bad)


@pytest.mark.parametrize("files, watermark, message", [
    ({"/d/a.log": [5.0, 0, 30, 80]}, None, r"file '/d/a.log' has entry \[5.0, 0, 30, 80\], not \[mtime, segment_start, "),
    ({"/d/a.log": [5.0, 0, 30, -8]}, None, r"file '/d/a.log' has entry \[5.0, 0, 30, -8\]"),
    ({"/d/a.log": [5.0, 20, 10, 10]}, None, r"file '/d/a.log' has entry \[5.0, 20, 10, 10\]"),
    ({"/d/a.log": [5.0, 16, 30, 8]}, None, r"file '/d/a.log' has entry \[5.0, 16, 30, 8\]"),
    ({"/d/a.log": [float("nan"), 0, 30, 8]}, None, r"file '/d/a.log' has entry \[nan, 0, 30, 8\]"),
    ({"/d/a.log": [5.0, 0, 30]}, None, r"file '/d/a.log' has entry \[5.0, 0, 30\]"),
    ({"/d/a.log": [5.0, 0, 30.5, 8]}, None, r"file '/d/a.log' has entry \[5.0, 0, 30.5, 8\]"),
    ([], None, r"'files' is a list, not a dict of path to entry"),
    ({}, "abc", r"'watermark' is 'abc', not None or a finite number of seconds"),
    ({}, float("inf"), r"'watermark' is inf, not None or a finite number of seconds"),
])
def test_restoring_a_damaged_state_names_what_no_state_holds(tmp_path, files, watermark, message):
    # Taken without a word: an entry emitted past its segment skipped its lines, one starting after what it had
    # emitted returned a fragment of a line, an infinite watermark read nothing; wrong types failed with bare errors.
    with pytest.raises(ValueError, match=r"restore\(.*\): not a state of FileSplitter.state\(\): " + message):
        FileSplitter(str(tmp_path)).restore({"files": files, "watermark": watermark})


def test_watermark_slack_none_as_a_string_remembers_every_file_as_documented():
    assert SplitterConfig(paths=("x",), watermark_slack="none").watermark_slack is None
    assert SplitterConfig(paths=("x",), watermark_slack="None").watermark_slack is None


def test_csv_types_are_checked_when_the_config_is_built_without_pyspark():
    """A typo in a type fails at once, for a Spark option too, not inside a Spark query (or never, with pandas)."""
    import subprocess
    import sys
    from pathlib import Path

    check = (
        "import sys; from storage.splitter import SplitterConfig\n"
        "try: SplitterConfig.from_options({'path': '/d', 'format': 'csv', 'columns': 'ts timestamp, n lng'})\n"
        "except ValueError as err: print(err)\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyspark')))"
    )
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout
    assert "column 'n' has type 'lng', which is not supported" in out
    assert out.endswith("[]\n")


def test_csv_types_are_kept_in_lower_case_with_decimal_arguments_written_out():
    config = SplitterConfig(paths=("x",), format="csv", columns="a LONG, b Decimal(10, 2), c numeric, d dec( 5 )")
    assert config.columns == (("a", "long"), ("b", "decimal(10,2)"), ("c", "numeric"), ("d", "dec(5)"))


def test_csv_column_names_in_backticks_may_hold_spaces_commas_and_doubled_backticks():
    config = SplitterConfig(paths=("x",), format="csv", columns="`a``b` long, `my col`, `x, y` decimal(4, 1), c")
    assert config.columns == (("a`b", "long"), ("my col", "string"), ("x, y", "decimal(4,1)"), ("c", "string"))
    pairs = SplitterConfig(paths=("x",), format="csv", columns=[("`q`", "string"), ("a`b", "long")])
    assert pairs.columns == (("`q`", "string"), ("a`b", "long"))  # pairs name columns as they are


def test_missing_path_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"paths: '.*nope' does not exist"):
        FileSplitter([str(tmp_path), str(tmp_path / "nope")])


def test_block_size_accepts_units():
    assert SplitterConfig(paths=("x",), block_size="2MB").block_size == 2 * 1024 * 1024


def test_blocks_per_batch_accepts_an_integer_string_and_a_numpy_integer():
    import numpy as np

    assert SplitterConfig(paths=("x",), blocks_per_batch="3").blocks_per_batch == 3
    assert SplitterConfig(paths=("x",), blocks_per_batch=np.int64(4)).blocks_per_batch == 4


def test_spark_options_are_parsed_and_unknown_ones_refused():
    config = SplitterConfig.from_options({"path": "/a,/b", "blocks_per_batch": "2", "recursive": "false",
                                          "watermark_slack": "none", "scan_trigger_file": "/a/_scan"})
    assert config.paths == ("/a", "/b") and config.blocks_per_batch == 2 and config.scan_trigger_file == "/a/_scan"
    assert config.recursive is False and config.watermark_slack is None and config.quick_ack is True
    assert SplitterConfig.from_options({"path": "/a", "quick_ack": "false"}).quick_ack is False
    with pytest.raises(ValueError, match=r"option quick_ack='off' must be true or false"):
        SplitterConfig.from_options({"path": "/a", "quick_ack": "off"})
    with pytest.raises(ValueError, match=r"unknown splitter option\(s\) \['blocksize'\]"):
        SplitterConfig.from_options({"path": "/a", "blockSize": "1"})
    with pytest.raises(ValueError, match="option 'path' is missing"):
        SplitterConfig.from_options({})
    # Both named what to read: the error called 'path' unknown while listing it among the known options
    with pytest.raises(ValueError, match=r"options 'paths'='/a' and 'path'='/b' \(from .load\(path\)\) both name what "
                                         r"to read: give one"):
        SplitterConfig.from_options({"paths": "/a", "path": "/b"})


@pytest.mark.parametrize("strict", [False, True])
def test_one_unreadable_file_does_not_stop_the_others_unless_strict(tmp_path, strict):
    write(tmp_path / "a.txt", "a\n")
    write(tmp_path / "b.txt", "b\n")
    splitter = FileSplitter(str(tmp_path), settle=0, strict=strict)
    _, blocks = splitter.blocks()
    (tmp_path / "a.txt").unlink()  # gone between listing and reading, as with a revoked permission
    if strict:
        with pytest.raises(OSError, match=r"cannot read block 0 of file '.*a.txt'"):
            splitter.read_lines(blocks)
        assert splitter.skipped_blocks == ()
    else:
        with pytest.warns(UnreadableFileWarning, match=r"a.txt"):
            assert splitter.read_lines(blocks)["value"].tolist() == ["b"]
        [skipped] = splitter.skipped_blocks
        assert (skipped.path, skipped.block_id) == (str(tmp_path / "a.txt"), 0)
        assert "No such file" in skipped.error


def test_skipped_csv_blocks_are_listed_too(tmp_path):
    write(tmp_path / "a.csv", "h\na\n")
    splitter = FileSplitter(str(tmp_path), settle=0, format="csv", columns="h")
    _, blocks = splitter.blocks()
    (tmp_path / "a.csv").unlink()
    with pytest.warns(UnreadableFileWarning):
        assert splitter.read_records(blocks).empty
    assert [(b.path, b.block_id) for b in splitter.skipped_blocks] == [(str(tmp_path / "a.csv"), 0)]


def test_block_metadata_of_a_huge_file_is_never_materialised(tmp_path):
    huge = tmp_path / "sparse.bin"
    with open(huge, "wb") as f:
        f.truncate(10**10)  # 10 GB, sparse: no disk used; 10**10 one-byte blocks
    splitter = FileSplitter(str(tmp_path), block_size=1, blocks_per_batch=3, settle=0)
    files, blocks = splitter.blocks()
    assert blocks["block_id"].tolist() == [0, 1, 2]
    assert files["block_count"].tolist() == [10**10]
    assert files["block_ids"].iloc[0][-1] == 10**10 - 1
    _, blocks = splitter.blocks()
    assert blocks["offset"].tolist() == [3, 4, 5]


#: A writer's appends to one file: (seconds after its first, text), ending with a newline. It pauses
#: less than ``settle`` (2 s) inside a line, the one assumption the splitter makes of writers.
_appends = st.lists(st.tuples(st.floats(0.0, 1.9), st.sampled_from(["x", "yy\n", "z\n", "w"])), min_size=1,
                    max_size=6).map(lambda steps: [(sum(gap for gap, _ in steps[: i + 1]), text)
                                                   for i, (_, text) in enumerate(steps)])


@settings(max_examples=60, deadline=None)
@given(writers=st.lists(st.tuples(st.floats(0.0, 4.0), _appends), min_size=1, max_size=3),
       start=st.floats(0.0, 8.0), blocks_per_batch=st.integers(1, 4))
def test_bounded_runs_read_every_line_whole_and_exactly_once_whatever_the_writers_do(writers, start,
                                                                                   blocks_per_batch):
    """Writers append while a bounded run starts at a random moment and a second run follows: each
    line is read once and whole, and no call waits longer than ``settle``."""
    with tempfile.TemporaryDirectory() as directory:
        clock = Clock()
        origin = clock.now
        events = sorted((origin + first + at, f"f{i}.txt", text) for i, (first, appends) in enumerate(writers)
                        for at, text in [*appends, (appends[-1][0], "\n")])
        done_at_start = {name for name in {name for _, name, _ in events}
                         if all(at <= origin + start for at, other, _ in events if other == name)}

        def write_until_now() -> None:
            while events and events[0][0] <= clock.now:
                at, name, text = events.pop(0)
                with open(os.path.join(directory, name), "a") as f:
                    f.write(text)
                os.utime(os.path.join(directory, name), (at, at))

        clock.now = origin + start
        write_until_now()
        clock.while_asleep = write_until_now
        read: list[tuple[int, str, str]] = []
        state = None
        for run in range(2):  # a bounded run, then the next one once every writer is done
            splitter = FileSplitter(directory, continuous=False, settle=2, block_size=3,
                                    blocks_per_batch=blocks_per_batch, clock=clock, sleep=clock.sleep)
            if state is not None:
                splitter.restore(state)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UnsettledFileWarning)
                while True:
                    before = len(clock.slept)
                    _, blocks = splitter.blocks()
                    assert sum(clock.slept[before:]) <= 2
                    if blocks.empty:
                        break
                    lines = splitter.read_lines(blocks)
                    read += [(run, os.path.basename(path), value) for path, value in zip(lines["path"], lines["value"])]
            state = splitter.state()
            clock.now = max([clock.now, *(at for at, _, _ in events)]) + 1
            write_until_now()
        whole = {name: Path(directory, name).read_text().splitlines() for name in os.listdir(directory)}
        assert sorted((name, value) for _, name, value in read) == sorted(
            (name, line) for name, lines in whole.items() for line in lines)
        for name in done_at_start:  # listed by the first run, its writer done: the first run read it all
            assert sorted(value for run, other, value in read if run == 0 and other == name) == sorted(whole[name])


def test_paths_are_taken_literally_not_as_globs(tmp_path):
    """``logs[1]`` is a directory of that name: fsspec's glob expansion read ``logs1`` instead, and
    a missing path with glob characters listed nothing without an error."""
    write(tmp_path / "logs[1]" / "a.log", "wanted\n")
    write(tmp_path / "logs1" / "a.log", "other directory\n")
    write(tmp_path / "x::y" / "a.log", "colons\n")
    assert all_lines(FileSplitter(str(tmp_path / "logs[1]"), settle=0)) == ["wanted"]
    assert all_lines(FileSplitter(str(tmp_path / "x::y"), settle=0)) == ["colons"]
    with pytest.raises(FileNotFoundError, match=r"paths: '.*nope\[3\]' does not exist"):
        FileSplitter(str(tmp_path / "nope[3]"))
    with pytest.raises(FileNotFoundError, match=r"paths: '.*missing' does not exist"):
        FileSplitter([str(tmp_path / "logs[1]"), str(tmp_path / "missing")])


def test_a_file_dated_in_the_future_does_not_make_later_files_look_read(tmp_path):
    """The watermark stops at the reader's clock: one writer's clock two hours ahead moved it two
    hours on, and every honest file of the next hour counted as already read."""
    clock = Clock()
    write(tmp_path / "fast_clock.log", "ahead\n", mtime=clock.now + 7200)
    splitter = FileSplitter(str(tmp_path), settle=0, scan_interval=0, watermark_slack=60, clock=clock,
                            sleep=clock.sleep)
    assert all_lines(splitter) == ["ahead"]
    clock.now += 1
    write(tmp_path / "honest.log", "on time\n", mtime=clock.now)
    assert all_lines(splitter) == ["on time"]
    assert splitter.state()["watermark"] == clock.now


def test_symbolic_links_to_files_are_followed_and_broken_ones_skipped(tmp_path):
    """As Spark's file source reads them (log directories such as /var/log/containers hold links);
    they were skipped without a word."""
    target = write(tmp_path / "store" / "app.log", "l1\nl2\n")
    (tmp_path / "logs").mkdir()
    os.symlink(target, tmp_path / "logs" / "app.log")
    os.symlink(tmp_path / "store" / "gone.log", tmp_path / "logs" / "broken.log")
    os.symlink(tmp_path / "logs" / "loop.log", tmp_path / "logs" / "loop.log")
    assert all_lines(FileSplitter(str(tmp_path / "logs"), settle=0)) == ["l1", "l2"]


@pytest.mark.parametrize("strict", [False, True])
def test_a_directory_that_cannot_be_listed_warns_or_raises_when_strict(tmp_path, monkeypatch, strict):
    """fsspec's walk leaves it out without a word, even with strict=True. The tests may run as root,
    whom chmod 000 does not stop, so listing it fails as it would for any other user."""
    write(tmp_path / "open" / "a.log", "visible\n")
    write(tmp_path / "locked" / "b.log", "hidden by permissions\n")
    write(tmp_path / "_locked" / "c.log", "never read: a hidden directory\n")
    scandir = os.scandir

    def refusing_scandir(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing_scandir)
    splitter = FileSplitter(str(tmp_path), settle=0, strict=strict)
    if strict:
        with pytest.raises(OSError, match=r"cannot list directory '.*/locked'"):
            splitter.read_lines()
    else:
        with pytest.warns(UnreadableFileWarning, match=r"cannot be listed, '.*/locked'") as caught:
            assert all_lines(splitter) == ["visible"]
        assert len(caught) == 1


def test_a_rotated_gz_log_is_read_decompressed_not_as_garbage(tmp_path):
    """Read in blocks, a rotated log's .gz gave lines of garbage (U+FFFD and all) without a word; then it was
    refused; now it is read whole, decompressed (tests/splitter/test_compressed.py)."""
    import gzip

    write(tmp_path / "app.log", "plain\n")
    (tmp_path / "app.log.1.gz").write_bytes(gzip.compress(b"rotated\n"))
    assert all_lines(FileSplitter(str(tmp_path), settle=0, strict=True)) == ["plain", "rotated"]


def test_a_hidden_file_named_in_paths_is_read_as_spark_reads_it(tmp_path):
    """Spark reads a file its path names whatever the name; the splitter read nothing without a word. In a
    listed directory such names stay unread."""
    write(tmp_path / "_part.log", "named\n")
    write(tmp_path / "dir" / "_part.log", "listed, so hidden\n")
    write(tmp_path / "dir" / "a.log", "visible\n")
    assert sorted(all_lines(FileSplitter([str(tmp_path / "_part.log"), str(tmp_path / "dir")], settle=0))) == [
        "named", "visible"]


def test_a_scan_trigger_file_named_in_paths_is_refused(tmp_path):
    trigger = str(tmp_path / "_trigger")
    with pytest.raises(ValueError, match=r"scan_trigger_file='.*_trigger' is one of paths"):
        FileSplitter([str(tmp_path / "a.log"), trigger], scan_trigger_file=trigger)


def test_a_growing_file_without_a_modification_time_waits_to_settle(tmp_path):
    """memory:// keeps only a creation time, which appending does not change: a file created long
    ago and caught mid-line was handed out at once, and its half line read as a record."""
    fs = fsspec.filesystem("memory")
    path = f"/{tmp_path.name}/a.log"
    fs.pipe_file(path, b"l1\n")
    clock = Clock()
    clock.now += 100

    def append_to_memory(data: bytes) -> None:
        with fs.open(path, "ab") as f:
            f.write(data)

    def writer_finishes_the_line() -> None:
        append_to_memory(b"f line\n")
        clock.while_asleep = lambda: None

    splitter = FileSplitter(f"memory:///{tmp_path.name}", settle=2, scan_interval=0, clock=clock, sleep=clock.sleep)
    try:
        assert all_lines(splitter) == ["l1"]
        append_to_memory(b"hal")
        clock.while_asleep = writer_finishes_the_line
        lines = [line for _ in range(3) for line in splitter.read_lines(splitter.blocks()[1])["value"]]
        assert lines == ["half line"]
    finally:
        fs.rm(f"/{tmp_path.name}", recursive=True)
