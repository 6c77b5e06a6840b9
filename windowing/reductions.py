"""Accumulation over groups: vectorized reductions of accumulator fields per group, Python
accumulators merged per group, and outputs compared for ``fire_only_updated_panes``."""

from __future__ import annotations

import contextlib
import copy
import itertools
import operator
from typing import Any, Iterator

import numpy as np
import pandas as pd

from . import columns
from .spec import Aggregation, EngineSpec


def object_array(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


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
        # The magnitude from min and max as floats: np.abs of the int64 minimum wraps to itself.
        if len(values) == 0 or max(-float(values.min()), float(values.max())) * len(values) < 2.0**53:
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


class SumBeyondRange(OverflowError):
    """A window's integer sum beyond its column's dtype. ``what`` names the aggregation and the column; the message
    says how to widen the column with pandas' dtypes, and a runner whose columns have other types says it its way."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}; convert the column to float64 (approximate) or to Python ints (dtype object, exact) "
                         "first")
        self.what = what


def reduce_field(agg: Aggregation, values: np.ndarray, group: np.ndarray, n_groups: int, how: str) -> np.ndarray:
    """`group_reduce` of one accumulator field of ``agg``; an overflow names the aggregation."""
    try:
        return group_reduce(values, group, n_groups, how)
    except OverflowError as error:
        raise SumBeyondRange(
            f"aggregate({agg.name}={agg.accumulation!r}): in a window of column {agg.accumulation.column!r}, {error}"
        ) from None


def group_outputs(aggregations: tuple[Aggregation, ...], values: list[np.ndarray | None], group: np.ndarray,
                  n_groups: int) -> list[np.ndarray]:
    """Each aggregation's output over the values of each group (group ids 0..n_groups-1): what a
    window holding just those values would emit. The Spark runner folds rows with it before the
    shuffle, so a folded row holds what the engine would have computed, overflow checks included."""
    return outputs_of(aggregations, partial_accumulators(aggregations, values, group, n_groups), slice(None))


def partial_accumulators(aggregations: tuple[Aggregation, ...], values: list[np.ndarray | None], group: np.ndarray,
                          n_groups: int) -> dict[str, np.ndarray]:
    """Accumulate the element-window pairs of each group from scratch."""
    out: dict[str, np.ndarray] = {}
    for i, agg in enumerate(aggregations):
        raw = values[i]
        if raw is None:  # no column: a Python accumulation receives None per element (`Accumulation.column`)
            raw = np.zeros(len(group)) if agg.vectorized else np.full(len(group), None, dtype=object)
        # An object column stays one: pandas would infer str or datetime64 from its values, turning None into NaN or NaT
        column = pd.Series(raw, dtype=object if raw.dtype == object else None)
        if agg.vectorized:
            for fname, lifted in agg.accumulation.vector_lift(column).items():
                out[columns.accumulator(i, fname)] = reduce_field(agg, lifted, group, n_groups, agg.fields[fname])
        else:
            acc = agg.accumulation
            with values_it_cannot_take(agg):
                out[columns.accumulator(i)] = object_array(
                    [acc.accumulate_all(acc.default_accumulated_value(), vals) for vals in _split_by_group(column, group, n_groups)])
    return out


@contextlib.contextmanager
def values_it_cannot_take(agg: Aggregation) -> Iterator[None]:
    """A value an accumulation cannot take (a TypeError: values that do not add, compare or hash, in a
    column of Python objects) fails naming the output and the accumulation, its own error chained."""
    try:
        yield
    except TypeError as error:
        unread = "" if agg.accumulation.column is not None else (
            "; it reads no column, so each value it takes is None: an accumulation of your own names the column "
            "it reads in self.column (e.g. self.column = 'amount')")
        raise TypeError(f"aggregate({agg.name}={agg.accumulation!r}): {error}{unread}") from error


def _split_by_group(column: pd.Series, group: np.ndarray, n_groups: int) -> list[list[Any]]:
    """The values of each group id 0..n_groups-1 as Python objects (pandas' own: a Timestamp stays one), in
    their order of arrival. One stable sort and one split: iterating a pandas groupby costs tens of
    microseconds per group, which a step with thousands of `ToList` windows paid per window."""
    objects = pd.Series(column.to_numpy(), dtype=object).to_numpy()
    order = np.argsort(group, kind="stable")
    in_order = objects[order].tolist()
    bounds = [0, *np.searchsorted(group[order], np.arange(1, n_groups)).tolist(), len(in_order)]
    return [in_order[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]  # list slices: np.split costs more


def merge_accumulators(spec: EngineSpec, rows: dict[str, np.ndarray], group: np.ndarray, n_groups: int) -> dict[str, np.ndarray]:
    """Merge the accumulators of rows that share a group (order of rows is kept)."""
    out: dict[str, np.ndarray] = {}
    for i, agg in enumerate(spec.aggregations):
        if agg.vectorized:
            for fname, how in agg.fields.items():
                out[columns.accumulator(i, fname)] = reduce_field(agg, rows[columns.accumulator(i, fname)], group, n_groups, how)
        else:
            acc = agg.accumulation
            merged: list[Any] = [None] * n_groups
            seen = np.zeros(n_groups, dtype=bool)
            with values_it_cannot_take(agg):
                for g, value in zip(group, rows[columns.accumulator(i)]):
                    merged[g] = acc.merge(merged[g], value) if seen[g] else value
                    seen[g] = True
            out[columns.accumulator(i)] = object_array(merged)
    return out


def outputs_of(aggregations: tuple[Aggregation, ...], table: dict[str, np.ndarray], rows: np.ndarray | slice) -> list[np.ndarray]:
    """The current output of every aggregation on ``rows``."""
    outs = []
    for i, agg in enumerate(aggregations):
        if agg.vectorized:
            fields = {f: table[columns.accumulator(i, f)][rows] for f in agg.fields}
            outs.append(np.asarray(agg.accumulation.vector_output(fields)))
        else:
            acc = agg.accumulation
            outputs = [acc.get_output(a) for a in table[columns.accumulator(i)][rows]]
            if not acc.fresh_outputs:  # a snapshot: the accumulator may be mutated after this pane is emitted
                outputs = [copy.deepcopy(output) for output in outputs]
            outs.append(object_array(outputs))
    return outs


def same_value(a: Any, b: Any) -> bool:
    """Whether two outputs are equal: by Python's ``==`` (so 1 equals 1.0 and True, where Java's ``equals`` tells
    them apart), and, as Java's ``equals`` takes a NaN, a missing value equals one of its kind (NaN, NaT, NA, a
    Decimal NaN), also inside lists, tuples and dicts (a freshly made NaN in a tuple made
    `fire_only_updated_panes()` fire an unchanged pane again, on every period)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):  # == broadcasts: [7] would equal [7, 7]
        try:
            return bool(np.array_equal(a, b, equal_nan=True))
        except TypeError:  # equal_nan needs numbers
            return bool(np.array_equal(a, b))
    try:
        equal = a == b
        if isinstance(equal, np.ndarray):
            return bool(equal.all())
        if equal:
            return True
    except (TypeError, ValueError, ArithmeticError):  # pd.NA's truth is ambiguous (also in a list); a signalling NaN
        pass
    if isinstance(a, (list, tuple)) and type(a) is type(b):
        if len(a) != len(b):
            return False
        try:  # scanned in C: only the items unequal there are walked, and a changed list no further than its change
            return all(same_value(a[i], b[i]) for i in itertools.compress(itertools.count(), map(operator.ne, a, b)))
        except Exception:  # noqa: BLE001 - an item whose != has no truth value (pd.NA, an array), or raises: walked
            return all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return _both_missing(a, b)


def _both_missing(a: Any, b: Any) -> bool:
    """Both missing values of one kind: NaNs (Python's or NumPy's floats), NaTs, NAs or Decimal NaNs."""
    if a is None or b is None or not (pd.api.types.is_scalar(a) and pd.api.types.is_scalar(b)):
        return False
    same_kind = type(a) is type(b) or (isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)))
    try:
        return same_kind and bool(pd.isna(a)) and bool(pd.isna(b))
    except (TypeError, ValueError, ArithmeticError):  # a signalling Decimal NaN raises on any comparison
        return False


def unchanged(new: np.ndarray, old: np.ndarray) -> np.ndarray:
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
    return np.array([same_value(x, y) for x, y in zip(new, old)], dtype=bool)
