"""A batch Spark DataFrame through applyInPandas gives the pandas runner's panes."""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import math
import re
import warnings

import numpy as np
import pandas as pd
import pendulum
import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from accumulations import Accumulation, BottomN, Count, Distinct, Fold, InnerJoin, Max, Mean, Min, Reduce, Sum, ToList, TopN, ToSet
from tests.engine.test_builtins import SUBCLASSES_OF_BUILT_INS
from triggers import AfterCount, AfterWatermark
from windowing import spark_typed, windowed
from windowing.errors import RepeatedWallTimeWarning, WindowingConfigError

from .helpers import PYSPARK_3, assert_same_panes, events, frozen_when_output

pytestmark = pytest.mark.spark

ROWS = [("a", 1, 5), ("a", 12, 7), ("b", 3, 1), ("c", 40, -2), ("a", 9, 3), ("b", 29, 4), ("c", 44, 8), ("d", 0, 1)]
AGGS = dict(total=Sum("amount"), n=Count(), top=Max("amount"), mean=Mean("amount"), all=ToList("amount"))


@pytest.mark.parametrize("shape", ["fixed", "sessions", "sliding"])
def test_batch_dataframe_matches_the_pandas_runner(spark, shape):
    frame = events(ROWS)
    build = {"fixed": lambda w: w.fixed("10 seconds"), "sessions": lambda w: w.sessions("8 seconds"),
             "sliding": lambda w: w.sliding("20 seconds", every="10 seconds")}[shape]
    expected = build(windowed(frame, time="ts", key="user")).aggregate(**AGGS)
    result = build(windowed(spark.createDataFrame(frame), time="ts", key="user")).aggregate(**AGGS)
    assert [f.name for f in result.schema.fields] == list(expected.columns)
    assert result.schema["window_start"].dataType.simpleString() == "timestamp"
    assert_same_panes(result.toPandas(), expected)


def test_not_keyed_with_a_numeric_time_column(spark):
    frame = pd.DataFrame({"ts": [1, 12, 3, 25], "amount": [5, 7, 1, 2]})
    expected = windowed(frame, time="ts").fixed(10).aggregate(Sum("amount"))
    result = windowed(spark.createDataFrame(frame), time="ts").fixed(10).aggregate(Sum("amount"))
    assert result.schema["window_start"].dataType.simpleString() == "bigint"
    got = result.toPandas().sort_values("window_start").reset_index(drop=True)
    assert list(got["value"]) == list(expected["value"]) == [6, 7, 2]


def test_fold_reduce_and_an_accumulation_of_your_own_need_no_stated_type(spark):
    # They were refused: "cannot derive the Spark type of its output ... state it with spark_typed".
    class Product(Accumulation):
        def __init__(self, column):
            self.column = column

        def default_accumulated_value(self):
            return 1

        def accumulate(self, accumulated, value):
            return accumulated * value

        def merge(self, accumulated1, accumulated2):
            return accumulated1 * accumulated2

        def get_output(self, accumulated):
            return accumulated

    frame = events(ROWS).assign(price=[0.5, 1.5, 2.0, 1.0, 3.0, 0.5, 2.5, 1.0])
    aggs = dict(f=Fold("price", 0, lambda a, v: a + v, lambda a, b: a + b), r=Reduce("amount", max),
                names=Fold("user", (), lambda a, v: a + (v,), lambda a, b: a + b), p=Product("amount"))
    expected = windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(**aggs)
    result = windowed(spark.createDataFrame(frame), time="ts", key="user").fixed("10 seconds").aggregate(**aggs)
    assert [(f.name, f.dataType.simpleString()) for f in result.schema.fields[3:7]] == [
        ("f", "double"), ("r", "bigint"), ("names", "array<string>"), ("p", "bigint")]
    assert_same_panes(result.toPandas(), expected)


def test_an_accumulation_without_a_column_receives_none_per_element(spark):
    # It received 0.0 per element (`Accumulation`: "None means it needs no column and receives None per element").
    class NoneSeen(Accumulation):
        column = None

        def default_accumulated_value(self):
            return 0

        def accumulate(self, accumulated, value):
            return accumulated + (1 if value is None else 1000)

        def merge(self, accumulated1, accumulated2):
            return accumulated1 + accumulated2

        def get_output(self, accumulated):
            return accumulated

    frame = events(ROWS)
    result = windowed(spark.createDataFrame(frame), time="ts", key="user").fixed("10 seconds").aggregate(
        n=NoneSeen(), count=Count()).toPandas()
    assert len(result) and list(result["n"]) == list(result["count"])


def test_a_fold_whose_values_outgrow_its_sampled_type_fails_naming_the_column_and_spark_typed(spark):
    # Sampled as bigint (0 + 1); 7 adds 0.5. It failed with pandas' "cannot safely cast non-equivalent object".
    halves = Fold("amount", 0, lambda a, v: a + v if v < 5 else a + 0.5, lambda a, b: a + b)
    # One input partition (as in _assert_refused): pyspark 3.5 may leave a killed sibling task's worker broken.
    result = windowed(spark.createDataFrame(pd.DataFrame({"t": [1, 2], "amount": [1, 7]})).coalesce(1), time="t").fixed(10)
    with pytest.raises(Exception, match=r"output column 'sum' is bigint, but a pane holds 1\.5, not a whole number "
                                        r"of 64 bits; .*spark_typed\(acc, 'double'\)"):
        result.aggregate(sum=halves).collect()


@pytest.mark.parametrize("aggregation, message", [
    (Fold("amount", (), lambda a, v: a + (v if v < 5 else v + 0.5,), lambda a, b: a + b, output=list),
     r"output column 'out' is array<bigint>, but a pane holds 7\.5, not a whole number of 64 bits; .*'array<double>'"),
    (Fold("amount", 0, lambda a, v: a + v if v < 5 else 2**64, lambda a, b: a + b),
     r"output column 'out' is bigint, but a pane holds 18446744073709551616, not a whole number of 64 bits"),
    (Reduce("flag", lambda a, b: int(a) + int(b)),
     r"output column 'out' is boolean, as the accumulation's output for one sample value was, but a pane holds 2, a int; "
     r".*spark_typed"),
    (Fold("amount", "", lambda a, v: a + "x" if v < 5 else len(a), lambda a, b: a + b),
     r"output column 'out' is string, as the accumulation's output for one sample value was, but a pane holds 1, a "
     r"int; .*state the type that holds every pane's value"),
    (Fold("amount", 0, lambda a, v: a + v, lambda a, b: a + b, output=lambda a: dt.datetime(2024, 1, 1) if a < 5 else a),
     r"output column 'out' is timestamp, as the accumulation's output for one sample value was, but a pane holds 8, "
     r"a int; .*state the type that holds every pane's value with windowing.spark_typed\(acc, \.\.\.\)"),
    (Fold("amount", 0, lambda a, v: a + v, lambda a, b: a + b, output=lambda a: dt.date(2024, 1, 1) if a < 5 else a),
     r"output column 'out' is date, as the accumulation's output for one sample value was, but a pane holds 8"),
    (Fold("amount", 0, lambda a, v: a + v, lambda a, b: a + b, output=lambda a: [a] if a < 5 else a),
     r"output column 'out' is an array, as the accumulation's output for one sample value was, but a pane holds 8"),
    (Fold("amount", 0, lambda a, v: a + v, lambda a, b: a + b, output=lambda a: ["x"] if a < 5 else "xy"),
     r"output column 'out' is an array, as the accumulation's output for one sample value was, but a pane holds 'xy'"),
    (Fold("amount", 0, lambda a, v: a + v, lambda a, b: a + b,
          output=lambda a: [dt.datetime(2024, 1, 1)] if a < 5 else [a]),
     r"output column 'out' is array<timestamp>, as the accumulation's output for one sample value was, but a pane "
     r"holds 8"),
], ids=["a float in an array of integers", "an integer beyond 64 bits", "an int in a boolean", "an int in a string",
        "an int in a timestamp", "an int in a date", "an int in an array", "a string in an array",
        "an int in an array of timestamps"])
def test_values_a_sampled_output_type_cannot_hold_fail_naming_the_column(spark, aggregation, message):
    # Before: Arrow truncated the 7.5 sampled as array<bigint> (from [1]) to 7, without a word; 2**64 failed with
    # "Python int too large to convert to C long", and the others with pyspark's "Could not convert 2 with type int:
    # tried to convert to boolean" or "Expected bytes, got a 'int' object", naming no column. An int sampled a
    # timestamp came out as microseconds since 1970 and one sampled a date as days, a string sampled an array as
    # its characters (["x", "y"]), all without a word, and an int sampled an array failed with "'int' object is
    # not iterable".
    frame = pd.DataFrame({"t": [1, 2], "amount": [1, 7], "flag": [True, True]})
    result = windowed(spark.createDataFrame(frame).coalesce(1), time="t").fixed(10)
    with pytest.raises(Exception, match=message):
        result.aggregate(out=aggregation).collect()


@pytest.mark.parametrize("aggregation, spark_type, message", [
    (Sum("amount"), "boolean", "is boolean, as stated with windowing.spark_typed, but a pane holds 8, a int"),
    (Sum("amount"), "binary", "is binary, as stated with windowing.spark_typed, but a pane holds 8, a int"),
    (ToList("amount"), "array<boolean>", "is array<boolean>, as stated with windowing.spark_typed, but a pane holds 1"),
    (Sum("amount"), "timestamp", "is timestamp, as stated with windowing.spark_typed, but a pane holds 8, a int"),
    (Sum("amount"), "array<bigint>", "is an array, as stated with windowing.spark_typed, but a pane holds 8, a int"),
    (Sum("amount"), "date", "is date, as stated with windowing.spark_typed, but a pane holds 8, a int"),
    (Sum("amount"), "map<string,bigint>", "is map<string,bigint>, as stated with windowing.spark_typed, but a pane holds 8, a int"),
    (Sum("amount"), "timestamp_ntz", "is timestamp_ntz, as stated with windowing.spark_typed, but a pane holds 8, a int"),
    (Sum("amount"), "interval day to second", "is interval, as stated with windowing.spark_typed, but a pane holds 8"),
    (ToList("amount"), "array<timestamp>", "is array<timestamp>, as stated with windowing.spark_typed, but a pane holds 1"),
    (ToList("amount"), "array<date>", "is array<date>, as stated with windowing.spark_typed, but a pane holds 1"),
    (Sum("amount"), "array<timestamp>", "is an array, as stated with windowing.spark_typed, but a pane holds 8, a int"),
    (Fold("amount", None, lambda a, v: dt.date(2024, 1, v), lambda a, b: b), "timestamp_ntz",
     "is timestamp_ntz, as stated with windowing.spark_typed, but a pane holds datetime.date(2024, 1, 7), a date"),
], ids=["a sum stated boolean", "a sum stated binary", "a list stated of booleans", "a sum stated a timestamp",
        "a sum stated an array", "a sum stated a date", "a sum stated a map", "a sum stated a timestamp_ntz",
        "a sum stated an interval", "a list stated of timestamps", "a list stated of dates",
        "a sum stated an array of timestamps", "a date stated a timestamp_ntz"])
