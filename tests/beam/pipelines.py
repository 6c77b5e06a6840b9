"""Random pipelines for the differentials: one key-windowed ``Sum`` over a TestStream of integer times.

A `Pipeline` is plain data (windows, lateness, mode, trigger, actions); `trigger_strategy` draws
triggers from Beam's algebra as Beam Java types it: the sub-triggers of ``AfterAll``, ``AfterAny``,
the ``until`` of ``OrFinally`` and the early and late triggers of ``AfterWatermark`` are
once-triggers (they fire once and finish). A trigger is a tuple tree, ``("AfterCount", 2)``,
``("Repeatedly", child)``..., built into this library's triggers by `engine_trigger` and into Beam's
by `tests.beam.reference`. Nothing here imports Apache Beam, so the Spark adapter's test draws the
same pipelines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from hypothesis import strategies as st

import triggers as t
from accumulations import Sum
from windowing import TestStream, windowed

Trigger = tuple
KEYS = ("a", "b", "c")


@dataclass(frozen=True)
class Pipeline:
    windows: tuple  # ("fixed", size[, offset]) | ("sliding", size, every[, offset]) | ("sessions", gap)
    lateness: int
    accumulating: bool
    trigger: Trigger
    actions: tuple  # ("add", ((key, time, value), ...)) | ("watermark", to) | ("processing_time", by)

    def stream(self) -> TestStream:
        stream = TestStream()
        for kind, arg in self.actions:
            if kind == "add":
                stream = stream.add_elements(elements_frame(arg))
            elif kind == "watermark":
                stream = stream.advance_watermark_to(arg)
            else:
                stream = stream.advance_processing_time(arg)
        return stream

    def windowed(self, source: Any):
        pipeline = windowed(source, time="t", key="k")
        kind, *size = self.windows
        if kind == "fixed":
            pipeline = pipeline.fixed(*size)
        elif kind == "sliding":
            pipeline = pipeline.sliding(size[0], every=size[1], offset=size[2] if len(size) > 2 else 0)
        elif kind == "global":
            pipeline = pipeline.global_window()
        else:
            pipeline = pipeline.sessions(size[0])
        pipeline = pipeline.allowed_lateness(self.lateness).trigger(engine_trigger(self.trigger))
        return pipeline.accumulating() if self.accumulating else pipeline.discarding()

    def run(self):
        """The pandas runner's `WindowedResult` of this pipeline."""
        return self.windowed(self.stream()).run(Sum("v"))

    def __repr__(self) -> str:
        return (f"Pipeline(windows={self.windows}, lateness={self.lateness}, accumulating={self.accumulating}, "
                f"trigger={show(self.trigger)}, actions={self.actions})")


def elements_frame(elements) -> pd.DataFrame:
    keys, times, values = zip(*elements) if elements else ((), (), ())
    return pd.DataFrame({"k": pd.Series(keys, dtype=object), "t": pd.Series(times, dtype="int64"),
                         "v": pd.Series(values, dtype="int64")})


def engine_trigger(tree: Trigger) -> t.Trigger:
    name, *args = tree
    if name == "AfterCount":
        return t.AfterCount(args[0])
    if name == "AfterProcessingTime":
        return t.AfterProcessingTime(args[0])
    if name == "AfterWatermark":
        early, late = args
        return t.AfterWatermark(early=None if early is None else engine_trigger(early),
                                late=None if late is None else engine_trigger(late))
    if name == "OrFinally":
        return t.OrFinally(engine_trigger(args[0]), until=engine_trigger(args[1]))
    if name in ("Default", "Never"):
        return getattr(t, name)()
    return getattr(t, name)(*map(engine_trigger, args))


def show(tree: Trigger) -> str:
    """The tree as this library's trigger expression (for failure reports)."""
    return repr(engine_trigger(tree))


