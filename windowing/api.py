"""The fluent builder: ``windowed(source, time=..., key=...)`` and its steps.

Every step returns a new builder; nothing runs until ``aggregate`` (or
``run``). ``repr`` shows the chain that made the builder.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from accumulations import Accumulation
from triggers import AccumulationMode, Default, Trigger

from .errors import WindowingConfigError
from .strategy import (
    RESERVED,
    Duration,
    FixedWindowing,
    GlobalWindowing,
    NamedAccumulation,
    SessionWindowing,
    SlidingWindowing,
    Strategy,
    Windowing,
    reserved_column,
)
from .timeaxis import EPOCH_UNITS


@dataclass(frozen=True)
class Windowed:
    """A windowed pipeline under construction (see ``windowed``): the calls made so far, each
    validated as it is made; ``aggregate`` / ``run`` build the `Strategy` and hand it to a runner."""

    source: Any
    time: str | Callable[[Any], Any]
    key: tuple[str, ...] | None
    time_unit: str | None = None
    windowing: Windowing = GlobalWindowing()
    lateness: Duration = Duration("allowed_lateness(lateness)", 0, 0)
    trigger_: Trigger = field(default_factory=Default)
    mode: AccumulationMode = AccumulationMode.DISCARDING
    fire_only_updated: bool = False
    watermark_delay: Duration | None = None
    second: Any = None
    state_store: Any = None
    steps: tuple[str, ...] = ()
    window_call: str | None = None
    """The window option chosen (``.fixed(10)``), None before one is."""

    def _with(self, call: str, **changes: Any) -> "Windowed":
        return dataclasses.replace(self, steps=self.steps + (call,), **changes)

    # ---- windows ---------------------------------------------------------------------------
    def global_window(self) -> "Windowed":
        """One window for all time: it fires at the end of input (or as the trigger says)."""
        return self._window(GlobalWindowing())

    def fixed(self, size: Any, offset: Any = 0) -> "Windowed":
        """Tumbling windows ``[offset + k*size, offset + (k+1)*size)``."""
        return self._window(FixedWindowing(Duration.parse("fixed(size)", size),
                                           Duration.parse("fixed(offset)", offset, allow_zero=True)))

    def sliding(self, size: Any, every: Any, offset: Any = 0) -> "Windowed":
        """Windows of ``size`` starting every ``every`` (at most ``size``; it need not divide it, as in Beam)."""
        return self._window(SlidingWindowing(Duration.parse("sliding(size)", size), Duration.parse("sliding(every)", every),
                                             Duration.parse("sliding(offset)", offset, allow_zero=True)))

    def sessions(self, gap: Any) -> "Windowed":
        """Session windows per key: elements less than ``gap`` apart share a session."""
        return self._window(SessionWindowing(Duration.parse("sessions(gap)", gap)))

    def _window(self, windowing: Windowing) -> "Windowed":
        if self.window_call is not None:  # the last one won without a word: windows the user did not mean
            raise WindowingConfigError(
                f"{windowing.call} after {self.window_call}: a pipeline has one window option; keep one of them")
        return self._with(windowing.call, windowing=windowing, window_call=windowing.call)

    # ---- time ------------------------------------------------------------------------------
    def allowed_lateness(self, lateness: Any) -> "Windowed":
        """How long after the watermark passes a window's end it still accepts elements."""
        parsed = Duration.parse("allowed_lateness(lateness)", lateness, allow_zero=True)
        return self._with(f".allowed_lateness({lateness!r})", lateness=parsed)

    def watermark(self, delay: Any) -> "Windowed":
        """Derive the watermark as the largest event time seen minus ``delay``."""
        parsed = Duration.parse("watermark(delay)", delay, allow_zero=True)
        return self._with(f".watermark({delay!r})", watermark_delay=parsed)

    def with_second_stream(self, right: Any) -> "Windowed":
        """Merge a second stream into the same windows (the seed's WindowedMergeOperator).

        ``right`` has the same time and key columns. Aggregations must then be
        two-stream ``MergeAccumulation``s (``InnerJoin``, ``Cogroup``), which
        see each element as ``(side, value)``: side 0 from this stream, 1 from
        ``right``. The merged watermark is the earlier of the two; for bounded
        DataFrames both end together. pandas sources only, for now.
        """
        if not isinstance(right, type(self.source)):
            raise WindowingConfigError(
                f"with_second_stream(right={_kind_of(right)}): the second stream must be of the first's kind "
                f"({_kind_of(self.source)})")
        if self.second is not None:  # the last one won without a word: a stream the user meant left out
            raise WindowingConfigError(
                "with_second_stream() called twice: a pipeline merges one second stream; concatenate the two first")
        return self._with(f".with_second_stream(<{type(right).__name__}>)", second=right)

    def in_upstream_windows(self) -> "Windowed":
        """Aggregate an upstream stage's panes in their own windows (api.md, "Chained stages"): not built yet."""
        raise WindowingConfigError(
            "in_upstream_windows() is not built yet (docs/engine.md, \"Not built yet\"); until it is, window the upstream "
            "panes by their window_start, e.g. windowed(panes, time='window_start').fixed(<the upstream's size>), with the "
            "upstream stage discarding: its retractions would be counted as values")

    # ---- triggering --------------------------------------------------------------------------
    def trigger(self, trigger: Trigger) -> "Windowed":
        if not isinstance(trigger, Trigger):
            raise WindowingConfigError(f"trigger(trigger={trigger!r}) is not a trigger; give e.g. AtWatermark() or AfterCount(10)")
        return self._with(f".trigger({trigger!r})", trigger_=trigger)

    def discarding(self) -> "Windowed":
        return self._with(".discarding()", mode=AccumulationMode.DISCARDING)

    def accumulating(self) -> "Windowed":
        return self._with(".accumulating()", mode=AccumulationMode.ACCUMULATING)

    def accumulating_and_retracting(self) -> "Windowed":
        return self._with(".accumulating_and_retracting()", mode=AccumulationMode.ACCUMULATING_AND_RETRACTING)

    def fire_only_updated_panes(self) -> "Windowed":
        """Skip a firing whose value equals the window's previous pane."""
        return self._with(".fire_only_updated_panes()", fire_only_updated=True)

    # ---- window state ------------------------------------------------------------------------
    def window_state(self, store: Any) -> "Windowed":
        """Keep the windows' accumulator payloads (collections such as ``ToList``, last outputs) in ``store``, a
        `storage.KVStore`, instead of in memory (pandas) or in Spark's state rows; panes are the same.
        A step reads and writes only the windows it touches (docs/kv_store.md, "Window state")."""
        from storage.kv import KVStore  # lazily: `import windowing` loads no pyarrow-backed storage

        if not isinstance(store, KVStore):
            raise WindowingConfigError(
                f"window_state(store={store!r}) is not a key-value store; give e.g. window_state(KVStore('/data/state'))")
        return self._with(f".window_state({store!r})", state_store=store)

    # ---- running -----------------------------------------------------------------------------
    def aggregate(self, *accumulations: Accumulation[Any, Any, Any], **named: Accumulation[Any, Any, Any]) -> Any:
        """Run the pipeline; return every pane fired (a DataFrame of the source's kind)."""
        return self._run(self.strategy(*accumulations, **named), late_data=False)

    def run(self, *accumulations: Accumulation[Any, Any, Any], **named: Accumulation[Any, Any, Any]) -> Any:
        """Run the pipeline; return panes and the dropped elements (``late_data``).

        For a Spark source the result is a ``SparkRun``: ``output`` (panes and dropped elements in
        one DataFrame, told apart by ``kind``), its views ``panes`` and ``late_data``, and
        ``split(batch)`` for ``foreachBatch`` (docs/spark.md).
        """
        return self._run(self.strategy(*accumulations, **named), late_data=True)

    def _run(self, strategy: Strategy, late_data: bool) -> Any:
        """The runner for the source's kind. ``late_data`` False: only the panes are wanted (and returned), so the
        Spark runner carries no dropped rows and lifts (pre-aggregates) where that is exact."""
        if _is_spark(self.source):
            from .runners.spark import run_spark  # lazily: `import windowing` loads no pyspark
            return run_spark(strategy, self.source, self.second, late_data=late_data)
        from .runners.pandas import run_pandas
        result = run_pandas(strategy, self.source, self.second, late_data=late_data)
        return result if late_data else result.panes

    def strategy(self, *accumulations: Accumulation[Any, Any, Any], **named: Accumulation[Any, Any, Any]) -> Strategy:
        """The validated, frozen `Strategy` of this pipeline with these aggregations."""
        return Strategy(
            time=self.time, keys=self.key, aggregations=_named(accumulations, named), time_unit=self.time_unit,
            windowing=self.windowing, trigger=self.trigger_, mode=self.mode, allowed_lateness=self.lateness,
            watermark_delay=self.watermark_delay, fire_only_updated=self.fire_only_updated,
            two_streams=self.second is not None, window_state=self.state_store)

    def __repr__(self) -> str:
        key = f", key={list(self.key) if self.key and len(self.key) > 1 else (self.key[0] if self.key else None)!r}"
        unit = "" if self.time_unit is None else f", time_unit={self.time_unit!r}"
        return f"windowed(<{type(self.source).__name__}>, time={self.time!r}{key}{unit})" + "".join(self.steps)


