"""The built-in numeric accumulations over columns of every dtype: values of the column's type,
exact integers, and a clear refusal of the rest before any data is processed."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from accumulations import Accumulation, BottomN, Cogroup, Count, Distinct, Fold, InnerJoin, Max, Mean, Min, Reduce, Sum, ToList, TopN, ToSet
from accumulations.base import SHORTCUTS
from storage import KVStore
from triggers import AfterCount, AtWatermark, Repeatedly
from windowing import TestStream, WindowingConfigError, windowed

KEYS_AND_TIMES = pd.DataFrame({"k": ["a", "a", "b"], "ts": [1, 2, 3]})


def values_of(column, **aggregations) -> list[dict]:
    panes = windowed(KEYS_AND_TIMES.assign(x=column), time="ts", key="k").fixed(10).aggregate(**aggregations)
    return panes[list(aggregations)].to_dict("records")


@pytest.mark.parametrize("column", [
    pd.Series(pd.to_datetime(["2026-01-01", "2026-01-03", None])),
    pd.Series(pd.to_datetime(["2026-01-01", "2026-01-03", None]).tz_localize("Europe/Paris")),
    pd.Series(pd.to_datetime(["2026-01-01", "2026-01-03", None])).astype("datetime64[ns]"),
    pd.Series(pd.to_timedelta(["1s", "2.5s", None])),
], ids=["datetime", "datetime with tz", "datetime ns", "timedelta"])
def test_min_and_max_of_a_time_column_are_values_of_its_type(column):
    panes = windowed(KEYS_AND_TIMES.assign(x=column), time="ts", key="k").fixed(10).aggregate(lo=Min("x"), hi=Max("x"))
    assert panes["lo"].dtype == column.dtype and panes["hi"].dtype == column.dtype
    assert panes[["lo", "hi"]].to_dict("records") == [{"lo": column[0], "hi": column[1]}, {"lo": pd.NaT, "hi": pd.NaT}]


PANDAS_2 = pd.__version__.startswith("2.")


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
@pytest.mark.parametrize("kind", ["datetime64", "datetime64 in UTC", pytest.param("timedelta64", marks=pytest.mark.xfail(
    PANDAS_2, strict=True, reason="pandas 2 cannot cast Timedeltas beyond the nanosecond range back from objects"))])
def test_min_and_max_of_a_coarse_time_column_hold_times_outside_the_nanosecond_range(kind, unit):
    # Both went through nanoseconds: a year-3000 value of a microsecond column failed with OutOfBoundsDatetime (a
    # zoned column reaches the engine as Timestamps, which pandas 2 parsed to nanoseconds).
    numpy_kind = kind.split()[0]
    far = np.array([400 * 365, -400 * 365, "NaT"], dtype=f"{numpy_kind}[D]").astype(f"{numpy_kind}[{unit}]")
    column = pd.Series(far + np.array(1000 * 365, dtype="timedelta64[D]") if numpy_kind == "datetime64" else far)
    column = column.dt.tz_localize("UTC") if kind.endswith("UTC") else column
    panes = windowed(KEYS_AND_TIMES.assign(x=column), time="ts", key="k").fixed(10).aggregate(lo=Min("x"), hi=Max("x"))
    assert panes["lo"].dtype == panes["hi"].dtype == column.dtype
    assert panes[["lo", "hi"]].to_dict("records") == [{"lo": column[1], "hi": column[0]}, {"lo": pd.NaT, "hi": pd.NaT}]


def test_sum_and_mean_of_timedeltas_are_timedeltas():
    column = pd.Series(pd.to_timedelta(["1s", "2.5s", None]))
    assert values_of(column, total=Sum("x"), mean=Mean("x")) == [
        {"total": pd.Timedelta("3.5s"), "mean": pd.Timedelta("1.75s")}, {"total": pd.Timedelta(0), "mean": pd.NaT}]


def test_an_unchanged_empty_time_pane_is_not_fired_again():
    # b's only value is missing: its pane holds NaT at every firing, and NaT equals no value, itself included.
    stream = (TestStream().add_elements(KEYS_AND_TIMES.assign(x=pd.to_datetime(["2026-01-01", "2026-01-03", None])))
              .advance_processing_time(5).advance_watermark_to(20))
    panes = (windowed(stream, time="ts", key="k").fixed(10).trigger(AtWatermark().with_early_firings_every(1.0))
             .accumulating().fire_only_updated_panes().aggregate(lo=Min("x")))
    assert list(zip(panes["k"], panes["pane_index"])) == [("a", 0), ("b", 0)]


def test_an_integer_pane_after_an_empty_pane_of_its_window_is_compared_with_it():
    # The empty pane's NaN could not be made an integer to compare the next pane with: the step failed.
    one = KEYS_AND_TIMES.iloc[:1].assign(x=[7])
    stream = TestStream().add_elements(one).advance_processing_time(1).advance_processing_time(1).add_elements(one)
    panes = (windowed(stream, time="ts", key="k").global_window().trigger(AtWatermark().with_early_firings_every(1.0))
             .aggregate(low=Min("x")))
    assert [None if pd.isna(v) else v for v in panes["low"]] == [7, None, 7]


BIG = 2**53 + 1  # float64 holds 2**53, not 2**53 + 1


@pytest.mark.parametrize("dtype", ["Int64", "UInt64"])
def test_min_and_max_of_nullable_integers_stay_exact_beside_an_empty_pane(dtype):
    # b's only value is missing: its empty pane turned the step's whole column into float64, and BIG into 2**53.
    for column, b in ((pd.Series([BIG, 3, None], dtype=dtype), pd.NA), (pd.Series([BIG, 3, 4], dtype=dtype), 4)):
        panes = windowed(KEYS_AND_TIMES.assign(x=column), time="ts", key="k").fixed(10).aggregate(lo=Min("x"), hi=Max("x"))
        assert str(panes["lo"].dtype) == str(panes["hi"].dtype) == dtype
        assert (list(panes["lo"]), list(panes["hi"])) == ([3, b], [BIG, b])


def test_min_of_int64_has_one_dtype_whether_or_not_a_pane_of_the_step_is_empty():
    # a's early firing empties its pane: its ON_TIME pane is empty, in the step where b's is not.
    stream = (TestStream().add_elements(pd.DataFrame({"k": ["a", "a", "b"], "ts": [1, 2, 3], "x": [1, 2, BIG]}))
              .advance_watermark_to(20))
    panes = (windowed(stream, time="ts", key="k").fixed(10).trigger(AtWatermark().with_early_firings_every(2))
             .aggregate(low=Min("x")))
    assert panes["low"].dtype == "Int64"
    assert list(zip(panes["k"], panes["timing"], panes["low"].astype(object))) == [
        ("a", "EARLY", 1), ("a", "ON_TIME", pd.NA), ("b", "ON_TIME", BIG)]


def test_an_unchanged_integer_pane_is_compared_with_an_earlier_empty_one():
    # b's earlier pane was empty (None) while a's was not: comparing the next, non-empty panes with them failed.
    first = pd.DataFrame({"k": ["a", "b"], "ts": [1, 2], "x": pd.Series([5, None], dtype="Int64")})
    second = pd.DataFrame({"k": ["b"], "ts": [3], "x": pd.Series([7], dtype="Int64")})
    stream = TestStream().add_elements(first).advance_processing_time(1).add_elements(second).advance_processing_time(1)
    panes = (windowed(stream, time="ts", key="k").global_window().trigger(AtWatermark().with_early_firings_every(1.0))
             .accumulating().fire_only_updated_panes().aggregate(low=Min("x")))
    assert list(zip(panes["k"], panes["step"], panes["low"].astype(object))) == [("a", 1, 5), ("b", 1, pd.NA), ("b", 3, 7)]


def test_unsigned_64_bit_integers_are_exact():
    column = pd.Series(np.array([2**63 + 5, 1, 2], dtype=np.uint64))
    assert values_of(column, hi=Max("x"), lo=Min("x"), total=Sum("x")) == [
        {"hi": 2**63 + 5, "lo": 1, "total": 2**63 + 6}, {"hi": 2, "lo": 2, "total": 2}]


def test_nullable_integers_stay_integers():
    column = pd.Series([2**62 + 1, None, 3], dtype="Int64")
    assert values_of(column, total=Sum("x"), hi=Max("x")) == [{"total": 2**62 + 1, "hi": 2**62 + 1}, {"total": 3, "hi": 3}]


def test_an_integer_sum_beyond_64_bits_raises_naming_the_column_instead_of_wrapping():
    with pytest.raises(OverflowError, match=r"aggregate\(total=Sum\('x'\)\): in a window of column 'x', a sum is beyond "
                                            r"the range of int64"):
        values_of(pd.Series([2**62, 2**62, 1]), total=Sum("x"))


def test_python_ints_in_an_object_column_add_up_exactly():
    column = pd.Series([2**62 + 1, 2**62 + 1, 1], dtype=object)
    assert values_of(column, total=Sum("x")) == [{"total": 2**63 + 2}, {"total": 1}]


def test_strings_compare_as_python_values():
    rows = values_of(pd.Series(["q", "p", None], dtype="string"), lo=Min("x"), hi=Max("x"))
    assert rows[0] == {"lo": "p", "hi": "q"} and pd.isna(rows[1]["lo"]) and pd.isna(rows[1]["hi"])


@pytest.mark.parametrize("column, accumulation, message", [
    (pd.Series(["p", "q", "r"], dtype="string"), Sum("x"), r"aggregate\(value=Sum\('x'\)\): column 'x' has dtype string; Sum adds numbers"),
    (pd.Series(["p", "q", "r"], dtype="string"), Mean("x"), r"column 'x' has dtype string; Mean averages numbers or timedeltas"),
    (pd.Series(pd.to_datetime(["2026-01-01"] * 3)), Sum("x"), r"column 'x' has dtype datetime64\[\w+\]; Sum adds"),
    (pd.Series(pd.to_datetime(["2026-01-01"] * 3)), Mean("x"), r"column 'x' has dtype datetime64\[\w+\]; Mean averages"),
    (pd.Series(["p", "q", "r"], dtype="category"), Sum("x"), r"column 'x' has dtype category; Sum adds"),
])
def test_a_column_an_accumulation_cannot_aggregate_is_refused_before_any_data(column, accumulation, message):
    stream = TestStream().add_elements(KEYS_AND_TIMES.assign(x=column).iloc[:0])  # no element at all
    with pytest.raises(WindowingConfigError, match=message):
        windowed(stream, time="ts", key="k").fixed(10).aggregate(accumulation)


def test_a_python_value_that_does_not_add_names_the_accumulation_and_column():
    with pytest.raises(TypeError, match=r"^aggregate\(total=Sum\('x'\)\): cannot add 'p' \(str\) of column 'x'; Sum adds numbers"):
        values_of(pd.Series([1, "p", 2], dtype=object), total=Sum("x"))


@pytest.mark.parametrize("column, accumulation, message", [
    (pd.Series([1, "p", 2], dtype=object), Min("x"), r"aggregate\(low=Min\('x'\)\): '<' not supported between instances of"),
    (pd.Series([[1], [2], [3]], dtype=object), ToSet("x"), r"aggregate\(low=ToSet\('x'\)\): unhashable type: 'list'"),
], ids=["values that do not compare", "values that do not hash"])
def test_python_values_an_accumulation_cannot_take_name_the_output_and_the_accumulation(column, accumulation, message):
    # They failed with Python's bare TypeError, naming neither.
    with pytest.raises(TypeError, match="^" + message) as raised:
        values_of(column, low=accumulation)
    assert isinstance(raised.value.__cause__, TypeError)  # Python's own error stays chained


def test_values_that_do_not_compare_across_steps_name_the_accumulation_where_windows_merge():
    # The second step's accumulator of the window is merged with the first's: Min compares 'p' with 1 there.
    stream = (TestStream().add_elements(pd.DataFrame({"k": ["a"], "ts": [1], "x": pd.Series(["p"], dtype=object)}))
              .add_elements(pd.DataFrame({"k": ["a"], "ts": [2], "x": pd.Series([1], dtype=object)})))
    with pytest.raises(TypeError, match=r"^aggregate\(low=Min\('x'\)\): '<' not supported between instances of"):
        windowed(stream, time="ts", key="k").fixed(10).aggregate(low=Min("x"))


def test_an_integer_sum_at_the_int64_minimum_is_exact():
    # np.abs(-2**63) wraps to itself, which sent such a column to the float path: -2**63 + 5 came out -2**63.
    column = pd.Series(np.array([-2**63, 5, 1], dtype=np.int64))
    assert values_of(column, total=Sum("x"), mean=Mean("x")) == [{"total": -2**63 + 5, "mean": (-2**63 + 5) / 2},
                                                                 {"total": 1, "mean": 1.0}]


def test_an_integer_sum_below_the_int64_minimum_raises():
    with pytest.raises(OverflowError, match=r"a sum is beyond the range of int64"):
        values_of(pd.Series(np.array([-2**63, -1, 1], dtype=np.int64)), total=Sum("x"))


def test_a_partial_sum_at_the_int64_minimum_adds_exactly_to_a_later_step():
    stream = (TestStream().add_elements(pd.DataFrame({"ts": [1, 2], "x": np.array([-2**62, -2**62], dtype=np.int64)}))
              .add_elements(pd.DataFrame({"ts": [3], "x": np.array([5], dtype=np.int64)})))
    assert windowed(stream, time="ts").fixed(10).aggregate(Sum("x"))["value"].tolist() == [-2**63 + 5]


def test_a_decimal_nan_is_missing_as_pandas_counts_it():
    column = pd.Series([Decimal("1"), Decimal("NaN"), None], dtype=object)
    assert values_of(column, n=Count("x"), values=ToList("x"), total=Sum("x"), lo=Min("x"), mean=Mean("x"))[0] == {
        "n": 1, "values": [Decimal("1")], "total": Decimal("1"), "lo": Decimal("1"), "mean": Decimal("1")}


class InPlaceList(Accumulation):
    """A list accumulation of one's own that grows its accumulator in place and outputs it as it is."""

    def __init__(self, column):
        self.column = column

    def default_accumulated_value(self):
        return []

    def accumulate(self, accumulated, value):
        accumulated.append(value)
        return accumulated

    def merge(self, accumulated1, accumulated2):
        accumulated1.extend(accumulated2)
        return accumulated1

    def get_output(self, accumulated):
        return accumulated