def test_a_stated_type_whose_values_a_pane_does_not_hold_fails_naming_the_column_and_the_value(spark, aggregation,
                                                                                                spark_type, message):
    # Before: 8 came out as True, b"\x08", [True, True], 8 microseconds after 1970 (Spark casts a number to a timestamp
    # as seconds), and Python's "'int' object is not iterable" (or "has no attribute 'items'", or Arrow's "Unsupported
    # cast from int64 to date32") naming no column.
    frame = pd.DataFrame({"t": [1, 2], "amount": [1, 7]})
    source = spark.createDataFrame(frame).coalesce(1)
    with pytest.raises(Exception, match=f"output column 'out' {re.escape(message)}"):
        windowed(source, time="t").fixed(10).aggregate(out=spark_typed(aggregation, spark_type)).collect()


def test_values_a_stated_type_takes_come_through(spark):
    # The checks of a stated type's values refused none of these (a review found a first version refused a date as a
    # timestamp, which Spark's cast takes as midnight, a range in an array, and failed on a NaN cell of an array).
    frame = pd.DataFrame({"t": [1, 2], "n": [5, 8]})
    source = spark.createDataFrame(frame).coalesce(1)

    def last(made):
        return Fold("n", None, lambda a, v: made, lambda a, b: b)

    cases = [(last(dt.date(2024, 1, 2)), "timestamp", dt.datetime(2024, 1, 2)), (last(range(3)), "array<bigint>", [0, 1, 2]),
             (last(float("nan")), "array<bigint>", None), (last([dt.datetime(2024, 1, 2, 3), None]), "array<timestamp>",
                                                          [dt.datetime(2024, 1, 2, 3), None]),
             (last(dt.timedelta(seconds=3)), "interval day to second", dt.timedelta(seconds=3)),
             (last(np.float64(6.125)), "decimal(10,2)", decimal.Decimal("6.13"))]
    days = [dt.date(2024, 1, 1), dt.date(2024, 1, 2)]
    for spark_type, made, value in [("array<date>", lambda: iter(days), days),
                                    ("array<timestamp>", lambda: map(lambda day: dt.datetime.combine(day, dt.time()), days),
                                     [dt.datetime.combine(d, dt.time()) for d in days])]:
        # A second review found an iterator read up by the check of its elements: the array came out empty.
        cases.append((Fold("n", None, lambda a, v: v, lambda a, b: b, output=lambda a, made=made: made()), spark_type, value))
    for aggregation, spark_type, value in cases:
        panes = windowed(source, time="t").fixed(10).aggregate(out=spark_typed(aggregation, spark_type))
        assert [row.out for row in panes.collect()] == [value], spark_type


@pytest.mark.parametrize("spark_type, made, message", [
    ("array<array<timestamp>>", [[1]], "holds 1, a int, at out[0][0], where it takes a timestamp"),
    ("array<array<date>>", [[dt.date(2024, 1, 1), 1]], "holds 1, a int, at out[0][1], where it takes a date"),
    ("array<array<string>>", ["ab"], "holds 'ab', a str, at out[0], where it takes an array"),
    ("array<array<bigint>>", [[7.5]], "holds 7.5, a float, at out[0][0], where it takes a bigint"),
    ("array<array<bigint>>", [[1, 2**64]], "holds 18446744073709551616, a int, at out[0][1], where it takes a bigint"),
    ("array<array<double>>", [["2.5"]], "holds '2.5', a str, at out[0][0], where it takes a double"),
    ("struct<ts: timestamp>", {"ts": 1}, "holds 1, a int, at out.ts, where it takes a timestamp"),
    ("struct<ts: timestamp>", (1,), "holds 1, a int, at out.ts, where it takes a timestamp"),
    ("struct<a: boolean>", {"a": 3}, "holds 3, a int, at out.a, where it takes a boolean"),
    ("struct<a: bigint>", {"b": 1}, "holds {'b': 1}, a dict, with a field 'b' the struct has not"),
    ("struct<a: bigint>", {"a": 1, "b": 2}, "holds {'a': 1, 'b': 2}, a dict, with a field 'b' the struct has not"),
    ("struct<a: bigint, b: string>", (1,), "holds (1,), a tuple, where it takes a struct of 2 fields"),
    ("map<string,timestamp>", {"a": 1}, "holds 1, a int, at out['a'], where it takes a timestamp"),
    ("map<string,bigint>", {"a": 1.5}, "holds 1.5, a float, at out['a'], where it takes a bigint"),
    ("map<date,bigint>", {1: 2}, "holds 1, a int, at a key of out, where it takes a date"),
    ("array<struct<x: int>>", [{"x": 2**40}], "holds 1099511627776, a int, at out[0].x, where it takes an int"),
    ("map<string,array<date>>", {"a": [1]}, "holds 1, a int, at out['a'][0], where it takes a date"),
    ("map<string,bigint>", {None: 1}, "holds None, a NoneType, at a key of out, which a map cannot hold"),
    ("struct<a: bigint>", {"a": 3.5}, "holds 3.5, a float, at out.a, where it takes a bigint"),
    ("array<decimal(4,2)>", [decimal.Decimal("123.456")], "holds Decimal('123.456'), a Decimal, at out[0], where it takes a "
                                                          "decimal(4,2), of 2 digits before the point"),
], ids=["a timestamp in an array of arrays", "a date in an array of arrays", "a string for an array in an array",
        "a float in an array of bigint arrays", "an int past 64 bits among ints", "a string in an array of double arrays",
        "a timestamp field",
        "a timestamp field by position", "a boolean field", "a field the struct has not", "a field more",
        "a field less by position", "a map's timestamp value", "a map's bigint value", "a map's date key",
        "an int field past 32 bits in an array", "a date in an array in a map", "a null map key",
        "a fraction in a bigint field", "a decimal past its precision"])
def test_values_nested_in_a_stated_type_are_checked_at_every_level(spark, spark_type, made, message):
    # Before: each came out changed without a word, on pyspark 4.3 and 3.5 (1 as 1970-01-01 00:00:00 or 1970-01-02,
    # "ab" as ["a", "b"], 7.5 and 1.5 as 7 and 1, 3 as True, 2**40 wrapped; {"b": 1} as a null field a, the extra
    # field dropped), or failed in pyspark's conversion naming neither the column nor the value ("2.5" on 3.5).
    source = spark.createDataFrame(pd.DataFrame({"t": [1, 2], "n": [5, 8]})).coalesce(1)
    fold = Fold("n", None, lambda a, v: made, lambda a, b: b)
    ddl = spark_type.replace(": ", ":").replace(", ", ",")  # as Spark prints it
    stated = f"output column 'out' is {ddl}, as stated with windowing.spark_typed, but a pane {message}"
    with pytest.raises(Exception, match=re.escape(stated)):
        windowed(source, time="t").fixed(10).aggregate(out=spark_typed(fold, spark_type)).collect()


def test_nested_values_a_stated_type_takes_come_through(spark):
    # The nested check refuses none of these: nulls at every level, an int for a double, iterators and ranges read
    # once, a tuple for a struct in its fields' order, a named tuple by name, a map's int keys.
    source = spark.createDataFrame(pd.DataFrame({"t": [1, 2], "n": [5, 8]})).coalesce(1)
    Pair = collections.namedtuple("Pair", ["b", "a"])
    cases = [("array<array<timestamp>>", lambda: [[dt.datetime(2024, 1, 2, 3)], None, [None]],
              [[dt.datetime(2024, 1, 2, 3)], None, [None]]),
             ("struct<ts: timestamp, n: bigint>", lambda: {"ts": dt.datetime(2024, 1, 2)}, (dt.datetime(2024, 1, 2), None)),
             ("map<string,array<date>>", lambda: {"a": [dt.date(2024, 1, 1)], "b": None}, {"a": [dt.date(2024, 1, 1)], "b": None}),
             ("array<struct<x: double>>", lambda: [{"x": 1}, (2.5,), None], [(1.0,), (2.5,), None]),
             ("struct<a: array<bigint>>", lambda: {"a": iter([1, 2])}, ([1, 2],)),
             ("array<array<bigint>>", lambda: [iter([1, 2]), range(2)], [[1, 2], [0, 1]]),
             ("map<int,struct<s: string>>", lambda: {1: ("x",)}, {1: ("x",)}),
             ("struct<a: bigint, b: string>", lambda: Pair(b="x", a=1), (1, "x")),
             # A review of the first version: it refused each of these, which pyspark 4.3 converted right (a Decimal
             # in a double, a Row without names by position, a whole float in a bigint), or failed on naming nothing
             # (NumPy's times and durations, a decimal of more digits than the scale, which a cast rounds).
             ("array<double>", lambda: [decimal.Decimal("1.5"), 2], [1.5, 2.0]),
             ("struct<a: double>", lambda: {"a": decimal.Decimal("2.25")}, (2.25,)),
             ("array<struct<a: int>>", lambda: [Row(1)], [(1,)]),
             ("struct<a: bigint, b: int>", lambda: {"a": 3.0, "b": decimal.Decimal(4)}, (3, 4)),
             ("struct<t: timestamp, d: date, i: interval day to second>",
              lambda: (np.datetime64("2024-01-02T03:04:05"), np.datetime64("2024-01-02"), np.timedelta64(3, "s")),
              (dt.datetime(2024, 1, 2, 3, 4, 5), dt.date(2024, 1, 2), dt.timedelta(seconds=3))),
             ("map<string,decimal(5,2)>", lambda: {"a": decimal.Decimal("1.235"), "b": 2.5}, {"a": decimal.Decimal("1.24"),
                                                                                              "b": decimal.Decimal("2.50")})]
    for spark_type, made, value in cases:
        fold = Fold("n", None, lambda a, v: a, lambda a, b: b, output=lambda a, made=made: made())
        panes = windowed(source, time="t").fixed(10).aggregate(out=spark_typed(fold, spark_type))
        assert [row.out for row in panes.collect()] == [value], spark_type


@pytest.mark.parametrize("made", [True, "2.5"])
def test_a_value_in_a_sampled_array_of_doubles_that_is_no_number_is_refused(spark, made):
    # Before: True came out as 1.0 and "2.5" as 2.5 (pyspark 4.3; 3.5 failed on "2.5" naming neither the column nor
    # the value), where a scalar double refuses both.
    source = spark.createDataFrame(pd.DataFrame({"t": [1, 2], "n": [5, 8]})).coalesce(1)
    fold = Fold("n", None, lambda a, v: [1.5] if v == 1 else [made], lambda a, b: b)  # sampled on 1: array<double>
    with pytest.raises(Exception, match=re.escape(f"output column 'out' is array<double>, as the accumulation's output for "
                                                  f"one sample value was, but a pane holds {made!r}")):
        windowed(source, time="t").fixed(10).aggregate(out=fold).collect()


