"""The driver's planning: from a strategy and the input's Spark schema to the `BucketStep` shipped
to the workers, the output and state schemas, the timeout mode and the pre-shuffle combining.
Planned once per query; needs pyspark's types, not a SparkSession."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from accumulations import Distinct, Max, Min, ToList, TopN, ToSet

from ... import columns as engine_columns
from ...errors import WindowingConfigError
from ...plan import Plan, check_columns, check_late_data_columns, engine_aggregations, make_plan
from ...spec import EngineSpec
from ...state_codec import COMPRESSIONS
from ...strategy import Strategy
from ...timeaxis import TimeAxis
from ...window_table import accumulator_columns
from .buckets import Bucketing
from .combine import COMBINE_CONF, Lifting, lifted_aggregations, lifting
from .output_types import SparkTyped, integer_bits, integral, nested_kinds, numpy_dtype, output_type
from .output_values import NS_PER_US, SAMPLED_CHECKED, OutputColumn
from .pipelines import EXACT_INSTANTS, pipeline_of
from .wire import WIRE
from .worker import (
    ELEMENT,
    KIND,
    REASON,
    BucketStep,
    SwitchedLayout,
    per_ms,
    uses_processing_time,
)

# Shift of the watermark's helper column when Spark must drop no row (late-data output, the global
# window): 100 years, so Spark drops only rows more than 100 years behind the watermark. Not more:
# the column reaches the Python workers, and pandas' nanosecond timestamps end in 2262.
NEVER_BEHIND_MS = 100 * 365 * 24 * 3600 * 1000


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

    def held_exactly(self, keys: list[str]) -> tuple[set[str], set[str]]:
        """The input columns whose timestamps the workers hold as UTC wall times wherever the query reads them, and
        the output columns they give back from such (`exact_instants`)."""
        shipped = shipped_columns(keys, self.input_columns)
        inputs = {name for alias, name in shipped if alias in self.adapter.exact}
        inputs -= {name for alias, name in shipped if alias not in self.adapter.exact}
        return inputs, {c.name for c in self.adapter.columns if c.exact}


def plan_spark(strategy: Strategy, schema: Any, buckets: int | Bucketing, combine: bool = True,
               late_data: bool = False, state_compression: str = COMPRESSIONS[0], session_zone: str = "UTC") -> SparkPlan:
    """Everything but the query itself; needs pyspark's types, not a SparkSession.

    ``buckets``: how keys are grouped (a count: placed on partitions, `Bucketing`).
    ``combine``: pre-aggregate before the shuffle where that is exact (`combine`).
    ``late_data``: the function also emits the dropped elements (`BucketStep.output`); that needs
    every input row in the function, so no lifting, and no row dropped by Spark's watermark.
    ``state_compression``: how each bucket's state value is compressed (`windowing.state_codec.COMPRESSIONS`).
    ``session_zone``: ``spark.sql.session.timeZone``, in which pyspark gives the workers timestamps.
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
    if late_data:
        check_late_data_columns([f.name for f in schema.fields], with_step=False)
    types = {f.name: f.dataType for f in schema.fields}
    for key in strategy.keys or ():
        if isinstance(types[key], (T.ArrayType, T.MapType, T.StructType)):  # pandas' lists and dicts do not hash
            raise WindowingConfigError(
                f"key column {key!r} has Spark type {types[key].simpleString()}; a key groups elements by equal values of "
                "one kind (string, number, timestamp, ...): take a field or an element of it as the key (withColumn), "
                "or make it a string with to_json")
    _check_collations(strategy, types)
    _check_python_types(strategy, types)
    time_type = types[strategy.time]
    if strategy.time_unit is not None:
        if not (integral(time_type) or isinstance(time_type, (T.FloatType, T.DoubleType))):
            raise WindowingConfigError(
                f"windowed(time_unit={strategy.time_unit!r}): time column {strategy.time!r} has Spark type "
                f"{time_type.simpleString()}; time_unit says that a column of numbers (integers, float or double) "
                "holds epoch instants: drop it for a timestamp column")
        timestamp = True  # the workers get microseconds, as for a timestamp column
        axis = TimeAxis(strategy.time, "datetime", unit="ns", epoch_unit=strategy.time_unit, microseconds=True)
    elif isinstance(time_type, T.TimestampType):
        timestamp = True
        axis = TimeAxis(strategy.time, "datetime", unit="ns", microseconds=True)
    elif integral(time_type):
        timestamp = False
        axis = TimeAxis(strategy.time, "numeric", dtype=str(numpy_dtype(time_type)))
    else:
        hint = "; for epoch instants give their unit, e.g. windowed(..., time_unit='s')" if isinstance(
            time_type, (T.FloatType, T.DoubleType, T.DecimalType)) else ""
        if isinstance(time_type, (T.TimestampNTZType, T.DateType)):
            hint = (f"; cast it first, withColumn({strategy.time!r}, col({strategy.time!r}).cast('timestamp')): its wall time "
                    "is then read in the session's time zone (spark.sql.session.timeZone)")
        raise WindowingConfigError(
            f"time column {strategy.time!r} has Spark type {time_type.simpleString()}; it must be a timestamp or an integer{hint}")
    dtypes = {name: numpy_dtype(t) for name, t in types.items()}
    aggregations = strategy.aggregations
    keys = list(strategy.keys or ())
    may_be_null = {f.name for f in schema.fields if f.nullable and integral(f.dataType)}
    nullable = tuple([WIRE.key(i) for i, k in enumerate(keys) if k in may_be_null]
                     + [WIRE.value(i) for i, (_, acc) in enumerate(aggregations) if acc.column in may_be_null])
    shipped = shipped_columns(keys, [acc.column for _, acc in aggregations])
    exact = exact_instants(shipped, aggregations, types)
    # Shipped as epoch microseconds (`BucketStep.instants`): packed, the exact ones (pyspark hands a Fold's inputs
    # over as wall times, as its code always read them); unpacked, every timestamp.
    instants = exact if combine else tuple(alias for alias, name in shipped if isinstance(types[name], T.TimestampType))
    nullable += tuple(alias for alias, name in shipped if alias in instants and schema[name].nullable)
    liftable = lifting(strategy.windowing.window_fn(axis), strategy.trigger, engine_aggregations(aggregations, dtypes),
                       strategy.n_keys, NS_PER_US if timestamp else 1, nullable)
    how = liftable if combine and not late_data else None  # run() needs every input row in the stateful step
    plan = unlifted_plan = make_plan(strategy, axis, dtypes)
    described = _described_state(keys, [acc.column for _, acc in aggregations if acc.column is not None], types, session_zone,
                                 bool(exact))
    switched = None
    if liftable is not None:  # lifted, the stateful step runs the lifted aggregations, over the folded rows' columns
        lifted = lifted_aggregations(aggregations)
        counted = {str(acc.column) for (_, acc), (_, old) in zip(lifted, aggregations) if acc is not old}  # Sum(partial_count(i))
        lifted_plan = make_plan(strategy, axis, {**dtypes, **{c: np.dtype(np.int64) for c in counted}}, lifted)
        if how is None:
            other, written_by = lifted_plan, f"aggregate() with {COMBINE_CONF}=true, which lifts"
        else:
            plan, other, written_by = lifted_plan, unlifted_plan, f"run() or aggregate() with {COMBINE_CONF}=false, which do not lift"
        switched = switched_layout(other.spec, plan.spec, strategy.window_state, written_by, described)
    value_types = [output_type(name, acc, types.get(acc.column) if acc.column else None) for name, acc in aggregations]
    lifted_fields = None
    if how is not None:
        lifted_fields = [T.StructField(WIRE.bucket, T.IntegerType())]
        lifted_fields += [T.StructField(WIRE.key(i), T.LongType() if WIRE.key(i) in instants else types[k])
                          for i, k in enumerate(keys)] or [T.StructField(WIRE.key(0), T.LongType())]
        lifted_fields.append(T.StructField(WIRE.time, T.LongType()))
        lifted_fields += [T.StructField(WIRE.value(i), vtype) for i, vtype in enumerate(value_types)]
        lifted_fields.append(T.StructField(WIRE.latest, T.LongType()))
        lifted_fields += [T.StructField(WIRE.null_flag(name), T.BooleanType()) for name in nullable]

    # Timestamps leave the workers as epoch microseconds (`instants`), made timestamps on the JVM (`query._finish`).
    out_fields, columns = [], []
    for i, name in enumerate(keys):
        instant = isinstance(types[name], T.TimestampType)
        out_fields.append(T.StructField(name, T.LongType() if instant else types[name]))
        columns.append(OutputColumn(name, "key", WIRE.key(i), integral=integral(types[name]), instant=instant, exact=instant))
    window_type = T.LongType() if timestamp else time_type
    for name, src in (("window_start", "start"), ("window_end", "end")):
        out_fields.append(T.StructField(name, window_type))
        columns.append(OutputColumn(name, "time", src))
    for i, ((name, acc), vtype) in enumerate(zip(aggregations, value_types)):
        array, checked = isinstance(vtype, T.ArrayType), acc.output_kind is None  # a Fold, Reduce or own: its code's types
        scalar = (vtype.elementType if array else vtype).simpleString()
        stated = isinstance(acc, SparkTyped)  # its type given with spark_typed: a double takes any number as a cast would
        checked_type = scalar if (checked or stated) and scalar in SAMPLED_CHECKED else None
        floating = (not checked or stated) and isinstance(vtype, (T.DoubleType, T.FloatType))
        instant = isinstance(vtype, T.TimestampType) and not checked
        zoned = isinstance(vtype.elementType if array else vtype, T.TimestampType) and not instant
        out_fields.append(T.StructField(name, T.LongType() if instant else vtype))
        columns.append(OutputColumn(name, "value", engine_columns.output(i), integral=integral(vtype), bits=integer_bits(vtype),
                                    array=array, instant=instant,
                                    zoned=zoned,
                                    exact=(instant or zoned) and WIRE.value(i) in exact,
                                    interval=isinstance(vtype, T.DayTimeIntervalType),
                                    whole_elements=array and checked and integral(vtype.elementType),
                                    sampled=checked_type,
                                    stated=stated,
                                    own_values=checked,
                                    shape=_shape_of(vtype.elementType if array else vtype) if checked else None,
                                    nested=nested_kinds(vtype) if checked else None,
                                    decimal=(vtype.precision, vtype.scale) if isinstance(vtype, T.DecimalType) else None,
                                    floating=floating))
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

    key_dtypes = tuple(numpy_dtype(types[k]) for k in keys) or (np.dtype(np.int64),)
    pt_mode = uses_processing_time(plan.spec)
    bucketing = buckets if isinstance(buckets, Bucketing) else Bucketing(buckets)
    adapter = BucketStep(plan, tuple(columns), key_dtypes, timestamp, bucketing, pt_mode, late_data, packed=combine,
                         nullable=nullable, window_state=strategy.window_state, state_compression=state_compression,
                         switched=switched, instants=instants, exact=exact, wall_zone=session_zone, described=described)
    return SparkPlan(adapter, T.StructType(out_fields), T.StructType([T.StructField("table", T.BinaryType())]),
                     "ProcessingTimeTimeout" if pt_mode else "EventTimeTimeout",
                     NEVER_BEHIND_MS if late_data else horizon_ms(plan, per_ms(timestamp)),
                     how, T.StructType(lifted_fields) if lifted_fields else None,
                     tuple(acc.column for _, acc in aggregations))


