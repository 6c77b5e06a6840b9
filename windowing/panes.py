"""Pane emission: which windows fire with what timing, their panes and retraction rows, in firing order."""

from __future__ import annotations

import numpy as np
import pandas as pd

from triggers import AccumulationMode

from . import columns
from .reductions import object_array, outputs_of, unchanged
from .spec import EARLY, LATE, ON_TIME, EngineSpec
from .window_table import frame_of


def retraction_rows(spec: EngineSpec, rows: dict[str, np.ndarray], merged_away: bool) -> pd.DataFrame:
    """Rows retracting the last emitted pane of each given window.

    Retractions of merged-away windows sort before every pane of their key.
    """
    out = {k: rows[k] for k in spec.key_columns}
    out["start"], out["end"] = rows["start"], rows["end"]
    for i in range(len(spec.aggregations)):
        out[columns.output(i)] = rows[columns.last_output(i)]
    out["timing"] = rows["last_timing"]
    out["pane_index"] = rows["pane_index"] - 1
    out["is_retraction"] = np.ones(len(rows["start"]), dtype=bool)
    out["_first"] = np.full(len(rows["start"]), merged_away, dtype=bool)
    return frame_of(out)


def window_timings(table: dict[str, np.ndarray], watermark: int) -> np.ndarray:
    """The timing of a pane each window would emit now (Beam Java's PaneInfoTracker).

    LATE once an ON_TIME or LATE pane was emitted, or when the output watermark has passed the
    window: the watermark passed its end before this step and no element of the window holds it
    back (``held``). Otherwise EARLY before the watermark reaches the end, ON_TIME after.
    """
    end = table["end"]
    late = (table["emitted"] & (table["last_timing"] != EARLY)) | (table["on_time_done"] & ~table["held"])
    return np.where(late, LATE, np.where(end > watermark, EARLY, ON_TIME)).astype(np.int8)


def emit(spec: EngineSpec, table: dict[str, np.ndarray], fire: np.ndarray, final: np.ndarray,
          timing: np.ndarray, forced: np.ndarray, retractions: list[pd.DataFrame]) -> pd.DataFrame:
    """Build the panes of the fired windows and update their pane metadata in ``table``.

    A firing emits a pane if it holds elements, is ON_TIME (Beam's OnTimeBehavior.FIRE_ALWAYS), or
    the trigger forced it (``forced``, `triggers.Fired`: the seed operator's periodic firings); a
    final pane (``final``) always emits.
    """
    end = table["end"]
    emit = final | (fire & ((table["n_pending"] > 0) | (timing == ON_TIME) | forced))
    rows = np.flatnonzero(emit)
    if len(rows) == 0:
        return assemble(spec, retractions, None)
    outputs = outputs_of(spec.aggregations, table, rows)
    emitted = table["emitted"][rows]
    changed = np.zeros(len(rows), dtype=bool)
    if spec.fire_only_updated and emitted.any():
        prior = np.flatnonzero(emitted)
        for i, out in enumerate(outputs):
            changed[prior] |= ~unchanged(out[prior], table[columns.last_output(i)][rows[prior]])
    keep = ~emitted | changed if spec.fire_only_updated else np.ones(len(rows), dtype=bool)
    rows, outputs, emitted = rows[keep], [o[keep] for o in outputs], emitted[keep]

    if spec.mode is AccumulationMode.ACCUMULATING_AND_RETRACTING:
        # As the seed operator: every pane that replaces an earlier one is preceded by its
        # retraction, changed or not (fire_only_updated_panes dropped the unchanged ones above),
        # so emitted minus retracted is always the window's current value.
        redo = emitted
        if redo.any():
            retractions.append(retraction_rows(spec, {c: v[rows[redo]] for c, v in table.items()}, merged_away=False))

    pane = {k: table[k][rows] for k in spec.key_columns}
    pane["start"], pane["end"] = table["start"][rows], end[rows]
    for i in range(len(spec.aggregations)):
        pane[columns.output(i)] = outputs[i]
        if spec.keeps_last_outputs:
            column = table[columns.last_output(i)].copy()
            column[rows] = object_array(list(outputs[i]))
            table[columns.last_output(i)] = column
    pane["timing"] = timing[rows]
    pane["pane_index"] = table["pane_index"][rows]
    pane["is_retraction"] = np.zeros(len(rows), dtype=bool)
    pane["_first"] = np.zeros(len(rows), dtype=bool)

    for name, values in (("pane_index", table["pane_index"][rows] + 1), ("emitted", True),
                         ("last_timing", timing[rows])):
        column = table[name].copy()
        column[rows] = values
        table[name] = column
    return assemble(spec, retractions, pane)


def assemble(spec: EngineSpec, retractions: list[pd.DataFrame], panes: dict[str, np.ndarray] | None) -> pd.DataFrame:
    """Retractions of merged-away windows first, then each retraction right before its pane."""
    if not retractions:  # the panes (columns) already in window-table order: one frame, nothing to place
        if panes is None:
            names = spec.key_columns + ["start", "end"] + [columns.output(i) for i in range(len(spec.aggregations))] + \
                ["timing", "pane_index", "is_retraction"]
            return pd.DataFrame({c: [] for c in names})
        return frame_of({name: values for name, values in panes.items() if name != "_first"})
    # Retractions hold the last outputs as objects (the window table's), so the panes' outputs join them as objects,
    # as pandas 3 concatenates them; pandas 2 kept a pane's float64 or datetime64 where each retracted output was
    # missing, warning (FutureWarning) that it would not.
    typed = [] if panes is None else [frame_of(panes).astype(dict.fromkeys(map(columns.output, range(len(spec.aggregations))), object))]
    out = pd.concat([*retractions, *typed], ignore_index=True)
    order = out.sort_values(spec.key_columns + ["_first", "start", "end", "is_retraction"],
                            ascending=[True] * len(spec.key_columns) + [False, True, True, False], kind="stable").index
    return out.loc[order].drop(columns="_first").reset_index(drop=True)