class ArrayOutput(InPlaceList):
    def accumulate(self, accumulated, value):
        return [*accumulated, value]

    def get_output(self, accumulated):
        return np.array(accumulated)


# Sessions of gap 3: [1, 4) and [5, 8), then 3 bridges them.
ONE_BY_ONE = (TestStream().add_elements([{"ts": 1, "x": 1}]).add_elements([{"ts": 5, "x": 2}])
              .add_elements([{"ts": 3, "x": 3}]).advance_watermark_to_infinity())


def panes_of(accumulation, mode: str, windows=lambda w: w.fixed(10), only_updated=False, store=None):
    pipeline = getattr(windows(windowed(ONE_BY_ONE, time="ts")).trigger(Repeatedly(AfterCount(1))), mode)()
    pipeline = pipeline.fire_only_updated_panes() if only_updated else pipeline
    pipeline = pipeline.window_state(store) if store is not None else pipeline
    panes = pipeline.aggregate(accumulation)
    return [(list(r.value), r.timing, r.pane_index, r.is_retraction, r.step) for r in panes.itertuples()]


@pytest.mark.parametrize("mode", ["accumulating", "accumulating_and_retracting"])
@pytest.mark.parametrize("windows", [lambda w: w.fixed(10), lambda w: w.sessions(3)], ids=["fixed", "sessions"])
@pytest.mark.parametrize("only_updated", [False, True])
@pytest.mark.parametrize("in_store", [False, True])
def test_an_accumulator_mutated_in_place_and_output_as_it_is_gives_the_panes_of_to_list(
        mode, windows, only_updated, in_store, tmp_path):
    # Before: the engine kept the output object itself, so later steps' appends changed panes already emitted
    # (all three showed [1, 2, 3]) and the last value that retractions carry; in the window-state store the
    # accumulator and that last value came back as one object, and fire_only_updated_panes() never fired again.
    store = KVStore(str(tmp_path)) if in_store else None
    assert panes_of(InPlaceList("x"), mode, windows, only_updated, store) == \
        panes_of(ToList("x"), mode, windows, only_updated)


