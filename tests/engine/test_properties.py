"""Hypothesis properties of the engine, checked against the brute-force model in `reference`.

(a) the final panes equal a recomputation from scratch; (b) re-splitting the
input into other steps never changes them; (c) in accumulating-and-retracting
mode emitted minus retracted values add up to the final value of each
window (and in discarding mode each element is in exactly one pane); (d) the
vectorized accumulations agree with a plain `Fold`. Also: elements beyond the
allowed lateness are dropped and reported exactly as the model says, and any
trigger tree gives a well-formed pane stream.

Examples stay few (``SETTINGS``) so the engine suite runs in well under two
minutes on two cores.
"""

from __future__ import annotations

import math
import tempfile

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accumulations import Count, Distinct, Fold, Max, Mean, Min, Reduce, Sum, ToList, ToSet
from storage import KVStore
from triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    AtWatermark,
    Default,
    Never,
    OrFinally,
    Repeatedly,
)
from windowing import TestStream, windowed

from .reference import Element, WindowSpec, final_values, with_lateness

SETTINGS = settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
BIG_LATENESS = 10**6

# ---- strategies -------------------------------------------------------------------------------

window_specs = st.one_of(
    st.builds(WindowSpec, st.just("fixed"), st.integers(1, 15)),
    st.integers(1, 5).flatmap(lambda every: st.builds(
        WindowSpec, st.just("sliding"), st.integers(every, 4 * every), st.just(every))),  # uneven slides too
    st.builds(WindowSpec, st.just("sessions"), st.integers(1, 10)),
    st.just(WindowSpec("global")),
)

elements = st.lists(
    st.builds(Element, st.sampled_from(["a", "b", "c"]), st.integers(-20, 60), st.integers(-5, 20)),
    min_size=1, max_size=25)


def build(spec: WindowSpec, source, key="k"):
    pipeline = windowed(source, time="t", key=key)
    if spec.kind == "fixed":
        return pipeline.fixed(spec.size)
    if spec.kind == "sliding":
        return pipeline.sliding(spec.size, every=spec.every)
    if spec.kind == "sessions":
        return pipeline.sessions(spec.size)
    return pipeline.global_window()


def frame(items: list[Element]) -> pd.DataFrame:
    """Columns ``k``, ``t``, ``x`` and a second key column ``k2`` (the time's parity)."""
    return pd.DataFrame({"k": [e.key for e in items], "t": pd.Series([e.t for e in items], dtype=np.int64),
                         "x": pd.Series([e.value for e in items]), "k2": [e.t % 2 for e in items]})


keyings = st.sampled_from([None, "k", ("k", "k2")])
"""Not keyed, keyed by one column, keyed by two."""


def rekey(items: list[Element], keying) -> list[Element]:
    """The elements with the key the pipeline groups by (None when not keyed)."""
    if keying is None:
        return [Element(None, e.t, e.value) for e in items]
    if keying == "k":
        return items
    return [Element((e.key, e.t % 2), e.t, e.value) for e in items]


def stream(batches: list[list[Element]], watermarks: list[int | None]) -> TestStream:
    """Each batch of elements, then (when not None) a watermark move."""
    out = TestStream()
    for batch, mark in zip(batches, watermarks):
        if batch:
            out = out.add_elements(frame(batch))
        if mark is not None:
            out = out.advance_watermark_to(mark)
    return out.advance_watermark_to_infinity()


@st.composite
def split(draw, items: list[Element], max_cuts: int | None = None) -> list[list[Element]]:
    """``items`` cut into consecutive batches at random points (at most ``max_cuts`` of them)."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(items) - 1)), max_size=len(items) if max_cuts is None else max_cuts)))
    bounds = [0, *cuts, len(items)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@st.composite
def safe_steps(draw, items: list[Element]):
    """Batches in ascending time order, each followed by a watermark that stays at or
    below every later element's time: no element is ever late."""
    ordered = sorted(items, key=lambda e: e.t)
    batches = draw(split(ordered))
    marks, previous = [], None
    for i in range(len(batches)):
        later = [e.t for b in batches[i + 1:] for e in b]
        ceiling = min(later) if later else 100
        floor = previous if previous is not None else 0
        if draw(st.booleans()) and ceiling >= floor:
            previous = draw(st.integers(floor, ceiling))
            marks.append(previous)
        else:
            marks.append(None)
    return batches, marks


def rows(panes: pd.DataFrame) -> list[dict]:
    return panes.to_dict("records")


def key_of(row: dict, keying="k") -> tuple:
    key = None if keying is None else row["k"] if keying == "k" else (row["k"], row["k2"])
    return (key, int(row["window_start"]), int(row["window_end"]))


