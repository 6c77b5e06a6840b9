"""The window state in a key-value store (`windowing.window_state`, ``.window_state(KVStore(path))``) on pandas.

Panes equal the in-memory backend's (per step, as multisets: the order of windows within a step is
not part of the contract): the golden scenarios, and a hypothesis differential over random
pipelines. The timer index picks exactly the keys a step must step, and stepping them equals
stepping the whole table; a step reads and writes only those keys and scans no more than it
touches; purged windows leave the store; a replayed batch sees the store as it was before the
batch and writes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import pickle
import re
import threading
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accumulations
from accumulations import Accumulation, Count, Distinct, Fold, Sum, ToList, TopN, ToSet
from storage import KVStore
from triggers import AfterAll, AfterAny, AfterCount, AfterEach, AfterProcessingTime, AfterWatermark, AtWatermark, Repeatedly, TriggerContext
from windowing import TestStream, columns, state_classes, window_state, windowed
from windowing.engine import lateness_horizon, step
from windowing.errors import WindowingConfigError
from windowing.spec import EngineSpec
from windowing.state_codec import dumped, pickled
from windowing.window_state import (
    RECORD,
    _Record,
    _View,
    key_blobs,
    keyed_step,
    keys_to_step,
    windows_of,
)
from windowing.window_table import empty_state

from .test_golden import SCENARIOS, build_pipeline, by_step, load, pane_rows
from .test_properties import (
    BIG_LATENESS,
    any_triggers,
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


def stored(store: KVStore, bucket: int = 0) -> int:
    """How many entries the bucket holds besides a pandas run's mark: records, index entries, undo records."""
    with store.open(bucket) as b:
        return sum(key != window_state.PANDAS_RUN for key in b.scan_table().column("key").to_pylist())


def per_step(panes: pd.DataFrame) -> dict[int, list[str]]:
    """Panes as sorted reprs per step: the contract's multiset per step."""
    out: dict[int, list[str]] = {}
    for row in panes.to_dict("records"):
        row = {k: (sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v) for k, v in row.items()}
        out.setdefault(row.get("step", 0), []).append(repr(sorted(row.items())))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_golden_scenarios_give_the_same_panes_with_the_window_state_store(path: Path, tmp_path):
    sc = load(path)
    aggregate = eval(sc["aggregate"], vars(accumulations))
    in_memory = build_pipeline(sc).run(aggregate)
    store = KVStore(str(tmp_path / "kv"))
    spilled = build_pipeline(sc).window_state(store).run(aggregate)
    assert by_step(pane_rows(sc, spilled.panes)) == by_step(pane_rows(sc, in_memory.panes))
    pd.testing.assert_frame_equal(spilled.late_data, in_memory.late_data)
    assert stored(store) == 0, "every window is purged at the end of input, and so is its record"


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
    assert stored(store) == 0


NULLS_AND_EQUALS = {  # key columns whose equal keys (as the engine groups keys: nulls are one key) are spelt differently
    "nullable integers": pd.Series([1, None, 1, None, 2], dtype="Int64"),
    "floats with NaN and -0.0": [1.0, np.nan, 1.0, np.nan, -0.0],
    "objects with None, NaN and 1 == 1.0 == True": pd.Series([1, None, 1.0, np.nan, True], dtype=object),
    "timestamps with NaT": pd.to_datetime([1, None, 1, None, 2], unit="s"),
    "strings with NA": pd.Series(["a", None, "a", pd.NA, "b"], dtype="string"),
    # Before: the store kept these apart, where the engine groups them as one key (a split key's windows)
    "decimals equal to an int and a float": pd.Series([1, Decimal("1.5"), Decimal("1.0"), 1.5, Decimal("NaN")], dtype=object),
    "tuples of equal values": pd.Series([(1, 2), (1.5, None), (1.0, 2), (Decimal("1.5"), np.nan), ("b", 1)], dtype=object),
    "frozensets": pd.Series([frozenset({1, 2}), frozenset(), frozenset({2.0, 1}), frozenset(), frozenset({"a"})], dtype=object),
}


@pytest.mark.parametrize("keys", NULLS_AND_EQUALS.values(), ids=list(NULLS_AND_EQUALS))
def test_equal_keys_spelt_differently_are_one_key_in_the_store(keys, tmp_path):
    """A step's elements and the windows read back may spell a key differently (None for a null the table holds
    as NaN, 1.0 for 1): the store must find them under one key, as the engine groups them, or a session would
    not merge with the key's open one, or a window would be lost."""
    stream = (TestStream().add_elements(pd.DataFrame({"k": keys, "t": [1, 2, 3, 4, 5], "x": [1, 2, 3, 4, 5]}).iloc[:2])
              .add_elements(pd.DataFrame({"k": keys, "t": [1, 2, 3, 4, 5], "x": [1, 2, 3, 4, 5]}).iloc[2:])
              .advance_watermark_to(100))

    def pipeline():
        return windowed(stream, time="t", key="k").sessions(5).trigger(Repeatedly(AfterCount(1))).accumulating()

    in_memory = pipeline().aggregate(c=ToList("x"))
    spilled = pipeline().window_state(KVStore(str(tmp_path / "kv"))).aggregate(c=ToList("x"))
    assert per_step(spilled) == per_step(in_memory)



