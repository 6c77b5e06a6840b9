"""What the engine step runs (`EngineSpec`: windows, trigger, mode, aggregations, lateness) and what
it returns (`StepResult`); pane timing codes and the reasons an element is dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from accumulations import Accumulation
from accumulations.base import Reduction
from triggers import AccumulationMode, Trigger

from . import columns
from .windows import WindowFn

TIMINGS = ("EARLY", "ON_TIME", "LATE")


EARLY, ON_TIME, LATE = 0, 1, 2  # pane ``timing`` codes in engine output; runners name them


DROPPED_LATE = "beyond allowed lateness"


DROPPED_CLOSED = "window closed (trigger finished)"


@dataclass(frozen=True)
class Aggregation:
    """One output column: its name, its accumulation, and the dtype of its input column."""

    name: str
    accumulation: Accumulation[Any, Any, Any]
    input_dtype: Any = None

    @property
    def vectorized(self) -> bool:
        return self.accumulation.vector_fields() is not None

    @property
    def fields(self) -> Mapping[str, Reduction]:
        """A vectorized accumulation's fields and how each merges."""
        fields = self.accumulation.vector_fields()
        assert fields is not None, f"{self.accumulation!r} is not vectorized"
        return fields

    def field_defaults(self) -> dict[str, Any]:
        return self.accumulation.vector_defaults(np.dtype(self.input_dtype or np.int64))


@dataclass(frozen=True)
class EngineSpec:
    """Everything the step needs, with durations already in the time axis's unit."""

    windows: WindowFn
    trigger: Trigger
    mode: AccumulationMode
    aggregations: tuple[Aggregation, ...]
    allowed_lateness: int = 0
    fire_only_updated: bool = False
    n_keys: int = 1

    @property
    def key_columns(self) -> list[str]:
        return columns.keys(self.n_keys)

    @property
    def keeps_last_outputs(self) -> bool:
        """Whether the window table keeps each window's last emitted outputs (``o<i>``): only a
        retraction repeats them, and only ``fire_only_updated`` compares new outputs with them."""
        return self.fire_only_updated or self.mode is AccumulationMode.ACCUMULATING_AND_RETRACTING

    @property
    def last_output_columns(self) -> list[str]:
        """The window table's ``o<i>`` columns: one per aggregation where it keeps them, else none."""
        return [columns.last_output(i) for i in range(len(self.aggregations))] if self.keeps_last_outputs else []


@dataclass
class StepResult:
    panes: pd.DataFrame
    state: pd.DataFrame
    dropped: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Dropped element-window pairs: ``element`` (the index label in the step's
    elements), ``start``, ``end`` and ``reason``."""