def last_panes(panes: pd.DataFrame) -> dict[tuple, dict]:
    """The last non-retraction pane of every window, in firing order."""
    out: dict[tuple, dict] = {}
    for row in rows(panes):
        if not row["is_retraction"]:
            out[key_of(row)] = row
    return out


def enclosing(window: tuple, finals: dict[tuple, object]) -> tuple | None:
    k, s, e = window
    hits = [w for w in finals if w[0] == k and w[1] <= s and e <= w[2]]
    return hits[0] if len(hits) == 1 else None


# ---- (a) final panes equal a recomputation from scratch -----------------------------------------

@SETTINGS
@given(spec=window_specs, items=elements, keying=keyings)
def test_bounded_frame_fires_one_on_time_pane_per_window_with_the_recomputed_value(spec, items, keying):
    panes = build(spec, frame(items), key=keying).aggregate(Sum("x"))
    expected = final_values(rekey(items, keying), spec)
    got = {key_of(r, keying): r for r in rows(panes)}
    assert len(got) == len(panes), "one pane per window"
    assert {w: r["value"] for w, r in got.items()} == expected
    assert set(panes["timing"]) <= {"ON_TIME"}
    assert set(panes["pane_index"]) <= {0}
    assert not panes["is_retraction"].any()


@st.composite
def streamed_with_late_data(draw):
    items = draw(elements)
    batches = draw(split(items))
    marks = [draw(st.one_of(st.none(), st.integers(0, 80))) for _ in batches]
    running, monotone = -1, []
    for mark in marks:  # watermarks only advance
        if mark is not None and mark > running:
            running = mark
            monotone.append(mark)
        else:
            monotone.append(None)
    return items, batches, monotone


@SETTINGS
@given(spec=window_specs, case=streamed_with_late_data(),
       trigger=st.sampled_from([Default(), AtWatermark().with_late_firings_every(1)]))
def test_last_pane_of_every_window_equals_the_recomputation_despite_late_data(spec, case, trigger):
    # Late elements, but none beyond the allowed lateness: both triggers fire a LATE pane for them.
    items, batches, marks = case
    panes = (build(spec, stream(batches, marks)).allowed_lateness(BIG_LATENESS).trigger(trigger)
             .accumulating().aggregate(Sum("x")))
    expected = final_values(items, spec)
    last = last_panes(panes)
    assert {w: last[w]["value"] for w in expected if w in last} == expected
    for window in last:  # every other window was merged into a final session
        assert window in expected or (spec.kind == "sessions" and enclosing(window, expected) is not None)
    on_time = panes[panes["timing"] == "ON_TIME"]
    assert not on_time.duplicated(["k", "window_start", "window_end"]).any(), "at most one ON_TIME pane per window"


# ---- (b) re-splitting the input never changes the final values ---------------------------------

early_triggers = st.one_of(
    st.just(Default()),
    st.integers(1, 3).map(lambda n: AtWatermark().with_early_firings_every(n)),
    st.integers(1, 8).map(lambda d: AtWatermark().with_early_firings_every(float(d))),
    st.integers(1, 3).map(lambda n: AfterWatermark(early=AfterCount(n))),
    st.integers(1, 8).map(lambda d: AfterWatermark(early=AfterProcessingTime(d))),
)


def contained_totals(panes: pd.DataFrame, finals: dict[tuple, object], signed: bool, keying="k") -> dict[tuple, object]:
    """Per final window, the sum of the panes whose window lies inside it
    (retractions subtracted when ``signed``)."""
    totals = {w: 0 for w in finals}
    for row in rows(panes):
        outer = enclosing(key_of(row, keying), finals)
        assert outer is not None, f"pane {row} lies in no final window"
        totals[outer] += -row["value"] if (signed and row["is_retraction"]) else row["value"]
    return totals


@SETTINGS
@given(spec=window_specs, items=elements, trigger=early_triggers, accumulating=st.booleans(), data=st.data())
def test_splitting_the_input_into_other_steps_never_changes_the_final_values(spec, items, trigger, accumulating, data):
    expected = final_values(items, spec)
    on_time_of_each_split = []
    for _ in range(2):
        batches, marks = data.draw(safe_steps(items))
        actions = []
        for batch, mark in zip(batches, marks):
            actions.append(("add", batch))
            if data.draw(st.booleans()):
                actions.append(("processing", data.draw(st.integers(1, 10))))
            if mark is not None:
                actions.append(("watermark", mark))
        pipeline = build(spec, script_stream(actions)).trigger(trigger)
        pipeline = pipeline.accumulating() if accumulating else pipeline.discarding()
        panes = pipeline.aggregate(Sum("x"))
        on_time = panes[panes["timing"] == "ON_TIME"]
        assert set(panes["timing"]) <= {"EARLY", "ON_TIME"}, "no element is ever late"
        if accumulating:
            assert {key_of(r): r["value"] for r in rows(on_time)} == expected
            assert len(on_time) == len(expected)
        else:  # each element is in exactly one pane of its final window (or of a session merged into it)
            assert contained_totals(panes, expected, signed=False) == expected
        on_time_of_each_split.append(sorted((key_of(r), r["value"]) for r in rows(on_time)))
    if accumulating:
        assert on_time_of_each_split[0] == on_time_of_each_split[1]


