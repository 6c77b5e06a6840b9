"""Beam's trigger algebra: the triggers made of sub-triggers.

Semantics follow Beam (Python SDK ``trigger.py``; merging as in the Java
``AfterWatermarkStateMachine``): ``Repeatedly`` resets its child whenever the
child finishes; ``AfterWatermark`` runs its early trigger repeatedly before the
watermark passes the end of the window, fires once when it does (the ON_TIME
pane) and then runs its late trigger repeatedly, finishing at the ON_TIME pane
when it has no late trigger. A composite combines what its children's firings
return (`Fired`) into its own. Each resolves by resolving its children into a new
composite; the ``repr`` reads as the call that built it and must not change (Spark
checkpoints store it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from .base import Column, Fired, ToInternal, Trigger, TriggerContext, checked_trigger, set_field
from .errors import WindowingConfigError


class _Composite(Trigger):
    """A trigger made of sub-triggers; its resolution resolves theirs."""

    def counts_elements(self) -> bool:
        return any(child.counts_elements() for child in self.children)

    def uses_processing_time(self) -> bool:
        return any(child.uses_processing_time() for child in self.children)


def _body(call: str, t: Trigger | None, trigger: Trigger | None) -> Trigger:
    """The sub-trigger given as ``t`` (api.md's name, or positionally) or as ``trigger=`` (its field's name)."""
    if (t is None) == (trigger is None):
        raise WindowingConfigError(
            f"{call}(t={t!r}, trigger={trigger!r}): give the sub-trigger once, e.g. {call}(AfterCount(2))")
    return checked_trigger(f"{call}(trigger)", t if trigger is None else trigger)


@dataclass(frozen=True, init=False)
class Repeatedly(_Composite):
    """Runs ``trigger`` forever: whenever it finishes, it is reset. Never finishes.

    It holds no state of its own, so its child's state has its prefix (Beam's Python SDK passes
    the context through too).
    """

    trigger: Trigger

    def __init__(self, t: Trigger | None = None, *, trigger: Trigger | None = None) -> None:
        set_field(self, "trigger", _body("Repeatedly", t, trigger))

    @property
    def children(self) -> tuple[Trigger, ...]:
        return (self.trigger,)

    def roles(self) -> tuple[str, ...]:
        return ("",)

    def resolve(self, to_internal: ToInternal) -> Repeatedly:
        return replace(self, trigger=self.trigger.resolve(to_internal))

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return self.trigger.should_fire(ctx, rows)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        fired = self.trigger.on_fire(ctx, rows)
        self.trigger.reset(ctx, fired.finished)
        return Fired.finishing(np.zeros(len(ctx), dtype=bool), fired)

    def __repr__(self) -> str:
        return f"Repeatedly({self.trigger!r})"


@dataclass(frozen=True, init=False)
class _Sequence(_Composite):
    """A composite of one or more sub-triggers given in order (``AfterAny(a, b)``), each in the
    role of its position."""

    triggers: tuple[Trigger, ...]

    def __init__(self, *triggers: Trigger):
        name = type(self).__name__
        if not triggers:
            raise WindowingConfigError(f"{name}() needs at least one trigger")
        set_field(self, "triggers", tuple(checked_trigger(f"{name}(triggers[{i}])", t) for i, t in enumerate(triggers)))

    @property
    def children(self) -> tuple[Trigger, ...]:
        return self.triggers

    def resolve(self, to_internal: ToInternal) -> Trigger:
        return type(self)(*(child.resolve(to_internal) for child in self.triggers))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.triggers))})"


class _Parallel(_Sequence):
    """AfterAny / AfterAll: every sub-trigger sees every element; they fire together."""

    _any: ClassVar[bool]

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        fires = [child.should_fire(ctx.sub(role), rows) for role, child in self.named_children()]
        combine = np.logical_or.reduce if self._any else np.logical_and.reduce
        return rows & combine(fires)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        # Beam: fire the sub-triggers that are ready; combine the finished flags of those that fired.
        finished_any = np.zeros(len(ctx), dtype=bool)
        finished_all = rows.copy()
        fired = []
        for role, child in self.named_children():
            sub = ctx.sub(role)
            ready = child.should_fire(sub, rows)
            fired.append(child.on_fire(sub, ready))
            finished_any |= ready & fired[-1].finished
            finished_all &= ~ready | fired[-1].finished
        return Fired.finishing(finished_any if self._any else rows & finished_all, *fired)


@dataclass(frozen=True, init=False, repr=False)
class AfterAny(_Parallel):
    """Fires when any sub-trigger would fire; finishes when a sub-trigger that fired finishes."""

    _any = True


@dataclass(frozen=True, init=False, repr=False)
class AfterAll(_Parallel):
    """Fires when every sub-trigger would fire; finishes when all of them finish."""

    _any = False


@dataclass(frozen=True, init=False, repr=False)
class AfterEach(_Sequence):
    """Runs the sub-triggers one after another: each must finish before the next starts.

    Finishes with the last one. Merged windows continue from the furthest
    sub-trigger (Beam).
    """

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

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        index = ctx["index"].copy()
        fired = []
        for i, child in enumerate(self.children):
            current = self._current(ctx, rows, i)
            fired.append(child.on_fire(ctx.sub(str(i)), current))
            index[current & fired[-1].finished] += 1
        ctx["index"] = index
        return Fired.finishing(rows & (index >= len(self.children)), *fired)


@dataclass(frozen=True, init=False)
class OrFinally(_Composite):
    """Runs ``trigger`` until ``until`` fires; the firing of ``until`` fires and finishes it."""

    trigger: Trigger
    until: Trigger

    def __init__(self, t: Trigger | None = None, until: Trigger | None = None, *, trigger: Trigger | None = None) -> None:
        set_field(self, "trigger", _body("OrFinally", t, trigger))
        set_field(self, "until", checked_trigger("OrFinally(until)", until))

    @property
    def children(self) -> tuple[Trigger, ...]:
        return (self.trigger, self.until)

    def roles(self) -> tuple[str, ...]:
        return ("trigger", "until")

    def resolve(self, to_internal: ToInternal) -> OrFinally:
        return replace(self, trigger=self.trigger.resolve(to_internal), until=self.until.resolve(to_internal))

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        return self.trigger.should_fire(ctx.sub("trigger"), rows) | self.until.should_fire(ctx.sub("until"), rows)

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        exiting = self.until.should_fire(ctx.sub("until"), rows)
        until_fired = self.until.on_fire(ctx.sub("until"), exiting)
        body_fired = self.trigger.on_fire(ctx.sub("trigger"), rows & ~exiting)
        return Fired.finishing(exiting | body_fired.finished, until_fired, body_fired)

    def __repr__(self) -> str:
        return f"OrFinally({self.trigger!r}, until={self.until!r})"


@dataclass(frozen=True)
class AfterWatermark(_Composite):
    """Fires when the watermark passes the end of the window (the ON_TIME pane).

    ``early`` fires repeatedly before that, ``late`` repeatedly after it.
    Without ``late`` the trigger finishes at the ON_TIME pane, so elements
    arriving afterwards are dropped. When windows merge, the merged window is
    late only if every merged window was late and the watermark has passed
    its new end; otherwise its late sub-trigger starts afresh (Beam Java).
    """

    early: Trigger | None = None
    late: Trigger | None = None

    def __post_init__(self) -> None:
        for role in ("early", "late"):
            if getattr(self, role) is not None:
                set_field(self, role, checked_trigger(f"AfterWatermark({role})", getattr(self, role)))

    def _phases(self) -> tuple[tuple[str, Repeatedly], ...]:
        """The role and the running trigger (``early`` or ``late``, repeated) of each phase given."""
        return tuple((role, Repeatedly(t)) for role, t in (("early", self.early), ("late", self.late)) if t is not None)

    def _phase_rows(self, early_rows: np.ndarray, late_rows: np.ndarray) -> list[tuple[str, Repeatedly, np.ndarray]]:
        """Each phase given, with the rows it runs on."""
        rows = {"early": early_rows, "late": late_rows}
        return [(role, phase, rows[role]) for role, phase in self._phases()]

    @property
    def children(self) -> tuple[Trigger, ...]:
        return tuple(t for _, t in self._phases())

    def roles(self) -> tuple[str, ...]:
        return tuple(role for role, _ in self._phases())

    def numbered_roles(self) -> tuple[str, ...]:
        # Before role names, a child's state was prefixed by ``children.index(child)``, and triggers
        # compared equal by repr: equal early and late triggers shared the early one's columns.
        reprs = [repr(child) for child in self.children]
        return tuple(str(reprs.index(r)) for r in reprs)

    def resolve(self, to_internal: ToInternal) -> AfterWatermark:
        return replace(self, early=None if self.early is None else self.early.resolve(to_internal),
                       late=None if self.late is None else self.late.resolve(to_internal))

    def own_columns(self) -> dict[str, Column]:
        return {"late": Column(bool, False, "all")}

    def on_elements(self, ctx: TriggerContext, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        is_late = ctx["late"]
        timers = rows & ~ctx.past_end()
        for role, phase, phase_rows in self._phase_rows(rows & ~is_late, rows & is_late):
            timers |= phase.on_elements(ctx.sub(role), phase_rows, counts)
        return timers

    def should_fire(self, ctx: TriggerContext, rows: np.ndarray) -> np.ndarray:
        is_late, past_end = ctx["late"], ctx.past_end()
        out = rows & ~is_late & past_end
        for role, phase, phase_rows in self._phase_rows(rows & ~is_late & ~past_end, rows & is_late):
            out |= phase.should_fire(ctx.sub(role), phase_rows)
        return out

    def on_fire(self, ctx: TriggerContext, rows: np.ndarray) -> Fired:
        is_late, past_end = ctx["late"], ctx.past_end()
        on_time = rows & ~is_late & past_end
        fired = [phase.on_fire(ctx.sub(role), phase_rows)
                 for role, phase, phase_rows in self._phase_rows(rows & ~is_late & ~past_end, rows & is_late)]
        ctx.put("late", on_time, True)
        return Fired.finishing(on_time if self.late is None else np.zeros(len(ctx), dtype=bool), *fired)

    def merge(self, src: TriggerContext, groups: np.ndarray, dst: TriggerContext) -> None:
        super().merge(src, groups, dst)
        still_late = dst["late"] & dst.past_end()
        dst["late"] = still_late
        if self.late is not None:  # Repeatedly shares its child's state: resetting the child resets both
            self.late.reset(dst.sub("late"), ~still_late)

    def __repr__(self) -> str:
        parts = [f"{role}={t!r}" for role, t in (("early", self.early), ("late", self.late)) if t is not None]
        return f"AfterWatermark({', '.join(parts)})"
