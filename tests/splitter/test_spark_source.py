"""The Spark streaming source: bounded batches, restart from a checkpoint, exactly once."""

from __future__ import annotations

import datetime
import importlib
import sys
import threading
import warnings
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from storage import FileSplitter
from storage.splitter.config import SplitterConfig
from tests import sparks
from tests.splitter.fakes import Clock, append, write


def make_input(directory, files: int = 2, lines: int = 40) -> list[str]:
    expected = []
    for f in range(files):
        rows = [f"file{f} line{i} é" for i in range(lines)]
        (directory / f"part{f}.txt").write_text("\r\n".join(rows) + ("\n" if f % 2 else ""), encoding="utf-8")
        expected += rows
    return expected


class BatchRecorder:
    """A foreachBatch sink that keeps every call: (batch id, rows), replays included.

    With ``crash_at`` it fails right after writing that batch, before Spark commits it.
    """

    def __init__(self, crash_at: int | None = None) -> None:
        self.calls: list[tuple[int, list[tuple]]] = []
        self.crash_at = crash_at

    def __call__(self, batch, batch_id: int) -> None:
        rows = sorted((r.value, r.path, r.block_id, r.offset) for r in batch.collect())
        self.calls.append((batch_id, rows))
        if batch_id == self.crash_at:
            raise RuntimeError(f"simulated crash after writing batch {batch_id}")

    def by_batch(self) -> dict[int, list[tuple]]:
        """Idempotent by batch id, like a sink that overwrites a batch's output."""
        return dict(self.calls)


def start(splitter: FileSplitter, spark, checkpoint, recorder: BatchRecorder, **trigger):
    writer = splitter.read_stream(spark).writeStream.foreachBatch(recorder).option("checkpointLocation", str(checkpoint))
    return writer.trigger(**trigger).start() if trigger else writer.start()


@pytest.mark.spark
def test_a_relative_path_is_read_from_the_drivers_directory_where_the_splitter_was_made(spark, tmp_path, monkeypatch):
    """The source runs in a Python worker, which resolved a relative path in the JVM's working directory, not the
    driver's after a notebook's %cd: the query failed with "paths: 'in' does not exist". And read_stream took it
    from the directory of its call, where read_lines() takes it from the one the splitter was made in."""
    monkeypatch.chdir(tmp_path)
    Path("in").mkdir()
    expected = make_input(Path("in"))
    recorder = BatchRecorder()
    splitter = FileSplitter("in", block_size=256, blocks_per_batch=2, settle=0, scan_interval=0)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    start(splitter, spark, tmp_path / "checkpoint", recorder, availableNow=True).awaitTermination()
    assert Counter(row[0] for rows in recorder.by_batch().values() for row in rows) == Counter(expected)