def _equal_strings(one_object: bool) -> tuple[str, str]:
    """Two equal strings, one object or two (as two key columns of one literal, or as read from a file)."""
    first = "".join(["xy"] * 3)
    return (first, first) if one_object else (first, "".join(["xy"] * 3))


@pytest.mark.parametrize("nested", [False, True], ids=["two key columns", "a tuple key column"])
def test_equal_values_as_one_object_or_two_are_one_key_in_the_store(nested, tmp_path):
    """Pickle writes an object it met before as a reference to the first: a key of two equal strings gave other
    bytes as one object than as two, and the store split it, giving two panes of one key and window."""
    def step_frame(one_object: bool, t: int) -> pd.DataFrame:
        first, second = _equal_strings(one_object)
        keys = {"k": pd.Series([(first, second)], dtype=object)} if nested else {
            "k1": pd.Series([first], dtype=object), "k2": pd.Series([second], dtype=object)}
        return pd.DataFrame({**keys, "t": [t], "x": [t]})

    stream = TestStream().add_elements(step_frame(True, 1)).add_elements(step_frame(False, 2)).advance_watermark_to(100)

    def pipeline():
        return windowed(stream, time="t", key="k" if nested else ["k1", "k2"]).fixed(10)

    in_memory = pipeline().aggregate(s=Sum("x"))
    spilled = pipeline().window_state(KVStore(str(tmp_path / "kv"))).aggregate(s=Sum("x"))
    assert per_step(spilled) == per_step(in_memory)
    assert in_memory["s"].tolist() == [3]


INSTANTS = {  # one instant, one duration, as a step's elements or a table read back may hold them
    "datetime64[us] (a Spark timestamp)": (pd.Series([pd.Timestamp("2024-01-01 00:00:01")]).astype("datetime64[us]"),
                                           pd.Series([pd.Timedelta(1, "s")]).astype("timedelta64[us]")),
    "datetime64[ns]": (pd.Series([pd.Timestamp("2024-01-01 00:00:01")]).astype("datetime64[ns]"),
                       pd.Series([pd.Timedelta(1, "s")]).astype("timedelta64[ns]")),
    "datetime64[s]": (pd.Series([pd.Timestamp("2024-01-01 00:00:01")]).astype("datetime64[s]"),
                      pd.Series([pd.Timedelta(1, "s")]).astype("timedelta64[s]")),
    "Timestamps in an object column": (pd.Series([pd.Timestamp("2024-01-01 00:00:01")], dtype=object),
                                       pd.Series([pd.Timedelta(1, "s")], dtype=object)),
    "Python datetimes": (pd.Series([datetime.datetime(2024, 1, 1, 0, 0, 1)], dtype=object),
                         pd.Series([datetime.timedelta(seconds=1)], dtype=object)),
    "NumPy scalars": (pd.Series([np.datetime64("2024-01-01T00:00:01", "ms")], dtype=object),
                      pd.Series([np.timedelta64(1000, "ms")], dtype=object)),
}


def test_an_instant_or_a_duration_is_one_key_in_the_store_whatever_its_unit():
    """On Spark a step's elements hold a timestamp key in microseconds and the table read back holds Timestamps:
    the store spelt the first in microseconds and the second in nanoseconds, so from the third micro-batch on a
    key's elements missed its windows (a Sum of 1, 10 and 100 gave 100)."""
    spec = _sessions_spec()
    spellings = {name: (*key_blobs(spec, pd.DataFrame({"_k0": instant})), *key_blobs(spec, pd.DataFrame({"_k0": duration})))
                 for name, (instant, duration) in INSTANTS.items()}
    assert len(set(spellings.values())) == 1, spellings
    beyond_nanoseconds = pd.Series([pd.Timestamp("1500-01-01")]).astype("datetime64[us]")  # no int64 of nanoseconds
    assert key_blobs(spec, pd.DataFrame({"_k0": beyond_nanoseconds})) == key_blobs(
        spec, pd.DataFrame({"_k0": pd.Series([datetime.datetime(1500, 1, 1)], dtype=object)}))

# ---- the step on the touched keys only ------------------------------------------------------------