def test_fire_only_updated_panes_compares_array_outputs_by_shape_too():
    # Before: [7] == [7, 7] broadcast to all True, so the grown panes were taken as unchanged and not fired.
    stream = (TestStream().add_elements([{"ts": 1, "x": 7}]).add_elements([{"ts": 2, "x": 7}])
              .advance_watermark_to_infinity())
    panes = (windowed(stream, time="ts").fixed(10).trigger(Repeatedly(AfterCount(1))).accumulating()
             .fire_only_updated_panes().aggregate(ArrayOutput("x")))
    assert [list(v) for v in panes["value"]] == [[7], [7, 7]]


def test_integers_beyond_2_to_the_53_beside_floats_in_one_output_column_stay_exact():
    # Before: pd.to_numeric made the column float64, and 2**53 + 1 came out 2**53.
    frame = pd.DataFrame({"ts": [1, 11], "x": pd.Series([2**53 + 1, 1.5], dtype=object)})
    panes = windowed(frame, time="ts").fixed(10).aggregate(Sum("x"))
    assert panes["value"].tolist() == [2**53 + 1, 1.5]
    assert windowed(frame.assign(x=[1, 1.5]), time="ts").fixed(10).aggregate(Sum("x"))["value"].dtype == np.float64


@pytest.mark.parametrize("column", [pd.Series([np.nan, 2.0]), pd.Series(pd.to_datetime([None, "2026-01-03"]))],
                         ids=["float", "datetime"])
