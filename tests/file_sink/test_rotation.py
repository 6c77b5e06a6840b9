"""Every rolling policy, the open-file cache, and the bucket assigners."""

import os
import re
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from fsspec.implementations.local import LocalFileSystem
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.file_sink import CallableBuckets, ColumnBuckets, DateTimeBuckets, FileSink, RollingPolicy
from storage.file_sink.buckets import hive_escape
from storage.file_sink.directory import max_name_bytes

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


def test_date_time_buckets_take_pandas_ends_of_time_in_any_time_zone(tmp_path):
    """pd.Timestamp.max ("valid to" forever) failed with OutOfBoundsDatetime east of UTC, its local time beyond
    pandas' nanoseconds; and pd.Timestamp.min floored to the second may not wrap around to 2262 (NumPy's cast)."""
    ends = pa.table({"ts": pa.array([pd.Timestamp.min.value, pd.Timestamp.max.value, -500_000_000], pa.timestamp("ns", "UTC"))})
    names = DateTimeBuckets(column="ts", timezone="Asia/Kathmandu", pattern="%Y-%m-%d %H:%M:%S").assign(ends, 0)
    assert names[0].startswith("1677-09-21 05:53:")  # Kathmandu's local mean time, +5:41:16 or so (by tz library)
    assert names[1:] == ["2262-04-12 05:32:16", "1970-01-01 05:29:59"]  # +5:45, and +5:30 in 1970


def test_date_time_buckets_from_processing_time_and_epoch_millis(tmp_path):
    FileSink(str(tmp_path / "p"), buckets=DateTimeBuckets(pattern="%Y%m%d")).write(
        pd.DataFrame({"v": [1]}), processing_time_ms=86_400_000
    )
    assert [n.split("/")[0] for n in finished(tmp_path / "p")] == ["19700102"]
    FileSink(str(tmp_path / "e"), buckets=DateTimeBuckets(column="t")).write(pd.DataFrame({"t": [3_600_000]}))
    assert [n.split("/")[0] for n in finished(tmp_path / "e")] == ["1970-01-01--01"]


MS = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC


@pytest.mark.parametrize(
    "column",
    [
        pa.array([MS, MS + 3_600_000]).dictionary_encode(),
        pa.array([float(MS), MS + 3_600_000.0]).dictionary_encode(),
        pd.Categorical([MS, MS + 3_600_000]),
    ],
    ids=["dictionary<int64>", "dictionary<double>", "pandas Categorical"],
)
def test_date_time_buckets_read_a_dictionary_of_epoch_millis_as_milliseconds(tmp_path, column):
    """A Categorical is not numeric to pandas, so its numbers were read as nanoseconds: every row in 1970-01-01--00."""
    frame = pa.table({"ts": column, "v": [1, 2]}) if isinstance(column, pa.Array) else pd.DataFrame({"ts": column, "v": [1, 2]})
    FileSink(str(tmp_path), buckets=DateTimeBuckets(column="ts")).with_writer_id("w").write(frame, processing_time_ms=0)
    assert finished(tmp_path) == ["2023-11-14--22/part-w-0.jsonl", "2023-11-14--23/part-w-0.jsonl"]


@pytest.mark.parametrize(
    ("values", "value"),
    [([float(MS), float("inf")], "inf"), ([float("-inf"), None], "-inf"), ([MS, 10**17], "100000000000000000"),
     ([-(10**17), MS], "-100000000000000000")],
)
def test_date_time_buckets_refuse_epoch_millis_beyond_pandas_times_naming_the_column_and_value(tmp_path, values, value):
    """pandas' OutOfBoundsDatetime ("cannot convert input with unit 'ms'") named neither the column nor the value."""
    sink = FileSink(str(tmp_path), buckets=DateTimeBuckets(column="ts"))
    with pytest.raises(ValueError, match=rf"DateTimeBuckets column='ts' has the value {value} \(epoch milliseconds\), "
                                         r"which is no time pandas can hold"):
        sink.write(pa.table({"ts": values, "v": [1, 2]}))
    assert tree(tmp_path) == {}


