"""The built-in accumulations.

``Sum``, ``Count``, ``Min``, ``Max`` and ``Mean`` have vectorized paths (set up
for the column's dtype by ``for_input``: docs/engine.md, "Built-in
accumulations and column types"); the collection accumulations hold Python
objects and run on the engine's slower per-window path. Every built-in skips
missing values (None, NaN, a Decimal NaN, NaT, NA), as pandas' reductions skip them, so both
paths agree and a set holds no NaN twice; ``Fold`` and ``Reduce`` (`user_functions`) hand every
value to your functions.
"""

from __future__ import annotations

import copy
import decimal
import functools
import heapq
from decimal import Decimal
from typing import Any, Iterable, Iterator, Mapping, cast

import numpy as np
import pandas as pd

from triggers.errors import WindowingConfigError

from .base import NO_COLUMN, Accumulation, Reduction, require_column


def _missing(value: Any) -> bool:
    """None, NaN (a Decimal's too, as pandas.isna), NaT or NA (a container is never missing)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, Decimal):
        return value.is_nan()
    return isinstance(value, (float, np.floating, np.datetime64, np.timedelta64)) and bool(np.isnan(value))


def _present(values: Iterable[Any]) -> Iterator[Any]:
    return (value for value in values if not _missing(value))


_KIND_TESTS = (
    ("object", lambda dtype: isinstance(dtype, np.dtype) and dtype.kind == "O"),  # before "str": it passes that test
    ("bool", pd.api.types.is_bool_dtype),
    ("datetime", pd.api.types.is_datetime64_any_dtype),
    ("timedelta", pd.api.types.is_timedelta64_dtype),
    ("uint", pd.api.types.is_unsigned_integer_dtype),
    ("int", pd.api.types.is_integer_dtype),
    ("float", pd.api.types.is_float_dtype),
    ("str", pd.api.types.is_string_dtype),
)


def _kind(dtype: Any) -> str:
    """What a column of ``dtype`` holds: "object" (Python values), "bool", "datetime", "timedelta",
    "uint", "int", "float", "str" or "other"."""
    return next((kind for kind, test in _KIND_TESTS if test(dtype)), "other")


_TIMES = ("datetime", "timedelta")
_PYTHON_KINDS = ("bool", "str", "object", "other")
"""Kinds of column whose values Min and Max compare as Python values, on the per-window path."""


def _declared_order(dtype: Any) -> pd.Index | None:
    """An ordered categorical's categories, whose order Min, Max, TopN and BottomN follow, as pandas' ``min`` and
    ``max`` do: as Python values "medium" > "high" where the declared order says "low" < "medium" < "high"."""
    return dtype.categories if isinstance(dtype, pd.CategoricalDtype) and dtype.ordered else None


def _rank(order: pd.Index | None, value: Any) -> Any:
    """``value``'s position in ``order`` (categories are unique: an int), or ``value`` itself where there is none."""
    return value if order is None else cast(int, order.get_loc(value))


def _unit(dtype: Any) -> str:
    """The resolution of a datetime64 (tz-aware too) or timedelta64 dtype: "s", "ms", "us" or "ns"."""
    return getattr(dtype, "unit", None) or np.datetime_data(dtype)[0]


def _ticks(values: pd.Series, kind: str, unit: str = "ns") -> tuple[np.ndarray, np.ndarray]:
    """Timestamps (in UTC) or timedeltas as int64 counts of ``unit``, and where a value is present."""
    if kind == "datetime":
        if values.dtype == object:  # a zoned column reaches the engine as Timestamps, which pandas 2 parses to nanoseconds
            values = values.astype(pd.DatetimeTZDtype(unit, "UTC"))
        times = pd.to_datetime(values, utc=True).dt.tz_localize(None).astype(np.dtype(f"datetime64[{unit}]"))
    else:
        times = pd.to_timedelta(values).astype(np.dtype(f"timedelta64[{unit}]"))
    return times.to_numpy().view(np.int64), times.notna().to_numpy()