def test_a_missing_output_is_retracted_beside_a_pane_of_the_columns_type(column):
    # On pandas 2 the retraction of the first pane's NaN joined the second pane's float64 outputs with a FutureWarning
    # (it took their dtype from the pane alone, which pandas 3 does not), on every such step of a worker.
    steps = TestStream().add_elements(KEYS_AND_TIMES.iloc[[0]].assign(x=column[:1].to_numpy())) \
        .add_elements(KEYS_AND_TIMES.iloc[[1]].assign(x=column[1:].to_numpy()))
    panes = windowed(steps, time="ts", key="k").fixed(10).trigger(Repeatedly(AfterCount(1))).accumulating_and_retracting() \
        .aggregate(lo=Min("x"), hi=Max("x"))
    outputs = column[[0, 0, 1, 1, 1]].reset_index(drop=True)  # the end of input retracts and fires the window again
    pd.testing.assert_frame_equal(panes[["lo", "hi", "is_retraction"]], pd.DataFrame(
        {"lo": outputs, "hi": outputs, "is_retraction": [False, True, False, True, False]}))


@pytest.mark.parametrize("values", [[None, "h"], [None, dt.datetime(2026, 1, 3)], [pd.NA, "h"], [None, dt.date(2026, 1, 3)],
                                    [pd.NaT, None]], ids=["strings", "datetimes", "NA", "dates", "NaT"])
