"""Triggers are frozen values: equal by value, unchanged by resolution, and what a firing forces is
returned, not written to the context (issue 16, item 5)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import triggers
from accumulations import Sum, TopN
from triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    AtWatermark,
    Default,
    Fired,
    Never,
    OrFinally,
    Repeatedly,
    Trigger,
    TriggerContext,
    WindowingConfigError,
)
from windowing import TestStream, windowed

from .test_properties import trigger_trees

SECOND_NS = 10**9

TRIGGER_CLASSES = [AfterAll, AfterAny, AfterCount, AfterEach, AfterProcessingTime, AfterWatermark, AtWatermark, Default,
                   Never, OrFinally, Repeatedly]

durations = st.one_of(
    st.integers(1, 99_999).map(lambda s: f"{s} seconds"),
    st.integers(1, 99_999).map(lambda s: dt.timedelta(seconds=s)),
    st.integers(1, 50).map(float),
)
"""Durations whose repr (``'<n> seconds'``, six significant digits) is exact."""

at_watermark_options = st.none() | st.integers(1, 5) | durations

leaf_triggers = st.one_of(
    st.just(Never()),
    st.just(Default()),
    st.integers(1, 5).map(AfterCount),
    durations.map(AfterProcessingTime),
    st.builds(AtWatermark, at_watermark_options, at_watermark_options),
)


any_triggers = st.recursive(leaf_triggers, trigger_trees, max_leaves=5)


def in_ns(param: str, value: object) -> int:
    """A timestamp column's resolution: durations in nanoseconds, plain numbers as they are."""
    return int(value) if isinstance(value, (int, float)) else int(pd.Timedelta(value).value)


