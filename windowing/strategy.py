"""The strategy: what a pipeline computes, validated once and frozen.

The builder (`windowing.api`) collects calls and builds a `Strategy` at ``aggregate()`` / ``run()``;
the runners take ``(strategy, source)`` and never see the builder. Durations are parsed once, when
the builder's step is called (`Duration`), and converted to the time axis's unit once the runner
knows the axis (`Duration.in_units_of`). Cross-field checks live in `Strategy.__post_init__`.

Room for what comes next: a second stream is a flag here (``two_streams``; its data is a source,
given to the runner beside the first); upstream windows (``in_upstream_windows()``) would be one
more `Windowing`; a window-state backend is the field ``window_state``.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

from accumulations import Accumulation, MergeAccumulation
from triggers import AccumulationMode, Default, Trigger, parse_duration

from .errors import WindowingConfigError
from .timeaxis import TimeAxis
from .windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows, WindowFn

RESERVED = ("window_start", "window_end", "timing", "pane_index", "is_retraction", "step")
"""Output columns no key or aggregation may be named."""


def reserved_column(name: str) -> str:
    """``name`` as a refusal names the output column: ``step`` only a TestStream's panes have."""
    if name == "step":
        return "the output column 'step' of a TestStream's panes (reserved for every source, so a pipeline runs on each)"
    return f"the output column {name!r}"


@dataclass(frozen=True)
class Duration:
    """A duration as the call gave it (``given``, for messages) and parsed once (``value``): a
    ``timedelta``, or a plain number in the unit of a numeric time column. ``param`` names the
    parameter, e.g. ``"fixed(size)"``."""

    param: str
    given: Any
    value: dt.timedelta | int | float

    @classmethod
    def parse(cls, param: str, given: Any, *, allow_zero: bool = False) -> "Duration":
        return cls(param, given, parse_duration(param, given, allow_zero=allow_zero))

    def in_units_of(self, axis: TimeAxis) -> int:
        """The duration in the axis's unit (nanoseconds on a timestamp axis)."""
        return axis.units_of(self.param, self.given, self.value)


def _zero(param: str) -> Duration:
    return Duration(param, 0, 0)


class Windowing(ABC):
    """Which windows an element belongs to, as the user chose them; `window_fn` gives the engine's
    window function once the time axis is known."""

    @property
    @abstractmethod
    def call(self) -> str:
        """The builder call that chose these windows, for ``repr``."""

    @abstractmethod
    def window_fn(self, axis: TimeAxis) -> WindowFn:
        """The engine's window function, durations in the axis's unit."""


@dataclass(frozen=True)
class GlobalWindowing(Windowing):
    """One window for all time."""

    @property
    def call(self) -> str:
        return ".global_window()"

    def window_fn(self, axis: TimeAxis) -> WindowFn:
        return GlobalWindows()


@dataclass(frozen=True)
class FixedWindowing(Windowing):
    """Tumbling windows ``[offset + k*size, offset + (k+1)*size)``."""

    size: Duration
    offset: Duration = _zero("fixed(offset)")

    @property
    def call(self) -> str:
        return f".fixed({self.size.given!r}{_offset(self.offset)})"

    def window_fn(self, axis: TimeAxis) -> WindowFn:
        return FixedWindows(self.size.in_units_of(axis), self.offset.in_units_of(axis))


MAX_WINDOWS_PER_ELEMENT = 1_000_000
"""The most sliding windows an element may fall in: past it the engine's copy of each element per window
ran out of memory (``sliding("1 day", every="1 ns")`` asked for 629 TiB)."""