def _sum_unless_none(a, b):
    """Associative and commutative, None absorbing: only right if ``Reduce`` hands it every value, None too."""
    return None if a is None or b is None else a + b


elements_with_nones = st.lists(
    st.builds(Element, st.sampled_from(["a", "b"]), st.integers(-20, 60), st.one_of(st.none(), st.integers(-5, 20))),
    min_size=1, max_size=25)


@SETTINGS
@given(spec=window_specs, items=elements_with_nones, trigger=early_triggers, in_store=st.booleans(), data=st.data())
def test_a_reduce_that_gives_none_keeps_it_as_its_value_as_beams_binary_combine_fn(spec, items, trigger, in_store, data):
    # Before: None was also the empty accumulator, so after a None (a value, or fn's answer) the next value
    # started the reduction again: [1, None, 2] reduced to 2, not None.
    batches, marks = data.draw(safe_steps(items))
    actions = []
    for batch, mark in zip(batches, marks):
        actions.append(("add", pd.DataFrame({"k": [e.key for e in batch], "t": np.array([e.t for e in batch], dtype=np.int64),
                                             "x": pd.Series([e.value for e in batch], dtype=object)})))
        if mark is not None:
            actions.append(("watermark", mark))
    with tempfile.TemporaryDirectory() as store:
        pipeline = build(spec, script_stream(actions)).trigger(trigger).accumulating()
        pipeline = pipeline.window_state(KVStore(store)) if in_store else pipeline
        panes = pipeline.aggregate(Reduce("x", _sum_unless_none))
    on_time = {key_of(r): None if pd.isna(r["value"]) else r["value"] for r in rows(panes[panes["timing"] == "ON_TIME"])}
    assert on_time == final_values(items, spec, reduce=lambda values: None if None in values else sum(values))


KEY_TYPES = {"ints": lambda keys: pd.Series(keys, dtype=np.int64),
             "strings": lambda keys: pd.Series([f"k{k}" for k in keys], dtype=object)}
VALUE_TYPES = {"ints": lambda values: pd.Series(values, dtype=np.int64),
               "halves": lambda values: pd.Series([v + 0.5 for v in values], dtype=np.float64),
               "bools": lambda values: pd.Series([v % 2 == 0 for v in values], dtype=bool)}


@SETTINGS
@given(spec=window_specs, data=st.data())
def test_a_test_stream_whose_steps_hold_other_dtypes_gives_the_panes_of_its_elements_as_one_frame(spec, data):
    # Each step's key and value columns have their own dtype (ints, then strings, floats, booleans); the run is
    # planned for all of them as a DataFrame of every step's rows would be, not for the first step's alone.
    steps = []
    for _ in range(data.draw(st.integers(2, 4))):
        n = data.draw(st.integers(1, 6))
        keys = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        values = data.draw(st.lists(st.integers(-5, 20), min_size=n, max_size=n))
        steps.append(pd.DataFrame({
            "k": KEY_TYPES[data.draw(st.sampled_from(sorted(KEY_TYPES)))](keys),
            "t": pd.Series(data.draw(st.lists(st.integers(-20, 60), min_size=n, max_size=n)), dtype=np.int64),
            "x": VALUE_TYPES[data.draw(st.sampled_from(sorted(VALUE_TYPES)))](values)}))
    script = TestStream()
    for elements in steps:
        script = script.add_elements(elements)
    whole = pd.DataFrame({name: pd.concat([step[name] for step in steps], ignore_index=True) for name in ("k", "t", "x")})
    aggregations = {"total": Sum("x"), "low": Min("x"), "high": Max("x"), "n": Count()}
    streamed = build(spec, script).aggregate(**aggregations).drop(columns="step")
    expected = build(spec, whole).aggregate(**aggregations)
    order = {"by": ["k", "window_start", "window_end"], "ignore_index": True,
             "key": lambda column: column.map(repr) if column.name == "k" else column}  # keys of two types: by repr
    streamed, expected = streamed.sort_values(**order), expected.sort_values(**order)
    assert streamed["k"].tolist() == expected["k"].tolist() and streamed["k"].dtype == expected["k"].dtype
    # A sum of booleans and floats is a number of either type, as pandas infers the objects' column on each side.
    pd.testing.assert_frame_equal(streamed, expected, check_dtype=False)


