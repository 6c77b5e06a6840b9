"""The trigger protocol: Beam's trigger state machines, evaluated column-wise.

A trigger holds no state of its own. Its state lives in columns of the
engine's window table, one row per (key, window), behind a
`TriggerContext` whose prefix names each nested trigger by its role, as
Beam's ``NestedContext`` does: ``t.early.count`` is the count of
``AfterWatermark(early=AfterCount(2))``'s early trigger, ``t.1.count`` that of
the second trigger of an ``AfterAll``; ``Repeatedly`` shares its child's
prefix. So the layout of one trigger never shifts when an option is added,
and two equal sub-triggers in different roles never share state. Every
method works on a boolean mask ``rows`` over all windows at once, so one step
of many keys costs a few numpy operations per trigger node rather than a
Python call per window. Methods touch only the rows in the mask.

The methods mirror Beam's ``TriggerFn``: ``on_elements`` (Beam's
``on_element``, with the number of elements a window received in the step;
returns where it set an end-of-window timer), ``merge`` (``on_merge``),
``should_fire``, ``on_fire`` (returns a `Fired`: where the trigger finished and
where its firing must emit a pane even if nothing arrived), ``reset`` and
``processing_timers`` (the pending processing-time timers, which outlive a reset as
Java's do, until ``consume_due_timers``).

A trigger is a frozen dataclass: a value, equal and hashed by its fields, safe
to share between pipelines and to pickle into Spark workers. ``resolve``
returns a new trigger whose durations are in the engine's time unit; it never
changes the one the user built.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

from .errors import WindowingConfigError

NO_TIME = np.iinfo(np.int64).max
"""Timer value meaning "no timer set"; also the end of time."""

Merge = Literal["sum", "min", "max", "any", "all", "union"]
"""How a merge combines a column: ``union`` joins sorted tuples of times (None: no time) into one."""


@dataclass(frozen=True)
class Column:
    """One column of trigger state: its dtype, its value in a fresh window, how merges combine it.

    ``earlier``: for a column added after the first release, its value in a window table written
    before (a Spark checkpoint), from the state that table holds, seen through the trigger's context.
    ``since``: the layout of window-state records (`windowing.window_state.LAYOUT`) that first holds
    the column; a record of an earlier layout lacks it, and ``earlier`` gives it.
    """

    dtype: Any
    default: Any
    merge: Merge
    earlier: Callable[["TriggerContext"], np.ndarray] | None = None
    since: int = 0


class TriggerContext:
    """The trigger state of a set of windows, seen through one trigger's prefix.

    ``columns`` is shared by every nested context; ``end`` holds the window
    ends, ``watermark`` and ``processing_time`` the step's times.
    """

    def __init__(self, columns: dict[str, np.ndarray], end: np.ndarray, watermark: int,
                 processing_time: int, prefix: str = "t."):
        self.columns = columns
        self.end = end
        self.watermark = watermark
        self.processing_time = processing_time
        self.prefix = prefix

    def __len__(self) -> int:
        return len(self.end)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[self.prefix + name]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.columns[self.prefix + name] = value

    def sub(self, role: str) -> "TriggerContext":
        """The context of a nested trigger in ``role``; the empty role shares this one's prefix."""
        if not role:
            return self
        return TriggerContext(self.columns, self.end, self.watermark, self.processing_time,
                              nested_prefix(self.prefix, role))

    def past_end(self) -> np.ndarray:
        """Windows whose end the watermark has reached (Beam: ``watermark >= window.end``)."""
        return self.end <= self.watermark

    def put(self, name: str, rows: np.ndarray, value: Any) -> None:
        """Set column ``name`` to ``value`` (scalar or full-length array) on ``rows``."""
        column = self[name].copy()
        column[rows] = value[rows] if isinstance(value, np.ndarray) else value
        self[name] = column


@dataclass(frozen=True, eq=False)
class Fired:
    """What a firing did, per window: where the trigger ``finished``, and where the pane must be
    emitted even if no element arrived since the last one (``forced``: the seed operator's
    periodic firings). A firing reports this instead of writing it anywhere, so a composite
    decides what its children's firings mean for it and the engine reads it from the root."""

    finished: np.ndarray
    forced: np.ndarray

    @staticmethod
    def nothing(n: int) -> Fired:
        """No window finished, none forced."""
        return Fired(np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))

    @staticmethod
    def finishing(finished: np.ndarray, *children: Fired) -> Fired:
        """``finished`` as the composite decided it, forcing wherever one of its ``children`` forced."""
        forced = np.zeros(len(finished), dtype=bool)
        for child in children:
            forced |= child.forced
        return Fired(finished, forced)


