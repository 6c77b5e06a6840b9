"""Trigger options, Beam's trigger algebra, and accumulation modes."""

from .algebra import AfterAll, AfterAny, AfterEach, AfterWatermark, OrFinally, Repeatedly
from .base import NO_TIME, Column, Fired, Trigger, TriggerContext, future_timers
from .durations import duration_text, parse_duration
from .errors import WindowingConfigError
from .library import AfterCount, AfterProcessingTime, AtWatermark, Default, Never
from .modes import AccumulationMode

__all__ = ["Trigger", "TriggerContext", "Fired", "Column", "NO_TIME", "future_timers", "parse_duration", "duration_text", "AtWatermark",
           "AfterWatermark", "AfterCount", "AfterProcessingTime", "Repeatedly", "AfterAny",
           "AfterAll", "AfterEach", "OrFinally", "Never", "Default", "AccumulationMode",
           "WindowingConfigError"]
