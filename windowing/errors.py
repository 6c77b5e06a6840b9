"""Errors with the parameter, the value and what to do instead.

``WindowingConfigError`` is defined in ``triggers.errors``, below both packages, so that a
duration refused while building a trigger and one refused by the builder are the same error.
"""

from triggers.errors import WindowingConfigError

__all__ = ["WindowingConfigError"]