def test_dates_and_maps_stated_as_such_come_through(spark):
    frame = pd.DataFrame({"t": [1, 2, 11], "amount": [1, 7, 3]})
    source = spark.createDataFrame(frame).coalesce(1)
    day = Fold("amount", None, lambda a, v: dt.date(2024, 1, v), lambda a, b: b)
    tally = Fold("amount", {}, lambda a, v: {**a, str(v): v}, lambda a, b: {**a, **b})
    panes = windowed(source, time="t").fixed(10).aggregate(day=spark_typed(day, "date"),
                                                           tally=spark_typed(tally, "map<string,bigint>"))
    assert [(row.day, row.tally) for row in panes.orderBy("window_start").collect()] == [
        (dt.date(2024, 1, 7), {"1": 1, "7": 7}), (dt.date(2024, 1, 3), {"3": 3})]


def test_a_mean_stated_a_decimal_is_rounded_half_up_as_sparks_cast_rounds(spark):
    # Before: 6.5 came out as 6 on pyspark 4 (truncated) and failed on pyspark 3.5.
    frame = pd.DataFrame({"t": [1, 2, 11, 12], "amount": [5, 8, -5, -8]})
    source = spark.createDataFrame(frame).coalesce(1)
    means = windowed(source, time="t").fixed(10).aggregate(out=spark_typed(Mean("amount"), "decimal(5,0)"))
    cast = spark.sql("select cast(6.5 as decimal(5,0)) as up, cast(-6.5 as decimal(5,0)) as down").first()
    assert [row.out for row in means.orderBy("window_start").collect()] == [cast.up, cast.down] == [
        decimal.Decimal(7), decimal.Decimal(-7)]


def test_a_fold_stated_a_double_takes_decimals_and_ints_beyond_2_to_the_53_as_a_cast_would(spark):
    """A Fold over decimals is refused unless its type is stated, and the refusal names `decimal(38, s)` or
    `'double'`: stated so, the query failed on the first pane, a Decimal, saying the type was sampled and to state it; so did an
    int above 2**53 (above 2**24 for `float`). Stated, a number becomes the nearest double (or float), as a cast."""
    frame = pd.DataFrame({"t": [1, 2, 3, 4], "d": [decimal.Decimal("1.25"), decimal.Decimal("2.10"), None, None],
                          "n": [2**53, 1, 2**24, 1]})
    source = spark.createDataFrame(frame, "t long, d decimal(10,2), n long").coalesce(1)
    add = lambda a, v: a if v is None else a + v  # noqa: E731
    with pytest.raises(WindowingConfigError, match=r"state it with windowing.spark_typed\(Fold\('d'\), 'decimal\(38,2\)'\) "
                                                   r"\(.*, or 'double'\)"):
        windowed(source, time="t").fixed(3).aggregate(total=Fold("d", decimal.Decimal(0), add, lambda a, b: a + b))
    panes = windowed(source, time="t").fixed(3).aggregate(
        total=spark_typed(Fold("d", decimal.Decimal(0), add, lambda a, b: a + b), "double"),
        big=spark_typed(Fold("n", 0, add, lambda a, b: a + b), "double"),
        single=spark_typed(Fold("n", 0, add, lambda a, b: a + b), "float"))
    assert sorted(tuple(r) for r in panes.select("window_start", "total", "big", "single").collect()) == [
        (0, 3.35, float(2**53 + 1), float(np.float32(2**53 + 1))), (3, 0.0, float(2**24 + 1), float(np.float32(2**24 + 1)))]
    stated_string = spark_typed(Fold("n", "", lambda a, v: len(str(a)), lambda a, b: a), "string")
    with pytest.raises(Exception, match=r"output column 'out' is string, as stated with windowing.spark_typed, but a "
                                        r"pane holds 1, a int; state a type that holds every pane's value"):
        windowed(source, time="t").fixed(3).aggregate(out=stated_string).collect()


@pytest.mark.parametrize("combine", ["true", "false"])
@pytest.mark.parametrize("spark_type, bits", [("tinyint", 8), ("smallint", 16), ("int", 32)])
def test_a_value_beyond_a_stated_narrower_integer_type_is_refused_naming_it_not_wrapped(spark, spark_type, bits, combine):
    """pyspark 3.5, and 4 with convertToArrowArraySafely off, wrapped a pane's `Sum` stated `int` of 3000000005 into
    -1294967291 without a word (pyspark 4 otherwise failed naming the column, not the value); the extremes pass."""
    top = 2 ** (bits - 1)
    frame = pd.DataFrame({"t": [1, 2, 4, 5, 7], "n": [top - 2, 1, -top, 0, top]})
    source = spark.createDataFrame(frame, "t long, n long").coalesce(1)
    stated = {"total": spark_typed(Sum("n"), spark_type), "items": spark_typed(ToList("n"), f"array<{spark_type}>")}
    safely = "spark.sql.execution.pandas.convertToArrowArraySafely"
    previous = {key: spark.conf.get(key, None) for key in (safely, "windowing.spark.combine")}
    spark.conf.set(safely, "false")
    spark.conf.set("windowing.spark.combine", combine)
    try:
        fits = windowed(source.where("t < 6"), time="t").fixed(3).aggregate(**stated)
        assert sorted(tuple(r) for r in fits.select("window_start", "total", "items").collect()) == [
            (0, top - 1, [top - 2, 1]), (3, -top, [-top, 0])]
        for name, shown in (("total", spark_type), ("items", f"array<{spark_type}>")):
            with pytest.raises(Exception, match=rf"output column '{name}' is {re.escape(shown)}, as stated with windowing"
                                                rf"\.spark_typed, but a pane holds {top}, not a whole number of {bits} bits"):
                windowed(source, time="t").fixed(3).aggregate(**{name: stated[name]}).collect()
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def test_a_number_column_holding_text_or_a_truth_value_is_refused_naming_it_not_parsed(spark):
    """pandas' conversions took "02134" for 2134, "1_000" for 1000, "inf" for infinity and True for 1, in a column
    stated or sampled a number, where the pandas runner gives them as they are."""
    frame = pd.DataFrame({"t": [1, 2], "n": [1, 2]})
    source = spark.createDataFrame(frame, "t long, n long").coalesce(1)

    def last(made):
        return Fold("n", None, lambda a, v: made if v == 2 else v, lambda a, b: b)

    cases = [(spark_typed(last("02134"), "long"), "bigint, as stated with windowing.spark_typed,", "'02134', a str",
              "'string'"),
             (spark_typed(last("inf"), "double"), "double, as stated with windowing.spark_typed,", "'inf', a str",
              "'string'"),
             (spark_typed(last(True), "int"), "int, as stated with windowing.spark_typed,", "True, a bool", "'boolean'"),
             (last("1_000"), "bigint", "'1_000', a str", "'string'"),  # sampled: 1 gives an int
             (Fold("n", None, lambda a, v: 0.5 if v == 1 else True, lambda a, b: b), "double", "True, a bool",
              "'boolean'")]
    for aggregation, column_type, value, instead in cases:
        with pytest.raises(Exception, match=rf"output column 'out' is {re.escape(column_type)} but a pane holds "
                                            rf"{re.escape(value)}, which Spark would take for a number; .*spark_typed"
                                            rf"\(acc, {instead}\)"):
            windowed(source, time="t").fixed(3).aggregate(out=aggregation).collect()


def test_a_stated_type_spark_cannot_parse_is_refused_naming_spark_typed_and_the_aggregation(spark):
    # Spark's bare ParseException named neither.
    source = spark.createDataFrame(pd.DataFrame({"t": [1], "n": [1]}), "t long, n long")
    stated = spark_typed(Fold("n", 0, lambda a, v: a + v, lambda a, b: a + b), "lng")
    with pytest.raises(WindowingConfigError, match=r"aggregate\(total=spark_typed\(Fold\('n'\), 'lng'\)\): "
                                                   r"spark_typed\(spark_type='lng'\) is not a Spark type \("):
        windowed(source, time="t").fixed(3).aggregate(total=stated)


def test_a_list_of_keys_duration_objects_and_the_collecting_accumulations_match_the_pandas_runner(spark):
    frame = events(ROWS).assign(region=["x", "y", "x", "x", "y", "x", "y", "x"])
    aggs = dict(top=TopN("amount", 2), bottom=BottomN("amount", 2), distinct=Distinct("region"), regions=ToSet("region"))

    def build(w):
        return w.sliding(dt.timedelta(seconds=20), every=pendulum.duration(seconds=10)).aggregate(**aggs)

    expected = build(windowed(frame, time="ts", key=["region", "user"]))
    result = build(windowed(spark.createDataFrame(frame), time="ts", key=["region", "user"]))
    assert [(f.name, f.dataType.simpleString()) for f in result.schema.fields] == [
        ("region", "string"), ("user", "string"), ("window_start", "timestamp"), ("window_end", "timestamp"),
        ("top", "array<bigint>"), ("bottom", "array<bigint>"), ("distinct", "array<string>"), ("regions", "array<string>"),
        ("timing", "string"), ("pane_index", "bigint"), ("is_retraction", "boolean")]
    expected["regions"] = [tuple(sorted(v)) for v in expected["regions"]]  # ToSet on Spark: a sorted array
    by_region = lambda panes: panes.sort_values("region", kind="stable")  # assert_same_panes orders by user only
    assert_same_panes(by_region(result.toPandas()), by_region(expected))


def test_a_bad_bucket_count_names_the_setting(spark):
    frame = spark.createDataFrame(events(ROWS))
    spark.conf.set("windowing.spark.buckets", "zero")
    try:
        with pytest.raises(WindowingConfigError, match=r"windowing.spark.buckets='zero' must be a positive integer"):
            windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(Sum("amount"))
    finally:
        spark.conf.unset("windowing.spark.buckets")


def test_a_bad_state_compression_names_the_setting_and_the_choices(spark):
    frame = spark.createDataFrame(events(ROWS))
    spark.conf.set("windowing.spark.stateCompression", "snappy")
    try:
        with pytest.raises(WindowingConfigError, match=r"windowing.spark.stateCompression='snappy' must be one of "
                                                       r"'zstd', 'lz4', 'none'"):
            windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(Sum("amount"))
    finally:
        spark.conf.unset("windowing.spark.stateCompression")


def test_run_on_a_batch_dataframe_gives_the_panes_and_no_late_data(spark):
    frame = events(ROWS)
    expected = windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(Sum("amount"))
    run = windowed(spark.createDataFrame(frame), time="ts", key="user").fixed("10 seconds").run(Sum("amount"))
    assert_same_panes(run.panes.toPandas(), expected)
    assert run.late_data.count() == 0  # one step before any watermark, then end of input: nothing is late


def test_run_refuses_an_input_column_that_late_data_would_overwrite(spark):
    # Before: late_data selected the input's 'reason' and its own, two columns of one name.
    frame = spark.createDataFrame(events(ROWS).assign(reason="refund"))
    with pytest.raises(WindowingConfigError, match="run\\(\\): the input's column 'reason' clashes"):
        windowed(frame, time="ts", key="user").fixed("10 seconds").run(Sum("amount"))
    assert windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(Sum("amount")).count() > 0


def test_the_workers_exempt_lasting_objects_from_the_garbage_collector(spark):
    """Each function the runner hands Spark's Python workers starts with ``gc.freeze()``: pyspark runs
    a full ``gc.collect()`` after every task (docs/spark_benchmark_history.md, "Earlier runs, with a set
    bucket count")."""
    frame = spark.createDataFrame(events(ROWS))
    panes = windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(frozen=frozen_when_output())
    assert panes.select("frozen").toPandas()["frozen"].tolist() == [True] * 6


