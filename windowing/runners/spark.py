"""The Spark runner: the engine step inside ``applyInPandas`` / ``applyInPandasWithState``.

Rows are grouped by a *bucket* of keys, ``pmod(xxhash64(keys), buckets)``,
not by the raw key: one Python call then runs the vectorized engine step over
all keys of a bucket, and the bucket's state holds the window table of all
its keys (`windowing.state_codec`). Not keyed: one bucket, parallelism 1.
Before the shuffle, rows are lifted (pre-aggregated) where that is exact, and
otherwise packed into one row of arrays per bucket (`windowing.runners.combine`).

- Batch DataFrame: ``groupBy(bucket).applyInPandas``; every bucket runs one
  step with all its rows, then end of input (watermark to infinity) fires
  every window, as the pandas runner does with a bounded DataFrame.
- Streaming DataFrame: ``groupBy(bucket).applyInPandasWithState`` in append
  mode. Each call is one step at the micro-batch's watermark and processing
  time (Spark's batch timestamp, the same on replay). A bucket's timeout is
  the earliest of its windows' timers (`windowing.engine.next_timers`), so
  windows fire in the micro-batch in which the watermark passes their end
  even when no new row arrives.

pyspark is imported lazily, inside the functions that talk to Spark: the
adapter (`BucketStep`) is plain pandas and is tested with a `GroupState`
built by hand.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from accumulations import Accumulation
from accumulations.builtins import BottomN, Count, Distinct, Max, Mean, Min, Sum, ToList, ToSet, TopN
from triggers import NO_TIME

from ..engine import TIMINGS, EngineSpec, empty_state, next_timers, step
from ..errors import WindowingConfigError
from ..plan import Plan, check_columns, engine_aggregations, make_plan
from ..state_codec import decode, encode
from ..timeaxis import EPOCH_UNITS, MAX_MICROS, MAX_TIME, MIN_MICROS, MIN_TIME, TimeAxis
from ..strategy import Strategy
from .combine import CHECKED_BUCKET, Lifting, lift_and_pack, lifted_aggregations, lifting, null_flag, pack, split_nulls, with_nulls

BUCKETS_CONF = "windowing.spark.buckets"
PLACEMENT_CONF = "windowing.spark.bucketPlacement"
COMBINE_CONF = "windowing.spark.combine"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
#: Spark's own default shuffle partitions: the default bucket count where the setting holds no number.
SPARK_SHUFFLE_PARTITIONS = 200
#: Bucket placements (`Bucketing`): ``PARTITIONS`` labels the buckets so that n of them land one to one
#: on n shuffle partitions; ``NUMBERS`` labels bucket i as i, as checkpoints written before did.
PARTITIONS, NUMBERS = "partitions", "numbers"
NS_PER_MS = 1_000_000
NS_PER_US = 1_000
# Event-time columns fed to the Python workers: event time as int64 (micros for timestamps).
_T, _B, _WM = "_t", "_b", "_wm"
# Late-data output (``run()``): the input row as JSON, shipped to the workers for the dropped ones.
_E = "_e"
KIND, REASON, ELEMENT = "kind", "reason", "element"
PANE, LATE = "PANE", "LATE"
# to_json/from_json keep microseconds (the default format keeps milliseconds).
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
# Shift of the watermark's helper column when Spark must drop no row (late-data output, the global
# window): 100 years, so Spark drops only rows more than 100 years behind the watermark. Not more:
# the column reaches the Python workers, and pandas' nanosecond timestamps end in 2262.
NEVER_BEHIND_MS = 100 * 365 * 24 * 3600 * 1000
# The column metadata by which Spark marks the column withWatermark is on (EventTimeWatermark.delayKey).
WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"


# ---- output types --------------------------------------------------------------------------

class SparkTyped(Accumulation):
    """An accumulation with its Spark output type stated: ``spark_typed(Fold(...), "double")``.

    Everything else is delegated to the wrapped accumulation, so the engine
    runs it unchanged.
    """

    def __init__(self, inner: Accumulation, spark_type: Any):
        if not isinstance(inner, Accumulation):
            raise WindowingConfigError(f"spark_typed(accumulation={inner!r}) is not an Accumulation; give e.g. Fold(...)")
        if not isinstance(spark_type, str) and type(spark_type).__module__.split(".")[0] != "pyspark":
            raise WindowingConfigError(
                f"spark_typed(spark_type={spark_type!r}): give a Spark DataType or a DDL string such as 'double' or 'array<string>'")
        self.inner, self.spark_type, self.column = inner, spark_type, inner.column

    def default_accumulated_value(self):
        return self.inner.default_accumulated_value()

    def accumulate(self, accumulated, value):
        return self.inner.accumulate(accumulated, value)

    def accumulate_all(self, accumulated, values):
        return self.inner.accumulate_all(accumulated, values)

    def merge(self, accumulated1, accumulated2):
        return self.inner.merge(accumulated1, accumulated2)

    def get_output(self, accumulated):
        return self.inner.get_output(accumulated)

    def get_retraction(self, output):
        return self.inner.get_retraction(output)

    def vector_fields(self):
        return self.inner.vector_fields()

    def vector_defaults(self, dtype):
        return self.inner.vector_defaults(dtype)

    def vector_lift(self, values):
        return self.inner.vector_lift(values)

    def vector_output(self, fields):
        return self.inner.vector_output(fields)

    def for_input(self, dtype):
        return SparkTyped(self.inner.for_input(dtype), self.spark_type)

    def __repr__(self) -> str:
        return f"spark_typed({self.inner!r}, {self.spark_type!r})"


def spark_typed(accumulation: Accumulation, spark_type: Any) -> SparkTyped:
    """State the Spark type of an accumulation's output (``Fold``, ``Reduce``, your own) where running it
    on one sample value does not give it: an output type that depends on the values, a dict, None."""
    return SparkTyped(accumulation, spark_type)


def output_type(name: str, acc: Accumulation, input_type: Any) -> Any:
    """The Spark type of an accumulation's output column (the mapping in docs/spark.md)."""
    from pyspark.sql import types as T

    if isinstance(acc, SparkTyped):
        return _ddl(acc.spark_type) if isinstance(acc.spark_type, str) else acc.spark_type
    if isinstance(acc, (Sum, Mean)) and not isinstance(input_type, (T.NumericType, T.BooleanType, T.DayTimeIntervalType)):
        # Not a missing output type: spark_typed would not help.
        raise WindowingConfigError(
            f"aggregate({name}={acc!r}): column {acc.column!r} has Spark type {input_type.simpleString()}; "
            f"{type(acc).__name__} needs numbers: cast the column first, e.g. col({acc.column!r}).cast('double')")
    if isinstance(acc, Count):
        return T.LongType()
    if isinstance(acc, Mean):
        return T.DoubleType()
    if isinstance(acc, Sum):
        if _integral(input_type):
            return T.LongType()
        if isinstance(input_type, (T.FloatType, T.DoubleType)):
            return T.DoubleType()
    if isinstance(acc, (Min, Max)):
        if _integral(input_type):
            return T.LongType()
        if isinstance(input_type, (T.FloatType, T.DoubleType)):
            return T.DoubleType()
        if isinstance(input_type, (T.StringType, T.DateType, T.TimestampType, T.BooleanType)):
            return input_type
    if isinstance(acc, (ToList, ToSet, Distinct, TopN, BottomN)) and input_type is not None:
        return T.ArrayType(input_type)
    sampled = _sampled_output_type(acc, input_type)
    if sampled is not None:
        return sampled
    raise WindowingConfigError(
        f"aggregate({name}={acc!r}): cannot derive the Spark type of its output"
        + (f" from input type {input_type.simpleString()}" if input_type is not None else "")
        + f"; state it with windowing.runners.spark.spark_typed({acc!r}, 'double') (any Spark DDL type)")