@pytest.mark.parametrize("in_store", [False, True])
def test_fold_and_reduce_see_an_object_columns_values_as_they_are(values, in_store, tmp_path):
    # Before: pandas 3 inferred str or datetime64 from an object column's values, and Fold and Reduce saw None as
    # NaN or NaT and a datetime as a Timestamp (pandas 2 too, for datetimes), a different value in each step.
    steps = TestStream().add_elements(pd.DataFrame({"ts": [1, 2], "x": pd.Series(values, dtype=object)})) \
        .add_elements(pd.DataFrame({"ts": [3], "x": pd.Series([5], dtype=object)}))
    pipeline = windowed(steps, time="ts").fixed(10).trigger(Repeatedly(AfterCount(1))).accumulating()
    pipeline = pipeline.window_state(KVStore(str(tmp_path))) if in_store else pipeline
    panes = pipeline.aggregate(seen=Fold("x", (), lambda a, v: a + (v,), lambda a, b: a + b),
                               last=Reduce("x", lambda a, b: b))
    seen = panes["seen"].iloc[-1]
    assert [type(v) for v in seen] == [type(v) for v in [*values, 5]] and seen[0] is values[0] and seen[1] == values[1]
    assert panes["last"].iloc[0] == values[1] or values[1] is None


@pytest.mark.parametrize("first, second", [(2**60 + 1, 0.5), (np.uint64(2**63 + 1), -1)], ids=["int beside float", "uint64 beside int64"])
def test_steps_whose_output_columns_have_other_dtypes_keep_their_integers_exact(first, second):
    # Before: each step's panes had their own dtype (int64, float64) and pandas' concat of the steps made them
    # float64, so 2**60 + 1 came out 2**60; one step of both values keeps them (the test above).
    steps = TestStream().add_elements(pd.DataFrame({"ts": [0], "x": pd.Series([first], dtype=object)})) \
        .advance_watermark_to(10).add_elements(pd.DataFrame({"ts": [20], "x": pd.Series([second], dtype=object)}))
    values = windowed(steps, time="ts").fixed(10).aggregate(v=Reduce("x", lambda a, b: a + b))["v"].tolist()
    assert values == [first, second] and type(values[0]) is int


