"""Every rolling policy, the open-file cache, and the bucket assigners."""

import os

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.file_sink import CallableBuckets, ColumnBuckets, DateTimeBuckets, FileSink, RollingPolicy

from .helpers import batch, tree


def sink_at(tmp_path, policy, **kw):
    return FileSink(str(tmp_path), **kw).with_writer_id("w").with_rolling_policy(policy)


def finished(tmp_path):
    return sorted(n for n in tree(tmp_path) if ".inprogress" not in n)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6), limit=st.integers(30, 400))
def test_size_policy_rolls_at_the_limit_and_overshoots_by_at_most_one_row(tmp_path_factory, sizes, limit):
    root = tmp_path_factory.mktemp("size")
    sink = sink_at(root, RollingPolicy(max_part_size=limit))
    writer, start = sink.writer(), 0
    for i, n in enumerate(sizes):
        writer.write_batch(batch(start, n), i, 0, end_of_input=i == len(sizes) - 1)
        start += n
    longest_row = max(len(f'{{"id":{i},"k":"b0","s":"row-{i}"}}\n') for i in range(max(start, 1)))
    files = tree(root)
    names = finished(root)
    assert len(names) == len(files)  # end of input finished every part
    for name in names:  # the last part may be short; none is longer than limit plus one row
        assert len(files[name]) < limit + longest_row
    for name in sorted(names, key=lambda n: int(n.split("-")[2].split(".")[0]))[:-1]:
        assert len(files[name]) >= limit
    assert sink.read().get("id", pd.Series(dtype=int)).tolist() == list(range(start))


def test_max_batches_rolls_after_the_nth_batch_that_wrote(tmp_path):
    writer = sink_at(tmp_path, RollingPolicy(max_batches=2)).writer()
    for i in range(5):
        writer.write_batch(batch(i, 1), i, 0)
    assert finished(tmp_path) == ["part-w-0.jsonl", "part-w-1.jsonl"]
    assert ".part-w-2.jsonl.inprogress" in tree(tmp_path)


def test_rollover_interval_counts_from_the_part_opening(tmp_path):
    writer = sink_at(tmp_path, RollingPolicy(rollover_ms=10_000)).writer()
    writer.write_batch(batch(0, 1), 0, 0)
    writer.write_batch(batch(1, 1), 1, 9_999)
    assert finished(tmp_path) == []
    writer.write_batch(batch(2, 1), 2, 10_000)
    assert finished(tmp_path) == ["part-w-0.jsonl"]


def test_inactivity_rolls_an_idle_part_even_in_an_empty_batch(tmp_path):
    sink = sink_at(tmp_path, RollingPolicy(inactivity_ms=5_000))
    writer = sink.writer()
    writer.write_batch(batch(0, 2), 0, 0)
    writer.write_batch(batch(2, 1), 1, 4_000)  # written again: the idle clock restarts
    writer.write_batch(batch(0, 0), 2, 8_999)
    assert finished(tmp_path) == []
    writer.write_batch(batch(0, 0), 3, 9_000)
    assert finished(tmp_path) == ["part-w-0.jsonl"]
    assert sink.read()["id"].tolist() == [0, 1, 2]


def test_every_batch_rolls_each_batch_that_wrote(tmp_path):
    writer = sink_at(tmp_path, RollingPolicy.on_every_batch()).writer()
    for i in range(3):
        writer.write_batch(batch(i, 2), i, 0)
    assert finished(tmp_path) == ["part-w-0.jsonl", "part-w-1.jsonl", "part-w-2.jsonl"]


def test_one_open_file_with_interleaved_buckets(tmp_path):
    sink = sink_at(tmp_path, RollingPolicy(max_part_size=10_000)).with_buckets(ColumnBuckets("k"))
    sink = sink.with_open_files(1)
    writer = sink.writer()
    for i in range(4):
        writer.write_batch(batch(3 * i, 3, buckets=3), i, 0)
        assert writer.open_handle_count <= 1
    writer.write_batch(batch(12, 3, buckets=3), 4, 0, end_of_input=True)
    assert finished(tmp_path) == [f"k=b{b}/part-w-0.jsonl" for b in range(3)]
    frame = sink.read()
    for b in range(3):  # each bucket holds its rows, in order, each once
        assert frame[frame["k"] == f"b{b}"]["id"].tolist() == list(range(b, 15, 3))


def test_open_streams_expire_after_idle_processing_time(tmp_path):
    sink = sink_at(tmp_path, RollingPolicy(max_part_size=10_000)).with_open_files(10, expire_after_ms=1_000)
    writer = sink.with_buckets(ColumnBuckets("k")).writer()
    writer.write_batch(batch(0, 2, buckets=2), 0, 0)
    assert writer.open_handle_count == 2
    writer.write_batch(pa.table({"id": [2], "k": ["b0"], "s": ["x"]}), 1, 1_000)
    assert writer.open_handle_count == 1  # b1's stream expired and was closed; its part stays open


def test_date_time_buckets_from_event_time_in_a_time_zone(tmp_path):
    ts = pd.to_datetime(["2024-03-01 22:30", "2024-03-01 23:10", "2024-03-02 00:05"]).tz_localize("UTC")
    frame = pd.DataFrame({"ts": ts, "v": [1, 2, 3]})
    sink = FileSink(str(tmp_path)).with_writer_id("w")
    sink.with_buckets(DateTimeBuckets(column="ts", timezone="Europe/Berlin")).write(frame)
    assert finished(tmp_path) == [
        "2024-03-01--23/part-w-0.jsonl",
        "2024-03-02--00/part-w-0.jsonl",
        "2024-03-02--01/part-w-0.jsonl",
    ]


