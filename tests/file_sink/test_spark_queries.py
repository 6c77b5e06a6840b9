"""Streaming queries into the sink on the shared local Spark: a query failing once and restarting from its
checkpoint, a bounded query per format, the foreachBatch path. These run on pyspark 4 (the Python data source)
and on 3.5 (``make test-spark35``: foreachBatch over mapInArrow)."""

import json
import os
import threading

import pyspark.sql.types
import pytest

import storage.file_sink.spark as spark_module
from storage.file_sink import ColumnBuckets, DateTimeBuckets, FileSink, RollingPolicy
from storage.file_sink.directory import RUNNING_HERE, SinkDirectory
from storage.file_sink.errors import SinkHeldError
from storage.file_sink.spark import _keep_lease
from tests.file_sink.spark_hooks import FailAt

pytestmark = pytest.mark.spark


def write_inputs(directory, batches):
    directory.mkdir()
    for i, rows in enumerate(batches):
        (directory / f"in-{i:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def stream(spark, directory):
    return spark.readStream.schema("id LONG, k STRING").option("maxFilesPerTrigger", 1).json(str(directory))


@pytest.mark.parametrize("phase", ["mid_write", "after_commit_record"])
def test_query_failing_on_first_attempt_restarts_without_loss_or_duplicates(spark, tmp_path, phase):
    batches = [[{"id": 4 * b + i, "k": f"k{i % 2}"} for i in range(4)] for b in range(3)]
    write_inputs(tmp_path / "in", batches)
    sink = (
        FileSink(str(tmp_path / "out"))
        .with_buckets(ColumnBuckets("k"))
        .with_rolling_policy(RollingPolicy(max_batches=2))
    )
    checkpoint = str(tmp_path / "checkpoint")
    first = sink.start(stream(spark, tmp_path / "in"), checkpoint_location=checkpoint, hook=FailAt(phase, 1))
    with pytest.raises(Exception, match="injected failure"):
        first.processAllAvailable()
    first.stop()

    second = sink.start(stream(spark, tmp_path / "in"), checkpoint_location=checkpoint)
    second.processAllAvailable()
    second.stop()
    writer = sink.writer()
    try:  # end of input: under the stream's last batch id, which a later run of the stream does not skip
        assert writer.finish(processing_time_ms=0)
    finally:
        writer.close()

    out = sink.read()
    assert sorted(out["id"]) == list(range(12))
    assert set(out.groupby("k")["id"].count()) == {6}
    assert spark.read.json(str(tmp_path / "out")).count() == 12  # Spark reads finished files only


FORMATS = ["jsonl", "csv", "text", "parquet", "orc", "avro"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bounded_query_leaves_every_committed_row_readable_and_the_next_run_goes_on(spark, tmp_path, fmt):
    # The default policy of the row formats (128 MiB, 60 s) would keep these rows in progress: the query must end
    # with them finished. The second run over one more file writes only that file's rows.
    batches = [[{"id": 3 * b + i, "k": f"k{i}"} for i in range(3)] for b in range(4)]
    write_inputs(tmp_path / "in", batches[:3])
    sink = FileSink(str(tmp_path / "out"), format=fmt)
    checkpoint = str(tmp_path / "checkpoint")

    def run_once():
        df = stream(spark, tmp_path / "in")
        df = df.selectExpr("cast(id as string) as value") if fmt == "text" else df
        sink.start(df, checkpoint_location=checkpoint, trigger={"availableNow": True}).awaitTermination()
        out = sink.read()
        return sorted(int(v) for v in out["value" if fmt == "text" else "id"])

    assert run_once() == list(range(9))
    assert not [n for n in os.listdir(tmp_path / "out") if n.endswith(".inprogress")]
    (tmp_path / "in" / "in-003.json").write_text("".join(json.dumps(r) + "\n" for r in batches[3]))
    assert run_once() == list(range(12))


def test_a_writer_that_read_a_stopped_querys_lease_just_before_its_release_takes_it(tmp_path):
    # The race CI met: the next run read the lease still held, the ended query's lease thread then released it and
    # forgot the query, and the next run, checking whether the holder had stopped, found no query and was refused.
    directory = SinkDirectory(FileSink(str(tmp_path / "out"), format="csv"))
    ended = directory.lease()
    directory.claim(ended, take_over=False)
    read_before_release = ended.read(ended.epoch)

    class EndedQuery:
        isActive = False

    RUNNING_HERE[ended.token] = lambda: EndedQuery.isActive
    keeper = threading.Thread(target=_keep_lease, args=(EndedQuery(), ended))
    keeper.start()
    keeper.join()
    assert ended.read(ended.epoch)["released"]
    following = directory.lease()
    following.read = lambda epoch: read_before_release
    directory.claim(following, take_over=False)
    assert following.epoch == ended.epoch + 1


class AskedQuery:
    """A query whose ``isActive`` answers from ``answers`` in turn (an exception is raised), the last one ever after."""

    def __init__(self, *answers):
        self.answers = list(answers)

    @property
    def isActive(self):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_query_whose_state_could_not_be_asked_once_keeps_its_lease_until_it_stops(tmp_path):
    # A failed call (py4j, Spark Connect) ended the lease thread, which marked the running query stopped: a writer of
    # this process then took its lease as free, and the lease was no longer renewed.
    directory = SinkDirectory(FileSink(str(tmp_path / "out"), format="csv"))
    lease = directory.lease()
    directory.claim(lease, take_over=False)
    query = AskedQuery(True, ConnectionError("the call to the JVM failed"), True, False)
    RUNNING_HERE[lease.token] = lambda: query.isActive
    keeper = threading.Thread(target=_keep_lease, args=(query, lease))
    keeper.start()
    keeper.join()
    assert query.answers == [False] and lease.read(lease.epoch)["released"]


class FakeClock:
    """``time`` for `_keep_lease`: its sleeps pass at once."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_a_query_that_cannot_be_asked_for_a_while_keeps_its_lease_until_it_stops(tmp_path, monkeypatch):
    # Five failed calls in a row (2.5 s) ended the lease thread: the lease of a running query was no longer renewed.
    monkeypatch.setattr(spark_module, "time", clock := FakeClock())
    directory = SinkDirectory(FileSink(str(tmp_path / "out"), format="csv"))
    lease = directory.lease()
    directory.claim(lease, take_over=False)
    query = AskedQuery(True, *[ConnectionError("the JVM does not answer")] * 40, True, False)
    RUNNING_HERE[lease.token] = lambda: query.isActive
    _keep_lease(query, lease)
    assert clock.now > 20 and query.answers == [False] and lease.read(lease.epoch)["released"]


def test_a_query_that_can_no_longer_be_asked_is_given_up_when_its_lease_would_have_run_out(tmp_path, monkeypatch):
    monkeypatch.setattr(spark_module, "time", clock := FakeClock())
    directory = SinkDirectory(FileSink(str(tmp_path / "out"), format="csv"))
    lease = directory.lease()
    directory.claim(lease, take_over=False)
    query = AskedQuery(ConnectionError("the JVM is gone"))
    RUNNING_HERE[lease.token] = lambda: query.isActive
    _keep_lease(query, lease)
    assert clock.now >= lease.seconds and lease.token not in RUNNING_HERE
    with pytest.raises(SinkHeldError, match="held by another writer"):  # not taken for stopped: its lease runs on
        directory.claim(directory.lease(), take_over=False)


def test_the_foreach_batch_path_writes_from_the_tasks_too(spark, tmp_path):
    # What pyspark 3.5 and 4.0 run; here forced on a pyspark that has the data source writer.
    write_inputs(tmp_path / "in", [[{"id": 2 * b + i, "k": f"k{i}"} for i in range(2)] for b in range(3)])
    sink = FileSink(str(tmp_path / "out"), format="parquet").with_buckets(ColumnBuckets("k"))
    query = sink.start(stream(spark, tmp_path / "in"), checkpoint_location=str(tmp_path / "checkpoint"),
                       trigger={"availableNow": True}, api="foreach_batch")
    query.awaitTermination()
    assert sorted(sink.read()["id"]) == list(range(6))
    assert spark.read.parquet(str(tmp_path / "out")).count() == 6


@pytest.mark.parametrize("api", ["auto", "foreach_batch"])
def test_column_names_with_dots_and_backticks_are_written_and_two_of_one_name_refused(spark, tmp_path, api):
    # pyspark's mapInArrow resolves each column by name, taking a dot for a field access: the tasks get
    # positional names and give the columns theirs back. Two columns of one name (a join) have no file row.
    write_inputs(tmp_path / "in", [[{"id": 1, "k": "a"}, {"id": 2, "k": "b"}]])
    sink = FileSink(str(tmp_path / "out"), format="jsonl").with_buckets(ColumnBuckets("k.v"))
    odd = stream(spark, tmp_path / "in").selectExpr("id as `x.y`", "id * 2 as `b``q`", "k as `k.v`")
    sink.start(odd, checkpoint_location=str(tmp_path / "chk"), trigger={"availableNow": True},
               api=api).awaitTermination()
    out = sink.read().sort_values("x.y")
    assert out.to_dict("list") == {"x.y": [1, 2], "b`q": [2, 4], "k.v": ["a", "b"]}
    bounded = FileSink(str(tmp_path / "bounded"), format="csv")
    bounded.write(spark.range(2).selectExpr("id as `x.y`"))
    assert sorted(bounded.read()["x.y"]) == [0, 1]
    twice = stream(spark, tmp_path / "in").selectExpr("id as a", "k as a")
    message = r"FileSink cannot write two columns named 'a' \(columns: \['a', 'a'\]\); rename one"
    with pytest.raises(ValueError, match=message):
        sink.start(twice, checkpoint_location=str(tmp_path / "chk2"), api=api)
    with pytest.raises(ValueError, match=message):
        bounded.write(spark.range(2).selectExpr("id as a", "id as a"))


@pytest.mark.skipif(not hasattr(pyspark.sql.types, "VariantType"), reason="pyspark 3.5 has no variant type")
def test_a_variant_column_is_refused_naming_it(spark, tmp_path):
    """pyspark hands a variant to Arrow as its binary encoding: jsonl wrote {"value": "\\u0002...", "metadata": ...}."""
    frame = spark.range(1).selectExpr("id", """named_struct('v', parse_json('{"a": 1}')) as s""")
    with pytest.raises(ValueError, match=r"FileSink cannot write column 's' of type struct<v:variant>: pyspark hands"):
        FileSink(str(tmp_path / "out")).write(frame)
    assert not (tmp_path / "out").exists() or FileSink(str(tmp_path / "out")).read().empty


@pytest.mark.parametrize(("fmt", "buckets", "columns", "message"), [
    ("avro", None, ["named_struct('x', id) as s"], r"avro format cannot write column 's' of type struct<x: int64>"),
    ("csv", None, ["array(id) as xs"], r"csv format cannot write column 'xs' of type list<element: int64>"),
    ("orc", None, ["make_dt_interval(0, 0, 0, id) as d"], r"orc format cannot write column 'd' of type duration\[us\]"),
    ("jsonl", ColumnBuckets("nope"), ["id"], r"ColumnBuckets column='nope' is not a column of the DataFrame "
                                             r"\(columns: \['id'\]\)"),
    ("jsonl", ColumnBuckets("xs"), ["array(id) as xs"], r"ColumnBuckets column='xs' has type list<element: int64>"),
    ("jsonl", DateTimeBuckets(column="s"), ["id", "string(id) as s"], r"DateTimeBuckets column='s' is of type (large_)?string"),
    # A timestamp column beside: pyspark 4's to_arrow_schema raised AssertionError without a time zone, and the
    # check was skipped.
    ("jsonl", ColumnBuckets("nope"), ["id", "timestamp'2024-01-01' as at"],
     r"ColumnBuckets column='nope' is not a column of the DataFrame \(columns: \['id', 'at'\]\)"),
])
def test_what_every_task_would_fail_on_is_refused_when_the_query_starts(spark, tmp_path, fmt, buckets, columns,
                                                                         message):
    # Checked on the driver against the DataFrame's schema: no query starts, and the error is the sink's own
    # rather than a Python worker's traceback inside the first micro-batch's failure.
    write_inputs(tmp_path / "in", [[{"id": 1, "k": "a"}]])
    sink = FileSink(str(tmp_path / "out"), format=fmt)
    sink = sink.with_buckets(buckets) if buckets else sink
    active = len(spark.streams.active)
    with pytest.raises((ValueError, TypeError), match=message):
        sink.start(stream(spark, tmp_path / "in").selectExpr(*columns), checkpoint_location=str(tmp_path / "chk"))
    assert len(spark.streams.active) == active
    with pytest.raises((ValueError, TypeError), match=message.replace("element: int64", "element: int64 not null")
                       .replace("x: int64", "x: int64 not null")):
        sink.write(spark.range(1).selectExpr(*columns))
    assert sink.finished_files() == []


def test_a_type_pyspark_cannot_name_in_arrow_is_left_to_the_tasks(spark, tmp_path):
    # pyspark's to_arrow_schema refuses a year-month interval; the driver's check then leaves the type to the
    # tasks (what Spark's own Arrow path makes of it), and still checks the names.
    from storage.file_sink.spark import check_frame

    sink = FileSink(str(tmp_path / "out"), format="parquet")
    check_frame(sink, spark.range(1).selectExpr("id", "make_ym_interval(1, 2) as months"))
    with pytest.raises(ValueError, match=r"FileSink cannot write two columns named 'id'"):
        check_frame(sink, spark.range(1).selectExpr("id", "make_ym_interval(1, 2) as id"))


def test_a_relative_checkpoint_is_where_the_driver_looks_for_its_query_id(spark, tmp_path, monkeypatch):
    """Spark took a relative checkpoint from the JVM's working directory, and the sink read the query id from the
    driver's (a notebook's %cd): it found none, so a restart of a query that died was refused as held."""
    spark.range(3).write.parquet(str(tmp_path / "src"))
    monkeypatch.chdir(tmp_path)
    stream = spark.readStream.schema("id long").parquet(str(tmp_path / "src"))
    FileSink("out").start(stream, "ckpt", trigger={"availableNow": True}).awaitTermination()
    assert (tmp_path / "ckpt" / "metadata").exists()
    assert sorted(FileSink("out").read()["id"]) == [0, 1, 2]
