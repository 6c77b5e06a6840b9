"""Trigger options, Beam's trigger algebra, and accumulation modes."""

from .base import NO_TIME, Column, Trigger, TriggerContext, future_timers
from .durations import parse_duration
from .errors import WindowingConfigError
from .library import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    AtWatermark,
    Default,
    Never,
    OrFinally,
    Repeatedly,
)
from .modes import AccumulationMode

__all__ = ["Trigger", "TriggerContext", "Column", "NO_TIME", "future_timers", "parse_duration", "AtWatermark",
           "AfterWatermark", "AfterCount", "AfterProcessingTime", "Repeatedly", "AfterAny",
           "AfterAll", "AfterEach", "OrFinally", "Never", "Default", "AccumulationMode",
           "WindowingConfigError"]
