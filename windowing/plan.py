"""From a strategy to an engine spec, and between user frames and engine frames.

Runner-agnostic: the pandas runner and the Spark runner's Python workers
both use it, so both see the same columns, units and validation.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np
import pandas as pd

from accumulations import Accumulation

from . import columns
from .errors import WindowingConfigError
from .spec import TIMINGS, Aggregation, EngineSpec
from .strategy import NamedAccumulation, Strategy
from .timeaxis import TimeAxis

SIDE = "_side"
"""Column marking which of two merged streams an element came from (0 or 1)."""


@dataclass(frozen=True)
class Plan:
    spec: EngineSpec
    axis: TimeAxis
    key_names: tuple[str, ...] | None
    value_columns: tuple[str | None, ...]
    watermark_delay: int | None
    key_dtypes: tuple[Any, ...] = ()
    """The input dtype of each key column."""
    two_streams: bool = False
    """The input's rows carry their side in a ``SIDE`` column, and the aggregations see ``(side, value)``."""


def check_columns(columns: list[str], strategy: Strategy) -> None:
    """Every column the strategy names must exist, once (a join may leave two of one name)."""
    wanted = [("time", strategy.time)] if isinstance(strategy.time, str) else []
    wanted += [("key", k) for k in strategy.keys or ()]
    wanted += [(f"{type(acc).__name__}(column)", acc.column) for _, acc in strategy.aggregations if acc.column is not None]
    for param, column in wanted:
        if column not in columns:
            raise WindowingConfigError(f"{param}={column!r} is not a column of the input; it has {list(columns)}")
        if columns.count(column) > 1:
            raise WindowingConfigError(
                f"{param}={column!r} names {columns.count(column)} columns of the input; rename or drop all but one "
                "(a join keeps the column of each side)")


LATE_DATA_COLUMNS = ("window_start", "window_end", "reason")
"""The columns ``late_data`` adds to a dropped input row (and ``step``, for a TestStream)."""


def check_late_data_columns(columns: list[str], with_step: bool) -> None:
    """``late_data`` is each dropped input row with its window and reason: an input column of one of those names
    would be overwritten by them, and the dropped row would lose its value (a key named ``reason``, say)."""
    added = LATE_DATA_COLUMNS + (("step",) if with_step else ())
    clash = next((column for column in columns if column in added), None)
    if clash is not None:
        raise WindowingConfigError(
            f"run(): the input's column {clash!r} clashes with the column {clash!r} that late_data adds to every "
            f"dropped row ({', '.join(added)}), which would overwrite it; rename that column of the input first "
            "(aggregate(), which returns panes only, takes it)")


def make_plan(strategy: Strategy, axis: TimeAxis, dtypes: Mapping[str, Any],
              aggregations: tuple[NamedAccumulation, ...] | None = None) -> Plan:
    """The engine's spec of ``strategy`` on ``axis``, its aggregations set up for the input's ``dtypes``.
    ``aggregations``: what the engine runs instead of the strategy's (the Spark runner's lifted ones)."""
    aggregations = strategy.aggregations if aggregations is None else aggregations
    windows = strategy.windowing.window_fn(axis)
    spec = EngineSpec(
        windows=windows,
        trigger=strategy.trigger.resolve(axis.duration),
        mode=strategy.mode,
        aggregations=engine_aggregations(aggregations, dtypes),
        allowed_lateness=strategy.allowed_lateness.in_units_of(axis),
        fire_only_updated=strategy.fire_only_updated,
        n_keys=strategy.n_keys,
    )
    delay = None if strategy.watermark_delay is None else strategy.watermark_delay.in_units_of(axis)
    key_dtypes = tuple(dtypes[k] for k in strategy.keys or ())
    axis = axis.fine_enough_for([value for value in (getattr(windows, f.name) for f in fields(windows)) if isinstance(value, int)])
    return Plan(spec, axis, strategy.keys, tuple(acc.column for _, acc in aggregations), delay, key_dtypes, strategy.two_streams)


def engine_aggregations(aggregations: tuple[NamedAccumulation, ...], dtypes: Mapping[str, Any]) -> tuple[Aggregation, ...]:
    """The engine's aggregations: each accumulation set up for its input column's dtype."""
    return tuple(Aggregation(name, _for_input(name, acc, dtypes), None if acc.column is None else _numpy_dtype(dtypes[acc.column]))
                 for name, acc in aggregations)