def test_sums_of_decimals_are_exact_beyond_the_default_contexts_28_digits():
    """Python's default Decimal context rounds every sum to 28 digits: a Sum of decimal(38, 18) values lost ten
    of them (Spark's own `sum` keeps 38), in an element's addition, a merge of sessions and a retraction alike."""
    big, small = Decimal("12345678901234567890.123456789012345678"), Decimal("1.000000000000000001")
    stream = (TestStream()
              .add_elements(pd.DataFrame({"ts": [1, 9], "x": pd.Series([big, small], dtype=object)}))
              .add_elements(pd.DataFrame({"ts": [5], "x": pd.Series([small], dtype=object)})))  # merges the two sessions
    panes = (windowed(stream, time="ts").sessions(5).trigger(Repeatedly(AfterCount(1))).accumulating_and_retracting()
             .aggregate(total=Sum("x"), mean=Mean("x")))
    merged = Decimal("12345678901234567892.123456789012345680")  # big + small + small, 38 digits
    assert [(p.total, p.is_retraction) for p in panes.itertuples()] == [
        (big, False), (small, False), (big, True), (small, True), (merged, False), (merged, True), (merged, False)]
    assert str(panes.total.iloc[-1]) == "12345678901234567892.123456789012345680"


@pytest.mark.parametrize("with_missing", [True, False])
def test_categories_of_integers_beside_a_missing_value_stay_exact_integers(with_missing):
    # pandas gives such a column to NumPy as float64: 2**53 + 1 came out 2**53 in ToList, ToSet, Min and Max.
    values = [2**53 + 1, None, 2**53 + 3, -(2**62) - 1] if with_missing else [2**53 + 1, 2**53 + 3, -(2**62) - 1]
    frame = pd.DataFrame({"ts": range(len(values)), "v": pd.Categorical(values), "k": pd.Categorical(values)})
    present = [v for v in values if v is not None]
    pane = windowed(frame, time="ts").fixed(10).aggregate(l=ToList("v"), s=ToSet("v"), lo=Min("v"), hi=Max("v")).iloc[0]
    assert (pane.l, pane.s, pane.lo, pane.hi) == (present, frozenset(present), min(present), max(present))
    keys = windowed(frame, time="ts", key="k").fixed(10).aggregate(n=Count())["k"].tolist()
    assert sorted(k for k in keys if not pd.isna(k)) == sorted(present) and all(type(k) is int or pd.isna(k) for k in keys)