def _sampled_output_type(acc: Accumulation, input_type: Any) -> Any:
    """The Spark type of ``acc``'s output for one value of its input type (1, 1.5, "a", ...), or None.

    For accumulations no table types (``Fold``, ``Reduce``, your own): Spark needs the output schema
    before any row is seen, and their output type is in their code, so the driver runs it once.
    """
    from pyspark.sql import types as T

    samples = [(T.BooleanType, True), (T.FloatType, 1.5), (T.DoubleType, 1.5), (T.StringType, "a"),
               (T.BinaryType, b"a"), (T.TimestampType, pd.Timestamp("2024-01-01")), (T.DateType, dt.date(2024, 1, 1))]
    sample = 1 if _integral(input_type) else next((v for cls, v in samples if isinstance(input_type, cls)), None)
    try:
        return _python_value_type(acc.get_output(acc.accumulate(acc.default_accumulated_value(), sample)))
    except Exception:  # the code refuses the sample: the type stays to be stated
        return None


def _python_value_type(value: Any) -> Any:
    """The Spark type a Python value crosses to Arrow as, or None where it is not clear."""
    from pyspark.sql import types as T

    scalars = [((bool, np.bool_), T.BooleanType), ((int, np.integer), T.LongType), ((float, np.floating), T.DoubleType),
               ((str,), T.StringType), ((bytes,), T.BinaryType), ((dt.datetime, np.datetime64), T.TimestampType),
               ((dt.date,), T.DateType)]
    for classes, spark_type in scalars:
        if isinstance(value, classes):
            return spark_type()
    if isinstance(value, (list, tuple, set, frozenset, np.ndarray)) and len(value):
        element = _python_value_type(next(iter(value)))
        return None if element is None else T.ArrayType(element)
    return None


def _integral(spark_type: Any) -> bool:
    from pyspark.sql import types as T

    return isinstance(spark_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType))


def _ddl(text: str) -> Any:
    """A DDL type string as a Spark type; common types without a JVM, the rest through Spark's parser."""
    from pyspark.sql import types as T

    simple = {"bigint": T.LongType, "long": T.LongType, "int": T.IntegerType, "integer": T.IntegerType,
              "smallint": T.ShortType, "tinyint": T.ByteType, "double": T.DoubleType, "float": T.FloatType,
              "string": T.StringType, "boolean": T.BooleanType, "timestamp": T.TimestampType,
              "date": T.DateType, "binary": T.BinaryType}
    name = text.strip().lower()
    if name in simple:
        return simple[name]()
    if name.startswith("array<") and name.endswith(">"):
        return T.ArrayType(_ddl(name[6:-1]))
    return T._parse_datatype_string(text)


def _numpy_dtype(spark_type: Any) -> Any:
    from pyspark.sql import types as T

    table = [(T.LongType, np.int64), (T.IntegerType, np.int32), (T.ShortType, np.int16), (T.ByteType, np.int8),
             (T.DoubleType, np.float64), (T.FloatType, np.float32), (T.BooleanType, np.bool_)]
    for cls, dtype in table:
        if isinstance(spark_type, cls):
            return np.dtype(dtype)
    return np.dtype(object)


# ---- key buckets -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bucketing:
    """How keys are grouped: bucket ``pmod(xxhash64(keys), count)``, grouped under its label.

    Spark places a group on shuffle partition ``pmod(murmur3(label), partitions)`` (``groupBy``'s hash
    partitioning), so with ``PARTITIONS`` placement `bucket_labels` picks labels that put ``count``
    buckets one to one on ``count`` partitions (and evenly on any number of partitions dividing it).
    ``origin`` says where the count came from, for messages.
    """

    count: int
    placement: str = PARTITIONS
    origin: str = ""

    def labels(self) -> np.ndarray:
        """Bucket i's group label at index i."""
        if self.placement == NUMBERS:
            return np.arange(self.count, dtype=np.int32)
        return bucket_labels(self.count)

    def same_labels(self, count: int, placement: str) -> bool:
        """Whether ``count`` buckets placed by ``placement`` group every key under the same label as these."""
        return count == self.count and (count == 1 or placement == self.placement)

    def described(self) -> str:
        return f"{self.count} bucket{'s' if self.count != 1 else ''}" + (f" ({self.origin})" if self.origin else "")


@functools.lru_cache(maxsize=16)
def bucket_labels(count: int) -> np.ndarray:
    """For each i < ``count``, the smallest int label >= 0 whose group Spark puts on partition i of
    ``count``: ``pmod(murmur3(label, seed 42), count) == i``, as ``groupBy`` partitions an int column.

    Found by hashing candidates in blocks until every partition has one; about ``count * ln(count)``
    candidates (a million for 80,000 buckets). The array is shared: do not modify it.
    """
    labels = np.full(count, -1, dtype=np.int64)
    start, block = 0, max(1024, 4 * count)
    while (labels < 0).any():
        candidates = np.arange(start, start + block, dtype=np.int64)
        partitions = np.mod(_murmur3_int(candidates).astype(np.int64), count)
        found, first = np.unique(partitions, return_index=True)
        free = labels[found] < 0
        labels[found[free]] = candidates[first[free]]
        start += block
    labels = labels.astype(np.int32)
    labels.flags.writeable = False
    return labels