@pytest.mark.parametrize("combine", ["true", "false"])
@pytest.mark.parametrize("late_data", [False, True], ids=["aggregate", "run"])
def test_a_missing_event_time_fails_the_query_naming_the_column(spark, combine, late_data):
    # It was given the 1970 window (a null unix_micros read as 0).
    frame = spark.createDataFrame([("a", dt.datetime(2024, 1, 1), 2), ("a", None, 5)], "user string, ts timestamp, amount long")
    _assert_refused(spark, frame, combine, late_data, r"time column 'ts' has a missing value \(null\); every element needs an event time")


@pytest.mark.parametrize("combine", ["true", "false"])
@pytest.mark.parametrize("late_data", [False, True], ids=["aggregate", "run"])
def test_an_event_time_beyond_pandas_timestamps_fails_the_query_naming_the_column_and_the_value(spark, combine, late_data):
    # 3000-01-01 overflowed to nanoseconds in 1830 and landed in that window.
    frame = spark.createDataFrame([("a", dt.datetime(2024, 1, 1), 2), ("a", dt.datetime(3000, 1, 1), 5)],
                                  "user string, ts timestamp, amount long")
    _assert_refused(spark, frame, combine, late_data,
                    r"time column 'ts' holds 3000-01-01 00:00:00, outside the engine's time range, pandas' nanosecond "
                    r"timestamps \(1677-09-21 00:12:43.145225 to 2262-04-11 23:47:16.854775 UTC\)")


@pytest.mark.parametrize("late_data", [False, True], ids=["aggregate", "run"])
def test_an_aggregation_named_like_a_column_of_the_engine_s_own_matches_the_pandas_runner(spark, late_data):
    # Before: aggregate(_k0=...) replaced the key in the engine's panes, and Spark failed converting it.
    frame = events(ROWS)
    named = {"_k0": Sum("amount"), "start": Count(), "_first": Max("amount")}
    expected = windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(**named)
    w = windowed(spark.createDataFrame(frame), time="ts", key="user").fixed("10 seconds")
    panes = w.run(**named).panes if late_data else w.aggregate(**named)
    assert_same_panes(panes.toPandas(), expected)


@pytest.mark.parametrize("combine", ["true", "false"])
def test_a_timestamp_key_folded_before_the_shuffle_matches_the_pandas_runner(spark, combine):
    # Before: with the fold on (the default), pyspark 4's to_arrow_schema raised a bare AssertionError for the
    # folded rows' timestamp key when the query was defined.
    frame = events(ROWS).assign(day=lambda f: f["ts"].dt.floor("h"), user=lambda f: f["user"].where(f["user"] != "d"))
    expected = windowed(frame, time="ts", key=["day", "user"]).fixed("10 seconds").aggregate(n=Count(), total=Sum("amount"))
    spark.conf.set("windowing.spark.combine", combine)
    try:
        panes = windowed(spark.createDataFrame(frame), time="ts", key=["day", "user"]).fixed("10 seconds") \
            .aggregate(n=Count(), total=Sum("amount")).toPandas()
    finally:
        spark.conf.unset("windowing.spark.combine")
    assert_same_panes(panes, expected)


def test_durations_on_a_spark_timestamp_are_taken_to_the_microsecond(spark):
    # Spark's timestamps are whole microseconds: a 1.5 µs window's bounds could not be written back.
    frame = spark.createDataFrame(events(ROWS))
    panes = windowed(frame, time="ts", key="user").fixed(pd.Timedelta("1 min") / 7).aggregate(Sum("amount")).toPandas()
    expected = windowed(frame, time="ts", key="user").fixed("8571429us").aggregate(Sum("amount")).toPandas()
    assert_same_panes(panes, expected)
    with pytest.raises(WindowingConfigError, match=r"fixed\(size\)='1 ns' is less than a microsecond, the precision of "
                                                   r"time column 'ts' \(a Spark timestamp\)"):
        windowed(frame, time="ts", key="user").fixed("1 ns").aggregate(Sum("amount"))


def test_a_window_bound_beyond_a_narrow_integer_time_column_fails_the_query_naming_the_column(spark):
    # Spark's output keeps the column's type (tinyint here), which cannot hold the session's end, 215: the
    # bound was clipped to 127 before, silently.
    frame = spark.createDataFrame([("a", 1, 2), ("a", 15, 5)], "user string, ts tinyint, amount long").coalesce(1)
    out = windowed(frame, time="ts", key="user").sessions(200).aggregate(total=Sum("amount"))
    with pytest.raises(Exception, match=r"a window bound, 215, lies outside the range of time column 'ts' \(int8"):
        out.collect()


def _assert_refused(spark, frame, combine: str, late_data: bool, message: str) -> None:
    # One input partition: on pyspark 3.5 the other task of a stage whose task fails is killed, and now and
    # then its "Socket closed" was the stage's reported failure instead of the refusal.
    frame = frame.coalesce(1)
    spark.conf.set("windowing.spark.combine", combine)
    try:
        w = windowed(frame, time="ts", key="user").fixed("10 seconds")
        out = w.run(total=Sum("amount")).output if late_data else w.aggregate(total=Sum("amount"))
        with pytest.raises(Exception, match=message):
            out.collect()
    finally:
        spark.conf.unset("windowing.spark.combine")


@pytest.mark.parametrize("combine", ["true", "false"])
@pytest.mark.parametrize("shape", ["fixed", "sliding"])
def test_windows_at_the_ends_of_a_numeric_axis_are_the_pandas_runners_lifted_or_not(spark, combine, shape):
    # The fold before the shuffle put a time in the first unit of the axis into a unit that wrapped around to its
    # end. Sliding windows there would start before the axis (refused), so their earliest time is one slide later.
    low, high = -(2**63) + (3 if shape == "fixed" else 25), 2**63 - 2
    frame = pd.DataFrame({"user": ["a", "a", "b", "b", "a"], "ts": [high, high - 7, low, low + 4, 0], "amount": [1, 2, 4, 8, 16]})
    build = {"fixed": lambda w: w.fixed(10), "sliding": lambda w: w.sliding(20, every=10)}[shape]
    expected = build(windowed(frame, time="ts", key="user")).aggregate(total=Sum("amount"))
    assert expected["window_end"].max() == 2**63 - 1
    spark.conf.set("windowing.spark.combine", combine)
    try:
        result = build(windowed(spark.createDataFrame(frame).coalesce(1), time="ts", key="user")).aggregate(total=Sum("amount"))
        assert_same_panes(result.toPandas(), expected)
    finally:
        spark.conf.unset("windowing.spark.combine")


FIRST_INSTANTS = {  # a time in the first second of the axis (1677-09-21 00:12:43.145225), as a timestamp or an epoch
    "timestamp": (None, pd.Series([pd.Timestamp("1677-09-21 00:12:43.645225"), pd.Timestamp("2024-01-01")]).astype("datetime64[us]")),
    "epoch seconds": ("s", [-9223372036.354775, 1704067200.0]),
    "epoch nanoseconds, rounded onto the axis": ("ns", np.array([-(2**63) + 308, 2**63 - 309], dtype=np.int64)),
}


@pytest.mark.parametrize("combine", ["true", "false"])
@pytest.mark.parametrize("shape", ["fixed", "sliding"])
@pytest.mark.parametrize("time", FIRST_INSTANTS.values(), ids=list(FIRST_INSTANTS))
def test_instants_in_the_first_second_of_the_axis_window_as_on_pandas(spark, combine, shape, time):
    """Folded before the shuffle, an instant of 1677 went into a window of 2262 (its unit's start, before the axis,
    wrapped around when made nanoseconds), and sliding windows there, which the pandas runner refuses, came out;
    nanoseconds that round onto the axis were refused on Spark, taken on pandas."""
    unit, times = time
    frame = pd.DataFrame({"user": ["a", "b"], "ts": times, "amount": [1, 2]})
    build = {"fixed": lambda w: w.fixed("1 second"), "sliding": lambda w: w.sliding("2 seconds", every="1 second")}[shape]
    spark.conf.set("windowing.spark.combine", combine)
    try:
        result = build(windowed(spark.createDataFrame(frame).coalesce(1), time="ts", key="user", time_unit=unit))
        if shape == "sliding":  # its windows would start before the axis
            # the axis's start in microseconds on both (Spark's named it in nanoseconds, 00:12:43.145224193)
            refused = r"time column 'ts' holds .*, whose windows would start before the time axis does \(1677-09-21 00:12:43.145225\)"
            with pytest.raises(Exception, match=refused):
                build(windowed(frame, time="ts", key="user", time_unit=unit)).aggregate(total=Sum("amount"))
            with pytest.raises(Exception, match=refused):
                result.aggregate(total=Sum("amount")).collect()
            return
        expected = build(windowed(frame, time="ts", key="user", time_unit=unit)).aggregate(total=Sum("amount"))
        assert expected["window_start"].min() < pd.Timestamp("1677-09-22")
        assert_same_panes(result.aggregate(total=Sum("amount")).toPandas(), expected)
    finally:
        spark.conf.unset("windowing.spark.combine")


@pytest.mark.parametrize("ts", [2**63 - 1, -(2**63)], ids=["end of time", "below the axis"])
def test_an_integer_event_time_at_either_end_of_64_bits_fails_the_query_naming_it(spark, ts):
    frame = spark.createDataFrame([(1, 5), (ts, 7)], "t bigint, amount long").coalesce(1)  # see _assert_refused
    with pytest.raises(Exception, match=rf"time column 't' holds {ts}, outside the engine's range \(64-bit integers from "):
        windowed(frame, time="t").fixed(10).aggregate(Sum("amount")).collect()


def test_a_column_the_pipeline_reads_that_names_two_columns_is_refused_naming_it(spark):
    frame = spark.createDataFrame([(1, 2, 3)]).toDF("ts", "x", "x")  # what a join of two frames with an x leaves
    with pytest.raises(WindowingConfigError, match=r"Sum\(column\)='x' names 2 columns of the input; rename or drop all but one"):
        windowed(frame, time="ts").fixed(10).aggregate(Sum("x"))


def test_sums_and_extremes_of_a_decimal_column_are_decimals_as_on_pandas(spark):
    # A Sum of decimal(10,2) was typed bigint from the default of an empty window: a whole sum lost its type, any
    # other failed in the worker; Min and Max were refused, their type not derived.
    D = decimal.Decimal
    frame = spark.createDataFrame([("a", dt.datetime(2024, 1, 1, 0, 0, 1), D("1.25")), ("a", dt.datetime(2024, 1, 1, 0, 0, 3), D("2.50")),
                                   ("b", dt.datetime(2024, 1, 1, 0, 0, 12), None)], "user string, ts timestamp, amt decimal(10,2)")
    aggregations = dict(s=Sum("amt"), hi=Max("amt"), lo=Min("amt"), n=Count("amt"))
    build = lambda source: windowed(source, time="ts", key="user").fixed("10 seconds").trigger(  # noqa: E731
        AfterWatermark(early=AfterCount(1))).discarding()  # then empty ON_TIME panes: a sum of 0, no extreme
    result = build(frame).aggregate(**aggregations)
    assert [result.schema[c].dataType.simpleString() for c in aggregations] == ["decimal(20,2)", "decimal(10,2)", "decimal(10,2)",
                                                                               "bigint"]
    got = result.toPandas()
    assert sorted(got.s) == [D("0.00"), D("0.00"), D("0.00"), D("3.75")]
    assert_same_panes(got, build(frame.toPandas()).aggregate(**aggregations))