def _check_python_types(strategy: Strategy, types: dict[str, Any]) -> None:
    """Refuse a key or value column of a type pyspark hands no pandas function (a year-month or calendar interval,
    a variant), naming it: it failed in the first task, naming the wire column ``_v0`` or none."""
    from pyspark.sql import types as T

    unshipped = tuple(getattr(T, t) for t in ("YearMonthIntervalType", "CalendarIntervalType", "VariantType") if hasattr(T, t))
    values = [acc.column for _, acc in strategy.aggregations if acc.column is not None]
    for name, role in [(k, "key") for k in strategy.keys or ()] + [(c, "value") for c in values]:
        if isinstance(types[name], unshipped):
            raise WindowingConfigError(
                f"{role} column {name!r} has Spark type {types[name].simpleString()}, which pyspark hands no pandas "
                "function: cast it first (a year-month interval to its months, e.g. with months_between or as an int; "
                "a variant with to_json)")


def _shape_of(vtype: Any) -> str | None:
    """The `output_values.SHAPES` entry of a Spark type, if it has one."""
    from pyspark.sql import types as T

    shapes = {T.DateType: "date", T.TimestampType: "timestamp", T.TimestampNTZType: "timestamp_ntz",
              T.DayTimeIntervalType: "interval"}
    return next((shape for kind, shape in shapes.items() if isinstance(vtype, kind)), None)