# ---- (c) accumulating and retracting: emitted minus retracted is the final value ----------------

ADVANCES = st.integers(1, 30)


@st.composite
def scripts(draw, items: list[Element], advance=ADVANCES, max_cuts: int | None = None):
    """A TestStream script over ``items``: random batches, watermark moves by ``advance``
    (late data included) and processing-time advances."""
    batches = draw(split(items, max_cuts))
    actions, mark = [], -1
    for batch in batches:
        actions.append(("add", batch))
        for _ in range(draw(st.integers(0, 2))):
            if draw(st.booleans()):
                mark = max(mark, 0) + draw(advance)
                actions.append(("watermark", mark))
            else:
                actions.append(("processing", draw(st.integers(1, 10))))
    return actions


def script_stream(actions) -> TestStream:
    out = TestStream()
    for kind, arg in actions:
        if kind == "add":
            out = out.add_elements(frame(arg) if isinstance(arg, list) else arg)
        elif kind == "watermark":
            out = out.advance_watermark_to(arg)
        else:
            out = out.advance_processing_time(arg)
    return out


firing_triggers = st.one_of(
    st.integers(1, 3).map(lambda n: AtWatermark().with_early_firings_every(n).with_late_firings_every(1)),
    st.integers(1, 8).map(lambda d: AtWatermark().with_early_firings_every(float(d)).with_late_firings_every(float(d))),
    st.integers(1, 3).map(lambda n: AfterWatermark(early=AfterCount(n), late=AfterCount(1))),
    st.integers(1, 8).map(lambda d: AfterWatermark(early=AfterProcessingTime(d), late=AfterCount(2))),
    st.integers(1, 3).map(lambda n: Repeatedly(AfterCount(n))),
    st.integers(1, 8).map(lambda d: Repeatedly(AfterProcessingTime(d))),
    st.just(Default()),
)


@SETTINGS
@given(spec=window_specs, items=elements, trigger=firing_triggers, keying=keyings, only_updated=st.booleans(),
       data=st.data())
def test_emitted_minus_retracted_equals_the_final_value_of_every_window(spec, items, trigger, keying, only_updated, data):
    actions = data.draw(scripts(items))
    pipeline = (build(spec, script_stream(actions), key=keying).allowed_lateness(BIG_LATENESS).trigger(trigger)
                .accumulating_and_retracting())
    panes = (pipeline.fire_only_updated_panes() if only_updated else pipeline).aggregate(Sum("x"))
    expected = final_values(rekey(items, keying), spec)
    assert contained_totals(panes, expected, signed=True, keying=keying) == expected
    if only_updated:  # no pane repeats the value of the window's previous pane
        previous: dict[tuple, object] = {}
        for row in rows(panes):
            if not row["is_retraction"]:
                window = key_of(row, keying)
                assert previous.get(window) != row["value"], f"unchanged pane fired: {row}"
                previous[window] = row["value"]


@SETTINGS
@given(spec=window_specs, items=elements, trigger=firing_triggers, data=st.data())
def test_discarding_panes_hold_every_element_exactly_once(spec, items, trigger, data):
    # None of these triggers finishes, and nothing is beyond the lateness: no element is
    # dropped, and each is in exactly one pane of its final window (or of a session merged into it).
    actions = data.draw(scripts(items))
    panes = (build(spec, script_stream(actions)).allowed_lateness(BIG_LATENESS).trigger(trigger)
             .discarding().aggregate(Sum("x")))
    expected = final_values(items, spec)
    assert contained_totals(panes, expected, signed=False) == expected


# ---- (d) vectorized accumulations agree with the slow path ---------------------------------------

def _fold_extreme(better):
    pick = lambda a, v: a if v != v else (v if a is None or better(v, a) else a)  # noqa: E731
    return dict(initial=None, add=pick, merge=lambda a, b: a if b is None else pick(a, b),
                output=lambda a: math.nan if a is None else a)


def _skip_missing(add):
    return lambda a, v: a if v != v else add(a, v)


SLOW_EQUIVALENTS = {
    "total": (Sum("x"), Fold("x", 0, _skip_missing(lambda a, v: a + v), lambda a, b: a + b)),
    "n": (Count(), Fold("x", 0, lambda a, v: a + 1, lambda a, b: a + b)),
    "n_present": (Count("x"), Fold("x", 0, _skip_missing(lambda a, v: a + 1), lambda a, b: a + b)),
    "low": (Min("x"), Fold("x", **_fold_extreme(lambda v, a: v < a))),
    "high": (Max("x"), Fold("x", **_fold_extreme(lambda v, a: v > a))),
    "mean": (Mean("x"), Fold("x", (0.0, 0), _skip_missing(lambda a, v: (a[0] + v, a[1] + 1)),
                             lambda a, b: (a[0] + b[0], a[1] + b[1]),
                             output=lambda a: a[0] / a[1] if a[1] else math.nan)),
}

