"""Errors with the parameter, the value and what to do instead."""


class WindowingConfigError(ValueError):
    """A pipeline was configured with a value it cannot run with."""