def _murmur3_int(values: np.ndarray, seed: int = 42) -> np.ndarray:
    """Spark's ``hash()`` of int values (Murmur3 x86 32-bit of a 4-byte int, ``Murmur3_x86_32.hashInt``)."""
    with np.errstate(over="ignore"):
        k = values.astype(np.uint32) * np.uint32(0xCC9E2D51)
        k = ((k << np.uint32(15)) | (k >> np.uint32(17))) * np.uint32(0x1B873593)
        h = np.uint32(seed) ^ k
        h = ((h << np.uint32(13)) | (h >> np.uint32(19))) * np.uint32(5) + np.uint32(0xE6546B64)
        h = h ^ np.uint32(4)
        h = (h ^ (h >> np.uint32(16))) * np.uint32(0x85EBCA6B)
        h = (h ^ (h >> np.uint32(13))) * np.uint32(0xC2B2AE35)
        h = h ^ (h >> np.uint32(16))
    return h.view(np.int32)


# ---- the pure-pandas adapter (runs in the Python workers) -----------------------------------

@dataclass(frozen=True)
class OutputColumn:
    name: str
    kind: str  # "key" | "time" | "value" | "timing" | "index" | "flag"
    source: str
    integral: bool = False
    array: bool = False


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
    (`combine.null_flag`), since pyspark would hand them over as float64, inexact beyond 2**53."""

    @property
    def buckets(self) -> int:
        return self.bucketing.count

    # -- frames in and out --
    def elements(self, frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
        spec = self.plan.spec
        names = spec.key_columns + [_T] + [f"_v{i}" for i, c in enumerate(self.plan.value_columns) if c is not None]
        names += [_E] if self.late_output else []
        flags = [null_flag(name) for name in self.nullable]
        frames = [_unpacked(f, names, flags) if self.packed else f for f in frames if len(f)]
        frames = [f for f in frames if len(f)]  # the packed row of empty lists of combine.CHECKED_BUCKET
        if not frames:
            empty = {k: pd.Series([], dtype=self.key_dtypes[i]) for i, k in enumerate(spec.key_columns)}
            empty[_T] = np.array([], np.int64)
            empty.update({n: pd.Series([], dtype=object) for n in names if n.startswith("_v") or n == _E})
            return pd.DataFrame(empty)
        data = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)
        times = data[_T].to_numpy(dtype=np.int64)
        out = with_nulls(data.loc[:, names + flags], self.nullable)
        out[_T] = times * NS_PER_US if self.timestamp else times
        return out

    def panes(self, panes: pd.DataFrame) -> pd.DataFrame:
        out: dict[str, Any] = {}
        for col in self.columns:
            values = panes[col.source]
            if col.kind == "time":
                raw = values.to_numpy(dtype=np.int64)
                out[col.name] = _micros(raw) if self.timestamp else self.plan.axis.from_internal(raw).to_numpy()
            elif col.kind == "value" or col.integral:
                out[col.name] = _spark_ready(values, col)
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
                late[col.name] = elements.loc[labels, col.source].to_numpy()
            elif col.kind == "time":
                raw = dropped[col.source].to_numpy(dtype=np.int64)
                late[col.name] = _micros(raw) if self.timestamp else self.plan.axis.from_internal(raw).to_numpy()
            else:
                late[col.name] = np.full(len(labels), None, dtype=object)
        late[KIND] = LATE
        late[REASON] = dropped["reason"].to_numpy(dtype=object)
        late[ELEMENT] = elements.loc[labels, _E].to_numpy(dtype=object)
        rows = pd.DataFrame(late, index=pd.RangeIndex(len(labels)))
        return stacked([out, rows]) if len(out) else rows

    def fresh_state(self) -> pd.DataFrame:
        return empty_state(self.plan.spec, list(self.key_dtypes))

    def save(self, table: pd.DataFrame) -> bytes:
        return encode(table, self.buckets, pipeline_of(self.plan.spec), self.bucketing.placement)

    def load(self, blob: bytes) -> pd.DataFrame:
        table, meta = decode(blob)
        written_by, pipeline = meta.get("pipeline"), pipeline_of(self.plan.spec)
        if written_by is not None and written_by != pipeline:
            changed = "; ".join(f"{part} {written_by.get(part)} then, {pipeline[part]} now"
                                for part in pipeline if written_by.get(part) != pipeline[part])
            raise WindowingConfigError(
                f"the checkpoint's state was written by another pipeline ({changed}): its window table would be "
                "read wrongly; restore the pipeline, or start from a new checkpoint")
        count, placement = meta.get("buckets"), meta.get("placement", NUMBERS)  # none stored: labelled by number
        if not self.bucketing.same_labels(count, placement):
            restore = f"{BUCKETS_CONF}={count}" + (f" and {PLACEMENT_CONF}={placement}" if count != 1 and placement != PARTITIONS else "")
            raise WindowingConfigError(
                f"this query groups keys into {self.bucketing.described()}, but its checkpoint was written with {count} "
                f"bucket{'s' if count != 1 else ''}{f' placed by {placement}' if placement != self.bucketing.placement else ''}: "
                f"keys would land in other buckets. To restart from this checkpoint set {restore} (Spark keeps the "
                f"checkpoint's {SHUFFLE_PARTITIONS_CONF} too), or start from a new checkpoint")
        return _without_float_integers(self.plan.spec, table, self.nullable)

    # -- batch: applyInPandas --
    def run_batch(self, frame: pd.DataFrame) -> pd.DataFrame:
        spec = self.plan.spec
        elements = self.elements([frame])
        first = step(spec, self.fresh_state(), elements, MIN_TIME, 0)
        last = step(spec, first.state, self.elements([]), MAX_TIME, 0)
        both = [p for p in (first.panes, last.panes) if len(p)]
        panes = pd.concat(both, ignore_index=True) if both else first.panes
        return self.output(panes, first.dropped, elements)  # end of input drops nothing: no elements

    # -- streaming: applyInPandasWithState --
    def run_stream(self, key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        spec = self.plan.spec
        watermark_ms = state.getCurrentWatermarkMs()
        processing_ms = state.getCurrentProcessingTimeMs()
        # Spark reports 0 before the first watermark; 0 then means "no watermark yet".
        watermark = MIN_TIME if watermark_ms <= 0 else self._from_ms(watermark_ms)
        table = self.load(state.get[0]) if state.exists else self.fresh_state()
        elements = self.elements(frames)
        result = step(spec, table, elements, watermark, self._from_ms(processing_ms))
        if len(result.state) or key[0] == CHECKED_BUCKET:  # see combine.CHECKED_BUCKET
            state.update((self.save(result.state),))
            self._set_timeout(state, spec, result.state, watermark_ms, processing_ms)
        else:
            state.remove()
        yield self.output(result.panes, result.dropped, elements)

    def _from_ms(self, ms: int) -> int:
        return int(ms) * _per_ms(self.timestamp)

    def _to_ms_ceil(self, t: int) -> int:
        return -(-t // _per_ms(self.timestamp))

    def _set_timeout(self, state: Any, spec: EngineSpec, table: pd.DataFrame, watermark_ms: int, processing_ms: int) -> None:
        at_watermark, at_processing = next_timers(spec, table, self._from_ms(processing_ms))
        if self.processing_time_mode:
            # One timeout per group: a processing-time timeout of 1 ms calls the bucket again in the
            # next micro-batch, where it checks the watermark; later for processing-time timers only.
            waits = []
            if at_watermark < MAX_TIME:
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


def pipeline_of(spec: EngineSpec) -> dict[str, str]:
    """What builds a bucket's window table, stored beside it in the state: a restart with other
    windows, trigger, mode, keys or aggregations would read it wrongly (a fixed window as a
    session, one aggregation's accumulator as another's), so it is refused by name instead."""
    return {
        "windows": _described(spec.windows),
        "trigger": _described(spec.trigger),
        "mode": spec.mode.value,
        "keys": str(spec.n_keys),
        "aggregations": ", ".join(f"{a.name}={_described(a.accumulation)} of {a.input_dtype}" for a in spec.aggregations),
    }


def _without_float_integers(spec: EngineSpec, table: pd.DataFrame, nullable: tuple[str, ...]) -> pd.DataFrame:
    """``table`` as today's code writes it, where the code before 58c6201 wrote it: that code got an
    integer column holding a null as float64 (docs/spark.md, "Checkpoints written before exact
    integers").

    A nullable integer key column stored as float64 comes back as exact ints and None
    (`combine.with_nulls`): float64 would round new keys beyond 2**53, and their ints beside its
    floats break the sort of the panes. Keys that float64 had already merged (2**53 + 1 into 2**53)
    stay merged. A Min over a nullable integer column that saw only nulls held the int64 minimum
    (+inf cast), which every later value would lose to: it gets back its start value.
    """
    floats = [name for name in spec.key_columns if name in nullable and table[name].dtype.kind == "f"]
    if floats:
        split_nulls(table, floats)
        table = with_nulls(table, floats)
    for i, agg in enumerate(spec.aggregations):
        if f"_v{i}" in nullable and isinstance(agg.accumulation, Min) and agg.vectorized:
            field = f"a{i}.{agg.accumulation.reduction}"
            seen = table[f"a{i}.n"].to_numpy() > 0
            table[field] = np.where(seen, table[field].to_numpy(), agg.field_defaults()[agg.accumulation.reduction])
    return table


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


def _described(part: Any) -> str:
    """``repr``, or the class name where the repr is object's own (it holds a memory address)."""
    return type(part).__qualname__ if type(part).__repr__ is object.__repr__ else repr(part)


def _unpacked(frame: pd.DataFrame, names: list[str], flags: list[str]) -> pd.DataFrame:
    """The elements of packed rows (`combine.pack`): each column's arrays concatenated; a null flag's
    missing array (no null in that packed row) as all false."""
    out = {name: np.concatenate(frame[name].to_numpy()) for name in names}
    lengths = [len(elements) for elements in frame[names[0]]]
    for flag in flags:
        out[flag] = np.concatenate([np.zeros(n, dtype=bool) if missing is None else missing
                                    for missing, n in zip(frame[flag].to_numpy(), lengths)])
    return pd.DataFrame(out)


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
    return pd.Categorical.from_codes(codes.astype(np.int8), categories=list(TIMINGS))


def _spark_ready(values: pd.Series, col: OutputColumn) -> Any:
    values = values.reset_index(drop=True)
    if col.integral and values.dtype.kind in "iu":
        return values.to_numpy()
    if col.array:
        out = np.empty(len(values), dtype=object)
        out[:] = [None if v is None else _as_list(v) for v in values]
        return out
    if col.integral:  # Python ints and None, exact: float64 would round beyond 2**53
        try:
            return pd.array(values.to_numpy(dtype=object), dtype="Int64").to_numpy(dtype=object, na_value=None)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"output column {col.name!r} is bigint, but a pane's value is not a whole number "
                f"({next((v for v in values if not _is_whole(v)), None)!r}); for an accumulation of your own, "
                "Fold or Reduce whose output type depends on the values, state it with "
                "windowing.runners.spark.spark_typed(acc, 'double') (any Spark DDL type)") from err
    return values.to_numpy()