elements_with_gaps = st.lists(
    st.builds(Element, st.sampled_from(["a", "b"]), st.integers(0, 60),
              st.one_of(st.integers(-5, 20).map(float), st.just(math.nan))),
    min_size=1, max_size=20)


@settings(SETTINGS, max_examples=20)
@given(spec=window_specs, items=elements_with_gaps, trigger=firing_triggers,
       mode=st.sampled_from(["discarding", "accumulating", "accumulating_and_retracting"]), data=st.data())
def test_vectorized_accumulations_give_the_same_panes_as_a_python_fold(spec, items, trigger, mode, data):
    if data.draw(st.booleans(), label="int column"):
        items = [Element(e.key, e.t, 0 if math.isnan(e.value) else int(e.value)) for e in items]
    actions = data.draw(scripts(items))
    results = []
    for side in (0, 1):
        pipeline = build(spec, script_stream(actions)).allowed_lateness(5).trigger(trigger)
        pipeline = getattr(pipeline, mode)()
        results.append(pipeline.aggregate(**{name: pair[side] for name, pair in SLOW_EQUIVALENTS.items()}))
    fast, slow = results
    pd.testing.assert_frame_equal(fast.astype({c: float for c in SLOW_EQUIVALENTS}),
                                  slow.astype({c: float for c in SLOW_EQUIVALENTS}), check_exact=False)


@settings(SETTINGS, max_examples=20)
@given(spec=window_specs, items=elements_with_gaps, trigger=firing_triggers,
       mode=st.sampled_from(["discarding", "accumulating", "accumulating_and_retracting"]), data=st.data())
def test_collections_hold_the_present_values_that_count_counts(spec, items, trigger, mode, data):
    actions = data.draw(scripts(items))
    panes = getattr(build(spec, script_stream(actions)).allowed_lateness(5).trigger(trigger), mode)().aggregate(
        n=Count("x"), all=ToList("x"), set=ToSet("x"), distinct=Distinct("x"))
    for row in rows(panes):
        assert len(row["all"]) == row["n"] and not any(math.isnan(v) for v in row["all"]), row
        assert row["set"] == set(row["all"]) and row["distinct"] == list(dict.fromkeys(row["all"])), row


TIME_COLUMNS = {
    "timedelta": lambda seconds: pd.to_timedelta(seconds, unit="s"),
    "datetime": lambda seconds: pd.Timestamp("2026-01-01") + pd.to_timedelta(seconds, unit="s"),
    "datetime with tz": lambda seconds: (pd.Timestamp("2026-03-29", tz="Europe/Paris")
                                         + pd.to_timedelta(seconds * 3600, unit="s")),
}


@settings(SETTINGS, max_examples=20)
@given(spec=window_specs, items=elements_with_gaps, trigger=firing_triggers, column=st.sampled_from(sorted(TIME_COLUMNS)),
       mode=st.sampled_from(["discarding", "accumulating", "accumulating_and_retracting"]), data=st.data())
def test_time_columns_aggregate_as_their_numbers_would(spec, items, trigger, column, mode, data):
    # Min and Max (and Sum and Mean of timedeltas) of a time column are those of the same
    # offsets as numbers, converted: values of the column's type, NaT for an empty pane.
    as_time = TIME_COLUMNS[column]
    actions = data.draw(scripts(items))
    timed = [(kind, frame(arg).assign(x=lambda f: as_time(f["x"])) if kind == "add" else arg) for kind, arg in actions]
    names = ["low", "high", "total", "mean"] if column == "timedelta" else ["low", "high"]
    aggregations = {name: SLOW_EQUIVALENTS[name][0] for name in names}
    numbers, times = (getattr(build(spec, script_stream(script)).allowed_lateness(5).trigger(trigger), mode)()
                      .aggregate(**aggregations) for script in (actions, timed))
    assert len(numbers) == len(times)
    for name in names:
        column_dtype = as_time(pd.Series([0.0])).dtype
        assert times[name].dtype == (np.dtype("timedelta64[ns]") if name == "mean" else column_dtype), name
        expected = [pd.NaT if math.isnan(v) else as_time(pd.Series([float(v)]))[0] for v in numbers[name]]
        got = list(times[name])
        assert [pd.isna(v) for v in got] == [pd.isna(v) for v in expected], name
        assert all(abs(g - e) <= pd.Timedelta("1us") for g, e in zip(got, expected) if not pd.isna(e)), name


# ---- (a') late data beyond the allowed lateness is dropped, the rest is counted -------------------