@pytest.mark.parametrize("decimal_type", ["decimal(10,2)", "decimal(38,25)", "decimal(38,0)"])
def test_a_mean_of_decimals_is_a_double_as_sparks_avg_is_near(spark, decimal_type):
    # On pyspark 3.5 (pyarrow 14) every such query failed: the workers handed back Decimals for the double column.
    D = decimal.Decimal
    frame = spark.createDataFrame([(1, D("1.5")), (2, D("2.25")), (3, None), (12, None)], f"ts bigint, x {decimal_type}")
    result = windowed(frame, time="ts").fixed(10).aggregate(m=Mean("x"))
    assert result.schema["m"].dataType.simpleString() == "double"
    native = {r.start: r.m for r in frame.groupBy(F.floor(F.col("ts") / 10).alias("start")).agg(F.avg("x").alias("m")).collect()}
    got = {r.window_start // 10: r.m for r in result.collect()}
    assert got.keys() == native.keys() and got[1] is None and native[1] is None
    assert got[0] == pytest.approx(float(native[0])) and got[0] == (1.875 if decimal_type != "decimal(38,0)" else 2.0)


def test_a_sum_of_decimals_keeps_every_digit_as_sparks_sum_does(spark):
    """The workers added Python Decimals in the default context, 28 digits: a decimal(38, 18) sum lost ten."""
    D = decimal.Decimal
    frame = spark.createDataFrame([(dt.datetime(2024, 1, 1), D("12345678901234567890.123456789012345678")),
                                   (dt.datetime(2024, 1, 1, 0, 0, 1), D("1.000000000000000001"))], "ts timestamp, x decimal(38,18)")
    expected = frame.agg(F.sum("x")).first()[0]
    assert expected == D("12345678901234567891.123456789012345679")
    assert windowed(frame, time="ts").fixed("1 minute").aggregate(s=Sum("x")).first()["s"] == expected


def test_a_decimal_sum_beyond_its_type_fails_naming_the_column_and_the_value(spark):
    """pyspark's conversion failed naming neither, and pointed to a setting that turns its safety check off."""
    D = decimal.Decimal
    frame = spark.createDataFrame([(dt.datetime(2024, 1, 1), D("99999999999999999999.5"))] * 2, "ts timestamp, x decimal(38,18)")
    with pytest.raises(Exception, match=r"output column 's' is decimal\(38,18\), but a pane holds 199999999999999999999.0+, "
                                        r"more than its 20 digits before the point"):
        windowed(frame, time="ts").fixed("1 minute").aggregate(s=Sum("x")).collect()


def test_a_nan_pane_value_reaches_spark_as_null_where_pandas_keeps_nan(spark):
    """pyspark's conversion of a worker's pandas column to Arrow counts NaN as missing (docs/spark.md, "Output
    types"); native sum gives NaN. Pinned so that the table changes when pyspark does."""
    frame = spark.createDataFrame([(dt.datetime(2024, 1, 1), float("inf")), (dt.datetime(2024, 1, 1, 0, 0, 1), float("-inf"))],
                                  "ts timestamp, x double")
    build = lambda source: windowed(source, time="ts").fixed("1 minute").aggregate(s=Sum("x"), m=Mean("x"), hi=Max("x"))  # noqa: E731
    assert build(frame).selectExpr("s is null", "m is null", "hi").first() == (True, True, float("inf"))
    assert frame.agg(F.isnan(F.sum("x"))).first()[0]
    on_pandas = build(frame.toPandas())
    assert np.isnan(on_pandas.s.iloc[0]) and np.isnan(on_pandas.m.iloc[0]) and on_pandas.hi.tolist() == [float("inf")]


@pytest.mark.parametrize("zone, combine", [("UTC", "true"), ("UTC", "false"), ("America/Los_Angeles", "false"),
                                           ("America/Los_Angeles", "true")])
def test_timestamp_keys_and_values_beyond_pandas_nanoseconds_come_back_exact(spark, combine, zone):
    """Spark's timestamps run from the year 1 to 9999; pandas' nanoseconds from 1677 to 2262 (docs/spark.md,
    "Output types"). Unpacked (``combine=false``) such rows failed in pyspark's conversion to pandas, and on pyspark 4
    a summer time after 2037 in a zone with daylight saving came back an hour early."""
    far, ancient, summer = dt.datetime(3000, 7, 1, 12), dt.datetime(100, 1, 1), dt.datetime(2040, 7, 1, 12)
    rows = [(far, dt.datetime(2024, 1, 1), ancient), (far, dt.datetime(2024, 1, 1, 0, 0, 1), far),
            (ancient, dt.datetime(2024, 1, 1), None), (summer, dt.datetime(2024, 1, 1), summer)]
    frame = spark.createDataFrame(rows, "k timestamp, ts timestamp, v timestamp")  # built in UTC: collect() reads in UTC
    spark.conf.set("spark.sql.session.timeZone", zone)
    spark.conf.set("windowing.spark.combine", combine)
    try:
        panes = windowed(frame, time="ts", key="k").fixed("1 minute").aggregate(lo=Min("v"), hi=Max("v"), n=Count())
        got = panes.select("k", "lo", "hi", "n").collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.unset("windowing.spark.combine")
    assert sorted(got) == [(ancient, None, None, 1), (summer, summer, summer, 1), (far, ancient, far, 2)]


@pytest.mark.parametrize("combine", ["true", "false"])
def test_summer_times_after_2037_in_a_zone_with_daylight_saving_come_back_exact(spark, combine):
    """pyspark 3.5 hands packed timestamps over as wall times made by pandas 2's rules (pytz's), which know no
    daylight saving after 2037; the workers read them back with zoneinfo's, which do: a key and a Max of a summer
    time of 2041 came back an hour early (the case above that covers it is a strict xfail there for the year 100).
    On pyspark 4 (pandas 3 reads a zone's name with zoneinfo's rules) both rules agree: it guards `make test-spark35`."""
    summer = dt.datetime(2041, 7, 1, 9)
    frame = spark.createDataFrame([(summer, dt.datetime(2024, 1, 1, 0, 0, 1))], "k timestamp, ts timestamp")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    spark.conf.set("windowing.spark.combine", combine)
    try:
        panes = windowed(frame, time="ts", key="k").fixed("10 seconds").aggregate(hi=Max("k"), n=Count())
        got = panes.select(F.unix_micros("k").alias("k"), F.unix_micros("hi").alias("hi"), "n").collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.unset("windowing.spark.combine")
    micros = int(pd.Timestamp(summer, tz="UTC").value // 1000)
    assert [tuple(row) for row in got] == [(micros, micros, 1)]


@pytest.mark.parametrize("combine", ["true", "false"])
def test_lists_of_timestamps_in_a_zone_with_daylight_saving_come_back_exact(spark, combine):
    """pyspark localizes the naive wall times of a list with its own rules: a time of the hour the clocks go back
    failed the job inside pyspark (``AmbiguousTimeError``, naming no column), and on pyspark 3.5 unpacked a summer
    time after 2037 came back an hour late (pytz's rules against zoneinfo's). The workers hand them over zone-aware
    (`instants.zone_aware`), in UTC (`planning.exact_instants`): the first of the repeated hour's times stays itself."""
    rows = [(dt.datetime(2024, 11, 3, 8, 30),), (dt.datetime(2041, 7, 1, 9),), (None,), (dt.datetime(3000, 7, 1, 9),)]
    frame = spark.createDataFrame(rows, "v timestamp").withColumn("ts", F.lit(dt.datetime(2024, 1, 1, 0, 0, 1)))
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    spark.conf.set("windowing.spark.combine", combine)
    try:
        panes = windowed(frame, time="ts").fixed("10 seconds").aggregate(all=ToList("v"), top=TopN("v", 2))
        got = panes.select(F.transform("all", F.unix_micros).alias("all"), F.transform("top", F.unix_micros).alias("top"))
        [(everything, top)] = [tuple(row) for row in got.collect()]
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.unset("windowing.spark.combine")
    daylight, summer, far = 1_730_622_600_000_000, 2_256_282_000_000_000, 32_519_350_800_000_000  # 2024-11-03 08:30 UTC
    assert sorted(everything) == [daylight, summer, far] and top == [far, summer]


@pytest.mark.parametrize("combine", ["true", "false"])
def test_two_instants_of_the_hour_the_clocks_go_back_stay_two_keys_and_two_values(spark, combine):
    """In Los Angeles 08:30 and 09:30 UTC of 2024-11-03 are both 01:30. The workers held timestamp keys and
    built-ins' timestamp values as the session zone's wall times, where the two were one key and one value, the
    later; they hold them as UTC wall times now (`planning.exact_instants`), with no warning. Lifted (a timestamp
    key, Counts), packed (a Min, Max, ToList) and unpacked (``combine=false``)."""
    first, second = dt.datetime(2024, 11, 3, 8, 30), dt.datetime(2024, 11, 3, 9, 30)
    at = dt.datetime(2024, 1, 1, 0, 0, 1)
    frame = spark.createDataFrame([(first, at, first), (second, at, second), (second, at, None)],
                                  "k timestamp, ts timestamp, v timestamp")  # built in UTC
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    spark.conf.set("windowing.spark.combine", combine)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RepeatedWallTimeWarning)
            keyed = windowed(frame, time="ts", key="k").fixed("10 seconds").aggregate(n=Count("v"), rows=Count())
            valued = windowed(frame, time="ts").fixed("10 seconds").aggregate(
                lo=Min("v"), hi=Max("v"), all=ToList("v"), top=TopN("v", 2), n=Count("v"))
        keys = keyed.select(F.unix_micros("k"), "n", "rows").collect()
        values = valued.select(F.unix_micros("lo"), F.unix_micros("hi"), F.transform("all", F.unix_micros),
                               F.transform("top", F.unix_micros), "n").collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.unset("windowing.spark.combine")
    a, b = 1_730_622_600_000_000, 1_730_626_200_000_000
    assert sorted(tuple(row) for row in keys) == [(a, 1, 1), (b, 1, 2)]
    [(lo, hi, everything, top, n)] = [tuple(row) for row in values]
    assert (lo, hi, sorted(everything), top, n) == (a, b, [a, b], [b, a], 2)


@pytest.mark.parametrize("zone, warned", [("America/Los_Angeles", True), ("Europe/Berlin", True), ("UTC", False),
                                          ("Asia/Tokyo", False), ("+05:30", False)])
def test_a_session_zone_that_sets_its_clocks_back_warns_naming_the_timestamp_columns_the_workers_hold(spark, zone, warned):
    """The workers hold a Fold's timestamps as wall times in the session zone, where the hour the clocks go back gives
    two instants one wall time, taken as the later: silently, but for this warning at the query's definition, pointing
    at the user's line. Keys and built-ins' values are held exactly (the case above), and the time column leaves as
    microseconds: no warning for those."""
    base = dt.datetime(2024, 1, 1)
    frame = spark.createDataFrame([("a", base, base)], "k string, ts timestamp, seen timestamp")
    latest = Fold("seen", None, lambda a, v: v if a is None or v > a else a, lambda a, b: b if a is None or b > a else a)
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            windowed(frame, time="ts", key="seen").fixed("1 minute").aggregate(n=Count(), first=Min("seen"))
            windowed(frame, time="ts", key="k").fixed("1 minute").aggregate(n=Count(), all=ToList("seen"), last=latest)
            windowed(frame, time="ts", key="k").fixed("1 minute").aggregate(n=Count())
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    repeated = [w for w in caught if issubclass(w.category, RepeatedWallTimeWarning)]
    assert [str(w.message).split(": two instants")[0] for w in repeated] == [
        f"spark.sql.session.timeZone={zone!r} sets its clocks back (daylight saving), and the Python workers hold "
        "'seen', 'last' as wall times in it"] * warned
    assert all(w.filename == __file__ for w in repeated)


def test_an_interval_column_sums_averages_and_extremes_as_spark_does(spark):
    """Sum, Min and Max of a day-time interval were refused at planning ("cannot derive the Spark type ...
    spark_typed(..., 'double')") and Mean failed in the worker: against Spark's own sum, min, max and avg per
    window (avg rounds its microseconds half away from zero, as does Mean here; the pandas runner keeps
    nanoseconds), and the pandas runner for the rest."""
    micros = [1, 2, -1, -2, -1, 5, None, 2, 7, 86_400_000_000, -3, None]
    rows = [(k, s, m) for k, s, m in zip("aaabbcccdeef", [1, 2, 3, 4, 5, 6, 7, 8, 61, 62, 63, 9], micros)]
    frame = spark.createDataFrame(rows, "user string, s bigint, us bigint").select(
        "user", F.timestamp_seconds("s").alias("ts"),
        F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), F.col("us") / 1_000_000).alias("d"))
    aggregations = dict(s=Sum("d"), lo=Min("d"), hi=Max("d"), m=Mean("d"))
    result = windowed(frame, time="ts", key="user").fixed("1 minute").aggregate(**aggregations)
    assert {result.schema[c].dataType.simpleString() for c in aggregations} == {"interval day to second"}
    native = frame.groupBy("user", F.window("ts", "1 minute").start.alias("window_start")).agg(
        F.sum("d").alias("s"), F.min("d").alias("lo"), F.max("d").alias("hi"), F.avg("d").alias("m"))
    columns = ["user", "window_start", *aggregations]
    ordered = lambda panes: panes[columns].sort_values(columns[:2]).reset_index(drop=True)  # noqa: E731
    got, expected = ordered(result.toPandas()), ordered(native.toPandas())
    only_nulls = got.user == "f"  # Min, Max and Mean null as Spark's; Sum 0, as on pandas, where Spark's sum is null
    pd.testing.assert_frame_equal(got[~only_nulls], expected[~only_nulls], check_dtype=False)
    pd.testing.assert_frame_equal(got.loc[only_nulls, ["lo", "hi", "m"]], expected.loc[only_nulls, ["lo", "hi", "m"]],
                                  check_dtype=False)
    assert got.loc[only_nulls, ["lo", "hi", "m"]].isna().all(axis=None) and got.s[only_nulls].tolist() == [pd.Timedelta(0)]
    assert got.m.tolist()[:3] == pd.to_timedelta([1, -2, 4], unit="us").tolist()  # 2/3, -1.5 and 3.5 microseconds
    assert_same_panes(result.drop("m").toPandas(),
                      windowed(frame.toPandas(), time="ts", key="user").fixed("1 minute").aggregate(s=Sum("d"), lo=Min("d"),
                                                                                                 hi=Max("d")))
    # A Fold's type is sampled from one value: an interval (an np.timedelta64 output was typed bigint before).
    present = frame.where("us is not null")
    folds = dict(s=Sum("d"), fold=Fold("d", pd.Timedelta(0), lambda a, v: a + v, lambda a, b: a + b),
                 numpy=Fold("d", np.timedelta64(0, "ns"), lambda a, v: a + np.timedelta64(v), lambda a, b: a + b))
    folded = windowed(present, time="ts", key="user").fixed("1 minute").aggregate(**folds)
    assert {folded.schema[c].dataType.simpleString() for c in folds} == {"interval day to second"}
    got = folded.toPandas()
    assert got.s.tolist() == got.fold.tolist() == got.numpy.tolist()