def due_keys(spec, table: pd.DataFrame, watermark: int, processing_time: int) -> set[bytes]:
    """The reference model of the timer index: the keys of the windows a step must evaluate without new
    elements, found by a pass over the whole table (the purge, the ON_TIME pane or an end-of-window timer
    at the watermark, a processing-time timer at or before the processing time, a closed window's too: the
    step consumes it)."""
    end = table["end"].to_numpy()
    passed = end <= watermark
    due = (end <= lateness_horizon(spec, watermark)) | (passed & (~table["on_time_done"].to_numpy()
                                                                    | table["end_timer"].to_numpy()))
    trigger_state = {name: table[name].to_numpy() for name in table.columns if name.startswith("t.")}
    due |= spec.trigger.timer_due(TriggerContext(trigger_state, end, watermark, processing_time))  # closed too
    return {key for key, is_due in zip(key_blobs(spec, table), due) if is_due}


def whole_table(spec, template: pd.DataFrame, bucket) -> pd.DataFrame:
    """Every window the bucket holds, from its records."""
    blobs = bucket.scan_table(prefix=RECORD).column("value").to_pylist()
    return windows_of(spec, template, [_Record.decoded(blob) for blob in blobs])


def _rows(table: pd.DataFrame) -> list[str]:
    return sorted(repr(row) for row in table.to_dict("records"))


def run_checked(pipeline, store: KVStore, **aggregations) -> None:
    """Run ``pipeline`` with the store, and beside it on the whole table in memory: at each step the keys the
    index picks are those with elements and those the reference model finds due, the panes are the same,
    and the store holds the same windows as the whole table."""
    from windowing.runners import pandas as runner

    class Checking(runner._SpilledRun):
        whole: pd.DataFrame | None = None

        def _engine_step(self, index, elements):
            spec, batch = self.plan.spec, self.first_batch + 1 + index
            whole = self.state if self.whole is None else self.whole
            picked = keys_to_step(spec, _View(self.bucket, None), elements, self.watermark, self.processing_time)
            assert sorted(picked) == sorted(set(key_blobs(spec, elements))
                                            | due_keys(spec, whole, self.watermark, self.processing_time))
            expected = step(spec, whole, elements, self.watermark, self.processing_time)
            result = super()._engine_step(index, elements)
            assert per_step(result.panes.assign(step=0)) == per_step(expected.panes.assign(step=0))
            assert _rows(whole_table(spec, self.state, self.bucket)) == _rows(expected.state), f"batch {batch}"
            self.whole = expected.state
            return result

    original = runner._SpilledRun
    runner._SpilledRun = Checking
    try:
        pipeline.window_state(store).aggregate(**aggregations)
    finally:
        runner._SpilledRun = original


@SETTINGS
@given(spec=window_specs, items=elements, trigger=st.one_of(firing_triggers, any_triggers), keying=keyings,
       data=st.data())
def test_the_index_picks_the_due_keys_and_stepping_them_equals_stepping_the_whole_table(tmp_path_factory, spec, items,
                                                                                        trigger, keying, data):
    actions = data.draw(scripts(items))
    pipeline = build(spec, script_stream(actions), key=keying).allowed_lateness(5).trigger(trigger).accumulating_and_retracting()
    run_checked(pipeline, KVStore(str(tmp_path_factory.mktemp("kv"))), c=ToList("x"), s=Sum("x"))


def test_a_trigger_set_again_before_its_timer_is_due_keeps_both_timers_in_the_store(tmp_path):
    """The store's records hold an `AfterProcessingTime`'s later timers (a tuple in a cell), and its index wakes the
    key at the earlier one: the case of `tests/engine/test_timers.py`, where the timer of 3 finishes the window at 4."""
    trigger = AfterEach(AfterWatermark(early=AfterAny(AfterCount(1), AfterProcessingTime(3))), AfterWatermark())
    one = pd.DataFrame({"k": ["a"], "ts": [1], "x": [1]})
    stream = (TestStream().add_elements(one).advance_processing_time(2).add_elements(one.assign(ts=[2]))
              .advance_watermark_to(10).advance_processing_time(2).add_elements(one.assign(ts=[3], x=[4])))
    pipeline = windowed(stream, time="ts", key="k").fixed(10).allowed_lateness(20).discarding().trigger(trigger)
    run_checked(pipeline, KVStore(str(tmp_path / "kv")), s=Sum("x"))
    panes = pipeline.window_state(KVStore(str(tmp_path / "again"))).aggregate(s=Sum("x"))
    assert panes[["s", "timing", "step"]].values.tolist() == [[1, "EARLY", 0], [1, "EARLY", 2], [0, "ON_TIME", 3]]


