"""Beam's own trigger state machines and window functions, driven with Beam Java's rules.

Apache Beam's Python SDK (``apache_beam.transforms.trigger``) has the trigger state machines and
``apache_beam.transforms.window`` the window functions; its driver (``GeneralTriggerDriver``) leaves
out what Beam Java's ``ReduceFnRunner`` does around them, so this module drives them per key and
step as Java does:

- lateness: an element is dropped from a window whose end plus the allowed lateness is at or
  behind the watermark (``LateDataDroppingDoFnRunner``);
- merging (``MergingActiveWindowSet``): new windows merge with the active windows only; a window
  whose trigger finished is no longer active; state of merged windows is unioned, pane info of
  merged-away windows dropped;
- the trigger is called for the windows of a step's elements (``processElements``: all elements
  first, then ``should_fire`` once per window open before them) and for windows with a due timer
  (``onTimers``); a trigger sets an end-of-window timer only before the watermark reaches the end,
  and cannot delete it (``TriggerTimers.deleteTimer``: a reset of ``Default`` keeps it, where the
  Python SDK's clears it);
- garbage collection at end + lateness: a final pane without consulting the trigger, emitted if
  it holds elements or is ON_TIME (``needToEmit`` with ``ClosingBehavior.FIRE_IF_NON_EMPTY`` and
  ``OnTimeBehavior.FIRE_ALWAYS``); a firing emits under the same rule;
- pane timing (``PaneInfoTracker``): LATE after an ON_TIME or LATE pane or when the output watermark
  passed the window, else EARLY before the end and ON_TIME after. The output watermark follows the
  window's element holds (``WatermarkHold``: an element arriving before the end holds it until the
  window fires; a merge re-holds if the merged window ends after the watermark), one step behind
  the watermark: the rule docs/engine.md states, per window where Beam's is per transform.

Where Python's state machines and Java's differ, Java is followed:
- ``AfterWatermark`` in a merged window is late only if it was late in every merged window and
  the watermark passed the merged window's end (Java's ``AfterWatermarkStateMachine.onMerge``);
  Python takes any. A merged window that never ran it (an ``AfterEach`` still at an earlier
  sub-trigger there) holds no state of it and was not late: Java's finished bit of its early
  trigger is unset there. Otherwise the early trigger goes on with the merged state and the late
  one starts afresh.
- ``AfterProcessingTime`` is ready once processing time passed its delay, whatever called it,
  and stays ready until reset, as Java's finished bit makes it (Python fires it from its timer only).

Processing-time timers are kept as Java keys them, by their time: a trigger set again before its earlier
timer is due has both pending (the Python SDK keys them by trigger and keeps the later one). A merged window
has every pending timer of the windows merged, as the Python SDK's state keeps them (Java lets those of the
windows merged away fire and ignores them, and sets one at the earliest pending firing: docs/engine.md,
"Differences left"). A merge into a closed window is flagged (`Outcome.corners`).

`BeamJava.run` returns the panes and dropped elements of a `tests.beam.pipelines.Pipeline` in the
pandas runner's terms.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from apache_beam.transforms import trigger as bt
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import FixedWindows, GlobalWindows, IntervalWindow, Sessions, SlidingWindows, WindowFn
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from .pipelines import Pipeline, Trigger

INFINITY = 2**62
EARLY, ON_TIME, LATE = "EARLY", "ON_TIME", "LATE"
DROPPED_LATE = "beyond allowed lateness"
DROPPED_CLOSED = "window closed (trigger finished)"


IN_EVERY_MERGED_WINDOW = "@in every merged window"


class Clock:
    """The step's processing time and watermark, read by the triggers below."""

    def __init__(self) -> None:
        self.processing_time = 0
        self.watermark = -INFINITY

    def time(self) -> int:
        return self.processing_time


class JavaAfterWatermark(bt.AfterWatermark):
    """Beam's AfterWatermark with Java's merge: late only if every merged window was late."""

    EARLY_TAG = bt._CombiningValueStateTag("is_early", any)
    #: Read only: whether this trigger was late in every window of the merge under way (`Store.get_state`).
    LATE_IN_EVERY_MERGED_WINDOW = bt._CombiningValueStateTag("is_late" + IN_EVERY_MERGED_WINDOW, all)

    def __init__(self, clock: Clock, early=None, late=None):
        super().__init__(early, late)
        self.clock = clock

    def is_late(self, context):
        return self.late and context.get_state(self.LATE_TAG) and not context.get_state(self.EARLY_TAG)

    def on_element(self, element, window, context):
        if not self.is_late(context):
            context.add_state(self.EARLY_TAG, True)
        super().on_element(element, window, context)

    def on_merge(self, to_be_merged, merge_result, context):
        # Java's finishedInAllMergingWindows: a merged window that never ran this trigger (say an
        # AfterEach still at an earlier sub-trigger there) holds no state of it, and counts as not late.
        if self.late and context.get_state(self.LATE_TAG) and not (
                context.get_state(self.LATE_IN_EVERY_MERGED_WINDOW) and _time(self.clock.watermark) >= merge_result.end):
            context.clear_state(self.LATE_TAG)  # late in some merged windows only: early again
            context.add_state(self.EARLY_TAG, True)
            self.late.reset(merge_result, bt.NestedContext(context, "late"))
        super().on_merge(to_be_merged, merge_result, context)

    def on_fire(self, watermark, window, context):
        if not self.is_late(context) and watermark >= window.end:
            context.clear_state(self.EARLY_TAG)
        return super().on_fire(watermark, window, context)

    def reset(self, window, context):
        context.clear_state(self.EARLY_TAG)
        super().reset(window, context)