@pytest.mark.parametrize("key_type", ["struct<u:string>", "array<string>", "map<string,int>"])
def test_a_key_column_of_structs_arrays_or_maps_is_refused_naming_it(spark, key_type):
    # It failed in the workers: pyarrow groups no struct or list keys, and pandas hashes no list or dict.
    frame = spark.createDataFrame([(1, 5)], "ts bigint, amount long").withColumn("k", F.lit(None).cast(key_type))
    with pytest.raises(WindowingConfigError, match=rf"key column 'k' has Spark type {re.escape(key_type)}; a key groups elements"):
        windowed(frame, time="ts", key="k").fixed(10).aggregate(Sum("amount"))


def test_a_missing_integer_event_time_fails_the_query_naming_the_column(spark):
    frame = spark.createDataFrame([(1, 5), (None, 7)], "t bigint, amount long").coalesce(1)  # see _assert_refused
    with pytest.raises(Exception, match=r"time column 't' has a missing value \(null\)"):
        windowed(frame, time="t").fixed(10).aggregate(Sum("amount")).collect()


@pytest.mark.parametrize("late_data", [False, True], ids=["aggregate", "run"])
def test_column_names_with_a_dot_or_a_backtick_are_names_not_paths(spark, late_data):
    frame = events(ROWS[:4]).rename(columns={"user": "u.id", "ts": "t.s", "amount": "a`mt"}).assign(**{"not.used": "x"})
    expected = windowed(frame, time="t.s", key="u.id").fixed("10 seconds").aggregate(total=Sum("a`mt"))
    w = windowed(spark.createDataFrame(frame), time="t.s", key="u.id").fixed("10 seconds")
    if late_data:
        run = w.run(total=Sum("a`mt"))
        panes = run.panes.toPandas()
        assert run.late_data.count() == 0
        assert run.late_data.columns == ["u.id", "t.s", "a`mt", "not.used", "window_start", "window_end", "reason"]
    else:
        panes = w.aggregate(total=Sum("a`mt")).toPandas()
    assert_same_panes(panes.rename(columns={"u.id": "user"}), expected.rename(columns={"u.id": "user"}))


def test_a_second_stream_is_refused_rather_than_ignored(spark):
    # The advice was to wrap InnerJoin in spark_typed, which then failed elsewhere; the runner never read the second.
    frame = spark.createDataFrame(events(ROWS))
    w = windowed(frame, time="ts", key="user").with_second_stream(frame).fixed("10 seconds")
    with pytest.raises(WindowingConfigError, match=r"with_second_stream\(<DataFrame>\) on Spark: the Spark runner runs one "
                                                   r"stream and would ignore the second"):
        w.aggregate(j=InnerJoin("amount"))
    with pytest.raises(WindowingConfigError, match=r"with_second_stream\(<DataFrame>\) on Spark"):
        w.run(j=InnerJoin("amount"))


@pytest.mark.parametrize("acc", [Sum("amount"), Mean("amount")], ids=repr)
def test_sum_or_mean_of_a_string_column_says_it_needs_numbers(spark, acc):
    # Sum advised spark_typed(Sum('amount'), 'double'), which cannot help; Mean was planned with a string input.
    frame = spark.createDataFrame([("a", dt.datetime(2024, 1, 1), "5")], "user string, ts timestamp, amount string")
    name = type(acc).__name__
    with pytest.raises(WindowingConfigError, match=rf"aggregate\(total={name}\('amount'\)\): column 'amount' has Spark type "
                                                   rf"string; {name} needs numbers: cast the column first"):
        windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(total=acc)


@pytest.mark.parametrize("combine", ["true", "false"])
def test_min_and_max_of_timestamps_strings_and_booleans_keep_the_input_type(spark, combine):
    # Min of a timestamp gave raw microseconds as a float, and lifting it failed to plan.
    frame = spark.createDataFrame([("a", dt.datetime(2024, 1, 1, 0, 0, 1), dt.datetime(2024, 3, 1), "q", True),
                                   ("a", dt.datetime(2024, 1, 1, 0, 0, 2), dt.datetime(2024, 2, 1), "p", False),
                                   ("b", dt.datetime(2024, 1, 1, 0, 0, 3), None, None, None)],
                                  "user string, ts timestamp, at timestamp, s string, f boolean")
    spark.conf.set("windowing.spark.combine", combine)
    try:
        panes = windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(
            first=Min("at"), last=Max("at"), low=Min("s"), any=Max("f"))
        assert [panes.schema[c].dataType.simpleString() for c in ("first", "last", "low", "any")] == [
            "timestamp", "timestamp", "string", "boolean"]
        assert sorted(map(tuple, panes.select("user", "first", "last", "low", "any").collect())) == [
            ("a", dt.datetime(2024, 2, 1), dt.datetime(2024, 3, 1), "p", True), ("b", None, None, None, None)]
    finally:
        spark.conf.unset("windowing.spark.combine")


@pytest.mark.parametrize("combine", ["true", "false"])
def test_an_integer_sum_beyond_64_bits_fails_the_query_naming_the_column(spark, combine):
    # Folded before the shuffle (combine), the two rows' sum wrapped around to -2**63 silently.
    rows = [("a", dt.datetime(2024, 1, 1, 0, 0, 1), 2**62), ("a", dt.datetime(2024, 1, 1, 0, 0, 2), 2**62)]
    frame = spark.createDataFrame(rows, "user string, ts timestamp, amount long").coalesce(1)  # both rows fold together
    _assert_refused(spark, frame, combine, False, r"aggregate\(total=Sum\('amount'\)\): in a window of column 'amount', "
                                                  r"a sum is beyond the range of int64; cast the column to double "
                                                  r"\(approximate\) or to decimal\(38,0\) \(exact\) before windowed\(\)$")


def test_a_partial_sum_beyond_64_bits_of_a_window_within_them_is_the_pandas_runners_sum(spark):
    # One input partition's rows of the window add up beyond 64 bits, the window's rows do not.
    rows = [("a", dt.datetime(2024, 1, 1, 0, 0, 3), -2**62),
            ("a", dt.datetime(2024, 1, 1, 0, 0, 1), 2**62), ("a", dt.datetime(2024, 1, 1, 0, 0, 2), 2**62)]
    frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, 2), "user string, ts timestamp, amount long")
    assert frame.rdd.glom().map(len).collect() == [1, 2]
    expected = windowed(frame.toPandas(), time="ts", key="user").fixed("10 seconds").aggregate(total=Sum("amount"))
    panes = windowed(frame, time="ts", key="user").fixed("10 seconds").aggregate(total=Sum("amount"))
    assert [r.total for r in panes.collect()] == list(expected["total"]) == [2**62]


