"""JSON lines and CSV parts read back as the types written: each part's schema is in the commit records."""

import datetime
import json
import warnings
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.file_sink import DamagedCommitRecordError, FileSink, RollingPolicy
from storage.file_sink.formats import JsonLines
from storage.file_sink.frames import as_frame
from storage.file_sink.reading import concat_parts
from storage.file_sink.typed_text import json_table

from .helpers import as_version_4

MICROS = st.integers(-(70 * 365 * 86_400 * 10**6), 230 * 365 * 86_400 * 10**6)  # 1900 to 2200
DAY_US = 86_400 * 10**6


def _nullable(values):
    return st.one_of(st.none(), values)


KINDS = {
    "int": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "uint": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "float": (pa.float64(), st.floats(allow_nan=False, allow_infinity=False)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False, allow_infinity=False)),
    "text": (pa.string(), st.text(max_size=8) | st.sampled_from(["02134", "", "NA", "null", "nan", "1e3", "a,b"])),
    "flag": (pa.bool_(), st.booleans()),
    "ts_us": (pa.timestamp("us"), MICROS),
    "ts_ns": (pa.timestamp("ns"), MICROS.map(lambda us: us * 1000)),
    "ts_s": (pa.timestamp("s"), MICROS.map(lambda us: us // 10**6)),
    "ts_utc": (pa.timestamp("us", "UTC"), MICROS),
    "ts_paris": (pa.timestamp("ms", "Europe/Paris"), MICROS.map(lambda us: us // 1000)),
    "date": (pa.date32(), st.integers(-25_000, 80_000)),
    "decimal": (pa.decimal128(12, 7), st.decimals(min_value=-99_999, max_value=99_999, places=7,
                                                  allow_nan=False, allow_infinity=False)),
    "time": (pa.time64("us"), st.integers(0, DAY_US - 1)),
    "duration": (pa.duration("us"), st.integers(-(10**15), 10**15)),
    "category": (pa.dictionary(pa.int32(), pa.string()), st.sampled_from(["x", "y", "EARLY"])),
    "days_category": (pa.dictionary(pa.int8(), pa.date32()), st.integers(0, 20_000)),
    "decimal256": (pa.decimal256(60, 10), st.decimals(min_value=-(10**20), max_value=10**20, places=10,
                                                      allow_nan=False, allow_infinity=False)),
}
NESTED = {  # JSON lines only: CSV has no nested values
    "times": (pa.list_(pa.timestamp("us")), st.lists(_nullable(MICROS), max_size=3)),
    "pair": (pa.struct([("day", pa.date32()), ("amount", pa.decimal128(5, 2))]),
             st.fixed_dictionaries({"day": _nullable(st.integers(0, 20_000)),
                                    "amount": _nullable(st.decimals(-999, 999, places=2))})),
    "bytes": (pa.binary(), st.binary(max_size=6)),  # base64 in a JSON column
    "byte_list": (pa.list_(pa.binary()), st.lists(st.text(max_size=4).map(str.encode), max_size=2)),
    "halves": (pa.list_(pa.float16()), st.lists(_nullable(st.floats(width=16, allow_nan=False, allow_infinity=False)
                                                          .map(np.float16)), max_size=3)),
    "times_category": (pa.dictionary(pa.int32(), pa.timestamp("us", "UTC")), MICROS),
}


def table_of(data, kinds, catalogue, n):
    columns = {"id": pa.array(range(n), pa.int64())}  # two columns at least: see the one-column CSV test
    for i, kind in enumerate(kinds):
        arrow_type, values = catalogue[kind]
        drawn = data.draw(st.lists(_nullable(values), min_size=n, max_size=n), label=kind)
        if pa.types.is_dictionary(arrow_type):  # pyarrow makes dictionaries of Python values for text only
            columns[f"c{i}_{kind}"] = pa.array(drawn, arrow_type.value_type).dictionary_encode().cast(arrow_type)
        else:
            columns[f"c{i}_{kind}"] = pa.array(drawn, arrow_type)
    return pa.table(columns)


def write_batches(sink, frames, first_batch_id=0, end_of_input=False):
    """One writer (one process's run) writing ``frames`` as consecutive batches."""
    writer = sink.writer()
    try:
        for i, frame in enumerate(frames):
            writer.write_batch(frame, first_batch_id + i, 0, end_of_input=end_of_input and i == len(frames) - 1)
    finally:
        writer.close()


def assert_reads_back(back: pd.DataFrame, table: pa.Table) -> None:
    """What ``read()`` gives is what a Parquet part of the table gives: the table's own pandas conversion."""
    pd.testing.assert_frame_equal(back, as_frame(table), check_categorical=False)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(["jsonl", "csv"]), kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=4),
       data=st.data())
def test_json_lines_and_csv_read_back_the_types_written(tmp_path_factory, fmt, kinds, data):
    """Before, timestamps, decimals and bytes came back as text from JSON lines, and CSV inferred its types
    ("02134" came back 2134, "NA" a null, decimals as floats)."""
    catalogue = {**KINDS, **NESTED} if fmt == "jsonl" else KINDS
    if fmt == "jsonl":
        kinds = kinds + data.draw(st.lists(st.sampled_from(sorted(NESTED)), max_size=2), label="nested")
    n = data.draw(st.integers(1, 12), label="rows")
    table = table_of(data, kinds, catalogue, n)
    sink = FileSink(str(tmp_path_factory.mktemp(fmt)), format=fmt)
    sink.write(table)
    assert_reads_back(sink.read(), table)


def parts_of(batches):
    """The model of an open part: consecutive batches share one while their schemas unify with null columns taking
    the other's type; a batch of another type starts the next."""
    parts: list[list[pa.Table]] = []
    for table in batches:
        try:
            schema = pa.unify_schemas([parts[-1][0].schema, table.schema], promote_options="default") if parts else None
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            schema = None
        if schema is None:
            parts.append([table])
        else:
            parts[-1] = [t.cast(schema) for t in [*parts[-1], table]]
    return [pa.concat_tables(tables) for tables in parts]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(["jsonl", "csv"]), kinds=st.lists(st.sampled_from(sorted(KINDS) + ["null"]), min_size=1,
                                                             max_size=4), data=st.data())