def test_date_time_buckets_refuse_null_timestamps_and_write_nothing(tmp_path):
    sink = FileSink(str(tmp_path), buckets=DateTimeBuckets(column="ts"))
    frame = pd.DataFrame({"ts": pd.to_datetime(["2024-01-01 10:00", None, "2024-01-01 12:00"]), "v": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"column='ts' has 1 null timestamp\(s\) in this batch"):
        sink.write(frame)
    with pytest.raises(ValueError, match=r"column='t' has 2 null"):
        FileSink(str(tmp_path), buckets=DateTimeBuckets(column="t")).write(pd.DataFrame({"t": [None, 5.0, None]}))
    assert tree(tmp_path) == {}


@pytest.mark.parametrize(("values", "kind"), [(["2024-01-01T10:00:00", "a"], "(large_)?string"), ([True, False], "bool")])
def test_date_time_buckets_refuse_a_column_of_another_type_naming_it(tmp_path, values, kind):
    """ISO strings were parsed by pandas (the bucket of '2024-01-01T10:00:00' was 2024-01-01--10) and any other
    string failed the batch with pandas' 'not likely a datetime', naming no column; booleans made 1970 buckets."""
    sink = FileSink(str(tmp_path), buckets=DateTimeBuckets(column="t"))
    with pytest.raises(ValueError, match=rf"DateTimeBuckets column='t' is of type {kind}; it takes timestamps, dates"):
        sink.write(pd.DataFrame({"t": values, "v": [1, 2]}))
    assert tree(tmp_path) == {}
    dates = pd.DataFrame({"t": [date(2024, 1, 2)], "v": [1]})
    sink.with_buckets(DateTimeBuckets(column="t", pattern="%Y-%m-%d")).write(dates)
    assert [n.split("/")[0] for n in finished(tmp_path)] == ["2024-01-02"]


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


def test_pandas_reads_a_column_bucketed_parquet_output_as_written(tmp_path):
    sink = FileSink(str(tmp_path), format="parquet").with_buckets(ColumnBuckets("k"))
    sink.write(pd.DataFrame({"k": [2**62, 7, 7], "name": ["a", None, "c"]}))
    # partitioning=None, as docs/file_sink.md says: the files hold the column that the directory names repeat.
    back = pd.read_parquet(tmp_path, partitioning=None).sort_values("name", na_position="last", ignore_index=True)
    assert back["k"].dtype == "int64" and back["k"].tolist() == [2**62, 7, 7]  # exact, not the names' int32
    assert back["name"].tolist()[:2] == ["a", "c"] and pd.isna(back["name"][2])


UTC = timezone.utc

# Values of each column type ColumnBuckets takes, the session time zone, and the directories Spark's own
# partitionBy names them (test_spark.py checks these against Spark, and that Spark reads both back alike).
SPARK_PARTITION_NAMES = {
    "bool": (pa.array([True, False, None]), "UTC", ["k=true", "k=false", "k=__HIVE_DEFAULT_PARTITION__"]),
    "int8": (pa.array([-3, 0, 100], pa.int8()), "UTC", ["k=-3", "k=0", "k=100"]),
    "int64": (pa.array([-(2**63), 2**63 - 1]), "UTC", ["k=-9223372036854775808", "k=9223372036854775807"]),
    "float64": (
        pa.array([1.0, 0.1, float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e7, 9999999.0, 1e16, 1.5e-5, 0.001,
                  123456.789, 5e-324]),
        "UTC",
        ["k=1.0", "k=0.1", "k=NaN", "k=Infinity", "k=-Infinity", "k=-0.0", "k=0.0", "k=1.0E7", "k=9999999.0",
         "k=1.0E16", "k=1.5E-5", "k=0.001", "k=123456.789", "k=4.9E-324"],
    ),
    "float32": (
        pa.array([0.1, 1e7, 16777216.0, 3.4e38, 1e-45], pa.float32()),
        "UTC",
        ["k=0.1", "k=1.0E7", "k=1.6777216E7", "k=3.4E38", "k=1.4E-45"],
    ),
    "string": (
        pa.array(["a b", "x/_y", "p:q%", "ü€", "", "true"]),
        "UTC",
        ["k=a b", "k=x%2F_y", "k=p%3Aq%25", "k=ü€", "k=__HIVE_DEFAULT_PARTITION__", "k=true"],
    ),
    "date": (pa.array([date(2024, 1, 31), date(1, 1, 1)]), "UTC", ["k=2024-01-31", "k=0001-01-01"]),
    "timestamp UTC": (
        pa.array([datetime(2024, 1, 1, 10, tzinfo=UTC), datetime(2024, 1, 1, 10, 0, 0, 500_000, tzinfo=UTC),
                  datetime(1900, 1, 1, 0, 0, 0, 123, tzinfo=UTC)], pa.timestamp("us", "UTC")),
        "UTC",
        ["k=2024-01-01 10%3A00%3A00", "k=2024-01-01 10%3A00%3A00.5", "k=1900-01-01 00%3A00%3A00.000123"],
    ),
    "timestamp in a Berlin session": (  # in 1850 Berlin kept its local mean time, 53 min 28 s ahead of UTC
        pa.array([datetime(2024, 7, 1, 10, tzinfo=UTC), datetime(1850, 7, 1, 10, tzinfo=UTC)],
                 pa.timestamp("ms", "UTC")),
        "Europe/Berlin",
        ["k=2024-07-01 12%3A00%3A00", "k=1850-07-01 10%3A53%3A28"],
    ),
    "naive timestamp in a Berlin session": (
        pa.array([datetime(2024, 7, 1, 10), datetime(2024, 7, 1, 10, 0, 1, 250_000)]),
        "Europe/Berlin",
        ["k=2024-07-01 10%3A00%3A00", "k=2024-07-01 10%3A00%3A01.25"],
    ),
    "decimal": (
        pa.array([Decimal("1.5"), Decimal("1E-8"), Decimal(-12345678), Decimal(0)], pa.decimal128(20, 10)),
        "UTC",
        ["k=1.5000000000", "k=0.0000000100", "k=-12345678.0000000000", "k=0.0000000000"],
    ),
}


@pytest.mark.parametrize("case", SPARK_PARTITION_NAMES)
def test_column_values_are_named_as_sparks_partition_by_names_them(case):
    values, session_time_zone, names = SPARK_PARTITION_NAMES[case]
    assert ColumnBuckets("k", timezone=session_time_zone).assign(pa.table({"k": values}), 0) == names


# Floored to microseconds, as Spark takes them in (checked against Spark in test_spark.py).
NANOSECONDS = pa.array([1_700_000_000_123_456_789, -1_500], pa.timestamp("ns", "UTC"))
NANOSECOND_NAMES = ["k=2023-11-14 22%3A13%3A20.123456", "k=1969-12-31 23%3A59%3A59.999998"]


def test_nanosecond_timestamps_are_floored_to_microseconds():
    assert ColumnBuckets("k").assign(pa.table({"k": NANOSECONDS}), 0) == NANOSECOND_NAMES


def test_floats_have_the_shortest_digits_that_java_19_prints_not_the_longer_ones_of_java_17():
    float32 = pa.array([145615798000000000.0, 2.0**-126], pa.float32())
    table = pa.table({"k": pa.array([1e23, 2.0**-1069]), "f": float32})
    # Spark on Java 17 writes k=9.999999999999999E22, k=1.58E-322, f=1.45615798E17, f=1.17549435E-38.
    assert ColumnBuckets("k").assign(table, 0) == ["k=1.0E23", "k=1.6E-322"]
    assert ColumnBuckets("f").assign(table, 0) == ["f=1.456158E17", "f=1.1754944E-38"]


def test_categorical_and_all_null_columns_are_named_by_their_values():
    table = pa.table({"c": pa.array([1.5, None, 1.5, -0.0]).dictionary_encode(), "n": pa.nulls(4)})
    assert ColumnBuckets("c").assign(table, 0) == ["c=1.5", "c=__HIVE_DEFAULT_PARTITION__", "c=1.5", "c=-0.0"]
    assert ColumnBuckets("n").assign(table, 0) == ["n=__HIVE_DEFAULT_PARTITION__"] * 4


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        (pa.array([b"\xff"]), "binary"),
        (pa.array([timedelta(seconds=5)]), r"duration\[us\]"),
        (pa.array([datetime(2024, 1, 1).time()]), r"time64\[us\]"),
        (pa.array([[1, 2]]), r"list<item: int64>"),
    ],
)
def test_a_column_whose_names_spark_reads_back_as_other_values_is_refused(tmp_path, values, shown):
    sink = FileSink(str(tmp_path)).with_buckets(ColumnBuckets("k"))
    with pytest.raises(TypeError, match=rf"ColumnBuckets column='k' has type {shown}, whose directory names Spark"):
        sink.write(pa.table({"k": values}))
    assert tree(tmp_path) == {}


