"""The triggers: the seed operator's options and Beam's trigger algebra.

Semantics follow Beam (Python SDK ``trigger.py``; merging as in the Java
``AfterWatermarkStateMachine``): ``AfterCount`` and ``AfterProcessingTime``
fire once and finish; ``Repeatedly`` resets its child whenever the child
finishes; ``AfterWatermark`` runs its early trigger repeatedly before the
watermark passes the end of the window, fires once when it does (the ON_TIME
pane) and then runs its late trigger repeatedly, finishing at the ON_TIME pane
when it has no late trigger. A finished root trigger closes the window: its
later elements are dropped (and reported as late data).

Durations are resolved into the time column's unit by the pipeline
(`resolve`) before the engine runs a trigger.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from .base import NO_TIME, Column, ToInternal, Trigger, TriggerContext
from .durations import parse_duration


def _count(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer count of elements")
    return int(value)


def _as_trigger(name: str, value: Any) -> Trigger:
    if not isinstance(value, Trigger):
        raise ValueError(f"{name}={value!r} is not a trigger; give e.g. AfterCount(1)")
    return value


def _fmt_duration(value: Any) -> str:
    if isinstance(value, dt.timedelta):
        return repr(f"{value.total_seconds():g} seconds")
    return repr(value)


def _plus(time: int, delay: int) -> int:
    return NO_TIME if time >= NO_TIME - delay else time + delay


class Never(Trigger):
    """Never fires; the window's contents come out only in its final pane at garbage collection."""

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return np.zeros(len(ctx), dtype=bool)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return np.zeros(len(ctx), dtype=bool)

    def counts_elements(self) -> bool:
        return False

    def uses_processing_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Never()"


class Default(Trigger):
    """Beam's default trigger: fires when the watermark passes the end of the window and,
    after that, at every step in which late elements arrive. Never finishes."""

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return rows & ~ctx.past_end()

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return rows & ctx.past_end()

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return np.zeros(len(ctx), dtype=bool)

    def counts_elements(self) -> bool:
        return False  # fires in a step with late elements, however many

    def uses_processing_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Default()"


class AfterCount(Trigger):
    """Fires once at least ``n`` elements arrived in the pane; then finishes."""

    def __init__(self, n: int):
        self.n = _count("AfterCount(n)", n)

    def own_columns(self) -> dict[str, Column]:
        return {"count": Column(np.int64, 0, "sum")}

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        ctx.put("count", rows, ctx["count"] + counts)
        return np.zeros(len(ctx), dtype=bool)

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return rows & (ctx["count"] >= self.n)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return rows.copy()

    def uses_processing_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"AfterCount({self.n})"


_FIRED = np.iinfo(np.int64).min
"""``fire_at`` of an AfterProcessingTime that fired: due (before every processing time), with no timer."""


class AfterProcessingTime(Trigger):
    """Fires once ``delay`` of processing time after the first element of the pane; then finishes.

    Merged windows keep the earliest pending firing time (Beam). Once fired it reports no timer:
    a runner need not call the window again for it.
    """

    def __init__(self, delay: Any):
        self.delay = parse_duration("AfterProcessingTime(delay)", delay)
        self._internal: int | None = None

    def own_columns(self) -> dict[str, Column]:
        return {"fire_at": Column(np.int64, NO_TIME, "min")}

    def resolve(self, to_internal: ToInternal) -> "AfterProcessingTime":
        out = AfterProcessingTime(self.delay)
        out._internal = to_internal("AfterProcessingTime(delay)", self.delay)
        return out

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        start = rows & (ctx["fire_at"] == NO_TIME)
        assert self._internal is not None, "AfterProcessingTime runs resolved (Trigger.resolve)"
        ctx.put("fire_at", start, _plus(ctx.processing_time, self._internal))
        return np.zeros(len(ctx), dtype=bool)

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return rows & (ctx["fire_at"] <= ctx.processing_time)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        ctx.put("fire_at", rows, _FIRED)
        return rows.copy()

    def processing_timers(self, ctx: TriggerContext) -> list[np.ndarray]:
        return [np.where(ctx["fire_at"] == _FIRED, NO_TIME, ctx["fire_at"])]

    def counts_elements(self) -> bool:
        return False  # starts its delay at the pane's first element, however many arrive

    def __repr__(self) -> str:
        return f"AfterProcessingTime({_fmt_duration(self.delay)})"


