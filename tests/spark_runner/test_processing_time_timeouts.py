"""A processing-time firing happens in the first micro-batch whose timestamp reaches it.

Spark times a group out only when the batch timestamp is *after* the timeout
timestamp; a timeout set exactly at the firing time made the firing slip to
the next micro-batch, where new elements joined the pane (found by the
differential property test).
"""

from .test_adapter import _differential
from .helpers import assert_same_panes


def test_periodic_early_firing_is_not_delayed_into_the_next_batch_with_data():
    batches = [[("a", 14, 3), ("a", 118, 18)], [("a", 85, 28), ("a", 40, 39)], []]
    # Processing time: +1 s (first data), +10 s (the early firing is due: a no-data batch), +1 s ...
    _, actual, expected = _differential(batches, "global", "early_periodic_retracting", 1, [1], [1, 10, 1, 1, 1])
    assert list(expected["total"]) == [21]  # the pandas runner fires before the second batch's elements
    assert_same_panes(actual, expected)