def _from_ticks(ticks: np.ndarray, present: np.ndarray, dtype: Any, unit: str = "ns") -> np.ndarray:
    """Counts of ``unit`` back as Timestamps or Timedeltas of ``dtype``, NaT where not present.

    An object array: the engine keeps each pane's values as Python objects, and a NumPy
    ``datetime64`` scalar would turn into a plain int on the way (``.item()``).
    """
    raw = np.where(present, ticks, np.iinfo(np.int64).min)  # the int64 minimum is NaT
    if _kind(dtype) == "datetime":
        out = pd.Series(raw.view(f"datetime64[{unit}]"))
        if getattr(dtype, "tz", None) is not None:
            out = out.dt.tz_localize("UTC")
    else:
        out = pd.Series(raw.view(f"timedelta64[{unit}]"))
    return out.astype(dtype).to_numpy(dtype=object)


class _Additive(Accumulation[Any, Any, Any]):
    """Accumulators that are their own output and add up: 0 when empty, retracted by negation."""

    fresh_outputs = True

    def default_accumulated_value(self) -> Any:
        return 0

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return _plus(accumulated1, accumulated2)

    def get_output(self, accumulated: Any) -> Any:
        return accumulated

    def get_retraction(self, output: Any) -> Any:
        return output.copy_negate() if isinstance(output, Decimal) else -output  # a Decimal's - rounds to the context


class _Numeric(Accumulation[Any, Any, Any]):
    """Sum, Mean, Min and Max: vectorized over numbers, and over timestamps and timedeltas as int64
    nanoseconds; an output of a time column has the column's type.

    `for_input` sets an instance up for its column's dtype when the plan is made, refusing the
    dtypes it cannot aggregate. Set up for an object column, it folds Python values on the
    per-window path (exact for Decimals and ints beyond 64 bits).
    """

    accepts: tuple[str, ...]
    needs: str
    """What the accumulation needs, for the error refusing another column."""
    _kind: str | None = None
    """The column's kind (see `_kind`); None before `for_input`: numbers, whatever their dtype."""
    _dtype: Any = None
    """The column's dtype."""

    def __init__(self, column: str = NO_COLUMN):
        self.column = require_column(type(self).__name__, column)

    def for_input(self, dtype: Any) -> 'Accumulation[Any, Any, Any]':
        kind = _kind(dtype)
        if kind not in self.accepts:
            raise ValueError(f"column {self.column!r} has dtype {dtype}; {self.needs}")
        out = copy.copy(self)
        out._kind, out._dtype = kind, dtype
        return out

    def _kind_of(self, dtype: Any) -> str:
        return self._kind or _kind(dtype)

    def output_dtype(self) -> Any:
        return self._dtype if self._kind in _TIMES else None


def _add(acc: _Numeric, total: Any, value: Any) -> Any:
    """``total + value`` on the per-window path; a value that does not add names itself and what adds."""
    try:
        return _plus(total, value)
    except TypeError:
        raise TypeError(f"cannot add {value!r} ({type(value).__name__}) of column {acc.column!r}; {acc.needs}") from None


_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
"""A context whose sums of Decimals are exact: the default one rounds every sum to 28 digits, where Spark's `sum`
of a ``decimal(38, 18)`` keeps 38."""


def _plus(a: Any, b: Any) -> Any:
    """``a + b``, exact for Decimals."""
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        with decimal.localcontext(_EXACT):
            return a + b
    return a + b


def _sum_dtype(kind: str) -> np.dtype:
    """The dtype a sum of a column of ``kind`` is kept in."""
    if kind == "uint":
        return np.dtype(np.uint64)
    return np.dtype(np.int64) if kind in ("bool", "int", "timedelta") else np.dtype(np.float64)