class _Composite(Trigger):
    """A trigger made of sub-triggers; resolves their durations."""

    def resolve(self, to_internal: ToInternal) -> Trigger:
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.children = tuple(child.resolve(to_internal) for child in self.children)
        return out

    def counts_elements(self) -> bool:
        return any(child.counts_elements() for child in self.children)

    def uses_processing_time(self) -> bool:
        return any(child.uses_processing_time() for child in self.children)


class Repeatedly(_Composite):
    """Runs ``trigger`` forever: whenever it finishes, it is reset. Never finishes.

    It holds no state of its own, so its child's state has its prefix (Beam's Python SDK passes
    the context through too).
    """

    def __init__(self, trigger: Trigger):
        self.children = (_as_trigger("Repeatedly(trigger)", trigger),)

    def roles(self) -> tuple[str, ...]:
        return ("",)

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return self.children[0].should_fire(ctx, rows)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        child = self.children[0]
        finished = child.on_fire(ctx, rows)
        child.reset(ctx, finished)
        return np.zeros(len(ctx), dtype=bool)

    def __repr__(self) -> str:
        return f"Repeatedly({self.children[0]!r})"


class _Parallel(_Composite):
    """AfterAny / AfterAll: every sub-trigger sees every element; they fire together."""

    _any: bool

    def __init__(self, *triggers: Trigger):
        name = type(self).__name__
        if not triggers:
            raise ValueError(f"{name}() needs at least one trigger")
        self.children = tuple(_as_trigger(f"{name}(triggers[{i}])", t) for i, t in enumerate(triggers))

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        fires = [c.should_fire(ctx.sub(str(i)), rows) for i, c in enumerate(self.children)]
        combine = np.logical_or.reduce if self._any else np.logical_and.reduce
        return rows & combine(fires)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        # Beam: fire the sub-triggers that are ready; combine the finished flags of those that fired.
        finished_any = np.zeros(len(ctx), dtype=bool)
        finished_all = rows.copy()
        for i, child in enumerate(self.children):
            sub = ctx.sub(str(i))
            ready = child.should_fire(sub, rows)
            done = child.on_fire(sub, ready)
            finished_any |= ready & done
            finished_all &= ~ready | done
        return finished_any if self._any else rows & finished_all

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.children))})"


class AfterAny(_Parallel):
    """Fires when any sub-trigger would fire; finishes when a sub-trigger that fired finishes."""

    _any = True


class AfterAll(_Parallel):
    """Fires when every sub-trigger would fire; finishes when all of them finish."""

    _any = False


class AfterEach(_Composite):
    """Runs the sub-triggers one after another: each must finish before the next starts.

    Finishes with the last one. Merged windows continue from the furthest
    sub-trigger (Beam).
    """

    def __init__(self, *triggers: Trigger):
        if not triggers:
            raise ValueError("AfterEach() needs at least one trigger")
        self.children = tuple(_as_trigger(f"AfterEach(triggers[{i}])", t) for i, t in enumerate(triggers))

    def own_columns(self) -> dict[str, Column]:
        return {"index": Column(np.int64, 0, "max")}

    def _current(self, ctx: TriggerContext, rows: np.ndarray, i: int) -> np.ndarray:
        return rows & (ctx["index"] == i)

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        timers = np.zeros(len(ctx), dtype=bool)
        for i, child in enumerate(self.children):
            timers |= child.on_elements(ctx.sub(str(i)), self._current(ctx, rows, i), counts)
        return timers

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        out = np.zeros(len(ctx), dtype=bool)
        for i, child in enumerate(self.children):
            out |= child.should_fire(ctx.sub(str(i)), self._current(ctx, rows, i))
        return out

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        index = ctx["index"].copy()
        for i, child in enumerate(self.children):
            current = self._current(ctx, rows, i)
            index[current & child.on_fire(ctx.sub(str(i)), current)] += 1
        ctx["index"] = index
        return rows & (index >= len(self.children))

    def processing_timers(self, ctx: TriggerContext) -> list[np.ndarray]:
        """The current sub-trigger's timers only: the earlier ones finished, the later ones have not started."""
        return [np.where(ctx["index"] == i, timer, NO_TIME)
                for i, child in enumerate(self.children) for timer in child.processing_timers(ctx.sub(str(i)))]

    def __repr__(self) -> str:
        return f"AfterEach({', '.join(map(repr, self.children))})"


