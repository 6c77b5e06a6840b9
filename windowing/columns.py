"""The column names of the engine's frames, in one place: every module asks here.

- The element frame (a step's input): the key columns ``_k<i>`` (one constant column when not
  keyed), the event time ``_t``, and the input column of aggregation ``i`` as ``_v<i>``.
- The pane frame (`windowing.panes`): the key columns, ``start``, ``end``, aggregation ``i``'s output as
  ``_out<i>``, ``timing``, ``pane_index``, ``is_retraction``.
- The window table (`windowing.engine`): the key columns, the window's own columns, then per
  aggregation ``i`` its accumulator (``a<i>.<field>`` for each vectorized field, or ``a<i>``
  holding Python objects) and its last emitted output ``o<i>``, then the trigger's ``t.<...>``.

The Spark runner ships the element frame's columns under these names too
(`windowing.runners.spark.wire`), and the state codec stores the window table under them: a
rename needs a mapping of old names in `windowing.state_codec`.
"""

from __future__ import annotations

TIME = "_t"
"""The event time, int64 in the time axis's unit."""


def key(i: int) -> str:
    """Key column ``i``."""
    return f"_k{i}"


def keys(n: int) -> list[str]:
    """The ``n`` key columns (n is at least 1: a pipeline without keys has one constant key)."""
    return [key(i) for i in range(n)]


def value(i: int) -> str:
    """The input values of aggregation ``i``."""
    return f"_v{i}"


def output(i: int) -> str:
    """Aggregation ``i``'s output in the engine's pane frame, under this name rather than the user's, which
    could be one of the frame's own (``start``, ``_k0``) and overwrite it; the runners name it back."""
    return f"_out{i}"


def accumulator(i: int, field: str | None = None) -> str:
    """Aggregation ``i``'s accumulator: its vectorized ``field``, or (None) its Python objects."""
    return f"a{i}" if field is None else f"a{i}.{field}"


def last_output(i: int) -> str:
    """Aggregation ``i``'s last emitted output, for retractions and ``fire_only_updated_panes``."""
    return f"o{i}"
