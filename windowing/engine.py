"""The runner-agnostic engine step, vectorized across keys and windows.

``step(spec, state, elements, watermark, processing_time)`` takes the window
table of any number of keys and the new elements of a step, and returns the
panes that fired, the new window table and the elements it dropped. Runners
call it once per step (pandas), or once per bucket of keys and micro-batch
(Spark). It never reads a clock: watermark and processing time come in.

The window table (one row per key and window) is laid out in `windowing.window_table`; the
step's parts live beside it: `windowing.key_codes` (keys as integer codes), `windowing.reductions`
(accumulation over groups), `windowing.sessions` (session merging), `windowing.panes` (pane
emission).

One step, as Beam Java's ReduceFnRunner does it per window but for all
windows at once: assign windows; drop elements whose window is past the
lateness horizon; aggregate the rest per (key, window); merge sessions with
the open sessions of their key (retracting the panes of merged-away windows);
let the trigger see the new elements; evaluate the trigger of every open
window that received elements or has a due timer; emit panes (and
retractions); fire a final pane for windows being garbage-collected that
still hold unfired elements or are owed their ON_TIME pane; purge windows
past the horizon. docs/engine.md states the rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from triggers import NO_TIME, AccumulationMode, Fired, TriggerContext

from . import columns
from .key_codes import compact, factorize_keys, take, value_codes
from .panes import emit, retraction_rows, window_timings
from .reductions import group_reduce, merge_accumulators, partial_accumulators
from .sessions import candidate_groups, same_windows, session_groups
from .spec import DROPPED_CLOSED, DROPPED_LATE, ON_TIME, EngineSpec, StepResult
from .timeaxis import MAX_TIME, add_saturating
from .window_table import current_layout, frame_of, fresh_accumulators


def step(spec: EngineSpec, state: pd.DataFrame, elements: pd.DataFrame, watermark: int,
         processing_time: int) -> StepResult:
    """Advance the windows of many keys by one step.

    ``elements`` has the key columns ``_k0``..., the int64 event time ``_t``
    and one value column ``_v<i>`` per aggregation that reads a column. The
    watermark is the one in force during the step: it decides which elements
    are dropped and which windows fire.
    """
    state = current_layout(spec, state)
    dropped: list[pd.DataFrame] = []
    retractions: list[pd.DataFrame] = []

    pairs = _assign(spec, elements, watermark, dropped)
    partial = _aggregate_pairs(spec, elements, pairs)
    table, counts, merged = _combine(spec, state, partial, pairs, elements.index, watermark, dropped, retractions)

    n = len(table["start"])
    end = table["end"]
    ctx = TriggerContext({k: v for k, v in table.items() if k.startswith("t.")}, end, watermark, processing_time)
    open_rows = ~table["closed"]
    arrived = open_rows & (counts > 0)
    if arrived.any():
        table["end_timer"] = table["end_timer"] | spec.trigger.on_elements(ctx, arrived, counts)
    purge = end <= lateness_horizon(spec, watermark)
    # Beam calls a trigger for a window's elements and for its timers only: a step without either
    # must not fire it (an empty firing would still advance or finish it).
    due = open_rows & ~purge & (arrived | (table["end_timer"] & (end <= watermark))
                                | spec.trigger.timer_due(ctx))
    fire = spec.trigger.should_fire(ctx, due) if due.any() else np.zeros(n, dtype=bool)
    firing = spec.trigger.on_fire(ctx, fire) if fire.any() else Fired.nothing(n)
    finished = firing.finished
    if spec.trigger.uses_processing_time():
        spec.trigger.consume_due_timers(ctx, np.ones(n, dtype=bool))
    table.update(ctx.columns)

    timing = window_timings(table, watermark)
    # Garbage collection: a last pane if the window holds unfired elements or is owed its ON_TIME
    # pane (Beam Java's ClosingBehavior.FIRE_IF_NON_EMPTY and OnTimeBehavior.FIRE_ALWAYS).
    final = purge & open_rows & ((table["n_pending"] > 0) | (timing == ON_TIME))
    panes = emit(spec, table, fire, final, timing, firing.forced, retractions)

    fired = fire | final
    table["n_pending"] = np.where(fired, 0, table["n_pending"])
    # A firing releases the window's element holds; elements arriving before the watermark passes
    # the end set them (in a session, a merge sets them anew: Beam's END_OF_WINDOW hold).
    holds_now = end > watermark
    table["held"] = ~fired & np.where(merged, holds_now, table["held"] | ((counts > 0) & holds_now))
    table["end_timer"] = table["end_timer"] & ~(end <= watermark)
    reset_acc = finished | (fire if spec.mode is AccumulationMode.DISCARDING else np.zeros(n, dtype=bool))
    if reset_acc.any():
        fresh = fresh_accumulators(spec, int(reset_acc.sum()))
        for name, values in fresh.items():
            column = table[name].copy()
            column[reset_acc] = values
            table[name] = column
    table["closed"] = table["closed"] | finished
    table["on_time_done"] = table["on_time_done"] | (table["end"] <= watermark)

    keep = ~purge
    new_state = frame_of({name: values[keep] for name, values in table.items()})
    dropped_frame = pd.concat(dropped, ignore_index=True) if dropped else pd.DataFrame(
        {"element": [], "start": np.array([], np.int64), "end": np.array([], np.int64), "reason": []})
    return StepResult(panes=panes, state=new_state, dropped=dropped_frame)


@dataclass
class _Pairs:
    """Element-window pairs: element position in the step's elements, window bounds."""

    element: np.ndarray
    start: np.ndarray
    end: np.ndarray
    group: np.ndarray | None = None  # the partial window each pair landed in