def test_date_time_buckets_from_processing_time_and_epoch_millis(tmp_path):
    FileSink(str(tmp_path / "p"), buckets=DateTimeBuckets(pattern="%Y%m%d")).write(
        pd.DataFrame({"v": [1]}), processing_time_ms=86_400_000
    )
    assert [n.split("/")[0] for n in finished(tmp_path / "p")] == ["19700102"]
    FileSink(str(tmp_path / "e"), buckets=DateTimeBuckets(column="t")).write(pd.DataFrame({"t": [3_600_000]}))
    assert [n.split("/")[0] for n in finished(tmp_path / "e")] == ["1970-01-01--01"]


def test_date_time_buckets_refuse_null_timestamps_and_write_nothing(tmp_path):
    sink = FileSink(str(tmp_path), buckets=DateTimeBuckets(column="ts"))
    frame = pd.DataFrame({"ts": pd.to_datetime(["2024-01-01 10:00", None, "2024-01-01 12:00"]), "v": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"column='ts' has 1 null timestamp\(s\) in this batch"):
        sink.write(frame)
    with pytest.raises(ValueError, match=r"column='t' has 2 null"):
        FileSink(str(tmp_path), buckets=DateTimeBuckets(column="t")).write(pd.DataFrame({"t": [None, 5.0, None]}))
    assert tree(tmp_path) == {}


def test_column_values_are_escaped_as_hive_does_and_read_back_as_they_were(tmp_path):
    values = ["a", "x/_y", "../../escaped", "p:q%", ".dot"]
    sink = FileSink(str(tmp_path / "out"), format="parquet").with_writer_id("w").with_buckets(ColumnBuckets("k"))
    sink.write(pa.table({"k": values, "v": range(5)}))
    directories = ["k=..%2F..%2Fescaped", "k=.dot", "k=a", "k=p%3Aq%25", "k=x%2F_y"]  # one level each
    assert finished(tmp_path / "out") == [f"{d}/part-w-0.parquet" for d in directories]
    assert os.listdir(tmp_path) == ["out"]  # nothing climbed out
    assert sorted(sink.read()["v"]) == list(range(5))
    hive = ds.partitioning(pa.schema([("k", pa.string())]), flavor="hive")
    fragments = ds.dataset(str(tmp_path / "out"), format="parquet", partitioning=hive).get_fragments()
    decoded = [ds.get_partition_keys(f.partition_expression)["k"] for f in fragments]
    assert sorted(decoded) == sorted(values)  # pyarrow's hive partitioning decodes the names back


def test_null_and_empty_column_values_are_hive_default_partitions_read_back_as_null(tmp_path):
    sink = FileSink(str(tmp_path), format="parquet").with_writer_id("w").with_buckets(ColumnBuckets("k"))
    sink.write(pa.table({"k": ["a", None, "None", ""], "v": range(4)}))
    assert finished(tmp_path) == [  # the null no longer shares the directory of the text "None"
        "k=None/part-w-0.parquet", "k=__HIVE_DEFAULT_PARTITION__/part-w-0.parquet", "k=a/part-w-0.parquet"
    ]
    hive = ds.partitioning(pa.schema([("k", pa.string())]), flavor="hive")
    back = ds.dataset(str(tmp_path), format="parquet", partitioning=hive).to_table().sort_by("v")
    assert back.column("k").to_pylist() == ["a", None, "None", None]


class IntBuckets:
    def assign(self, table, processing_time_ms):
        return [7] * table.num_rows


@pytest.mark.parametrize(
    ("assigner", "match"),
    [
        (CallableBuckets(lambda row, now: "../up"), r"bucket id '../up' from CallableBuckets is refused: a level is"),
        (CallableBuckets(lambda row, now: "a//b"), r"bucket id 'a//b' .* a level is ''"),
        (CallableBuckets(lambda row, now: "/abs"), r"bucket id '/abs' .* a level is ''"),
        (CallableBuckets(lambda row, now: "x/_y"), r"bucket id 'x/_y' .* level '_y' starts with '_', so readers"),
        (CallableBuckets(lambda row, now: ".hidden"), r"level '.hidden' starts with '.'"),
        (DateTimeBuckets(pattern="_%Y"), r"bucket id '_1970' from DateTimeBuckets is refused"),
    ],
)
def test_unsafe_bucket_ids_are_refused_before_anything_is_written(tmp_path, assigner, match):
    sink = FileSink(str(tmp_path / "out")).with_buckets(assigner)
    with pytest.raises(ValueError, match=match):
        sink.write(batch(0, 3), processing_time_ms=0)
    assert tree(tmp_path) == {}


def test_a_bucket_id_that_is_not_a_str_is_refused(tmp_path):
    with pytest.raises(TypeError, match=r"bucket id 7 from IntBuckets is refused: a bucket id is a str"):
        FileSink(str(tmp_path)).with_buckets(IntBuckets()).write(batch(0, 3))
    assert tree(tmp_path) == {}


def test_callable_buckets(tmp_path):
    sink = FileSink(str(tmp_path), buckets=CallableBuckets(lambda row, now: "even" if row["id"] % 2 == 0 else "odd"))
    sink.write(batch(0, 5))
    assert sorted({n.split("/")[0] for n in finished(tmp_path)}) == ["even", "odd"]