def test_batches_of_changing_types_read_back_as_the_parts_they_make(tmp_path_factory, fmt, kinds, data):
    """One open part over several batches whose column changes type (or is all null): read() gives each part's
    rows under the schema that holds them, concatenated as Parquet parts of the same tables would be (their
    categories joined, as read() joins them)."""
    batches = []
    for kind in kinds:
        n = data.draw(st.integers(1, 4), label="rows")
        if kind == "null":
            batches.append(pa.table({"id": pa.array(range(n), pa.int64()), "v": pa.nulls(n)}))
        else:
            batches.append(table_of(data, [kind], KINDS, n).rename_columns(["id", "v"]))
    sink = FileSink(str(tmp_path_factory.mktemp(fmt)), format=fmt).with_rolling_policy(RollingPolicy(max_batches=9))
    write_batches(sink, batches, end_of_input=True)
    assert len(sink.finished_files()) == len(parts_of(batches))
    with warnings.catch_warnings():  # pandas 2 on concatenating an all-null column: read() concatenates so too
        warnings.simplefilter("ignore", FutureWarning)
        expected = concat_parts([as_frame(part) for part in parts_of(batches)])
        back = sink.read()
    pd.testing.assert_frame_equal(back, expected, check_categorical=False)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_column_whose_type_changed_between_parts_keeps_each_parts_values(tmp_path, fmt):
    """Integers in one part, times below the microsecond in the next: the integers stay integers (Arrow would take
    them for nanoseconds of a time), as pd.concat joins the two."""
    sink = FileSink(str(tmp_path), format=fmt).with_rolling_policy(RollingPolicy.on_every_batch())
    write_batches(sink, [pa.table({"id": [0], "c": [5]}), pa.table({"id": [1], "c": pa.array([1], pa.time64("ns"))})])
    back = sink.read().sort_values("id")
    assert len(sink.finished_files()) == 2
    assert back["c"].iloc[0] == 5 and isinstance(back["c"].iloc[0], (int, np.integer))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(["jsonl", "csv", "parquet"]), kinds=st.lists(st.sampled_from(sorted(KINDS) + ["nanos"]),
                                                                        min_size=1, max_size=3), data=st.data())