def _is_whole(value: Any) -> bool:
    """An integer, or missing: what a bigint column takes."""
    return isinstance(value, (int, np.integer)) or (pd.api.types.is_scalar(value) and pd.isna(value))


def _as_list(value: Any) -> list:
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    return list(value)


# ---- choosing the timeout mode ---------------------------------------------------------------

def uses_processing_time(spec: EngineSpec) -> bool:
    """Whether the buckets need Spark's processing-time timeout: some part of the trigger
    (late firings included) may fire when only processing time passed, which the event-time
    timeout never calls a bucket for."""
    return spec.trigger.uses_processing_time()


# ---- the driver side ---------------------------------------------------------------------------

@dataclass
class SparkRun:
    """What ``run`` returns for a Spark source.

    ``output``: the one DataFrame the stateful step produces, panes (``kind = PANE``) and dropped
    elements (``kind = LATE``, with ``reason`` and the input row as JSON in ``element``).
    ``panes`` and ``late_data`` are its two filtered views: ``panes`` has the columns of
    shared/api.md (as ``aggregate()``), ``late_data`` the input row's columns plus
    ``window_start``, ``window_end``, ``reason`` (as the pandas runner's ``late_data``).
    Each view started as its own streaming query runs the stateful step again, on its own
    checkpoint; to get both from one query, write ``output`` with ``foreachBatch`` and
    ``split`` each micro-batch (docs/spark.md).
    """

    panes: Any
    output: Any = None
    input_schema: Any = None

    @property
    def late_data(self) -> Any:
        if self.output is None:
            raise WindowingConfigError("this run has no late-data output: aggregate() returns panes only; use run(...).late_data")
        return late_data_of(self.output, self.input_schema)

    def split(self, batch: Any) -> tuple[Any, Any]:
        """``(panes, late_data)`` of one micro-batch of ``output`` (inside ``foreachBatch``)."""
        return panes_of(batch), late_data_of(batch, self.input_schema)