def in_ms(param: str, value: object) -> int:
    return int(value) if isinstance(value, (int, float)) else int(pd.Timedelta(value).value // 10**6)


def durations_of(trigger: Trigger) -> list[object]:
    """Every duration in the tree (an `AtWatermark` count is none)."""
    own: list[object] = []
    if isinstance(trigger, AfterProcessingTime):
        own = [trigger.delay]
    elif isinstance(trigger, AtWatermark):
        own = [o for o in (trigger.early, trigger.late) if o is not None and not isinstance(o, int)]
    return own + [d for child in trigger.children for d in durations_of(child)]


# ---- values ------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", TRIGGER_CLASSES, ids=lambda c: c.__name__)
def test_every_trigger_class_is_a_frozen_dataclass(cls):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize("trigger", [AfterCount(2), AfterAny(AfterCount(1)), AfterEach(Never()),
                                     AfterWatermark(early=AfterCount(2)), AtWatermark().with_early_firings_every(3)], ids=repr)
@pytest.mark.parametrize("name", ["n", "triggers", "early", "something_new"])
def test_no_field_of_a_trigger_can_be_set_or_added(trigger, name):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(trigger, name, 5)


@settings(deadline=None, max_examples=60)
@given(trigger=any_triggers)
def test_a_trigger_is_a_value_its_repr_rebuilds_and_pickle_keeps(trigger):
    rebuilt = eval(repr(trigger), vars(triggers))  # the repr reads as the call that built it
    assert rebuilt == trigger and hash(rebuilt) == hash(trigger) and rebuilt is not trigger
    unpickled = pickle.loads(pickle.dumps(trigger))
    assert unpickled == trigger and repr(unpickled) == repr(trigger)


@pytest.mark.parametrize("one, other", [
    (AfterAny(AfterCount(1), Never()), AfterAll(AfterCount(1), Never())),  # same children, other composite
    (AtWatermark(early=2), AtWatermark(early=2.0)),  # every 2 elements, or every 2.0 of processing time
    (AfterWatermark(early=AfterCount(2)), AfterWatermark(late=AfterCount(2))),
    (OrFinally(AfterCount(1), until=AfterCount(2)), OrFinally(AfterCount(2), until=AfterCount(1))),
], ids=repr)
def test_triggers_that_behave_differently_are_not_equal(one, other):
    assert one != other


def test_a_trigger_subclass_that_is_no_dataclass_is_equal_only_to_itself():
    # Trigger compares no fields of its own: field-wise equality would make every instance equal.
    class EveryOther(Trigger):
        def __init__(self, n: int):
            object.__setattr__(self, "n", n)

        def should_fire(self, ctx, rows):
            return rows

        def on_fire(self, ctx, rows):
            return Fired.nothing(len(ctx))

    one = EveryOther(1)
    assert one == one and one != EveryOther(1) and one != EveryOther(2)


def test_equal_durations_given_differently_make_equal_triggers():
    assert AfterProcessingTime("90 seconds") == AfterProcessingTime(dt.timedelta(minutes=1, seconds=30))
    assert len({AtWatermark().with_late_firings_every("1 minute"), AtWatermark(late=dt.timedelta(seconds=60))}) == 1


# ---- resolution --------------------------------------------------------------------------------

@settings(deadline=None, max_examples=60)
@given(trigger=any_triggers)
def test_resolving_returns_new_triggers_and_leaves_the_users_one_unchanged(trigger):
    before = pickle.dumps(trigger)
    in_nanoseconds, in_milliseconds = trigger.resolve(in_ns), trigger.resolve(in_ms)
    assert pickle.dumps(trigger) == before
    # the state layout and the description a checkpoint stores are the user's
    for resolved in (in_nanoseconds, in_milliseconds):
        assert resolved.columns() == trigger.columns() and repr(resolved) == repr(trigger)
    durations = durations_of(trigger)
    assert (in_nanoseconds != trigger) == bool(durations)
    # plain numbers are in the time column's unit already; timedeltas become a number of units
    assert (in_nanoseconds != in_milliseconds) == any(isinstance(d, dt.timedelta) for d in durations)


def test_a_resolved_trigger_holds_its_durations_in_the_engine_unit():
    user = AfterWatermark(early=AfterProcessingTime("2 seconds"), late=AtWatermark().with_late_firings_every("1 second"))
    resolved = user.resolve(in_ms)
    assert resolved.early == AfterProcessingTime("2 seconds", delay_units=2000)
    assert resolved.late == AtWatermark(late="1 second", late_period=1000)
    assert user.early.delay_units is None and user.late.late_period is None
    assert pickle.loads(pickle.dumps(resolved)) == resolved  # shipped to Spark workers resolved


def test_one_trigger_object_serves_two_pipelines_as_two_fresh_ones_would():
    def run(trigger: Trigger) -> pd.DataFrame:
        rows = pd.DataFrame({"k": ["a", "a"], "ts": pd.to_datetime([1, 2], unit="s"), "x": [1, 2]})
        stream = (TestStream().add_elements(rows).advance_processing_time("3 seconds")
                  .add_elements(rows.iloc[:1]).advance_processing_time("3 seconds").advance_watermark_to_infinity())
        return windowed(stream, time="ts", key="k").fixed("1 minute").trigger(trigger).accumulating().aggregate(Sum("x"))

    shared = AfterWatermark(early=AfterProcessingTime("2 seconds"), late=AfterCount(1))
    before = pickle.dumps(shared)
    first, second = run(shared), run(shared)
    assert pickle.dumps(shared) == before
    expected = run(AfterWatermark(early=AfterProcessingTime("2 seconds"), late=AfterCount(1)))
    pd.testing.assert_frame_equal(first, expected)
    pd.testing.assert_frame_equal(second, expected)
    assert list(expected["timing"]) == ["EARLY", "EARLY", "ON_TIME"]


# ---- firing returns what it forces ------------------------------------------------------------

def _fire_after_one_second(trigger: Trigger) -> tuple[np.ndarray, Fired]:
    """An element in each of three windows at processing time 0, then a firing of the two first
    windows one second later, before the watermark reaches their ends."""
    resolved = trigger.resolve(in_ns)
    state = resolved.fresh_state(3)
    end = np.full(3, 100 * SECOND_NS, dtype=np.int64)
    rows = np.ones(3, dtype=bool)
    resolved.on_elements(TriggerContext(state, end, 0, 0), rows, np.ones(3, dtype=np.int64))
    ctx = TriggerContext(state, end, 0, SECOND_NS)
    firing = np.array([True, True, False])
    assert (resolved.should_fire(ctx, rows) == rows).all()
    return firing, resolved.on_fire(ctx, firing)


PERIODIC = AtWatermark().with_early_firings_every("1 second")


@pytest.mark.parametrize("trigger, finishes", [
    (PERIODIC, False),
    (Repeatedly(PERIODIC), False),
    (AfterAny(AfterCount(100), PERIODIC), False),
    (AfterAll(PERIODIC, AfterProcessingTime("1 second")), False),
    (AfterEach(PERIODIC, AfterCount(1)), False),
    (OrFinally(PERIODIC, until=AfterCount(100)), False),
    (OrFinally(AfterCount(100), until=PERIODIC), True),  # the firing of ``until`` finishes it
    (AfterWatermark(early=PERIODIC), False),
], ids=repr)
def test_a_periodic_firing_forces_its_pane_through_every_composite(trigger, finishes):
    firing, fired = _fire_after_one_second(trigger)
    assert list(fired.forced) == list(firing)
    assert list(fired.finished) == list(firing & finishes)


@pytest.mark.parametrize("trigger, finished", [
    (AfterCount(1), [True, True, False]),
    (AfterProcessingTime("1 second"), [True, True, False]),
    (AfterAny(AfterProcessingTime("1 second"), Never()), [True, True, False]),
    (OrFinally(Repeatedly(AfterCount(1)), until=AfterProcessingTime("1 second")), [True, True, False]),
    (Repeatedly(AfterCount(1)), [False, False, False]),
], ids=repr)
def test_a_firing_that_is_not_periodic_forces_no_pane(trigger, finished):
    _, fired = _fire_after_one_second(trigger)
    assert list(fired.finished) == finished
    assert not fired.forced.any()


def test_the_context_carries_no_side_channel():
    ctx = TriggerContext({}, np.zeros(2, dtype=np.int64), 0, 0)
    assert not hasattr(ctx, "force_emit")


# ---- bad arguments -----------------------------------------------------------------------------

@pytest.mark.parametrize("build, message", [
    (lambda: AfterAny(), r"AfterAny\(\) needs at least one trigger"),
    (lambda: AfterAll(AfterCount(1), "count"), r"AfterAll\(triggers\[1\]\)='count' is not a trigger"),
    (lambda: AfterWatermark(early=3), r"AfterWatermark\(early\)=3 is not a trigger"),
    (lambda: AtWatermark(early=True), r"with_early_firings_every\(duration\)=True is not a duration"),
    (lambda: TopN("x", n=0), r"TopN\(n=0\): n must be a positive integer"),
    (lambda: Sum(3), r"Sum\(column=3\): column must be a non-empty column name"),
], ids=["AfterAny", "AfterAll", "AfterWatermark", "AtWatermark", "TopN", "Sum"])
def test_bad_trigger_and_accumulation_arguments_are_windowing_config_errors(build, message):
    with pytest.raises(WindowingConfigError, match=message):
        build()