def test_rows_cut_into_parts_anywhere_read_back_as_one_part_of_them_does(tmp_path_factory, fmt, kinds, data):
    """How a column's rows fall into parts may not change what read() gives: a part of whole microseconds beside one
    of a nanosecond lost the nanosecond, a category all null in one part made the column plain values."""
    catalogue = {**KINDS, "nanos": (pa.time64("ns"), st.integers(0, DAY_US * 1000 - 1))}
    if fmt == "jsonl":  # JSON lines writes times in microseconds, refusing a nanosecond
        kinds = [kind for kind in kinds if kind != "nanos"] or ["int"]
    n = data.draw(st.integers(2, 10), label="rows")
    table = table_of(data, kinds, catalogue, n)
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), min_size=1, max_size=3), label="cuts"))
    split = FileSink(str(tmp_path_factory.mktemp(fmt)), format=fmt).with_rolling_policy(RollingPolicy.on_every_batch())
    write_batches(split, [table.slice(start, end - start) for start, end in zip([0, *cuts], [*cuts, n])])
    whole = FileSink(str(tmp_path_factory.mktemp(fmt)), format=fmt)
    whole.write(table)
    with warnings.catch_warnings():  # pandas 2 on concatenating an all-null column
        warnings.simplefilter("ignore", FutureWarning)
        back = split.read().sort_values("id", ignore_index=True)
    assert len(split.finished_files()) == len(cuts) + 1
    pd.testing.assert_frame_equal(back, whole.read(), check_categorical=False)


def test_csv_keeps_nans_and_infinities_and_json_lines_write_them_as_null(tmp_path):
    table = pa.table({"id": [0, 1, 2], "x": pa.array([float("nan"), float("inf"), None], pa.float64())})
    csv_sink = FileSink(str(tmp_path / "csv"), format="csv")
    csv_sink.write(table)
    assert_reads_back(csv_sink.read(), table)
    json_sink = FileSink(str(tmp_path / "jsonl"))
    json_sink.write(table)
    assert json_sink.read()["x"].isna().tolist() == [True, True, True]  # JSON has no NaN: documented


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_parts_schema_widens_as_batches_append_to_it(tmp_path, fmt):
    """A column all null in the first batch takes the type of the values after it: one part."""
    sink = FileSink(str(tmp_path), format=fmt).with_rolling_policy(RollingPolicy(max_batches=3))
    first = pd.DataFrame({"k": [1, 2], "v": [None, None], "when": pd.to_datetime(["2024-01-01", None])})
    write_batches(sink, [
        first,
        pd.DataFrame({"k": [3, 4], "v": [5, 6], "when": pd.to_datetime(["2024-01-02 03:04:05.000006", None])}),
        pd.DataFrame({"k": [5], "v": [2**53 + 1], "when": pd.to_datetime(["2024-01-03"])}),
    ])
    assert len(sink.finished_files()) == 1
    back = sink.read()
    assert back["v"].tolist()[2:] == [5, 6, 2**53 + 1] and back["v"].isna().tolist()[:2] == [True, True]
    assert back["when"].dtype == first["when"].dtype  # nanoseconds on pandas 2, microseconds on pandas 3
    assert back["when"].tolist()[::2] == [pd.Timestamp("2024-01-01"), pd.Timestamp("2024-01-02 03:04:05.000006"),
                                          pd.Timestamp("2024-01-03")]


BATCH_PAIRS = {  # a promoted type would not hold both: int64 for 2**64 - 1, float64 for 2**53 + 1, bytes for text
    "int then uint": (pa.table({"v": pa.array([1], pa.int64())}), pa.table({"v": pa.array([2**64 - 1], pa.uint64())})),
    "int then float": (pa.table({"v": [2**53 + 1]}), pa.table({"v": [0.5]})),
    "text then bytes": (pa.table({"v": ["YWI="]}), pa.table({"v": [b"ab"]})),
    "bytes then text": (pa.table({"v": [b"ab"]}), pa.table({"v": ["YWI="]})),
    "decimal then float": (pa.table({"v": [Decimal("0.10")]}), pa.table({"v": [0.5]})),
    "numbers then text": (pa.table({"v": [1, 2]}), pa.table({"v": ["02134"]})),
    "seconds then nanoseconds": (pa.table({"v": pa.array([1], pa.timestamp("s"))}),
                                 pa.table({"v": pa.array([1000], pa.timestamp("ns"))})),
}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("pair", sorted(BATCH_PAIRS))
def test_a_batch_of_another_type_starts_a_new_part(tmp_path, fmt, pair):
    """Each part reads back under a schema that holds its values exactly; read() concatenates them as it does
    Parquet parts of the two tables."""
    first, second = BATCH_PAIRS[pair]
    sink = FileSink(str(tmp_path), format=fmt).with_rolling_policy(RollingPolicy(max_batches=3))
    write_batches(sink, [first, second], end_of_input=True)
    assert len(sink.finished_files()) == 2
    pd.testing.assert_frame_equal(sink.read(), pd.concat([as_frame(first), as_frame(second)], ignore_index=True))


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_schema_survives_restarts_manifests_and_compaction(tmp_path, fmt):
    """An open part adopted by the next writer (each batch here) keeps its schema, widened where a column was all
    null before; manifests (every 10 commits) and compaction's merged parts keep each part's."""
    policy = RollingPolicy(max_batches=2)
    expected = []
    for batch_id in range(22):
        amount = None if batch_id % 2 == 0 else Decimal(batch_id) / 8  # null first in each part, then decimals
        frame = pa.table({"k": [batch_id], "amount": pa.array([amount], pa.null() if amount is None else
                                                               pa.decimal128(10, 3)),
                          "day": [datetime.date(2024, 1, 1)]})
        write_batches(FileSink(str(tmp_path), format=fmt).with_rolling_policy(policy), [frame], batch_id)
        expected.append(frame.cast(pa.schema([("k", pa.int64()), ("amount", pa.decimal128(10, 3)),
                                              ("day", pa.date32())])))
    sink = FileSink(str(tmp_path), format=fmt)
    assert len(sink.finished_files()) == 11
    assert any(p.name.endswith(".manifest") for p in (tmp_path / "_file_sink").iterdir())
    expected_table = pa.concat_tables(expected)
    before = sink.read().sort_values("k", ignore_index=True)
    assert_reads_back(before, expected_table)
    assert sink.compact().replaced > 1
    assert_reads_back(sink.read().sort_values("k", ignore_index=True), expected_table)