class JavaAfterProcessingTime(bt.AfterProcessingTime):
    """Beam's AfterProcessingTime, ready by its state as in Java, and once fired until reset."""

    FIRE_AT = bt._CombiningValueStateTag("fire_at", lambda times: min(times, default=None))
    FIRED = bt._CombiningValueStateTag("fired", any)

    def __init__(self, clock: Clock, delay: int):
        super().__init__(delay)
        self.clock = clock

    def on_element(self, element, window, context):
        if context.get_state(self.FIRE_AT) is None and not context.get_state(self.FIRED):
            context.add_state(self.FIRE_AT, self.clock.processing_time + self.delay)
            context.set_timer("", TimeDomain.REAL_TIME, self.clock.processing_time + self.delay)

    def should_fire(self, time_domain, timestamp, window, context):
        fire_at = context.get_state(self.FIRE_AT)
        return bool(context.get_state(self.FIRED)) or (fire_at is not None and fire_at <= self.clock.processing_time)

    def on_fire(self, timestamp, window, context):
        context.add_state(self.FIRED, True)
        return True

    def reset(self, window, context):
        context.clear_state(self.FIRE_AT)
        context.clear_state(self.FIRED)


def beam_trigger(tree: Trigger, clock: Clock, java: bool = True) -> bt.TriggerFn:
    """Beam's trigger for ``tree``; with ``java``, the two state machines above where Java differs."""
    name, *args = tree
    build = lambda sub: None if sub is None else beam_trigger(sub, clock, java)  # noqa: E731
    if name == "AfterCount":
        return bt.AfterCount(args[0])
    if name == "AfterProcessingTime":
        return JavaAfterProcessingTime(clock, args[0]) if java else bt.AfterProcessingTime(args[0])
    if name == "AfterWatermark":
        if not java:
            return bt.AfterWatermark(early=build(args[0]), late=build(args[1]))
        return JavaAfterWatermark(clock, early=build(args[0]), late=build(args[1]))
    if name == "Default":
        return bt.DefaultTrigger()
    if name == "Never":
        return bt._Never()
    if name == "Repeatedly":
        return bt.Repeatedly(build(args[0]))
    if name == "OrFinally":
        return bt.OrFinally(build(args[0]), build(args[1]))
    return getattr(bt, name)(*map(build, args))


def _time(t: int) -> Timestamp:
    return MAX_TIMESTAMP if t >= INFINITY else Timestamp.of(t)


def _int(t: Timestamp) -> int:
    return t.micros // 10**6


