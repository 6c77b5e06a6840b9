"""The error of every setting a pipeline cannot run with, shared by every layer that checks one."""


class WindowingConfigError(ValueError):
    """A pipeline was configured with a value it cannot run with.

    Defined here, in the lowest layer that raises it (durations are parsed for the triggers
    and for the builder alike; ``accumulations`` refuses its bad arguments with it too),
    because neither ``triggers`` nor ``accumulations`` imports ``windowing``; users catch
    it as ``windowing.WindowingConfigError``, the same class. A ``ValueError``, so code that
    caught ``ValueError`` still does.
    """