def test_a_directory_written_before_schemas_were_kept_reads_as_before_and_its_open_part_stays_so(tmp_path):
    """Version 4 records name no schemas: its parts read as JSON has them, and rows appended to its open part
    too (their schema would not cover the rows before them)."""
    policy = RollingPolicy(max_batches=2)
    write_batches(FileSink(str(tmp_path)).with_rolling_policy(policy), [pd.DataFrame({"when": pd.to_datetime(["2024-01-01"])})])
    as_version_4(tmp_path / "_file_sink" / f"{0:020d}.json")
    write_batches(FileSink(str(tmp_path)).with_rolling_policy(policy), [pd.DataFrame({"when": pd.to_datetime(["2024-01-02"])})],
                  1)
    assert FileSink(str(tmp_path)).read()["when"].tolist() == ["2024-01-01T00:00:00.000000",
                                                               "2024-01-02T00:00:00.000000"]
    last = json.loads((tmp_path / "_file_sink" / f"{1:020d}.json").read_text())
    assert [entry[3] for entry in last["finished"]] == [""] and last["schemas"] == {}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_parts_written_before_schemas_were_kept_read_as_the_types_of_a_later_part_of_their_columns(tmp_path, fmt):
    """A sink written on across the upgrade to version 5 read back with columns of both: the old parts' timestamps as
    ISO strings beside the new ones' Timestamps (``sort_values`` failed), integers with a null as floats, lists as
    Python lists beside arrays. An old part of other columns still reads as its text gives it."""
    def batch(i: int) -> pd.DataFrame:
        lists = {"vs": [[i, i + 1]] * 2} if fmt == "jsonl" else {}  # CSV holds no nested values
        return pd.DataFrame({"id": [i, i], "n": pd.array([None, i], "Int64"),
                             "ts": [pd.Timestamp("2026-11-22 12:00", tz="UTC") + pd.Timedelta(minutes=i)] * 2,
                             "day": [datetime.date(2026, 11, 22 + i)] * 2, **lists})
    old, new, every_batch = tmp_path / "across", tmp_path / "new", RollingPolicy(max_batches=1)
    write_batches(FileSink(str(old), format=fmt).with_rolling_policy(every_batch), [batch(0), batch(1)])
    write_batches(FileSink(str(old), format=fmt).with_rolling_policy(every_batch), [pd.DataFrame({"other": ["x"]})], 2)
    for record in sorted((old / "_file_sink").glob("*.json")):
        as_version_4(record)
    write_batches(FileSink(str(old), format=fmt).with_rolling_policy(every_batch), [batch(3)], 3)
    write_batches(FileSink(str(new), format=fmt).with_rolling_policy(every_batch), [batch(0), batch(1), batch(3)])
    across = FileSink(str(old), format=fmt).read()
    expected = FileSink(str(new), format=fmt).read()
    assert across["other"].tolist()[4] == "x" and across["id"].drop(index=4).tolist() == [0, 0, 1, 1, 3, 3]
    typed = across.drop(index=4, columns=["other", "id"]).reset_index(drop=True)  # id: a float beside the NaN of row 4
    expected = expected.drop(columns="id")
    assert typed.dtypes.to_dict() == expected.dtypes.to_dict()
    assert typed.map(repr).values.tolist() == expected.map(repr).values.tolist()