class Sum(_Additive, _Numeric):
    """Sum of a column of numbers or timedeltas; 0 (a zero timedelta) for an empty window.

    Integers add up exactly in 64 bits (unsigned for unsigned columns); a window's sum beyond
    that range raises OverflowError rather than wrapping around.
    """

    output_kind = "sum"
    liftable = True

    accepts = ("bool", "int", "uint", "float", "timedelta", "object")
    needs = "Sum adds numbers or timedeltas (convert the column first, e.g. with pandas.to_numeric)"

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return accumulated if _missing(value) else _add(self, accumulated, value)

    def vector_fields(self) -> Mapping[str, Reduction] | None:
        return None if self._kind == "object" else {"sum": "sum"}

    def vector_defaults(self, dtype: np.dtype) -> dict[str, Any]:
        return {"sum": np.zeros(1, dtype=_sum_dtype(self._kind_of(dtype)))[0]}

    def vector_lift(self, values: pd.Series) -> dict[str, np.ndarray]:
        kind = self._kind_of(values.dtype)
        if kind == "timedelta":
            ns, present = _ticks(values, kind)
            return {"sum": np.where(present, ns, 0)}
        return {"sum": values.to_numpy(dtype=_sum_dtype(kind), na_value=0)}

    def vector_output(self, fields: Mapping[str, np.ndarray]) -> np.ndarray:
        if self._kind == "timedelta":
            return _from_ticks(fields["sum"], np.ones(len(fields["sum"]), dtype=bool), self._dtype)
        return fields["sum"]


class Count(_Additive):
    """Number of elements; with a column, number of non-missing values in it."""

    output_kind = "count"
    liftable = True

    def __init__(self, column: str | None = None):
        self.column = None if column is None else require_column("Count", column)

    def of_partials(self, column: str) -> Accumulation[Any, Any, Any]:
        return Sum(column)

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return accumulated if (self.column is not None and _missing(value)) else accumulated + 1

    def vector_fields(self) -> Mapping[str, Reduction] | None:
        return {"count": "sum"}

    def vector_defaults(self, dtype: np.dtype) -> dict[str, Any]:
        return {"count": np.int64(0)}

    def vector_lift(self, values: pd.Series) -> dict[str, np.ndarray]:
        if self.column is None:
            return {"count": np.ones(len(values), dtype=np.int64)}
        return {"count": values.notna().to_numpy(dtype=np.int64)}

    def vector_output(self, fields: Mapping[str, np.ndarray]) -> np.ndarray:
        return fields["count"]


class _Extreme(_Numeric):
    """Shared shape of Min and Max: the extreme value and how many values were seen.

    Vectorized over numbers, timestamps and timedeltas; other columns (strings, booleans,
    Python objects) are compared as Python values on the per-window path.
    """

    fresh_outputs = True
    output_kind = "extreme"
    liftable = True

    reduction: Reduction
    accepts = ("bool", "int", "uint", "float", "datetime", "timedelta", "str", "object", "other")
    needs = ""
    _order: pd.Index | None = None
    """An ordered categorical column's categories (`_declared_order`), else None."""

    def for_input(self, dtype: Any) -> 'Accumulation[Any, Any, Any]':
        out = super().for_input(dtype)
        out._order = _declared_order(dtype)  # type: ignore[attr-defined]
        return out

    def _better(self, a: Any, b: Any) -> bool:
        raise NotImplementedError

    def default_accumulated_value(self) -> Any:
        return None

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        if _missing(value):
            return accumulated
        return value if accumulated is None or self._better(value, accumulated) else accumulated

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        if accumulated1 is None:
            return accumulated2
        return self.accumulate(accumulated1, accumulated2)

    def get_output(self, accumulated: Any) -> Any:
        return accumulated

    def vector_fields(self) -> Mapping[str, Reduction] | None:
        return None if self._kind in _PYTHON_KINDS else {self.reduction: self.reduction, "n": "sum"}

    def vector_defaults(self, dtype: Any) -> dict[str, Any]:  # also a pandas extension dtype (vector_lift)
        kind = self._kind_of(dtype)
        if kind in ("int", "uint", *_TIMES):
            info = np.iinfo(np.uint64 if kind == "uint" else np.int64)
            return {self.reduction: info.dtype.type(info.max if self.reduction == "min" else info.min), "n": np.int64(0)}
        return {self.reduction: np.float64(np.inf if self.reduction == "min" else -np.inf), "n": np.int64(0)}

    def vector_lift(self, values: pd.Series) -> dict[str, np.ndarray]:
        kind = self._kind_of(values.dtype)
        sentinel = self.vector_defaults(values.dtype)[self.reduction]
        if kind in _TIMES:  # in the planned column's unit: a microsecond column may hold the year 3000
            ticks, present = _ticks(values, kind, _unit(values.dtype if self._dtype is None else self._dtype))
            return {self.reduction: np.where(present, ticks, sentinel), "n": present.astype(np.int64)}
        present = values.notna().to_numpy()
        return {self.reduction: values.to_numpy(dtype=sentinel.dtype, na_value=sentinel), "n": present.astype(np.int64)}

    def output_dtype(self) -> Any:
        """Integers: pandas' nullable Int64 (UInt64 for unsigned columns), so an empty pane is <NA>
        and the column's dtype does not depend on what else the step holds."""
        if self._kind in ("int", "uint"):
            return pd.UInt64Dtype() if self._kind == "uint" else pd.Int64Dtype()
        if self._kind == "float" or self._order is not None:  # float32, Float64, ...: the column's (the engine's
            return self._dtype  # sentinels are float64); an ordered categorical's, in which its order holds
        return super().output_dtype()

    def vector_output(self, fields: Mapping[str, np.ndarray]) -> np.ndarray:
        extreme, n = fields[self.reduction], fields["n"]
        if self._kind in _TIMES:
            return _from_ticks(extreme, n > 0, self._dtype, _unit(self._dtype))
        if (n > 0).all():
            return extreme
        if extreme.dtype.kind in "iu":  # Python ints and None: float64 would round beyond 2**53
            out = extreme.astype(object)
            out[n == 0] = None
            return out
        return np.where(n > 0, extreme, np.nan)