def panes_of(output: Any) -> Any:
    """The pane rows of a run's ``output``, with the columns of shared/api.md."""
    from pyspark.sql import functions as F

    return output.where(F.col(KIND) == PANE).drop(KIND, REASON, ELEMENT)


def late_data_of(output: Any, input_schema: Any) -> Any:
    """The late rows of a run's ``output``: the input row's columns, ``window_start``, ``window_end``, ``reason``."""
    from pyspark.sql import functions as F

    row = F.from_json(F.col(ELEMENT), input_schema, JSON_OPTIONS).alias("_row")
    late = output.where(F.col(KIND) == LATE).select(row, "window_start", "window_end", REASON)
    return late.select(*[F.col("_row").getField(f.name).alias(f.name) for f in input_schema.fields],
                       "window_start", "window_end", REASON)


def _bucketing(source: Any, keyed: bool) -> Bucketing:
    """``windowing.spark.buckets`` if set, else one bucket per shuffle partition (docs/spark.md, "Key buckets")."""
    conf = source.sparkSession.conf
    placement = conf.get(PLACEMENT_CONF, PARTITIONS)
    if placement not in (PARTITIONS, NUMBERS):
        raise WindowingConfigError(
            f"{PLACEMENT_CONF}={placement!r} must be {PARTITIONS!r} (the default) or {NUMBERS!r} (for checkpoints "
            "written before buckets were placed on partitions)")
    if not keyed:
        return Bucketing(1, placement, "not keyed")
    raw = conf.get(BUCKETS_CONF, None)
    if raw is None:
        partitions = _positive_int(conf.get(SHUFFLE_PARTITIONS_CONF))  # its built-in default if unset
        if partitions is None:  # not a number, e.g. Databricks' "auto"
            return Bucketing(SPARK_SHUFFLE_PARTITIONS, placement, f"{BUCKETS_CONF} unset and {SHUFFLE_PARTITIONS_CONF} "
                             f"not a number: Spark's default of {SPARK_SHUFFLE_PARTITIONS}")
        return Bucketing(partitions, placement, f"{BUCKETS_CONF} unset: one per shuffle partition, "
                                                f"{SHUFFLE_PARTITIONS_CONF}={partitions}")
    value = _positive_int(raw)
    if value is None:
        raise WindowingConfigError(f"{BUCKETS_CONF}={raw!r} must be a positive integer (the number of key buckets)")
    return Bucketing(value, placement, f"{BUCKETS_CONF}={value}")


def _positive_int(raw: Any) -> int | None:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _input_watermark(source: Any) -> str | None:
    """The column the input's own ``withWatermark`` is on, if any."""
    for f in source.schema.fields:
        if WATERMARK_DELAY_KEY in (f.metadata or {}):
            return f.name
    return None


def _check_watermark(strategy: Strategy, plan: Plan, watermarked: str | None, timestamp: bool) -> None:
    time = strategy.time
    if watermarked is not None and not timestamp:
        raise WindowingConfigError(
            f"withWatermark on {watermarked!r} with the numeric time column {time!r}: that watermark is a timestamp, "
            f"which the column's units cannot be compared with; drop withWatermark and call .watermark(delay) on the "
            f"builder, with the delay in the column's units")
    if watermarked is None and plan.watermark_delay is None:
        raise WindowingConfigError(
            f"streaming windowed(time={time!r}) has no watermark: call .watermark(delay) on the builder, "
            f"or source.withWatermark({time!r}, delay) before windowed()")
    if watermarked is not None and plan.watermark_delay is not None:
        raise WindowingConfigError(
            f"watermark(delay={strategy.watermark_delay.given!r}) on an input that already has withWatermark on {watermarked!r}: "
            "Spark refuses to redefine a watermark; keep one of the two")


