"""The spilling window-state backend (`windowing.window_state`, ``.window_state(KVStore(path))``) on pandas.

Panes equal the in-memory backend's (per step, as multisets: the order of windows within a step is
not part of the contract): the golden scenarios, and a hypothesis differential over random
pipelines. Stepping only the touched rows equals stepping the whole table; a step reads and writes
only those rows; purged windows leave the store; a replayed batch reads the versions its state
names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accumulations
from accumulations import Count, Distinct, Sum, ToList, TopN, ToSet
from storage import KVStore
from windowing import TestStream, windowed
from windowing.engine import step
from windowing.errors import WindowingConfigError
from windowing.window_state import (
    GARBAGE,
    RECORD,
    VERSION,
    empty_light_state,
    heavy_columns,
    rows_to_step,
    spilled_step,
)

from .test_golden import SCENARIOS, build_pipeline, by_step, load, pane_rows
from .test_properties import (
    BIG_LATENESS,
    build,
    elements,
    firing_triggers,
    keyings,
    script_stream,
    scripts,
    window_specs,
)

SETTINGS = settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])


def records(store: KVStore, bucket: int = 0) -> tuple[int, int]:
    """How many payload records and garbage marks the bucket holds."""
    with store.open(bucket) as b:
        return b.scan_table(prefix=RECORD).num_rows, b.scan_table(prefix=GARBAGE).num_rows


def per_step(panes: pd.DataFrame) -> dict[int, list[str]]:
    """Panes as sorted reprs per step: the contract's multiset per step."""
    out: dict[int, list[str]] = {}
    for row in panes.to_dict("records"):
        row = {k: (sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v) for k, v in row.items()}
        out.setdefault(row.get("step", 0), []).append(repr(sorted(row.items())))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_golden_scenarios_give_the_same_panes_with_the_spilling_backend(path: Path, tmp_path):
    sc = load(path)
    aggregate = eval(sc["aggregate"], vars(accumulations))
    in_memory = build_pipeline(sc).run(aggregate)
    store = KVStore(str(tmp_path / "kv"))
    spilled = build_pipeline(sc).window_state(store).run(aggregate)
    assert by_step(pane_rows(sc, spilled.panes)) == by_step(pane_rows(sc, in_memory.panes))
    pd.testing.assert_frame_equal(spilled.late_data, in_memory.late_data)
    assert records(store) == (0, 0), "every window is purged at the end of input, and so is its payload"


collections = st.sampled_from([ToList("x"), ToSet("x"), Distinct("x"), TopN("x", 2)])


@SETTINGS
@given(spec=window_specs, items=elements, trigger=firing_triggers, keying=keyings,
       mode=st.sampled_from(["discarding", "accumulating", "accumulating_and_retracting"]),
       collection=collections, lateness=st.sampled_from([0, 5, BIG_LATENESS]), data=st.data())
def test_random_pipelines_give_the_same_panes_spilled_and_in_memory(tmp_path_factory, spec, items, trigger, keying,
                                                                    mode, collection, lateness, data):
    actions = data.draw(scripts(items))

    def pipeline():
        built = build(spec, script_stream(actions), key=keying).allowed_lateness(lateness).trigger(trigger)
        return getattr(built, mode)()

    store = KVStore(str(tmp_path_factory.mktemp("kv")))
    in_memory = pipeline().run(c=collection, s=Sum("x"), n=Count())
    spilled = pipeline().window_state(store).run(c=collection, s=Sum("x"), n=Count())
    assert per_step(spilled.panes) == per_step(in_memory.panes)
    assert per_step(spilled.late_data) == per_step(in_memory.late_data)
    assert records(store) == (0, 0)


# ---- the step on the touched rows only ----------------------------------------------------------

class CountingBucket:
    """An open bucket that records which record keys were read and written."""

    def __init__(self, bucket):
        self.bucket, self.read, self.written = bucket, [], []

    def __getattr__(self, name):
        return getattr(self.bucket, name)

    def get_many(self, keys):
        self.read.extend(keys.to_pylist())
        return self.bucket.get_many(keys)

    def put_many(self, keys, values):
        self.written.extend(k for k in keys.to_pylist() if k.startswith(RECORD))
        return self.bucket.put_many(keys, values)


def _elements(keys: list[str], times: list[int], values: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"_k0": pd.Series(keys, dtype=object), "_t": np.array(times, np.int64),
                         "_v0": pd.Series(values, dtype=object)})


def _sessions_spec():
    strategy = windowed(pd.DataFrame({"k": ["a"], "t": [0], "x": [1]}), time="t", key="k").sessions(10).strategy(ToList("x"))
    from windowing.plan import make_plan
    from windowing.timeaxis import TimeAxis

    axis = TimeAxis.of("t", pd.Series([0]))
    return make_plan(strategy, axis, {"k": np.dtype(object), "t": np.dtype(np.int64), "x": np.dtype(np.int64)}).spec


def test_a_step_reads_and_writes_only_the_windows_it_touches(tmp_path):
    spec = _sessions_spec()
    n = 200
    with KVStore(str(tmp_path / "kv")).open(0) as raw:
        bucket = CountingBucket(raw)
        light = empty_light_state(spec, [np.dtype(object)])
        keys = [f"k{i}" for i in range(n)]
        light = spilled_step(spec, light, _elements(keys, [0] * n, list(range(n))), 0, 0, bucket, 0, 0).state
        assert len(bucket.written) == n and (light[VERSION] == 0).all()
        bucket.read.clear(), bucket.written.clear()

        result = spilled_step(spec, light, _elements(["k3", "k7"], [5, 5], [1, 2]), 1, 0, bucket, 0, 1)
        assert len(bucket.read) == 2 and len(bucket.written) == 2, "two sessions touched: two read, two written"
        assert sorted(result.state.loc[result.state[VERSION] == 1, "_k0"]) == ["k3", "k7"]
        assert len(result.panes) == 0 and len(result.state) == n