class OrFinally(_Composite):
    """Runs ``trigger`` until ``until`` fires; the firing of ``until`` fires and finishes it."""

    def __init__(self, trigger: Trigger, until: Trigger):
        self.children = (_as_trigger("OrFinally(trigger)", trigger), _as_trigger("OrFinally(until)", until))

    def roles(self) -> tuple[str, ...]:
        return ("trigger", "until")

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        body, until = self.children
        return body.should_fire(ctx.sub("trigger"), rows) | until.should_fire(ctx.sub("until"), rows)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        body, until = self.children
        exiting = until.should_fire(ctx.sub("until"), rows)
        until.on_fire(ctx.sub("until"), exiting)
        body_finished = body.on_fire(ctx.sub("trigger"), rows & ~exiting)
        return exiting | body_finished

    def __repr__(self) -> str:
        return f"OrFinally({self.children[0]!r}, until={self.children[1]!r})"


class AfterWatermark(_Composite):
    """Fires when the watermark passes the end of the window (the ON_TIME pane).

    ``early`` fires repeatedly before that, ``late`` repeatedly after it.
    Without ``late`` the trigger finishes at the ON_TIME pane, so elements
    arriving afterwards are dropped. When windows merge, the merged window is
    late only if every merged window was late and the watermark has passed
    its new end; otherwise its late sub-trigger starts afresh (Beam Java).
    """

    def __init__(self, early: Trigger | None = None, late: Trigger | None = None):
        self.early = None if early is None else Repeatedly(_as_trigger("AfterWatermark(early)", early))
        self.late = None if late is None else Repeatedly(_as_trigger("AfterWatermark(late)", late))
        self.children = tuple(t for t in (self.early, self.late) if t is not None)

    def roles(self) -> tuple[str, ...]:
        return tuple(role for role, t in (("early", self.early), ("late", self.late)) if t is not None)

    def numbered_roles(self) -> tuple[str, ...]:
        # Before role names, a child's state was prefixed by ``children.index(child)``, and triggers
        # compare equal by repr: equal early and late triggers shared the early one's columns.
        return tuple(str(self.children.index(child)) for child in self.children)

    def resolve(self, to_internal: ToInternal) -> Trigger:
        early = None if self.early is None else self.early.children[0].resolve(to_internal)
        late = None if self.late is None else self.late.children[0].resolve(to_internal)
        return AfterWatermark(early=early, late=late)

    def own_columns(self) -> dict[str, Column]:
        return {"late": Column(bool, False, "all")}

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        is_late = ctx["late"]
        timers = rows & ~ctx.past_end()
        if self.early is not None:
            timers |= self.early.on_elements(ctx.sub("early"), rows & ~is_late, counts)
        if self.late is not None:
            timers |= self.late.on_elements(ctx.sub("late"), rows & is_late, counts)
        return timers

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        is_late = ctx["late"]
        out = rows & ~is_late & ctx.past_end()
        if self.early is not None:
            out |= self.early.should_fire(ctx.sub("early"), rows & ~is_late & ~ctx.past_end())
        if self.late is not None:
            out |= self.late.should_fire(ctx.sub("late"), rows & is_late)
        return out

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        is_late = ctx["late"]
        on_time = rows & ~is_late & ctx.past_end()
        if self.early is not None:
            self.early.on_fire(ctx.sub("early"), rows & ~is_late & ~ctx.past_end())
        if self.late is not None:
            self.late.on_fire(ctx.sub("late"), rows & is_late)
        ctx.put("late", on_time, True)
        return on_time if self.late is None else np.zeros(len(ctx), dtype=bool)

    def merge(self, src: TriggerContext, groups: np.ndarray, dst: TriggerContext) -> None:
        super().merge(src, groups, dst)
        still_late = dst["late"] & dst.past_end()
        dst["late"] = still_late
        if self.late is not None:
            self.late.reset(dst.sub("late"), ~still_late)

    def processing_timers(self, ctx: TriggerContext) -> list[np.ndarray]:
        """The timers of the phase the window is in: early before the ON_TIME pane, late after."""
        is_late = ctx["late"]
        timers = []
        for role, child, phase in (("early", self.early, ~is_late), ("late", self.late, is_late)):
            if child is not None:
                timers += [np.where(phase, timer, NO_TIME) for timer in child.processing_timers(ctx.sub(role))]
        return timers

    def __repr__(self) -> str:
        parts = [f"{name}={t.children[0]!r}" for name, t in (("early", self.early), ("late", self.late)) if t]
        return f"AfterWatermark({', '.join(parts)})"


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

    def __init__(self, early: int | Any | None = None, late: int | Any | None = None):
        self.early = self._option("with_early_firings_every", early)
        self.late = self._option("with_late_firings_every", late)
        self._early_period: int | None = None
        self._late_period: int | None = None

    @staticmethod
    def _option(name: str, value: Any) -> int | dt.timedelta | float | None:
        if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
            return None if value is None else _count(f"{name}(count)", value)
        return parse_duration(f"{name}(duration)", value)

    def with_early_firings_every(self, every: int | Any) -> "AtWatermark":
        return AtWatermark(early=every, late=self.late)

    def with_late_firings_every(self, every: int | Any) -> "AtWatermark":
        return AtWatermark(early=self.early, late=every)

    def resolve(self, to_internal: ToInternal) -> Trigger:
        out = AtWatermark(self.early, self.late)
        if self.early is not None and not isinstance(self.early, int):
            out._early_period = to_internal("with_early_firings_every(duration)", self.early)
        if self.late is not None and not isinstance(self.late, int):
            out._late_period = to_internal("with_late_firings_every(duration)", self.late)
        return out

    def own_columns(self) -> dict[str, Column]:
        return {"late": Column(bool, False, "all"),
                "early_count": Column(np.int64, 0, "sum"), "late_count": Column(np.int64, 0, "sum"),
                "early_next": Column(np.int64, NO_TIME, "min"), "late_next": Column(np.int64, NO_TIME, "min")}

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        is_late = ctx["late"]
        early_rows, late_rows = rows & ~is_late, rows & is_late
        ctx.put("early_count", early_rows, ctx["early_count"] + counts)
        ctx.put("late_count", late_rows, ctx["late_count"] + counts)
        if self._early_period is not None:
            first = early_rows & (ctx["early_next"] == NO_TIME)
            ctx.put("early_next", first, _plus(ctx.processing_time, self._early_period))
        return rows & ~ctx.past_end()

    def _due(self, ctx: TriggerContext, option: Any, count_col: str, next_col: str) -> np.ndarray:
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

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        is_late, past_end = ctx["late"], ctx.past_end()
        on_time = rows & ~is_late & past_end
        early = rows & ~is_late & ~past_end
        late = rows & is_late
        periodic = np.zeros(len(ctx), dtype=bool)
        ctx.put("early_count", early, 0)
        ctx.put("late_count", late | on_time, 0)
        if self._early_period is not None:
            ctx.put("early_next", early, _plus(ctx.processing_time, self._early_period))
            periodic |= early
        if self._late_period is not None:
            ctx.put("late_next", late | on_time, _plus(ctx.processing_time, self._late_period))
            periodic |= late
        ctx.force_emit[periodic] = True
        ctx.put("late", on_time, True)
        return on_time if self.late is None else np.zeros(len(ctx), dtype=bool)

    def merge(self, src: TriggerContext, groups: np.ndarray, dst: TriggerContext) -> None:
        super().merge(src, groups, dst)
        dst["late"] = dst["late"] & dst.past_end()

    def processing_timers(self, ctx: TriggerContext) -> list[np.ndarray]:
        return [np.where(ctx["late"], ctx["late_next"], ctx["early_next"])]

    def counts_elements(self) -> bool:
        return isinstance(self.early, int) or isinstance(self.late, int)

    def uses_processing_time(self) -> bool:
        return any(option is not None and not isinstance(option, int) for option in (self.early, self.late))

    def __repr__(self) -> str:
        out = "AtWatermark()"
        if self.early is not None:
            out += f".with_early_firings_every({_fmt_duration(self.early)})"
        if self.late is not None:
            out += f".with_late_firings_every({_fmt_duration(self.late)})"
        return out
