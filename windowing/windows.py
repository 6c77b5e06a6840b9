"""Window functions: which windows an element at time ``t`` belongs to.

All windows are half-open ``[start, end)`` on the engine's int64 axis.
Assignment is vectorized: it maps an array of times to (element index,
start, end) arrays, one entry per element and window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .timeaxis import MAX_TIME, MIN_TIME


@dataclass(frozen=True)
class WindowFn:
    merging = False

    @property
    def max_extent(self) -> int | None:
        """The longest a window lasts from its earliest element's time to its end, in the axis's
        unit; None: unbounded (the global window)."""
        return None

    def assign(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError


@dataclass(frozen=True)
class GlobalWindows(WindowFn):
    """One window, ``[MIN_TIME, MAX_TIME)``, for all elements."""

    def assign(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(times)
        return np.arange(n), np.full(n, MIN_TIME, np.int64), np.full(n, MAX_TIME, np.int64)


@dataclass(frozen=True)
class FixedWindows(WindowFn):
    """Tumbling windows ``[offset + k*size, offset + (k+1)*size)``."""

    size: int
    offset: int = 0

    @property
    def max_extent(self) -> int | None:
        return self.size

    def assign(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        start = times - np.mod(times - self.offset, self.size)
        return np.arange(len(times)), start, start + self.size


@dataclass(frozen=True)
class SlidingWindows(WindowFn):
    """Windows of ``size`` starting every ``every``; each time lies in ``size // every`` windows."""

    size: int
    every: int
    offset: int = 0

    @property
    def max_extent(self) -> int | None:
        return self.size

    def assign(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        per_element = self.size // self.every
        last = times - np.mod(times - self.offset, self.every)
        starts = (last[:, None] - self.every * np.arange(per_element)[None, :]).ravel()
        index = np.repeat(np.arange(len(times)), per_element)
        return index, starts, starts + self.size


@dataclass(frozen=True)
class Sessions(WindowFn):
    """Session windows: each element starts a proto-session ``[t, t + gap)``; overlapping
    sessions of one key merge (touching ones do not: their elements are ``gap`` apart)."""

    gap: int
    merging = True

    @property
    def max_extent(self) -> int | None:
        """A session may grow without bound, but an element's own proto-session ends ``gap`` after it."""
        return self.gap

    def assign(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.arange(len(times)), times.copy(), np.minimum(times, MAX_TIME - self.gap) + self.gap
