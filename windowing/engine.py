"""The runner-agnostic engine step, vectorized across keys and windows.

``step(spec, state, elements, watermark, processing_time)`` takes the window
table of any number of keys and the new elements of a step, and returns the
panes that fired, the new window table and the elements it dropped. Runners
call it once per step (pandas), or once per bucket of keys and micro-batch
(Spark). It never reads a clock: watermark and processing time come in.

The window table has one row per (key, window) with columns:

==================  ==========================================================
``_k0`` ...         the key (one column per key column; a constant if not keyed)
``start``, ``end``  the window, int64, end exclusive
``on_time_done``    the watermark passed ``end`` before this step
``closed``          the root trigger finished: elements are dropped until purge
``n_pending``       elements since the last firing (0: the pane is empty)
``held``            elements that arrived before the watermark passed ``end`` wait for a pane
                    (Beam's element holds: the output watermark stays behind ``end``)
``end_timer``       a trigger asked to be evaluated when the watermark passes ``end``
``pane_index``      panes emitted so far (the next pane's index)
``emitted``         a pane was emitted, so ``o<i>`` and ``last_timing`` are set
``last_timing``     timing code of the last pane (for its retraction row)
``a<i>.<field>``    vectorized accumulator fields of aggregation ``i``
``a<i>``            Python accumulator of aggregation ``i`` (slow path)
``o<i>``            the last emitted output of aggregation ``i``
``t.<...>``         trigger state columns (see `triggers.base`)
==================  ==========================================================

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

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from accumulations import Accumulation
from accumulations.base import Reduction
from triggers import NO_TIME, AccumulationMode, Trigger, TriggerContext

from .errors import WindowingConfigError
from .timeaxis import MAX_TIME, add_saturating
from .windows import WindowFn

TIMINGS = ("EARLY", "ON_TIME", "LATE")
EARLY, ON_TIME, LATE = 0, 1, 2  # pane ``timing`` codes in engine output; runners name them

DROPPED_LATE = "beyond allowed lateness"
DROPPED_CLOSED = "window closed (trigger finished)"


@dataclass(frozen=True)
class Aggregation:
    """One output column: its name, its accumulation, and the dtype of its input column."""

    name: str
    accumulation: Accumulation[Any, Any, Any]
    input_dtype: Any = None

    @property
    def vectorized(self) -> bool:
        return self.accumulation.vector_fields() is not None

    @property
    def fields(self) -> Mapping[str, Reduction]:
        """A vectorized accumulation's fields and how each merges."""
        fields = self.accumulation.vector_fields()
        assert fields is not None, f"{self.accumulation!r} is not vectorized"
        return fields

    def field_defaults(self) -> dict[str, Any]:
        return self.accumulation.vector_defaults(np.dtype(self.input_dtype or np.int64))


@dataclass(frozen=True)
class EngineSpec:
    """Everything the step needs, with durations already in the time axis's unit."""

    windows: WindowFn
    trigger: Trigger
    mode: AccumulationMode
    aggregations: tuple[Aggregation, ...]
    allowed_lateness: int = 0
    fire_only_updated: bool = False
    n_keys: int = 1

    @property
    def key_columns(self) -> list[str]:
        return [f"_k{i}" for i in range(self.n_keys)]


