"""The built-in accumulations.

``Sum``, ``Count``, ``Min``, ``Max`` and ``Mean`` have vectorized paths; the
collection accumulations hold Python objects and run on the engine's slower
per-window path. Missing values (None, NaN) are skipped, as pandas' reductions
skip them, so both paths agree.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from .base import Accumulation, MergeAccumulation, Reduction


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _require_column(name: str, column: Any) -> str:
    if not isinstance(column, str) or not column:
        raise ValueError(f"{name}(column={column!r}): column must be a non-empty column name")
    return column


class _Additive(Accumulation[Any, Any, Any]):
    """Accumulators that are their own output and add up: 0 when empty, retracted by negation."""

    def default_accumulated_value(self):
        return 0

    def merge(self, accumulated1, accumulated2):
        return accumulated1 + accumulated2

    def get_output(self, accumulated):
        return accumulated

    def get_retraction(self, output):
        return -output


class Sum(_Additive):
    """Sum of a column; 0 for an empty window."""

    def __init__(self, column: str):
        self.column = _require_column("Sum", column)

    def accumulate(self, accumulated, value):
        return accumulated if _missing(value) else accumulated + value

    def vector_fields(self) -> Mapping[str, Reduction]:
        return {"sum": "sum"}

    def vector_defaults(self, dtype):
        return {"sum": np.zeros(1, dtype=_sum_dtype(dtype))[0]}

    def vector_lift(self, values):
        return {"sum": values.fillna(0).to_numpy(dtype=_sum_dtype(values.dtype))}

    def vector_output(self, fields):
        return fields["sum"]


def _sum_dtype(dtype) -> np.dtype:
    kind = np.dtype(dtype).kind if not isinstance(dtype, pd.api.extensions.ExtensionDtype) else dtype.kind
    if kind in "iub":
        return np.dtype(np.int64)
    return np.dtype(np.float64)


class Count(_Additive):
    """Number of elements; with a column, number of non-missing values in it."""

    def __init__(self, column: str | None = None):
        self.column = None if column is None else _require_column("Count", column)

    def accumulate(self, accumulated, value):
        return accumulated if (self.column is not None and _missing(value)) else accumulated + 1

    def vector_fields(self):
        return {"count": "sum"}

    def vector_defaults(self, dtype):
        return {"count": np.int64(0)}

    def vector_lift(self, values):
        if self.column is None:
            return {"count": np.ones(len(values), dtype=np.int64)}
        return {"count": values.notna().to_numpy(dtype=np.int64)}

    def vector_output(self, fields):
        return fields["count"]


class _Extreme(Accumulation[Any, Any, Any]):
    """Shared shape of Min and Max: the extreme value and how many values were seen."""

    reduction: Reduction

    def __init__(self, column: str):
        self.column = _require_column(type(self).__name__, column)

    def _better(self, a, b) -> bool:
        raise NotImplementedError

    def default_accumulated_value(self):
        return None

    def accumulate(self, accumulated, value):
        if _missing(value):
            return accumulated
        return value if accumulated is None or self._better(value, accumulated) else accumulated

    def merge(self, accumulated1, accumulated2):
        if accumulated1 is None:
            return accumulated2
        return self.accumulate(accumulated1, accumulated2)

    def get_output(self, accumulated):
        return accumulated

    def vector_fields(self):
        return {self.reduction: self.reduction, "n": "sum"}

    def vector_defaults(self, dtype):
        dtype = np.dtype(dtype)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            sentinel = info.max if self.reduction == "min" else info.min
            return {self.reduction: np.int64(sentinel), "n": np.int64(0)}
        return {self.reduction: np.float64(np.inf if self.reduction == "min" else -np.inf), "n": np.int64(0)}

    def vector_lift(self, values):
        present = values.notna().to_numpy()
        defaults = self.vector_defaults(values.dtype)
        target = np.int64 if np.dtype(values.dtype).kind in "iu" else np.float64
        raw = values.to_numpy(dtype=target, na_value=defaults[self.reduction]) if target is np.float64 else values.to_numpy(dtype=target)
        return {self.reduction: raw, "n": present.astype(np.int64)}

    def vector_output(self, fields):
        extreme, n = fields[self.reduction], fields["n"]
        if (n > 0).all():
            return extreme
        out = extreme.astype(np.float64)
        out[n == 0] = np.nan
        return out


class Min(_Extreme):
    """Smallest value of a column; None (NaN on the vectorized path) for an empty window."""

    reduction = "min"

    def _better(self, a, b):
        return a < b


class Max(_Extreme):
    """Largest value of a column; None (NaN on the vectorized path) for an empty window."""

    reduction = "max"

    def _better(self, a, b):
        return a > b


class Mean(Accumulation[float, tuple, float]):
    """Arithmetic mean of a column; NaN for an empty window."""

    def __init__(self, column: str):
        self.column = _require_column("Mean", column)

    def default_accumulated_value(self):
        return (0.0, 0)

    def accumulate(self, accumulated, value):
        if _missing(value):
            return accumulated
        return (accumulated[0] + value, accumulated[1] + 1)

    def merge(self, accumulated1, accumulated2):
        return (accumulated1[0] + accumulated2[0], accumulated1[1] + accumulated2[1])

    def get_output(self, accumulated):
        total, n = accumulated
        return total / n if n else float("nan")

    def vector_fields(self):
        return {"sum": "sum", "n": "sum"}

    def vector_defaults(self, dtype):
        return {"sum": np.float64(0.0), "n": np.int64(0)}

    def vector_lift(self, values):
        return {
            "sum": values.to_numpy(dtype=np.float64, na_value=0.0),
            "n": values.notna().to_numpy(dtype=np.int64),
        }

    def vector_output(self, fields):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(fields["n"] > 0, fields["sum"] / np.maximum(fields["n"], 1), np.nan)


class ToList(Accumulation[Any, list, list]):
    """Every value, in arrival order within a step (merges concatenate)."""

    def __init__(self, column: str):
        self.column = _require_column("ToList", column)

    def default_accumulated_value(self):
        return []

    def accumulate(self, accumulated, value):
        return [*accumulated, value]

    def accumulate_all(self, accumulated, values):
        return [*accumulated, *values]

    def merge(self, accumulated1, accumulated2):
        return [*accumulated1, *accumulated2]

    def get_output(self, accumulated):
        return list(accumulated)


class ToSet(Accumulation[Any, frozenset, frozenset]):
    """The set of values (a frozenset, so panes compare and hash)."""

    def __init__(self, column: str):
        self.column = _require_column("ToSet", column)

    def default_accumulated_value(self):
        return frozenset()

    def accumulate(self, accumulated, value):
        return accumulated | {value}

    def accumulate_all(self, accumulated, values):
        return accumulated.union(values)

    def merge(self, accumulated1, accumulated2):
        return accumulated1 | accumulated2

    def get_output(self, accumulated):
        return accumulated


class Distinct(Accumulation[Any, dict, list]):
    """The distinct values, in order of first arrival."""

    def __init__(self, column: str):
        self.column = _require_column("Distinct", column)

    def default_accumulated_value(self):
        return {}

    def accumulate(self, accumulated, value):
        return accumulated if value in accumulated else {**accumulated, value: None}

    def accumulate_all(self, accumulated, values):
        return {**accumulated, **dict.fromkeys(values)}

    def merge(self, accumulated1, accumulated2):
        return {**accumulated1, **accumulated2}

    def get_output(self, accumulated):
        return list(accumulated)


class TopN(Accumulation[Any, tuple, list]):
    """The ``n`` largest values, largest first."""

    _largest = True

    def __init__(self, column: str, n: int):
        self.column = _require_column(type(self).__name__, column)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{type(self).__name__}(n={n!r}): n must be a positive integer")
        self.n = n

    def _keep(self, values) -> tuple:
        pick = heapq.nlargest if self._largest else heapq.nsmallest
        return tuple(pick(self.n, values))

    def default_accumulated_value(self):
        return ()

    def accumulate(self, accumulated, value):
        return accumulated if _missing(value) else self._keep([*accumulated, value])

    def accumulate_all(self, accumulated, values):
        return self._keep([*accumulated, *(v for v in values if not _missing(v))])

    def merge(self, accumulated1, accumulated2):
        return self._keep([*accumulated1, *accumulated2])

    def get_output(self, accumulated):
        return list(accumulated)

    def __repr__(self):
        return f"{type(self).__name__}({self.column!r}, n={self.n})"


class BottomN(TopN):
    """The ``n`` smallest values, smallest first."""

    _largest = False


class Fold(Accumulation[Any, Any, Any]):
    """A user fold: ``add(acc, value)`` per element, ``merge(acc1, acc2)`` for merges.

    ``initial`` must be immutable or ``add`` must not mutate it: every window
    starts from the same object.
    """

    def __init__(self, column: str, initial: Any, add: Callable[[Any, Any], Any],
                 merge: Callable[[Any, Any], Any], output: Callable[[Any], Any] | None = None):
        self.column = _require_column("Fold", column)
        for name, fn in (("add", add), ("merge", merge)):
            if not callable(fn):
                raise ValueError(f"Fold({name}={fn!r}): {name} must be callable")
        self.initial, self._add, self._merge = initial, add, merge
        self._output = output or (lambda acc: acc)

    def default_accumulated_value(self):
        return self.initial

    def accumulate(self, accumulated, value):
        return self._add(accumulated, value)

    def merge(self, accumulated1, accumulated2):
        return self._merge(accumulated1, accumulated2)

    def get_output(self, accumulated):
        return self._output(accumulated)


class Reduce(Accumulation[Any, Any, Any]):
    """A user reduction ``fn(a, b)`` over the values; None for an empty window."""

    def __init__(self, column: str, fn: Callable[[Any, Any], Any]):
        self.column = _require_column("Reduce", column)
        if not callable(fn):
            raise ValueError(f"Reduce(fn={fn!r}): fn must be callable")
        self._fn = fn

    def default_accumulated_value(self):
        return None

    def accumulate(self, accumulated, value):
        return value if accumulated is None else self._fn(accumulated, value)

    def merge(self, accumulated1, accumulated2):
        if accumulated1 is None:
            return accumulated2
        return accumulated1 if accumulated2 is None else self._fn(accumulated1, accumulated2)

    def get_output(self, accumulated):
        return accumulated


class Cogroup(MergeAccumulation[tuple, tuple]):
    """Both streams' values of a window side by side: ``(left_values, right_values)``."""

    def __init__(self, column: str):
        self.column = _require_column(type(self).__name__, column)

    def default_accumulated_value(self):
        return ((), ())

    def accumulate_left(self, accumulated, value):
        return (accumulated[0] + (value,), accumulated[1])

    def accumulate_right(self, accumulated, value):
        return (accumulated[0], accumulated[1] + (value,))

    def merge(self, accumulated1, accumulated2):
        return (accumulated1[0] + accumulated2[0], accumulated1[1] + accumulated2[1])

    def get_output(self, accumulated):
        return (list(accumulated[0]), list(accumulated[1]))


class InnerJoin(Cogroup):
    """Every pair ``(left, right)`` of values of a window, left-major order."""

    def get_output(self, accumulated):
        return [(left, right) for left in accumulated[0] for right in accumulated[1]]