@pytest.mark.parametrize("fmt", ["parquet", "avro", "jsonl"])
def test_parts_of_other_columns_read_back_each_column_exact_and_of_its_type(tmp_path, fmt):
    """A column some parts lack was made floats by ``pd.concat``: 2**53 + 1 read back as 2**53, a bool as an object,
    and on pandas 2 an ``Int64`` too, with a FutureWarning (all-NA entries) on every read."""
    sink = FileSink(str(tmp_path), format=fmt).with_rolling_policy(RollingPolicy.on_every_batch())
    sink.write(pd.DataFrame({"id": [2**53 + 1], "n": pd.array([None], "Int64"), "on": [True]}))
    sink.write(pd.DataFrame({"id": [2**53 + 3], "n": pd.array([5], "Int64"), "on": [False]}))
    sink.write(pd.DataFrame({"other": ["x"]}))
    back = sink.read()
    assert [str(back[name].dtype) for name in ("id", "n", "on")] == ["Int64", "Int64", "boolean"]
    assert back[["id", "n", "on"]].astype(object).where(back[["id", "n", "on"]].notna(), None).values.tolist() == [
        [2**53 + 1, None, True], [2**53 + 3, 5, False], [None, None, None]]
    assert [None if pd.isna(v) else v for v in back["other"]] == [None, None, "x"]


@pytest.mark.parametrize("fmt", ["parquet", "orc", "avro", "jsonl", "csv"])
@pytest.mark.parametrize("tz", [None, "UTC", "Asia/Kolkata"])
def test_every_format_reads_timestamps_back_in_the_unit_written(tmp_path, fmt, tz):
    """Parquet stores seconds as milliseconds (pyarrow reads them so), Avro as microseconds, ORC every unit as
    nanoseconds: read() gave those units back."""
    seconds = [0, 1_700_000_000, None, -86_400 * 365 * 60]
    table = pa.table({unit: pa.array([None if s is None else s * scale for s in seconds], pa.timestamp(unit, tz))
                      for unit, scale in {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}.items()})
    sink = FileSink(str(tmp_path), format=fmt)
    sink.write(table)
    assert_reads_back(sink.read(), table)


def test_json_lines_read_back_times_beyond_four_digit_years_and_before_1970():
    micros = [253_402_300_800_000_000, -62_167_219_200_000_001, -62_135_596_800_000_000, None, -1]
    days = [2_932_897, -720_990, 0, None, -1]
    table = pa.table({"ts": pa.array(micros, pa.timestamp("us", "UTC")), "naive": pa.array(micros, pa.timestamp("us")),
                      "day": pa.array(days, pa.date32()), "ms_day": pa.array(days, pa.date32()).cast(pa.date64())})
    body, _ = JsonLines().encode(table)  # years 10000 and -1 are beyond Python's datetimes: compared in Arrow
    assert json_table([json.loads(line) for line in body.splitlines()], table.schema).equals(table)


def test_a_schema_the_records_name_without_its_text_is_named_as_damage(tmp_path):
    sink = FileSink(str(tmp_path))
    sink.write(pd.DataFrame({"v": [1]}))
    record = tmp_path / "_file_sink" / f"{0:020d}.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "schemas": {}}))
    with pytest.raises(DamagedCommitRecordError, match=r"commit records name schema [0-9a-f]{16} for a part but hold no"):
        sink.read()


@pytest.mark.parametrize("column", [pa.array(["ab", "", None], pa.large_string()), pa.array([b"ab", b"", None]),
                                    pa.array(["ab", "", None]).dictionary_encode()], ids=["large_string", "binary",
                                                                                          "category"])
def test_a_one_column_csv_of_text_or_bytes_reads_back_an_empty_value_as_empty(tmp_path, column):
    """pandas 3's str column is a large_string in Arrow: its "" came back a null. A null there is written as an
    empty value too (CSV has one text for both): both read back empty."""
    sink = FileSink(str(tmp_path), format="csv")
    sink.write(pa.table({"c": column}))
    assert [v for v in sink.read()["c"]] == [column[0].as_py(), column[1].as_py(), column[1].as_py()]