def nested_prefix(prefix: str, role: str) -> str:
    """The column prefix of a nested trigger in ``role`` under ``prefix`` (the empty role: the same)."""
    return f"{prefix}{role}." if role else prefix


def future_timers(ctx: TriggerContext, times: np.ndarray) -> np.ndarray:
    """``times`` where they are after the context's processing time, else NO_TIME."""
    return np.where(times > ctx.processing_time, times, NO_TIME)


def reduce_groups(values: np.ndarray, groups: np.ndarray, n_groups: int, how: Merge) -> np.ndarray:
    """Combine ``values`` of rows that share a group id; one result per group."""
    if how == "union":
        out = np.full(n_groups, None, dtype=object)
        for group, times in zip(groups.tolist(), values.tolist()):
            if times:
                out[group] = tuple(sorted({*(out[group] or ()), *times}))
        return out
    if how in ("sum", "any"):
        if values.dtype == bool:
            return np.bincount(groups, weights=values, minlength=n_groups) > 0
        out = np.zeros(n_groups, dtype=values.dtype)
        np.add.at(out, groups, values)
        return out
    if how == "all":
        return np.bincount(groups, weights=~values, minlength=n_groups) == 0
    if how == "min":
        out = np.full(n_groups, np.iinfo(np.int64).max if values.dtype.kind == "i" else np.inf, dtype=values.dtype)
        np.minimum.at(out, groups, values)
        return out
    out = np.full(n_groups, np.iinfo(np.int64).min if values.dtype.kind == "i" else -np.inf, dtype=values.dtype)
    np.maximum.at(out, groups, values)
    return out


def set_field(trigger: Trigger, name: str, value: Any) -> None:
    """Store a validated field of a frozen trigger while it is built (in ``__post_init__``)."""
    object.__setattr__(trigger, name, value)


def checked_trigger(param: str, value: Any) -> Trigger:
    """``value`` if it is a trigger; else the error naming the parameter ``param``."""
    if not isinstance(value, Trigger):
        raise WindowingConfigError(f"{param}={value!r} is not a trigger; give e.g. AfterCount(1)")
    return value


ToInternal = Callable[[str, Any], int]
"""Converts a trigger's duration (its parameter's name, the value) to the engine's time unit."""