def _compares_values(acc: Any) -> bool:
    """Whether a built-in compares or hashes its values (an extreme or a collection), as it declares or, for a
    subclass of one that folds otherwise (which drops what it declares) or one typed with `spark_typed`, by its
    class: they compare strings byte by byte as much."""
    inner = acc.inner if isinstance(acc, SparkTyped) else acc
    return inner.output_kind in ("extreme", "collection") or isinstance(inner, (Min, Max, TopN, ToList, ToSet, Distinct))


def _check_collations(strategy: Strategy, types: dict[str, Any]) -> None:
    """Refuse a key, or a value of a built-in extreme or collection, in a string of a collation other than Spark's
    default (pyspark 4's ``string collate UTF8_LCASE``): the workers compare strings byte by byte, so 'a' and 'A'
    would be two keys where Spark's own ``groupBy`` makes one."""
    compared = [acc.column for _, acc in strategy.aggregations if _compares_values(acc)]
    for name, role in [(k, "key") for k in strategy.keys or ()] + [(c, "value") for c in compared if c is not None]:
        collation = getattr(types[name], "collation", "UTF8_BINARY")
        if collation != "UTF8_BINARY":
            raise WindowingConfigError(
                f"{role} column {name!r} has Spark type {types[name].simpleString()}; the runner compares strings byte by "
                f"byte, not by collation {collation}: cast it to plain strings first, e.g. lower({name!r}) for "
                "UTF8_LCASE, or col(...).cast('string collate UTF8_BINARY')")