def test_a_closed_windows_timer_is_consumed_in_the_store_as_in_the_whole_table(tmp_path):
    """Found by hypothesis: `AfterCount` finishes the `AfterAny` (the window closes) before its `AfterProcessingTime`
    is due; the whole table's step consumed the timer when due, and the index, which left closed windows out,
    never stepped the key: the store kept a timer the table had dropped (state that differed; no pane did in the
    cases tried, sessions merging such a window included)."""
    stream = (TestStream().add_elements(pd.DataFrame({"k": ["a"], "t": [0], "x": [0]})).advance_processing_time(1)
              .advance_processing_time(1))
    pipeline = (windowed(stream, time="t", key="k").fixed(1).allowed_lateness(5)
                .trigger(AfterAny(AfterCount(1), AfterProcessingTime(1))).accumulating_and_retracting())
    run_checked(pipeline, KVStore(str(tmp_path / "kv")), c=ToList("x"), s=Sum("x"))


def test_a_key_whose_due_timer_a_composite_holds_back_is_stepped_in_every_step(tmp_path):
    """``AfterAll`` holds back its periodic child's early firing until the count is reached too: `AtWatermark`'s
    next firing stays pending after its time, and the trigger is called again in every step (the ``D`` index
    entries). An `AfterProcessingTime`'s timer is spent once due, as Beam's."""
    stream = (TestStream().add_elements(pd.DataFrame({"k": ["a", "b"], "t": [1, 2], "x": [1, 2]}))
              .advance_processing_time(5).advance_processing_time(1).advance_processing_time(1)
              .add_elements(pd.DataFrame({"k": ["a"], "t": [3], "x": [3]})).advance_processing_time(1))
    for early in (AtWatermark().with_early_firings_every(2), AfterProcessingTime(2)):
        pipeline = windowed(stream, time="t", key="k").global_window().trigger(Repeatedly(AfterAll(early, AfterCount(2))))
        run_checked(pipeline, KVStore(str(tmp_path / repr(early))), c=ToList("x"))


class CountingBucket:
    """An open bucket that records the keys read and written, and the rows each scan returned."""

    def __init__(self, bucket):
        self.bucket, self.read, self.written, self.scanned = bucket, [], [], []

    def __getattr__(self, name):
        return getattr(self.bucket, name)

    def get_many(self, keys):
        self.read.extend(keys.to_pylist())
        return self.bucket.get_many(keys)

    def put_many(self, keys, values):
        self.written.extend(keys.to_pylist())
        return self.bucket.put_many(keys, values)

    def scan_table(self, *args, **kwargs):
        table = self.bucket.scan_table(*args, **kwargs)
        self.scanned.append(table.num_rows)
        return table

    def clear(self):
        self.read.clear(), self.written.clear(), self.scanned.clear()


def _elements(keys: list[str], times: list[int], values: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"_k0": pd.Series(keys, dtype=object), "_t": np.array(times, np.int64),
                         "_v0": pd.Series(values, dtype=object)})


def _sessions_spec(trigger=None):
    builder = windowed(pd.DataFrame({"k": ["a"], "t": [0], "x": [1]}), time="t", key="k").sessions(10)
    strategy = (builder if trigger is None else builder.trigger(trigger)).strategy(ToList("x"))
    from windowing.plan import make_plan
    from windowing.timeaxis import TimeAxis

    axis = TimeAxis.of("t", pd.Series([0]))
    return make_plan(strategy, axis, {"k": np.dtype(object), "t": np.dtype(np.int64), "x": np.dtype(np.int64)}).spec


def _names(store_keys: list[bytes]) -> set[str]:
    """The keys (of the pipeline) that store keys name."""
    return {name for key in store_keys for name in [f"k{i}" for i in range(1000)]
            if key.endswith(key_blobs_of(name))}


def key_blobs_of(name: str) -> bytes:
    return key_blobs(_sessions_spec(), pd.DataFrame({"_k0": [name]}))[0]


def test_a_step_reads_writes_and_scans_only_the_keys_it_touches(tmp_path):
    spec = _sessions_spec()
    template = empty_state(spec, [np.dtype(object)])
    n = 200
    with KVStore(str(tmp_path / "kv")).open(0) as raw:
        bucket = CountingBucket(raw)
        keys = [f"k{i}" for i in range(n)]
        keyed_step(spec, template, _elements(keys, [0] * n, list(range(n))), 0, 0, bucket, 0)
        assert len([k for k in bucket.written if k.startswith(RECORD)]) == n
        keyed_step(spec, template, _elements([], [], []), 0, 0, bucket, 1)  # deletes batch 0's undo records
        bucket.clear()

        result = keyed_step(spec, template, _elements(["k3", "k7"], [5, 5], [1, 2]), 1, 0, bucket, 2)
        assert bucket.read == [RECORD + key_blobs_of("k3"), RECORD + key_blobs_of("k7")], "two keys touched, two read"
        assert _names(bucket.written) == {"k3", "k7"}, "their records, index entries and undo records only"
        assert sum(bucket.scanned) <= 4, f"no scan returns the untouched keys' entries: {bucket.scanned}"
        assert len(result.panes) == 0 and result.windows_left
        assert len(whole_table(spec, template, raw)) == n


