"""The window table: its columns and their dtypes, in one place; names from `windowing.columns`.

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
``emitted``         a pane was emitted, so ``o<i>`` (if kept) and ``last_timing`` are set
``last_timing``     timing code of the last pane (for its retraction row)
``a<i>.<field>``    vectorized accumulator fields of aggregation ``i``
``a<i>``            Python accumulator of aggregation ``i`` (slow path)
``o<i>``            the last emitted output of aggregation ``i``, only where a retraction or
                    ``fire_only_updated`` needs it (`EngineSpec.keeps_last_outputs`)
``t.<...>``         trigger state columns (see `triggers.base`)
==================  ==========================================================

`current_layout` reads a table written by an earlier release (a Spark checkpoint).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from triggers import TriggerContext

from . import columns
from .errors import WindowingConfigError
from .reductions import object_array
from .spec import EngineSpec

WINDOW_COLUMNS = {"start": np.int64, "end": np.int64, "on_time_done": bool, "closed": bool, "n_pending": np.int64,
                  "held": bool, "end_timer": bool, "pane_index": np.int64, "emitted": bool, "last_timing": np.int8}
"""The columns every window table has between its key columns and its accumulators, with dtypes."""


def accumulator_columns(spec: EngineSpec, last_outputs: bool | None = None) -> dict[str, np.dtype]:
    """Each aggregation's accumulator columns, then its last output ``o<i>`` where the table keeps it
    (``last_outputs``; by default `EngineSpec.keeps_last_outputs`)."""
    last_outputs = spec.keeps_last_outputs if last_outputs is None else last_outputs
    dtypes: dict[str, np.dtype] = {}
    for i, agg in enumerate(spec.aggregations):
        if agg.vectorized:
            for fname, default in agg.field_defaults().items():
                dtypes[columns.accumulator(i, fname)] = np.asarray(default).dtype
        else:
            dtypes[columns.accumulator(i)] = np.dtype(object)
        if last_outputs:
            dtypes[columns.last_output(i)] = np.dtype(object)
    return dtypes


def empty_state(spec: EngineSpec, key_dtypes: list[Any] | None = None) -> pd.DataFrame:
    """A window table with no windows, with the columns and dtypes of ``spec``."""
    table: dict[str, Any] = {}
    for i, name in enumerate(spec.key_columns):
        table[name] = pd.Series([], dtype=(key_dtypes[i] if key_dtypes else object))
    table.update({name: np.array([], dtype) for name, dtype in WINDOW_COLUMNS.items()})
    table.update({name: np.array([], dtype) for name, dtype in accumulator_columns(spec).items()})
    table.update(spec.trigger.fresh_state(0))
    return pd.DataFrame(table)


def table_columns(spec: EngineSpec, last_outputs: bool | None = None) -> list[str]:
    """The names of a window table's columns, in order (`empty_state`'s); ``last_outputs``: as
    `accumulator_columns`. Tables written before `EngineSpec.keeps_last_outputs` keep them always."""
    return [*spec.key_columns, *WINDOW_COLUMNS, *accumulator_columns(spec, last_outputs), *spec.trigger.columns()]


def current_layout(spec: EngineSpec, state: pd.DataFrame) -> pd.DataFrame:
    """``state`` with the columns of this release's window table.

    A table written by an earlier release (a Spark checkpoint) holds the last outputs ``o<i>`` whether
    or not the pipeline needs them (dropped here where it does not); it may name its trigger state by the
    position of each nested trigger (``t.0.0.count``, `Trigger.numbered_columns`), lack trigger state
    columns added since (filled from the state it holds: `triggers.Column.earlier`) and lack the
    ``held`` and ``end_timer`` columns. Its windows then count as holding back the watermark while
    they hold elements and the watermark has not passed their end, and as waiting for the
    watermark to pass their end: as that release did, which evaluated every window in every step.
    """
    names = table_columns(spec)
    if list(state.columns) == names:
        return state
    have = set(state.columns)
    trigger_columns = spec.trigger.columns()
    required = {name for name, column in trigger_columns.items() if column.earlier is None}
    if required <= have:
        source = {name: name for name in names}
    else:
        numbered = spec.trigger.numbered_columns()
        if not {numbered[name] for name in required} <= have:
            raise WindowingConfigError(
                f"the stored window table has trigger state {sorted(c for c in have if c.startswith('t.'))}, not that of "
                f"{spec.trigger!r} ({sorted(trigger_columns)}): restore the pipeline, or start from a new checkpoint")
        source = {name: numbered.get(name, name) for name in names}
    defaults = {"held": lambda: (state["n_pending"] > 0) & ~state["on_time_done"],
                "end_timer": lambda: ~state["on_time_done"] & ~state["closed"]}
    added = [name for name, column in trigger_columns.items() if column.earlier is not None and source[name] not in have]
    missing = [name for name in names if source[name] not in have and name not in defaults and name not in added]
    if missing:
        outputs = [name for name in missing if name in spec.last_output_columns]
        why = (" (the panes' last outputs, which fire_only_updated_panes() and accumulating_and_retracting() keep: "
               "the pipeline gained one of them)") if outputs == missing else ""
        raise WindowingConfigError(f"the stored window table lacks the columns {missing}{why}: it was not written by "
                                   "this pipeline; restore the pipeline, or start from a new checkpoint")
    out = {name: state[source[name]] if source[name] in have else defaults[name]()
           for name in names if name not in added}
    if added:
        trigger_state = {name: np.asarray(values) for name, values in out.items() if name.startswith("t.")}
        for name in added:
            prefix = name[:name.rindex(".") + 1]
            earlier = trigger_columns[name].earlier
            assert earlier is not None  # `added` holds only such columns
            context = TriggerContext(trigger_state, state["end"].to_numpy(), 0, 0, prefix)
            out[name] = pd.Series(earlier(context), index=state.index).astype(trigger_columns[name].dtype)
    return pd.DataFrame({name: out[name] for name in names}, index=state.index)


def frame_of(columns: dict[str, np.ndarray], copy: bool | None = None) -> pd.DataFrame:
    """A DataFrame of these NumPy columns as they are.

    pandas infers ``str`` or ``datetime64`` from an object column of strings or Timestamps:
    a None key would become NaN, and a column of last outputs could no longer hold objects.
    ``copy=False`` keeps each array as it is instead of copying them all into one block per dtype
    (pandas' default): for a table of millions of rows of which a step changes few.
    """
    return pd.DataFrame({name: pd.Series(values, dtype=object, copy=False) if values.dtype == object else values
                         for name, values in columns.items()}, copy=copy)


def fresh_accumulators(spec: EngineSpec, n: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for i, agg in enumerate(spec.aggregations):
        if agg.vectorized:
            for fname, default in agg.field_defaults().items():
                out[columns.accumulator(i, fname)] = np.full(n, default, dtype=np.asarray(default).dtype)
        else:
            acc = agg.accumulation
            out[columns.accumulator(i)] = object_array([acc.default_accumulated_value() for _ in range(n)])
    return out
