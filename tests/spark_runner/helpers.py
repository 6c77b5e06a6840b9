"""Shared helpers: a micro-batch simulator of applyInPandasWithState, and pane comparison.

The simulator plays Spark's side of the contract with real ``GroupState``
objects and no JVM: it groups rows by bucket, hands them over in chunks of
arbitrary sizes, drops rows whose shifted watermark column is at or behind the
watermark (as Spark's stateful operator does), advances the watermark after
each batch, runs a no-data batch when the watermark moved, and calls timed-out
buckets with ``hasTimedOut``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyspark
from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupState

from accumulations import Accumulation
from windowing.runners.spark import SparkPlan, SparkTyped, spark_typed, stacked
from windowing.runners.spark.combine import lift, pack
from windowing.runners.spark.wire import WIRE

NO_TIMESTAMP = -1
PYSPARK_3 = int(pyspark.__version__.split(".")[0]) < 4
EPOCH_2024_S = 1_704_067_200


def spark_schema(frame: pd.DataFrame) -> T.StructType:
    """The Spark schema of a frame's columns, as Spark would read them."""
    def kind(column: pd.Series) -> T.DataType:
        if pd.api.types.is_datetime64_any_dtype(column):
            return T.TimestampType()
        if pd.api.types.is_bool_dtype(column):
            return T.BooleanType()
        if pd.api.types.is_integer_dtype(column):
            return T.LongType()
        if pd.api.types.is_float_dtype(column):
            return T.DoubleType()
        return T.StringType()
    return T.StructType([T.StructField(c, kind(frame[c])) for c in frame.columns])


def _event_times(column: pd.Series) -> np.ndarray:
    """The time column as the workers get it: micros since the epoch (UTC) for timestamps, else as is."""
    if not pd.api.types.is_datetime64_any_dtype(column):
        return column.to_numpy(dtype=np.int64)
    if isinstance(column.dtype, pd.DatetimeTZDtype):
        column = column.dt.tz_convert("UTC").dt.tz_localize(None)
    return column.astype("datetime64[us]").to_numpy().view(np.int64)


