"""Merging two streams into the same windows with InnerJoin and Cogroup (seed: WindowedMergeOperator)."""

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accumulations import Cogroup, InnerJoin, Sum, ToList
from windowing import TestStream, windowed
from windowing.errors import WindowingConfigError

from .reference import Element, WindowSpec, window_contents

LEFT = pd.DataFrame({"k": ["a", "a", "b"], "ts": [1, 12, 3], "v": ["l1", "l2", "l3"]})
RIGHT = pd.DataFrame({"k": ["a", "b", "b"], "ts": [2, 4, 15], "v": ["r1", "r2", "r3"]})


def test_inner_join_pairs_the_two_streams_values_per_key_and_window():
    panes = windowed(LEFT, time="ts", key="k").fixed(10).with_second_stream(RIGHT).aggregate(InnerJoin("v"))
    joined = {(r.k, r.window_start): r.value for r in panes.itertuples()}
    assert joined == {("a", 0): [("l1", "r1")], ("a", 10): [], ("b", 0): [("l3", "r2")], ("b", 10): []}


def test_cogroup_keeps_both_sides_apart():
    panes = windowed(LEFT, time="ts", key="k").fixed(10).with_second_stream(RIGHT).aggregate(Cogroup("v"))
    grouped = {(r.k, r.window_start): r.value for r in panes.itertuples()}
    assert grouped == {("a", 0): (["l1"], ["r1"]), ("a", 10): (["l2"], []), ("b", 0): (["l3"], ["r2"]),
                       ("b", 10): ([], ["r3"])}


def test_two_stream_configuration_errors_name_the_aggregation():
    with pytest.raises(ValueError, match=r"aggregate\(value=...\) is a one-stream accumulation"):
        windowed(LEFT, time="ts", key="k").with_second_stream(RIGHT).aggregate(Sum("ts"))
    with pytest.raises(ValueError, match=r"aggregate\(value=...\) merges two streams; add the second"):
        windowed(LEFT, time="ts", key="k").aggregate(InnerJoin("v"))
    with pytest.raises(ValueError, match=r"with_second_stream\(right=builtins.list\): the second stream must be of the "
                                         r"first's kind \(pandas.DataFrame\)"):
        windowed(LEFT, time="ts", key="k").with_second_stream([1])
    streams = TestStream().add_elements(LEFT), TestStream().add_elements(RIGHT)
    with pytest.raises(ValueError, match=r"with_second_stream\(\) works with bounded pandas DataFrames for now, not a TestStream source"):
        windowed(streams[0], time="ts", key="k").with_second_stream(streams[1]).aggregate(InnerJoin("v"))


# ---- each input as it is (found by a probe against a brute force) ------------------------------------------

values_of_a_kind = {"ints": st.integers(-5, 20), "big ints": st.integers(2**53, 2**53 + 8),
                    "floats": st.integers(-5, 20).map(lambda v: v + 0.5), "strings": st.sampled_from(["x", "y", None])}


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), spec=st.sampled_from([WindowSpec("fixed", 10), WindowSpec("sliding", 10, 5), WindowSpec("sessions", 4)]),
       kinds=st.tuples(st.sampled_from(sorted(values_of_a_kind)), st.sampled_from(sorted(values_of_a_kind))))
def test_cogroup_holds_each_inputs_values_as_they_are_as_a_recomputation_does(data, spec, kinds):
    # Before: the inputs were joined by pandas' concat first, so values of other dtypes on the two sides took one
    # (2**53 + 1 beside 0.5 became 2**53 as a float, 1 became 1.0).
    sides = []
    for side, kind in enumerate(kinds):
        rows = data.draw(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 40), values_of_a_kind[kind]),
                                  min_size=1, max_size=12))
        sides.append([Element(k, t, (side, v)) for k, t, v in rows])
    first, second = (pd.DataFrame({"k": [e.key for e in es], "t": [e.t for e in es],  # strings beside None as objects
                                   "v": pd.Series([e.value[1] for e in es], dtype=object if kind == "strings" else None)})
                     for es, kind in zip(sides, kinds))
    pipeline = windowed(first, time="t", key="k")
    pipeline = {"fixed": pipeline.fixed(10), "sliding": pipeline.sliding(10, every=5), "sessions": pipeline.sessions(4)}[spec.kind]
    panes = pipeline.with_second_stream(second).aggregate(Cogroup("v"))
    ordered = lambda values: sorted(values, key=repr)  # noqa: E731
    actual = {(r.k, int(r.window_start), int(r.window_end)): tuple(map(ordered, r.value)) for r in panes.itertuples()}
    expected = {window: tuple(ordered([v for s, v in values if s == side]) for side in (0, 1))
                for window, values in window_contents(sides[0] + sides[1], spec).items()}
    assert {w: tuple([repr(v) for v in vs] for vs in value) for w, value in actual.items()} == \
        {w: tuple([repr(v) for v in vs] for vs in value) for w, value in expected.items()}