def _horizon_ms(plan: Plan, per_ms: int) -> int:
    """How far behind an element's time the engine may still accept it (window extent + lateness)."""
    extent = plan.spec.windows.max_extent
    if extent is None:  # the global window: never behind
        return NEVER_BEHIND_MS
    return -(-(int(extent) + plan.spec.allowed_lateness) // per_ms) + 1


def _per_ms(timestamp: bool) -> int:
    """Engine time units per millisecond of Spark's watermark clock: on a numeric time axis, one
    unit of the time column is taken as one millisecond (Spark's watermark needs a timestamp)."""
    return NS_PER_MS if timestamp else 1


@dataclass(frozen=True)
class SparkPlan:
    """The driver's decisions: the adapter shipped to the workers and the schemas around it."""

    adapter: BucketStep
    out_schema: Any
    state_schema: Any
    timeout: str
    horizon_ms: int
    lifting: Lifting | None = None
    lifted_schema: Any = None
    input_columns: tuple[str | None, ...] = ()
    """The input column of each aggregation (``_v<i>`` shipped to the workers)."""


def plan_spark(strategy: Strategy, schema: Any, buckets: int | Bucketing, combine: bool = True,
               late_data: bool = False) -> SparkPlan:
    """Everything but the query itself; needs pyspark's types, not a SparkSession.

    ``buckets``: how keys are grouped (a count: placed on partitions, `Bucketing`).
    ``combine``: pre-aggregate before the shuffle where that is exact (`windowing.runners.combine`).
    ``late_data``: the function also emits the dropped elements (`BucketStep.output`); that needs
    every input row in the function, so no lifting, and no row dropped by Spark's watermark.
    """
    from pyspark.sql import types as T

    if strategy.two_streams:
        raise WindowingConfigError(
            "with_second_stream() on Spark: the Spark runner runs one stream and would "
            "ignore the second; with_second_stream() works with bounded pandas DataFrames for now")
    if not isinstance(strategy.time, str):
        raise WindowingConfigError(
            f"windowed(time={strategy.time!r}): on Spark give the event-time column's name; compute the column first with withColumn")
    check_columns([f.name for f in schema.fields], strategy)
    types = {f.name: f.dataType for f in schema.fields}
    time_type = types[strategy.time]
    if strategy.time_unit is not None:
        if not (_integral(time_type) or isinstance(time_type, (T.FloatType, T.DoubleType))):
            raise WindowingConfigError(
                f"windowed(time_unit={strategy.time_unit!r}): time column {strategy.time!r} has Spark type "
                f"{time_type.simpleString()}; time_unit says that a column of numbers (integers, float or double) "
                "holds epoch instants: drop it for a timestamp column")
        timestamp = True  # the workers get microseconds, as for a timestamp column
        axis = TimeAxis(strategy.time, "datetime", unit="ns", epoch_unit=strategy.time_unit)
    elif isinstance(time_type, T.TimestampType):
        timestamp = True
        axis = TimeAxis(strategy.time, "datetime", unit="ns")
    elif _integral(time_type):
        timestamp = False
        axis = TimeAxis(strategy.time, "numeric", dtype=str(_numpy_dtype(time_type)))
    else:
        hint = "; for epoch instants give their unit, e.g. windowed(..., time_unit='s')" if isinstance(
            time_type, (T.FloatType, T.DoubleType, T.DecimalType)) else ""
        raise WindowingConfigError(
            f"time column {strategy.time!r} has Spark type {time_type.simpleString()}; it must be a timestamp or an integer{hint}")
    dtypes = {name: _numpy_dtype(t) for name, t in types.items()}
    aggregations = strategy.aggregations
    keys = list(strategy.keys or ())
    may_be_null = {f.name for f in schema.fields if f.nullable and _integral(f.dataType)}
    nullable = tuple([f"_k{i}" for i, k in enumerate(keys) if k in may_be_null]
                     + [f"_v{i}" for i, (_, acc) in enumerate(aggregations) if acc.column in may_be_null])
    how = None
    if combine and not late_data:
        how = lifting(strategy.windowing.window_fn(axis), strategy.trigger, engine_aggregations(aggregations, dtypes),
                      strategy.n_keys, NS_PER_US if timestamp else 1, nullable)
    if how is None:
        plan = make_plan(strategy, axis, dtypes)
    else:  # the stateful step runs the lifted aggregations, over the folded rows' columns
        lifted = lifted_aggregations(aggregations)
        counted = {acc.column for (_, acc), (_, old) in zip(lifted, aggregations) if acc is not old}
        plan = make_plan(strategy, axis, {**dtypes, **{c: np.dtype(np.int64) for c in counted}}, lifted)
    value_types = [output_type(name, acc, types.get(acc.column) if acc.column else None) for name, acc in aggregations]
    lifted_fields = None
    if how is not None:
        lifted_fields = [T.StructField(_B, T.IntegerType())]
        lifted_fields += [T.StructField(f"_k{i}", types[k]) for i, k in enumerate(keys)] or [T.StructField("_k0", T.LongType())]
        lifted_fields.append(T.StructField(_T, T.LongType()))
        lifted_fields += [T.StructField(f"_v{i}", vtype) for i, vtype in enumerate(value_types)]
        lifted_fields.append(T.StructField("_tmax", T.LongType()))
        lifted_fields += [T.StructField(null_flag(name), T.BooleanType()) for name in nullable]

    out_fields, columns = [], []
    for i, name in enumerate(keys):
        out_fields.append(T.StructField(name, types[name]))
        columns.append(OutputColumn(name, "key", f"_k{i}", integral=_integral(types[name])))
    window_type = T.LongType() if timestamp else time_type
    for name, src in (("window_start", "start"), ("window_end", "end")):
        out_fields.append(T.StructField(name, window_type))
        columns.append(OutputColumn(name, "time", src))
    for (name, acc), vtype in zip(aggregations, value_types):
        out_fields.append(T.StructField(name, vtype))
        columns.append(OutputColumn(name, "value", name, integral=_integral(vtype), array=isinstance(vtype, T.ArrayType)))
    out_fields += [T.StructField("timing", T.StringType()), T.StructField("pane_index", T.LongType()),
                   T.StructField("is_retraction", T.BooleanType())]
    if late_data:
        clash = [f.name for f in out_fields if f.name in (KIND, REASON, ELEMENT)]
        if clash:
            raise WindowingConfigError(
                f"output column {clash[0]!r} clashes with run()'s late-data columns {KIND!r}, {REASON!r}, {ELEMENT!r}; "
                "rename it, or use aggregate(), which returns panes only")
        out_fields += [T.StructField(KIND, T.StringType()), T.StructField(REASON, T.StringType()),
                       T.StructField(ELEMENT, T.StringType())]
    columns += [OutputColumn("timing", "timing", "timing"), OutputColumn("pane_index", "index", "pane_index"),
                OutputColumn("is_retraction", "flag", "is_retraction")]

    key_dtypes = tuple(_numpy_dtype(types[k]) for k in keys) or (np.dtype(np.int64),)
    pt_mode = uses_processing_time(plan.spec)
    bucketing = buckets if isinstance(buckets, Bucketing) else Bucketing(buckets)
    adapter = BucketStep(plan, tuple(columns), key_dtypes, timestamp, bucketing, pt_mode, late_data, packed=combine,
                         nullable=nullable)
    return SparkPlan(adapter, T.StructType(out_fields), T.StructType([T.StructField("table", T.BinaryType())]),
                     "ProcessingTimeTimeout" if pt_mode else "EventTimeTimeout",
                     NEVER_BEHIND_MS if late_data else _horizon_ms(plan, _per_ms(timestamp)),
                     how, T.StructType(lifted_fields) if lifted_fields else None,
                     tuple(acc.column for _, acc in aggregations))


def run_spark(strategy: Strategy, source: Any, late_data: bool = True) -> SparkRun:
    """The query; ``late_data`` False (``aggregate()``) builds panes only, lifted where exact."""
    from pyspark.sql import functions as F

    _check_worker_python(source.sparkSession)
    keys = list(strategy.keys or ())
    combine = str(source.sparkSession.conf.get(COMBINE_CONF, "true")).lower()
    if combine not in ("true", "false"):
        raise WindowingConfigError(f"{COMBINE_CONF}={combine!r} must be 'true' or 'false' (pre-aggregation before the shuffle)")
    sp = plan_spark(strategy, source.schema, _bucketing(source, bool(keys)), combine == "true", late_data)
    adapter, time = sp.adapter, strategy.time
    watermarked = _input_watermark(source) if source.isStreaming else None
    if source.isStreaming:
        _check_watermark(strategy, adapter.plan, watermarked, adapter.timestamp)

    def shipped(name: str, alias: str) -> list[Any]:
        """The column under ``alias``; a nullable integer one as its value, 0 where null, and a null flag."""
        if alias not in adapter.nullable:
            return [_col(name).alias(alias)]
        zero = F.lit(0).cast(source.schema[name].dataType)
        return [F.coalesce(_col(name), zero).alias(alias), _col(name).isNull().alias(null_flag(alias))]

    projected = [_bucket(keys, adapter.bucketing).alias(_B)]
    projected += [c for i, k in enumerate(keys) for c in shipped(k, f"_k{i}")] or [F.lit(0).cast("long").alias("_k0")]
    projected.append(_event_time(time, adapter.timestamp, source.isStreaming, strategy.time_unit,
                                 source.schema[time].dataType).alias(_T))
    projected += [c for i, name in enumerate(sp.input_columns) if name is not None for c in shipped(name, f"_v{i}")]
    if late_data:
        projected.append(F.to_json(F.struct(*[_col(f.name) for f in source.schema.fields]), JSON_OPTIONS).alias(_E))

    frame = source.select(*projected)
    latest = _T
    if sp.lifting is not None:
        from pyspark.sql.pandas.types import to_arrow_schema

        how, lifted = sp.lifting, to_arrow_schema(sp.lifted_schema)

        streaming = source.isStreaming

        def combine_rows(batches: Iterator[Any]) -> Iterator[Any]:
            return lift_and_pack(batches, how, lifted, checked=streaming)

        frame, latest = frame.mapInArrow(_on_workers(combine_rows), _packed_schema(sp.lifted_schema)), "_tmax"
    elif adapter.packed:
        streaming = source.isStreaming

        def pack_rows(batches: Iterator[Any]) -> Iterator[Any]:
            return pack(batches, checked=streaming)

        frame, latest = frame.mapInArrow(_on_workers(pack_rows), _packed_schema(frame.schema)), "_tmax"

    if not source.isStreaming:
        def run_batch(frame: pd.DataFrame) -> pd.DataFrame:  # Spark counts a bound method's `self` as an argument
            return adapter.run_batch(frame)

        out = frame.groupBy(_B).applyInPandas(_on_workers(run_batch), sp.out_schema)
        return _spark_run(_finish(out, adapter.timestamp), late_data, source.schema)

    # The stateful operator drops rows whose watermarked column is at or behind the watermark.
    # Beam semantics accept them until their window's end plus lateness passes, so the watermark
    # is put on a column shifted forward by that horizon, with the delay grown by the same amount:
    # the watermark is unchanged, and Spark drops only rows the engine would drop anyway.
    if adapter.timestamp:
        shifted = F.expr(f"timestamp_micros(`{latest}` + {sp.horizon_ms * 1000})")
    else:  # one unit of a numeric time column is a millisecond of the watermark's clock
        shifted = F.expr(f"timestamp_millis(`{latest}` + {sp.horizon_ms})")
    if watermarked is None:
        delay_ms = -(-adapter.plan.watermark_delay // _per_ms(adapter.timestamp))
        frame = frame.withColumn(_WM, shifted).withWatermark(_WM, f"{delay_ms + sp.horizon_ms} milliseconds")
    else:
        # Spark refuses a second withWatermark: the input's keeps setting the watermark, and the shifted
        # column gets only the marker withWatermark would put on it, by which the stateful operator
        # finds the column it drops rows by. In a select, not withColumn: over Spark Connect withColumn
        # aliases the column again, without its metadata.
        delay_ms = source.schema[watermarked].metadata[WATERMARK_DELAY_KEY]
        frame = frame.select("*", shifted.alias(_WM, metadata={WATERMARK_DELAY_KEY: delay_ms + sp.horizon_ms}))

    def run_stream(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        return adapter.run_stream(key, frames, state)

    out = frame.groupBy(_B).applyInPandasWithState(_on_workers(run_stream), sp.out_schema, sp.state_schema, "append", sp.timeout)
    return _spark_run(_finish(out, adapter.timestamp), late_data, source.schema)


def _bucket(keys: list[str], bucketing: Bucketing) -> Any:
    """The group label of a row's bucket (`Bucketing`), an int column."""
    from pyspark.sql import functions as F

    if not keys or bucketing.count == 1:
        return F.lit(int(bucketing.labels()[0]))
    number = F.pmod(F.xxhash64(*[_col(k) for k in keys]), F.lit(bucketing.count)).cast("int")
    if bucketing.placement == NUMBERS:
        return number
    return F.element_at(F.array(*[F.lit(int(label)) for label in bucketing.labels()]), number + 1)


def _col(name: str) -> Any:
    """The column named ``name``, quoted: a dot in a name is no field access, a backtick no quote."""
    from pyspark.sql import functions as F

    return F.col(_quoted(name))


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _event_time(time: str, timestamp: bool, streaming: bool, epoch_unit: str | None = None, time_type: Any = None) -> Any:
    """The event time as int64 (microseconds for a timestamp), checked on the JVM.

    A null time or a timestamp outside pandas' nanosecond range fails the query naming the column
    (the pandas runner refuses a missing time too): the workers would put a null in the 1970 window
    and overflow an outlying time into a wrong window. So does a streamed numeric time whose units,
    taken as milliseconds, overflow the timestamp of Spark's watermark. With ``epoch_unit``
    (``windowed(time_unit=...)``) the numbers become microseconds as `TimeAxis` makes them on pandas.
    """
    from pyspark.sql import functions as F

    column = _col(time)
    checked = F.when(column.isNull(), F.raise_error(F.lit(
        f"time column {time!r} has a missing value (null); every element needs an event time: "
        "filter such rows out before windowed()")))
    if epoch_unit is not None:
        checked, value = _epoch_micros(checked, column, time, epoch_unit, not _integral(time_type))
    else:
        value = F.expr(f"unix_micros({_quoted(time)})") if timestamp else column.cast("long")
    if timestamp:
        low, high = -(-MIN_TIME // NS_PER_US), MAX_TIME // NS_PER_US
        checked = checked.when((value < low) | (value > high), F.raise_error(F.concat(
            F.lit(f"time column {time!r} holds "), column.cast("string"),
            F.lit(f", outside the engine's time range, pandas' nanosecond timestamps "
                  f"({pd.Timestamp(low, unit='us')} to {pd.Timestamp(high, unit='us')} UTC): "
                  "filter such rows out before windowed()"))))
    elif streaming:
        low, high = -(2**63) // 1000, (2**63 - 1) // 1000 - NEVER_BEHIND_MS  # microseconds in int64, after the shift
        checked = checked.when((value < low) | (value > high), F.raise_error(F.concat(
            F.lit(f"time column {time!r} holds "), column.cast("string"),
            F.lit(f", outside {low} to {high}: a streamed numeric time is taken as milliseconds for Spark's "
                  "watermark, which must be a timestamp; use a coarser unit, or filter such rows out before windowed()"))))
    return checked.otherwise(value)


def _epoch_micros(checked: Any, column: Any, time: str, unit: str, floating: bool) -> tuple[Any, Any]:
    """``TimeAxis._epoch_micros`` on the JVM: epoch instants in ``unit`` as bigint microseconds,
    rounded to the nearest (half up), with the same double arithmetic for floats; ``checked``
    (a ``when`` chain) gets the checks that must come before the arithmetic."""
    from pyspark.sql import functions as F

    def outside(what: str) -> Any:
        return F.raise_error(F.concat(F.lit(f"time column {time!r} holds "), column.cast("string"), F.lit(
            f", {what} in windowed(time_unit={unit!r}): filter such rows out before windowed()")))

    factor = EPOCH_UNITS[unit]
    if floating:
        number = column.cast("double")
        scaled = number / F.lit(1000.0) if unit == "ns" else number * F.lit(float(factor))
        checked = checked.when(F.isnan(number) | (F.abs(scaled) >= F.lit(2.0**62)), outside("not finite or beyond the time axis"))
        return checked, F.floor(scaled + F.lit(0.5)).cast("long")
    number = column.cast("long")
    if unit == "ns":  # floor((t + 500) / 1000), exact and without overflow: pmod is the floor division's remainder
        checked = checked.when((number < MIN_MICROS * 1000) | (number > MAX_MICROS * 1000), outside("outside the time axis"))
        ns = f"CAST({_quoted(time)} AS BIGINT)"
        return checked, F.expr(f"({ns} - pmod({ns}, 1000)) div 1000 + CAST(pmod({ns}, 1000) >= 500 AS BIGINT)")
    low, high = -(-MIN_MICROS // factor), MAX_MICROS // factor
    checked = checked.when((number < low) | (number > high), outside("outside the time axis"))
    return checked, number * F.lit(factor)


def _on_workers(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (of one argument, or three: ``applyInPandasWithState``'s) as Spark's Python workers
    get it: pickled inside a function that needs only the standard library to load.

    pyspark loads a function before calling it, and one of this package's would import the package
    (and a pipeline's own accumulations) right then: a worker whose interpreter lacks them failed
    with a bare ``ModuleNotFoundError``. This one loads ``function`` when first called and fails
    naming the missing module and how to fix it (`worker_import_hint`); the message reaches the
    driver in the query's exception.

    Each call starts with ``gc.freeze()``: pyspark's worker runs a full ``gc.collect()`` after every
    task, and each one walked every object alive in the worker, the modules and classes of pandas,
    pyarrow and pyspark included: a large part of this runner's Python time (``benchmarks/spark_bench.py``,
    docs/spark.md, "Benchmark"). What is alive when a task's function starts is such lasting state;
    frozen, the collector skips it. Reference counting still frees frozen objects. The splitter's
    Spark source does the same (``storage.splitter.spark_source``).
    """
    from pyspark import cloudpickle

    payload, hint, loaded = cloudpickle.dumps(function), worker_import_hint(), []

    def load() -> Callable[..., Any]:
        import gc
        import pickle

        if not loaded:
            try:
                loaded.append(pickle.loads(payload))
            except ImportError as err:
                raise ModuleNotFoundError(f"Spark's Python worker cannot load this pipeline's code "
                                          f"({type(err).__name__}: {err}). {hint}") from err
        gc.freeze()
        return loaded[0]

    if function.__code__.co_argcount == 3:
        def stateful(key: Any, frames: Any, state: Any) -> Any:
            return load()(key, frames, state)

        return stateful

    def stateless(rows: Any) -> Any:
        return load()(rows)

    return stateless


def worker_import_hint() -> str:
    """How to give Spark's Python workers an interpreter that can import this package and a pipeline's code."""
    return ("The interpreter that runs Spark's Python workers needs spark-event-windows, its dependencies "
            "(pandas, pyarrow, numpy, ...) and the modules of your own accumulations. On a local master, start "
            f"Python with PYSPARK_PYTHON set to the interpreter that has them, e.g. PYSPARK_PYTHON={sys.executable} "
            "(spark.pyspark.python with spark-submit), or activate its virtual environment first; on a cluster, "
            "install the wheel on every node (Databricks: a job or cluster library).")


_WORKER_PYTHON_CHECKED: dict[tuple[str, str], str | None] = {}


def _check_worker_python(spark: Any) -> None:
    """On a local master, refuse before the query starts when Spark's Python workers would run an
    interpreter that cannot import this package: with ``PYSPARK_PYTHON`` unset they run the
    ``python3`` on ``PATH``, often not the one running the driver (a virtual environment used without
    activating it), and the query then failed in its first micro-batch, visible only in
    ``query.exception()``. Over Spark Connect the workers are the server's concern: not checked."""
    context = getattr(spark, "_sc", None)  # a classic session's SparkContext; Connect sessions have none
    if context is None or not str(context.master).startswith("local"):
        return
    executable = str(context.pythonExec)
    found = executable if os.sep in executable else shutil.which(executable)
    if found is not None and os.path.abspath(found) == os.path.abspath(sys.executable):
        return
    key = (str(found), os.getcwd())
    if key not in _WORKER_PYTHON_CHECKED:
        _WORKER_PYTHON_CHECKED[key] = _import_problem(found, executable)
    if _WORKER_PYTHON_CHECKED[key] is not None:
        raise WindowingConfigError(f"{_WORKER_PYTHON_CHECKED[key]}. {worker_import_hint()}")


def _import_problem(found: str | None, executable: str) -> str | None:
    """Why interpreter ``found`` (``executable`` as Spark names it) cannot import what the workers need, or None."""
    if found is None:
        return f"Spark's Python workers would run {executable!r}, which is not on PATH"
    probe = subprocess.run([found, "-c", "import pandas, pyarrow, windowing.runners.spark"], capture_output=True,
                           text=True, timeout=120)  # from the driver's directory, with its environment, as workers
    if probe.returncode == 0:
        return None
    error = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
    return f"Spark's Python workers would run {executable!r} ({found}), which cannot import this package: {error}"


def _packed_schema(schema: Any) -> Any:
    """The Spark schema of `combine.pack`'s rows: ``_b``, every other column as an array, ``_tmax``."""
    from pyspark.sql import types as T

    arrays = [f if f.name == _B else T.StructField(f.name, T.ArrayType(f.dataType)) for f in schema if f.name != "_tmax"]
    return T.StructType(arrays + [T.StructField("_tmax", T.LongType())])


def _spark_run(out: Any, late_data: bool, schema: Any) -> SparkRun:
    if not late_data:
        return SparkRun(out)
    return SparkRun(panes_of(out), output=out, input_schema=schema)


def _finish(panes: Any, timestamp: bool) -> Any:
    from pyspark.sql import functions as F

    if not timestamp:
        return panes
    return panes.select(*[F.expr(f"timestamp_micros(`{c}`)").alias(c) if c in ("window_start", "window_end") else _col(c)
                          for c in panes.columns])