def _assign(spec: EngineSpec, elements: pd.DataFrame, watermark: int, dropped: list[pd.DataFrame]) -> _Pairs:
    """Element-window pairs, without those past the lateness horizon (reported as dropped)."""
    times = elements[columns.TIME].to_numpy(dtype=np.int64)
    index, start, end = spec.windows.assign(times)
    horizon = lateness_horizon(spec, watermark)
    if len(end):
        expired = end <= horizon
        if expired.any():
            dropped.append(pd.DataFrame({"element": elements.index[index[expired]], "start": start[expired],
                                         "end": end[expired], "reason": DROPPED_LATE}))
            index, start, end = index[~expired], start[~expired], end[~expired]
    return _Pairs(index, start, end)


def lateness_horizon(spec: EngineSpec, watermark: int) -> int:
    """Windows ending at or before this are past the allowed lateness (end + lateness <= watermark).

    ``end + lateness`` saturates at the end of time (Beam's garbage-collection time), so at
    the end of input every window, the global one included, is past the horizon.
    """
    if watermark >= MAX_TIME:
        return MAX_TIME
    return max(watermark - spec.allowed_lateness, int(np.iinfo(np.int64).min))


def _aggregate_pairs(spec: EngineSpec, elements: pd.DataFrame, pairs: _Pairs) -> dict[str, np.ndarray]:
    """Columns of one row per (key, window) of the step holding the pairs' partial accumulators.

    For sessions, the rows are the step's proto-sessions already merged with
    each other; merging with the existing sessions happens in `_combine`.
    """
    n_src = len(elements)
    key_values = [take(elements[k].to_numpy(), pairs.element, n_src) for k in spec.key_columns]
    key_code, key_columns = factorize_keys(key_values)
    out: dict[str, np.ndarray] = {}
    if spec.windows.merging:  # the step's proto-sessions merge among themselves first
        group = session_groups(key_code, pairs.start, pairs.end)
        n_groups = int(group.max()) + 1 if len(group) else 0
        key_of_group = np.empty(n_groups, dtype=np.int64)
        key_of_group[group] = key_code
        out.update({name: column[key_of_group] for name, column in zip(spec.key_columns, key_columns)})
        out["start"] = group_reduce(pairs.start, group, n_groups, "min")
        out["end"] = group_reduce(pairs.end, group, n_groups, "max")
        # One proto-session, however many elements: equal to an open session, it merges with nothing.
        out["one_proto"] = out["start"] == group_reduce(pairs.start, group, n_groups, "max")
    else:  # a (key, start) pair identifies the window: end is a function of start
        start_code, start_uniques = value_codes(pairs.start)
        n_starts = max(len(start_uniques), 1)
        group, combos = compact(key_code * n_starts + start_code, len(key_columns[0]) * n_starts)
        n_groups = len(combos)
        out.update({name: column[combos // n_starts] for name, column in zip(spec.key_columns, key_columns)})
        out["start"] = np.asarray(start_uniques, dtype=np.int64)[combos % n_starts]
        end = np.empty(n_groups, dtype=np.int64)
        end[group] = pairs.end
        out["end"] = end
    pairs.group = group
    out["n_new"] = np.bincount(group, minlength=n_groups).astype(np.int64)
    values = [None if columns.value(i) not in elements else take(elements[columns.value(i)].to_numpy(), pairs.element, n_src)
              for i in range(len(spec.aggregations))]
    out.update(partial_accumulators(spec.aggregations, values, group, n_groups))
    return out


def _window_rows(spec: EngineSpec, n: int, end: np.ndarray, watermark: int) -> dict[str, np.ndarray]:
    """Pane metadata and trigger state of ``n`` windows that have never fired."""
    out = {"on_time_done": end <= watermark, "closed": np.zeros(n, dtype=bool),
           "held": np.zeros(n, dtype=bool), "end_timer": np.zeros(n, dtype=bool),
           "pane_index": np.zeros(n, dtype=np.int64), "emitted": np.zeros(n, dtype=bool),
           "last_timing": np.zeros(n, dtype=np.int8)}
    for name in spec.last_output_columns:
        out[name] = np.full(n, None, dtype=object)
    out.update(spec.trigger.fresh_state(n))
    return out


def _combine(spec: EngineSpec, state: pd.DataFrame, new: dict[str, np.ndarray], pairs: _Pairs, labels: pd.Index,
             watermark: int, dropped: list[pd.DataFrame],
             retractions: list[pd.DataFrame]) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Fold the step's partial windows (``new``, as columns) into the window table; merge sessions.

    Returns the new table (as columns), per row how many elements it received
    in this step, and where a session merge made the row (Beam's merge callback
    ran: it holds the watermark anew).
    """
    if len(new["n_new"]) == 0:
        table = {name: state[name].to_numpy() for name in state.columns}
        return table, np.zeros(len(state), dtype=np.int64), np.zeros(len(state), dtype=bool)
    if len(state) == 0 and not spec.windows.merging:  # every partial window is a new window
        table = {name: values for name, values in new.items() if name != "n_new"}
        table.update(_window_rows(spec, len(new["n_new"]), table["end"], watermark), n_pending=new["n_new"])
        return {name: table[name] for name in state.columns}, new["n_new"], np.zeros(len(new["n_new"]), dtype=bool)

    groups = _candidate_groups(spec, state, new)
    open_partials = _drop_elements_of_closed_windows(groups, pairs, labels, dropped)
    touched = _touched_groups(groups, open_partials)
    res = _group_rows(spec, state, groups, touched)
    _pane_metadata(spec, groups, touched, res, watermark)
    _merged_trigger_state(spec, state, groups, touched, res, watermark)
    if spec.mode is AccumulationMode.ACCUMULATING_AND_RETRACTING:
        gone = touched.merged_away & groups.old["emitted"]
        if gone.any():
            retractions.append(retraction_rows(spec, {c: groups.old[c][gone] for c in state.columns}, merged_away=True))

    untouched_old = ~touched.old_touched
    table = {name: np.concatenate([groups.aside[name], groups.old[name][untouched_old], res[name]]) for name in state.columns}
    n_kept = len(groups.aside["start"]) + int(untouched_old.sum())
    counts = np.concatenate([np.zeros(n_kept, np.int64), touched.counts * ~res["closed"]])
    return table, counts, np.concatenate([np.zeros(n_kept, dtype=bool), _merges(spec, groups, touched)])


@dataclass
class _Groups:
    """The open windows taking part (``old``; closed sessions stay ``aside``) and the step's partial
    windows (``new``), grouped: windows of a key that overlap (sessions) or are equal share a group."""

    old: dict[str, np.ndarray]
    aside: dict[str, np.ndarray]
    new: dict[str, np.ndarray]
    candidates: dict[str, np.ndarray]
    """Keys, start and end of the old windows, then of the new ones."""
    group: np.ndarray
    n_groups: int
    start: np.ndarray
    end: np.ndarray
    """Each group's window: the earliest start and latest end of its members."""
    head: np.ndarray
    """Each group's first member (its keys)."""
    old_per_group: np.ndarray
    closed: np.ndarray
    """Groups that are a closed window: their new elements are dropped."""

    @property
    def n_old(self) -> int:
        return len(self.old["start"])

    @property
    def old_group(self) -> np.ndarray:
        return self.group[:self.n_old]

    @property
    def new_group(self) -> np.ndarray:
        return self.group[self.n_old:]


def _candidate_groups(spec: EngineSpec, state: pd.DataFrame, new: dict[str, np.ndarray]) -> _Groups:
    keys = spec.key_columns
    # Columns as NumPy arrays once: a pandas column lookup costs more than most steps' arithmetic.
    table_now = {name: state[name].to_numpy() for name in state.columns}
    # Closed sessions take no part in merging: Beam Java removes a window whose trigger finished
    # from its active windows, so a new session beside or across one starts afresh.
    joins = ~table_now["closed"] if spec.windows.merging else np.ones(len(state), dtype=bool)
    aside = {name: values[~joins] for name, values in table_now.items()}
    old = {name: values[joins] for name, values in table_now.items()}
    n_old = int(joins.sum())
    cand = {c: np.concatenate([old[c], new[c]]) for c in keys + ["start", "end"]}
    group = candidate_groups(spec, cand)
    n_groups = int(group.max()) + 1 if len(group) else 0

    old_group = group[:n_old]
    old_per_group = np.bincount(old_group, minlength=n_groups)
    closed_group = (old_per_group > 0) & (np.bincount(old_group, weights=old["closed"], minlength=n_groups) == old_per_group)
    g_start = np.full(n_groups, MAX_TIME, np.int64)
    np.minimum.at(g_start, group, cand["start"])
    g_end = np.full(n_groups, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(g_end, group, cand["end"])
    head_of_group = np.full(n_groups, -1, dtype=np.int64)
    head_of_group[group[::-1]] = np.arange(len(group))[::-1]
    if len(aside["start"]):  # a session of new elements only that is a closed session is that window
        closed_group |= (old_per_group == 0) & same_windows(
            spec, {k: cand[k][head_of_group] for k in keys}, g_start, g_end, aside)
    return _Groups(old, aside, new, cand, group, n_groups, g_start, g_end, head_of_group, old_per_group, closed_group)


def _drop_elements_of_closed_windows(groups: _Groups, pairs: _Pairs, labels: pd.Index,
                                     dropped: list[pd.DataFrame]) -> np.ndarray:
    """Elements that land in a closed window are dropped: Beam drops data for closed windows.
    Returns which partial windows are open."""
    partial_ok = ~groups.closed[groups.new_group]
    if not partial_ok.all():
        bad = np.flatnonzero(~partial_ok)
        assert pairs.group is not None  # set by the grouping above
        bad_pairs = np.isin(pairs.group, bad)
        dropped.append(pd.DataFrame({"element": labels[pairs.element[bad_pairs]], "start": pairs.start[bad_pairs],
                                     "end": pairs.end[bad_pairs], "reason": DROPPED_CLOSED}))
    return partial_ok


@dataclass
class _Touched:
    """The groups that received open elements, each one result row, and where their rows come from."""

    old_touched: np.ndarray
    """Old rows whose group is touched: replaced by the group's result row."""
    in_place_old: np.ndarray
    """Old rows that are their touched group's window as it was: updated in place, pane metadata kept."""
    merged_away: np.ndarray
    ids: np.ndarray
    """The touched groups, in result-row order."""
    result_of_group: np.ndarray
    src_old: np.ndarray
    src_new: np.ndarray
    """The old and new rows that fold into a result row."""
    counts: np.ndarray
    """Per result row, the elements it received in this step."""
    in_place: np.ndarray

    @property
    def n(self) -> int:
        return len(self.ids)


def _touched_groups(groups: _Groups, partial_ok: np.ndarray) -> _Touched:
    is_new = np.arange(len(groups.group)) >= groups.n_old
    old_group, new_group, old = groups.old_group, groups.new_group, groups.old
    new_rows_per_group = np.bincount(groups.group, weights=is_new, minlength=groups.n_groups).astype(np.int64)
    touched = (new_rows_per_group > 0) & ~(groups.closed & (groups.old_per_group == 0))
    old_touched = touched[old_group]
    in_place_old = old_touched & (groups.old_per_group[old_group] == 1) & \
        (old["start"] == groups.start[old_group]) & (old["end"] == groups.end[old_group])
    # Result rows: untouched old rows as they are, then one row per touched group.
    touched_ids = np.flatnonzero(touched)
    result_of_group = np.full(groups.n_groups, -1, dtype=np.int64)
    result_of_group[touched_ids] = np.arange(len(touched_ids))
    n_res = len(touched_ids)
    src_old, src_new = np.flatnonzero(old_touched), np.flatnonzero(partial_ok)
    counts = np.zeros(n_res, dtype=np.int64)
    np.add.at(counts, result_of_group[new_group[src_new]], groups.new["n_new"][src_new])
    in_place = np.zeros(n_res, dtype=bool)
    in_place[result_of_group[old_group[in_place_old]]] = True
    return _Touched(old_touched, in_place_old, old_touched & ~in_place_old, touched_ids, result_of_group, src_old, src_new,
                    counts, in_place)


def _group_rows(spec: EngineSpec, state: pd.DataFrame, groups: _Groups, touched: _Touched) -> dict[str, np.ndarray]:
    """The touched groups' rows: keys, window, accumulators merged from the touched old rows and
    the open partials, pending elements, closed."""
    old, new, n_res = groups.old, groups.new, touched.n
    src_old, src_new = touched.src_old, touched.src_new
    res: dict[str, np.ndarray] = {}
    heads = groups.head[touched.ids]
    for k in spec.key_columns:
        res[k] = groups.candidates[k][heads]
    res["start"], res["end"] = groups.start[touched.ids], groups.end[touched.ids]
    acc_names = [c for c in state.columns if c.startswith("a")]
    acc_rows = {name: np.concatenate([old[name][src_old], new[name][src_new]]) for name in acc_names}
    acc_group = touched.result_of_group[np.concatenate([groups.old_group[src_old], groups.new_group[src_new]])]
    # Every touched group has a source row: its open partials, or else its closed old window.
    res.update(merge_accumulators(spec, acc_rows, acc_group, n_res))
    pending_old = np.zeros(n_res, dtype=np.int64)
    np.add.at(pending_old, touched.result_of_group[groups.old_group[src_old]], old["n_pending"][src_old])
    res["n_pending"] = pending_old + touched.counts
    res["closed"] = groups.closed[touched.ids]
    return res


def _pane_metadata(spec: EngineSpec, groups: _Groups, touched: _Touched, res: dict[str, np.ndarray], watermark: int) -> None:
    """Pane metadata: kept for windows updated in place, fresh for new and merged windows."""
    old, n_res = groups.old, touched.n
    from_old = touched.result_of_group[groups.old_group[touched.src_old]]
    all_old_done = np.ones(n_res, dtype=bool)
    np.logical_and.at(all_old_done, from_old, old["on_time_done"][touched.src_old])
    res["on_time_done"] = np.where(touched.in_place, False, (res["end"] <= watermark) & all_old_done)
    # Holds and end-of-window timers of the windows merging in (those of a new window: none yet).
    for name in ("held", "end_timer"):
        res[name] = np.zeros(n_res, dtype=bool)
        np.logical_or.at(res[name], from_old, old[name][touched.src_old])
    res["pane_index"] = np.zeros(n_res, dtype=np.int64)
    res["emitted"] = np.zeros(n_res, dtype=bool)
    res["last_timing"] = np.zeros(n_res, dtype=np.int8)
    for name in spec.last_output_columns:
        res[name] = np.full(n_res, None, dtype=object)
    if touched.in_place_old.any():
        dst = touched.result_of_group[groups.old_group[touched.in_place_old]]
        for name in ["on_time_done", "pane_index", "emitted", "last_timing", *spec.last_output_columns]:
            res[name][dst] = old[name][touched.in_place_old]


def _merged_trigger_state(spec: EngineSpec, state: pd.DataFrame, groups: _Groups, touched: _Touched,
                          res: dict[str, np.ndarray], watermark: int) -> None:
    """Trigger state: merged from the old windows (Beam on_merge), fresh for new windows."""
    old, src_old = groups.old, touched.src_old
    from_old = touched.result_of_group[groups.old_group[src_old]]
    trig_names = [c for c in state.columns if c.startswith("t.")]
    fresh = spec.trigger.fresh_state(touched.n)
    src_ctx = TriggerContext({c: old[c][src_old] for c in trig_names}, old["end"][src_old], watermark, 0)
    dst_ctx = TriggerContext(dict(fresh), res["end"], watermark, 0)
    if len(src_old):
        spec.trigger.merge(src_ctx, from_old, dst_ctx)
    no_old = np.bincount(from_old, minlength=touched.n) == 0
    for c in trig_names:
        res[c] = np.where(no_old, fresh[c], dst_ctx.columns[c]).astype(fresh[c].dtype)


def _merges(spec: EngineSpec, groups: _Groups, touched: _Touched) -> np.ndarray:
    """Per result row, whether a session merge made it. A session receiving elements is a merge
    (proto-sessions with the open sessions they overlap), but for an open session whose new
    elements all have its very proto-session."""
    if not spec.windows.merging:
        return np.zeros(touched.n, dtype=bool)
    new, new_group, n_groups = groups.new, groups.new_group, groups.n_groups
    equal = new["one_proto"] & (new["start"] == groups.start[new_group]) & (new["end"] == groups.end[new_group])
    alone = (np.bincount(new_group, minlength=n_groups) == 1) & (np.bincount(new_group, weights=equal, minlength=n_groups) == 1)
    return ~(touched.in_place & alone[touched.ids])


def next_timers(spec: EngineSpec, state: pd.DataFrame, processing_time: int) -> tuple[int, int]:
    """When the table next needs a step without new elements.

    Returns ``(watermark_time, processing_time)``: the earliest watermark at
    which a window fires ON_TIME or is garbage-collected, and the earliest
    processing time after ``processing_time`` (that of the step that made
    ``state``) at which a trigger may fire; ``NO_TIME`` when none. A
    streaming runner turns them into timeouts.

    A timer at or before ``processing_time`` was due in that step, which
    evaluated every open window, so triggers do not report it
    (``Trigger.next_processing_time``).
    """
    if len(state) == 0:
        return NO_TIME, NO_TIME
    end = state["end"].to_numpy()
    due_on_time = np.where(state["on_time_done"].to_numpy(), NO_TIME, end)
    watermark_time = int(min(due_on_time.min(), add_saturating(end, spec.allowed_lateness).min()))
    open_rows = ~state["closed"].to_numpy()
    ctx = TriggerContext({c: state[c].to_numpy() for c in state.columns if c.startswith("t.")}, end, 0, processing_time)
    pending = np.where(open_rows, spec.trigger.next_processing_time(ctx), NO_TIME)
    return watermark_time, int(pending.min())