@dataclass
class StepResult:
    panes: pd.DataFrame
    state: pd.DataFrame
    dropped: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Dropped element-window pairs: ``element`` (the index label in the step's
    elements), ``start``, ``end`` and ``reason``."""


# ---- the window table --------------------------------------------------------------------

_WINDOW_COLUMNS = {"start": np.int64, "end": np.int64, "on_time_done": bool, "closed": bool, "n_pending": np.int64,
                   "held": bool, "end_timer": bool, "pane_index": np.int64, "emitted": bool, "last_timing": np.int8}
"""The columns every window table has between its key columns and its accumulators, with dtypes."""


def _accumulator_columns(spec: EngineSpec) -> dict[str, np.dtype]:
    columns: dict[str, np.dtype] = {}
    for i, agg in enumerate(spec.aggregations):
        if agg.vectorized:
            for fname, default in agg.field_defaults().items():
                columns[f"a{i}.{fname}"] = np.asarray(default).dtype
        else:
            columns[f"a{i}"] = np.dtype(object)
        columns[f"o{i}"] = np.dtype(object)
    return columns


def empty_state(spec: EngineSpec, key_dtypes: list[Any] | None = None) -> pd.DataFrame:
    """A window table with no windows, with the columns and dtypes of ``spec``."""
    columns: dict[str, Any] = {}
    for i, name in enumerate(spec.key_columns):
        columns[name] = pd.Series([], dtype=(key_dtypes[i] if key_dtypes else object))
    columns.update({name: np.array([], dtype) for name, dtype in _WINDOW_COLUMNS.items()})
    columns.update({name: np.array([], dtype) for name, dtype in _accumulator_columns(spec).items()})
    columns.update(spec.trigger.fresh_state(0))
    return pd.DataFrame(columns)


def table_columns(spec: EngineSpec) -> list[str]:
    """The names of a window table's columns, in order (`empty_state`'s)."""
    return [*spec.key_columns, *_WINDOW_COLUMNS, *_accumulator_columns(spec), *spec.trigger.columns()]


def current_layout(spec: EngineSpec, state: pd.DataFrame) -> pd.DataFrame:
    """``state`` with the columns of this release's window table.

    A table written by an earlier release (a Spark checkpoint) may name its trigger state by the
    position of each nested trigger (``t.0.0.count``, `Trigger.numbered_columns`) and lack the
    ``held`` and ``end_timer`` columns. Its windows then count as holding back the watermark while
    they hold elements and the watermark has not passed their end, and as waiting for the
    watermark to pass their end: as that release did, which evaluated every window in every step.
    """
    names = table_columns(spec)
    if list(state.columns) == names:
        return state
    have = set(state.columns)
    trigger_names = {name for name in names if name.startswith("t.")}
    if trigger_names <= have:
        source = {name: name for name in names}
    else:
        numbered = spec.trigger.numbered_columns()
        if not set(numbered.values()) <= have:
            raise WindowingConfigError(
                f"the stored window table has trigger state {sorted(c for c in have if c.startswith('t.'))}, not that of "
                f"{spec.trigger!r} ({sorted(trigger_names)}): restore the pipeline, or start from a new checkpoint")
        source = {name: numbered.get(name, name) for name in names}
    defaults = {"held": lambda: (state["n_pending"] > 0) & ~state["on_time_done"],
                "end_timer": lambda: ~state["on_time_done"] & ~state["closed"]}
    missing = [name for name in names if source[name] not in have and name not in defaults]
    if missing:
        raise WindowingConfigError(f"the stored window table lacks the columns {missing}: it was not written by "
                                   "this pipeline; restore the pipeline, or start from a new checkpoint")
    return pd.DataFrame({name: state[source[name]] if source[name] in have else defaults[name]()
                         for name in names}, index=state.index)


def frame_of(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """A DataFrame of these NumPy columns as they are.

    pandas infers ``str`` or ``datetime64`` from an object column of strings or Timestamps:
    a None key would become NaN, and a column of last outputs could no longer hold objects.
    """
    return pd.DataFrame({name: pd.Series(values, dtype=object, copy=False) if values.dtype == object else values
                         for name, values in columns.items()})


def _fresh_accumulators(spec: EngineSpec, n: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for i, agg in enumerate(spec.aggregations):
        if agg.vectorized:
            for fname, default in agg.field_defaults().items():
                out[f"a{i}.{fname}"] = np.full(n, default, dtype=np.asarray(default).dtype)
        else:
            acc = agg.accumulation
            out[f"a{i}"] = _object_array([acc.default_accumulated_value() for _ in range(n)])
    return out


def _object_array(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


# ---- accumulation over groups ---------------------------------------------------------------

def group_reduce(values: np.ndarray, group: np.ndarray, n_groups: int, how: str) -> np.ndarray:
    """Reduce ``values`` per group id (0..n_groups-1) with ``sum``, ``min`` or ``max``.

    Sums use ``bincount`` (compiled, no sort) whenever float64 holds the
    result exactly; ``ufunc.at`` otherwise, and an integer sum beyond its
    dtype's range raises OverflowError instead of wrapping around.
    """
    values = np.asarray(values)
    if how == "sum":
        if values.dtype.kind == "f":
            return np.bincount(group, weights=values, minlength=n_groups)
        approx = np.bincount(group, weights=values, minlength=n_groups)
        if len(values) == 0 or float(np.abs(values).max()) * len(values) < 2.0**53:
            return approx.astype(values.dtype)
        out = np.zeros(n_groups, dtype=values.dtype)
        np.add.at(out, group, values)
        # A wrapped sum is off by a multiple of 2**64; float64's rounding error is far below 2**62.
        if np.any(np.abs(approx - out.astype(np.float64)) > 2.0**62):
            raise OverflowError(f"a sum is beyond the range of {values.dtype}")
        return out
    ufunc = np.minimum if how == "min" else np.maximum
    if values.dtype.kind == "f":
        identity = np.inf if how == "min" else -np.inf
    else:
        info = np.iinfo(values.dtype)
        identity = info.max if how == "min" else info.min
    out = np.full(n_groups, identity, dtype=values.dtype)
    ufunc.at(out, group, values)
    return out


def _reduce_field(agg: Aggregation, values: np.ndarray, group: np.ndarray, n_groups: int, how: str) -> np.ndarray:
    """`group_reduce` of one accumulator field of ``agg``; an overflow names the aggregation."""
    try:
        return group_reduce(values, group, n_groups, how)
    except OverflowError as error:
        raise OverflowError(
            f"aggregate({agg.name}={agg.accumulation!r}): in a window of column {agg.accumulation.column!r}, {error}; "
            "convert the column to float64 (approximate) or to Python ints (dtype object, exact) first") from None


def group_outputs(aggregations: tuple[Aggregation, ...], values: list[np.ndarray | None], group: np.ndarray,
                  n_groups: int) -> list[np.ndarray]:
    """Each aggregation's output over the values of each group (group ids 0..n_groups-1): what a
    window holding just those values would emit. The Spark runner folds rows with it before the
    shuffle, so a folded row holds what the engine would have computed, overflow checks included."""
    return _outputs(aggregations, _partial_accumulators(aggregations, values, group, n_groups), slice(None))


def _partial_accumulators(aggregations: tuple[Aggregation, ...], values: list[np.ndarray | None], group: np.ndarray,
                          n_groups: int) -> dict[str, np.ndarray]:
    """Accumulate the element-window pairs of each group from scratch."""
    out: dict[str, np.ndarray] = {}
    for i, agg in enumerate(aggregations):
        column = pd.Series(values[i] if values[i] is not None else np.zeros(len(group)))
        if agg.vectorized:
            for fname, lifted in agg.accumulation.vector_lift(column).items():
                out[f"a{i}.{fname}"] = _reduce_field(agg, lifted, group, n_groups, agg.fields[fname])
        else:
            acc = agg.accumulation
            by_group = pd.Series(column.to_numpy(), dtype=object).groupby(group, sort=True)
            out[f"a{i}"] = _object_array(
                [acc.accumulate_all(acc.default_accumulated_value(), list(vals)) for _, vals in by_group])
    return out


def _merge_accumulators(spec: EngineSpec, rows: dict[str, np.ndarray], group: np.ndarray, n_groups: int) -> dict[str, np.ndarray]:
    """Merge the accumulators of rows that share a group (order of rows is kept)."""
    out: dict[str, np.ndarray] = {}
    for i, agg in enumerate(spec.aggregations):
        if agg.vectorized:
            for fname, how in agg.fields.items():
                out[f"a{i}.{fname}"] = _reduce_field(agg, rows[f"a{i}.{fname}"], group, n_groups, how)
        else:
            acc = agg.accumulation
            merged: list[Any] = [None] * n_groups
            seen = np.zeros(n_groups, dtype=bool)
            for g, value in zip(group, rows[f"a{i}"]):
                merged[g] = acc.merge(merged[g], value) if seen[g] else value
                seen[g] = True
            out[f"a{i}"] = _object_array(merged)
    return out


def _outputs(aggregations: tuple[Aggregation, ...], table: dict[str, np.ndarray], rows: np.ndarray | slice) -> list[np.ndarray]:
    """The current output of every aggregation on ``rows``."""
    outs = []
    for i, agg in enumerate(aggregations):
        if agg.vectorized:
            fields = {f: table[f"a{i}.{f}"][rows] for f in agg.fields}
            outs.append(np.asarray(agg.accumulation.vector_output(fields)))
        else:
            acc = agg.accumulation
            outs.append(_object_array([acc.get_output(a) for a in table[f"a{i}"][rows]]))
    return outs


def _same(a: Any, b: Any) -> bool:
    try:
        equal = a == b
        if isinstance(equal, np.ndarray):
            return bool(equal.all())
        if equal:
            return True
    except (TypeError, ValueError):
        return False
    return bool((isinstance(a, float) and isinstance(b, float) and a != a and b != b) or (a is pd.NaT and b is pd.NaT))


def _unchanged(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Where each new output equals the window's previous one (NaN equals NaN)."""
    if new.dtype != object and len(old) and all(isinstance(v, (int, float, np.number)) for v in old[:1]):
        try:
            old_num = np.asarray(list(old), dtype=new.dtype)
        except (TypeError, ValueError, OverflowError):  # an earlier empty pane (None, NaN) against integers
            old_num = None
        if old_num is not None:
            equal = new == old_num
            if new.dtype.kind == "f":
                equal |= np.isnan(new) & np.isnan(old_num)
            return equal
    return np.array([_same(x, y) for x, y in zip(new, old)], dtype=bool)