class Min(_Extreme):
    """Smallest value of a column; for an empty window <NA> for integers, NaN for floats, NaT for times,
    None for Python values."""

    reduction = "min"

    def _better(self, a: Any, b: Any) -> bool:
        return _rank(self._order, a) < _rank(self._order, b)


class Max(_Extreme):
    """Largest value of a column; for an empty window <NA> for integers, NaN for floats, NaT for times,
    None for Python values."""

    reduction = "max"

    def _better(self, a: Any, b: Any) -> bool:
        return _rank(self._order, a) > _rank(self._order, b)


class Mean(_Numeric):
    """Arithmetic mean of a column of numbers or timedeltas, computed in float64; NaN (NaT) for an
    empty window."""

    fresh_outputs = True
    output_kind = "mean"

    accepts = ("bool", "int", "uint", "float", "timedelta", "object")
    needs = "Mean averages numbers or timedeltas (convert the column first, e.g. with pandas.to_numeric)"

    def default_accumulated_value(self) -> Any:
        return (0, 0)

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        if _missing(value):
            return accumulated
        return (_add(self, accumulated[0], value), accumulated[1] + 1)

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return (_plus(accumulated1[0], accumulated2[0]), accumulated1[1] + accumulated2[1])

    def get_output(self, accumulated: Any) -> Any:
        total, n = accumulated
        return total / n if n else float("nan")

    def vector_fields(self) -> Mapping[str, Reduction] | None:
        return None if self._kind == "object" else {"sum": "sum", "n": "sum"}

    def vector_defaults(self, dtype: np.dtype) -> dict[str, Any]:
        return {"sum": np.float64(0.0), "n": np.int64(0)}

    def vector_lift(self, values: pd.Series) -> dict[str, np.ndarray]:
        if self._kind_of(values.dtype) == "timedelta":
            ns, present = _ticks(values, "timedelta")
            return {"sum": np.where(present, ns, 0).astype(np.float64), "n": present.astype(np.int64)}
        return {
            "sum": values.to_numpy(dtype=np.float64, na_value=0.0),
            "n": values.notna().to_numpy(dtype=np.int64),
        }

    def output_dtype(self) -> Any:
        return np.dtype("timedelta64[ns]") if self._kind == "timedelta" else None

    def vector_output(self, fields: Mapping[str, np.ndarray]) -> np.ndarray:
        n = fields["n"]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, fields["sum"] / np.maximum(n, 1), np.nan)
        if self._kind == "timedelta":
            return _from_ticks(np.round(np.where(n > 0, mean, 0)).astype(np.int64), n > 0, np.dtype("timedelta64[ns]"))
        return mean