def _named(positional: Sequence[Accumulation[Any, Any, Any]],
           named: dict[str, Accumulation[Any, Any, Any]]) -> tuple[NamedAccumulation, ...]:
    """``aggregate``'s arguments as (output column, accumulation) pairs; the unnamed one is ``value``."""
    if len(positional) > 1:
        raise WindowingConfigError(
            f"aggregate() got {len(positional)} unnamed accumulations; name them, e.g. aggregate(total=Sum('x'), n=Count())")
    if positional and "value" in named:
        raise WindowingConfigError(
            f"aggregate({positional[0]!r}, value={named['value']!r}): the unnamed accumulation's output column is "
            "'value' too, so one would be lost; name both, e.g. aggregate(total=Sum('x'), value=Count())")
    pairs = ([("value", positional[0])] if positional else []) + list(named.items())
    if not pairs:
        raise WindowingConfigError("aggregate() needs an accumulation, e.g. aggregate(Sum('amount'))")
    return tuple(pairs)


def _is_spark(source: Any) -> bool:
    return type(source).__module__.startswith("pyspark.")


def windowed(source: Any, time: str | Callable[[Any], Any] = "ts", key: str | Sequence[str] | None = None,
             time_unit: str | None = None) -> Windowed:
    """Start a windowed pipeline over ``source`` (pandas DataFrame, TestStream or Spark DataFrame).

    ``time`` names the event-time column, or is a function of the DataFrame
    returning the event times (pandas only). ``key`` is a column, a list of
    columns, or None (not keyed: one group). ``time_unit`` (``"s"``, ``"ms"``,
    ``"us"``, ``"ns"``) says that a numeric time column holds epoch instants in
    that unit, floats included (``time.time()``): it is then read as timestamps,
    rounded to the nearest microsecond, and durations are strings or timedeltas.
    """
    if not (isinstance(time, str) and time) and not callable(time):
        raise WindowingConfigError(f"windowed(time={time!r}): give the event-time column's name or a function of the DataFrame")
    if time_unit is not None and time_unit not in EPOCH_UNITS:
        raise WindowingConfigError(
            f"windowed(time_unit={time_unit!r}): give the unit of the epoch instants in the time column, one of "
            f"{', '.join(map(repr, EPOCH_UNITS))}, or None for a column of timestamps or of integers in a unit of your own")
    if key is None:
        keys = None
    elif isinstance(key, str):
        keys = (key,)
    elif isinstance(key, (list, tuple)) and key and all(isinstance(k, str) for k in key):
        keys = tuple(key)
    else:
        raise WindowingConfigError(f"windowed(key={key!r}): give a column name, a list of column names, or None")
    for name in keys or ():
        if name in RESERVED:
            raise WindowingConfigError(
                f"windowed(key={key!r}): key column {name!r} clashes with {reserved_column(name)}, "
                "which would overwrite it; rename that column of the input first")
        if keys is not None and keys.count(name) > 1:
            raise WindowingConfigError(f"windowed(key={key!r}) names column {name!r} twice; name each key column once")
    return Windowed(source=source, time=time, key=keys, time_unit=time_unit)


def _kind_of(source: Any) -> str:
    """A source's class with its module's top package: a pandas DataFrame and a Spark one are both "DataFrame"."""
    kind = type(source)
    return f"{kind.__module__.split('.')[0]}.{kind.__name__}"