def shipped_columns(keys: list[str], input_columns: Any) -> list[tuple[str, str]]:
    """(wire name, input column) of the key columns and of each aggregation's input column (``None``: it reads none)."""
    return [(WIRE.key(i), k) for i, k in enumerate(keys)] + [
        (WIRE.value(i), name) for i, name in enumerate(input_columns) if name is not None]


def exact_instants(shipped: list[tuple[str, str]], aggregations: Any, types: dict[str, Any]) -> tuple[str, ...]:
    """Of the ``shipped`` columns (`shipped_columns`), those the workers hold as UTC wall times, exact: timestamp
    keys, and built-ins' timestamp values (a Min, a ToList, ...), which they only compare and give back. In the
    session zone's wall times, which pyspark hands over, two instants of the hour the clocks go back were one key,
    one Min. A Fold's, Reduce's or own accumulation's timestamps stay the session zone's wall times: its code reads
    them so, and its accumulators in existing checkpoints hold them so."""
    from pyspark.sql import types as T

    own = {WIRE.value(i) for i, (_, acc) in enumerate(aggregations) if acc.output_kind is None}
    return tuple(alias for alias, name in shipped if alias not in own and isinstance(types[name], T.TimestampType))


def _described_state(keys: list[str], values: list[str], types: dict[str, Any], session_zone: str,
                     exact: bool) -> tuple[tuple[str, str], ...]:
    """What the state rows say beyond the engine's description (`pipelines.pipeline_of`): the key columns with their
    Spark types (another key column of one type was taken silently, its old keys firing under the new name), the
    session time zone where the window table holds timestamps, which it may keep as wall times there (a restart in
    another zone read them shifted by the zones' difference), and, where it holds ``exact`` ones
    (`exact_instants`), that it holds them in UTC (`pipelines.EXACT_INSTANTS`)."""
    from pyspark.sql import types as T

    def holds_instants(kind: Any) -> bool:
        if isinstance(kind, T.ArrayType):
            return holds_instants(kind.elementType)
        if isinstance(kind, T.MapType):
            return holds_instants(kind.keyType) or holds_instants(kind.valueType)
        if isinstance(kind, T.StructType):
            return any(holds_instants(f.dataType) for f in kind.fields)
        return isinstance(kind, T.TimestampType)

    described = [("key columns", ", ".join(f"{k} {types[k].simpleString()}" for k in keys) or "none (not keyed)")]
    if any(holds_instants(types[c]) for c in [*keys, *values]):
        described.append(("session time zone", session_zone))
    if exact:
        described.append((EXACT_INSTANTS, "as UTC wall times"))
    return tuple(described)


def switched_layout(other: EngineSpec, spec: EngineSpec, window_state: Any, written_by: str,
                    described: tuple[tuple[str, str], ...] = ()) -> SwitchedLayout | None:
    """How a table written by ``other``'s plan (by ``written_by``) reads as ``spec``'s; None where both write the
    same (only a lifted ``Count`` differs: `combine.lifted_aggregations`)."""
    written, now = pipeline_of(other, window_state, described), pipeline_of(spec, window_state, described)
    if written == now:
        return None
    columns = list(zip(accumulator_columns(other), accumulator_columns(spec), strict=True))
    return SwitchedLayout(written, {old: new for old, new in columns if old != new}, written_by)


def horizon_ms(plan: Plan, per_ms: int) -> int:
    """How far behind an element's time the engine may still accept it (window extent + lateness)."""
    extent = plan.spec.windows.max_extent
    if extent is None:  # the global window: never behind
        return NEVER_BEHIND_MS
    return -(-(int(extent) + plan.spec.allowed_lateness) // per_ms) + 1