def _for_input(name: str, acc: Accumulation[Any, Any, Any], dtypes: Mapping[str, Any]) -> Accumulation[Any, Any, Any]:
    """The accumulation set up for its column's dtype; a dtype it refuses is a configuration error."""
    if acc.column is None:
        return acc
    try:
        return acc.for_input(dtypes[acc.column])
    except ValueError as error:
        raise WindowingConfigError(f"aggregate({name}={acc!r}): {error}") from None


def _numpy_dtype(dtype: Any) -> np.dtype:
    try:
        return np.dtype(getattr(dtype, "numpy_dtype", dtype))
    except TypeError:
        return np.dtype(object)


def to_elements(plan: Plan, frame: pd.DataFrame, times: np.ndarray) -> pd.DataFrame:
    """The engine's element frame: ``_k*`` keys, ``_t`` times, ``_v*`` values; index kept."""
    out: dict[str, np.ndarray] = {}
    if plan.key_names:
        for i, name in enumerate(plan.key_names):
            planned, dtype = plan.key_dtypes[i], frame[name].dtype
            if isinstance(planned, np.dtype) and planned.kind == "O" and isinstance(dtype, np.dtype) and dtype.kind != "O":
                # A TestStream's keys of several dtypes are objects: this step's as Python values and Timestamps (beside
                # the table's objects NumPy made a datetime64 column ints, a float one made int64 keys floats)
                out[columns.key(i)] = frame[name].astype(object).to_numpy()
            else:
                out[columns.key(i)] = positive_zeros(_values(frame[name]))
    else:
        out[columns.key(0)] = np.zeros(len(frame), dtype=np.int64)
    out[columns.TIME] = times
    for i, column in enumerate(plan.value_columns):
        if column is None:
            continue
        values = _values(frame[column])
        if plan.two_streams and SIDE in frame:  # merge accumulations see (side, value); one stream: SIDE is data
            paired = np.empty(len(frame), dtype=object)
            paired[:] = list(zip(frame[SIDE].to_numpy().tolist(), values.tolist()))
            values = paired
        out[columns.value(i)] = values
    # An object column stays one: pandas would infer str or datetime64 from its values (None becoming NaN or NaT)
    return pd.DataFrame({name: pd.Series(values, dtype=object, index=frame.index, copy=False) if values.dtype == object
                         else values for name, values in out.items()}, index=frame.index)


def _values(column: pd.Series) -> np.ndarray:
    """A key or value column as NumPy; nullable integers, and categories of integers beside a missing value, as
    Python ints (NumPy would make them floats, inexact beyond 2**53: keys 2**53 and 2**53 + 1 would be one key)."""
    if _nullable_integers(column.dtype):
        return column.to_numpy(dtype=object, na_value=None)  # type: ignore[call-overload]  # pandas takes None
    if isinstance(column.dtype, pd.CategoricalDtype) and column.dtype.categories.dtype.kind in "iu" and column.hasnans:
        return column.astype(object).to_numpy()  # to_numpy() gives floats there; this Python ints, NaN where missing
    return column.to_numpy()


def positive_zeros(keys: Any) -> Any:
    """A key column (NumPy or pandas) with float -0.0 as 0.0: one key, as Spark's groupBy makes it (pandas' factorize
    kept the sign of the first seen, so a pane's key showed either, by the order of the elements). In an object column
    it is made 0.0 on the panes (`_keys`), fewer rows to look at than the elements."""
    return keys + 0.0 if keys.dtype.kind == "f" else keys


def _nullable_integers(dtype: Any) -> bool:
    return isinstance(dtype, pd.api.extensions.ExtensionDtype) and pd.api.types.is_integer_dtype(dtype)


def to_panes(plan: Plan, panes: pd.DataFrame) -> pd.DataFrame:
    """Engine panes in the public shape: keys, window_start, window_end, values, timing, ..."""
    out: dict[str, Any] = {}
    if plan.key_names:
        for i, name in enumerate(plan.key_names):
            out[name] = _keys(panes[columns.key(i)], plan.key_dtypes[i])
    out["window_start"], out["window_end"] = plan.axis.window_bounds(panes["start"].to_numpy(), panes["end"].to_numpy())
    for i, agg in enumerate(plan.spec.aggregations):
        dtype = agg.accumulation.output_dtype()
        if dtype is None and not len(panes):
            dtype = _output_dtype_of_one_value(agg)
        values = panes[columns.output(i)]
        out[agg.name] = _tidy(values) if dtype is None else pd.Series(values.to_numpy(), dtype=object).astype(dtype)
    out["timing"] = pd.Categorical.from_codes(panes["timing"].to_numpy(dtype=np.int8), categories=list(TIMINGS))  # type: ignore[call-overload]
    out["pane_index"] = panes["pane_index"].to_numpy(dtype=np.int64)
    out["is_retraction"] = panes["is_retraction"].to_numpy(dtype=bool)
    return pd.DataFrame(out)