@dataclass(frozen=True, eq=False)
class Trigger(ABC):
    """Decides when a window fires.

    Every trigger is a frozen dataclass (decorate a subclass with ``@dataclass(frozen=True)``):
    its fields are its value, so equal triggers share a state layout and a checkpoint's
    description, and one trigger object can serve many pipelines. A subclass that is no
    dataclass of its own keeps ``object``'s equality (each instance equal only to itself), as
    this class compares no fields of its.
    """

    @property
    def children(self) -> tuple["Trigger", ...]:
        """The sub-triggers, in the order of `roles`."""
        return ()

    # ---- state layout ------------------------------------------------------------------

    def roles(self) -> tuple[str, ...]:
        """The role of each child, which names its state (``early``, ``late``; the position of a
        child among equals, as in ``AfterAll``); the empty role shares this trigger's prefix."""
        return tuple(str(i) for i in range(len(self.children)))

    def named_children(self) -> tuple[tuple[str, "Trigger"], ...]:
        return tuple(zip(self.roles(), self.children))

    def own_columns(self) -> dict[str, Column]:
        return {}

    def columns(self, prefix: str = "t.") -> dict[str, Column]:
        """Every state column of this trigger and its children, by full name."""
        out = {prefix + name: col for name, col in self.own_columns().items()}
        for role, child in self.named_children():
            out.update(child.columns(nested_prefix(prefix, role)))
        return out

    def fresh_state(self, n: int) -> dict[str, np.ndarray]:
        return {name: np.full(n, col.default, dtype=col.dtype) for name, col in self.columns().items()}

    def numbered_roles(self) -> tuple[str, ...]:
        """The role of each child in the layout of releases before role names: its position, the
        first equal child's for ``AfterWatermark`` (whose equal early and late triggers shared state)."""
        return tuple(str(i) for i in range(len(self.children)))

    def numbered_columns(self, prefix: str = "t.", numbered: str = "t.") -> dict[str, str]:
        """Each state column's name (key) and the name the same state had in a window table written
        before role names (value), so a table of that layout can be read: ``t.0.0.count`` held what
        ``t.early.count`` holds in ``AfterWatermark(early=AfterCount(2))``."""
        out = {prefix + name: numbered + name for name in self.own_columns()}
        for (role, child), old in zip(self.named_children(), self.numbered_roles()):
            out.update(child.numbered_columns(nested_prefix(prefix, role), f"{numbered}{old}."))
        return out

    # ---- the state machine ---------------------------------------------------------------

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """``counts[i]`` elements arrived in window ``i`` this step (rows with counts > 0).

        Returns where the trigger set an end-of-window timer (Beam's ``setTimer`` at the end of the
        window): the runner evaluates those windows again when the watermark passes their end,
        even in a step without their elements.
        """
        timers = np.zeros(len(ctx), dtype=bool)
        for role, child in self.named_children():
            timers |= child.on_elements(ctx.sub(role), rows, counts)
        return timers

    @abstractmethod
    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        """Where the trigger would fire now; False outside ``rows``."""

    @abstractmethod
    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        """Record a firing on ``rows``; return where the trigger is now finished and where the
        firing forces a pane (both within ``rows``)."""

    def reset(self, ctx: TriggerContext, rows: np.ndarray) -> None:
        """Forget the pane in progress (Beam ``reset``/``clear``) on ``rows``."""
        for name, col in self.own_columns().items():
            ctx.put(name, rows, col.default)
        for role, child in self.named_children():
            child.reset(ctx.sub(role), rows)

    def merge(self, src: TriggerContext, groups: np.ndarray, dst: TriggerContext) -> None:
        """Fill ``dst`` (one row per merged window) from the merged-away windows in ``src``.

        ``groups[i]`` is the row of ``dst`` that source row ``i`` merges into;
        ``dst.end`` already holds the merged windows' ends.
        """
        for name, col in self.own_columns().items():
            dst[name] = reduce_groups(src[name], groups, len(dst), col.merge).astype(col.dtype)
        for role, child in self.named_children():
            child.merge(src.sub(role), groups, dst.sub(role))

    def processing_timers(self, ctx: TriggerContext) -> list[np.ndarray]:
        """Each pending processing-time timer of the tree (a time at which the window must be
        evaluated), per window, NO_TIME where unset.

        A timer stays pending until it is due, whatever its trigger did since (fired, reset, or left
        in charge of a sibling: an ``AfterEach`` moved on, an ``AfterWatermark`` past its early
        phase): Beam Java cannot delete a trigger's timer, and when due it wakes the window, whose
        root trigger is then asked whether to fire. The step that evaluates a due timer consumes it
        (`consume_due_timers`).
        """
        return [timer for role, child in self.named_children() for timer in child.processing_timers(ctx.sub(role))]

    def consume_due_timers(self, ctx: TriggerContext, rows: np.ndarray) -> None:
        """Forget, on ``rows``, the timers due at ``ctx.processing_time``: the step has evaluated their windows."""
        for role, child in self.named_children():
            child.consume_due_timers(ctx.sub(role), rows)

    def timer_due(self, ctx: TriggerContext) -> np.ndarray:
        """Where a processing-time timer is due (at or before ``ctx.processing_time``): the runner
        evaluates those windows even in a step without their elements, as Beam calls a trigger
        on a timer."""
        due = np.zeros(len(ctx), dtype=bool)
        for timer in self.processing_timers(ctx):
            due |= timer <= ctx.processing_time
        return due

    def next_processing_time(self, ctx: TriggerContext) -> np.ndarray:
        """Earliest processing time after ``ctx.processing_time`` at which ``should_fire`` may turn
        true; NO_TIME if none.

        ``ctx.processing_time`` is that of the step that made the state, which evaluated every window
        with a due timer: a time at or before it was due then (`AtWatermark`'s next periodic firing
        stays until it fires, where a composite held it back). Reporting it would call the window
        again in every step for nothing, so it is left out (``future_timers``).
        """
        out = np.full(len(ctx), NO_TIME, dtype=np.int64)
        for timer in self.processing_timers(ctx):
            out = np.minimum(out, future_timers(ctx, timer))
        return out

    def counts_elements(self) -> bool:
        """Whether firing may depend on how many elements a window received in a step, anywhere
        in the tree (late firings included).

        Folding a step's elements of a window into one (Spark's combiner lifting) is exact only
        when it does not. A trigger that does not say otherwise is assumed to count.
        """
        return True

    def uses_processing_time(self) -> bool:
        """Whether firing may wait for processing time to pass, anywhere in the tree (late
        firings included).

        Such a firing may be due with no new element and no watermark move, so a runner that
        calls a key only then (Spark's event-time timeout) would never make it. A trigger that
        does not say otherwise is assumed to wait.
        """
        return True

    def resolve(self, to_internal: ToInternal) -> Trigger:
        """This trigger with its durations in the engine's time unit: a new value, this one
        unchanged (a trigger without durations is its own resolution)."""
        return self