def worker_frame(frame: pd.DataFrame, plan: SparkPlan) -> pd.DataFrame:
    """The columns the Spark side projects for the workers: _k*, _t (micros, or the numeric time), _v*,
    _wm (ms); a nullable integer column as its value (0 where null) and its null flag."""
    adapter = plan.adapter
    time = adapter.plan.axis.column
    out = {}
    keys = adapter.plan.key_names or ()
    for i, k in enumerate(keys):
        out[f"_k{i}"] = frame[k].to_numpy()
    if not keys:
        out["_k0"] = np.zeros(len(frame), dtype=np.int64)
    micros = _event_times(frame[time])
    out["_t"] = micros
    for i, c in enumerate(plan.input_columns):
        if c is not None:
            out[f"_v{i}"] = frame[c].to_numpy()
    sources = {**{f"_k{i}": k for i, k in enumerate(keys)}, **{f"_v{i}": c for i, c in enumerate(plan.input_columns)}}
    for name in adapter.nullable:
        column = frame[sources[name]]
        out[name], out[WIRE.null_flag(name)] = column.fillna(0).to_numpy(dtype=np.int64), column.isna().to_numpy()
    if adapter.late_output:  # the input row as JSON, as run_spark's to_json ships it (ts in micros here)
        rows = frame.assign(**{time: micros}).to_dict("records")
        out["_e"] = np.array([json.dumps(r, default=int) for r in rows], dtype=object)
    out["_wm_ms"] = (micros // 1000 if adapter.timestamp else micros) + plan.horizon_ms
    return pd.DataFrame(out)


def shipped(frame: pd.DataFrame, plan: SparkPlan, partition_rows: int = 5) -> pd.DataFrame:
    """What reaches the shuffle: ``worker_frame`` with its bucket, lifted or packed per input partition
    when the plan says so (packed rows as pyspark hands them over: a column of arrays each)."""
    data = worker_frame(frame, plan)
    data.insert(0, "_b", buckets_of(data, plan.adapter.buckets).astype(np.int32))
    if (plan.lifting is None and not plan.adapter.packed) or len(data) == 0:
        return data
    partitions = [data.iloc[i:i + partition_rows].drop(columns="_wm_ms") for i in range(0, len(data), partition_rows)]
    if plan.lifting is not None:
        partitions = [lifted for part in partitions for lifted in lift(iter([part]), plan.lifting)]
    if plan.adapter.packed:
        # Lifted rows come with their null flags; unlifted rows as Spark ships them, nulls and all (pack flags them).
        nullable = plan.adapter.nullable if plan.lifting is None else ()
        batches = [_with_nulls_in_arrow(part, nullable) for part in partitions]
        partitions = [packed.to_pandas() for batch in batches for packed in pack(iter([batch]), nullable=nullable)]
    out = pd.concat(partitions, ignore_index=True)
    out["_wm_ms"] = (out["_tmax"] // 1000 if plan.adapter.timestamp else out["_tmax"]) + plan.horizon_ms
    return out


def _with_nulls_in_arrow(part: pd.DataFrame, nullable: tuple[str, ...]) -> pa.RecordBatch:
    """``part``'s rows as Arrow, each of the integer columns ``nullable`` holding its nulls instead of a null flag."""
    flags = {WIRE.null_flag(name) for name in nullable}
    arrays, names = [], []
    for name in part.columns:
        if name in flags:
            continue
        values = part[name].to_numpy()
        mask = part[WIRE.null_flag(name)].to_numpy(dtype=bool) if name in nullable else None
        arrays.append(pa.array(values, mask=mask, from_pandas=True))  # as RecordBatch.from_pandas: NaN is null
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def frozen_when_output() -> SparkTyped:
    """An accumulation whose output says whether it was frozen by ``gc.freeze()`` when its pane was made.

    Spark's Python worker unpickles it with the function of each task, before that function runs,
    so it is frozen exactly when the function froze what was alive as it started (frozen objects
    are left out of ``gc.get_objects()``).
    """
    def frozen(accumulation) -> bool:
        import gc

        return not any(alive is accumulation for alive in gc.get_objects())

    return output_when_made(frozen, "boolean")


def partition_when_output() -> SparkTyped:
    """An accumulation whose output is the Spark partition (``TaskContext.partitionId()``) its pane was
    made in: the stateful step's partition, where the pane's bucket was grouped."""
    def partition(accumulation) -> int:
        from pyspark import TaskContext

        return TaskContext.get().partitionId()

    return output_when_made(partition, "bigint")


def output_when_made(output, spark_type: str) -> SparkTyped:
    """An accumulation that ignores its input and outputs ``output(itself)`` when a pane is made, in the
    Python worker that makes it. Defined here, in a function, so that it travels to the workers by value."""

    class OutputWhenMade(Accumulation):
        def default_accumulated_value(self):
            return 0

        def accumulate(self, accumulated, value):
            return accumulated

        def merge(self, accumulated1, accumulated2):
            return accumulated1

        def get_output(self, accumulated):
            return output(self)

    return spark_typed(OutputWhenMade(), spark_type)


def buckets_of(frame: pd.DataFrame, n: int) -> np.ndarray:
    keys = [c for c in frame.columns if c.startswith("_k")]
    return (pd.util.hash_pandas_object(frame[keys], index=False).to_numpy() % np.uint64(n)).astype(np.int64)


@dataclass
class SimulatedQuery:
    """Spark's micro-batch loop around ``BucketStep.run_stream``.

    ``instant``: micro-batches take no processing time, as a TestStream's steps take none, where
    Spark's batches are a trigger interval apart: a processing-time timeout is called up to two
    milliseconds early, so a bucket's one-millisecond wait to check the watermark (`_set_timeout`)
    ends in the next micro-batch, as it does on Spark. An early call changes nothing: the engine
    evaluates only windows with new elements or due timers.
    """

    plan: SparkPlan
    delay_ms: int
    chunk_sizes: list[int] = field(default_factory=lambda: [3])
    instant: bool = False
    states: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # bucket -> (blob, timeout)
    max_wm_ms: int = -(2**62)
    watermark_ms: int = 0
    panes: list[pd.DataFrame] = field(default_factory=list)
    calls: int = 0

    def batch(self, frame: pd.DataFrame | None, processing_ms: int) -> None:
        """One micro-batch (``frame`` None: a no-data batch), then the watermark moves."""
        data = shipped(frame, self.plan, max(self.chunk_sizes)) if frame is not None and len(frame) else None
        by_bucket: dict[int, pd.DataFrame] = {}
        if data is not None:
            data = data[data["_wm_ms"] > self.watermark_ms]  # Spark drops rows behind the watermark
            by_bucket = {int(b): part.drop(columns="_wm_ms") for b, part in data.groupby("_b")}
        for b, part in sorted(by_bucket.items()):
            self._call(b, self._chunks(part), processing_ms, timed_out=False)
        for b, (_, timeout) in sorted(self.states.items()):
            if b in by_bucket or timeout == NO_TIMESTAMP:
                continue
            early_ms = 2 if self.instant else 0
            due = (timeout < processing_ms + early_ms if self.plan.timeout == "ProcessingTimeTimeout"
                   else timeout < self.watermark_ms)
            if due:
                self._call(b, iter([]), processing_ms, timed_out=True)
        if data is not None and len(data):
            self.max_wm_ms = max(self.max_wm_ms, int(data["_wm_ms"].max()))
        moved = max(self.watermark_ms, self.max_wm_ms - (self.delay_ms + self.plan.horizon_ms))
        advanced, self.watermark_ms = moved > self.watermark_ms, moved
        return advanced

    def _chunks(self, part: pd.DataFrame):
        i, sizes = 0, self.chunk_sizes
        while i < len(part):
            size = sizes[(i // max(1, sizes[0])) % len(sizes)] or 1
            yield part.iloc[i:i + size]
            i += size

    def _call(self, bucket: int, frames, processing_ms: int, timed_out: bool) -> None:
        blob, timeout = self.states.get(bucket, (None, NO_TIMESTAMP))
        state = GroupState(
            Row(table=blob) if blob is not None else None, processing_ms, self.watermark_ms, self.plan.timeout,
            timed_out, True, blob is not None, False, False, NO_TIMESTAMP, b"", self.plan.state_schema)
        out = list(self.plan.adapter.run_stream((bucket,), frames, state))
        self.calls += 1
        self.panes.extend(out)
        if state._removed:
            self.states.pop(bucket, None)
        elif state._defined:
            value = state._value
            self.states[bucket] = (value[0], state._timeout_timestamp)

    def result(self) -> pd.DataFrame:
        """Every call's output in order; as in Spark's Arrow batches, a column that is a bigint in one
        call and null in another stays exact (Python objects)."""
        frames = [p for p in self.panes if len(p)]
        return stacked(frames) if frames else pd.DataFrame()

    def play(self, actions: list[tuple]) -> pd.DataFrame:
        """Run a TestStream's actions as micro-batches: ``("add", frame)`` a batch of that data,
        ``("watermark", ms)`` and ``("processing_time", ms)`` (a move by) a data-less batch after the
        move. Returns the output, with the ``step`` (action) of each row."""
        processing_ms, steps = 0, []
        for index, (kind, arg) in enumerate(actions):
            before = len(self.panes)
            if kind == "add":
                self.batch(arg, processing_ms)
            else:
                if kind == "watermark":
                    self.watermark_ms = max(self.watermark_ms, arg)
                else:
                    processing_ms += arg
                self.batch(None, processing_ms)
            steps += [p.assign(step=index) for p in self.panes[before:] if len(p)]
        return stacked(steps) if steps else pd.DataFrame()


def split_output(output: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The simulator's output with late rows: (panes, late data with the input row's columns)."""
    if len(output) == 0:
        return output, pd.DataFrame()
    panes = output[output["kind"] == "PANE"].drop(columns=["kind", "reason", "element"])
    late = output[output["kind"] == "LATE"]
    rows = pd.DataFrame([json.loads(e) for e in late["element"]], index=late.index)
    if len(rows):
        rows["ts"] = pd.to_datetime(rows["ts"], unit="us")
    late = pd.concat([rows, late[["window_start", "window_end", "reason"]]], axis=1)
    return panes.reset_index(drop=True), late.reset_index(drop=True)


def normalize_late(late: pd.DataFrame) -> pd.DataFrame:
    """Late data of any runner as comparable rows: times in micros, sorted."""
    if len(late) == 0:
        return pd.DataFrame()
    out = late.drop(columns=[c for c in ("step",) if c in late]).copy()
    for c in ("ts", "window_start", "window_end"):
        if pd.api.types.is_datetime64_any_dtype(out[c]):
            out[c] = out[c].astype("datetime64[us]").to_numpy().view(np.int64)
        out[c] = out[c].astype(np.int64)
    out["amount"] = out["amount"].astype(np.int64)
    out = out[["user", "ts", "amount", "window_start", "window_end", "reason"]]
    return out.sort_values(list(out.columns), kind="stable").reset_index(drop=True)


def assert_same_late_data(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    a, e = normalize_late(actual), normalize_late(expected)
    assert a.to_dict("records") == e.to_dict("records"), f"late data differs\n{a}\n{e}"


def normalize(panes: pd.DataFrame) -> pd.DataFrame:
    """Panes of any runner as comparable rows: times in micros, timings as str, lists as tuples."""
    if len(panes) == 0:
        return pd.DataFrame()
    out = panes.drop(columns=[c for c in ("step",) if c in panes]).copy()
    for c in ("window_start", "window_end"):
        if pd.api.types.is_datetime64_any_dtype(out[c]):
            out[c] = out[c].astype("datetime64[us]").to_numpy().view(np.int64)
    out["timing"] = out["timing"].astype(str)
    for c in out.columns:
        if pd.api.types.is_numeric_dtype(out[c]) and isinstance(out[c].dtype, pd.api.extensions.ExtensionDtype):
            out[c] = out[c].astype("float64")  # pandas' nullable integers (NA); Spark's nullable longs come as floats
        if out[c].dtype == object:
            out[c] = [tuple(v) if isinstance(v, (list, np.ndarray)) else v for v in out[c]]
    out["is_retraction"] = out["is_retraction"].astype(bool)
    order = [c for c in ("user", "window_start", "window_end", "pane_index") if c in out] + ["is_retraction"]
    return out.sort_values(order, kind="stable").reset_index(drop=True)


def assert_same_panes(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    a, e = normalize(actual), normalize(expected)
    assert len(a) == len(e), f"{len(a)} panes vs {len(e)} expected\n{a}\n{e}"
    if len(a) == 0:
        return
    assert list(a.columns) == list(e.columns)
    for c in a.columns:
        left, right = list(a[c]), list(e[c])
        if all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in left + right):
            np.testing.assert_allclose(np.asarray(left, float), np.asarray(right, float), err_msg=c)
        else:
            assert left == right, f"column {c}: {left} != {right}"


def events(seed_rows: list[tuple[str, int, int]]) -> pd.DataFrame:
    """(user, seconds after 2024-01-01, amount) rows as a frame with a timestamp column."""
    users, secs, amounts = zip(*seed_rows) if seed_rows else ((), (), ())
    return pd.DataFrame({"user": pd.Series(users, dtype=object),
                         "ts": pd.to_datetime(np.asarray(secs, dtype=np.int64) + EPOCH_2024_S, unit="s").astype("datetime64[us]"),
                         "amount": np.asarray(amounts, dtype=np.int64)})