def test_a_timestamp_beyond_the_year_9999_in_the_time_zone_is_refused(tmp_path):
    last_second = pa.array([datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)], pa.timestamp("s", "UTC"))
    assert ColumnBuckets("k").assign(pa.table({"k": last_second}), 0) == ["k=9999-12-31 23%3A59%3A59"]
    sink = FileSink(str(tmp_path)).with_buckets(ColumnBuckets("k", timezone="Europe/Berlin"))
    with pytest.raises(ValueError, match=r"column='k' has a timestamp of 253402300799 s since 1970, outside the years"):
        sink.write(pa.table({"k": last_second}))
    assert tree(tmp_path) == {}


def test_column_buckets_refuse_an_unknown_time_zone():
    with pytest.raises(ValueError, match=r"ColumnBuckets timezone='Mars/Olympus' is not a known IANA time zone"):
        ColumnBuckets("k", timezone="Mars/Olympus")


def test_an_open_part_in_a_directory_named_by_an_older_version_is_finished_there(tmp_path):
    # Versions before Spark's names wrote True to k=True; a part left in progress there survives a restart.
    older = CallableBuckets(lambda row, now: f"k={row['k']}")
    sink = sink_at(tmp_path, RollingPolicy(max_part_size=10_000))
    sink.with_buckets(older).writer().write_batch(pa.table({"id": [0, 1], "k": [True, True]}), 0, 0)
    assert list(tree(tmp_path)) == ["k=True/.part-w-0.jsonl.inprogress"]
    writer = sink.with_buckets(ColumnBuckets("k")).writer()
    writer.write_batch(pa.table({"id": [2], "k": [True]}), 1, 0)
    writer.finish(processing_time_ms=0)
    assert finished(tmp_path) == ["k=True/part-w-0.jsonl", "k=true/part-w-0.jsonl"]
    assert sorted(sink.read()["id"]) == [0, 1, 2]