# Window ends, lateness and watermark moves on a grid of 5, so that "end + lateness is at
# the watermark" (dropped) and "one before it" (kept) both happen often.
grid_specs = st.sampled_from([WindowSpec("fixed", 5), WindowSpec("fixed", 10), WindowSpec("sliding", 10, 5),
                              WindowSpec("sliding", 15, 5), WindowSpec("sliding", 10, 4), WindowSpec("global")])


@SETTINGS
@given(spec=grid_specs, items=elements, lateness=st.sampled_from([0, 5, 10, 4]), data=st.data())
def test_elements_beyond_the_allowed_lateness_are_dropped_and_reported_and_the_rest_counted(spec, items, lateness, data):
    actions = data.draw(scripts(items, advance=st.sampled_from([5, 10, 1])))
    steps, mark = [], None
    for kind, arg in actions:
        if kind == "add":
            steps.append((arg, mark))
        elif kind == "watermark":
            mark = arg
    contents, dropped = with_lateness(steps, spec, lateness)
    result = build(spec, script_stream(actions)).allowed_lateness(lateness).accumulating().run(Sum("x"))
    last = last_panes(result.panes)
    assert {w: r["value"] for w, r in last.items()} == {w: sum(v) for w, v in contents.items()}
    late = result.late_data
    got = sorted((r["k"], r["t"], r["x"], int(r["window_start"]), int(r["window_end"])) for r in rows(late)) if len(late) else []
    assert got == sorted((e.key, e.t, e.value, s, end) for e, (s, end) in dropped)
    assert set(late["reason"]) <= {"beyond allowed lateness"}


# ---- any trigger: the shape of the pane stream -------------------------------------------------

leaf_triggers = st.one_of(
    st.integers(1, 3).map(AfterCount),
    st.integers(1, 8).map(AfterProcessingTime),
    st.just(Never()),
    st.just(Default()),
)


def trigger_trees(children):
    """Every composite of Beam's algebra over ``children`` (also used by `test_trigger_values`)."""
    return st.one_of(
        children.map(Repeatedly),
        st.lists(children, min_size=1, max_size=3).map(lambda ts: AfterAny(*ts)),
        st.lists(children, min_size=1, max_size=3).map(lambda ts: AfterAll(*ts)),
        st.lists(children, min_size=1, max_size=3).map(lambda ts: AfterEach(*ts)),
        st.tuples(children, children).map(lambda pair: OrFinally(*pair)),
        st.tuples(st.none() | children, st.none() | children).map(lambda pair: AfterWatermark(early=pair[0], late=pair[1])),
    )


any_triggers = st.recursive(leaf_triggers, trigger_trees, max_leaves=4)


@SETTINGS
@given(spec=window_specs, items=elements, trigger=any_triggers,
       mode=st.sampled_from(["discarding", "accumulating", "accumulating_and_retracting"]), data=st.data())
def test_every_trigger_gives_a_well_formed_pane_stream(spec, items, trigger, mode, data):
    actions = data.draw(scripts(items))
    panes = getattr(build(spec, script_stream(actions)).allowed_lateness(10).trigger(trigger), mode)().aggregate(Sum("x"))
    seen: dict[tuple, list[dict]] = {}
    stream_rows = rows(panes)
    for i, row in enumerate(stream_rows):
        window = key_of(row)
        history = seen.setdefault(window, [])
        if row["is_retraction"]:
            assert history and history[-1]["value"] == row["value"], f"retraction of a value never emitted: {row}"
            continue
        assert row["pane_index"] == len(history), f"pane_index not consecutive: {row}"
        if history and mode == "accumulating_and_retracting":
            previous = stream_rows[i - 1]
            assert previous["is_retraction"] and key_of(previous) == window, f"no retraction before {row}"
        order = {"EARLY": 0, "ON_TIME": 1, "LATE": 2}
        assert not history or order[history[-1]["timing"]] <= order[row["timing"]], f"timing went back: {row}"
        assert not (history and history[-1]["timing"] == "ON_TIME" and row["timing"] == "ON_TIME"), "two ON_TIME panes"
        history.append(row)


# ---- triggers that do not count elements: folding a step's elements changes no pane ------------

uncounted_leaves = st.one_of(st.integers(1, 8).map(AfterProcessingTime), st.just(Never()), st.just(Default()))
seed_options = st.one_of(st.none(), st.integers(2, 3), st.integers(1, 8).map(float))
maybe_uncounted_triggers = st.one_of(
    st.recursive(uncounted_leaves, trigger_trees, max_leaves=4),
    any_triggers,
    st.builds(AtWatermark, seed_options, seed_options),
)


def _folded(items: list[Element], unit: int) -> list[Element]:
    """One element per (key, unit of time) holding the sum of its values: what Spark's lifting ships."""
    sums: dict[tuple, int] = {}
    for e in items:
        start = e.t - e.t % unit
        sums[(e.key, start)] = sums.get((e.key, start), 0) + e.value
    return [Element(key, start, total) for (key, start), total in sums.items()]


