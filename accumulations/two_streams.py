"""The two-stream accumulations: ``with_second_stream()`` pipelines see each element as ``(side, value)``."""

from __future__ import annotations

from typing import Any

from .base import NO_COLUMN, MergeAccumulation, require_column


class Cogroup(MergeAccumulation[Any, Any]):
    """Both streams' values of a window side by side: ``(left_values, right_values)``."""

    fresh_outputs = True

    def __init__(self, column: str = NO_COLUMN):
        self.column = require_column(type(self).__name__, column)

    def default_accumulated_value(self) -> Any:
        return ((), ())

    def accumulate_left(self, accumulated: Any, value: Any) -> Any:
        return (accumulated[0] + (value,), accumulated[1])

    def accumulate_right(self, accumulated: Any, value: Any) -> Any:
        return (accumulated[0], accumulated[1] + (value,))

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return (accumulated1[0] + accumulated2[0], accumulated1[1] + accumulated2[1])

    def get_output(self, accumulated: Any) -> Any:
        return (list(accumulated[0]), list(accumulated[1]))


class InnerJoin(Cogroup):
    """Every pair ``(left, right)`` of values of a window, left-major order."""

    def get_output(self, accumulated: Any) -> Any:
        return [(left, right) for left in accumulated[0] for right in accumulated[1]]