class IntBuckets:
    def assign(self, table, processing_time_ms):
        return [7] * table.num_rows


@pytest.mark.parametrize(
    ("assigner", "match"),
    [
        (CallableBuckets(lambda row, now: "../up"), r"bucket id '../up' from CallableBuckets is refused: a level is"),
        (CallableBuckets(lambda row, now: "a//b"), r"bucket id 'a//b' .* a level is ''"),
        (CallableBuckets(lambda row, now: "/abs"), r"bucket id '/abs' .* a level is ''"),
        # It failed with Python's bare "embedded null byte", naming neither the assigner nor the id.
        (CallableBuckets(lambda row, now: "a\x00b"), r"bucket id 'a\\x00b' from CallableBuckets is refused: it holds a NUL"),
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


@pytest.mark.parametrize("bucket", [None, ["x"], 7], ids=repr)
def test_a_callable_bucket_id_that_is_not_a_str_is_refused_before_anything_is_written(tmp_path, bucket):
    # CallableBuckets made a str of it: rows went to directories named "None" and "['x']".
    with pytest.raises(TypeError, match=rf"bucket id {re.escape(repr(bucket))} from CallableBuckets is refused: a bucket id is a str"):
        FileSink(str(tmp_path / "out")).with_buckets(CallableBuckets(lambda row, now: bucket)).write(batch(0, 3))
    assert tree(tmp_path) == {}


@pytest.mark.parametrize("assigner", [ColumnBuckets("zz"), DateTimeBuckets(column="zz")], ids=type)
def test_a_missing_bucket_column_is_named_on_a_pandas_write_and_nothing_is_lost(tmp_path, assigner):
    # pyarrow's KeyError ('Field "zz" does not exist in schema') came out of the writer; Spark writes named it.
    sink = FileSink(str(tmp_path / "out")).with_buckets(assigner)
    with pytest.raises(ValueError, match=rf"{type(assigner).__name__} column='zz' is not a column of the DataFrame"):
        sink.write(batch(0, 3))
    sink.write(batch(0, 3).to_pandas().assign(zz=pd.Timestamp("2024-01-01")))
    assert len(sink.read()) == 3


def listing(root):
    """``tree(root)`` and the directories below ``root``: a refused batch must not leave even an empty one."""
    below = (os.path.relpath(os.path.join(d, s), root) for d, subdirs, _ in os.walk(root) for s in subdirs)
    return {**tree(root), **{f"{d}/": None for d in below if "_file_sink" not in d.split(os.sep)}}


@pytest.fixture
def name_max_255(tmp_path):
    """``tmp_path`` on a filesystem of 255-byte names (ext4, xfs, tmpfs, APFS), which the values below are made for."""
    if os.pathconf(tmp_path, "PC_NAME_MAX") != 255:
        pytest.skip("the temporary directory's filesystem does not allow 255 bytes in a name")
    return tmp_path


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("a" * 300, 302),  # 'k=' and 300 bytes
        ("/" * 100, 302),  # 100 characters, each escaped as %2F
        ("é" * 128, 258),  # 128 characters of 2 bytes in UTF-8
        ("😀" * 63 + ":", 257),  # 4 bytes each, and ':' escaped as %3A
    ],
    ids=["ascii", "escaped", "two-byte", "four-byte"],
)
def test_a_value_whose_directory_name_is_too_long_refuses_the_batch_before_anything_is_written(
    name_max_255, value, size
):
    # Earlier: OSError 'File name too long' from deep inside the writer, after the directory of 'b' was made.
    sink = FileSink(str(name_max_255)).with_writer_id("w").with_buckets(ColumnBuckets("k"))
    writer = sink.writer()
    writer.write_batch(pa.table({"id": [0], "k": ["a"]}), 0, 0)
    before = listing(name_max_255)
    with pytest.raises(ValueError) as refused:
        writer.write_batch(pa.table({"id": [1, 2, 3], "k": ["b", value, "a"]}), 1, 0)
    message = str(refused.value)
    assert message.startswith(
        f"ColumnBuckets column='k' has a value of {len(value)} characters ({value[:40]!r}...) whose directory "
        f"name, escaped as Spark escapes it, is {size} bytes (UTF-8): more than the 255 bytes the filesystem allows "
        "in a name, so the batch is refused and nothing of it is committed. Bucket by a shorter column derived"
    )
    assert listing(name_max_255) == before  # not a byte appended to k=a's open part, no directory k=b
    assert writer.committed_batch_id == 0
    assert writer.write_batch(pa.table({"id": [1, 3], "k": ["b", "a"]}), 1, 0)
    writer.finish(processing_time_ms=0)
    assert finished(name_max_255) == ["k=a/part-w-0.jsonl", "k=b/part-w-0.jsonl"]
    assert sorted(sink.read()["id"]) == [0, 1, 3]


