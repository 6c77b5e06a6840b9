"""The triggers without sub-triggers: the seed operator's option and Beam's leaves.

Semantics follow Beam (Python SDK ``trigger.py``): ``AfterCount`` and
``AfterProcessingTime`` fire once and finish. ``AtWatermark`` is the seed
operator's option (an ON_TIME pane, periodic early and late firings). A finished
root trigger closes the window: its later elements are dropped (and reported as
late data). The composites are in `triggers.algebra`.

Every trigger is a frozen dataclass, validated when built. Durations are
resolved into the time column's unit by the pipeline (`resolve`, which returns
a new trigger) before the engine runs a trigger. The ``repr`` of each reads as
the call that built it; Spark checkpoints store it to refuse a restart with
another trigger, so it must not change.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import numpy as np

from .base import NO_TIME, Column, Fired, ToInternal, Trigger, TriggerContext, set_field
from .durations import Duration, duration_text, parse_duration
from .errors import WindowingConfigError


def _count(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise WindowingConfigError(f"{name}={value!r} must be a positive integer count of elements")
    return int(value)


def _plus(time: int, delay: int) -> int:
    return NO_TIME if time >= NO_TIME - delay else time + delay


@dataclass(frozen=True)
class Never(Trigger):
    """Never fires; the window's contents come out only in its final pane at garbage collection."""

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return np.zeros(len(ctx), dtype=bool)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        return Fired.nothing(len(ctx))

    def counts_elements(self) -> bool:
        return False

    def uses_processing_time(self) -> bool:
        return False


@dataclass(frozen=True)
class Default(Trigger):
    """Beam's default trigger: fires when the watermark passes the end of the window and,
    after that, at every step in which late elements arrive. Never finishes."""

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return rows & ~ctx.past_end()

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return rows & ctx.past_end()

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        return Fired.nothing(len(ctx))

    def counts_elements(self) -> bool:
        return False  # fires in a step with late elements, however many

    def uses_processing_time(self) -> bool:
        return False


@dataclass(frozen=True)
class AfterCount(Trigger):
    """Fires once at least ``n`` elements arrived in the pane; then finishes."""

    n: int

    def __post_init__(self) -> None:
        set_field(self, "n", _count("AfterCount(n)", self.n))

    def own_columns(self) -> dict[str, Column]:
        return {"count": Column(np.int64, 0, "sum")}

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        ctx.put("count", rows, ctx["count"] + counts)
        return np.zeros(len(ctx), dtype=bool)

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return rows & (ctx["count"] >= self.n)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        return Fired.finishing(rows.copy())

    def uses_processing_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"AfterCount({self.n})"


_FIRED = np.iinfo(np.int64).min
"""``fire_at`` of an AfterProcessingTime that fired: due (before every processing time) until reset."""


def _live_timer(ctx: TriggerContext) -> np.ndarray:
    """An `AfterProcessingTime`'s timer in a window table written before its ``timer`` column: that
    release kept only the timer of a trigger that had not fired nor been reset since."""
    return np.where(ctx["fire_at"] == _FIRED, NO_TIME, ctx["fire_at"])


def _no_later_timers(ctx: TriggerContext) -> np.ndarray:
    """An `AfterProcessingTime`'s later timers in a window table written before its ``later`` column: that
    release kept one timer per trigger."""
    return np.full(len(ctx), None, dtype=object)


def _pending(timer: int, later: tuple[int, ...] | None, more: Iterable[int]) -> tuple[int, tuple[int, ...] | None]:
    """A trigger's pending timers, ``timer`` the earliest (NO_TIME: none) and ``later`` the others, with
    ``more``; one per time, as Beam Java keys a window's timers by their time."""
    times = sorted({*(() if timer == NO_TIME else (timer,)), *(later or ()), *more})
    return (times[0], tuple(times[1:]) or None) if times else (NO_TIME, None)