# ---- the step ----------------------------------------------------------------------------------

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
    purge = end <= _lateness_horizon(spec, watermark)
    # Beam calls a trigger for a window's elements and for its timers only: a step without either
    # must not fire it (an empty firing would still advance or finish it).
    due = open_rows & ~purge & (arrived | (table["end_timer"] & (end <= watermark))
                                | spec.trigger.timer_due(ctx))
    fire = spec.trigger.should_fire(ctx, due) if due.any() else np.zeros(n, dtype=bool)
    finished = spec.trigger.on_fire(ctx, fire) if fire.any() else np.zeros(n, dtype=bool)
    table.update(ctx.columns)

    timing = _timing(table, watermark)
    # Garbage collection: a last pane if the window holds unfired elements or is owed its ON_TIME
    # pane (Beam Java's ClosingBehavior.FIRE_IF_NON_EMPTY and OnTimeBehavior.FIRE_ALWAYS).
    final = purge & open_rows & ((table["n_pending"] > 0) | (timing == ON_TIME))
    panes = _emit(spec, table, fire, final, timing, ctx.force_emit, retractions)

    fired = fire | final
    table["n_pending"] = np.where(fired, 0, table["n_pending"])
    # A firing releases the window's element holds; elements arriving before the watermark passes
    # the end set them (in a session, a merge sets them anew: Beam's END_OF_WINDOW hold).
    holds_now = end > watermark
    table["held"] = ~fired & np.where(merged, holds_now, table["held"] | ((counts > 0) & holds_now))
    table["end_timer"] = table["end_timer"] & ~(end <= watermark)
    reset_acc = finished | (fire if spec.mode is AccumulationMode.DISCARDING else np.zeros(n, dtype=bool))
    if reset_acc.any():
        fresh = _fresh_accumulators(spec, int(reset_acc.sum()))
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
    times = elements["_t"].to_numpy(dtype=np.int64)
    index, start, end = spec.windows.assign(times)
    horizon = _lateness_horizon(spec, watermark)
    if len(end):
        expired = end <= horizon
        if expired.any():
            dropped.append(pd.DataFrame({"element": elements.index[index[expired]], "start": start[expired],
                                         "end": end[expired], "reason": DROPPED_LATE}))
            index, start, end = index[~expired], start[~expired], end[~expired]
    return _Pairs(index, start, end)