@pytest.mark.parametrize("combine", ["true", "false"])
def test_binary_keys_window_as_on_pandas(spark, combine):
    # Before: on pyspark 3.5 (pandas 2 in the workers) every query keyed by a binary column failed with "Cannot use
    # .str.contains with values of inferred dtype 'bytes'", naming no column; pyspark 4.3 ran it.
    rows = [(b"a", 1, 1), (b"a\x00", 2, 2), (b"a", 3, 4), (None, 4, 8), (b"", 5, 16)]
    frame = spark.createDataFrame(rows, "k binary, ts long, v long").coalesce(1)
    spark.conf.set("windowing.spark.combine", combine)
    try:
        panes = windowed(frame, time="ts", key="k").fixed(10).aggregate(total=Sum("v"))
        got = [((None if r.k is None else bytes(r.k)), r.total) for r in panes.collect()]
    finally:
        spark.conf.unset("windowing.spark.combine")
    assert sorted(got, key=repr) == [(None, 8), (b"", 16), (b"a", 5), (b"a\x00", 2)]


BIG = 2**53  # float64 holds 2**53 but not 2**53 + 1


@pytest.mark.parametrize("combine", ["true", "false"])
@pytest.mark.parametrize("late_data", [False, True], ids=["aggregate", "run"])
def test_bigint_keys_and_values_beside_nulls_stay_exact(spark, combine, late_data):
    # pyspark hands a bigint column holding a null to pandas as float64: keys 2**53 and 2**53 + 1 became one
    # key, and sums, minima and maxima of values beyond 2**53 were rounded.
    at = [dt.datetime(2024, 1, 1, 0, 0, s) for s in range(1, 8)]
    keys = [BIG, BIG, BIG + 1, None, BIG + 1, None, BIG + 2]
    values = [BIG + 1, BIG + 2, BIG + 3, BIG + 5, None, None, None]
    frame = spark.createDataFrame(list(zip(keys, at, values)), "k bigint, ts timestamp, v bigint").coalesce(1)
    aggs = dict(total=Sum("v"), lo=Min("v"), hi=Max("v"), n=Count("v"))
    spark.conf.set("windowing.spark.combine", combine)
    spark.conf.set("windowing.spark.buckets", "1")  # every key in one bucket, beside the nulls
    try:
        w = windowed(frame, time="ts", key="k").fixed("10 seconds")
        panes = w.run(**aggs).panes if late_data else w.aggregate(**aggs)
        assert [panes.schema[c].dataType.simpleString() for c in ("k", "total", "lo", "hi", "n")] == ["bigint"] * 5
        got = sorted(tuple(r) for r in panes.select("k", *aggs).fillna(-1).collect())
    finally:
        spark.conf.unset("windowing.spark.combine")
        spark.conf.unset("windowing.spark.buckets")
    table = [(-1, BIG + 5, BIG + 5, BIG + 5, 1),  # the null key (nulls as -1)
             (BIG, 2 * BIG + 3, BIG + 1, BIG + 2, 2),
             (BIG + 1, BIG + 3, BIG + 3, BIG + 3, 1),
             (BIG + 2, 0, -1, -1, 0)]  # only nulls: an empty Min and Max
    assert got == table
    pdf = pd.DataFrame({"k": pd.array(keys, dtype="Int64"), "ts": at, "v": pd.array(values, dtype="Int64")})
    expected = windowed(pdf, time="ts", key="k").fixed("10 seconds").aggregate(**aggs)
    rows = expected[["k", *aggs]].astype(object).itertuples(index=False)
    assert sorted(tuple(-1 if pd.isna(v) else v for v in r) for r in rows) == table


@pytest.mark.parametrize("late_data", [False, True], ids=["lifted", "packed"])
def test_the_fold_before_the_shuffle_gets_nullable_integers_as_they_are_without_null_flags(spark, late_data):
    # It makes the flags from Arrow's nulls (combine.with_null_flags): Spark writes two columns fewer into Arrow.
    frame = spark.createDataFrame([(BIG, dt.datetime(2024, 1, 1), None)], "k bigint, ts timestamp, v bigint")
    w = windowed(frame, time="ts", key="k").fixed("10 seconds")
    panes = w.run(total=Sum("v")).panes if late_data else w.aggregate(total=Sum("v"))
    plan = panes._jdf.queryExecution().analyzed().toString()
    calls = [line.split("MapInArrow", 1)[1].split(")#", 1)[0] for line in plan.splitlines() if "MapInArrow" in line]
    assert len(calls) == 1 and "_k0#" in calls[0] and "_v0#" in calls[0], plan
    assert "_null" not in calls[0], plan
    assert [tuple(r) for r in panes.select("k", "total").collect()] == [(BIG, 0)]


@pytest.mark.parametrize("combine", ["true", "false"])
def test_tinyint_and_smallint_keys_at_their_extremes_group_as_spark_does(spark, combine):
    # Before: a tinyint key's codes were computed in int8 in the workers: -128 and 127 wrapped around, and with a
    # second key column the rows took other rows' keys, without a word.
    frame = spark.createDataFrame([("x", -128, -32768, 1, 1), ("y", 127, 32767, 2, 2), ("z", 0, 0, 3, 4), ("x", 127, 0, 4, 8)],
                                  "a string, k tinyint, s smallint, t long, v long")
    spark.conf.set("windowing.spark.combine", combine)
    try:
        for keys in (["k"], ["a", "k"], ["s", "k"]):
            panes = windowed(frame, time="t", key=keys).fixed(10).aggregate(total=Sum("v")).collect()
            native = frame.groupBy(*keys).agg(F.sum("v").alias("total")).collect()
            assert sorted(tuple(r[c] for c in [*keys, "total"]) for r in panes) == sorted(tuple(r) for r in native)
    finally:
        spark.conf.unset("windowing.spark.combine")


@pytest.mark.parametrize("buckets", ["3", "5", "7"])
def test_a_nan_key_and_a_null_key_are_one_missing_key_whatever_the_bucket_count(spark, buckets):
    # Before: the bucket hashed NaN and null apart, so by the bucket count they met in one bucket (one missing
    # key, as on pandas) or not (the same missing key's panes twice: with 5 or 7 buckets here).
    frame = spark.createDataFrame([(float("nan"), 1, 1), (None, 2, 2), (1.0, 3, 4), (-0.0, 4, 8), (0.0, 5, 16)],
                                  "k double, t long, v long")
    spark.conf.set("windowing.spark.buckets", buckets)
    try:
        panes = windowed(frame, time="t", key="k").fixed(10).aggregate(total=Sum("v")).collect()
    finally:
        spark.conf.unset("windowing.spark.buckets")
    assert sorted((r["k"] is None, r["total"]) for r in panes) == [(False, 4), (False, 24), (True, 3)]


@pytest.mark.parametrize("combine", ["true", "false"])
@pytest.mark.parametrize("keys", [[-0.0, 0.0, -0.0], [0.0, -0.0]], ids=["negative first", "positive first"])
def test_float_keys_minus_zero_and_zero_are_one_key_shown_as_zero_as_spark_groups_them(spark, combine, keys):
    # Before: the pane's key kept the sign of the first element seen, on both runners: -0.0 where native
    # groupBy gives 0.0, and which one came first depended on the order Spark delivered the rows in.
    pdf = pd.DataFrame({"k": keys, "t": np.arange(len(keys)), "v": np.arange(1, len(keys) + 1)})
    frame = spark.createDataFrame(pdf)
    spark.conf.set("windowing.spark.combine", combine)
    try:
        panes = windowed(frame, time="t", key="k").fixed(10).aggregate(total=Sum("v")).collect()
    finally:
        spark.conf.unset("windowing.spark.combine")
    native = frame.groupBy("k").agg(F.sum("v").alias("total")).collect()
    on_pandas = windowed(pdf, time="t", key="k").fixed(10).aggregate(total=Sum("v"))
    signed = [(math.copysign(1.0, r["k"]), r["total"]) for r in native]
    assert signed == [(1.0, sum(pdf["v"]))]
    assert [(math.copysign(1.0, r["k"]), r["total"]) for r in panes] == signed
    assert [(math.copysign(1.0, k), t) for k, t in zip(on_pandas["k"], on_pandas["total"])] == signed


def test_late_rows_round_trip_microseconds_of_timestamp_ntz_and_old_instants_in_any_session_zone(spark):
    # Before: a timestamp_ntz came back with milliseconds (Spark's own timestampNTZFormat), and in a session zone
    # whose offset once had seconds (Kolkata's +05:21:10 in 1900) the written offset lost them: 10 s later.
    from windowing.runners.spark.results import JSON_OPTIONS, late_data_of

    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        rows = spark.sql("select timestamp_ntz'2024-01-01 01:02:03.999999' as ntz, timestamp'1900-01-01 00:00:00' as born, "
                         "timestamp'2024-06-01 12:00:00.000001' as recent")
        out = rows.select(F.lit("LATE").alias("kind"), F.to_json(F.struct(*rows.columns), JSON_OPTIONS).alias("element"),
                          F.lit(1).alias("window_start"), F.lit(2).alias("window_end"), F.lit("r").alias("reason"))
        assert late_data_of(out, rows.schema).select(*rows.columns).collect() == rows.collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


@pytest.mark.parametrize("columns, aggregation, message", [
    ("ma map<int,string>", "total", r"run\(\): the input's column 'ma' holds a map<int,string>, a map whose keys are not strings"),
    ("nested struct<m: map<date,int>>", "total", r"column 'nested' holds a map<date,int>"),
    ("Reason string", "total", r"run\(\): the name 'Reason' equals the column 'reason' that run\(\) adds but for case"),
    ("x int", "Kind", r"the name 'Kind' equals the column 'kind' that run\(\) adds but for case"),
    ("Window_End long", "total", r"the name 'Window_End' equals the column 'window_end' that run\(\) adds but for case"),
], ids=["map of int keys", "a map inside a struct", "an input column", "an aggregation", "an input column of late_data"])
def test_run_refuses_what_its_late_data_cannot_carry_before_the_query(spark, columns, aggregation, message):
    # Before: run() built the query, and writing late_data failed at the first micro-batch with Spark's
    # INVALID_JSON_MAP_KEY_TYPE, or COLUMN_ALREADY_EXISTS / AMBIGUOUS_REFERENCE for names equal but for case.
    frame = spark.createDataFrame([], f"u string, t long, v long, {columns}")
    with pytest.raises(WindowingConfigError, match=message):
        windowed(frame, time="t", key="u").fixed(10).run(**{aggregation: Sum("v")})


@pytest.mark.parametrize("passenger", ["KIND", "Element", "Kind"])
def test_run_takes_an_input_column_neither_key_nor_aggregated_named_as_a_column_of_output_but_for_case(spark, passenger):
    # Refused as a clash, where such a column sits beside kind or element in no frame: late_data holds it, output
    # holds it only inside element.
    frame = spark.createDataFrame([("a", 1, 2, "x")], f"u string, t long, v long, {passenger} string")
    result = windowed(frame, time="t", key="u").fixed(10).run(total=Sum("v"))
    assert [tuple(r) for r in result.panes.select("u", "total").collect()] == [("a", 2)]


