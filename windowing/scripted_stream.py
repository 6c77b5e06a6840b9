"""TestStream: a scripted stream of elements, watermark and processing-time moves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import pandas as pd

from triggers import parse_duration

from .errors import WindowingConfigError


@dataclass(frozen=True)
class AddElements:
    elements: pd.DataFrame


@dataclass(frozen=True)
class AdvanceWatermark:
    to: Any  # an instant in the time column's type, or None for infinity


@dataclass(frozen=True)
class AdvanceProcessingTime:
    by: Any


Action = Union[AddElements, AdvanceWatermark, AdvanceProcessingTime]


class TestStream:
    """A script of actions; the pandas runner runs each action as one step.

    Every method returns a new TestStream. If the script does not end at an
    infinite watermark, the runner adds a last step that advances it there
    (end of input), so no window is left unfired.
    """

    __test__ = False  # not a pytest class

    def __init__(self, actions: tuple[Action, ...] = ()):
        self.actions = actions

    def _then(self, action: Action) -> "TestStream":
        return TestStream(self.actions + (action,))

    def add_elements(self, elements: pd.DataFrame | list[dict[str, Any]]) -> "TestStream":
        if isinstance(elements, list):
            index, item = next(((i, item) for i, item in enumerate(elements) if not isinstance(item, dict)), (None, None))
            if index is not None:  # pandas makes a column named 0 of them: the run then missed its time column
                raise WindowingConfigError(
                    f"add_elements(elements=[...]): item {index} is {item!r} ({type(item).__name__}); a list holds "
                    "one dict per element, e.g. {'ts': 1, 'x': 5}")
            elements = pd.DataFrame(elements)
        if not isinstance(elements, pd.DataFrame):
            raise WindowingConfigError(f"add_elements(elements={type(elements).__name__}): give a pandas DataFrame or a list of dicts")
        return self._then(AddElements(elements.reset_index(drop=True)))

    def advance_watermark_to(self, time: Any) -> "TestStream":
        if time is None:
            raise WindowingConfigError("advance_watermark_to(time=None): use advance_watermark_to_infinity()")
        return self._then(AdvanceWatermark(time))

    def advance_watermark_to_infinity(self) -> "TestStream":
        return self._then(AdvanceWatermark(None))

    def advance_processing_time(self, duration: Any) -> "TestStream":
        """Checked here; kept as given, so that an error of the run (a duration on a numeric column) shows it so."""
        parse_duration("advance_processing_time(duration)", duration)
        return self._then(AdvanceProcessingTime(duration))

    def first_elements(self) -> pd.DataFrame | None:
        """The first step's elements with rows (else the first with columns): what a run plans its time axis and
        dtypes by. A step without rows tells nothing of them: pandas makes its columns float64 or object (planned
        by one, keys 2**53 and 2**53 + 1 became one float key, a string key failed to convert)."""
        steps = [a.elements for a in self.actions if isinstance(a, AddElements) and len(a.elements.columns)]
        return next((frame for frame in steps if len(frame)), steps[0] if steps else None)

    def __repr__(self) -> str:
        return f"TestStream(<{len(self.actions)} actions>)"