def test_csv_reads_back_half_floats(tmp_path):
    """pyarrow's CSV reader makes no half floats: every read() of the sink failed."""
    table = pa.table({"id": [1, 2], "h": pa.array(np.array([1.5, -0.25], np.float16))})
    sink = FileSink(str(tmp_path), format="csv")
    sink.write(table)
    assert_reads_back(sink.read(), table)


def test_csv_writes_zoned_timestamps_as_utc_instants_so_offsets_with_seconds_read_back_exactly(tmp_path):
    """pyarrow's CSV writer gave New York's local time of 1800 with its offset cut to minutes (-0456 for
    -04:56:02): read back 2 seconds early."""
    table = pa.table({"ts": pa.array([-5_364_619_200, 0], pa.timestamp("s", "America/New_York"))})
    sink = FileSink(str(tmp_path), format="csv")
    sink.write(table)
    (part,) = sink.finished_files()
    assert Path(part).read_text() == "ts\n1800-01-01 12:00:00Z\n1970-01-01 00:00:00Z\n"
    assert_reads_back(sink.read(), table)


def test_csv_names_a_column_of_bytes_that_are_not_utf8(tmp_path):
    sink = FileSink(str(tmp_path), format="csv")
    with pytest.raises(ValueError, match=r"csv format cannot write column 'b': its bytes are not all UTF-8"):
        sink.write(pa.table({"n": [1], "b": [b"\xff"]}))
    assert sink.finished_files() == []


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_ordered_category_reads_back_unordered_of_the_values_its_rows_hold(tmp_path, fmt):
    """Text holds a category's values, not its categories: their order and the unused ones are not in the file.
    Read back as ordered in the order the values come, max() was wrong."""
    frame = pd.DataFrame({"level": pd.Categorical(["high", "low", "high"], categories=["low", "mid", "high"],
                                                  ordered=True)})
    sink = FileSink(str(tmp_path), format=fmt)
    sink.write(frame)
    back = sink.read()["level"]
    assert back.dtype == pd.CategoricalDtype(["high", "low"], ordered=False)
    assert back.tolist() == ["high", "low", "high"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "avro"])  # ORC holds a category's values, read as values
def test_a_category_split_across_parts_reads_back_a_category_of_every_parts_values(tmp_path, fmt):
    """Each part holds the categories of its own rows, and ``pd.concat`` of categories that differ gives plain
    values: the column came back a category or not by how its rows were cut into parts."""
    sink = FileSink(str(tmp_path), format=fmt).with_rolling_policy(RollingPolicy.on_every_batch())
    write_batches(sink, [pd.DataFrame({"id": [0, 1], "c": pd.Categorical(["x", "y"])}),
                         pd.DataFrame({"id": [2, 3], "c": pd.Categorical(["z", None])})])
    back = sink.read().sort_values("id")
    assert len(sink.finished_files()) == 2
    assert isinstance(back["c"].dtype, pd.CategoricalDtype) and set(back["c"].cat.categories) == {"x", "y", "z"}
    assert back["c"].tolist()[:3] == ["x", "y", "z"] and pd.isna(back["c"].tolist()[3])


SPLIT_COLUMNS = {  # the first part's values pandas holds as Python objects, or as a category of strings; the second's not
    "nanoseconds": (pa.array([1000], pa.time64("ns")), pa.array([1], pa.time64("ns"))),  # whole microseconds, then 1 ns
    "date before the year 1": (pa.array([0], pa.date32()), pa.array([-800_000], pa.date32())),  # 1970, then -221
    "category all null in one part": (pa.array(["x"]).dictionary_encode(), pa.array([None], pa.string()).dictionary_encode()),
}


# CSV's reader parses no date before the year 1 (that part reads as text, the test below); Avro holds no
# time64[ns] and refuses such dates (test_avro_refuses_dates_beyond_pythons_years_...); JSON lines writes times
# in microseconds, refusing a nanosecond.
@pytest.mark.parametrize(("fmt", "case"), [(fmt, case) for fmt in ["jsonl", "csv", "parquet", "avro"] for case in SPLIT_COLUMNS
                                           if not (fmt == "csv" and "date" in case or fmt == "avro" and "category" not in case
                                                   or fmt == "jsonl" and case == "nanoseconds")])