class ToList(Accumulation[Any, list[Any], list[Any]]):
    """Every present value, in arrival order within a step (merges concatenate)."""

    fresh_outputs = True
    output_kind = "collection"

    def __init__(self, column: str = NO_COLUMN):
        self.column = require_column("ToList", column)

    def default_accumulated_value(self) -> Any:
        return []

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return accumulated if _missing(value) else [*accumulated, value]

    def accumulate_all(self, accumulated: Any, values: Any) -> Any:
        return [*accumulated, *_present(values)]

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return [*accumulated1, *accumulated2]

    def get_output(self, accumulated: Any) -> Any:
        return list(accumulated)


class ToSet(Accumulation[Any, frozenset[Any], frozenset[Any]]):
    """The set of values (a frozenset, so panes compare and hash)."""

    fresh_outputs = True
    output_kind = "collection"

    def __init__(self, column: str = NO_COLUMN):
        self.column = require_column("ToSet", column)

    def default_accumulated_value(self) -> Any:
        return frozenset()

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return accumulated if _missing(value) else accumulated | {value}

    def accumulate_all(self, accumulated: Any, values: Any) -> Any:
        return accumulated.union(_present(values))

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return accumulated1 | accumulated2

    def get_output(self, accumulated: Any) -> Any:
        return accumulated


class Distinct(Accumulation[Any, dict[Any, None], list[Any]]):
    """The distinct values, in order of first arrival."""

    fresh_outputs = True
    output_kind = "collection"

    def __init__(self, column: str = NO_COLUMN):
        self.column = require_column("Distinct", column)

    def default_accumulated_value(self) -> Any:
        return {}

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return accumulated if _missing(value) or value in accumulated else {**accumulated, value: None}

    def accumulate_all(self, accumulated: Any, values: Any) -> Any:
        return {**accumulated, **dict.fromkeys(_present(values))}

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return {**accumulated1, **accumulated2}

    def get_output(self, accumulated: Any) -> Any:
        return list(accumulated)


class TopN(Accumulation[Any, tuple[Any, ...], list[Any]]):
    """The ``n`` largest values, largest first."""

    fresh_outputs = True
    output_kind = "collection"

    _largest = True

    def __init__(self, column: str = NO_COLUMN, n: int | None = None):
        self.column = require_column(type(self).__name__, column)
        if n is None:
            raise WindowingConfigError(f"{type(self).__name__}() needs n, how many values to keep, e.g. "
                                       f"{type(self).__name__}({column!r}, 3)")
        if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)) or n < 1:
            raise WindowingConfigError(f"{type(self).__name__}(n={n!r}): n must be a positive integer")
        self.n = int(n)  # a NumPy integer too, as AfterCount takes one

    _order: pd.Index | None = None
    """An ordered categorical column's categories (`_declared_order`), else None."""

    def for_input(self, dtype: Any) -> 'Accumulation[Any, Any, Any]':
        out = copy.copy(self)
        out._order = _declared_order(dtype)
        return out

    def _keep(self, values: Iterable[Any]) -> tuple[Any, ...]:
        pick = heapq.nlargest if self._largest else heapq.nsmallest
        return tuple(pick(self.n, values, key=None if self._order is None else functools.partial(_rank, self._order)))

    def default_accumulated_value(self) -> Any:
        return ()

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return accumulated if _missing(value) else self._keep([*accumulated, value])

    def accumulate_all(self, accumulated: Any, values: Any) -> Any:
        return self._keep([*accumulated, *_present(values)])

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return self._keep([*accumulated1, *accumulated2])

    def get_output(self, accumulated: Any) -> Any:
        return list(accumulated)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.column!r}, n={self.n})"


class BottomN(TopN):
    """The ``n`` smallest values, smallest first."""

    _largest = False
