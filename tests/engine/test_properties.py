"""Hypothesis properties of the engine, checked against the brute-force model in `reference`.

(a) the final panes equal a recomputation from scratch; (b) re-splitting the
input into other steps never changes them; (c) in accumulating-and-retracting
mode emitted minus retracted values add up to the final value of each
window; (d) the vectorized accumulations agree with a plain `Fold`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accumulations import Count, Fold, Max, Mean, Min, Sum
from triggers import AfterCount, AfterProcessingTime, AfterWatermark, AtWatermark, Default, Repeatedly
from windowing import TestStream, windowed

from .reference import Element, WindowSpec, final_values

SETTINGS = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
BIG_LATENESS = 10**6

# ---- strategies -------------------------------------------------------------------------------

window_specs = st.one_of(
    st.builds(WindowSpec, st.just("fixed"), st.integers(1, 15)),
    st.integers(1, 5).flatmap(lambda every: st.builds(
        WindowSpec, st.just("sliding"), st.integers(1, 4).map(lambda m: every * m), st.just(every))),
    st.builds(WindowSpec, st.just("sessions"), st.integers(1, 10)),
    st.just(WindowSpec("global")),
)

elements = st.lists(
    st.builds(Element, st.sampled_from(["a", "b", "c"]), st.integers(0, 60), st.integers(-5, 20)),
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
    return pd.DataFrame({"k": [e.key for e in items], "t": pd.Series([e.t for e in items], dtype=np.int64),
                         "x": pd.Series([e.value for e in items], dtype=np.int64)})


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
def split(draw, items: list[Element]) -> list[list[Element]]:
    """``items`` cut into consecutive batches at random points."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(items) - 1)), max_size=len(items))))
    bounds = [0, *cuts, len(items)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@st.composite
def safe_steps(draw, items: list[Element]):
    """Batches in ascending time order, each followed by a watermark that stays at or
    below every later element's time: no element is ever late."""
    ordered = sorted(items, key=lambda e: e.t)
    batches = draw(split(ordered))
    marks, previous = [], None
    for i, batch in enumerate(batches):
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


def key_of(row: dict) -> tuple:
    return (row["k"], int(row["window_start"]), int(row["window_end"]))


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
@given(spec=window_specs, items=elements)
def test_bounded_frame_fires_one_on_time_pane_per_window_with_the_recomputed_value(spec, items):
    panes = build(spec, frame(items)).aggregate(Sum("x"))
    expected = final_values(items, spec)
    got = {key_of(r): r for r in rows(panes)}
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
@given(spec=window_specs, case=streamed_with_late_data())
def test_last_pane_of_every_window_equals_the_recomputation_despite_late_data(spec, case):
    # Late elements, but none beyond the allowed lateness: Default() fires a LATE pane for them.
    items, batches, marks = case
    panes = build(spec, stream(batches, marks)).allowed_lateness(BIG_LATENESS).accumulating().aggregate(Sum("x"))
    expected = final_values(items, spec)
    last = last_panes(panes)
    assert {w: last[w]["value"] for w in expected if w in last} == expected
    for window in last:  # every other window was merged into a final session
        assert window in expected or (spec.kind == "sessions" and enclosing(window, expected) is not None)
    on_time = panes[panes["timing"] == "ON_TIME"]
    assert not on_time.duplicated(["k", "window_start", "window_end"]).any(), "at most one ON_TIME pane per window"
