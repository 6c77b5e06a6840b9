"""Event-time windowing with Beam semantics: the builder, TestStream, the engine and its runners."""

from .api import Windowed, windowed
from .errors import RepeatedWallTimeWarning, WindowingConfigError
from .runners.pandas import WindowedResult
from .runners.spark import SparkRun, spark_typed
from .scripted_stream import TestStream

__all__ = ["windowed", "Windowed", "TestStream", "WindowedResult", "SparkRun", "spark_typed", "WindowingConfigError",
           "RepeatedWallTimeWarning"]