def test_a_column_reads_back_of_one_type_however_its_rows_were_cut_into_parts(tmp_path, fmt, case):
    """``pd.concat`` of the parts made the column objects, the nanosecond 0, or failed on the date."""
    first, second = SPLIT_COLUMNS[case]
    sink = FileSink(str(tmp_path / "split"), format=fmt).with_rolling_policy(RollingPolicy.on_every_batch())
    writer = sink.writer()
    for batch_id, column in enumerate([first, second]):
        writer.write_batch(pa.table({"id": [batch_id], "c": column}), batch_id, 0)
    writer.finish(1)
    writer.close()
    one_part = FileSink(str(tmp_path / "whole"), format=fmt)
    one_part.write(pa.table({"id": [0, 1], "c": pa.concat_arrays([first, second])}))
    back, whole = sink.read().sort_values("id", ignore_index=True), one_part.read().sort_values("id", ignore_index=True)
    assert len(sink.finished_files()) == 2
    assert back["c"].dtype == whole["c"].dtype
    if isinstance(back["c"].dtype, pd.ArrowDtype):  # pandas' comparison converts them to Python values, and fails
        assert pa.array(back["c"]).combine_chunks().equals(pa.concat_arrays([first, second]))
    else:
        pd.testing.assert_series_equal(back["c"], whole["c"])


@pytest.mark.parametrize("tz", [None, "UTC", "Australia/Lord_Howe"])
def test_csv_reads_back_the_least_nanosecond_timestamp_typed(tmp_path, tz):
    """pyarrow's CSV reader overflows on a time in int64's first second of nanoseconds, which its writer writes
    (pd.Timestamp.min, a "valid from" of all time): the whole part read back as text, with a warning."""
    ends = pa.array([pd.Timestamp.min.value, None, pd.Timestamp.max.value, 0], pa.timestamp("ns", tz))
    table = pa.table({"id": [1, 2, 3, 4], "valid": ends, "c": pa.array(["a", "b", "a", None]).dictionary_encode()})
    sink = FileSink(str(tmp_path), format="csv")
    sink.write(table)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # read as the types written, not as text
        back = sink.read()
    assert back.dtypes.to_dict() == as_frame(table).dtypes.to_dict()
    assert pa.array(back["valid"]).equals(ends) and back["id"].tolist() == [1, 2, 3, 4]


def test_a_part_whose_text_does_not_parse_as_its_types_reads_as_text_with_a_warning(tmp_path):
    """pyarrow's CSV reader parses no timestamp after the year 9999, which its writer writes: the part was
    committed whole, so its rows are read as the text gives them (as before schemas were kept), not refused."""
    table = pa.table({"id": [1, 2], "ts": pa.array([253_402_300_800_000_000, 0], pa.timestamp("us"))})  # 10000, 1970
    sink = FileSink(str(tmp_path), format="csv")
    sink.write(table)
    with pytest.warns(UserWarning, match=r"FileSink.read\(\): part .*part-.*\.csv does not read back as the types it "
                                         r"was written from \(ArrowInvalid: .*\); its rows are read as csv text gives") as told:
        back = sink.read()
    assert told[0].filename == __file__  # the warning points at the call of read()
    assert back["id"].tolist() == [1, 2]
    assert back["ts"].tolist() == ["10000-01-01 00:00:00.000000", "1970-01-01 00:00:00.000000"]


def test_json_lines_read_back_a_category_of_bytes_written_as_text(tmp_path):
    """A category of bytes is written as its text (a column of bytes as base64): it was read as base64."""
    table = pa.table({"b": pa.array([b"ab", b"cd", b"ab"]).dictionary_encode()})
    sink = FileSink(str(tmp_path))
    sink.write(table)
    assert_reads_back(sink.read(), table)


def test_text_lines_of_a_zoned_timestamp_column_named_value_read_back_as_text(tmp_path):
    """Text lines hold str(value) of one column, read back as text whatever the column was: the recorded schema
    is not applied to them (a zoned timestamp named like the text column would be cast, and fail)."""
    table = pa.table({"value": pa.array([0], pa.timestamp("us", "UTC"))})
    sink = FileSink(str(tmp_path), format="text")
    sink.write(table)
    assert sink.read()["value"].tolist() == ["1970-01-01 00:00:00+00:00"]


OUT_OF_PYTHONS_RANGE = {  # values Arrow holds and pandas' NumPy and Python types do not
    "date": pa.array([-800_000, 0, None, 3_000_000], pa.date32()),  # the years -221 and 10183
    "nanos": pa.array([1, 86_399_999_999_999, None, 0], pa.time64("ns")),  # below the microsecond
}


@pytest.mark.parametrize(("fmt", "kind"), [("parquet", "date"), ("orc", "date"), ("jsonl", "date"),
                                           ("parquet", "nanos"), ("csv", "nanos")])
