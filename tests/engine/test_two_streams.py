"""Merging two streams into the same windows with InnerJoin and Cogroup (seed: WindowedMergeOperator)."""

import pandas as pd
import pytest

from accumulations import Cogroup, InnerJoin, Sum
from windowing import TestStream, windowed

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
    with pytest.raises(ValueError, match=r"with_second_stream\(right=list\)"):
        windowed(LEFT, time="ts", key="k").with_second_stream([1])
    streams = TestStream().add_elements(LEFT), TestStream().add_elements(RIGHT)
    with pytest.raises(ValueError, match=r"with_second_stream\(\) works with bounded pandas DataFrames for now"):
        windowed(streams[0], time="ts", key="k").with_second_stream(streams[1]).aggregate(InnerJoin("v"))