@pytest.mark.parametrize("value", ["a" * 253, "é" * 126 + "a", "/" * 84 + "a"], ids=["ascii", "two-byte", "escaped"])
def test_a_directory_name_of_exactly_the_limit_is_written(name_max_255, value):
    sink = FileSink(str(name_max_255)).with_buckets(ColumnBuckets("k"))
    sink.write(pa.table({"id": [0], "k": [value]}))
    assert [len(name.split(os.sep)[0].encode()) for name in finished(name_max_255)] == [255]
    assert sink.read()["k"].tolist() == [value]


@settings(max_examples=30, deadline=None)
@given(tail=st.text(st.sampled_from("a/:%é€😀\x01"), max_size=12), spare=st.integers(-4, 4))
def test_a_value_is_written_exactly_when_the_filesystem_takes_its_directory_name(tmp_path_factory, tail, spare):
    """The filesystem judges: a value the sink refuses, before writing anything, is one whose directory it
    would not make; any other is written and read back. Values near the limit, escaped and multibyte."""
    root = tmp_path_factory.mktemp("names")
    limit = os.pathconf(root, "PC_NAME_MAX")
    value = "a" * (limit - 2 - len(hive_escape(tail).encode()) + spare) + tail
    name = f"k={hive_escape(value)}"
    sink = FileSink(str(root / "out")).with_buckets(ColumnBuckets("k"))
    if len(name.encode()) <= limit:
        sink.write(pa.table({"id": [0], "k": [value]}))
        assert sink.read()["k"].tolist() == [value]
        return
    with pytest.raises(ValueError, match=rf"is {len(name.encode())} bytes \(UTF-8\): more than the {limit} bytes"):
        sink.write(pa.table({"id": [0, 1], "k": ["short", value]}))
    assert listing(root / "out") == {}
    with pytest.raises(OSError, match="File name too long"):
        os.mkdir(root / name)