def test_values_pandas_cannot_hold_read_back_as_arrow_values_not_as_damage(tmp_path, fmt, kind):
    """``to_pandas`` refuses a date outside the years 1 to 9999 or a time below the microsecond, and read() named
    the committed part damaged (``CorruptPartError``), so no read() of the sink worked again: now such a column
    alone keeps its Arrow values (``pd.ArrowDtype``), exact, beside the others' usual dtypes."""
    column = OUT_OF_PYTHONS_RANGE[kind]
    table = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "c": column})
    sink = FileSink(str(tmp_path), format=fmt)
    sink.write(table)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read as the types written, not as text
        back = sink.read()
    assert back["id"].dtype == np.int64 and back["id"].tolist() == [1, 2, 3, 4]
    assert back["c"].dtype == pd.ArrowDtype(column.type)
    assert pa.array(back["c"].array).equals(column)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "orc"])  # Avro and CSV hold no nested values
def test_integers_inside_structs_lists_and_maps_beside_nulls_read_back_exact(tmp_path, fmt):
    """``to_pandas`` makes the integers of a nested column floats where any of them is null, and Parquet and ORC
    store a null struct's fields as nulls: ``{"a": 2**53 + 1}`` came back ``{"a": 2**53}``, and 1 as 1.0."""
    table = pa.table({
        "s": pa.array([{"a": 2**53 + 1, "b": 1}, None, {"a": None, "b": 2}], pa.struct([("a", pa.int64()),
                                                                                      ("b", pa.int32())])),
        "l": pa.array([[2**53 + 1, None], [], None], pa.list_(pa.int64())),
        "m": pa.array([[("k", 2**53 + 1)], None, [("j", None)]], pa.map_(pa.string(), pa.int64())),
        "whole": pa.array([{"a": 1}, {"a": 2}, {"a": 3}], pa.struct([("a", pa.int64())])),
    })
    sink = FileSink(str(tmp_path), format=fmt)
    sink.write(table)
    back = sink.read()
    assert back["s"].tolist() == [{"a": 2**53 + 1, "b": 1}, None, {"a": None, "b": 2}]
    assert back["l"].tolist() == [[2**53 + 1, None], [], None]
    assert [None if m is None else [tuple(kv) for kv in m] for m in back["m"]] == [[("k", 2**53 + 1)], None,
                                                                                  [("j", None)]]
    assert [(v, type(v["a"])) for v in back["whole"]] == [({"a": i}, int) for i in (1, 2, 3)]


def test_a_parquet_column_of_a_pandas_arrow_list_dtype_reads_back(tmp_path):
    """pandas' metadata in the Parquet file names the column's dtype ``list<item: int64>[pyarrow]``, which
    ``to_pandas`` does not understand: read() named the part damaged; now its lists come back."""
    frame = pd.DataFrame({"id": [1, 2], "c": pd.Series([[1, 2], None], dtype=pd.ArrowDtype(pa.list_(pa.int64())))})
    sink = FileSink(str(tmp_path), format="parquet")
    sink.write(frame)
    back = sink.read()
    assert back["id"].tolist() == [1, 2]
    assert [None if v is None else list(v) for v in back["c"]] == [[1, 2], None]


@pytest.mark.parametrize(("column", "shown"), [(pa.array([-800_000], pa.date32()).dictionary_encode(), "-0221-09-04"),
                                               (pa.array([-(10**17)], pa.timestamp("us", "UTC")), "-1199-02-15T"),
                                               (pa.array([None, 3_000_000], pa.date32()), "10183-09-21")])
def test_avro_refuses_dates_beyond_pythons_years_naming_the_column_and_keeps_the_batches_before(tmp_path, column,
                                                                                                shown):
    """The Avro writer takes Python dates and datetimes (years 1 to 9999): such a value failed the part's close
    with a bare ``OverflowError: date value out of range``, naming nothing."""
    sink = FileSink(str(tmp_path), format="avro")
    writer = sink.writer()
    try:
        plain = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        writer.write_batch(pa.table({"c": pa.array([1], pa.int32() if pa.types.is_date(plain) else pa.int64()).cast(plain)}), 0, 0)
        with pytest.raises(ValueError, match=r"avro format cannot write column 'c' of type .*: it holds a value "
                                             rf"outside the years 1 to 9999, {shown}"):
            writer.write_batch(pa.table({"c": column}), 1, 0)
    finally:
        writer.close()
    back = sink.read()["c"]
    assert len(back) == 1