# ---- exactly once ---------------------------------------------------------------------------------

def test_a_replayed_batch_sees_the_store_before_it_and_writes_nothing(tmp_path):
    """Batch 1 committed in the store, but the runner committed only batch 0 (Spark retries the batch):
    the replay reads the store as batch 0 left it, gives the first attempt's panes and writes nothing;
    batch 2 deletes batch 1's undo records."""
    spec = _sessions_spec()
    template = empty_state(spec, [np.dtype(object)])
    store = KVStore(str(tmp_path / "kv"))
    with store.open(0) as bucket:
        keyed_step(spec, template, _elements(["a", "b"], [0, 0], [1, 2]), 0, 0, bucket, 0)
        first = keyed_step(spec, template, _elements(["a"], [3], [3]), 20, 0, bucket, 1)
        assert bucket.committed_batch_id == 1 and len(first.panes) == 2
        assert not first.windows_left and first.undo_pending, "both sessions fired and were purged at watermark 20"
    with store.open(0) as raw:
        bucket = CountingBucket(raw)
        replay = keyed_step(spec, template, _elements(["a"], [3], [3]), 20, 0, bucket, 1)
        assert bucket.committed_batch_id == 1 and bucket.written == [], "a replay writes nothing"
        pd.testing.assert_frame_equal(replay.panes, first.panes)
        pd.testing.assert_frame_equal(replay.dropped, first.dropped)
        assert (replay.windows_left, replay.undo_pending) == (False, True)
        after = keyed_step(spec, template, _elements([], [], []), 21, 0, bucket, 2)
        assert (after.windows_left, after.undo_pending) == (False, False)
        assert raw.scan_table().num_rows == 0, "no window left, and batch 1's undo records deleted"


def test_a_store_written_with_every_windows_last_outputs_goes_on_without_them(tmp_path, monkeypatch):
    """Stores written before `EngineSpec.keeps_last_outputs` hold each window's last outputs even where no
    retraction or ``fire_only_updated`` reads them: read today, the windows are those of an uninterrupted run.
    The trigger's count follows the last outputs in a row: read by position, it would be read wrongly. Key
    "b" keeps its old record while "a" is rewritten (batch 2), and the two are read together (batch 3)."""
    spec = _sessions_spec(Repeatedly(AfterCount(2)))
    assert not spec.keeps_last_outputs and spec.trigger.columns()
    template = empty_state(spec, [np.dtype(object)])
    batches = [(_elements(["a", "b"], [0, 1], [1, 2]), 0), (_elements(["a"], [3], [3]), 2),
               (_elements(["a"], [5], [4]), 2), (_elements(["a", "b", "c"], [6, 7, 30], [5, 6, 7]), 5),
               (_elements([], [], []), 60)]
    with KVStore(str(tmp_path / "today")).open(0) as bucket:
        today = [keyed_step(spec, template, elements, watermark, 0, bucket, i).panes
                 for i, (elements, watermark) in enumerate(batches)]
    with KVStore(str(tmp_path / "before")).open(0) as bucket:
        with monkeypatch.context() as earlier_release:
            earlier_release.setattr(EngineSpec, "keeps_last_outputs", property(lambda spec: True))
            earlier_release.setattr(window_state, "LAYOUT", 0)
            old_template = empty_state(spec, [np.dtype(object)])
            before = [keyed_step(spec, old_template, elements, watermark, 0, bucket, i).panes
                      for i, (elements, watermark) in enumerate(batches[:2])]
        assert _row_widths(bucket) == {len(template.columns) + 1}, "one o<i> more"
        after = [keyed_step(spec, template, *batches[2], 0, bucket, 2).panes]
        assert _row_widths(bucket) == {len(template.columns), len(template.columns) + 1}, "a rewritten, b not"
        after += [keyed_step(spec, template, elements, watermark, 0, bucket, i).panes
                  for i, (elements, watermark) in enumerate(batches) if i >= 3]
    assert [len(panes) for panes in today] == [0, 1, 0, 2, 3]
    for got, want in zip(before + after, today):
        pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("layout, dropped", [(0, ("t.timer", "t.later")), (1, ("t.later",))],
                         ids=["written before layouts", "layout 1"])