crowded_elements = st.lists(st.builds(Element, st.sampled_from(["a", "b"]), st.integers(0, 20), st.integers(-5, 20)),
                           min_size=1, max_size=25)
"""Few keys and units of time: a step often brings several elements of one window."""


@settings(SETTINGS, max_examples=60)
@given(spec=grid_specs.filter(lambda s: s.kind != "global"), items=crowded_elements, trigger=maybe_uncounted_triggers,
       mode=st.sampled_from(["discarding", "accumulating", "accumulating_and_retracting"]), data=st.data())
def test_a_trigger_that_counts_no_elements_fires_the_same_panes_when_each_steps_elements_are_folded(
        spec, items, trigger, mode, data):
    # What makes Spark's combiner lifting exact (windowing/runners/spark/combine.py).
    assume(not trigger.counts_elements())
    unit = math.gcd(spec.size, spec.every) if spec.kind == "sliding" else spec.size
    actions = data.draw(scripts(items, max_cuts=3))
    folded = [(kind, _folded(arg, unit) if kind == "add" else arg) for kind, arg in actions]
    results = []
    for script in (actions, folded):
        pipeline = build(spec, script_stream(script)).allowed_lateness(5).trigger(trigger)
        panes = getattr(pipeline, mode)().aggregate(Sum("x"))
        results.append(sorted(tuple(row.values()) for row in rows(panes)))
    assert results[0] == results[1]


@SETTINGS
@given(bound=st.sampled_from([10, 2**62]), data=st.data())
def test_running_max_per_key_is_the_grouped_cummax(bound, data):
    from windowing.sessions import running_max_per_key

    rows = sorted(data.draw(st.lists(st.tuples(st.integers(0, 3), st.integers(-bound, bound)), max_size=30)),
                  key=lambda row: row[0])  # by key only: values stay unordered within a key
    keys = np.array([k for k, _ in rows], dtype=np.int64)
    values = np.array([v for _, v in rows], dtype=np.int64)
    expected = pd.Series(values, dtype=np.int64).groupby(keys).cummax().to_numpy()
    assert list(running_max_per_key(keys, values)) == list(expected)


@SETTINGS
@given(code_bound=st.sampled_from([3, 2**16 + 1, 2**32 + 1]), time_bound=st.sampled_from([10, 2**62]), data=st.data())
def test_sort_by_key_then_time_is_numpys_stable_lexsort(code_bound, time_bound, data):
    # Codes just past 16 and 32 bits (whose low bits equal small codes') take the second radix pass and
    # the int64 sort; times past 2**62 the order by time, then by key, where (key, time) does not fit in an int64.
    from windowing.sessions import sort_by_key_then_time

    code = st.one_of(st.integers(0, 3), st.integers(code_bound - 3, code_bound))
    rows = data.draw(st.lists(st.tuples(code, st.integers(-time_bound, time_bound)), max_size=40))
    codes = np.array([k for k, _ in rows], dtype=np.int64)
    times = np.array([t for _, t in rows], dtype=np.int64)
    assert list(sort_by_key_then_time(codes, times)) == list(np.lexsort((times, codes)))


@SETTINGS
@given(bound=st.sampled_from([10, 2**62]), data=st.data())
def test_equal_window_groups_number_key_and_start_pairs_as_pandas_groupby_in_order_of_appearance(bound, data):
    from windowing.sessions import equal_window_groups

    rows = data.draw(st.lists(st.tuples(st.integers(0, 3), st.integers(-bound, bound)), max_size=30))
    keys = np.array([k for k, _ in rows], dtype=np.int64)
    starts = np.array([s for _, s in rows], dtype=np.int64)
    expected = pd.DataFrame({"k": keys, "s": starts}).groupby(["k", "s"], sort=False).ngroup().to_numpy()
    assert list(equal_window_groups(keys, starts)) == list(expected)


@settings(SETTINGS, max_examples=40)
@given(dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint64]), data=st.data())
def test_keys_of_every_integer_dtype_group_as_pandas_groupby_does(dtype, data):
    # Before: an int8 key column's codes were computed in int8, so -128 and 127 wrapped around: an error with one
    # key column, and with two the keys of other rows, without a word.
    info = np.iinfo(dtype)
    keys = data.draw(st.lists(st.sampled_from([info.min, info.max, 0, info.min + 1, info.max - 1, 1]), min_size=1, max_size=12))
    frame = pd.DataFrame({"k": np.array(keys, dtype=dtype), "other": [i % 3 for i in range(len(keys))],
                          "t": np.zeros(len(keys), dtype=np.int64), "x": np.arange(len(keys))})
    for keying in (["k"], ["other", "k"]):
        panes = windowed(frame, time="t", key=keying).fixed(10).aggregate(Sum("x"))
        expected = frame.groupby(keying)["x"].sum().to_dict()
        got = {tuple(row[:-1]) if len(keying) > 1 else row[0]: row[-1] for row in panes[[*keying, "value"]].itertuples(index=False)}
        assert got == expected and panes["k"].dtype == dtype