class Store(bt.SimpleState):
    """One key's trigger state and timers, per window (Beam's in-memory state, merged by union)."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.tags: dict = defaultdict(lambda: defaultdict(list))
        self.timers: dict = defaultdict(dict)
        # Processing-time timers a trigger set again before they were due: Java keys a window's timers by their
        # time and keeps them all (the Python SDK one per trigger, in ``timers``); they wake the window too.
        self.superseded: dict = defaultdict(set)
        self.merged_windows: list[dict] = []  # the state of each window of the merge under way, before its union

    def set_timer(self, window, name, time_domain, timestamp, dynamic_timer_tag=""):
        if time_domain == TimeDomain.WATERMARK and _int(timestamp) <= self.clock.watermark:
            return  # Java sets an end-of-window timer only before the watermark reaches the end
        earlier = self.timers[window].get((name, time_domain))
        if time_domain == TimeDomain.REAL_TIME and earlier is not None and earlier != timestamp:
            self.superseded[window].add(earlier)
        self.timers[window][(name, time_domain)] = timestamp

    def clear_timer(self, window, name, time_domain, dynamic_timer_tag=""):
        if time_domain == TimeDomain.WATERMARK:
            return  # Java's TriggerTimers refuses to delete the end-of-window timer (a reset keeps it)
        self.timers[window].pop((name, time_domain), None)

    def get_window(self, window_id):
        return window_id

    def add_state(self, window, tag, value):
        self.tags[window][tag.tag].append(value)

    def get_state(self, window, tag):
        if tag.tag.endswith(IN_EVERY_MERGED_WINDOW):  # JavaAfterWatermark.LATE_IN_EVERY_MERGED_WINDOW
            prefix = tag.tag.removesuffix("is_late" + IN_EVERY_MERGED_WINDOW)
            return all(any(tags.get(prefix + "is_late", [])) and not any(tags.get(prefix + "is_early", []))
                       for tags in self.merged_windows)
        values = self.tags[window][tag.tag]
        if isinstance(tag, bt._CombiningValueStateTag):
            return tag.combine_fn.apply(values)
        return values

    def clear_state(self, window, tag):
        self.tags[window].pop(tag.tag, None)

    def merge(self, sources, result) -> None:
        """Union the state of ``sources`` into ``result``; their processing-time timers go with it,
        their end-of-window timers are cancelled (``ReduceFnRunner.onMerge``)."""
        self.merged_windows = [{tag: list(values) for tag, values in self.tags.get(window, {}).items()} for window in sources]
        for window in sources:
            if window == result:
                continue
            for tag, values in self.tags.pop(window, {}).items():
                self.tags[result][tag].extend(values)
            for (name, domain), when in self.timers.pop(window, {}).items():
                if domain == TimeDomain.REAL_TIME:
                    mine = self.timers[result].get((name, domain))
                    self.timers[result][(name, domain)] = when if mine is None else min(mine, when)
                    if mine is not None and mine != when:  # the later one stays pending
                        self.superseded[result].add(max(mine, when))
            self.superseded[result] |= self.superseded.pop(window, set())

    def forget(self, window) -> None:
        self.tags.pop(window, None)
        self.timers.pop(window, None)
        self.superseded.pop(window, None)


@dataclass
class Window:
    """A window's pane state outside the trigger: what ReduceFnRunner keeps beside it."""

    total: int = 0  # the accumulator (Sum)
    pending: int = 0  # elements since the last firing (NonEmptyPanes)
    held: bool = False  # an element hold keeps the output watermark behind the end
    closed: bool = False  # the trigger finished
    index: int = -1  # the last emitted pane's index and timing (PaneInfoTracker)
    timing: str | None = None


@dataclass
class Key:
    store: Store
    windows: dict = field(default_factory=dict)  # IntervalWindow -> Window


@dataclass
class Outcome:
    panes: list = field(default_factory=list)  # (step, key, start, end, value, timing, pane_index)
    dropped: list = field(default_factory=list)  # (step, key, time, value, start, end, reason)
    corners: set = field(default_factory=set)  # where Beam Java differs by design (`merge`, `on_timers`)