def _once(depth: int, processing_time: bool) -> st.SearchStrategy:
    leaves = [st.tuples(st.just("AfterCount"), st.integers(1, 4)), st.just(("AfterWatermark", None, None))]
    if processing_time:  # odd delays, even processing-time moves: a timer never falls due exactly at a step
        leaves.append(st.tuples(st.just("AfterProcessingTime"), st.integers(0, 4).map(lambda d: 2 * d + 1)))
    leaf = st.one_of(leaves)
    if depth == 0:
        return leaf
    sub = _once(depth - 1, processing_time)
    return st.one_of(leaf, leaf, st.builds(lambda ts: ("AfterAll", *ts), st.lists(sub, min_size=2, max_size=3)),
                     st.builds(lambda ts: ("AfterAny", *ts), st.lists(sub, min_size=2, max_size=3)))


def trigger_strategy(depth: int = 2, processing_time: bool = False) -> st.SearchStrategy:
    """Triggers of Beam's algebra, typed as Beam Java types them (once-triggers where it asks for them)."""
    once = _once(min(depth, 1), processing_time)
    maybe_once = st.one_of(st.none(), once)
    watermark = st.builds(lambda early, late: ("AfterWatermark", early, late), maybe_once, maybe_once)
    leaf = st.one_of(once, watermark, st.just(("Default",)), st.just(("Never",)))
    if depth == 0:
        return leaf
    sub = trigger_strategy(depth - 1, processing_time)
    return st.one_of(
        leaf, watermark, watermark,
        st.builds(lambda x: ("Repeatedly", x), sub),
        st.builds(lambda ts: ("AfterEach", *ts), st.lists(sub, min_size=2, max_size=3)),
        st.builds(lambda x, u: ("OrFinally", x, u), sub, once),
    )


windows_strategy = st.one_of(  # ("fixed", size[, offset]), ("sliding", size, every[, offset]), ("sessions", gap)
    st.integers(2, 15).flatmap(lambda size: st.tuples(st.just("fixed"), st.just(size))
                               | st.tuples(st.just("fixed"), st.just(size), st.integers(1, size - 1))),
    st.integers(1, 5).flatmap(lambda every: st.tuples(st.just("sliding"), st.integers(every, 4 * every),  # uneven too
                                                      st.just(every), st.integers(0, every - 1))),
    st.tuples(st.just("sessions"), st.integers(1, 10)),
    st.just(("global",)),
)


@st.composite
def actions_strategy(draw, keys: int, processing_time: bool) -> tuple:
    """5 to 40 elements over 1 to 3 keys in steps, between watermark moves (and processing-time moves)."""
    names = KEYS[:keys]
    n_elements = draw(st.integers(5, 40))
    actions, watermark, placed = [], -5, 0
    while placed < n_elements:
        kind = draw(st.sampled_from(["add", "add", "watermark"] + (["processing_time"] if processing_time else [])))
        if kind == "add":
            count = min(draw(st.integers(1, 5)), n_elements - placed)
            elements = tuple((draw(st.sampled_from(names)), draw(st.integers(max(0, watermark - 15), watermark + 25)),
                              draw(st.integers(1, 99))) for _ in range(count))
            actions.append(("add", elements))
            placed += count
        elif kind == "watermark":
            watermark += draw(st.integers(0, 15))
            actions.append(("watermark", watermark))
        else:
            actions.append(("processing_time", 2 * draw(st.integers(1, 4))))
    if draw(st.booleans()):
        actions.append(("watermark", watermark + draw(st.integers(0, 30))))
    return tuple(actions)


@st.composite
def pipelines(draw, processing_time: bool = False) -> Pipeline:
    return Pipeline(windows=draw(windows_strategy), lateness=draw(st.sampled_from([0, 0, 3, 5, 10, 20, 40])),
                    accumulating=draw(st.booleans()), trigger=draw(trigger_strategy(2, processing_time)),
                    actions=draw(actions_strategy(draw(st.integers(1, 3)), processing_time)))
