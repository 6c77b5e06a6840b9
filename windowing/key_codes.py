"""Key coding: key columns (any dtype, None included) as small non-negative integer codes (dense after
`compact`), so that grouping by (key, window) is integer arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: pandas 2 (the runtimes of pyspark 3.5): its factorize compares strings only up to a NUL (`_factorized`).
_PANDAS_2 = int(pd.__version__.split(".")[0]) < 3


def take(values: np.ndarray, index: np.ndarray, n_source: int) -> np.ndarray:
    """``values[index]``, skipping the copy when ``index`` is every position in order."""
    if len(index) == n_source and np.array_equal(index, np.arange(n_source)):
        return values
    return values[index]


def value_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and the value of each code.

    Integers spanning a small range get ``value - min`` (no hashing, and
    codes sorted like the values); anything else is factorized.
    """
    if values.dtype.kind in "iu" and len(values):
        low, high = int(values.min()), int(values.max())
        if high - low <= 4 * len(values) + 1024:
            # In the column's own dtype an int8 127 - (-128) wraps around (NumPy 2 keeps the dtype): signed widen
            # first; unsigned never goes below its minimum, and a uint64 beyond 2**63 would not fit int64
            shifted = values.astype(np.int64) - low if values.dtype.kind == "i" else values - values.dtype.type(low)
            return shifted.astype(np.int64), np.arange(low, high + 1, dtype=values.dtype)
    return _factorized(values)


def _factorized(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values, use_na_sentinel=False)``: missing values are one key (NaN), coded in order of appearance;
    on pandas 2, by a dict where a string holds a NUL: pandas 2's factorize takes strings to be equal up to their
    first NUL ('a' == 'a\\x00b')."""
    if values.dtype == object and _PANDAS_2 and _holds_nul(values):
        missing_key = object()  # NaN, None and NaT as one key, as factorize has them
        seen: dict[Any, int] = {}
        keys = (missing_key if pd.api.types.is_scalar(v) and pd.isna(v) else v for v in values)
        codes = np.fromiter((seen.setdefault(key, len(seen)) for key in keys), np.int64, len(values))
        uniques = np.empty(len(seen), dtype=object)
        uniques[:] = [np.nan if k is missing_key else k for k in seen]
        return codes, uniques
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniques)


def compact(combined: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense group ids 0..n-1 for codes in ``[0, bound)``, and the code of each group."""
    if bound <= 8 * len(combined) + 1024:
        present = np.bincount(combined, minlength=bound) > 0
        rank = np.cumsum(present) - 1
        return rank[combined], np.flatnonzero(present)
    group, codes = pd.factorize(combined)
    return group, codes


def factorize_keys(key_values: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """One int code per row for one or more key columns, and each column's value per code."""
    codes, uniques = value_codes(key_values[0])
    columns = [uniques]
    for values in key_values[1:]:
        more, more_uniques = value_codes(values)
        codes, combo = compact(codes * len(more_uniques) + more, len(columns[0]) * len(more_uniques))
        columns = [c[combo // len(more_uniques)] for c in columns] + [more_uniques[combo % len(more_uniques)]]
    return codes, columns


def _holds_nul(values: np.ndarray) -> bool:
    """Whether a string among ``values`` holds a NUL: by pandas' string methods where all are strings (or missing)."""
    try:
        return bool(pd.Series(values, dtype=object).str.contains("\x00", regex=False).any())
    except (AttributeError, TypeError):  # values of other types beside the strings; bytes (pandas 2 refuses them)
        return any(isinstance(v, str) and "\x00" in v for v in values)