@dataclass(frozen=True)
class SlidingWindowing(Windowing):
    """Windows of ``size`` starting every ``every``, which is at most ``size``."""

    size: Duration
    every: Duration
    offset: Duration = _zero("sliding(offset)")

    @property
    def call(self) -> str:
        return f".sliding({self.size.given!r}, every={self.every.given!r}{_offset(self.offset)})"

    def window_fn(self, axis: TimeAxis) -> WindowFn:
        size, every = self.size.in_units_of(axis), self.every.in_units_of(axis)
        if every > size:
            raise WindowingConfigError(
                f"sliding window every={self.every.given!r} is longer than size={self.size.given!r}: the times "
                "between one window's end and the next one's start would be in no window, and their elements "
                "lost; make every at most size (as Spark's window() requires), or use fixed(size)")
        per_element = -(-size // every)
        if per_element > MAX_WINDOWS_PER_ELEMENT:  # each element is copied into each of its windows: memory ran out
            raise WindowingConfigError(
                f"sliding(size={self.size.given!r}, every={self.every.given!r}) puts each element in {per_element:,} "
                f"windows, more than {MAX_WINDOWS_PER_ELEMENT:,}; slide by a longer step")
        return SlidingWindows(size, every, self.offset.in_units_of(axis), axis, self.call.removeprefix("."))


@dataclass(frozen=True)
class SessionWindowing(Windowing):
    """Session windows per key: elements less than ``gap`` apart share a session."""

    gap: Duration

    @property
    def call(self) -> str:
        return f".sessions({self.gap.given!r})"

    def window_fn(self, axis: TimeAxis) -> WindowFn:
        return Sessions(self.gap.in_units_of(axis))


def _offset(offset: Duration) -> str:
    """The ``offset`` argument as the call gave it, for ``repr``; nothing for the default."""
    return "" if isinstance(offset.given, (int, float)) and offset.given == 0 else f", offset={offset.given!r}"


NamedAccumulation = tuple[str, Accumulation[Any, Any, Any]]
"""An output column's name and the accumulation that computes it."""


@dataclass(frozen=True)
class Strategy:
    """Everything a runner needs to know of a pipeline but its source(s), validated."""

    time: str | Callable[[Any], Any]
    """The event-time column's name, or a function of the DataFrame returning the times (pandas only)."""
    keys: tuple[str, ...] | None
    """The key columns; None: not keyed (one group)."""
    aggregations: tuple[NamedAccumulation, ...]
    time_unit: str | None = None
    """The unit of epoch instants in a numeric time column (`windowed`'s ``time_unit``)."""
    windowing: Windowing = GlobalWindowing()
    trigger: Trigger = Default()
    mode: AccumulationMode = AccumulationMode.DISCARDING
    allowed_lateness: Duration = _zero("allowed_lateness(lateness)")
    watermark_delay: Duration | None = None
    """``.watermark(delay)``: the watermark is the largest event time seen minus the delay."""
    fire_only_updated: bool = False
    two_streams: bool = False
    """``with_second_stream()``: the aggregations see each element as ``(side, value)``."""
    window_state: Any = None
    """``.window_state(store)``: the `storage.KVStore` holding the windows' payloads; None: they stay in
    the window table (`windowing.window_state`)."""

    def __post_init__(self) -> None:
        for name, acc in self.aggregations:
            if not isinstance(acc, Accumulation):
                raise WindowingConfigError(f"aggregate({name}={acc!r}) is not an Accumulation; give e.g. Sum('amount')")
            if not name:  # Spark's writers, and Parquet, refuse a column without a name: the panes could not be written
                raise WindowingConfigError(f"aggregate(**{{'': {acc!r}}}): an output column needs a name, e.g. "
                                           "aggregate(total=Sum('x'))")
            if name in RESERVED:
                raise WindowingConfigError(f"aggregate({name}=...) clashes with {reserved_column(name)}; choose another name")
            if name in (self.keys or ()):
                raise WindowingConfigError(
                    f"windowed(key={name!r}) clashes with the output column {name!r} of aggregate("
                    f"{'' if name == 'value' else name + '='}...); the key would be overwritten: "
                    "rename the key column, or give the accumulation another name, e.g. aggregate(total=Sum('x'))")
        merging = [name for name, acc in self.aggregations if isinstance(acc, MergeAccumulation)]
        if self.two_streams and len(merging) != len(self.aggregations):
            plain = next(name for name, acc in self.aggregations if not isinstance(acc, MergeAccumulation))
            raise WindowingConfigError(
                f"aggregate({plain}=...) is a one-stream accumulation, but with_second_stream() needs two-stream "
                "accumulations such as InnerJoin or Cogroup")
        if not self.two_streams and merging:
            raise WindowingConfigError(
                f"aggregate({merging[0]}=...) merges two streams; add the second with .with_second_stream(right)")
        if self.fire_only_updated and self.mode is AccumulationMode.DISCARDING:
            raise WindowingConfigError(
                "fire_only_updated_panes() with discarding(): every discarding pane starts empty, so 'unchanged' "
                "has no meaning; use accumulating() or accumulating_and_retracting()")

    @property
    def value_columns(self) -> tuple[str | None, ...]:
        """The input column of each aggregation (None: it reads none, e.g. ``Count()``)."""
        return tuple(acc.column for _, acc in self.aggregations)

    @property
    def n_keys(self) -> int:
        """Key columns of the engine's tables: one constant column when not keyed."""
        return len(self.keys) if self.keys else 1