@dataclass(frozen=True)
class AfterProcessingTime(Trigger):
    """Fires once ``delay`` of processing time after the first element of the pane; then finishes.

    Merged windows keep the earliest pending firing time (Beam). Its timer outlives a reset until it
    is due, as in Beam Java, whose ``TriggerTimers`` cannot delete it: when due it wakes the window,
    whichever sub-trigger is in charge by then (docs/engine.md, "Steps"). A trigger set again before
    its earlier timer is due has both pending, as Java, which keys a window's timers by their time:
    ``timer`` is the earliest (the one a runner waits for), ``later`` the others (a tuple, mostly
    None). A merged window has every pending timer of the windows merged.
    """

    delay: Duration
    delay_units: int | None = field(default=None, kw_only=True, repr=False)
    """``delay`` in the engine's time unit, set by `resolve`: the engine runs resolved triggers only."""

    def __post_init__(self) -> None:
        set_field(self, "delay", parse_duration("AfterProcessingTime(delay)", self.delay))

    def own_columns(self) -> dict[str, Column]:
        return {"fire_at": Column(np.int64, NO_TIME, "min"),
                "timer": Column(np.int64, NO_TIME, "min", earlier=_live_timer, since=1),
                "later": Column(object, None, "union", earlier=_no_later_timers, since=2)}

    def resolve(self, to_internal: ToInternal) -> AfterProcessingTime:
        return replace(self, delay_units=to_internal("AfterProcessingTime(delay)", self.delay))

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        start = rows & (ctx["fire_at"] == NO_TIME)
        assert self.delay_units is not None, "AfterProcessingTime runs resolved (Trigger.resolve)"
        fire_at = _plus(ctx.processing_time, self.delay_units)
        ctx.put("fire_at", start, fire_at)
        ctx.put("timer", start & (ctx["timer"] == NO_TIME), fire_at)
        self._add_pending(ctx, np.flatnonzero(start & (ctx["timer"] != fire_at)), itertools.repeat([fire_at]))
        return np.zeros(len(ctx), dtype=bool)

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return rows & (ctx["fire_at"] <= ctx.processing_time)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        ctx.put("fire_at", rows, _FIRED)
        return Fired.finishing(rows.copy())

    def reset(self, ctx: TriggerContext, rows: np.ndarray) -> None:
        ctx.put("fire_at", rows, NO_TIME)  # the timer stays until due

    def processing_timers(self, ctx: TriggerContext) -> list[np.ndarray]:
        return [ctx["timer"]]

    def consume_due_timers(self, ctx: TriggerContext, rows: np.ndarray) -> None:
        due = rows & (ctx["timer"] <= ctx.processing_time)
        with_later = np.flatnonzero(due & ctx["later"].astype(bool))  # a tuple of times, or None
        ctx.put("timer", due, NO_TIME)
        if len(with_later):  # the earliest later timer not due yet is the one to wait for
            later = ctx["later"]
            ctx.put("later", due, None)
            self._add_pending(ctx, with_later, [[t for t in later[row] if t > ctx.processing_time] for row in with_later])

    def merge(self, src: TriggerContext, groups: np.ndarray, dst: TriggerContext) -> None:
        super().merge(src, groups, dst)  # the earliest of each column, and the later timers' union
        others = np.flatnonzero((src["timer"] != NO_TIME) & (src["timer"] != dst["timer"][groups]))
        self._add_pending(dst, groups[others], [[t] for t in src["timer"][others].tolist()])

    @staticmethod
    def _add_pending(ctx: TriggerContext, rows: np.ndarray, times: Iterable[list[int]]) -> None:
        """Add ``times[i]`` to the pending timers of window ``rows[i]`` (`_pending`)."""
        if not len(rows):
            return
        timer, later = ctx["timer"].copy(), ctx["later"].copy()
        for row, more in zip(rows.tolist(), times):
            timer[row], later[row] = _pending(int(timer[row]), later[row], more)
        ctx["timer"], ctx["later"] = timer, later

    def counts_elements(self) -> bool:
        return False  # starts its delay at the pane's first element, however many arrive

    def __repr__(self) -> str:
        return f"AfterProcessingTime({duration_text(self.delay)})"


Option = int | Duration | None
"""An option of `AtWatermark`: fire every so many elements (an int), every so much processing time
(a duration), or not at all."""


def _given(name: str, every: Any) -> Any:
    """A firing period the caller named: None there would silently mean no firings at all."""
    if every is None:
        raise WindowingConfigError(
            f"{name}(every=None): give a count of elements (an int) or a duration of processing time "
            "(\"10 seconds\", a timedelta); leave the call out for no such firings")
    return every


def _once(trigger: Any, name: str, given: Option, every: Any) -> None:
    """Refuse a second firing option of one kind: the last one won without a word, where the seed's operator
    fires by a count and by a duration side by side."""
    if given is not None:
        raise WindowingConfigError(
            f"{trigger!r}.{name}({every!r}): {name}() was given already; give it once. For firings by a count and by "
            f"processing time together, use AfterWatermark({name.split('_')[1]}=Repeatedly(AfterAny(AfterCount(n), "
            "AfterProcessingTime(duration))))")