@pytest.mark.parametrize("categories, values", [
    (["low", "medium", "high"], ["low", "high", None, "medium"]),
    ([3, 2, 1], [3, 1, None, 2]),
])
def test_an_ordered_categorical_is_compared_in_its_declared_order(categories, values):
    # As Python values: Max of "low" < "medium" < "high" was "medium", and TopN followed the strings' order.
    column = pd.Categorical(values, categories=categories, ordered=True)
    frame = pd.DataFrame({"ts": range(len(values)), "v": column})
    pane = windowed(frame, time="ts").fixed(10).aggregate(lo=Min("v"), hi=Max("v"), top=TopN("v", 2), bottom=BottomN("v", 2))
    assert (pane.loc[0, "lo"], pane.loc[0, "hi"]) == (frame["v"].min(), frame["v"].max()) == (categories[0], categories[-1])
    assert (pane.loc[0, "top"], pane.loc[0, "bottom"]) == (categories[:0:-1], categories[:2])
    assert pane["hi"].dtype == pane["lo"].dtype == column.dtype


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "Float32", "Float64"])
def test_min_and_max_of_floats_have_the_columns_type(dtype):
    # engine.md says so; they were float64 for every float column.
    frame = pd.DataFrame({"ts": [1, 2, 15], "v": pd.array([1.5, -2.25, None], dtype=dtype)})
    panes = windowed(frame, time="ts").fixed(10).aggregate(lo=Min("v"), hi=Max("v"))
    assert str(panes.lo.dtype) == str(panes.hi.dtype) == dtype
    assert panes.lo.tolist()[0] == -2.25 and panes.hi.tolist()[0] == 1.5 and panes.lo.isna().tolist() == [False, True]


class _ElementsSeen(Accumulation):
    """Needs no column (``column = None``): receives None per element, as `Accumulation` says."""

    column = None

    def __init__(self, received):
        self.received = received

    def default_accumulated_value(self):
        return 0

    def accumulate(self, accumulated, value):
        self.received.append(value)
        return accumulated + 1

    def merge(self, accumulated1, accumulated2):
        return accumulated1 + accumulated2

    def get_output(self, accumulated):
        return accumulated


@pytest.mark.parametrize("rows", [3, 0])
def test_an_accumulation_without_a_column_receives_none_per_element(rows):
    # It received 0.0 per element, and "a" where a step without panes typed its output column on a made-up value.
    received = []
    frame = pd.DataFrame({"k": ["a"] * rows, "ts": list(range(rows))})
    panes = windowed(frame, time="ts", key="k").sessions(10).aggregate(n=_ElementsSeen(received))
    assert list(panes["n"]) == [3][:rows]
    assert received and set(received) == {None}


class SumOfSquares(Sum):
    def accumulate(self, accumulated, value):
        return accumulated + value * value


class LargestMagnitude(Max):
    def accumulate(self, accumulated, value):
        return super().accumulate(accumulated, abs(value))


class MeanInPercent(Mean):
    def get_output(self, accumulated):
        return 100 * super().get_output(accumulated)


class CountOfPositive(Count):
    def accumulate(self, accumulated, value):
        return accumulated + (value > 0)


class Shouted(ToList):
    def accumulate(self, accumulated, value):
        return super().accumulate(accumulated, str(value) + "!")


class FirstTwoOfTop(TopN):
    def get_output(self, accumulated):
        return super().get_output(accumulated)[:2]


SUBCLASSES_OF_BUILT_INS = [SumOfSquares("x"), LargestMagnitude("x"), MeanInPercent("x"), CountOfPositive("x"),
                           Shouted("x"), FirstTwoOfTop("x", n=3)]


@pytest.mark.parametrize("built_in", [Sum, Count, Min, Max, Mean, ToList, ToSet, Distinct, TopN, BottomN, Fold, Reduce,
                                      InnerJoin, Cogroup], ids=lambda cls: cls.__name__)
def test_a_subclass_of_a_built_in_that_folds_alike_keeps_its_shortcuts(built_in):
    # A first version dropped Sum's output dtype and fresh outputs (declared by the classes Sum is made of), so an
    # InnerJoin subclass deep-copied every output, and an empty Sum of timedeltas came out as objects.
    class Renamed(built_in):
        def __repr__(self):
            return "renamed"

    assert all(getattr(Renamed, name) is getattr(built_in, name) for name in SHORTCUTS)
    empty = pd.DataFrame({"ts": pd.Series([], dtype="int64"), "x": pd.to_timedelta([], unit="s")})
    if built_in is Sum:
        assert windowed(empty, time="ts").fixed(10).aggregate(out=Renamed("x"))["out"].dtype == empty["x"].dtype