def test_a_store_written_before_the_processing_time_timer_columns_goes_on_with_the_timers_it_held(
        tmp_path, monkeypatch, layout, dropped):
    """Records written before `LAYOUT` lack each `AfterProcessingTime`'s ``later`` timers (layout 1), and before
    layouts its ``timer`` too (that release kept its firing time only, and no timer once it fired or was reset): read
    today, they hold the timers of their firing times, and the windows go on as in an uninterrupted run. The first
    batch writes its records as that release did; b's timer (5) must wake it at 6, when only a has new elements."""
    spec = _sessions_spec(Repeatedly(AfterProcessingTime(5)))
    template = empty_state(spec, [np.dtype(object)])
    batches = [(_elements(["a", "b"], [0, 1], [1, 2]), 0), (_elements(["a"], [3], [3]), 6),
               (_elements(["b"], [30], [4]), 7), (_elements([], [], []), 12)]
    kept = [i for i, name in enumerate(template.columns) if name not in dropped]
    assert len(kept) == len(template.columns) - len(dropped)
    runs = []
    for name in ("today", "before"):
        with KVStore(str(tmp_path / name)).open(0) as bucket, monkeypatch.context() as earlier_release:
            if name == "before":
                earlier_release.setattr(_Record, "encoded", lambda record: pickled((
                    record.due, record.next_processing, record.pending, tuple(tuple(row[i] for i in kept) for row in record.rows),
                    *([layout] if layout else []))))
            panes = [keyed_step(spec, template, *batches[0], 0, bucket, 0).panes]
            earlier_release.undo()
            assert _row_widths(bucket) == {len(template.columns) - (name == "before") * len(dropped)}
            panes += [keyed_step(spec, template, elements, 0, processing_time, bucket, i).panes
                      for i, (elements, processing_time) in enumerate(batches) if i >= 1]
        runs.append(panes)
    today, before = runs
    assert [sorted(zip(p["_k0"], p[columns.output(0)].map(tuple))) for p in today] == [[], [("a", (1, 3)), ("b", (2,))], [], [("b", (4,))]]
    for got, want in zip(before, today):
        pd.testing.assert_frame_equal(got, want)


def _row_widths(bucket) -> set[int]:
    records = [_Record.decoded(blob) for blob in bucket.scan_table(prefix=RECORD).column("value").to_pylist()]
    return {len(row) for record in records for row in record.rows}


@pytest.mark.parametrize("layout", [0, window_state.LAYOUT], ids=["written before LAYOUT", "LAYOUT"])
def test_records_of_another_width_are_refused_by_name(layout):
    spec = _sessions_spec()
    template = empty_state(spec, [np.dtype(object)])
    with pytest.raises(WindowingConfigError, match=f"hold 3 cells per window, not the {len(template.columns)} of this "
                                                   "pipeline's window table: the store was written by another pipeline"):
        windows_of(spec, template, [_Record(0, None, False, (("a", 0, 10),), layout)])


def test_a_batch_behind_the_store_is_refused(tmp_path):
    spec = _sessions_spec()
    template = empty_state(spec, [np.dtype(object)])
    with KVStore(str(tmp_path / "kv")).open(0) as bucket:
        keyed_step(spec, template, _elements(["a"], [0], [1]), 0, 0, bucket, 0)
        keyed_step(spec, template, _elements(["a"], [1], [2]), 0, 0, bucket, 1)
        with pytest.raises(WindowingConfigError, match="batch 0 of the window state is behind its store, whose bucket "
                                                       "committed batch 1"):
            keyed_step(spec, template, _elements(["a"], [1], [2]), 0, 0, bucket, 0)


def test_a_pandas_run_leaves_only_its_mark_in_the_store_and_clears_what_a_crashed_run_left(tmp_path):
    store = KVStore(str(tmp_path / "kv"))

    def fail_at_three(total, value):
        if value == 3:
            raise RuntimeError("crash")
        return total + value

    crashing = (TestStream().add_elements(pd.DataFrame({"k": ["a"], "t": [1], "x": [1]})).advance_watermark_to(5)
                .add_elements(pd.DataFrame({"k": ["b"], "t": [2], "x": [3]})))
    with pytest.raises(RuntimeError, match="crash"):
        windowed(crashing, time="t", key="k").fixed(10).window_state(store).aggregate(
            accumulations.Fold("x", 0, fail_at_three, lambda a, b: a + b))
    assert stored(store) > 1  # a's window and the run's mark
    stream = TestStream().add_elements(pd.DataFrame({"k": ["a", "b"], "t": [1, 2], "x": [1, 2]})).advance_watermark_to(5)
    panes = windowed(stream, time="t", key="k").fixed(10).window_state(store).aggregate(ToList("x"))
    assert sorted(panes["value"].map(tuple)) == [(1,), (2,)]
    with store.open(0) as bucket:
        assert bucket.scan_table().column("key").to_pylist() == [window_state.PANDAS_RUN]
    windowed(stream, time="t", key="k").fixed(10).window_state(store).aggregate(ToList("x"))  # a third run: its own