@settings(SETTINGS, max_examples=60)
@given(keys=st.lists(st.sampled_from(["a", "a\x00b", "a\x00c", "\x00", "", "b\x00", None]), min_size=1, max_size=12))
def test_string_keys_with_nul_characters_group_apart_and_missing_keys_as_one(keys):
    # pandas 2's factorize (use_na_sentinel=False) took strings to be equal up to their first NUL: 'a\x00b' and
    # 'a\x00c' were one key, and on pyspark 3.5 too. Against a dict of the keys, None as one key.
    frame = pd.DataFrame({"k": pd.Series(keys, dtype=object), "t": np.zeros(len(keys), dtype=np.int64), "x": np.arange(len(keys))})
    for keying in (["k"], ["k", "k2"]):
        panes = windowed(frame.assign(k2=1), time="t", key=keying).fixed(10).aggregate(Sum("x"))
        expected: dict = {}
        for key, x in zip(keys, range(len(keys))):
            expected[key] = expected.get(key, 0) + x
        got = {None if pd.isna(k) else k: v for k, v in zip(panes["k"], panes["value"])}
        assert got == expected and len(panes) == len(expected)


def test_timestamp_keys_of_a_test_stream_whose_steps_hold_other_key_dtypes_stay_timestamps():
    # Before: the key column is objects across such steps, and the table's objects beside a step's datetime64
    # keys went through NumPy, which made the Timestamps ints (1704067200000000001) from the second step on.
    first = pd.Timestamp("2024-01-01 00:00:00.000000001")
    steps = [pd.DataFrame({"k": pd.Series([first, pd.Timestamp("2024-01-02")]), "t": [1, 2], "x": [1, 2]}),
             pd.DataFrame({"k": ["a"], "t": [3], "x": [4]}), pd.DataFrame({"k": pd.Series([first]), "t": [4], "x": [8]})]
    stream = TestStream()
    for frame in steps:
        stream = stream.add_elements(frame)
    panes = windowed(stream, time="t", key="k").fixed(10).trigger(Repeatedly(AfterCount(1))).accumulating().aggregate(Sum("x"))
    assert {type(k) for k in panes["k"]} == {pd.Timestamp, str}
    assert dict(zip(panes["k"], panes["value"])) == {first: 9, pd.Timestamp("2024-01-02"): 2, "a": 4}


@pytest.mark.parametrize("dtype", ["Int64", "int64"])
@pytest.mark.parametrize("in_store", [False, True])
def test_integer_keys_of_a_test_stream_beside_a_step_of_float_keys_stay_exact_and_apart(dtype, in_store, tmp_path):
    # Before: planned float64 as pandas concatenates them, keys 2**53 and 2**53 + 1 (grouped apart) both came out 2**53.
    stream = TestStream().add_elements(pd.DataFrame({"k": pd.Series([2**53, 2**53 + 1], dtype=dtype), "t": [1, 2], "x": [1, 2]})) \
        .add_elements(pd.DataFrame({"k": [0.5, 2.0**53], "t": [3, 4], "x": [4, 8]}))
    pipeline = windowed(stream, time="t", key="k").fixed(10)
    pipeline = pipeline.window_state(KVStore(str(tmp_path))) if in_store else pipeline
    panes = pipeline.aggregate(Sum("x"))
    assert sorted(zip(panes["k"], panes["value"])) == [(0.5, 4), (2**53, 9), (2**53 + 1, 2)]
    assert type(panes.set_index("value")["k"][2]) is int


def test_late_rows_of_steps_whose_columns_have_other_dtypes_keep_their_values():
    # Before: pandas' concat of the steps' late rows made an int64 column beside a float64 one float64: 2**53 + 1
    # read 2**53, and 1 read 1.0.
    stream = TestStream().add_elements(pd.DataFrame({"t": [30], "x": [1], "big": [0]})).advance_watermark_to(20) \
        .add_elements(pd.DataFrame({"t": [2], "x": [1], "big": [np.nan]})) \
        .add_elements(pd.DataFrame({"t": [3], "x": [1], "big": [2**53 + 1]}))
    late = windowed(stream, time="t").fixed(10).run(Sum("x")).late_data
    assert late["big"].tolist()[1:] == [2**53 + 1] and math.isnan(late["big"].tolist()[0]) and type(late["big"].tolist()[1]) is int