@SETTINGS
@given(spec=window_specs, items=elements, trigger=firing_triggers, keying=keyings, data=st.data())
def test_stepping_the_touched_rows_equals_stepping_the_whole_table(spec, items, trigger, keying, data):
    """Run a random script step by step on the whole table; at each step, also run the step on the rows
    `rows_to_step` picks and put the others back: same panes, same table (as a set of rows)."""
    actions = data.draw(scripts(items))
    pipeline = build(spec, script_stream(actions), key=keying).allowed_lateness(5).trigger(trigger).accumulating_and_retracting()
    from windowing.runners import pandas as runner

    class Checking(runner._Run):
        def _engine_step(self, index, elements):
            whole = step(self.plan.spec, self.state, elements, self.watermark, self.processing_time)
            touched = rows_to_step(self.plan.spec, self.state.drop(columns=heavy_columns(self.plan.spec)),
                                   elements, self.watermark, self.processing_time)
            part = step(self.plan.spec, self.state[touched].reset_index(drop=True), elements, self.watermark,
                        self.processing_time)
            rebuilt = pd.concat([self.state[~touched], part.state], ignore_index=True)
            assert _rows(rebuilt) == _rows(whole.state)
            assert per_step(part.panes.assign(step=0)) == per_step(whole.panes.assign(step=0))
            return whole

    original = runner._Run
    runner._Run = Checking
    try:
        pipeline.aggregate(c=ToList("x"), s=Sum("x"))
    finally:
        runner._Run = original


def _rows(table: pd.DataFrame) -> list[str]:
    return sorted(repr(row) for row in table.to_dict("records"))


# ---- exactly once ---------------------------------------------------------------------------------

def test_a_replayed_batch_reads_the_versions_its_state_names(tmp_path):
    """Batch 1 committed in the store, but the runner's state is still that of batch 0 (Spark retries the
    batch): the replay reads the payloads of batch 0 and gives the panes and state of the first attempt."""
    spec = _sessions_spec()
    store = KVStore(str(tmp_path / "kv"))
    with store.open(0) as bucket:
        state0 = spilled_step(spec, empty_light_state(spec, [np.dtype(object)]),
                              _elements(["a", "b"], [0, 0], [1, 2]), 0, 0, bucket, 0, 0).state
        first = spilled_step(spec, state0, _elements(["a"], [3], [3]), 20, 0, bucket, 0, 1)
        assert bucket.committed_batch_id == 1
    with store.open(0) as bucket:
        replay = spilled_step(spec, state0, _elements(["a"], [3], [3]), 20, 0, bucket, 0, 1)
        assert bucket.committed_batch_id == 1, "a replay writes nothing"
        pd.testing.assert_frame_equal(replay.panes, first.panes)
        pd.testing.assert_frame_equal(replay.state, first.state)
        # The next batch deletes what batch 1 purged (both sessions fired and closed at watermark 20).
        spilled_step(spec, first.state, _elements([], [], []), 21, 0, bucket, 0, 2)
        assert bucket.scan_table(prefix=RECORD).num_rows == 0
        assert bucket.scan_table(prefix=GARBAGE).num_rows == 0


def test_a_superseded_version_stays_until_the_next_batch(tmp_path):
    spec = _sessions_spec()
    with KVStore(str(tmp_path / "kv")).open(0) as bucket:
        state = spilled_step(spec, empty_light_state(spec, [np.dtype(object)]), _elements(["a"], [0], [1]), 0, 0, bucket, 0, 0).state
        state = spilled_step(spec, state, _elements(["a"], [1], [2]), 0, 0, bucket, 0, 1).state
        assert bucket.scan_table(prefix=RECORD).num_rows == 2, "batch 1's replay needs batch 0's version"
        spilled_step(spec, state, _elements(["b"], [1], [2]), 0, 0, bucket, 0, 2)
        assert bucket.scan_table(prefix=RECORD).num_rows == 2, "a's version 0 deleted, b's version 2 written"
        kept = {key[-8:] for key in bucket.scan_table(prefix=RECORD).column("key").to_pylist()}
        assert kept == {(1).to_bytes(8, "big"), (2).to_bytes(8, "big")}


def test_a_pandas_run_leaves_nothing_in_the_store_and_ignores_an_earlier_crashed_run(tmp_path):
    store = KVStore(str(tmp_path / "kv"))
    with store.open(0) as bucket:  # what a crashed run could leave behind
        bucket.begin(0)
        bucket.put(RECORD + b"left over", b"x")
        bucket.commit()
    stream = TestStream().add_elements(pd.DataFrame({"k": ["a", "b"], "t": [1, 2], "x": [1, 2]})).advance_watermark_to(5)
    panes = windowed(stream, time="t", key="k").fixed(10).window_state(store).aggregate(ToList("x"))
    assert sorted(panes["value"].map(tuple)) == [(1,), (2,)]
    assert records(store) == (0, 0)


def test_window_state_refuses_what_is_not_a_store():
    with pytest.raises(WindowingConfigError, match=r"window_state\(store='/tmp/x'\) is not a key-value store"):
        windowed(pd.DataFrame({"t": [1]}), time="t").window_state("/tmp/x")
