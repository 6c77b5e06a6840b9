"""A brute-force reference model of windowing, written apart from the engine.

Plain Python, one key and one window at a time, no pandas, no numpy: given
elements ``(key, t, value)`` and a window function, it computes which windows
exist at the end and which values each holds. The property tests compare the
engine's final panes with it.

Windows are half-open ``(start, end)`` tuples. Session windows are recomputed
from all elements of a key: sort the times, and an element joins the current
session when its proto-session ``[t, t + gap)`` overlaps it, that is when
``t < end`` (touching sessions stay apart, as in Beam's ``IntervalWindow``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable

GLOBAL = (-(2**63), 2**63 - 1)
"""The global window as api.md shows it for an int64 time column: the type's minimum and maximum."""


@dataclass(frozen=True)
class Element:
    key: Hashable
    t: int
    value: Any


@dataclass(frozen=True)
class WindowSpec:
    """``kind`` is ``"global"``, ``"fixed"``, ``"sliding"`` or ``"sessions"``."""

    kind: str
    size: int = 0
    every: int = 0

    def windows_of(self, t: int) -> list[tuple[int, int]]:
        """The windows of a non-merging window function that contain ``t``."""
        if self.kind == "global":
            return [GLOBAL]
        if self.kind == "fixed":
            start = t - (t % self.size)
            return [(start, start + self.size)]
        if self.kind == "sliding":
            out = []
            start = t - (t % self.every)
            while start > t - self.size:
                out.append((start, start + self.size))
                start -= self.every
            return out
        raise ValueError(f"{self.kind} windows are not assigned one element at a time")


def sessions_of(times: Iterable[int], gap: int) -> list[tuple[int, int]]:
    """The sessions that the given times of one key form."""
    out: list[list[int]] = []
    for t in sorted(times):
        if out and t < out[-1][1]:
            out[-1][1] = max(out[-1][1], t + gap)
        else:
            out.append([t, t + gap])
    return [(s, e) for s, e in out]


def window_contents(elements: Iterable[Element], spec: WindowSpec) -> dict[tuple, list[Any]]:
    """``(key, start, end) -> values`` of every window that holds an element."""
    contents: dict[tuple, list[Any]] = defaultdict(list)
    elements = list(elements)
    if spec.kind == "sessions":
        by_key: dict[Hashable, list[Element]] = defaultdict(list)
        for e in elements:
            by_key[e.key].append(e)
        for key, items in by_key.items():
            for start, end in sessions_of([e.t for e in items], spec.size):
                for e in items:
                    if start <= e.t < end:
                        contents[(key, start, end)].append(e.value)
        return dict(contents)
    for e in elements:
        for start, end in spec.windows_of(e.t):
            contents[(e.key, start, end)].append(e.value)
    return dict(contents)


def final_values(elements: Iterable[Element], spec: WindowSpec,
                 reduce: Callable[[list[Any]], Any] = sum) -> dict[tuple, Any]:
    """``(key, start, end) -> reduce(values)`` for every window that holds an element."""
    return {window: reduce(values) for window, values in window_contents(elements, spec).items()}


def with_lateness(steps: Iterable[tuple[list[Element], int | None]], spec: WindowSpec,
                  lateness: int) -> tuple[dict[tuple, list[Any]], list[tuple[Element, tuple[int, int]]]]:
    """Window contents when late data is dropped, for non-merging windows.

    ``steps`` are the batches with the watermark in force when each arrives
    (None: no watermark yet). An element is dropped from a window when the
    window's end plus the allowed lateness is at or behind that watermark.
    Returns ``(key, start, end) -> values`` of the accepted elements and the
    dropped ``(element, (start, end))`` pairs.
    """
    contents: dict[tuple, list[Any]] = defaultdict(list)
    dropped: list[tuple[Element, tuple[int, int]]] = []
    for batch, watermark in steps:
        for e in batch:
            for start, end in spec.windows_of(e.t):
                if watermark is not None and min(end + lateness, GLOBAL[1]) <= watermark:
                    dropped.append((e, (start, end)))
                else:
                    contents[(e.key, start, end)].append(e.value)
    return dict(contents), dropped