class BeamJava:
    """One pipeline, run step by step."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline
        self.clock = Clock()
        self.trigger = beam_trigger(pipeline.trigger, self.clock)
        kind, *size = pipeline.windows
        self.window_fn = (FixedWindows(*size) if kind == "fixed" else SlidingWindows(*size)
                          if kind == "sliding" else GlobalWindows() if kind == "global" else Sessions(size[0]))
        self.merging = kind == "sessions"
        self.keys: dict[str, Key] = {}
        self.out = Outcome()

    def run(self) -> Outcome:
        actions = list(self.pipeline.actions)
        if not any(kind == "watermark" and arg >= INFINITY for kind, arg in actions):
            actions.append(("watermark", INFINITY))  # end of input, as the pandas runner adds it
        for step, (kind, arg) in enumerate(actions):
            self.step = step
            self.held_before = {(k, w): win.held for k, key in self.keys.items() for w, win in key.windows.items()}
            self.watermark_before = self.clock.watermark
            if kind == "add":
                by_key = defaultdict(list)
                for key, time, value in arg:
                    by_key[key].append((time, value))
                for key, elements in sorted(by_key.items()):
                    self.process_elements(key, elements)
            elif kind == "watermark":
                self.clock.watermark = max(self.clock.watermark, arg)
                for key in sorted(self.keys):
                    self.on_timers(key)
            else:
                self.clock.processing_time += arg
                for key in sorted(self.keys):
                    self.on_timers(key)
        return self.out

    # ---- elements ---------------------------------------------------------------------------

    def process_elements(self, name: str, elements: list[tuple[int, int]]) -> None:
        key = self.keys.setdefault(name, Key(Store(self.clock)))
        watermark = self.clock.watermark
        assigned = []
        for time, value in elements:
            for window in self.window_fn.assign(WindowFn.AssignContext(Timestamp.of(time))):
                if _int(window.end) + self.pipeline.lateness <= watermark:
                    self.out.dropped.append((self.step, name, time, value, _int(window.start), _int(window.end), DROPPED_LATE))
                else:
                    assigned.append((time, value, window))
        if not assigned:
            return
        merged_into = self.merge(name, key, {w for _, _, w in assigned}) if self.merging else {}
        targets = {merged_into.get(w, w) for _, _, w in assigned}
        considered = [w for w in targets if not (w in key.windows and key.windows[w].closed)]
        for time, value, window in assigned:
            target = merged_into.get(window, window)
            state = key.windows.setdefault(target, Window())
            if state.closed:
                self.out.dropped.append((self.step, name, time, value, _int(window.start), _int(window.end), DROPPED_CLOSED))
                continue
            state.total += value
            state.pending += 1
            state.held |= _int(target.end) > watermark
            self.trigger.on_element(value, target, key.store.at(target, self.clock))
        for window in sorted(considered, key=_bounds):
            context = key.store.at(window, self.clock)
            if self.trigger.should_fire(TimeDomain.WATERMARK, _time(watermark), window, context):
                self.emit(name, key, window)

    def merge(self, name: str, key: Key, new: set) -> dict:
        """Merge the new windows with the key's active (open) windows, as MergingActiveWindowSet does."""
        active = {w for w, state in key.windows.items() if not state.closed}
        merges: list[tuple[list, IntervalWindow]] = []

        class Context(WindowFn.MergeContext):
            def merge(self, to_be_merged, merge_result):
                merges.append((list(to_be_merged), merge_result))

        self.window_fn.merge(Context(active | new))
        merged_into = {}
        for to_be_merged, result in merges:
            sources = [w for w in to_be_merged if w in active]
            if result in key.windows and key.windows[result].closed:
                # Java resumes the closed window's finished trigger, drops the elements and loses
                # the merged windows' state at garbage collection; we keep it (docs/engine.md).
                self.out.corners.add("merged into a closed window")
            merged = key.windows.get(result) if result in sources else None
            state = merged or Window()
            for window in sources:
                if window != result:
                    gone = key.windows.pop(window)
                    state.total += gone.total
                    state.pending += gone.pending
            key.windows[result] = state
            held_before = any(self.held_before.get((name, w), False) for w in sources)
            self.held_before[(name, result)] = held_before
            state.held = _int(result.end) > self.clock.watermark
            key.store.merge(sources, result)
            self.trigger.on_merge(to_be_merged, result, key.store.at(result, self.clock))
            for window in to_be_merged:
                merged_into[window] = result
        return merged_into

    # ---- timers -------------------------------------------------------------------------------

    def on_timers(self, name: str) -> None:
        key = self.keys[name]
        watermark, now = self.clock.watermark, self.clock.processing_time
        for window in sorted(list(key.windows), key=_bounds):
            state = key.windows[window]
            if _int(window.end) + self.pipeline.lateness <= watermark or watermark >= INFINITY:
                if not state.closed:
                    self.on_trigger(name, key, window, final=True)
                del key.windows[window]
                key.store.forget(window)
                continue
            timers = key.store.timers.get(window, {})
            due = [k for k, when in timers.items()
                   if (_int(when) <= watermark if k[1] == TimeDomain.WATERMARK else when <= now)]
            superseded = key.store.superseded[window]
            woken_by_superseded = any(when <= now for when in superseded)
            superseded -= {when for when in superseded if when <= now}
            if not due and not woken_by_superseded:
                continue
            for k in due:
                timers.pop(k)
            context = key.store.at(window, self.clock)
            if not state.closed and self.trigger.should_fire(TimeDomain.WATERMARK, _time(watermark), window, context):
                self.emit(name, key, window)

    # ---- panes --------------------------------------------------------------------------------

    def emit(self, name: str, key: Key, window: IntervalWindow) -> None:
        context = key.store.at(window, self.clock)
        finished = bool(self.trigger.on_fire(_time(self.clock.watermark), window, context))
        self.on_trigger(name, key, window, final=finished)
        state = key.windows[window]
        if finished:
            state.closed = True
            key.store.tags.pop(window, None)

    def on_trigger(self, name: str, key: Key, window: IntervalWindow, final: bool) -> None:
        state = key.windows[window]
        end = _int(window.end)
        behind = end <= self.watermark_before and not self.held_before.get((name, window), False)
        if behind or state.timing in (ON_TIME, LATE):
            timing = LATE
        elif self.clock.watermark < end:
            timing = EARLY
        else:
            timing = ON_TIME
        if state.pending > 0 or timing == ON_TIME:
            state.index += 1
            state.timing = timing
            self.out.panes.append((self.step, name, _int(window.start), end, state.total, timing, state.index))
        state.pending = 0
        state.held = False
        if not self.pipeline.accumulating or final:
            state.total = 0


def _bounds(window: IntervalWindow) -> tuple[int, int]:
    return _int(window.start), _int(window.end)