def _lateness_horizon(spec: EngineSpec, watermark: int) -> int:
    """Windows ending at or before this are past the allowed lateness (end + lateness <= watermark).

    ``end + lateness`` saturates at the end of time (Beam's garbage-collection time), so at
    the end of input every window, the global one included, is past the horizon.
    """
    if watermark >= MAX_TIME:
        return MAX_TIME
    return max(watermark - spec.allowed_lateness, int(np.iinfo(np.int64).min))


def _take(values: np.ndarray, index: np.ndarray, n_source: int) -> np.ndarray:
    """``values[index]``, skipping the copy when ``index`` is every position in order."""
    if len(index) == n_source and np.array_equal(index, np.arange(n_source)):
        return values
    return values[index]


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and the value of each code.

    Integers spanning a small range get ``value - min`` (no hashing, and
    codes sorted like the values); anything else is factorized.
    """
    if values.dtype.kind in "iu" and len(values):
        low, high = int(values.min()), int(values.max())
        if high - low <= 4 * len(values) + 1024:
            return (values - low).astype(np.int64), np.arange(low, high + 1, dtype=values.dtype)
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniques)


def _compact(combined: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense group ids 0..n-1 for codes in ``[0, bound)``, and the code of each group."""
    if bound <= 8 * len(combined) + 1024:
        present = np.bincount(combined, minlength=bound) > 0
        rank = np.cumsum(present) - 1
        return rank[combined], np.flatnonzero(present)
    group, codes = pd.factorize(combined)
    return group, codes