@dataclass(frozen=True)
class AtWatermark(Trigger):
    """The seed operator's trigger option: an ON_TIME pane when the watermark passes the
    end of the window, plus optional early and late firings.

    ``with_early_firings_every(x)`` / ``with_late_firings_every(x)``: an int
    fires every ``x`` elements; a duration fires every ``x`` of processing
    time, counted from the window's first element (early) or from the ON_TIME
    pane (late), whether or not elements arrived since the last firing
    (unless the pipeline sets ``fire_only_updated_panes``). Without late
    firings the trigger finishes at the ON_TIME pane and later elements are
    dropped.
    """

    early: Option = None
    late: Option = None
    early_period: int | None = field(default=None, kw_only=True, repr=False)
    """A duration ``early`` in the engine's time unit, set by `resolve`."""
    late_period: int | None = field(default=None, kw_only=True, repr=False)
    """A duration ``late`` in the engine's time unit, set by `resolve`."""
    counts: tuple[bool, bool] = field(init=False, repr=False)
    """Whether ``early`` and ``late`` are counts: part of the value, since ``2`` (every two
    elements) and ``2.0`` (every 2.0 of processing time on a numeric time column) are equal numbers."""

    def __post_init__(self) -> None:
        set_field(self, "early", self._option("with_early_firings_every", self.early))
        set_field(self, "late", self._option("with_late_firings_every", self.late))
        set_field(self, "counts", (isinstance(self.early, int), isinstance(self.late, int)))

    @staticmethod
    def _option(name: str, value: Any) -> int | dt.timedelta | float | None:
        if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
            return None if value is None else _count(f"{name}(count)", value)
        return parse_duration(f"{name}(duration)", value)

    def with_early_firings_every(self, every: int | Duration) -> AtWatermark:
        _once(self, "with_early_firings_every", self.early, every)
        return AtWatermark(early=_given("with_early_firings_every", every), late=self.late)

    def with_late_firings_every(self, every: int | Duration) -> AtWatermark:
        _once(self, "with_late_firings_every", self.late, every)
        return AtWatermark(early=self.early, late=_given("with_late_firings_every", every))

    def resolve(self, to_internal: ToInternal) -> AtWatermark:
        def period(name: str, option: Option) -> int | None:
            return None if option is None or isinstance(option, int) else to_internal(name, option)
        return replace(self, early_period=period("with_early_firings_every(duration)", self.early),
                       late_period=period("with_late_firings_every(duration)", self.late))

    def own_columns(self) -> dict[str, Column]:
        return {"late": Column(bool, False, "all"),
                "early_count": Column(np.int64, 0, "sum"), "late_count": Column(np.int64, 0, "sum"),
                "early_next": Column(np.int64, NO_TIME, "min"), "late_next": Column(np.int64, NO_TIME, "min")}

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        is_late = ctx["late"]
        early_rows, late_rows = rows & ~is_late, rows & is_late
        ctx.put("early_count", early_rows, ctx["early_count"] + counts)
        ctx.put("late_count", late_rows, ctx["late_count"] + counts)
        if self.early_period is not None:
            first = early_rows & (ctx["early_next"] == NO_TIME)
            ctx.put("early_next", first, _plus(ctx.processing_time, self.early_period))
        return rows & ~ctx.past_end()

    def _due(self, ctx: TriggerContext, option: Option, count_col: str, next_col: str) -> np.ndarray:
        if option is None:
            return np.zeros(len(ctx), dtype=bool)
        if isinstance(option, int):
            return ctx[count_col] >= option
        return ctx[next_col] <= ctx.processing_time

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        is_late, past_end = ctx["late"], ctx.past_end()
        early = ~is_late & ~past_end & self._due(ctx, self.early, "early_count", "early_next")
        late = is_late & self._due(ctx, self.late, "late_count", "late_next")
        return rows & ((~is_late & past_end) | early | late)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        is_late, past_end = ctx["late"], ctx.past_end()
        on_time = rows & ~is_late & past_end
        early = rows & ~is_late & ~past_end
        late = rows & is_late
        periodic = np.zeros(len(ctx), dtype=bool)
        ctx.put("early_count", early, 0)
        ctx.put("late_count", late | on_time, 0)
        if self.early_period is not None:
            ctx.put("early_next", early, _plus(ctx.processing_time, self.early_period))
            periodic |= early
        if self.late_period is not None:
            ctx.put("late_next", late | on_time, _plus(ctx.processing_time, self.late_period))
            periodic |= late
        ctx.put("late", on_time, True)
        return Fired(on_time if self.late is None else np.zeros(len(ctx), dtype=bool), periodic)

    def merge(self, src: TriggerContext, groups: np.ndarray, dst: TriggerContext) -> None:
        super().merge(src, groups, dst)
        dst["late"] = dst["late"] & dst.past_end()

    def processing_timers(self, ctx: TriggerContext) -> list[np.ndarray]:
        """The next periodic firing of the phase the window is in: the seed operator's schedule, not a timer
        Beam sets, so it stays pending past its time until the window fires (nothing consumes it)."""
        return [np.where(ctx["late"], ctx["late_next"], ctx["early_next"])]

    def counts_elements(self) -> bool:
        return any(self.counts)

    def uses_processing_time(self) -> bool:
        return any(option is not None and not count for option, count in zip((self.early, self.late), self.counts))

    def __repr__(self) -> str:
        out = "AtWatermark()"
        if self.early is not None:
            out += f".with_early_firings_every({duration_text(self.early)})"
        if self.late is not None:
            out += f".with_late_firings_every({duration_text(self.late)})"
        return out