def _a_spark_querys_windows(store: KVStore, bucket: int) -> None:
    """Windows as a Spark query's micro-batch writes them: `keyed_step` on the bucket, without a pandas run's mark."""
    spec = _sessions_spec()
    with store.open(bucket) as opened:
        keyed_step(spec, empty_state(spec, [np.dtype(object)]), _elements(["a"], [0], [1]), 0, 0, opened, 7)


@pytest.mark.parametrize("spark_buckets", [[0], [0, 1], [1], "bucket 0 emptied"], ids=str)
def test_a_pandas_run_refuses_a_spark_querys_store_and_deletes_none_of_it(tmp_path, spark_buckets):
    # A run starts by clearing bucket 0: it deleted the windows a Spark query kept there, taking them for what a
    # crashed pandas run left; and past a bucket 0 the query had emptied it committed batches the query's next
    # micro-batch then found its store ahead of it ("batch 8 of the window state is behind its store").
    store = KVStore(str(tmp_path))
    if spark_buckets == "bucket 0 emptied":  # its windows purged, the undo records deleted by the next batch
        spark_buckets = [0]
        with store.open(0) as bucket_zero:
            bucket_zero.begin(7)
            bucket_zero.commit()
    else:
        for bucket in spark_buckets:
            _a_spark_querys_windows(store, bucket)
    before = {bucket: stored(store, bucket) for bucket in spark_buckets}
    held = "buckets " + str(sorted({0, *spark_buckets})) if spark_buckets != [0] else "window state that no pandas run marked"
    with pytest.raises(WindowingConfigError, match=re.escape(f"holds {held}") + ".*a Spark query's"):
        windowed(pd.DataFrame({"t": [1], "x": [1]}), time="t").fixed(10).window_state(store).aggregate(Sum("x"))
    assert {bucket: stored(store, bucket) for bucket in spark_buckets} == before
    with store.open(0) as bucket_zero:
        assert bucket_zero.committed_batch_id == (7 if 0 in spark_buckets else -1)


@pytest.mark.parametrize("key", [b"important", b"Rfoo"])
def test_a_pandas_run_refuses_a_store_holding_other_data_and_deletes_none_of_it(tmp_path, key):
    # A run starts by clearing its bucket: it deleted every key in bucket 0, the user's own too (one that starts
    # like a pandas run's mark, b"R", beside the mark as well).
    store = KVStore(str(tmp_path))
    with store.open(0) as bucket:
        bucket.begin(0)
        bucket.put(key, b"data")
        bucket.put(window_state.PANDAS_RUN, b"")
        bucket.commit()
    with pytest.raises(WindowingConfigError, match=re.escape(f"holds {key!r}, a key window state never writes;") +
                       " .* give window state a store of its own"):
        windowed(pd.DataFrame({"t": [1], "x": [1]}), time="t").fixed(10).window_state(store).aggregate(Sum("x"))
    with store.open(0) as bucket:
        assert bucket.get(key) == b"data"


def test_window_state_refuses_what_is_not_a_store():
    with pytest.raises(WindowingConfigError, match=r"window_state\(store='/tmp/x'\) is not a key-value store"):
        windowed(pd.DataFrame({"t": [1]}), time="t").window_state("/tmp/x")


@pytest.mark.parametrize("in_store", [False, True])
def test_numpy_accumulators_merge_as_arrays_after_the_store_held_them(in_store, tmp_path):
    # Before: the store pickled an accumulator holding numpy as plain Python values, so the sessions [0, 6) and
    # [10, 16) came back as lists, and the element at 5 merging them added two lists: a broadcast ValueError.
    steps = TestStream()
    for t in (0, 10, 5):
        steps = steps.add_elements(pd.DataFrame({"t": np.array([t], dtype=np.int64), "x": [float(t)]}))
    sum_and_count = accumulations.Fold("x", None, lambda a, v: np.array([v, 1.0]) if a is None else a + np.array([v, 1.0]),
                                       lambda a, b: b if a is None else a if b is None else a + b, output=tuple)
    pipeline = windowed(steps, time="t").sessions(6).accumulating()
    pipeline = pipeline.window_state(KVStore(str(tmp_path))) if in_store else pipeline
    assert pipeline.aggregate(sum_and_count)["value"].tolist() == [(15.0, 3.0)]


@pytest.mark.parametrize("dtype, big", [("Int64", 2**53), ("UInt64", 2**64 - 2)])
def test_nullable_integer_keys_beside_a_null_stay_exact_through_the_store(dtype, big, tmp_path):
    # Before: the store gave the key column back as Int64, which the engine's to_numpy made float64 beside a null:
    # 2**53 + 1 came out 2**53, one key's pane was lost and another's split in two; UInt64 overflowed.
    steps = TestStream()
    for keys, t in (([big + 1, None], 1), ([big + 1, big], 2), ([big + 1, None], 8)):
        steps = steps.add_elements(pd.DataFrame({"k": pd.array(keys, dtype=dtype), "t": [t] * len(keys), "x": [1] * len(keys)}))
    steps = steps.advance_watermark_to(5)

    def panes(store):
        pipeline = windowed(steps, time="t", key="k").fixed(4).trigger(Repeatedly(AfterCount(1))).accumulating()
        pipeline = pipeline.window_state(store) if store is not None else pipeline
        return pipeline.aggregate(Sum("x"))

    in_memory = panes(None)
    assert sorted(in_memory["k"].dropna().unique().tolist()) == [big, big + 1]
    spilled = panes(KVStore(str(tmp_path)))
    assert per_step(spilled) == per_step(in_memory) and spilled["k"].dtype == in_memory["k"].dtype == dtype