@pytest.mark.parametrize(
    ("assigner", "match"),
    [
        (CallableBuckets(lambda row, now: "x" * 256),
         r"^FileSink bucket directory 'x{40}'\.\.\. \(256 characters\) from CallableBuckets is 256 bytes \(UTF-8\): "
         r"more than the 255 bytes the filesystem allows in a name, so the batch is refused"),
        (CallableBuckets(lambda row, now: f"ok/{'€' * 90}"), r"'€{40}'\.\.\. \(90 characters\) from CallableBuckets is 270"),
        (DateTimeBuckets(pattern="%Y-" + "x" * 300), r"'1970-x{35}'\.\.\. \(305 characters\) from DateTimeBuckets is 305"),
    ],
    ids=["callable", "callable, second level", "date-time pattern"],
)
def test_other_bucket_names_too_long_for_the_filesystem_are_refused_before_anything_is_written(
    name_max_255, assigner, match
):
    sink = FileSink(str(name_max_255)).with_buckets(assigner)
    with pytest.raises(ValueError, match=match):
        sink.write(batch(0, 3), processing_time_ms=0)
    assert listing(name_max_255) == {}


def test_a_part_name_too_long_for_the_filesystem_in_progress_is_refused_before_anything_is_written(name_max_255):
    # Finished, the 240-character prefix makes a name of 250 bytes; in progress, '.<name>.inprogress', of 262.
    sink = FileSink(str(name_max_255)).with_writer_id("w").with_part_names(prefix="p" * 240)
    with pytest.raises(ValueError, match=r"^FileSink part name 'p{40}'\.\.\. is 262 bytes \(UTF-8\) in progress, as "
                       r"\.<name>\.inprogress: more than the 255 bytes the filesystem allows in a name"):
        sink.with_buckets(ColumnBuckets("k")).write(batch(0, 3))
    assert listing(name_max_255) == {}


@pytest.mark.parametrize(
    ("protocol", "limit"),
    [("memory", None), (("s3", "s3a"), None), (("gs", "gcs"), None), (("abfs", "az", "abfss"), None),
     (("hdfs", "arrow_hdfs"), 255), (("webhdfs", "webHDFS"), 255), (("sftp", "ssh"), 255)],
)
def test_filesystems_other_than_the_local_one_limit_names_by_their_kind(protocol, limit):
    class Filesystem:
        pass

    Filesystem.protocol = protocol
    assert max_name_bytes(Filesystem(), "/out") == limit


@pytest.mark.parametrize(("answer", "limit"), [(143, 143), (-1, None), (OSError(22, "Invalid argument"), 255)])
def test_a_local_directory_is_asked_its_limit_from_the_nearest_directory_that_exists(
    tmp_path, monkeypatch, answer, limit
):
    """eCryptfs allows 143 bytes; -1 is no limit; where the filesystem cannot say, the usual 255."""
    asked = []

    def pathconf(path, name):
        asked.append((path, name))
        if isinstance(answer, OSError):
            raise answer
        return answer

    monkeypatch.setattr(os, "pathconf", pathconf)
    assert max_name_bytes(LocalFileSystem(), str(tmp_path / "not" / "yet")) == limit
    assert asked == [(str(tmp_path), "PC_NAME_MAX")]


def test_a_local_sink_refuses_names_at_its_filesystems_own_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "pathconf", lambda path, name: 143)
    sink = FileSink(str(tmp_path / "out")).with_buckets(ColumnBuckets("k"))
    with pytest.raises(ValueError, match=r"value of 150 characters .* is 152 bytes \(UTF-8\): more than the 143 bytes"):
        sink.write(pa.table({"k": ["a" * 150]}))
    assert listing(tmp_path / "out") == {}
    sink.write(pa.table({"k": ["a" * 141]}))
    assert sink.read()["k"].tolist() == ["a" * 141]


def test_an_object_store_takes_a_value_of_any_length_as_a_directory_name():
    sink = FileSink(f"memory://long-names-{uuid.uuid4().hex}/out").with_buckets(ColumnBuckets("k"))
    sink.write(pa.table({"k": ["a" * 300]}))
    assert sink.read()["k"].tolist() == ["a" * 300]


def test_callable_buckets(tmp_path):
    sink = FileSink(str(tmp_path), buckets=CallableBuckets(lambda row, now: "even" if row["id"] % 2 == 0 else "odd"))
    sink.write(batch(0, 5))
    assert sorted({n.split("/")[0] for n in finished(tmp_path)}) == ["even", "odd"]