def test_a_column_missing_from_the_first_input_is_refused_naming_it():
    # Before: the second input's v filled the first's rows with NaN, without a word.
    with pytest.raises(ValueError, match=r"Cogroup\(column\)='v' is not a column of the input; .*\(the first input of "
                                         r"with_second_stream\(\)\)"):
        windowed(LEFT.drop(columns="v"), time="ts", key="k").fixed(10).with_second_stream(RIGHT).aggregate(Cogroup("v"))


def test_an_inputs_own_side_column_is_refused_with_two_streams_and_data_with_one():
    # Before: the runner's side marker overwrote it with two streams, and with one stream the values came as
    # (side, value) pairs: ToList gave [('x', 1), ('y', 2)].
    with pytest.raises(ValueError, match=r"the second input of with_second_stream\(\) has a column '_side'"):
        windowed(LEFT, time="ts", key="k").fixed(10).with_second_stream(RIGHT.assign(_side="y")).aggregate(Cogroup("v"))
    one = pd.DataFrame({"ts": [1, 2], "v": [1, 2], "_side": ["x", "y"]})
    assert windowed(one, time="ts").fixed(10).aggregate(ToList("v"), sides=ToList("_side"))[["value", "sides"]].values.tolist() \
        == [[[1, 2], ["x", "y"]]]


STRINGS = LEFT.k.astype("string")  # a string dtype on pandas 2 too


@pytest.mark.parametrize("left, right, message", [
    ({"k": STRINGS}, {"k": [1, 2, 2]}, r"key column 'k' is string in the first input and int64 in the second, so no key "
                                       r"of one equals a key of the other"),
    ({}, {"ts": [2.0, 4.0, 15.0]}, r"time column 'ts' is int64 in the first input and float64 in the second"),
    ({"k": STRINGS}, {"k": pd.Series([1, 2, 2], dtype=object)}, r"key column 'k' is string in the first input and object "
                                                                r"\(numbers\) in the second"),
    ({"k": LEFT.k.astype(object)}, {"k": pd.Series([1, None, 2], dtype=object)}, r"key column 'k' is object \(strings\) in the "
                                                                                 r"first input and object \(numbers\) in the second"),
], ids=["keys", "times", "keys as Python objects", "both inputs' keys Python objects"])
def test_inputs_whose_keys_or_times_cannot_be_compared_are_refused_naming_both_dtypes(left, right, message):
    """Python objects are told apart by their values: strings in one input and ints in the other were taken, and
    no key of one met a key of the other."""
    with pytest.raises(ValueError, match=message):
        windowed(LEFT.assign(**left), time="ts", key="k").fixed(10).with_second_stream(RIGHT.assign(**right)).aggregate(
            Cogroup("v"))


def test_times_in_two_zones_and_an_empty_second_input_keep_the_first_inputs_types():
    utc = LEFT.assign(ts=pd.to_datetime(LEFT.ts, unit="s").dt.tz_localize("UTC"))
    paris = RIGHT.assign(ts=pd.to_datetime(RIGHT.ts, unit="s").dt.tz_localize("UTC").dt.tz_convert("Europe/Paris"))
    panes = windowed(utc, time="ts", key="k").fixed("10s").with_second_stream(paris).aggregate(Cogroup("v"))
    assert {(r.k, r.window_start.second): r.value for r in panes.itertuples()}[("a", 0)] == (["l1"], ["r1"])
    empty = pd.DataFrame({"k": [], "ts": [], "v": []})  # float64 columns
    result = windowed(LEFT, time="ts", key="k").fixed(10).with_second_stream(empty).run(Cogroup("v"))
    assert result.panes.window_start.dtype == LEFT.ts.dtype and result.panes.k.tolist() == ["a", "a", "b"]
    assert "_side" not in result.late_data.columns


def test_a_second_stream_given_twice_is_refused():
    # Before: the second call won without a word, leaving the first second stream's elements out of every window.
    with pytest.raises(WindowingConfigError, match=r"with_second_stream\(\) called twice: a pipeline merges one second stream"):
        windowed(LEFT, time="ts", key="k").fixed(10).with_second_stream(RIGHT).with_second_stream(RIGHT)


def test_in_upstream_windows_is_refused_as_not_built_naming_the_way_until_it_is():
    # api.md's chained stages are not built yet (docs/engine.md, "Not built yet"); before, the call failed with
    # Python's "'Windowed' object has no attribute 'in_upstream_windows'".
    with pytest.raises(WindowingConfigError, match=r"in_upstream_windows\(\) is not built yet .*windowed\(panes, "
                                                   r"time='window_start'\)\.fixed\(<the upstream's size>\)"):
        windowed(LEFT, time="ts", key="k").in_upstream_windows()