def _counted_in(box_class):
    class BoxCount(Accumulation):
        column = "v"

        def default_accumulated_value(self):
            return box_class(0)

        def accumulate(self, accumulated, value):
            return box_class(accumulated.n + 1)

        def merge(self, accumulated1, accumulated2):
            return box_class(accumulated1.n + accumulated2.n)

        def get_output(self, accumulated):
            return accumulated.n

    return BoxCount()


def test_an_accumulator_of_a_class_defined_in_a_function_is_kept_in_the_store(tmp_path):
    # It failed with pickle's bare "Can't pickle local object", naming neither the accumulation nor window_state.
    class Box:
        def __init__(self, n):
            self.n = n

    stream = TestStream().add_elements([{"k": "a", "ts": 1, "v": 1}]).add_elements([{"k": "a", "ts": 2, "v": 1}])

    def counts(store):
        built = windowed(stream, time="ts", key="k")
        built = built.window_state(KVStore(str(store))) if store else built
        return built.fixed(10).trigger(Repeatedly(AfterCount(1))).accumulating().run(n=_counted_in(Box)).panes["n"].tolist()

    assert counts(tmp_path / "kv") == counts(None) == [1, 2, 2]


def test_an_accumulator_nothing_can_pickle_is_refused_naming_what_it_holds(tmp_path):
    class Locked:
        def __init__(self, n):
            self.n, self.lock = n, threading.Lock()

    stream = TestStream().add_elements([{"k": "a", "ts": 1, "v": 1}])
    built = windowed(stream, time="ts", key="k").window_state(KVStore(str(tmp_path / "kv"))).fixed(10)
    with pytest.raises(TypeError, match=r"a window's state holds Locked .* which pickle cannot "
                                        r"store \(.*lock.*\); .* must be picklable"):
        built.run(n=_counted_in(Locked))


def test_two_classes_of_one_name_in_one_pipeline_are_kept_apart(tmp_path):
    # A review found a first version naming each such class by module and name only: one aggregation's cells came
    # back as the other's class (two factory-made classes share their qualified name).
    def counter(column):
        class Tally:
            def __init__(self, n):
                self.n = n

        def add(a, v):
            assert isinstance(a, Tally), "read back as another Tally"
            return Tally(a.n + 1)

        def merge(a, b):
            assert isinstance(a, Tally) and isinstance(b, Tally), "read back as another Tally"
            return Tally(a.n + b.n)

        return Fold(column, Tally(0), add, merge, output=lambda a: a.n)

    stream = TestStream().add_elements([{"k": "a", "ts": 1, "x": 1, "y": 2}]).add_elements([{"k": "a", "ts": 2, "x": 1, "y": 2}])

    def counts(store):
        built = windowed(stream, time="ts", key="k")
        built = built.window_state(KVStore(str(store))) if store else built
        panes = built.fixed(10).trigger(Repeatedly(AfterCount(1))).accumulating().run(x=counter("x"), y=counter("y")).panes
        return panes[["x", "y"]].values.tolist()

    assert counts(tmp_path / "kv") == counts(None) == [[1, 1], [2, 2], [2, 2]]


@pytest.mark.xfail(importlib.metadata.version("pyspark").startswith("3."), strict=True,
                   reason="pyspark 3.5's cloudpickle loses a slots=True dataclass's fields (docs/spark.md, 'State')")
def test_a_class_named_twice_by_the_pipeline_is_pickled_with_its_code_and_comes_back_as_itself():
    # A slots dataclass replaces the class it was made from, which its generated methods still name: a first version
    # took the replaced one for the class of that name, and a second micro-batch failed ("state is not a dictionary").
    @dataclasses.dataclass(frozen=True, slots=True)
    class Tally:
        total: int = 0

    fold = Fold("v", Tally(), lambda a, v: dataclasses.replace(a, total=a.total + v), lambda a, b: Tally(a.total + b.total))
    state_classes.remember_classes([fold])
    blob = dumped(Tally(3))
    state_classes.remember_classes([fold])  # the next task's walk, before it reads the state
    back = pickle.loads(blob)
    assert type(back) is Tally and back.total == 3