def test_names_equal_but_for_case_run_where_spark_tells_them_apart(spark):
    frame = spark.createDataFrame([("a", 1, 2, "x")], "u string, t long, v long, Reason string")
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        result = windowed(frame, time="t", key="u").fixed(10).run(Kind=Sum("v"))
        assert [tuple(r) for r in result.panes.select("u", "Kind").collect()] == [("a", 2)]
    finally:
        spark.conf.unset("spark.sql.caseSensitive")


@pytest.mark.parametrize("key, aggregations, first, second", [
    ("Timing", {"total": Sum("v")}, "Timing", "timing"),
    ("u", {"U": Sum("v")}, "u", "U"),
    ("u", {"total": Sum("v"), "Total": Count()}, "total", "Total"),
    ("Window_Start", {"value": Sum("v")}, "Window_Start", "window_start"),
], ids=["a key and timing", "a key and an aggregation", "two aggregations", "a key and window_start"])
@pytest.mark.parametrize("call", ["aggregate", "run"])
def test_output_columns_equal_but_for_case_are_refused_where_spark_takes_them_for_one(spark, key, aggregations, first,
                                                                                      second, call):
    # Before: the panes were made, and a select or filter of either column failed with AMBIGUOUS_REFERENCE.
    frame = spark.createDataFrame([("a", 1, 2)], f"{key} string, t long, v long")
    with pytest.raises(WindowingConfigError, match=f"'{first}' (and|equals the column) '{second}' .*but for case"):
        getattr(windowed(frame, time="t", key=key).fixed(10), call)(**aggregations)
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        panes = windowed(frame, time="t", key=key).fixed(10).aggregate(**aggregations)
        assert [tuple(r) for r in panes.select(first, second).collect()] == [tuple(
            panes.first()[panes.columns.index(name)] for name in (first, second))]
    finally:
        spark.conf.unset("spark.sql.caseSensitive")


@pytest.mark.skipif(PYSPARK_3, reason="collations are Spark 4's")
@pytest.mark.parametrize("role", ["key", "value"])
def test_a_collated_string_key_or_compared_value_is_refused_naming_the_column(spark, role):
    # 'a' and 'A' were two keys, where Spark's groupBy makes one of them under UTF8_LCASE, and Max compared bytes.
    frame = spark.createDataFrame([("a", 1, "x"), ("A", 2, "Y")], "k string, ts bigint, s string").select(
        F.col("k").cast("string collate UTF8_LCASE").alias("k"), "ts", F.col("s").cast("string collate UTF8_LCASE").alias("s"))
    name = "k" if role == "key" else "s"
    with pytest.raises(WindowingConfigError, match=rf"{role} column '{name}' has Spark type string collate UTF8_LCASE; .* byte by byte"):
        windowed(frame, time="ts", key="k" if role == "key" else None).fixed(10).aggregate(hi=Max("s"))
    assert windowed(frame, time="ts").fixed(10).aggregate(n=Count("s")).first()["n"] == 2  # counting compares nothing


class _MaxOrEmpty(Max):
    def get_output(self, accumulated):
        return "" if accumulated is None else accumulated


@pytest.mark.skipif(PYSPARK_3, reason="collations are Spark 4's")
@pytest.mark.parametrize("aggregation", [_MaxOrEmpty("s"), spark_typed(Max("s"), "string"), spark_typed(ToSet("s"), "array<string>")],
                         ids=["a subclass folding otherwise", "a stated max", "a stated set"])
def test_a_collated_value_compared_by_a_subclass_or_a_stated_built_in_is_refused(spark, aggregation):
    # The subclass dropped the output kind the refusal looked at (and a stated one never had it): 'a' came out as the
    # largest of 'a', 'B', 'A', where Spark's max under UTF8_LCASE gives 'B'.
    frame = spark.createDataFrame([(1, "a"), (2, "B"), (3, "A")], "ts bigint, s string").select(
        "ts", F.col("s").cast("string collate UTF8_LCASE").alias("s"))
    with pytest.raises(WindowingConfigError, match=r"value column 's' has Spark type string collate UTF8_LCASE"):
        windowed(frame, time="ts").fixed(10).aggregate(hi=aggregation)


def test_an_extreme_of_an_underived_type_is_refused_with_a_hint_of_its_input_type_which_runs(spark):
    # The hint said spark_typed(Min('v'), 'double'), which a wall time is not, by its internal path
    # windowing.runners.spark.spark_typed, where users import windowing.spark_typed.
    frame = spark.createDataFrame([(1, dt.datetime(2024, 1, 1, 5)), (2, dt.datetime(2023, 1, 1))], "ts bigint, v timestamp_ntz")
    with pytest.raises(WindowingConfigError, match=re.escape("windowing.spark_typed(Min('v'), 'timestamp_ntz')")):
        windowed(frame, time="ts").fixed(10).aggregate(lo=Min("v"))
    panes = windowed(frame, time="ts").fixed(10).aggregate(lo=spark_typed(Min("v"), "timestamp_ntz"))
    assert panes.schema["lo"].dataType.simpleString() == "timestamp_ntz" and panes.first()["lo"] == dt.datetime(2023, 1, 1)


@pytest.mark.parametrize("role", ["key", "value"])
def test_a_year_month_interval_key_or_value_is_refused_naming_the_column(spark, role):
    # It failed in the first task naming the wire column '_v0' (a value) or no column (a key).
    frame = spark.createDataFrame([(1, 5)], "ts bigint, months int").select("ts", F.make_ym_interval(F.lit(0), "months").alias("y"))
    with pytest.raises(WindowingConfigError, match=rf"{role} column 'y' has Spark type interval year to month, which pyspark"):
        windowed(frame, time="ts", key="y" if role == "key" else None).fixed(10).aggregate(n=Count() if role == "key" else Count("y"))


def test_a_timestamp_key_and_value_named_with_a_backtick_and_a_dot_come_back_as_timestamps(spark):
    # Timestamp keys and Min/Max leave the workers as microseconds; their names went into SQL unquoted.
    schema = T.StructType([T.StructField("k`.1", T.TimestampType()), T.StructField("ts", T.LongType()),
                           T.StructField("v.x", T.TimestampType())])
    frame = spark.createDataFrame([(dt.datetime(2024, 1, 1, 5), 1, dt.datetime(2023, 1, 1))], schema)
    panes = windowed(frame, time="ts", key="k`.1").fixed(10).aggregate(**{"lo`.w": Min("v.x")})
    assert [tuple(r) for r in panes.select(*[F.col(f"`{c.replace('`', '``')}`") for c in ("k`.1", "lo`.w")]).collect()] == [
        (dt.datetime(2024, 1, 1, 5), dt.datetime(2023, 1, 1))]


def test_subclasses_of_built_ins_fold_with_their_own_methods_as_on_pandas(spark):
    # They ran the built-in's shortcuts: SumOfSquares summed (and was folded before the shuffle as a sum).
    frame = events(ROWS).assign(x=[1, -5, 3, 2, -4, 6, 0, 7])
    aggregations = {type(acc).__name__: acc for acc in SUBCLASSES_OF_BUILT_INS}
    expected = windowed(frame, time="ts", key="user").sessions("4 seconds").aggregate(**aggregations)
    result = windowed(spark.createDataFrame(frame), time="ts", key="user").sessions("4 seconds").aggregate(**aggregations)
    assert expected["SumOfSquares"].tolist() == [
        sum(x * x for x in frame.x[(frame.user == user) & frame.ts.between(start, end, inclusive="left")])
        for user, start, end in expected[["user", "window_start", "window_end"]].itertuples(index=False)]
    assert_same_panes(result.toPandas(), expected)


def test_a_pandas_second_stream_under_a_spark_one_is_refused_naming_both_kinds(spark):
    # Before: "with_second_stream(right=DataFrame): the second stream must be of the first's kind (DataFrame)".
    frame = pd.DataFrame({"k": ["a"], "ts": [1], "v": [2]})
    with pytest.raises(WindowingConfigError, match=r"with_second_stream\(right=pandas.DataFrame\): the second stream "
                                                   r"must be of the first's kind \(pyspark.DataFrame\)"):
        windowed(spark.createDataFrame(frame), time="ts", key="k").with_second_stream(frame)


@pytest.mark.parametrize("combine", [True, False])
def test_a_set_of_timestamps_is_sorted_as_every_other_set(spark, combine):
    # A set of timestamps went through the zone conversion unsorted, in Python's set order: [5, 3, 1, 9] seconds.
    base = dt.datetime(2024, 1, 1)
    rows = [("a", base, base + dt.timedelta(seconds=s), s) for s in (5, 1, 9, 3, 7, 2)]
    frame = spark.createDataFrame(rows, "k string, ts timestamp, t timestamp, n long")
    spark.conf.set("windowing.spark.combine", str(combine).lower())
    try:
        panes = windowed(frame, time="ts", key="k").fixed("1 minute").aggregate(t=ToSet("t"), n=ToSet("n")).collect()
    finally:
        spark.conf.unset("windowing.spark.combine")
    assert [[moment.second for moment in row.t] for row in panes] == [row.n for row in panes] == [[1, 2, 3, 5, 7, 9]]


@pytest.mark.parametrize("zone", ["GMT+05:30", "UTC-03", "IST"])
def test_a_session_zone_pandas_cannot_read_is_refused_where_a_timestamp_key_or_value_reaches_the_workers(spark, zone):
    # The query failed in its first task with ZoneInfoNotFoundError (or "invalid literal for int()"), naming no column.
    base = dt.datetime(2024, 1, 1)
    frame = spark.createDataFrame([("a", base, base), ("a", base + dt.timedelta(seconds=5), base)],
                                  "k string, ts timestamp, seen timestamp")
    numbers = spark.createDataFrame([("a", base, 1, (1,))], "k string, ts timestamp, n bigint, s struct<timestamp_ms:bigint>")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        for build in (lambda: windowed(frame, time="ts", key="seen").fixed("1 minute").aggregate(Count()),
                      lambda: windowed(frame, time="ts", key="k").fixed("1 minute").aggregate(first=Min("seen"))):
            with pytest.raises(WindowingConfigError, match=rf"spark.sql.session.timeZone='{re.escape(zone)}' is a zone ID pandas "
                                                           r"cannot read .* column 'seen' \(timestamp\)"):
                build()
        stated = spark_typed(Fold("n", None, lambda a, v: base, lambda a, b: b), "timestamp")  # a review found it missed
        with pytest.raises(WindowingConfigError, match=r"cannot read .* the output column 'seen_at' \(timestamp\)"):
            windowed(numbers, time="ts", key="k").fixed("1 minute").aggregate(seen_at=stated)
        counts = windowed(frame, time="ts", key="k").fixed("1 minute").aggregate(n=Count())
        assert [row.n for row in counts.collect()] == [2]  # the time column alone leaves as microseconds
        named = windowed(numbers, time="ts", key="k").fixed("1 minute").aggregate(all=ToList("s"))
        assert [row.all for row in named.collect()] == [[(1,)]]  # a field named timestamp_ms holds no time
    finally:
        spark.conf.unset("spark.sql.session.timeZone")
