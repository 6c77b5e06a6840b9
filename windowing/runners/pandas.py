"""The pandas runner: a bounded DataFrame or a TestStream, step by step, in one process."""

from __future__ import annotations

import datetime as dt
import numbers
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .. import columns as spec_columns
from ..engine import step
from ..errors import WindowingConfigError
from ..plan import SIDE, Plan, check_columns, check_late_data_columns, joined_panes, make_plan, to_elements, to_panes
from ..scripted_stream import Action, AddElements, AdvanceProcessingTime, AdvanceWatermark, TestStream
from ..spec import StepResult
from ..strategy import Duration, Strategy
from ..timeaxis import MAX_TIME, MIN_TIME, NS_PER_MS, TimeAxis
from ..window_state import PANDAS_BUCKET, end_run, keyed_step, start_run
from ..window_table import empty_state


class WindowedResult(NamedTuple):
    """What a pandas run produced: ``WindowedResult(panes, late_data)``, as api.md writes it, so it unpacks
    (``panes, late_data = pipeline.run(...)``) and indexes (``result[0]``) as that pair does.

    ``panes``: every pane fired, in firing order. ``late_data``: the input
    rows the engine dropped (late beyond the allowed lateness, or for a
    window whose trigger had finished), with ``window_start``,
    ``window_end``, ``reason`` (and ``step`` for a TestStream).
    """

    panes: pd.DataFrame
    late_data: pd.DataFrame

    @property
    def dropped_count(self) -> int:
        return len(self.late_data)


def _event_times(strategy: Strategy, frame: pd.DataFrame) -> pd.Series:
    if isinstance(strategy.time, str):
        return frame[strategy.time]
    times = strategy.time(frame)
    if not isinstance(times, pd.Series):
        array = np.asarray(times)
        if array.shape != (len(frame),):  # pandas would repeat a scalar over every row, silently
            raise WindowingConfigError(
                f"windowed(time={strategy.time!r}) returned {type(times).__name__} of shape {array.shape} for "
                f"{len(frame)} rows; return one time per row (a Series or a 1-D array in the rows' order)")
        return pd.Series(array, index=frame.index)
    if times.index.equals(frame.index):
        return times
    if times.index.has_duplicates or frame.index.has_duplicates:
        raise WindowingConfigError(
            f"windowed(time={strategy.time!r}) returned a Series whose index differs from the input's, and one of "
            "the two has duplicate labels, so its times cannot be matched to the rows; return one with the "
            "input's index (or a NumPy array in the rows' order)")
    unmatched = frame.index.difference(times.index)
    if len(unmatched):  # reindexed, each would be a missing time, misreported as the input's
        raise WindowingConfigError(
            f"windowed(time={strategy.time!r}) returned a Series of {len(times)} times whose index has no label for "
            f"{len(unmatched)} of the input's {len(frame)} rows (the first {unmatched[0]!r}); return one time per "
            "row, with the input's index (or a NumPy array in the rows' order)")
    return times.reindex(frame.index)  # by label, as DataFrame.assign takes a Series: a sorted one is not shifted


def run_pandas(strategy: Strategy, source: Any, second: Any = None, late_data: bool = True) -> WindowedResult:
    """Run ``strategy`` over ``source`` (and, with two streams, ``second``) step by step. ``late_data`` False
    (``aggregate()``): the dropped rows are not wanted, so the input may have columns named like theirs."""
    if second is not None:
        if not isinstance(source, pd.DataFrame):
            raise WindowingConfigError(
                f"with_second_stream() works with bounded pandas DataFrames for now, not a {type(source).__name__} source")
        source = _sides_joined(strategy, source, second)
    if isinstance(source, pd.DataFrame):
        script: list[Action] = [AddElements(source)]
        is_stream = False
    elif isinstance(source, TestStream):
        script = list(source.actions)
        is_stream = True
    else:
        raise WindowingConfigError(
            f"windowed(source={type(source).__name__}): give a pandas DataFrame, a TestStream or a Spark DataFrame")

    script = [AddElements(_arrow_times_as_pandas(strategy, a.elements)) if isinstance(a, AddElements) else a for a in script]
    sample = script[0].elements if isinstance(source, pd.DataFrame) else source.first_elements()  # type: ignore[union-attr]
    if sample is not None and not isinstance(source, pd.DataFrame):
        sample = _arrow_times_as_pandas(strategy, sample)
    if sample is None:
        sample = _without_elements(strategy, source)
    check_columns(list(sample.columns), strategy)
    if late_data:
        frames = [a.elements for a in script if isinstance(a, AddElements)]
        check_late_data_columns(list(dict.fromkeys(c for f in frames for c in f.columns)), with_step=is_stream)
    axis = TimeAxis.of(strategy.time if isinstance(strategy.time, str) else "<time function>", _event_times(strategy, sample),
                       epoch_unit=strategy.time_unit)
    plan = make_plan(strategy, axis, _input_dtypes(strategy, script if is_stream else [], sample))
    if strategy.window_state is None:
        result = _Run(plan, strategy, is_stream, sample.iloc[:0]).execute(script)
    else:
        with strategy.window_state.open(PANDAS_BUCKET) as bucket:
            result = _SpilledRun(plan, strategy, is_stream, sample.iloc[:0], bucket).execute(script)
    return result if second is None else result._replace(late_data=result.late_data.drop(columns=SIDE))


