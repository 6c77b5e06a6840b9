"""The Spark runner's worker side: one engine step per key bucket, in Spark's Python workers.

`BucketStep` is plain pandas (no pyspark import): it is pickled on the driver, and in the
workers turns the shipped rows (`wire`) into the engine's elements, runs `windowing.engine.step`
over the bucket's window table (kept in Spark's state, encoded by `windowing.state_codec`), and
turns panes (and, for ``run()``, dropped elements) into the output rows. Tests drive it with a
``GroupState`` built by hand.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd

from triggers import NO_TIME

from ...engine import next_timers, step
from ...errors import WindowingConfigError
from ...plan import Plan, positive_zeros
from ...reductions import SumBeyondRange
from ...spec import TIMINGS, EngineSpec
from ...state_classes import remember_classes_of
from ...state_codec import COMPRESSIONS, decode, encode
from ...timeaxis import MAX_TIME, MIN_TIME, NS_PER_MS
from ...window_state import KeyedStepResult, keyed_step
from ...window_table import empty_state
from .buckets import BUCKETS_CONF, NUMBERS, PLACEMENT_CONF, SHUFFLE_PARTITIONS_CONF, Bucketing
from .combine import CHECKED_BUCKET, nulls_restored
from .instants import instants_as_micros, instants_restored, zone_aware
from .old_checkpoints import without_float_integers
from .output_values import NS_PER_US, OutputColumn, check_kinds, spark_ready
from .pipelines import EXACT_INSTANTS, differences, pipeline_of, refuse_another_pipeline
from .wire import WIRE

# ``run()``'s output: panes and dropped elements in one frame, told apart by ``kind``.
KIND, REASON, ELEMENT = "kind", "reason", "element"
PANE, LATE = "PANE", "LATE"


@dataclass(frozen=True)
class SwitchedLayout:
    """The bucket's window table as the same pipeline writes it lifted where this query does not, or the other
    way round: ``aggregate()`` lifts, unless ``windowing.spark.combine=false``; ``run()`` never does.

    Lifted, a ``Count`` accumulates partial counts as a ``Sum`` (`combine.lifted_aggregations`): the same
    int64 column under another name, and another pipeline in the state row (`pipelines.pipeline_of`). A checkpoint
    written that way restarts with its columns renamed instead of being refused as another pipeline's.
    """

    pipeline: dict[str, str]
    """What the state row says where written that way (`pipelines.pipeline_of`)."""
    renamed: dict[str, str]
    """That table's columns to this query's, where their names differ."""
    written_by: str
    """What writes it, for a refusal's message."""


