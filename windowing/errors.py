"""Errors with the parameter, the value and what to do instead; warnings of what a setting will cost.

``WindowingConfigError`` is defined in ``triggers.errors``, below both packages, so that a
duration refused while building a trigger and one refused by the builder are the same error.
"""

from triggers.errors import WindowingConfigError

__all__ = ["WindowingConfigError", "RepeatedWallTimeWarning"]


class RepeatedWallTimeWarning(UserWarning):
    """A Spark query's timestamps that a Fold, Reduce, own or ``spark_typed`` accumulation reads or gives, or nested
    ones (keys and built-ins of a timestamp column are held exactly), are held as wall times in a session time zone
    that sets its clocks back, where two instants an hour apart share a wall time (docs/spark.md, "Output types")."""