def _sides_joined(strategy: Strategy, first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """The two inputs as one frame, each row's side in ``SIDE``. Each input is checked on its own (joined, a
    column of one filled the other's rows with NaN), and a column the pipeline reads whose dtypes differ is
    joined as Python objects (pandas' concat made int64 beside float64 float64, 2**53 + 1 became 2**53), except
    where that would change what the engine compares: times, and keys of different kinds, are refused."""
    sides: list[pd.DataFrame] = []
    for which, frame in (("first", first), ("second", second)):
        try:
            check_columns(list(frame.columns), strategy)
        except WindowingConfigError as error:
            raise WindowingConfigError(f"{error} (the {which} input of with_second_stream())") from None
        if SIDE in frame.columns:
            raise WindowingConfigError(
                f"the {which} input of with_second_stream() has a column {SIDE!r}, the name the runner marks each "
                "row's input with; rename it")
        sides.append(frame.assign(**{SIDE: len(sides)}))
    time = strategy.time if isinstance(strategy.time, str) else None
    keys = list(strategy.keys or ())
    for name in dict.fromkeys([*([time] if time else []), *keys, *(c for c in strategy.value_columns if c is not None)]):
        left, right = sides[0][name], sides[1][name]
        if left.dtype == right.dtype and not (name in keys and left.dtype == object):  # objects: their values say
            continue
        if not len(left) or not len(right):  # no values: the other input's dtype (an empty frame's are float64)
            empty, full = (0, right) if not len(left) else (1, left)
            sides[empty][name] = sides[empty][name].astype(full.dtype)
        elif name == time:
            if isinstance(left.dtype, pd.DatetimeTZDtype) and isinstance(right.dtype, pd.DatetimeTZDtype):
                sides[1][name] = right.dt.tz_convert(left.dtype.tz)  # the same instants, in one zone
                continue
            raise WindowingConfigError(
                f"time column {name!r} is {left.dtype} in the first input and {right.dtype} in the second; give both "
                "inputs times of one kind (timestamps, both with a time zone or both without, or numbers of one dtype)")
        elif name in keys and None not in (_kind(left), _kind(right)) and _kind(left) != _kind(right):
            raise WindowingConfigError(
                f"key column {name!r} is {_shown(left)} in the first input and {_shown(right)} in the second, so no key "
                "of one equals a key of the other; cast one input's column to the other's type")
        else:
            sides[0][name], sides[1][name] = left.astype(object), right.astype(object)
    return pd.concat(sides, ignore_index=True)


def _kind(column: pd.Series) -> str | None:
    """What a key column holds, where its dtype or, for Python objects, its values say: None for a mix of kinds
    or none at all."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        return _OBJECT_KINDS.get(pd.api.types.infer_dtype(column, skipna=True))
    tests = (("boolean", pd.api.types.is_bool_dtype), ("number", pd.api.types.is_numeric_dtype),
             ("timestamp", pd.api.types.is_datetime64_any_dtype), ("duration", pd.api.types.is_timedelta64_dtype),
             ("string", pd.api.types.is_string_dtype))
    return next((kind for kind, test in tests if test(dtype)), None)


def _shown(column: pd.Series) -> str:
    """A key column's dtype, and for Python objects what they are."""
    return f"object ({_kind(column)}s)" if column.dtype == object else str(column.dtype)


_OBJECT_KINDS = {"string": "string", "integer": "number", "floating": "number", "mixed-integer-float": "number",
                 "decimal": "number", "boolean": "boolean", "datetime": "timestamp", "datetime64": "timestamp",
                 "timedelta": "duration", "timedelta64": "duration"}
"""`pandas.api.types.infer_dtype`'s names of an object column's values, as `_kind`'s kinds."""


def _input_dtypes(strategy: Strategy, script: list[Action], sample: pd.DataFrame) -> dict[str, Any]:
    """The dtypes the keys and values are planned for. A TestStream's are those of all its steps' elements
    concatenated, as if they were one DataFrame: planned for the first step's dtypes alone, a step of floats
    after one of ints was summed as ints (1.5 as 1), and a key of another type was printed in the first's."""
    dtypes = {str(name): dtype for name, dtype in sample.dtypes.items()}
    actions = [(i, a.elements) for i, a in enumerate(script) if isinstance(a, AddElements) and len(a.elements)]
    frames = [frame for _, frame in actions]
    if len(frames) > 1:
        for index, frame in actions:
            try:
                check_columns(list(frame.columns), strategy)
            except WindowingConfigError as error:  # "not a column of the input" misled where the first step has it
                raise WindowingConfigError(f"add_elements(...) at action {index}: {error}") from None
        named = [c for c in dict.fromkeys([*(strategy.keys or ()), *strategy.value_columns])
                 if c is not None and c != strategy.time]  # the time column's kind is checked step by step
        dtypes.update({name: pd.concat([frame[name] for frame in frames], ignore_index=True).dtype for name in named})
        for key in strategy.keys or ():
            # Integer keys beside float ones: pandas' float64 would print 2**53 + 1 as 2**53, a key the engine keeps
            # apart (it groups each step's exact values), so the column is objects, each key as its step holds it
            if key != strategy.time and pd.api.types.is_float_dtype(dtypes[key]) and \
                    any(pd.api.types.is_integer_dtype(frame[key].dtype) for frame in frames):
                dtypes[key] = np.dtype(object)
    return dtypes


def _arrow_times_as_pandas(strategy: Strategy, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the Arrow-backed timestamps and durations the pipeline reads (``dtype_backend="pyarrow"``) as
    pandas' own ``datetime64`` and ``timedelta64``: the time axis and the built-ins take those (a time column of
    them was refused as holding neither timestamps nor numbers, a ``Min`` of them failed with NumPy's
    "Cannot interpret 'timestamp[us][pyarrow]' as a data type")."""
    import pyarrow as pa

    read = [strategy.time] if isinstance(strategy.time, str) else []
    read += [*(strategy.keys or ()), *(c for c in strategy.value_columns if c is not None)]
    native: dict[str, Any] = {}
    for name in dict.fromkeys(c for c in read if c in frame.columns and not isinstance(frame[c], pd.DataFrame)):
        dtype = frame[name].dtype
        if isinstance(dtype, pd.ArrowDtype) and pa.types.is_timestamp(dtype.pyarrow_dtype):
            arrow = dtype.pyarrow_dtype
            native[name] = pd.DatetimeTZDtype(arrow.unit, arrow.tz) if arrow.tz else np.dtype(f"datetime64[{arrow.unit}]")
        elif isinstance(dtype, pd.ArrowDtype) and pa.types.is_duration(dtype.pyarrow_dtype):
            native[name] = np.dtype(f"timedelta64[{dtype.pyarrow_dtype.unit}]")
    return frame.astype(native) if native else frame


def _joined_rows(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Steps' dropped input rows as one frame, each value as its step held it: a column of other dtypes in two
    steps is joined as objects (pandas' concat made int64 beside float64 float64, 2**53 + 1 read 2**53)."""
    differ = [name for name in dict.fromkeys(frames[0].columns)  # a name twice in a frame: each column's dtype
              if len({dtype for frame in frames if name in frame for dtype in frame.dtypes[frame.columns == name]}) > 1]
    return pd.concat([frame.astype(dict.fromkeys([c for c in differ if c in frame], object)) for frame in frames],
                     ignore_index=True)


def _without_elements(strategy: Strategy, stream: TestStream) -> pd.DataFrame:
    """A frame with no rows and the columns the strategy names, to plan a TestStream that has no
    elements (it fires no pane): times are timestamps if its watermarks are, or without watermarks if its
    durations are (a string or a timedelta), numbers otherwise."""
    marks = [a.to for a in stream.actions if isinstance(a, AdvanceWatermark) and a.to is not None]
    durations = [d.value for d in (*vars(strategy.windowing).values(), strategy.allowed_lateness) if isinstance(d, Duration)]
    durations += [a.by for a in stream.actions if isinstance(a, AdvanceProcessingTime)]
    timed = any(isinstance(d, (str, dt.timedelta, np.timedelta64)) for d in durations)  # "10 seconds": a timestamp axis
    numeric = isinstance(marks[0], numbers.Real) if marks else not timed
    columns = {name: pd.Series([], dtype=object) for name in strategy.keys or ()}
    columns.update({column: pd.Series([], dtype=object) for column in strategy.value_columns if column is not None})
    time = strategy.time if isinstance(strategy.time, str) else "ts"
    columns[time] = pd.Series([], dtype=np.int64 if numeric else "datetime64[ns]")
    return pd.DataFrame(columns)


_NOTHING_DROPPED = pd.DataFrame({"start": np.array([], np.int64), "end": np.array([], np.int64),
                                 "reason": np.array([], object)})


class _Run:
    def __init__(self, plan: Plan, strategy: Strategy, is_stream: bool, no_input: pd.DataFrame):
        self.plan, self.strategy, self.is_stream = plan, strategy, is_stream
        self.no_input = no_input
        """The input's columns without rows: ``late_data``'s columns when nothing was dropped."""
        self.state = empty_state(plan.spec, list(plan.key_dtypes) or [np.dtype(np.int64)])
        self.watermark, self.processing_time = MIN_TIME, 0
        self.max_event_time = MIN_TIME
        self.panes: list[pd.DataFrame] = []
        self.late: list[pd.DataFrame] = []

    def execute(self, script: list[Action]) -> WindowedResult:
        axis, is_stream = self.plan.axis, self.is_stream
        for index, action in enumerate(script):
            if isinstance(action, AddElements):
                self._step(index, action.elements)
            elif isinstance(action, AdvanceWatermark):
                to = MAX_TIME if action.to is None else axis.instant("advance_watermark_to(time)", action.to, f" at action {index}")
                if to < self.watermark:
                    raise WindowingConfigError(
                        f"advance_watermark_to({action.to!r}) at action {index} moves the watermark backwards; watermarks only advance")
                self.watermark = to
                self._step(index, None)
            else:
                self.processing_time += axis.duration("advance_processing_time(duration)", action.by, f" at action {index}")
                if self.processing_time >= MAX_TIME:  # a timer there would be due at once: the axis's end is no time
                    raise WindowingConfigError(
                        f"advance_processing_time({action.by!r}) at action {index} takes processing time to "
                        f"{self.processing_time} (in the axis's unit, nanoseconds for timestamps) since the start, beyond the "
                        "time axis (64-bit integers)")
                self._step(index, None)
        if self.watermark < MAX_TIME:  # end of input
            self.watermark = MAX_TIME
            self._step(len(script), None)
        self._finish(len(script) + 1)
        panes = joined_panes(self.plan, [p for p in self.panes if len(p)] or self.panes[:1])
        late = _joined_rows(self.late) if self.late else self._late_rows(self.no_input, _NOTHING_DROPPED, 0)
        if not is_stream:
            panes = panes.drop(columns="step")
        return WindowedResult(panes, late)

    def _step(self, index: int, frame: pd.DataFrame | None) -> None:
        plan = self.plan
        if frame is None or len(frame) == 0:
            elements = to_elements(plan, _empty_like(plan, self.state), np.array([], dtype=np.int64))
            times = None
        else:
            check_columns(list(frame.columns), self.strategy)
            times = plan.axis.to_internal(_event_times(self.strategy, frame), f" at action {index}" if self.is_stream else "")
            elements = to_elements(plan, frame, times)
        try:
            result = self._engine_step(index, elements)
        except TypeError as error:
            unhashable = _unhashable_key(plan, frame, index if self.is_stream else None)
            if unhashable is None:
                raise
            raise unhashable from error
        self.state = result.state
        panes = to_panes(plan, result.panes)
        panes["step"] = np.full(len(panes), index, dtype=np.int64)
        self.panes.append(panes)
        if frame is not None and len(result.dropped):
            self.late.append(self._late_rows(frame.loc[result.dropped["element"].to_numpy()], result.dropped, index))
        if times is not None and len(times) and plan.watermark_delay is not None:
            # Like Spark: the watermark derived from this step's data applies from the next step, and counts
            # whole milliseconds of timestamps (Spark keeps the largest event time in ms), so a window ending
            # inside a millisecond fires in the same step on both runners.
            latest = int(times.max())
            if plan.axis.kind == "datetime":
                latest -= latest % NS_PER_MS
            self.max_event_time = max(self.max_event_time, latest)
            self.watermark = max(self.watermark, self.max_event_time - plan.watermark_delay)

    def _engine_step(self, index: int, elements: pd.DataFrame) -> StepResult:
        return step(self.plan.spec, self.state, elements, self.watermark, self.processing_time)

    def _finish(self, index: int) -> None:
        """After the last step (``index``: one past it)."""

    def _late_rows(self, rows: pd.DataFrame, dropped: pd.DataFrame, index: int) -> pd.DataFrame:
        """The input ``rows`` of the dropped element-window pairs, with the window, the reason and the step."""
        rows = rows.reset_index(drop=True)
        rows["window_start"], rows["window_end"] = self.plan.axis.window_bounds(dropped["start"].to_numpy(),
                                                                                dropped["end"].to_numpy())
        rows["reason"] = pd.Series(dropped["reason"].to_numpy(), dtype=object).astype(str)  # str, also when empty
        if self.is_stream:
            rows["step"] = np.full(len(rows), index, dtype=np.int64)
        return rows


class _SpilledRun(_Run):
    """A run whose windows live in a bucket of a key-value store (`windowing.window_state`); ``state`` stays a
    table without rows, for its dtypes. The run starts in the store's batch ``first``, after the bucket's last
    committed batch (`start_run`); step ``i`` of the script is its batch ``first + 1 + i``."""

    def __init__(self, plan: Plan, strategy: Strategy, is_stream: bool, no_input: pd.DataFrame, bucket: Any):
        self.bucket = bucket
        self.first_batch = bucket.committed_batch_id + 1
        start_run(bucket, self.first_batch, strategy.window_state.buckets())
        super().__init__(plan, strategy, is_stream, no_input)

    def _engine_step(self, index: int, elements: pd.DataFrame) -> StepResult:
        result = keyed_step(self.plan.spec, self.state, elements, self.watermark, self.processing_time, self.bucket,
                            self.first_batch + 1 + index)
        return StepResult(panes=result.panes, state=self.state, dropped=result.dropped)

    def _finish(self, index: int) -> None:
        end_run(self.bucket, self.first_batch + 1 + index)


def _unhashable_key(plan: Plan, frame: pd.DataFrame | None, action: int | None) -> WindowingConfigError | None:
    """The error naming a key column whose values do not hash (lists, dicts: a key groups by equal values), for a
    step that failed with a TypeError; None where every key hashes (the TypeError is another one). Looked for only
    after a failure, so a step of keys that hash pays nothing for it."""
    if frame is None:
        return None
    for name in plan.key_names or ():
        try:
            pd.factorize(frame[name].to_numpy())
        except TypeError as error:
            where = f" at action {action}" if action is not None else ""
            return WindowingConfigError(
                f"key column {name!r}{where} holds values that do not hash ({error}); a key groups elements by equal "
                "values: make it a string or a tuple first, or take one of its fields as the key")
    return None


def _empty_like(plan: Plan, state: pd.DataFrame) -> pd.DataFrame:
    columns: dict[str, Any] = {}
    for i, name in enumerate(plan.key_names or ()):
        columns[name] = state[spec_columns.key(i)].iloc[:0]
    for column in plan.value_columns:
        if column is not None:
            columns[column] = pd.Series([], dtype=object)
    return pd.DataFrame(columns)
