"""Fixes for window tables that checkpoints written by earlier releases hold (docs/spark.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import columns
from ...spec import EngineSpec
from .combine import split_nulls, with_nulls
from .wire import WIRE


def without_float_integers(spec: EngineSpec, table: pd.DataFrame, nullable: tuple[str, ...]) -> pd.DataFrame:
    """``table`` as today's code writes it, where the code before 58c6201 wrote it: that code got an
    integer column holding a null as float64 (docs/spark.md, "Checkpoints written before exact
    integers").

    A nullable integer key column stored as float64 comes back as exact ints and None
    (`combine.with_nulls`): float64 would round new keys beyond 2**53, and their ints beside its
    floats break the sort of the panes. Keys that float64 had already merged (2**53 + 1 into 2**53)
    stay merged. A Min over a nullable integer column that saw only nulls held the int64 minimum
    (+inf cast), which every later value would lose to: it gets back its start value.
    """
    floats = [name for name in spec.key_columns if name in nullable and table[name].dtype.kind == "f"]
    if floats:
        split_nulls(table, floats)
        table = with_nulls(table, floats)
    for i, agg in enumerate(spec.aggregations):
        # A field reduced by "min" beside a count "n" of values seen: Min's vectorized accumulator.
        if WIRE.value(i) in nullable and agg.vectorized and agg.fields.get("min") == "min" and "n" in agg.fields:
            field = columns.accumulator(i, "min")
            seen = table[columns.accumulator(i, "n")].to_numpy() > 0
            table[field] = np.where(seen, table[field].to_numpy(), agg.field_defaults()["min"])
    return table
