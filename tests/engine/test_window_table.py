"""The window table keeps each window's last outputs (``o<i>``) only where a pipeline reads them
(`EngineSpec.keeps_last_outputs`): a retraction repeats them, ``fire_only_updated_panes`` compares with
them. Elsewhere they cost a copy per pane, and a Spark bucket's state value converts them per window
in every micro-batch. Tables written when every pipeline kept them go on as the same windows."""

from __future__ import annotations

import pandas as pd
import pytest

from accumulations import Sum
from triggers import AfterCount, Repeatedly
from windowing import windowed
from windowing.engine import step
from windowing.plan import make_plan, to_elements
from windowing.spec import EngineSpec
from windowing.timeaxis import TimeAxis
from windowing.window_table import empty_state

STEPS = [pd.DataFrame({"k": ["a", "b", "a"], "ts": [1, 2, 3], "x": [1, 2, 3]}),
         pd.DataFrame({"k": ["a", "a"], "ts": [4, 12], "x": [4, 5]}),
         pd.DataFrame({"k": ["b"], "ts": [5], "x": [6]})]
WATERMARKS = [0, 10, 30]


def _plan(mode: str, fire_only_updated: bool = False):
    pipeline = windowed(STEPS[0], time="ts", key="k").fixed(10).trigger(Repeatedly(AfterCount(1))).allowed_lateness(100)
    pipeline = getattr(pipeline, mode)()
    if fire_only_updated:
        pipeline = pipeline.fire_only_updated_panes()
    return make_plan(pipeline.strategy(total=Sum("x")), TimeAxis.of("ts", STEPS[0]["ts"]), STEPS[0].dtypes.to_dict())


def _run(plan, steps: range, state: pd.DataFrame) -> tuple[list[pd.DataFrame], pd.DataFrame]:
    panes = []
    for i in steps:
        elements = to_elements(plan, STEPS[i], STEPS[i]["ts"].to_numpy())
        result = step(plan.spec, state, elements, WATERMARKS[i], 0)
        panes.append(result.panes)
        state = result.state
    return panes, state


@pytest.mark.parametrize("mode, fire_only_updated, kept", [
    ("discarding", False, False), ("accumulating", False, False),
    ("accumulating_and_retracting", False, True), ("accumulating", True, True),
])
def test_the_last_outputs_are_kept_only_where_a_retraction_or_fire_only_updated_reads_them(mode, fire_only_updated, kept):
    plan = _plan(mode, fire_only_updated)
    _, state = _run(plan, range(2), empty_state(plan.spec, [STEPS[0]["k"].dtype]))
    assert ("o0" in state.columns) == kept == plan.spec.keeps_last_outputs
    assert len(state) == 3


@pytest.mark.parametrize("mode", ["discarding", "accumulating"])
def test_a_table_with_last_outputs_no_one_reads_steps_on_as_the_same_windows(mode, monkeypatch):
    plan = _plan(mode)
    fresh = empty_state(plan.spec, [STEPS[0]["k"].dtype])
    uninterrupted, _ = _run(plan, range(3), fresh)
    with monkeypatch.context() as earlier_release:
        earlier_release.setattr(EngineSpec, "keeps_last_outputs", property(lambda spec: True))
        before, written = _run(plan, range(1), empty_state(plan.spec, [STEPS[0]["k"].dtype]))
    assert "o0" in written.columns
    after, state = _run(plan, range(1, 3), written)
    assert "o0" not in state.columns
    assert [len(panes) for panes in uninterrupted] == [2, 2, 1]
    for got, want in zip(before + after, uninterrupted):
        pd.testing.assert_frame_equal(got, want)