def joined_panes(plan: Plan, steps: list[pd.DataFrame]) -> pd.DataFrame:
    """The panes of several steps (`to_panes` each) as one frame. An output column whose steps have other dtypes
    takes the dtype its values have together (`_tidy`), as one step of them all would: pandas' concat made int64
    beside float64 float64, rounding integers beyond 2**53."""
    out = pd.concat(steps, ignore_index=True)
    for agg in plan.spec.aggregations:
        if len({steps[0][agg.name].dtype, *(step[agg.name].dtype for step in steps)}) > 1:
            out[agg.name] = _tidy(pd.Series(np.concatenate([step[agg.name].to_numpy(dtype=object) for step in steps]),
                                            dtype=object))
    return out


def _keys(values: pd.Series, dtype: Any) -> Any:
    """A key column of the panes, of the input's dtype. An object column keeps a missing key as None, as in the input:
    the engine's grouping (``pd.factorize``) turns None into NaN. A nullable integer column keeps
    its dtype, and a missing key is <NA>."""
    if _nullable_integers(dtype):
        return pd.array(values.to_numpy(dtype=object), dtype=dtype)
    # the input's dtype, also with no pane (the engine's empty frame has no dtypes)
    if not (isinstance(dtype, np.dtype) and dtype.kind == "O"):
        return pd.Series(values.to_numpy()).astype(dtype)
    out = values.to_numpy(dtype=object, copy=True)
    out[pd.isna(out)] = None
    if pd.api.types.infer_dtype(out, skipna=True) in _MAY_HOLD_FLOATS:  # not strings, ints...: a scan in C
        for i in [i for i, key in enumerate(out) if isinstance(key, (float, np.floating)) and key == 0]:
            out[i] = out[i] + 0.0  # -0.0 as 0.0, as `positive_zeros` makes a float column's, here on the panes only
    return pd.Series(out, dtype=object)


#: What `pandas.api.types.infer_dtype` calls an object column that may hold a float.
_MAY_HOLD_FLOATS = frozenset({"floating", "mixed-integer-float", "mixed", "mixed-integer"})


def _output_dtype_of_one_value(agg: Aggregation) -> Any:
    """The dtype an aggregation's column has when panes exist, for a result without any: what its
    vectorized output of one accumulator has, or what `_tidy` makes of its output for one value
    of the input's dtype (``1``, ``1.5``, ``"a"``, ...; the empty window's output where that value
    is refused). A Python accumulation whose output type depends on the values gets the type of
    that one value's output."""
    acc = agg.accumulation
    if agg.vectorized:
        fields = {name: np.asarray([default]) for name, default in agg.field_defaults().items()}
        return np.asarray(acc.vector_output(fields)).dtype
    accumulated = acc.default_accumulated_value()
    try:
        output = acc.get_output(acc.accumulate(accumulated, None if acc.column is None else _one_value(agg.input_dtype)))
    except Exception:  # the accumulation's own code refuses the sample: an empty window's output
        output = acc.get_output(accumulated)
    return _tidy(pd.Series([output], dtype=object)).dtype


def _one_value(dtype: Any) -> Any:
    """One value of a column of ``dtype`` (the engine's NumPy dtype of the input column)."""
    kind = np.dtype(dtype or object).kind
    samples = {"b": True, "i": 1, "u": 1, "f": 1.5, "M": pd.Timestamp("2024-01-01"), "m": pd.Timedelta(1)}
    return np.asarray(samples[kind], dtype=dtype)[()] if kind in "biuf" else samples.get(kind, "a")


def _tidy(values: pd.Series) -> pd.Series:
    """A value column with the dtype its values have (the engine keeps them as objects): numeric
    for plain numbers, and what pandas infers otherwise (``str``, ``datetime64``, ...)."""
    if values.dtype == object and len(values) and \
            all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in values):
        numbers = pd.to_numeric(values.reset_index(drop=True))
        if numbers.dtype.kind != "f" or not any(isinstance(v, (int, np.integer)) and abs(int(v)) > 2**53 for v in values):
            return numbers
        # Integers beyond 2**53 beside floats: float64 would round them (2**53 + 1 came out 2**53), so objects.
    return pd.Series(values.to_numpy())
