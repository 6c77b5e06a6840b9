"""Window functions: which windows an element at time ``t`` belongs to.

All windows are half-open ``[start, end)`` on the engine's int64 axis.
Assignment is vectorized: it maps an array of times to (element index,
start, end) arrays, one entry per element and window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import WindowingConfigError
from .timeaxis import MAX_TIME, MIN_TIME, TimeAxis


def behind_unit_start(times: np.ndarray, unit: int, offset: int) -> np.ndarray:
    """How far each time lies past the start of its unit ``[offset + k*unit, offset + (k+1)*unit)``:
    ``(times - offset) mod unit``, without the subtraction, which overflows near the ends of the axis."""
    return np.mod(np.mod(times, unit) - offset % unit, unit)


def cut_at_the_ends(times: np.ndarray, behind: np.ndarray | int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The windows ``[times - behind, times - behind + size)`` (``0 <= behind < size``), cut at the ends
    of the axis instead of wrapping around: Beam's ``FixedWindows`` ends the last window of its axis
    at the end of the global window too."""
    ahead = size - behind
    start = np.where(times < MIN_TIME + behind, MIN_TIME, times - behind)
    end = np.where(times > MAX_TIME - ahead, MAX_TIME, times + ahead)
    return start, end


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
        start, end = cut_at_the_ends(times, behind_unit_start(times, self.size, self.offset), self.size)
        return np.arange(len(times)), start, end


@dataclass(frozen=True)
class SlidingWindows(WindowFn):
    """Windows of ``size`` starting every ``every`` (at most ``size``); each time lies in the
    ``size / every`` windows, rounded up or down, whose starts are within ``size`` before it (Beam's
    ``SlidingWindows``: ``every`` need not divide ``size``)."""

    size: int
    every: int
    offset: int = 0
    axis: TimeAxis | None = field(default=None, compare=False, repr=False)
    """The time column's axis, to name the column and show its times in an error."""
    call: str = field(default="", compare=False, repr=False)
    """The builder's call, as the user wrote it (``.sliding('2 seconds', every='1 second')``)."""

    @property
    def max_extent(self) -> int | None:
        return self.size

    def assign(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        steps = np.arange(-(-self.size // self.every), dtype=np.int64) * self.every  # the most windows a time has
        first = behind_unit_start(times, self.every, self.offset)
        kept = first[:, None] < self.size - steps[None, :]  # the window starting that far behind holds the time
        behind = (first[:, None] + np.where(kept, steps[None, :], 0))[kept]
        index = np.broadcast_to(np.arange(len(times))[:, None], kept.shape)[kept]
        too_early = times[index] < MIN_TIME + behind
        if too_early.any():  # cut there, an element's windows would share a start, which identifies a window
            raise self._before_the_axis(int(times[index[too_early][0]]))
        starts, ends = cut_at_the_ends(times[index], behind, self.size)
        return index, starts, ends

    def _before_the_axis(self, time: int) -> WindowingConfigError:
        call = self.call or f"sliding(size={self.size}, every={self.every}, offset={self.offset})"
        if self.axis is None:
            column, shown, first = "", time, MIN_TIME
        else:
            column = f" time column {self.axis.column!r}"
            shown, first = self.axis.from_internal(np.array([time, MIN_TIME])).tolist()
        return WindowingConfigError(
            f"{call}:{column} holds {shown}, whose windows would start before the time axis does ({first}): "
            "filter out times within one window of the start of the axis")


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
