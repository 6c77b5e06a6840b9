"""Session merging: which windows of a key overlap, grouped into merged sessions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .key_codes import factorize_keys
from .spec import EngineSpec


def same_windows(spec: EngineSpec, keys: dict[str, np.ndarray], start: np.ndarray, end: np.ndarray,
                  others: dict[str, np.ndarray]) -> np.ndarray:
    """Where the window (``keys``, ``start``, ``end``) is one of the windows in ``others``."""
    n = len(start)
    codes, _ = factorize_keys([np.concatenate([keys[k], others[k]]) for k in spec.key_columns])
    mine = pd.MultiIndex.from_arrays([codes[:n], start, end])
    theirs = pd.MultiIndex.from_arrays([codes[n:], others["start"], others["end"]])
    return mine.isin(theirs)


def candidate_groups(spec: EngineSpec, cand: dict[str, np.ndarray]) -> np.ndarray:
    """Group id per candidate window: same window, or (sessions) overlapping windows of a key."""
    keys = spec.key_columns
    key_code, _ = factorize_keys([cand[k] for k in keys])
    if spec.windows.merging:
        return session_groups(key_code, cand["start"], cand["end"])
    return equal_window_groups(key_code, cand["start"])


def equal_window_groups(key_code: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Group id per window of non-merging windows (a key's windows are equal when their starts are),
    numbered in order of first appearance: one factorization of an int64 when (key code, start)
    fits in one, else pandas' grouping by both."""
    if len(start) == 0:
        return np.arange(0)
    combined = key_and_time(key_code, start)
    if combined is not None:
        return pd.factorize(combined)[0].astype(np.int64)
    frame = pd.DataFrame({"key": key_code, "start": start})
    return frame.groupby(["key", "start"], sort=False).ngroup().to_numpy()


def key_and_time(key_code: np.ndarray, times: np.ndarray) -> np.ndarray | None:
    """(key code, time) per row as one int64 ordered like the pair, or None where the product does not fit."""
    low, span = int(times.min()), int(times.max()) - int(times.min()) + 1
    if (int(key_code.max()) + 1) * span < 2**62:
        return key_code * span + (times - low)
    return None


def sort_by_key_then_time(key_code: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Stable order of rows by (key code, time).

    First by key code alone (`order_of_codes`, linear), then by (key, time) as one int64 with NumPy's
    stable sort (timsort): the first pass leaves each key's rows in one run in arrival order, which a
    stream brings mostly in time order, and timsort takes such runs nearly as they are, where one
    stable sort of the int64 sorts a micro-batch that arrived in time order as if it were shuffled
    (docs/spark_benchmark_history.md, "Sessions sorted by key first"). Where (key, time) does not fit
    in an int64: by time, then by key code.
    """
    if len(times) == 0:
        return np.arange(0)
    combined = key_and_time(key_code, times)
    if combined is None:
        by_time = np.argsort(times, kind="stable")
        return by_time[order_of_codes(key_code[by_time])]
    by_key = order_of_codes(key_code)
    return by_key[np.argsort(combined[by_key], kind="stable")]


def order_of_codes(codes: np.ndarray) -> np.ndarray:
    """Stable order of non-negative integer codes: NumPy sorts 16-bit integers by radix, in linear time,
    so codes below 2**32 are sorted 16 bits at a time (low half, then high half); larger ones by its
    stable sort of int64."""
    high = int(codes.max()) if len(codes) else 0
    if high >= 2**32:
        return np.argsort(codes, kind="stable")
    order = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
    if high >= 2**16:
        order = order[np.argsort((codes[order] >> 16).astype(np.uint16), kind="stable")]
    return order


def running_max_per_key(key_code: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each key (rows sorted by key code): one NumPy
    accumulate over values lifted by key when that fits in int64, else pandas' grouped cummax."""
    if len(values) == 0:
        return values
    combined = key_and_time(key_code, values)
    if combined is not None:  # each key's combined values lie above every earlier key's: the maximum restarts
        # at each key, and taking off the key's offset (combined - values) gives the values back
        return np.maximum.accumulate(combined) - (combined - values)
    return pd.Series(values).groupby(key_code, sort=False).cummax().to_numpy()


def session_groups(key_code: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Group id per window: overlapping windows of one key share a group (touching ones do not)."""
    order = sort_by_key_then_time(key_code, start)
    k, s, e = key_code[order], start[order], end[order]
    running_end = running_max_per_key(k, e)
    prev_end = np.concatenate([[np.iinfo(np.int64).min], running_end[:-1]])
    prev_key = np.concatenate([[-1], k[:-1]])
    starts_group = (k != prev_key) | (s >= prev_end)
    group = np.empty(len(k), dtype=np.int64)
    group[order] = np.cumsum(starts_group) - 1
    return group