@pytest.mark.parametrize("accumulation", SUBCLASSES_OF_BUILT_INS, ids=lambda acc: type(acc).__name__)
@pytest.mark.parametrize("values", [[1, -5, 3, 2], [1.5, -5.0, 3.0, 2.0]], ids=["int64", "float64"])
def test_a_subclass_of_a_built_in_folds_with_its_own_methods(accumulation, values):
    # The built-in's vectorized path (and ToList's accumulate_all) ran instead: SumOfSquares summed, giving 1.
    frame = pd.DataFrame({"k": ["a"] * 4, "ts": [1, 2, 3, 4], "x": values})
    own = accumulation.for_input(frame["x"].dtype)
    folded = own.default_accumulated_value()
    for value in values:
        folded = own.accumulate(folded, value)
    panes = windowed(frame, time="ts", key="k").fixed(10).aggregate(out=accumulation)
    assert panes["out"].tolist() == [own.get_output(folded)]


class _ConstantOutput(Accumulation):
    """Counts, and outputs ``made()`` each time: an unchanged value, freshly made."""

    column = "v"

    def __init__(self, made):
        self.made = made

    def default_accumulated_value(self):
        return 0

    def accumulate(self, accumulated, value):
        return accumulated + 1

    def merge(self, accumulated1, accumulated2):
        return accumulated1 + accumulated2

    def get_output(self, accumulated):
        return self.made()


@pytest.mark.parametrize("made", [
    lambda: float("nan"), lambda: pd.NA, lambda: Decimal("NaN"), lambda: (1, float("nan")), lambda: [pd.NA, 2],
    lambda: {"x": float("nan")}, lambda: np.float32("nan"), lambda: pd.NaT,
], ids=["nan", "NA", "Decimal NaN", "a tuple holding a NaN", "a list holding NA", "a dict holding a NaN",
        "a float32 NaN", "NaT"])
def test_fire_only_updated_panes_takes_a_missing_value_for_equal_to_one_of_its_kind(made):
    # Only a top-level float NaN and NaT compared equal: the others fired again on every period and at the watermark.
    stream = (TestStream().add_elements([{"k": "a", "ts": 1, "v": 1}])
              .advance_processing_time(5.0).advance_processing_time(5.0).advance_processing_time(5.0))
    panes = (windowed(stream, time="ts", key="k").fixed(10).trigger(AtWatermark().with_early_firings_every(5.0))
             .accumulating().fire_only_updated_panes().run(out=_ConstantOutput(made)).panes)
    assert panes["step"].tolist() == [1]


def test_fire_only_updated_panes_tells_missing_values_of_other_kinds_and_containers_of_other_types_apart():
    from windowing.reductions import same_value

    assert not same_value(None, float("nan")) and not same_value(pd.NA, float("nan")) and not same_value(pd.NaT, pd.NA)
    assert not same_value((1, float("nan")), [1, float("nan")]) and not same_value([float("nan")], [float("nan"), 1])
    assert same_value({"a": [float("nan")]}, {"a": [float("nan")]}) and not same_value({"a": 1}, {"b": 1})
    class LoudUnequal:  # a review found an item whose != raises escaping the scan that == did not need
        def __init__(self, n):
            self.n = n

        def __eq__(self, other):
            return self.n == other.n

        def __ne__(self, other):
            raise RuntimeError("no !=")

    assert not same_value([LoudUnequal(1)], [LoudUnequal(2)]) and same_value([LoudUnequal(1)], [LoudUnequal(1)])
    # A signalling Decimal NaN raises InvalidOperation on any comparison: a pane holding one fires again, and fails nothing.
    assert not same_value(Decimal("sNaN"), Decimal("sNaN")) and not same_value([Decimal("sNaN")], [Decimal("sNaN")])