def _factorize_keys(key_values: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """One int code per row for one or more key columns, and each column's value per code."""
    codes, uniques = _codes(key_values[0])
    columns = [uniques]
    for values in key_values[1:]:
        more, more_uniques = _codes(values)
        codes, combo = _compact(codes * len(more_uniques) + more, len(columns[0]) * len(more_uniques))
        columns = [c[combo // len(more_uniques)] for c in columns] + [more_uniques[combo % len(more_uniques)]]
    return codes, columns


def _aggregate_pairs(spec: EngineSpec, elements: pd.DataFrame, pairs: _Pairs) -> dict[str, np.ndarray]:
    """Columns of one row per (key, window) of the step holding the pairs' partial accumulators.

    For sessions, the rows are the step's proto-sessions already merged with
    each other; merging with the existing sessions happens in `_combine`.
    """
    n_src = len(elements)
    key_values = [_take(elements[k].to_numpy(), pairs.element, n_src) for k in spec.key_columns]
    key_code, key_columns = _factorize_keys(key_values)
    out: dict[str, np.ndarray] = {}
    if spec.windows.merging:  # the step's proto-sessions merge among themselves first
        group = _session_groups(key_code, pairs.start, pairs.end)
        n_groups = int(group.max()) + 1 if len(group) else 0
        key_of_group = np.empty(n_groups, dtype=np.int64)
        key_of_group[group] = key_code
        out.update({name: column[key_of_group] for name, column in zip(spec.key_columns, key_columns)})
        out["start"] = group_reduce(pairs.start, group, n_groups, "min")
        out["end"] = group_reduce(pairs.end, group, n_groups, "max")
        # One proto-session, however many elements: equal to an open session, it merges with nothing.
        out["one_proto"] = out["start"] == group_reduce(pairs.start, group, n_groups, "max")
    else:  # a (key, start) pair identifies the window: end is a function of start
        start_code, start_uniques = _codes(pairs.start)
        n_starts = max(len(start_uniques), 1)
        group, combos = _compact(key_code * n_starts + start_code, len(key_columns[0]) * n_starts)
        n_groups = len(combos)
        out.update({name: column[combos // n_starts] for name, column in zip(spec.key_columns, key_columns)})
        out["start"] = np.asarray(start_uniques, dtype=np.int64)[combos % n_starts]
        end = np.empty(n_groups, dtype=np.int64)
        end[group] = pairs.end
        out["end"] = end
    pairs.group = group
    out["n_new"] = np.bincount(group, minlength=n_groups).astype(np.int64)
    values = [None if f"_v{i}" not in elements else _take(elements[f"_v{i}"].to_numpy(), pairs.element, n_src)
              for i in range(len(spec.aggregations))]
    out.update(_partial_accumulators(spec.aggregations, values, group, n_groups))
    return out


def _window_rows(spec: EngineSpec, n: int, end: np.ndarray, watermark: int) -> dict[str, np.ndarray]:
    """Pane metadata and trigger state of ``n`` windows that have never fired."""
    out = {"on_time_done": end <= watermark, "closed": np.zeros(n, dtype=bool),
           "held": np.zeros(n, dtype=bool), "end_timer": np.zeros(n, dtype=bool),
           "pane_index": np.zeros(n, dtype=np.int64), "emitted": np.zeros(n, dtype=bool),
           "last_timing": np.zeros(n, dtype=np.int8)}
    for i in range(len(spec.aggregations)):
        out[f"o{i}"] = np.full(n, None, dtype=object)
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
    keys = spec.key_columns
    if len(new["n_new"]) == 0:
        table = {name: state[name].to_numpy() for name in state.columns}
        return table, np.zeros(len(state), dtype=np.int64), np.zeros(len(state), dtype=bool)
    if len(state) == 0 and not spec.windows.merging:  # every partial window is a new window
        table = {name: values for name, values in new.items() if name != "n_new"}
        table.update(_window_rows(spec, len(new["n_new"]), table["end"], watermark), n_pending=new["n_new"])
        return {name: table[name] for name in state.columns}, new["n_new"], np.zeros(len(new["n_new"]), dtype=bool)

    # Columns as NumPy arrays once: a pandas column lookup costs more than most steps' arithmetic.
    table_now = {name: state[name].to_numpy() for name in state.columns}
    # Closed sessions take no part in merging: Beam Java removes a window whose trigger finished
    # from its active windows, so a new session beside or across one starts afresh.
    joins = ~table_now["closed"] if spec.windows.merging else np.ones(len(state), dtype=bool)
    aside = {name: values[~joins] for name, values in table_now.items()}
    old = {name: values[joins] for name, values in table_now.items()}
    n_old = int(joins.sum())
    cand = {c: np.concatenate([old[c], new[c]]) for c in keys + ["start", "end"]}
    group = _candidate_groups(spec, cand)
    n_groups = int(group.max()) + 1 if len(group) else 0
    is_new = np.arange(len(group)) >= n_old

    old_group = group[:n_old]
    new_group = group[n_old:]
    old_closed = old["closed"]
    old_per_group = np.bincount(old_group, minlength=n_groups)
    closed_group = (old_per_group > 0) & (np.bincount(old_group, weights=old_closed, minlength=n_groups) == old_per_group)

    g_start = np.full(n_groups, MAX_TIME, np.int64)
    np.minimum.at(g_start, group, cand["start"])
    g_end = np.full(n_groups, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(g_end, group, cand["end"])
    head_of_group = np.full(n_groups, -1, dtype=np.int64)
    head_of_group[group[::-1]] = np.arange(len(group))[::-1]
    if len(aside["start"]):  # a session of new elements only that is a closed session is that window
        closed_group |= (old_per_group == 0) & _same_windows(
            spec, {k: cand[k][head_of_group] for k in keys}, g_start, g_end, aside)

    # Elements that land in a closed window are dropped: Beam drops data for closed windows.
    partial_ok = ~closed_group[new_group]
    if not partial_ok.all():
        bad = np.flatnonzero(~partial_ok)
        assert pairs.group is not None  # set by the grouping above
        bad_pairs = np.isin(pairs.group, bad)
        dropped.append(pd.DataFrame({"element": labels[pairs.element[bad_pairs]], "start": pairs.start[bad_pairs],
                                     "end": pairs.end[bad_pairs], "reason": DROPPED_CLOSED}))
    new_rows_per_group = np.bincount(group, weights=is_new, minlength=n_groups).astype(np.int64)
    touched = (new_rows_per_group > 0) & ~(closed_group & (old_per_group == 0))

    old_touched = touched[old_group]
    in_place_old = old_touched & (old_per_group[old_group] == 1) & \
        (old["start"] == g_start[old_group]) & (old["end"] == g_end[old_group])
    merged_away = old_touched & ~in_place_old

    # Result rows: untouched old rows as they are, then one row per touched group.
    touched_ids = np.flatnonzero(touched)
    result_of_group = np.full(n_groups, -1, dtype=np.int64)
    result_of_group[touched_ids] = np.arange(len(touched_ids))
    n_res = len(touched_ids)

    res: dict[str, np.ndarray] = {}
    heads = head_of_group[touched_ids]
    for k in keys:
        res[k] = cand[k][heads]
    res["start"], res["end"] = g_start[touched_ids], g_end[touched_ids]

    # Accumulators: merge the touched old rows' accumulators with the (open) partials.
    acc_names = [c for c in state.columns if c.startswith("a")]
    src_old = np.flatnonzero(old_touched)
    src_new = np.flatnonzero(partial_ok)
    acc_rows = {name: np.concatenate([old[name][src_old], new[name][src_new]])
                for name in acc_names}
    acc_group = result_of_group[np.concatenate([old_group[src_old], new_group[src_new]])]
    # Every touched group has a source row: its open partials, or else its closed old window.
    res.update(_merge_accumulators(spec, acc_rows, acc_group, n_res))

    counts_res = np.zeros(n_res, dtype=np.int64)
    np.add.at(counts_res, result_of_group[new_group[src_new]], new["n_new"][src_new])
    pending_old = np.zeros(n_res, dtype=np.int64)
    np.add.at(pending_old, result_of_group[old_group[src_old]], old["n_pending"][src_old])
    res["n_pending"] = pending_old + counts_res

    res_closed = closed_group[touched_ids]
    in_place_res = np.zeros(n_res, dtype=bool)
    in_place_res[result_of_group[old_group[in_place_old]]] = True
    res["closed"] = res_closed

    # Pane metadata: kept for windows updated in place, fresh for new and merged windows.
    all_old_done = np.ones(n_res, dtype=bool)
    np.logical_and.at(all_old_done, result_of_group[old_group[src_old]], old["on_time_done"][src_old])
    res["on_time_done"] = np.where(in_place_res, False, (res["end"] <= watermark) & all_old_done)
    # Holds and end-of-window timers of the windows merging in (those of a new window: none yet).
    for name in ("held", "end_timer"):
        res[name] = np.zeros(n_res, dtype=bool)
        np.logical_or.at(res[name], result_of_group[old_group[src_old]], old[name][src_old])
    res["pane_index"] = np.zeros(n_res, dtype=np.int64)
    res["emitted"] = np.zeros(n_res, dtype=bool)
    res["last_timing"] = np.zeros(n_res, dtype=np.int8)
    for i in range(len(spec.aggregations)):
        res[f"o{i}"] = np.full(n_res, None, dtype=object)
    if in_place_old.any():
        dst = result_of_group[old_group[in_place_old]]
        for name in ["on_time_done", "pane_index", "emitted", "last_timing"] + [f"o{i}" for i in range(len(spec.aggregations))]:
            res[name][dst] = old[name][in_place_old]

    # Trigger state: merged from the old windows (Beam on_merge), fresh for new windows.
    trig_names = [c for c in state.columns if c.startswith("t.")]
    fresh = spec.trigger.fresh_state(n_res)
    src_ctx = TriggerContext({c: old[c][src_old] for c in trig_names}, old["end"][src_old], watermark, 0)
    dst_ctx = TriggerContext(dict(fresh), res["end"], watermark, 0)
    if len(src_old):
        spec.trigger.merge(src_ctx, result_of_group[old_group[src_old]], dst_ctx)
    no_old = np.bincount(result_of_group[old_group[src_old]], minlength=n_res) == 0
    for c in trig_names:
        res[c] = np.where(no_old, fresh[c], dst_ctx.columns[c]).astype(fresh[c].dtype)

    if spec.mode is AccumulationMode.ACCUMULATING_AND_RETRACTING:
        gone = merged_away & old["emitted"]
        if gone.any():
            retractions.append(_retraction_rows(spec, {c: old[c][gone] for c in state.columns},
                                                merged_away=True))

    # A session receiving elements is a merge (proto-sessions with the open sessions they overlap),
    # but for an open session whose new elements all have its very proto-session.
    merged_res = np.zeros(n_res, dtype=bool)
    if spec.windows.merging:
        equal = new["one_proto"] & (new["start"] == g_start[new_group]) & (new["end"] == g_end[new_group])
        alone = (np.bincount(new_group, minlength=n_groups) == 1) & (np.bincount(new_group, weights=equal, minlength=n_groups) == 1)
        merged_res = ~(in_place_res & alone[touched_ids])

    untouched_old = ~old_touched
    table = {name: np.concatenate([aside[name], old[name][untouched_old], res[name]]) for name in state.columns}
    n_kept = len(aside["start"]) + int(untouched_old.sum())
    counts = np.concatenate([np.zeros(n_kept, np.int64), counts_res * ~res_closed])
    return table, counts, np.concatenate([np.zeros(n_kept, dtype=bool), merged_res])


def _same_windows(spec: EngineSpec, keys: dict[str, np.ndarray], start: np.ndarray, end: np.ndarray,
                  others: dict[str, np.ndarray]) -> np.ndarray:
    """Where the window (``keys``, ``start``, ``end``) is one of the windows in ``others``."""
    n = len(start)
    codes, _ = _factorize_keys([np.concatenate([keys[k], others[k]]) for k in spec.key_columns])
    mine = pd.MultiIndex.from_arrays([codes[:n], start, end])
    theirs = pd.MultiIndex.from_arrays([codes[n:], others["start"], others["end"]])
    return mine.isin(theirs)


def _candidate_groups(spec: EngineSpec, cand: dict[str, np.ndarray]) -> np.ndarray:
    """Group id per candidate window: same window, or (sessions) overlapping windows of a key."""
    keys = spec.key_columns
    if not spec.windows.merging:
        frame = pd.DataFrame({c: cand[c] for c in keys + ["start"]})
        return frame.groupby(keys + ["start"], sort=False, dropna=False).ngroup().to_numpy()
    key_code, _ = _factorize_keys([cand[k] for k in keys])
    return _session_groups(key_code, cand["start"], cand["end"])


def _sort_by_key_then_time(key_code: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Order of rows by (key code, time): one int64 argsort when the product fits, else lexsort."""
    if len(times) == 0:
        return np.arange(0)
    low, span = int(times.min()), int(times.max()) - int(times.min()) + 1
    if (int(key_code.max()) + 1) * span < 2**62:
        return np.argsort(key_code * span + (times - low))
    return np.lexsort((times, key_code))


def _running_max_per_key(key_code: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each key (rows sorted by key code): one NumPy
    accumulate over values lifted by key when that fits in int64, else pandas' grouped cummax."""
    if len(values) == 0:
        return values
    low, span = int(values.min()), int(values.max()) - int(values.min()) + 1
    if (int(key_code.max()) + 1) * span < 2**62:
        lift = key_code * span
        return np.maximum.accumulate(lift + (values - low)) - lift + low
    return pd.Series(values).groupby(key_code, sort=False).cummax().to_numpy()


def _session_groups(key_code: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Group id per window: overlapping windows of one key share a group (touching ones do not)."""
    order = _sort_by_key_then_time(key_code, start)
    k, s, e = key_code[order], start[order], end[order]
    running_end = _running_max_per_key(k, e)
    prev_end = np.concatenate([[np.iinfo(np.int64).min], running_end[:-1]])
    prev_key = np.concatenate([[-1], k[:-1]])
    starts_group = (k != prev_key) | (s >= prev_end)
    group = np.empty(len(k), dtype=np.int64)
    group[order] = np.cumsum(starts_group) - 1
    return group


def _retraction_rows(spec: EngineSpec, rows: dict[str, np.ndarray], merged_away: bool) -> pd.DataFrame:
    """Rows retracting the last emitted pane of each given window.

    Retractions of merged-away windows sort before every pane of their key.
    """
    out = {k: rows[k] for k in spec.key_columns}
    out["start"], out["end"] = rows["start"], rows["end"]
    for i, agg in enumerate(spec.aggregations):
        out[agg.name] = rows[f"o{i}"]
    out["timing"] = rows["last_timing"]
    out["pane_index"] = rows["pane_index"] - 1
    out["is_retraction"] = np.ones(len(rows["start"]), dtype=bool)
    out["_first"] = np.full(len(rows["start"]), merged_away, dtype=bool)
    return frame_of(out)


def _timing(table: dict[str, np.ndarray], watermark: int) -> np.ndarray:
    """The timing of a pane each window would emit now (Beam Java's PaneInfoTracker).

    LATE once an ON_TIME or LATE pane was emitted, or when the output watermark has passed the
    window: the watermark passed its end before this step and no element of the window holds it
    back (``held``). Otherwise EARLY before the watermark reaches the end, ON_TIME after.
    """
    end = table["end"]
    late = (table["emitted"] & (table["last_timing"] != EARLY)) | (table["on_time_done"] & ~table["held"])
    return np.where(late, LATE, np.where(end > watermark, EARLY, ON_TIME)).astype(np.int8)


def _emit(spec: EngineSpec, table: dict[str, np.ndarray], fire: np.ndarray, final: np.ndarray,
          timing: np.ndarray, force_emit: np.ndarray, retractions: list[pd.DataFrame]) -> pd.DataFrame:
    """Build the panes of the fired windows and update their pane metadata in ``table``.

    A firing emits a pane if it holds elements, is ON_TIME (Beam's OnTimeBehavior.FIRE_ALWAYS), or
    is a periodic firing of the seed operator; a final pane (``final``) always emits.
    """
    end = table["end"]
    emit = final | (fire & ((table["n_pending"] > 0) | (timing == ON_TIME) | force_emit))
    rows = np.flatnonzero(emit)
    if len(rows) == 0:
        return _assemble(spec, retractions, None)
    outputs = _outputs(spec.aggregations, table, rows)
    emitted = table["emitted"][rows]
    changed = np.zeros(len(rows), dtype=bool)
    if emitted.any():
        prior = np.flatnonzero(emitted)
        for i, out in enumerate(outputs):
            changed[prior] |= ~_unchanged(out[prior], table[f"o{i}"][rows[prior]])
    keep = ~emitted | changed if spec.fire_only_updated else np.ones(len(rows), dtype=bool)
    rows, outputs, emitted, changed = rows[keep], [o[keep] for o in outputs], emitted[keep], changed[keep]

    if spec.mode is AccumulationMode.ACCUMULATING_AND_RETRACTING:
        # As the seed operator: every pane that replaces an earlier one is preceded by its
        # retraction, changed or not (fire_only_updated_panes dropped the unchanged ones above),
        # so emitted minus retracted is always the window's current value.
        redo = emitted
        if redo.any():
            retractions.append(_retraction_rows(spec, {c: v[rows[redo]] for c, v in table.items()}, merged_away=False))

    pane = {k: table[k][rows] for k in spec.key_columns}
    pane["start"], pane["end"] = table["start"][rows], end[rows]
    for i, agg in enumerate(spec.aggregations):
        pane[agg.name] = outputs[i]
        column = table[f"o{i}"].copy()
        column[rows] = _object_array(list(outputs[i]))
        table[f"o{i}"] = column
    pane["timing"] = timing[rows]
    pane["pane_index"] = table["pane_index"][rows]
    pane["is_retraction"] = np.zeros(len(rows), dtype=bool)
    pane["_first"] = np.zeros(len(rows), dtype=bool)

    for name, values in (("pane_index", table["pane_index"][rows] + 1), ("emitted", True),
                         ("last_timing", timing[rows])):
        column = table[name].copy()
        column[rows] = values
        table[name] = column
    return _assemble(spec, retractions, frame_of(pane))


def _assemble(spec: EngineSpec, retractions: list[pd.DataFrame], panes: pd.DataFrame | None) -> pd.DataFrame:
    """Retractions of merged-away windows first, then each retraction right before its pane."""
    parts = [*retractions, *([panes] if panes is not None else [])]
    if not parts:
        columns = spec.key_columns + ["start", "end"] + [a.name for a in spec.aggregations] + \
            ["timing", "pane_index", "is_retraction"]
        return pd.DataFrame({c: [] for c in columns})
    out = pd.concat(parts, ignore_index=True)
    if not retractions:  # already in window-table order; nothing to place
        return out.drop(columns="_first")
    order = out.sort_values(spec.key_columns + ["_first", "start", "end", "is_retraction"],
                            ascending=[True] * len(spec.key_columns) + [False, True, True, False], kind="stable").index
    return out.loc[order].drop(columns="_first").reset_index(drop=True)


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