@dataclass(frozen=True)
class BucketStep:
    """One engine step over the keys of one bucket; picklable, shipped to the workers.

    ``timestamp`` says the time axis is Spark timestamps: ``_t`` arrives in
    microseconds, the engine works in nanoseconds, window bounds leave in
    microseconds (the Spark side turns them back into timestamps).
    """

    plan: Plan
    columns: tuple[OutputColumn, ...]
    key_dtypes: tuple[Any, ...]
    timestamp: bool
    bucketing: Bucketing
    processing_time_mode: bool
    late_output: bool = False
    """Also emit the dropped elements as ``kind = LATE`` rows (`output`); panes get ``kind = PANE``."""
    packed: bool = False
    """Rows arrive packed by `combine.pack`: one row per bucket and packing, each column an array."""
    nullable: tuple[str, ...] = ()
    """Integer key and value columns that may hold nulls: they arrive as a value and a null flag
    (`wire.WireSchema.null_flag`), since pyspark would hand them over as float64, inexact beyond 2**53."""
    window_state: Any = None
    """``.window_state(store)``: the `storage.KVStore` holding the windows (`windowing.window_state`), written as
    the store's bucket of the key bucket, batch = Spark's micro-batch id; the state row then holds a table
    without rows, for what `load` checks (pipeline, buckets). None: the whole table is in the state row."""
    state_compression: str = COMPRESSIONS[0]
    """How the state row's table is compressed (`windowing.state_codec.encode`); any is read back."""
    switched: SwitchedLayout | None = None
    """The table as this pipeline writes it lifted where this query does not, or the other way round
    (`SwitchedLayout`); None where both write the same."""
    instants: tuple[str, ...] = ()
    """Timestamp key and value columns shipped as epoch microseconds (`instants.instants_restored`): the `exact`
    ones, and unpacked every one: pyspark's own conversion fails beyond 2262, on pyspark 4 reads summer times after
    2037 an hour early, and gives two instants of the hour the clocks go back one wall time."""
    exact: tuple[str, ...] = ()
    """Of `instants`, the timestamp keys and built-ins' values (`planning.exact_instants`): held as UTC wall times,
    exact, unless `exact_held` is off."""
    exact_held: bool = True
    """Whether this bucket's table holds `exact` as UTC wall times; off for a table written without
    (`as_written`), which holds them as wall times in `wall_zone` and keeps them so."""
    wall_zone: str = "UTC"
    """``spark.sql.session.timeZone``: pyspark hands timestamps to pandas as wall times there."""
    described: tuple[tuple[str, str], ...] = ()
    """The state's description beyond the engine's (`pipelines.pipeline_of`), from the driver."""

    @property
    def buckets(self) -> int:
        return self.bucketing.count

    @property
    def pipeline(self) -> dict[str, str]:
        """What builds this query's window tables, stored in each state row and compared at every load; without
        `pipelines.EXACT_INSTANTS` where the bucket's table holds wall times in `wall_zone` (`as_written`)."""
        described = self.described if self.exact_held else tuple(p for p in self.described if p[0] != EXACT_INSTANTS)
        return pipeline_of(self.plan.spec, self.window_state, described)

    # -- frames in and out --
    def elements(self, frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
        spec = self.plan.spec
        names = spec.key_columns + [WIRE.time] + [WIRE.value(i) for i, c in enumerate(self.plan.value_columns) if c is not None]
        names += [WIRE.element] if self.late_output else []
        flags = [WIRE.null_flag(name) for name in self.nullable]
        frames = [f for f in frames if len(f)]
        columns: dict[str, Any]
        if self.packed:  # straight into the element frame's columns: a frame per packed row costs more than the rows
            columns = _unpacked(frames, names, flags) if frames else {}
        else:
            data = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True) if frames else None
            if data is not None and WIRE.watermark in data and data[WIRE.watermark].isna().any():
                data = data[data[WIRE.watermark].notna()].reset_index(drop=True)  # combine.with_checked_bucket_copy's copies
            columns = {} if data is None else {name: data[name] for name in names + flags}
        if columns:
            exact_zone, made_by_pyspark = self._exact_zone
            columns = instants_restored(columns, [n for n in self.instants if n in self.exact], exact_zone, made_by_pyspark)
            columns = instants_restored(columns, [n for n in self.instants if n not in self.exact], self.wall_zone)
        # No rows, or only combine.CHECKED_BUCKET's packed row of empty lists or its copies (with_checked_bucket_copy).
        if not columns or not len(columns[WIRE.time]):
            empty = {k: pd.Series([], dtype=self.key_dtypes[i]) for i, k in enumerate(spec.key_columns)}
            empty[WIRE.time] = np.array([], np.int64)
            empty.update({n: pd.Series([], dtype=object) for n in names[len(spec.key_columns) + 1:]})
            return pd.DataFrame(empty)
        times = np.asarray(columns[WIRE.time], dtype=np.int64)
        columns[WIRE.time] = times * NS_PER_US if self.timestamp else times
        for name, dtype in zip(spec.key_columns, self.key_dtypes):
            if isinstance(dtype, np.dtype) and dtype.kind == "O":
                columns[name] = _timestamps_as_objects(columns[name])
            else:
                columns[name] = positive_zeros(columns[name])
        integers = [name for name in self.nullable if name not in self.instants]
        return pd.DataFrame(nulls_restored(columns, integers), index=pd.RangeIndex(len(times)))

    def panes(self, panes: pd.DataFrame) -> pd.DataFrame:
        out: dict[str, Any] = {}
        sources = dict(panes.items())  # not panes[...]: a lookup on a new frame builds its column index's hash table
        for col in self.columns:
            values = sources[col.source]
            if col.instant:
                values = check_kinds(values, col)
                out[col.name] = instants_as_micros(values, *self._zone_of(col))
            elif col.zoned:
                values = check_kinds(values, col)
                out[col.name] = zone_aware(values, *self._zone_of(col), lists=col.array)
            elif col.kind == "time":
                raw = values.to_numpy(dtype=np.int64)
                out[col.name] = _micros(raw) if self.timestamp else self.plan.axis.from_internal(raw, widen=False).to_numpy()
            elif col.kind == "value" or col.integral:
                out[col.name] = spark_ready(values, col)
            elif col.kind == "timing":
                out[col.name] = _timing_names(values.to_numpy())
            elif col.kind == "index":
                out[col.name] = values.to_numpy(dtype=np.int64)
            elif col.kind == "flag":
                out[col.name] = values.to_numpy(dtype=bool)
            else:
                out[col.name] = values.to_numpy()
        return pd.DataFrame(out, index=pd.RangeIndex(len(panes)))

    def output(self, panes: pd.DataFrame, dropped: pd.DataFrame, elements: pd.DataFrame) -> pd.DataFrame:
        """The function's output rows: the panes, and with ``late_output`` the dropped elements too.

        A late row has the element's key, the dropped window, ``kind = LATE``, the ``reason`` and
        the input row as JSON (``element``); its value, timing, index and flag columns are null.
        """
        out = self.panes(panes)
        if not self.late_output:
            return out
        out[KIND], out[REASON], out[ELEMENT] = PANE, None, None
        if not len(dropped):
            return out
        labels = dropped["element"].to_numpy()
        late: dict[str, Any] = {}
        for col in self.columns:
            if col.kind == "key":
                keys = elements.loc[labels, col.source]
                late[col.name] = instants_as_micros(keys, *self._zone_of(col)) if col.instant else keys.to_numpy()
            elif col.kind == "time":
                raw = dropped[col.source].to_numpy(dtype=np.int64)
                late[col.name] = _micros(raw) if self.timestamp else self.plan.axis.from_internal(raw, widen=False).to_numpy()
            else:
                late[col.name] = np.full(len(labels), None, dtype=object)
        late[KIND] = LATE
        late[REASON] = dropped["reason"].to_numpy(dtype=object)
        late[ELEMENT] = elements.loc[labels, WIRE.element].to_numpy(dtype=object)
        rows = pd.DataFrame(late, index=pd.RangeIndex(len(labels)))
        return stacked([out, rows]) if len(out) else rows

    @property
    def _exact_zone(self) -> tuple[str, bool]:
        """The zone the table holds `exact` in, and whether pyspark's rules made those wall times (`instants`)."""
        return ("UTC", False) if self.exact_held else (self.wall_zone, self.packed)

    def _zone_of(self, col: OutputColumn) -> tuple[str, bool]:
        """The zone an output column's timestamps are wall times in, and whether pyspark's rules made them."""
        return self._exact_zone if col.exact else (self.wall_zone, self.packed)

    def as_written(self, meta: dict[str, Any], table: pd.DataFrame) -> "BucketStep":
        """This step for a bucket whose state row has ``meta`` and ``table``: one written without
        `pipelines.EXACT_INSTANTS` holds `exact` as wall times in `wall_zone`, and goes on so, saved without that
        part, until it holds no window (`saving`; with ``.window_state(store)`` its windows are in the store, and
        ``table`` is always empty). Keys never move between buckets, so no table mixes the two."""
        written_by = meta.get("pipeline") or {}
        if not self.exact or EXACT_INSTANTS in written_by or (not len(table) and self.window_state is None):
            return self
        return replace(self, exact_held=False)

    def saving(self, holds_windows: bool) -> "BucketStep":
        """The step that saves the bucket's row: as it was written while it ``holds_windows``; else exact, as a new
        bucket starts (a row without windows stays for `combine.CHECKED_BUCKET`, whose bucket holds keys too)."""
        return self if holds_windows or self.exact_held else replace(self, exact_held=True)

    def fresh_state(self) -> pd.DataFrame:
        return empty_state(self.plan.spec, list(self.key_dtypes))

    def save(self, table: pd.DataFrame, store_batch: int | None = None) -> bytes:
        return encode(table, self.buckets, self.pipeline, self.bucketing.placement,
                      self.state_compression, store_batch)

    def load(self, blob: bytes) -> pd.DataFrame:
        return self.load_with_meta(blob)[0]

    def load_with_meta(self, blob: bytes) -> tuple[pd.DataFrame, dict[str, Any]]:
        """The table of a state value, checked against this query (pipeline, buckets), and the value's metadata."""
        table, meta = decode(blob)
        written_by, pipeline = meta.get("pipeline"), self.pipeline
        if self.switched is not None and written_by is not None and not differences(written_by, self.switched.pipeline):
            if self.window_state is not None:  # the windows in the store keep that table's columns
                raise WindowingConfigError(
                    f"the checkpoint's state was written by {self.switched.written_by}, and with .window_state(store) "
                    "its windows keep that layout in the store: restart it that way, or start from a new checkpoint")
            table, written_by = table.rename(columns=self.switched.renamed), pipeline
        if written_by is not None:
            refuse_another_pipeline(written_by, pipeline)
        count, placement = meta.get("buckets"), meta.get("placement", NUMBERS)  # none stored: labelled by number
        if count is None or not self.bucketing.same_labels(count, placement):
            restore = f"{BUCKETS_CONF}={count}" + (
                f" and {PLACEMENT_CONF}={placement}" if count != 1 and placement != self.bucketing.placement else "")
            raise WindowingConfigError(
                f"this query groups keys into {self.bucketing.described()}, but its checkpoint was written with {count} "
                f"bucket{'s' if count != 1 else ''}{f' placed by {placement}' if placement != self.bucketing.placement else ''}: "
                f"keys would land in other buckets. To restart from this checkpoint set {restore} (Spark keeps the "
                f"checkpoint's {SHUFFLE_PARTITIONS_CONF} too), or start from a new checkpoint")
        return without_float_integers(self.plan.spec, table, self.nullable), meta

    # -- batch: applyInPandas --
    def run_batch(self, frame: pd.DataFrame) -> pd.DataFrame:
        spec = self.plan.spec
        elements = self.elements([frame])
        with _widened_on_spark():
            first = step(spec, self.fresh_state(), elements, MIN_TIME, 0)
            last = step(spec, first.state, self.elements([]), MAX_TIME, 0)
        both = [p for p in (first.panes, last.panes) if len(p)]
        panes = pd.concat(both, ignore_index=True) if both else first.panes
        return self.output(panes, first.dropped, elements)  # end of input drops nothing: no elements

    # -- streaming: applyInPandasWithState --
    def run_stream(self, key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        remember_classes_of(self.plan.spec)  # before any state is read: its cells may name classes of the pipeline's
        table, meta = self.load_with_meta(state.get[0]) if state.exists else (self.fresh_state(), {})
        bucket = self.as_written(meta, table) if state.exists else self
        yield from bucket._stream_step(key, frames, state, table, meta)

    def _stream_step(self, key: Any, frames: Iterator[pd.DataFrame], state: Any, table: pd.DataFrame,
                     meta: dict[str, Any]) -> Iterator[pd.DataFrame]:
        """`run_stream` over the bucket's loaded ``table`` and its state row's ``meta``."""
        spec = self.plan.spec
        watermark_ms = state.getCurrentWatermarkMs()
        processing_ms = state.getCurrentProcessingTimeMs()
        # Spark reports 0 before the first watermark; 0 then means "no watermark yet".
        watermark = MIN_TIME if watermark_ms <= 0 else self._from_ms(watermark_ms)
        elements = self.elements(frames)
        processing_time = self._from_ms(processing_ms)
        if self.window_state is not None:
            with _widened_on_spark():
                keyed = self._keyed_step(int(key[0]), elements, watermark, processing_time, meta.get("store_batch"))
            holds_windows = bool(keyed.windows_left or keyed.undo_pending)
            if holds_windows or key[0] == CHECKED_BUCKET:  # see combine.CHECKED_BUCKET
                state.update((self.saving(holds_windows).save(self.fresh_state(), keyed.committed_batch_id),))
                # A bucket left with undo records but no window gets no element to call it again: it is called
                # as soon as Spark can, or the records would outlive the windows until one of its keys came back.
                self._set_timeout(state, keyed.next_watermark_time, keyed.next_processing_time, watermark_ms,
                                  processing_ms, call_again=not keyed.windows_left and keyed.undo_pending)
            else:
                state.remove()
            yield self.output(keyed.panes, keyed.dropped, elements)
            return
        with _widened_on_spark():
            result = step(spec, table, elements, watermark, processing_time)
        if len(result.state) or key[0] == CHECKED_BUCKET:  # see combine.CHECKED_BUCKET
            state.update((self.saving(bool(len(result.state))).save(result.state),))
            self._set_timeout(state, *next_timers(spec, result.state, processing_time), watermark_ms, processing_ms)
        else:
            state.remove()
        yield self.output(result.panes, result.dropped, elements)

    def _keyed_step(self, bucket: int, elements: pd.DataFrame, watermark: int, processing_time: int,
                    committed_at_least: int | None) -> KeyedStepResult:
        """The step over the windows of ``bucket`` that its window-state store holds, as Spark's micro-batch;
        ``committed_at_least``: the store's batch the bucket's state row recorded (None: no row, or one
        written before it was recorded)."""
        from storage.kv.spark import task_batch_id  # lazily: only a query with a window-state store needs it

        try:
            batch_id = task_batch_id()
        except RuntimeError as err:
            raise WindowingConfigError(
                ".window_state(store) commits one batch of its store per micro-batch, by the micro-batch's id, which "
                "this task does not carry: a query written with foreachBatch over Spark Connect runs its jobs outside "
                "the query's thread, without it. Write the query to a sink directly (writeStream.format(...)), or run "
                "it without .window_state") from err
        # take_over: a failed attempt of this task (or a zombie) may still hold the bucket; it is fenced off.
        with self.window_state.open(bucket, take_over=True) as store:
            return keyed_step(self.plan.spec, self.fresh_state(), elements, watermark, processing_time, store,
                              batch_id, committed_at_least)

    def _from_ms(self, ms: int) -> int:
        return int(ms) * per_ms(self.timestamp)

    def _to_ms_ceil(self, t: int) -> int:
        return -(-t // per_ms(self.timestamp))

    def _set_timeout(self, state: Any, at_watermark: int, at_processing: int, watermark_ms: int, processing_ms: int,
                     call_again: bool = False) -> None:
        """The timeout that calls the bucket at its next timers (`windowing.engine.next_timers`); ``call_again``: as
        soon as Spark can (the next micro-batch, or the next that moves the watermark)."""
        if self.processing_time_mode:
            # One timeout per group: a processing-time timeout of 1 ms calls the bucket again in the
            # next micro-batch, where it checks the watermark; later for processing-time timers only.
            waits = []
            if at_watermark < MAX_TIME or call_again:
                waits.append(1)
            if at_processing < NO_TIME:
                # Spark times a group out once the batch timestamp > timeout, so one ms before the firing time.
                waits.append(max(1, self._to_ms_ceil(at_processing) - processing_ms - 1))
            if waits:
                state.setTimeoutDuration(int(min(waits)))
        elif at_watermark < MAX_TIME:
            # Spark times a group out once watermark > timestamp; the window is due once
            # watermark >= ceil(at_watermark) in ms, so the timestamp is one ms earlier.
            state.setTimeoutTimestamp(int(max(self._to_ms_ceil(at_watermark) - 1, watermark_ms, 1)))
        elif call_again:
            state.setTimeoutTimestamp(int(max(watermark_ms, 1)))


def stacked(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of ``frames`` (the same columns) one after the other. A column whose dtype differs
    between them (a pane's bigint value, a late row's null) becomes Python objects, exact and with
    its nulls: ``pd.concat`` would make such a column float64, inexact beyond 2**53 (and pandas 2
    warns that it will change how it picks that dtype)."""
    columns = {}
    for name in frames[0].columns:
        parts = [frame[name] for frame in frames]
        same = all(part.dtype == parts[0].dtype for part in parts) and isinstance(parts[0].dtype, np.dtype)
        columns[name] = np.concatenate([part.to_numpy() if same else part.to_numpy(dtype=object) for part in parts])
    return pd.DataFrame(columns, index=pd.RangeIndex(sum(len(frame) for frame in frames)))


#: Output rows put in one packed row (`packed_output`): bounds what Spark builds from one packed row when it unpacks it.
OUTPUT_PACK_ROWS = 1 << 16


def packed_output(frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The rows of ``frames`` as rows of lists, each column's values (nulls as None) in one list, ``OUTPUT_PACK_ROWS``
    rows at a time; the query unpacks them on the JVM (`query`).

    pyspark's ``applyInPandasWithState`` pads every output row with a count row and an empty state
    row, built as Python lists and object columns: that cost about 3 us a row, a third of the
    workers' Python time at 100k keys, more than the engine step (docs/spark.md, "After the step: packed output").
    A packed row is one row whichever the panes.
    """
    for frame in frames:
        for start in range(0, len(frame), OUTPUT_PACK_ROWS):
            part = frame if len(frame) <= OUTPUT_PACK_ROWS else frame.iloc[start:start + OUTPUT_PACK_ROWS]
            row = {}
            for name in frame.columns:
                row[name] = np.empty(1, dtype=object)
                row[name][0] = _python_values(part[name])
            yield pd.DataFrame(row, index=pd.RangeIndex(1))


def _python_values(values: pd.Series) -> list[Any]:
    """A column's values as a list of Python values, missing ones as None (a float NaN becomes null
    in Arrow as it does unpacked)."""
    if isinstance(values.dtype, np.dtype) and values.dtype.kind in "iufb":
        return values.to_numpy().tolist()
    if isinstance(values.dtype, pd.CategoricalDtype):  # the timing: a lookup, where pandas converts value by value
        categories = np.empty(len(values.cat.categories) + 1, dtype=object)  # code -1 (missing) takes the last: None
        categories[:-1] = values.cat.categories.to_numpy(dtype=object)
        return categories[values.cat.codes.to_numpy()].tolist()
    cells = values.to_numpy(dtype=object, copy=True)
    cells[pd.isna(cells)] = None
    return cells.tolist()


def _unpacked(frames: list[pd.DataFrame], names: list[str], flags: list[str]) -> dict[str, np.ndarray]:
    """The element columns of packed rows (`combine.pack`): each column's arrays concatenated; a null
    flag's missing array (no null in that packed row) as all false."""
    out = {name: np.concatenate([cell for frame in frames for cell in frame[name].to_numpy()]) for name in names}
    lengths = [len(cell) for frame in frames for cell in frame[names[0]].to_numpy()]
    for flag in flags:
        cells = [cell for frame in frames for cell in frame[flag].to_numpy()]
        out[flag] = np.concatenate([np.zeros(n, dtype=bool) if missing is None else missing for missing, n in zip(cells, lengths)])
    return out


def _timestamps_as_objects(keys: Any) -> Any:
    """A key column of the table's Python objects (`output_types.numpy_dtype`), timestamps as Timestamps, however
    pyspark handed them over (datetime64 in either unit, Timestamps that a DataFrame would make datetime64[ns]):
    the table's objects joined with datetime64[ns] took them as ints, a key of its own, and the panes gave them
    back as microseconds, 1000 times too late."""
    values = np.asarray(keys)
    if values.dtype.kind == "M":
        return pd.Series(values).astype(object)
    return pd.Series(values, dtype=object, copy=False) if values.dtype == object else keys


@contextmanager
def _widened_on_spark() -> Iterator[None]:
    """A sum beyond 64 bits says how to widen the column with a Spark cast, not with pandas' dtypes."""
    try:
        yield
    except SumBeyondRange as error:
        raise OverflowError(f"{error.what}; cast the column to double (approximate) or to decimal(38,0) (exact) "
                            "before windowed()") from None


def _micros(ns: np.ndarray) -> np.ndarray:
    """Nanoseconds to microseconds, rounded toward zero: the global window's bounds (the int64
    extremes) then stay within pandas' nanosecond range when read back (``toPandas``); other
    bounds are whole microseconds."""
    return np.where(ns < 0, -(-ns // NS_PER_US), ns // NS_PER_US)


def _timing_names(codes: np.ndarray) -> Any:
    """Timing codes as a categorical: pyspark turns it into strings with one ``astype``, which on
    pandas 3 is Arrow-backed and crosses to Arrow without a per-row conversion (an object column of
    Python strings cost ~10% of a worker's Python time)."""
    if codes.dtype.kind not in "iu":
        return codes.astype(str).astype(object)
    return pd.Categorical.from_codes(codes.astype(np.int8), categories=list(TIMINGS))  # type: ignore[call-overload]


def uses_processing_time(spec: EngineSpec) -> bool:
    """Whether the buckets need Spark's processing-time timeout: some part of the trigger
    (late firings included) may fire when only processing time passed, which the event-time
    timeout never calls a bucket for."""
    return spec.trigger.uses_processing_time()


def per_ms(timestamp: bool) -> int:
    """Engine time units per millisecond of Spark's watermark clock: on a numeric time axis, one
    unit of the time column is taken as one millisecond (Spark's watermark needs a timestamp)."""
    return NS_PER_MS if timestamp else 1