@pytest.mark.spark
def test_restart_from_checkpoint_reads_every_line_exactly_once(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    expected = make_input(data)
    splitter = FileSplitter(str(data), block_size=256, blocks_per_batch=2, settle=0, scan_interval=0)
    checkpoint = tmp_path / "checkpoint"

    first = BatchRecorder(crash_at=1)
    with pytest.raises(Exception, match="simulated crash after writing batch 1"):
        start(splitter, spark, checkpoint, first, availableNow=True).awaitTermination()
    assert [batch_id for batch_id, _ in first.calls] == [0, 1]

    second = BatchRecorder()
    start(splitter, spark, checkpoint, second, availableNow=True).awaitTermination()

    assert second.calls[0][0] == 1  # the uncommitted batch is replayed ...
    assert second.calls[0][1] == first.by_batch()[1]  # ... and reads exactly the same blocks
    batches = {**first.by_batch(), **second.by_batch()}
    union = [row[0] for rows in batches.values() for row in rows]
    assert Counter(union) == Counter(expected)
    assert len(first.by_batch()) < len(batches)  # the first run really stopped part-way
    for rows in batches.values():
        assert len({(path, block_id) for _, path, block_id, _ in rows}) <= 2
        assert all(block_id == offset // 256 for _, _, block_id, offset in rows)


@pytest.mark.spark
def test_a_bounded_query_reads_a_file_dropped_just_before_and_leaves_one_still_written_to_the_next_run(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.txt").write_text("a1\na2\n")
    busy = data / "busy.txt"
    busy.write_text("b0\n")
    written, done = ["b0"], threading.Event()

    def writer() -> None:  # whole lines, one write each, until the first run has ended
        while not done.is_set():
            written.append(f"b{len(written)}")
            with open(busy, "a") as f:
                f.write(written[-1] + "\n")
            done.wait(0.05)

    thread = threading.Thread(target=writer)
    thread.start()
    splitter = FileSplitter(str(data), settle=1)
    first, second = BatchRecorder(), BatchRecorder()
    try:
        start(splitter, spark, tmp_path / "cp", first, availableNow=True).awaitTermination()  # ends while busy.txt grows
    finally:
        done.set()
        thread.join()
    start(splitter, spark, tmp_path / "cp", second, availableNow=True).awaitTermination()
    values = lambda recorder: [row[0] for rows in recorder.by_batch().values() for row in rows]  # noqa: E731
    assert {"a1", "a2"} <= set(values(first))
    assert Counter(values(first) + values(second)) == Counter(["a1", "a2", *written])


def wait_for(condition, query) -> None:
    """Wait until ``condition()`` holds while the query runs (its failure is raised); the bound of
    `sparks.wait_for` only turns a hang into a failure, generous for a loaded machine."""
    sparks.wait_for(condition, "the streaming query to get there", poll=0,
                    alive=lambda: not query.awaitTermination(0.2))


@pytest.mark.spark
def test_continuous_mode_reads_files_added_and_bytes_appended_while_running(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.txt").write_text("a1\na2\n")
    splitter = FileSplitter(str(data), block_size=4, blocks_per_batch=2, settle=0, scan_interval=0)
    recorder = BatchRecorder()
    query = start(splitter, spark, tmp_path / "cp", recorder)
    values = lambda: sorted(row[0] for rows in recorder.by_batch().values() for row in rows)  # noqa: E731
    wait_for(lambda: values() == ["a1", "a2"], query)
    (data / "b.txt").write_text("b1\n")
    with open(data / "a.txt", "a") as f:
        f.write("a3\n")
    wait_for(lambda: len(values()) == 4, query)
    query.stop()
    assert values() == ["a1", "a2", "a3", "b1"]
    assert all(len({(r[1], r[2]) for r in rows}) <= 2 for rows in recorder.by_batch().values())


@pytest.mark.spark
def test_trigger_scan_reaches_a_running_query_through_the_scan_trigger_file(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.txt").write_text("a1\n")
    splitter = FileSplitter(str(data), settle=0, scan_interval=3600, scan_trigger_file=str(data / "_scan_now"))
    recorder = BatchRecorder()
    query = start(splitter, spark, tmp_path / "cp", recorder)
    values = lambda: sorted(row[0] for rows in recorder.by_batch().values() for row in rows)  # noqa: E731
    try:
        query.processAllAvailable()
        assert values() == ["a1"]
        (data / "b.txt").write_text("b1\n")
        query.processAllAvailable()  # a trigger ran after b.txt appeared, but the next listing is an hour away
        assert values() == ["a1"]
        splitter.trigger_scan()  # from this process; the source lists in Spark's Python process
        query.processAllAvailable()
        assert values() == ["a1", "b1"]
    finally:
        query.stop()


@pytest.mark.spark
def test_csv_records_through_the_source_with_typed_columns(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    a = 'ts,user,amount\n2026-11-22T10:00:01,alice,5\r\n2026-11-22T10:00:02,"bob, jr",x\n\n'
    (data / "a.csv").write_bytes(a.encode())
    (data / "b.csv").write_text("ts,user,amount\n2026-11-22T10:00:03,carol,12")  # no final newline
    splitter = FileSplitter(str(data), format="csv", columns="ts timestamp, user, amount long",
                            block_size=16, blocks_per_batch=3, settle=0)
    frame = splitter.read_stream(spark)
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [
        ("ts", "timestamp"), ("user", "string"), ("amount", "bigint"),
        ("path", "string"), ("block_id", "bigint"), ("offset", "bigint")]
    rows: list = []
    query = (frame.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination()
    got = sorted((r.ts, r.user, r.amount, r.path.rsplit("/", 1)[-1], r.block_id, r.offset) for r in rows)
    at = lambda s: datetime.datetime(2026, 11, 22, 10, 0, s)  # noqa: E731
    assert a.index("2026-11-22T10:00:02") == 44
    assert got == [
        (at(1), "alice", 5, "a.csv", 0, 15),
        (at(2), "bob, jr", None, "a.csv", 2, a.index("2026-11-22T10:00:02")),  # 44: block 2
        # (the quoted comma is data; 'x' is not a long: null)
        (at(3), "carol", 12, "b.csv", 0, 15),
    ]
    assert len([p for p in query.recentProgress if p["numInputRows"]]) > 1  # several micro-batches


#: A CSV value and what it becomes, for every type a CSV column accepts (config.CSV_TYPES).
TYPED_VALUES = {
    "string": ("s", "s"), "boolean": ("true", True), "tinyint": ("7", 7), "byte": ("7", 7),
    "smallint": ("7", 7), "short": ("7", 7), "int": ("7", 7), "integer": ("7", 7), "bigint": ("7", 7),
    "long": ("7", 7), "float": ("1.5", 1.5), "real": ("1.5", 1.5), "double": ("1.5", 1.5),
    "decimal": ("7", Decimal(7)), "dec": ("7", Decimal(7)), "numeric": ("7", Decimal(7)),
    "decimal(5,2)": ("1.25", Decimal("1.25")), "date": ("2026-11-22", datetime.date(2026, 11, 22)),
    "timestamp": ("2026-11-22 10:00:01", datetime.datetime(2026, 11, 22, 10, 0, 1)),
    "timestamp_ntz": ("2026-11-22 10:00:01", datetime.datetime(2026, 11, 22, 10, 0, 1)),
    "timestamp_ltz": ("2026-11-22 10:00:01", datetime.datetime(2026, 11, 22, 10, 0, 1)),
    "binary": ("ab", bytearray(b"ab")),
}


@pytest.mark.spark
def test_every_type_a_csv_column_accepts_is_cast_by_the_source(spark, tmp_path):
    from storage.splitter.config import CSV_TYPES

    assert set(TYPED_VALUES) == {*CSV_TYPES, "decimal(5,2)"}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text(",".join(text for text, _ in TYPED_VALUES.values()) + "\n")
    columns = [(f"c{i}", kind) for i, kind in enumerate(TYPED_VALUES)]
    frame = FileSplitter(str(tmp_path / "in"), format="csv", columns=columns, header=False, settle=0).read_stream(spark)
    [row] = collect_stream(frame, tmp_path / "cp")
    assert list(row[: len(columns)]) == [value for _, value in TYPED_VALUES.values()]


#: CSV files with blank lines: spaces, tabs, \r\n, control characters up to 0x20 (a lone \r among
#: them), before the header too, more than 64 bytes of them, a file of blank lines only; and lines
#: that are not blank (characters above U+0020 that Python's str.strip() strips), padded records.
BLANK_LINE_FILES = {
    "spaces.csv": b"a,b\n1,2\n   \n\t\n3,4\n \n",
    "control.csv": b"a,b\r\n1,2\r\n\x0b\r\n\x0c \r\n\x00\n\x1f\x01\n3,4\r\n\t\r\n5,6",
    "before_header.csv": b" \t\n\r\n\x0b\n\x0c\na,b\n \n1,2\n\t\t\n3,4",
    "long_before_header.csv": b" \t" * 40 + b"\n" + b"\x0b" * 70 + b"\r\na,b\n \n1,2\n",
    "only_blank.csv": b" \n\t\r\n\x0c\n\x0b \n\n",
    "lone_cr.csv": b"a,b\n1,2\n\r\r\n3,4\n \r \n5,6\n\r",
    "not_blank.csv": " \n\u00a0,h\n \u00a0 , y \n\x7f,z\n\x85,w\n\u2028,v\n 1 , 2 \n\t3,4\t\n".encode(),
}


def by_file(rows) -> dict[str, list[tuple]]:
    """``(file name, *values)`` rows, in order, as lists of values by file name."""
    files: dict[str, list[tuple]] = {}
    for name, *values in rows:
        files.setdefault(name.rsplit("/", 1)[-1], []).append(tuple(values))
    return files


@pytest.mark.spark
def test_csv_blank_lines_are_skipped_as_spark_read_csv_skips_them(spark, tmp_path):
    """Spark's CSV reader skips the lines that Java's String.trim empties (every character up to
    U+0020), before the header too (CSVExprUtils.filterCommentAndEmpty, extractHeader); so does
    the splitter, whatever blocks cut the file, in pandas and through the Spark source. Text keeps
    them, as spark.read.text does."""
    data = tmp_path / "in"
    data.mkdir()
    for name, content in BLANK_LINE_FILES.items():
        (data / name).write_bytes(content)
    for header in (True, False):
        spark_rows = (spark.read.schema("a string, b string").csv(str(data), header=header)
                      .select("_metadata.file_name", "a", "b").collect())
        expected = by_file(spark_rows)
        assert "only_blank.csv" not in expected and len(expected["control.csv"]) == 3 + (not header)
        for block_size in (1, 2, 3, 5, 8, 64, 1 << 20):
            records = FileSplitter(str(data), format="csv", columns="a, b", header=header, block_size=block_size,
                                   settle=0).read_records().sort_values(["path", "offset"])
            assert by_file(records[["path", "a", "b"]].itertuples(index=False)) == expected, (header, block_size)
        if header:
            frame = FileSplitter(str(data), format="csv", columns="a, b", header=True, block_size=3, settle=0,
                                 blocks_per_batch=50).read_stream(spark)
            streamed = collect_stream(frame.select("path", "offset", "a", "b"), tmp_path / "cp")
            assert by_file((path, a, b) for path, _, a, b in streamed) == expected
    # Text: every line is a record, blank or not (files without a lone \r, where Spark's text reader ends a line).
    text_files = [name for name, content in BLANK_LINE_FILES.items() if b"\r" not in content.replace(b"\r\n", b"")]
    spark_lines = by_file(spark.read.text(str(data)).select("_metadata.file_name", "value").collect())
    for block_size in (1, 5, 1 << 20):
        lines = FileSplitter(str(data), block_size=block_size, settle=0).read_records().sort_values(["path", "offset"])
        splitter_lines = by_file(lines[["path", "value"]].itertuples(index=False))
        assert {name: splitter_lines[name] for name in text_files} == {name: spark_lines[name] for name in text_files}
    assert ("   ",) in spark_lines["spaces.csv"] and ("\x0b",) in spark_lines["control.csv"]


#: CSV column names that Spark SQL reads only in backticks, with a backtick inside doubled.
AWKWARD_COLUMNS = [("a`b", "long"), ("my col", "string"), ("x.y, z", "int"), ("`q`", "string")]


def test_awkward_csv_column_names_survive_the_spark_options():
    from storage.splitter.config import SplitterConfig
    from storage.splitter.spark_source import _options

    config = SplitterConfig(paths=("/d",), format="csv", columns=AWKWARD_COLUMNS)
    assert SplitterConfig.from_options(_options(config)).columns == config.columns


def test_paths_with_commas_and_spaces_survive_the_spark_options():
    """``read_stream`` joined the paths with commas and the source split them back, so
    '/logs,2026' became '/logs' and '2026'; a user's own comma-separated option still reads."""
    import os

    from storage.splitter.spark_source import _options

    config = SplitterConfig(paths=("/logs,2026", " /padded ", "/[x]"))
    assert SplitterConfig.from_options(_options(config)).paths == config.paths
    assert SplitterConfig.from_options({"paths": "/a, /b,"}).paths == ("/a", "/b")
    assert SplitterConfig.from_options({"path": "[2026]/a,/b"}).paths == (os.path.abspath("[2026]/a"), "/b")


@pytest.mark.parametrize(("options", "message"), [
    ({"paths": '["/a", 1]'}, r"""option paths='\["/a", 1\]' must be a JSON array of path strings, or paths separated"""),
    ({"path": "[]"}, r"option path='\[\]' must be a JSON array of path strings"),
    ({"path": "[1]"}, r"option path='\[1\]' must be a JSON array .* a path that starts with '\[' in a JSON array"),
])
def test_json_paths_that_are_not_path_strings_are_refused_not_split_at_commas(options, message):
    """'["/a", 1]' was split at its comma into the paths '["/a"' and '1]'."""
    with pytest.raises(ValueError, match=message):
        SplitterConfig.from_options(options)


@pytest.mark.spark
def test_awkward_csv_column_names_are_quoted_in_the_query(spark, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("1,two,3,four\n")
    splitter = FileSplitter(str(tmp_path / "in"), format="csv", columns=AWKWARD_COLUMNS, header=False, settle=0)
    frame = splitter.read_stream(spark)
    assert frame.columns == ["a`b", "my col", "x.y, z", "`q`", "path", "block_id", "offset"]
    [row] = collect_stream(frame, tmp_path / "cp")
    assert row[:4] == (1, "two", 3, "four")


@pytest.mark.spark
@pytest.mark.parametrize(("columns", "names"), [("a, A long", "'a' and 'A'"), ("Path, b", "'Path' and 'path'")])
def test_csv_columns_named_alike_but_for_case_are_refused_where_spark_ignores_case(spark, tmp_path, columns, names):
    """Spark resolves names ignoring case by default: a column named 'Path' made the location column 'path'
    ambiguous (AMBIGUOUS_REFERENCE on select("path")), 'a, A' each other; the pandas reader keeps them apart."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("1,2\n")
    splitter = FileSplitter(str(tmp_path / "in"), format="csv", columns=columns, header=False, settle=0)
    assert splitter.read_records()[["path"]].shape == (1, 1)
    with pytest.raises(ValueError, match=rf"columns: {names} differ only in case, and Spark resolves column names "
                                         r"ignoring case \(spark.sql.caseSensitive is false\)"):
        splitter.read_stream(spark)
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        [row] = collect_stream(splitter.read_stream(spark), tmp_path / "cp")
    finally:
        spark.conf.unset("spark.sql.caseSensitive")
    assert row[:2] == ("1", 2) if columns.endswith("long") else row[:2] == ("1", "2")


@pytest.mark.spark
def test_bad_option_is_reported_by_name(spark, tmp_path):
    from storage.splitter.spark_source import SplitterDataSource

    spark.dataSource.register(SplitterDataSource)
    with pytest.raises(Exception, match=r"block_size='0' must be positive"):
        _ = spark.readStream.format("file_splitter").option("block_size", "0").load(str(tmp_path)).schema


@pytest.mark.parametrize("version", ["3.5.1", "4.1.0"])
def test_old_pyspark_gets_a_clear_error(monkeypatch, version):
    """4.0 and 4.1 call ``latestOffset()`` without the start offset: a restart would read everything again."""
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", version)
    monkeypatch.delitem(sys.modules, "storage.splitter.spark_source", raising=False)
    with pytest.raises(ImportError, match=rf"needs pyspark >= 4.2.*found pyspark {version}"):
        importlib.import_module("storage.splitter.spark_source")


def test_offsets_are_deterministic_and_replayable_without_a_session(tmp_path):
    """The stream reader's planning, driven directly as Spark would, through JSON round trips."""
    import json

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from storage.splitter.spark_source import SplitterStreamReader

    make_input(tmp_path)
    config = FileSplitter(str(tmp_path), block_size=100, blocks_per_batch=3, settle=0).config

    def plan(reader, start):
        end = json.loads(json.dumps(reader.latestOffset(start, reader.getDefaultReadLimit())))
        return end, [p.value for p in reader.partitions(start, end)]

    reader = SplitterStreamReader(config)
    start = json.loads(json.dumps(reader.initialOffset()))
    first_end, first_blocks = plan(reader, start)
    assert len(first_blocks) == 3
    # A restarted driver, asked for the batch after the same start, plans the same blocks.
    _, again = plan(SplitterStreamReader(config), start)
    assert again == first_blocks
    # A replay of a logged batch reads exactly the blocks in its end offset, from any reader.
    assert [p.value for p in SplitterStreamReader(config).partitions(start, first_end)] == first_blocks
    # ReadAllAvailable (Trigger.Once) takes every remaining block at once; then there is nothing new.
    everything = reader.latestOffset(first_end, ReadAllAvailable())
    rest = reader.partitions(first_end, everything)
    assert len(first_blocks) + len(rest) == sum(-(-p.stat().st_size // 100) for p in tmp_path.iterdir())
    assert reader.latestOffset(everything, reader.getDefaultReadLimit()) == everything


@pytest.mark.parametrize("first, then", [(1000, 100), (100, 1000)])
def test_a_restart_with_another_block_size_reads_every_line_once(tmp_path, first, then):
    """The new offsets kept the checkpoint's first block size: after a restart with a smaller one, each planned
    range was cut into blocks of the old size, which ran into the next batch's (91 lines of 200 read twice)."""
    import json
    import os

    from storage.splitter.spark_source import SplitterStreamReader

    expected = [f"line {i:04d} " + "x" * 20 for i in range(200)]
    (tmp_path / "a.log").write_text("\n".join(expected) + "\n")
    os.utime(tmp_path / "a.log", (1, 1))  # settled long ago

    def batches(reader, start, limit=None):
        while True:
            end = json.loads(json.dumps(reader.latestOffset(start, reader.getDefaultReadLimit())))
            if end == start or limit == 0:
                return start
            lines.extend(planned_lines(reader, start, end))
            start, limit = end, None if limit is None else limit - 1

    lines: list[str] = []
    reader = SplitterStreamReader(SplitterConfig(paths=str(tmp_path), block_size=first, blocks_per_batch=1, settle=0))
    start = batches(reader, json.loads(json.dumps(reader.initialOffset())), limit=2)
    restarted = SplitterStreamReader(SplitterConfig(paths=str(tmp_path), block_size=then, blocks_per_batch=4, settle=0))
    batches(restarted, start)
    assert sorted(lines) == expected


def planned_lines(reader, start, end) -> list[str]:
    """The lines of the blocks an offset range plans, read as Spark's tasks would."""
    return sorted(value for partition in reader.partitions(start, end) for batch in reader.read(partition)
                  for value in batch["value"].to_pylist())


@pytest.mark.parametrize("trigger", ["availableNow", "once", "continuous"])
def test_the_source_waits_for_a_file_still_settling_rather_than_report_no_new_data(tmp_path, trigger):
    """Spark takes ``start`` back from ``latestOffset`` as "no new data": a bounded query ends, and
    ``processAllAvailable()`` returns, without the file dropped a moment before."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from storage.splitter.spark_source import SplitterStreamReader

    clock = Clock()
    path = tmp_path / "a.txt"
    write(path, "a1\n", mtime=clock.now)
    reader = SplitterStreamReader(FileSplitter(str(tmp_path), block_size=2).config, clock=clock, sleep=clock.sleep)
    start = reader.initialOffset()
    if trigger == "availableNow":
        reader.prepareForTriggerAvailableNow()  # lists a.txt, whose writer is not done:
        append(path, "a2\n", mtime=clock.now)
    end = reader.latestOffset(start, ReadAllAvailable() if trigger == "once" else reader.getDefaultReadLimit())
    assert planned_lines(reader, start, end) == (["a1", "a2"] if trigger == "availableNow" else ["a1"])
    assert clock.slept == [2]  # until its mtime was settle (2 s) old
    assert reader.latestOffset(end, reader.getDefaultReadLimit()) == end  # nothing more, no wait
    assert clock.slept == [2]


def test_trigger_once_waits_for_settling_files_before_taking_everything(tmp_path):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from storage.splitter.spark_source import SplitterStreamReader

    clock = Clock()
    write(tmp_path / "old.txt", "o\n", mtime=clock.now - 100)
    write(tmp_path / "new.txt", "n\n", mtime=clock.now - 1)
    reader = SplitterStreamReader(FileSplitter(str(tmp_path)).config, clock=clock, sleep=clock.sleep)
    start = reader.initialOffset()
    assert planned_lines(reader, start, reader.latestOffset(start, ReadAllAvailable())) == ["n", "o"]
    assert clock.slept == [1]


def test_a_bounded_query_ends_without_a_file_that_keeps_changing_and_says_so(tmp_path):
    from storage.splitter import UnsettledFileWarning
    from storage.splitter.spark_source import SplitterStreamReader

    clock = Clock()
    busy = tmp_path / "busy.txt"
    write(busy, "b0\n", mtime=clock.now)
    clock.while_asleep = lambda: append(busy, "more\n", mtime=clock.now)
    reader = SplitterStreamReader(FileSplitter(str(tmp_path), settle=3).config, clock=clock, sleep=clock.sleep)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    with pytest.warns(UnsettledFileWarning, match=rf"ends without \[{str(busy)!r}\]: still changing 3 s"):
        assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start  # the query ends
    assert sum(clock.slept) == 3


def test_two_listings_moments_apart_do_not_make_a_file_being_written_stable(tmp_path):
    """An availableNow query lists twice within milliseconds (``prepareForTriggerAvailableNow``, then
    ``latestOffset``): that they agree says nothing of whether the writer is done."""
    from storage.splitter import UnsettledFileWarning
    from storage.splitter.spark_source import SplitterStreamReader

    clock = Clock()
    path = tmp_path / "a.txt"
    write(path, "a1\nha", mtime=clock.now)  # the writer is in the middle of a line ...
    clock.while_asleep = lambda: append(path, "lf\n", mtime=clock.now)  # ... and ends it while the run waits
    config = FileSplitter(str(tmp_path)).config
    runs = []
    for _ in range(2):
        reader = SplitterStreamReader(config, clock=clock, sleep=clock.sleep)
        start = reader.initialOffset() if not runs else runs[-1][0]
        reader.prepareForTriggerAvailableNow()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnsettledFileWarning)
            end = reader.latestOffset(start, reader.getDefaultReadLimit())
        runs.append((end, planned_lines(reader, start, end)))
        clock.while_asleep = lambda: None
    assert [lines for _, lines in runs] == [[], ["a1", "half"]]  # never "ha" and "lf"


def test_spark_processes_can_import_the_source_without_pandas():
    """Spark's source runner and planner processes import the source for every query; they never
    need pandas, and importing it would cost each query (docs/splitter.md, "Speed")."""
    import subprocess

    check = "import sys, storage.splitter.spark_source; print(sorted(m for m in sys.modules if m.startswith('pandas')))"
    imported = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    assert imported == "[]"


def test_reading_a_block_exempts_lasting_objects_from_the_garbage_collector(tmp_path):
    """``read`` freezes what is alive when a task starts, so pyspark's ``gc.collect()`` after each task
    no longer walks every module and class of the worker (docs/splitter.md, "Speed")."""
    import gc

    from storage.splitter.spark_source import SplitterStreamReader

    expected = make_input(tmp_path, files=1)
    reader = SplitterStreamReader(FileSplitter(str(tmp_path), settle=0).config, rows="chunks")
    start = reader.initialOffset()
    [partition] = reader.partitions(start, reader.latestOffset(start, reader.getDefaultReadLimit()))
    gc.unfreeze()
    try:
        batches = list(reader.read(partition))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # this test process keeps collecting as before
    assert sum(len(starts) for batch in batches for starts in batch["starts"].to_pylist()) == len(expected)


@pytest.mark.parametrize("quick_ack", [True, False])
def test_reading_a_block_starts_the_quick_acknowledgement_unless_switched_off(tmp_path, monkeypatch, quick_ack):
    """With ``quick_ack`` (the default) a block's task has its worker acknowledge at once what the JVM sends
    (`storage.worker_socket`, what that does is tested in tests/spark_runner/test_worker_socket.py); the
    option survives the Spark options ``read_stream`` passes."""
    import dataclasses
    import gc

    from storage.splitter import spark_source
    from storage.splitter.spark_source import SplitterStreamReader, _options

    started: list[int] = []
    monkeypatch.setattr(spark_source, "acknowledge_arrivals_at_once", lambda: started.append(1))
    make_input(tmp_path, files=1)
    config = dataclasses.replace(FileSplitter(str(tmp_path), settle=0).config, quick_ack=quick_ack)
    config = SplitterConfig.from_options(_options(config))
    reader = SplitterStreamReader(config, rows="chunks")
    start = reader.initialOffset()
    [partition] = reader.partitions(start, reader.latestOffset(start, reader.getDefaultReadLimit()))
    try:
        assert list(reader.read(partition))
    finally:
        gc.unfreeze()  # read() froze this test process's objects
    assert started == ([1] if quick_ack else [])


def collect_stream(frame, checkpoint) -> list[tuple]:
    rows: list = []
    query = (frame.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    return sorted(tuple(row) for row in rows)


@pytest.mark.spark
def test_lines_cut_on_the_jvm_equal_the_line_rows_of_the_source_and_of_pandas(spark, tmp_path):
    from storage.splitter.spark_source import SCHEMA

    data = tmp_path / "in"
    data.mkdir()
    (data / "mixed.txt").write_bytes("a\r\n\nb é中😀\r\n".encode() + b"x" * 40 + b"\n\nlast without newline\r")
    (data / "bad.txt").write_bytes(b"ok\n\xff\xfe\r\n\xe2\x82\nz")  # invalid UTF-8: replaced as in read_lines
    (data / "empty.txt").write_bytes(b"")
    splitter = FileSplitter(str(data), block_size=7, blocks_per_batch=4, settle=0)
    expected = sorted(splitter.read_lines().itertuples(index=False, name=None))
    assert len(expected) == 10

    frame = splitter.read_stream(spark)  # chunk rows, cut into lines on the JVM
    assert frame.schema == SCHEMA  # names, types and nullability as before
    assert collect_stream(frame, tmp_path / "cp1") == expected
    line_rows = spark.readStream.format("file_splitter").option("block_size", "7").option("settle", "0").load(str(data))
    assert line_rows.schema == SCHEMA  # the documented format still emits one row per line
    assert collect_stream(line_rows, tmp_path / "cp2") == expected


@pytest.mark.spark
@pytest.mark.parametrize("format", ["text", "csv"])
def test_blocks_skipped_on_executors_are_listed_on_the_driver(spark, tmp_path, format):
    """With strict=False an unreadable block is skipped; its warning stays in the executor's log, but
    the splitter lists it once the query's tasks are done."""
    data = tmp_path / "in"
    data.mkdir()
    for name in ("a", "b"):
        (data / f"{name}.txt").write_text(f"{name}1\n")
    columns = {"columns": "v", "header": False} if format == "csv" else {}
    splitter = FileSplitter(str(data), format=format, **columns, blocks_per_batch=1, settle=0, scan_interval=3600)
    rows: list = []

    def read_then_delete_the_rest(batch, _):
        rows.extend(row[0] for row in batch.collect())
        for path in data.iterdir():  # the blocks of the next batch are planned already, but not read
            path.unlink()

    query = (splitter.read_stream(spark).writeStream.foreachBatch(read_then_delete_the_rest)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert len(rows) == 1
    unread = str(data / ("b.txt" if rows == ["a1"] else "a.txt"))
    assert [(b.path, b.block_id) for b in splitter.skipped_blocks] == [(unread, 0)]
    assert "No such file" in splitter.skipped_blocks[0].error


class _SessionWithoutContext:
    """A session as Spark Connect shows it to ``read_stream``: everything but a SparkContext."""

    def __init__(self, spark):
        self._spark = spark

    def __getattr__(self, name):
        return getattr(self._spark, name)

    @property
    def sparkContext(self):
        raise NotImplementedError("sparkContext() is not implemented")


@pytest.mark.spark
def test_a_session_without_spark_context_reads_and_warns_that_skipped_blocks_are_not_listed(spark, tmp_path):
    from storage.splitter.spark_source import NoSkippedBlocksListWarning

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a1\na2\n")
    splitter = FileSplitter(str(tmp_path / "in"), settle=0, continuous=False)
    with pytest.warns(NoSkippedBlocksListWarning, match="has no SparkContext .*NotImplementedError.*executors' logs"):
        frame = splitter.read_stream(_SessionWithoutContext(spark))
    rows: list = []
    query = (frame.writeStream.foreachBatch(lambda batch, _: rows.extend(r[0] for r in batch.collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert sorted(rows) == ["a1", "a2"]
    assert splitter.skipped_blocks == ()


def test_rows_option_is_checked():
    from storage.splitter.spark_source import SplitterDataSource

    with pytest.raises(ValueError, match=r"rows='blocks' is not supported; use one of \['lines', 'chunks'\]"):
        SplitterDataSource({"path": ".", "rows": "blocks"})
    with pytest.raises(ValueError, match=r"rows='chunks' reads text only; format='csv' needs rows='lines'"):
        SplitterDataSource({"path": ".", "rows": "chunks", "format": "csv", "columns": "a"})
    with pytest.raises(ValueError, match=r"skipped_accumulator='x' must be the id of an accumulator, an integer"):
        SplitterDataSource({"path": ".", "skipped_accumulator": "x"})


@pytest.mark.spark
def test_csv_empty_fields_are_null_as_spark_read_csv_reads_them(spark, tmp_path):
    """Spark's CSV reader reads an empty field, quoted (``""``) or not, as null (its ``nullValue`` is ""); the
    splitter gave "" (a typed column became null through try_cast, a string column kept ""). Other text that
    other readers take for null (NA, null, a space) stays text in both."""
    data = tmp_path / "in"
    data.mkdir()
    (data / "empty.csv").write_bytes(b'a,b\n1,\n2,""\n3," "\n,4\n"",\nNA,null\n')
    expected = by_file(spark.read.schema("a string, b string").csv(str(data), header=True)
                       .select("_metadata.file_name", "a", "b").collect())
    assert expected["empty.csv"][:2] == [("1", None), ("2", None)]  # the reference reads them as null
    for block_size in (1, 4, 1 << 20):
        records = FileSplitter(str(data), format="csv", columns="a, b", block_size=block_size,
                               settle=0).read_records().sort_values(["path", "offset"])
        rows = [(path, *(None if pd.isna(v) else v for v in values))
                for path, *values in records[["path", "a", "b"]].itertuples(index=False)]
        assert by_file(rows) == expected, block_size
    frame = FileSplitter(str(data), format="csv", columns="a, b", block_size=4, settle=0).read_stream(spark)
    streamed = collect_stream(frame.select("path", "offset", "a", "b"), tmp_path / "cp")
    assert by_file((path, a, b) for path, _, a, b in streamed) == expected


#: UTF-8 byte order marks: at a file's first byte (Hadoop's line reader, behind Spark's text and CSV readers, drops
#: it), before blank lines and a header, and inside a file (a character, kept), also as a block's first byte.
BOM_FILES = {
    "start.csv": b"\xef\xbb\xbfa,b\n1,2\n",
    "blank_first.csv": b"\xef\xbb\xbf\n \na,b\n1,2\n",
    "middle.csv": b"a,b\nx,1\n\xef\xbb\xbfy,2\n\xef\xbb\xbf\xef\xbb\xbfz,3\n",
    "only_bom.csv": b"\xef\xbb\xbf",
}


@pytest.mark.spark
def test_a_byte_order_mark_is_read_as_spark_reads_it(spark, tmp_path):
    """A BOM starting a file was read as U+FEFF at the start of the first line (text) or header (CSV, where the
    header then did not match); and Arrow's CSV parser dropped one starting a block's text, so a U+FEFF starting a
    record inside the file was kept or lost by where the blocks were cut."""
    data = tmp_path / "in"
    data.mkdir()
    for name, content in BOM_FILES.items():
        (data / name).write_bytes(content)
    for header in (True, False):
        expected = by_file(spark.read.schema("a string, b string").csv(str(data), header=header)
                           .select("_metadata.file_name", "a", "b").collect())
        assert expected["middle.csv"][-2:] == [("\ufeffy", "2"), ("\ufeff\ufeffz", "3")]
        for block_size in (1, 2, 3, 4, 5, 9, 1 << 20):
            records = FileSplitter(str(data), format="csv", columns="a, b", header=header, block_size=block_size,
                                   settle=0).read_records().sort_values(["path", "offset"])
            assert by_file(records[["path", "a", "b"]].itertuples(index=False)) == expected, (header, block_size)
    spark_lines = by_file(spark.read.text(str(data)).select("_metadata.file_name", "value").collect())
    assert spark_lines["start.csv"][0] == ("a,b",)
    for block_size in (1, 3, 1 << 20):
        lines = FileSplitter(str(data), block_size=block_size, settle=0).read_records().sort_values(["path", "offset"])
        assert by_file(lines[["path", "value"]].itertuples(index=False)) == spark_lines, block_size
    for options in ({}, {"format": "csv", "columns": "a, b"}):
        frame = FileSplitter(str(data), block_size=4, settle=0, **options).read_stream(spark)
        columns = ["value"] if not options else ["a", "b"]
        streamed = collect_stream(frame.select("path", "offset", *columns), tmp_path / f"cp{len(options)}")
        reference = spark_lines if not options else by_file(
            spark.read.schema("a string, b string").csv(str(data), header=True)
            .select("_metadata.file_name", "a", "b").collect())
        assert by_file((path, *values) for path, _, *values in streamed) == reference
