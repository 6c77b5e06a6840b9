"""Before the shuffle to the stateful step: combiner lifting (pre-aggregation) and packing.

Beam lifts a combiner into a partial combine before the shuffle. Here a
stateless ``mapInArrow`` folds, per input partition and micro-batch, all rows
of one key that fall in the same *unit* of time into one row:

- fixed windows: the unit is the window; sliding windows: the greatest common
  divisor of size and slide (the slide, ``every``, where it divides the size),
  since windows start and end only at its multiples, so every instant of one
  unit belongs to the same windows;
- the row's event time ``_t`` is the unit's start (so it lands in exactly the
  windows of its rows), ``_tmax`` the largest event time folded into it (the
  watermark is computed from it, so it does not change);
- ``Sum`` and ``Min``/``Max`` keep their partial value, ``Count`` becomes the
  ``Sum`` of partial counts. The partial values are the engine's own
  (`windowing.reductions.group_outputs`): a partial integer sum beyond 64 bits is
  not wrapped around (see `lift`).

It is exact, not an approximation, when:
1. every aggregation is liftable (`Accumulation.liftable`: ``Sum``, ``Count``, ``Min``,
   ``Max``, they merge), over a numeric column (or none, for ``Count``);
2. the windows are fixed or sliding: all rows of a unit share their windows,
   so lateness drops all of them or none, in one row or many;
3. no part of the trigger tree counts elements (``Trigger.counts_elements``:
   no ``AfterCount`` and no ``with_*_firings_every(n)`` with an int, late
   firings included): within a step the engine evaluates triggers once after
   all elements, so watermark and processing-time triggers see no difference.
The folded rows are then packed (`lift_and_pack`). Otherwise (`lifting`
returns None) the rows are only *packed* (`pack`): the same stateless
``mapInArrow`` turns the rows of each bucket into one row of arrays, and the
stateful step unpacks them. Packing is exact for every
pipeline, since every element still reaches the engine; it saves Spark's
per-row work (shuffle, sort, Arrow conversion), not the engine's. Session
windows are packed, not lifted: a partial session's contribution would be
dropped or kept as a whole at the lateness horizon, while its rows are
judged one by one.

Integer columns that may hold a null leave this step as two columns, the value (0 where
null) and its null flag (`wire.WireSchema.null_flag`): pyspark hands an integer column holding
a null to pandas as float64, which rounds beyond 2**53. They arrive here as they are: in Arrow a
null integer stays exact, so the flags are made here (`with_null_flags`) rather than computed and
shipped by the JVM, which then writes two columns fewer into Arrow per nullable column. The
fold rebuilds the exact values (`with_nulls`) and splits its results again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from triggers import Trigger

from ...reductions import group_outputs, group_reduce
from ...spec import Aggregation
from ...strategy import NamedAccumulation
from ...timeaxis import MIN_TIME
from ...windows import FixedWindows, SlidingWindows, WindowFn, behind_unit_start, cut_at_the_ends
from .buckets import Bucketing
from .wire import WIRE

#: Whether rows are lifted and packed before the shuffle (default true); a checkpoint restarts with it switched.
COMBINE_CONF = "windowing.spark.combine"


@dataclass(frozen=True)
class Lifting:
    """How to fold rows: the unit of time (in the ``_t`` column's unit) and the pipeline's aggregations,
    set up for their input columns, one per ``_v<i>``."""

    unit: int
    offset: int
    aggregations: tuple[Aggregation, ...]
    key_columns: tuple[str, ...]
    nullable: tuple[str, ...] = ()
    """The key and value columns that arrive (and leave) as a value and a null flag (`wire.WireSchema.null_flag`)."""
    first_time: int = MIN_TIME
    """The start of the axis in ``_t``'s unit: `MIN_MICROS` for timestamps."""

    def unit_starts(self, times: np.ndarray) -> np.ndarray:
        """The start of each time's unit, which stands for every time of the unit: the engine gives it
        the same windows, also where the ends of the axis cut them (`cut_at_the_ends`). A unit that starts
        before the axis starts with it: in microseconds, its start in nanoseconds wrapped around to 2262."""
        return np.maximum(cut_at_the_ends(times, behind_unit_start(times, self.unit, self.offset), self.unit)[0],
                          self.first_time)


def with_nulls(frame: pd.DataFrame, names: Iterable[str]) -> pd.DataFrame:
    """``frame`` with each of ``names`` rebuilt from its value and null flag (`nulls_restored`)."""
    return pd.DataFrame(nulls_restored({name: frame[name] for name in frame.columns}, names), index=frame.index)


def nulls_restored(columns: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """``columns`` (arrays or Series by name) with each of ``names`` rebuilt from its value and null
    flag, the flag dropped: unchanged when nothing is null, else Python ints and None (the engine's
    form of a nullable integer column)."""
    flags = {WIRE.null_flag(name): name for name in names}
    out = {column: values for column, values in columns.items() if column not in flags}
    for flag, name in flags.items():
        missing = np.asarray(columns[flag], dtype=bool)
        if missing.any():
            values = np.asarray(out[name], dtype=np.int64).astype(object)
            values[missing] = None
            out[name] = values
    return out


def split_nulls(frame: pd.DataFrame, names: Iterable[str]) -> None:
    """The inverse of `with_nulls`, in place: each of ``names`` as int64 (0 where null) and its null flag."""
    for name in names:
        missing = pd.isna(frame[name]).to_numpy()
        frame[name] = np.where(missing, 0, frame[name].to_numpy(dtype=object)).astype(np.int64)
        frame[WIRE.null_flag(name)] = missing


def lifting(windows: WindowFn, trigger: Trigger, aggregations: tuple[Aggregation, ...], n_keys: int, unit_scale: int,
            nullable: tuple[str, ...] = ()) -> Lifting | None:
    """The lifting for this pipeline, or None when pre-aggregation could change a pane.

    ``aggregations``: the engine's, set up for their input columns; ``unit_scale`` converts engine
    durations to ``_t`` units (1000 ns per µs for timestamps); ``nullable``: see `Lifting.nullable`.
    """
    if isinstance(windows, FixedWindows):
        unit, offset = windows.size, windows.offset
    elif isinstance(windows, SlidingWindows):
        unit, offset = math.gcd(windows.size, windows.every), windows.offset  # the slide, where it divides the size
    else:
        return None
    if not all(agg.accumulation.liftable for agg in aggregations) or trigger.counts_elements():
        return None
    if any(agg.input_dtype is not None and np.dtype(agg.input_dtype).kind not in "iuf" for agg in aggregations):
        return None  # Min/Max of timestamps, strings or booleans: the engine folds those itself
    if unit % unit_scale or offset % unit_scale:
        return None
    return Lifting(unit // unit_scale, offset // unit_scale, aggregations, tuple(WIRE.keys(n_keys)), nullable,
                   -(-MIN_TIME // unit_scale))


def lifted_aggregations(aggregations: tuple[NamedAccumulation, ...]) -> tuple[NamedAccumulation, ...]:
    """The aggregations the stateful step runs on lifted rows (`Accumulation.of_partials`): a Count
    becomes a Sum of counts."""
    return tuple((name, acc.of_partials(WIRE.partial_count(i))) for i, (name, acc) in enumerate(aggregations))


def lift(frames: Iterator[pd.DataFrame], how: Lifting) -> Iterator[pd.DataFrame]:
    """All chunks of one partition folded to one row per (bucket, key, unit).

    A partial integer sum beyond 64 bits folds nothing in the partition: its rows go on one by
    one, and the engine adds up their window as the pandas runner does, refusing it (naming the
    column) only if the window's sum is beyond 64 bits too.
    """
    parts = [f for f in frames if len(f)]
    if not parts:
        return
    data = pd.concat(parts, ignore_index=True)
    t = data[WIRE.time].to_numpy(dtype=np.int64)
    data[WIRE.time] = how.unit_starts(t)
    data[WIRE.latest] = t
    nullable_values = [WIRE.value(i) for i in range(len(how.aggregations)) if WIRE.value(i) in how.nullable]
    data = with_nulls(data, nullable_values)  # keys are grouped by value and flag as they arrive
    units = data.groupby(_unit_columns(how), sort=False, dropna=False).ngroup().to_numpy()
    try:
        folded = _folded(data, units, how)
    except OverflowError:
        folded = _folded(data, np.arange(len(data)), how)
    split_nulls(folded, nullable_values)
    yield folded


def _unit_columns(how: Lifting) -> list[str]:
    """The columns whose values identify a folded row: bucket, key (with null flags), unit of time."""
    keys = []
    for key in how.key_columns:
        keys += [key, WIRE.null_flag(key)] if key in how.nullable else [key]
    return [WIRE.bucket, *keys, WIRE.time]


def _folded(data: pd.DataFrame, group: np.ndarray, how: Lifting) -> pd.DataFrame:
    """One row per group id of ``data``'s rows: the group's first key and time, each aggregation's output."""
    n_groups = int(group.max()) + 1
    first = np.full(n_groups, len(group))
    np.minimum.at(first, group, np.arange(len(group)))
    out = data.iloc[first][_unit_columns(how)].reset_index(drop=True)
    values = [data[WIRE.value(i)].to_numpy() if WIRE.value(i) in data else None for i in range(len(how.aggregations))]
    for i, folded in enumerate(group_outputs(how.aggregations, values, group, n_groups)):
        out[WIRE.value(i)] = folded
    out[WIRE.latest] = group_reduce(data[WIRE.latest].to_numpy(), group, n_groups, "max")
    return out


#: Rows packed at once: bounds a packing task's memory; a bucket's rows of that many input rows
#: become one packed row.
PACK_ROWS = 1 << 17
#: The bucket label every packing includes, as an empty packed row if it has no rows: its stateful
#: group is then called in every micro-batch with data and checks the checkpoint's bucket count
#: before any key is grouped under another count (`worker.BucketStep.load`).
CHECKED_BUCKET = 0


def with_checked_bucket_copy(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body for rows of a stream not packed (``windowing.spark.combine=false``), the watermark set:
    the rows as they are, plus a copy of the task's first row labelled ``CHECKED_BUCKET`` with a null ``_wm``. As
    `pack`'s empty row does, the copy calls the checked bucket in every micro-batch with data, and it refuses a
    restart under another bucket count before a key reaches a bucket with no state to tell (`worker.BucketStep.load`).
    The copy comes after Spark measures the watermark, Spark keeps a row whose watermark column is null, and
    `worker.BucketStep.elements` drops it."""
    copied = False
    for batch in batches:
        yield batch
        if batch.num_rows and not copied:
            first, copied = batch.slice(0, 1), True
            yield pa.RecordBatch.from_arrays(
                [pa.array([CHECKED_BUCKET], field.type) if field.name == WIRE.bucket
                 else pa.nulls(1, field.type) if field.name == WIRE.watermark else column
                 for field, column in zip(first.schema, first.columns)], schema=first.schema)


def with_null_flags(batch: pa.RecordBatch, nullable: Iterable[str]) -> pa.RecordBatch:
    """``batch`` with each of the integer columns ``nullable`` (as shipped, nulls and all) as its
    value, 0 where null, followed by its null flag: the columns `pack` and `lift` take."""
    nullable = set(nullable)
    if not nullable:
        return batch
    names, arrays = [], []
    for name, column in zip(batch.schema.names, batch.columns):
        if name in nullable:
            names += [name, WIRE.null_flag(name)]
            arrays += [pc.fill_null(column, pa.scalar(0, column.type)), pc.is_null(column)]
        else:
            names.append(name)
            arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def with_buckets(batches: Iterator[pa.RecordBatch], keys: int, bucketing: Bucketing) -> Iterator[pa.RecordBatch]:
    """``batches`` of integer keys ``_k0`` to ``_k<keys - 1>`` (none: not keyed), as shipped, nulls and all,
    each with its bucket's label as the first column, ``_b``: the JVM then ships one column fewer into Arrow
    (`query`), and the label is the one it would have computed (`Bucketing.labels_of`)."""
    for batch in batches:
        labels = bucketing.labels_of([batch.column(name) for name in WIRE.keys(keys)], batch.num_rows)
        yield pa.RecordBatch.from_arrays([pa.array(labels), *batch.columns], names=[WIRE.bucket, *batch.schema.names])


def pack(batches: Iterator[pa.RecordBatch], bucket: str = WIRE.bucket, time: str = WIRE.time,
         checked: bool = True, nullable: tuple[str, ...] = ()) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the rows of each bucket, ``PACK_ROWS`` input rows at a time, as one row of
    arrays (every column but ``bucket`` becomes a list), plus ``_tmax``, the latest event time packed
    (from the rows' own ``_tmax`` when they are lifted rows). With ``checked`` (a stream: a batch
    query has no checkpoint), bucket ``CHECKED_BUCKET`` gets a row of empty lists where it has no
    rows, with the latest ``_tmax`` of the others: that moves no watermark.

    ``nullable``: integer columns that arrive with their nulls, given their null flags (`with_null_flags`).

    Exact for every pipeline: each element still reaches the engine, only in fewer rows; Spark then
    shuffles, sorts and converts a row per bucket instead of a row per element.
    """
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if batch.num_rows:
            pending.append(with_null_flags(batch, nullable))
            rows += batch.num_rows
        if rows >= PACK_ROWS:
            yield _packed(pa.Table.from_batches(pending), bucket, time, checked)
            pending, rows = [], 0
    if rows:
        yield _packed(pa.Table.from_batches(pending), bucket, time, checked)


def _packed(table: pa.Table, bucket: str, time: str, checked: bool) -> pa.RecordBatch:
    table = table.take(pc.sort_indices(table[bucket]))
    buckets = table[bucket].to_numpy()
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    empty_row = int(checked and not (buckets[starts] == CHECKED_BUCKET).any())  # 1: an empty row for it at the end
    ends = np.append(starts, [len(buckets)] * (1 + empty_row))
    offsets = pa.array(ends.astype(np.int32))
    columns = {bucket: pa.array(np.append(buckets[starts], np.full(empty_row, CHECKED_BUCKET, dtype=buckets.dtype)))}
    for name in table.column_names:
        if name in (bucket, WIRE.latest):
            continue
        values = table[name].combine_chunks()
        # A null flag's list is null where the packed row holds no null, as nearly always: Spark then
        # shuffles and converts no array of all-false flags.
        none_null = None
        if WIRE.is_null_flag(name):
            none_null = np.append(~np.logical_or.reduceat(values.to_numpy(zero_copy_only=False), starts),
                                  np.ones(empty_row, dtype=bool))
        columns[name] = pa.ListArray.from_arrays(offsets, values, mask=None if none_null is None else pa.array(none_null))
    latest = np.maximum.reduceat(table[WIRE.latest if WIRE.latest in table.column_names else time].to_numpy(), starts)
    columns[WIRE.latest] = pa.array(np.append(latest, np.full(empty_row, latest.max())))
    return pa.RecordBatch.from_pydict(columns)


def lift_and_pack(batches: Iterator[pa.RecordBatch], how: Lifting, lifted: pa.Schema,
                  checked: bool = True, bucketing: Bucketing | None = None) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: `lift` the rows (in Arrow where `arrow_folded` can), then `pack` the
    lifted rows (of Arrow schema ``lifted``); the columns ``how.nullable`` arrive with their nulls
    (`with_null_flags`). With ``bucketing`` the rows arrive without their bucket and get the one `with_buckets`
    would give them (`with_bucket_column`), after the fold where Arrow folds (`arrow_folded`)."""
    parts = [with_null_flags(batch, how.nullable) for batch in batches if batch.num_rows]
    if not parts:
        return
    table = pa.Table.from_batches(parts)
    folded = arrow_folded(table, how, lifted, bucketing)
    if folded is None:
        if bucketing is not None:
            table = with_bucket_column(table, how, bucketing)
        yield from pack((pa.RecordBatch.from_pandas(frame, schema=lifted, preserve_index=False)
                         for frame in lift(iter([table.to_pandas()]), how)), checked=checked)
    else:
        yield from pack(iter(folded.combine_chunks().to_batches()), checked=checked)


def with_bucket_column(table: pa.Table, how: Lifting, bucketing: Bucketing) -> pa.Table:
    """``table`` with its rows' bucket labels first, as ``_b`` (`Bucketing.labels_of`): its keys are integers, nullable
    ones as value and null flag (`with_null_flags`), or of any type with one bucket, where nothing is hashed."""
    keys = []
    for key in how.key_columns:
        values = table[key]
        if key in how.nullable:
            values = pc.if_else(table[WIRE.null_flag(key)], pa.scalar(None, values.type), values)
        keys.append(values)
    return table.add_column(0, WIRE.bucket, pa.array(bucketing.labels_of(keys, table.num_rows)))


def arrow_folded(table: pa.Table, how: Lifting, lifted: pa.Schema, bucketing: Bucketing | None = None) -> pa.Table | None:
    """`lift` by pyarrow's hash aggregation, without pandas, or None where it might differ from `lift`.
    With ``bucketing`` the rows have no bucket column: the folded rows get it (`with_bucket_column`), which
    hashes as many keys as the fold leaves, and it follows the key, so it splits no fold.

    The same rows (in another order): it applies only where every aggregated column is an integer
    column with no null in this partition (a float sum's rounding would depend on the order of
    adding), and where no partial sum can leave 64 bits (pyarrow's sum wraps around silently): the
    largest magnitude times the partition's rows stays below 2**63. A bound, so a partition near
    the limit goes to `lift`, which checks each sum.
    """
    results: dict[str, tuple[str, str]] = {}  # lifted column: (input column, pyarrow aggregation)
    largest = 0
    for i, agg in enumerate(how.aggregations):
        acc, name = agg.accumulation, WIRE.value(i)
        fold = {"sum": "sum", "count": "count", "extreme": getattr(acc, "reduction", None)}.get(acc.output_kind or "")
        if fold is None:
            return None
        if name not in table.column_names:  # Count(): every row counts, as its time does
            results[name] = (WIRE.time, "count")
            continue
        if not pa.types.is_integer(table[name].type):
            return None
        if name in how.nullable and pc.any(table[WIRE.null_flag(name)]).as_py():
            return None
        if fold == "sum":
            low_high = pc.min_max(table[name]).as_py()
            largest = max(largest, abs(low_high["min"]), abs(low_high["max"]))
        results[name] = (name, fold)
    if largest * table.num_rows >= 2**63:
        return None
    t = table[WIRE.time].to_numpy()
    units = table.set_column(table.schema.get_field_index(WIRE.time), WIRE.time,
                             pa.array(how.unit_starts(t)))
    units = units.append_column(WIRE.latest, table[WIRE.time])
    folds = sorted(set(results.values())) + [(WIRE.latest, "max")]
    by = _unit_columns(how)
    if bucketing is None:
        grouped = units.group_by(by, use_threads=False).aggregate(folds)
    else:
        grouped = with_bucket_column(units.group_by(by[1:], use_threads=False).aggregate(folds), how, bucketing)
    columns = []
    for field in lifted:
        if field.name in results:
            column = grouped[f"{results[field.name][0]}_{results[field.name][1]}"]
        elif field.name == WIRE.latest:
            column = grouped[f"{WIRE.latest}_max"]
        elif field.name in grouped.column_names:
            column = grouped[field.name]
        else:  # the null flag of a value column with no null here
            column = pa.array(np.zeros(grouped.num_rows, dtype=bool))
        columns.append(column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=lifted)
