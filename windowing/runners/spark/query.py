"""The query: the input projected into the wire columns (`wire`), combined before the shuffle
(`combine`), grouped by key bucket into ``applyInPandas`` (batch) or ``applyInPandasWithState``
(streams) running `worker.BucketStep`, and the output turned into `results.SparkRun`."""

from __future__ import annotations

import datetime as dt
import inspect
import re
from typing import Any, Iterator

import pandas as pd

from triggers import Default

from ...errors import WindowingConfigError
from ...plan import LATE_DATA_COLUMNS, Plan
from ...state_codec import COMPRESSIONS, checked_compression
from ...strategy import GlobalWindowing, Strategy
from ...timeaxis import DEKKER_SPLITTER, MAX_MICROS, MAX_TIME, MICROS_PER_UNIT, MIN_MICROS, MIN_TIME, NUMERIC_RANGE
from .buckets import NUMBERS, Bucketing, bucketing_of, setting
from .combine import COMBINE_CONF, lift_and_pack, pack, with_buckets, with_checked_bucket_copy
from .instants import warn_where_clocks_go_back, zone_rules
from .output_types import integral
from .output_values import NS_PER_US
from .planning import NEVER_BEHIND_MS, plan_spark
from .results import JSON_OPTIONS, spark_run
from .wire import WIRE, flagged_schema, nullable_watermark, packed_output_schema, packed_schema, with_bucket_field
from .worker import ELEMENT, KIND, REASON, BucketStep, packed_output, per_ms
from .worker_python import check_worker_python, on_workers

#: Whether Spark's Python workers acknowledge at once what the JVM sends them over TCP (`storage.worker_socket`).
QUICK_ACK_CONF = "windowing.spark.quickAck"
#: How each bucket's state value is compressed (`windowing.state_codec.COMPRESSIONS`), like Spark's own
#: ``spark.sql.streaming.stateStore.compression.codec`` for its files; a restart reads any of them.
STATE_COMPRESSION_CONF = "windowing.spark.stateCompression"
# The column metadata by which Spark marks the column withWatermark is on (EventTimeWatermark.delayKey).
WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"


def run_spark(strategy: Strategy, source: Any, second: Any = None, late_data: bool = True) -> Any:
    """The query's `SparkRun`; ``late_data`` False (``aggregate()``): the panes DataFrame only, lifted where exact."""
    from pyspark.sql import functions as F

    if second is not None:
        raise WindowingConfigError(
            f"with_second_stream(<{type(second).__name__}>) on Spark: the Spark runner runs one stream and would "
            "ignore the second; with_second_stream() works with bounded pandas DataFrames for now")

    check_worker_python(source.sparkSession)
    keys = list(strategy.keys or ())
    combine = _switch(source.sparkSession, COMBINE_CONF, "pre-aggregation before the shuffle")
    quick = _switch(source.sparkSession, QUICK_ACK_CONF, "Python workers acknowledge what Spark's JVM sends them at once")
    compression = checked_compression(str(setting(source.sparkSession.conf, STATE_COMPRESSION_CONF, COMPRESSIONS[0])),
                                      STATE_COMPRESSION_CONF)
    case_sensitive = _case_sensitive(source.sparkSession)
    if late_data:
        _check_late_data_input(strategy, source.schema, case_sensitive)
    sp = plan_spark(strategy, source.schema, bucketing_of(source, bool(keys)), combine, late_data, compression,
                    str(source.sparkSession.conf.get("spark.sql.session.timeZone")))
    if not case_sensitive:
        _check_names_apart_but_for_case(sp.out_schema.names)
    _check_zone_pandas_reads(strategy, source.schema, sp.out_schema,
                             str(source.sparkSession.conf.get("spark.sql.session.timeZone")), sp.held_exactly(keys))
    adapter, time = sp.adapter, str(strategy.time)  # a column's name: plan_spark refuses a function
    watermarked = _input_watermark(source) if source.isStreaming else None
    if source.isStreaming:
        _check_watermark(strategy, adapter.plan, watermarked, adapter.timestamp)
        _check_stream_timestamps(sp.out_schema, str(source.sparkSession.conf.get("spark.sql.session.timeZone")),
                                 source.sparkSession.version)

    # A mapInArrow before the shuffle gets integer columns with their nulls and makes the flags itself
    # (`combine.with_null_flags`): Spark then writes fewer columns into Arrow.
    flags_in_python = sp.lifting is not None or adapter.packed

    def shipped(name: str, alias: str) -> list[Any]:
        """The column under ``alias`` (a timestamp of ``adapter.instants`` as epoch microseconds); a nullable
        integer one, unless ``flags_in_python``, as its value, 0 where null, and a null flag."""
        value = F.unix_micros(_col(name)) if alias in adapter.instants else _col(name)
        if alias not in adapter.nullable or flags_in_python:
            return [value.alias(alias)]
        zero = F.lit(0).cast("long" if alias in adapter.instants else source.schema[name].dataType)
        return [F.coalesce(value, zero).alias(alias), _col(name).isNull().alias(WIRE.null_flag(alias))]

    # Where rows cross into Python before the shuffle anyway, an integer key's bucket is computed there
    # (`combine.with_buckets`): one column fewer for the JVM to write into Arrow (docs/spark.md, "Packing").
    buckets_in_python = flags_in_python and (adapter.bucketing.count == 1
                                             or all(integral(source.schema[k].dataType) for k in keys))
    projected = [] if buckets_in_python else [_bucket(keys, adapter.bucketing, source.schema).alias(WIRE.bucket)]
    projected += [c for i, k in enumerate(keys) for c in shipped(k, WIRE.key(i))] or [F.lit(0).cast("long").alias(WIRE.key(0))]
    projected.append(_event_time(time, adapter.timestamp, source.isStreaming, strategy.time_unit,
                                 source.schema[time].dataType).alias(WIRE.time))
    projected += [c for i, name in enumerate(sp.input_columns) if name is not None for c in shipped(name, WIRE.value(i))]
    if late_data:
        projected.append(F.to_json(F.struct(*[_col(f.name) for f in source.schema.fields]), JSON_OPTIONS).alias(WIRE.element))

    frame = source.select(*projected)
    latest, n_keys, bucketing = WIRE.time, len(keys), adapter.bucketing

    def bucketed(batches: Iterator[Any]) -> Iterator[Any]:
        return with_buckets(batches, n_keys, bucketing) if buckets_in_python else batches

    if sp.lifting is not None:
        from pyspark.sql.pandas.types import to_arrow_schema

        # pyspark 4 names a timestamp's Arrow type only with a time zone: UTC, as the instants are.
        timezone: dict[str, Any] = {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_schema).parameters else {}
        how, lifted = sp.lifting, to_arrow_schema(sp.lifted_schema, **timezone)

        streaming = source.isStreaming

        def combine_rows(batches: Iterator[Any]) -> Iterator[Any]:
            return lift_and_pack(batches, how, lifted, checked=streaming, bucketing=bucketing if buckets_in_python else None)

        frame, latest = frame.mapInArrow(on_workers(combine_rows, quick), packed_schema(sp.lifted_schema)), WIRE.latest
    elif adapter.packed:
        streaming, nullable = source.isStreaming, adapter.nullable

        def pack_rows(batches: Iterator[Any]) -> Iterator[Any]:
            return pack(bucketed(batches), checked=streaming, nullable=nullable)

        shipped_schema = with_bucket_field(frame.schema) if buckets_in_python else frame.schema
        rows_schema = packed_schema(flagged_schema(shipped_schema, nullable))
        frame, latest = frame.mapInArrow(on_workers(pack_rows, quick), rows_schema), WIRE.latest

    if not source.isStreaming:
        def run_batch(frame: pd.DataFrame) -> pd.DataFrame:  # Spark counts a bound method's `self` as an argument
            return adapter.run_batch(frame)

        out = frame.groupBy(WIRE.bucket).applyInPandas(on_workers(run_batch, quick), sp.out_schema)
        return spark_run(_finish(out, adapter), late_data, source.schema)

    # The stateful operator drops rows whose watermarked column is at or behind the watermark.
    # Beam semantics accept them until their window's end plus lateness passes, so the watermark
    # is put on a column shifted forward by that horizon, with the delay grown by the same amount:
    # the watermark is unchanged, and Spark drops only rows the engine would drop anyway.
    if adapter.timestamp:
        shifted = F.expr(f"timestamp_micros(`{latest}` + {sp.horizon_ms * 1000})")
    else:  # one unit of a numeric time column is a millisecond of the watermark's clock
        shifted = F.expr(f"timestamp_millis(`{latest}` + {sp.horizon_ms})")
    if watermarked is None:
        assert adapter.plan.watermark_delay is not None  # _check_watermark: one of the two is set
        delay_ms = -(-adapter.plan.watermark_delay // per_ms(adapter.timestamp))
        frame = frame.withColumn(WIRE.watermark, shifted).withWatermark(WIRE.watermark, f"{delay_ms + sp.horizon_ms} milliseconds")
    else:
        # Spark refuses a second withWatermark: the input's keeps setting the watermark, and the shifted
        # column gets only the marker withWatermark would put on it, by which the stateful operator
        # finds the column it drops rows by. In a select, not withColumn: over Spark Connect withColumn
        # aliases the column again, without its metadata.
        delay_ms = source.schema[watermarked].metadata[WATERMARK_DELAY_KEY]
        frame = frame.select("*", shifted.alias(WIRE.watermark, metadata={WATERMARK_DELAY_KEY: delay_ms + sp.horizon_ms}))
    if not adapter.packed and sp.lifting is None:  # a copy of a row calls the checked bucket, as packed rows do
        frame = frame.mapInArrow(on_workers(with_checked_bucket_copy, quick), nullable_watermark(frame.schema))

    output_schema = packed_output_schema(sp.out_schema)
    if output_schema is None:
        def run_stream(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
            return adapter.run_stream(key, frames, state)

        out = frame.groupBy(WIRE.bucket).applyInPandasWithState(on_workers(run_stream, quick), sp.out_schema, sp.state_schema,
                                                                  "append", sp.timeout)
    else:
        def run_stream_packed(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
            return packed_output(adapter.run_stream(key, frames, state))

        packed = frame.groupBy(WIRE.bucket).applyInPandasWithState(on_workers(run_stream_packed, quick), output_schema,
                                                                     sp.state_schema, "append", sp.timeout)
        out = packed.select(F.inline(F.arrays_zip(*[_col(name) for name in sp.out_schema.names]))).toDF(*sp.out_schema.names)
    return spark_run(_finish(out, adapter), late_data, source.schema)


def _switch(spark: Any, name: str, what: str) -> bool:
    """Setting ``name`` (default on), 'true' or 'false'; anything else refused naming it."""
    given = setting(spark.conf, name, "true")
    value = str(given).lower()
    if value not in ("true", "false"):
        raise WindowingConfigError(f"{name}={given!r} must be 'true' or 'false' ({what})")
    return value == "true"


def _input_watermark(source: Any) -> str | None:
    """The column the input's own ``withWatermark`` is on, if any."""
    for f in source.schema.fields:
        if WATERMARK_DELAY_KEY in (f.metadata or {}):
            return f.name
    return None


def _check_stream_timestamps(out_schema: Any, zone: str, spark_version: str) -> None:
    """Refuse what pyspark 4 would shift without a word: in a session time zone with an offset from UTC, its
    ``applyInPandasWithState`` writes naive wall times back as UTC. Timestamp keys and built-ins' values leave the
    workers as microseconds (`instants`), lists of timestamps and a timestamp-typed Fold's zone-aware
    (`instants.zone_aware`), which pyspark takes as they are; only timestamps nested otherwise (a map, a struct, a list
    of lists: a type stated with `spark_typed`) still leave naive and are refused (docs/spark.md, "Output types").
    ``spark_version``: the session's, whose pyspark the workers run (over Spark Connect the client's pyspark may be of
    another version)."""
    from pyspark.sql import types as T

    def handed_over_aware(kind: Any) -> bool:
        return isinstance(kind, T.TimestampType) or (isinstance(kind, T.ArrayType)
                                                     and isinstance(kind.elementType, T.TimestampType))

    nested = [f for f in out_schema.fields if _holds_timestamps(f.dataType) and not handed_over_aware(f.dataType)]
    if not nested or int(spark_version.split(".")[0]) < 4 or _utc_like(zone):
        return
    raise WindowingConfigError(
        f"output column {nested[0].name!r} of type {nested[0].dataType.simpleString()} holds timestamps, which a stream "
        f"on Spark {spark_version} would give back shifted by the offset of spark.sql.session.timeZone={zone!r}: set "
        "spark.sql.session.timeZone to 'UTC' for this query (instants are unchanged; only how strings and naive "
        "datetimes are read and shown changes), or state the column as a timestamp or an array of them")


def _check_zone_pandas_reads(strategy: Strategy, schema: Any, out_schema: Any, zone: str,
                             exact: tuple[set[str], set[str]]) -> None:
    """Refuse a session zone ID that Spark takes and pandas cannot (``GMT+05:30``, ``UTC-03``, ``IST``, ``Z``) where
    a timestamp key or value reaches the workers, or leaves them as pyspark converts it (a type stated with
    ``spark_typed``): they may hold such values as the zone's wall times, and the query failed in its first task with
    ``ZoneInfoNotFoundError`` or pyspark's ``Cannot locate or parse timezone``, naming no column (the time column
    alone leaves as microseconds and needs no zone). Warn where the zone sets its clocks back
    (`instants.warn_where_clocks_go_back`), naming the columns but the ``exact`` inputs and outputs
    (`planning.SparkPlan.held_exactly`)."""
    read = [(name, schema[name].dataType) for name in [*(strategy.keys or ()), *(acc.column for _, acc in strategy.aggregations)]
            if name is not None and _holds_timestamps(schema[name].dataType)]
    written = [(f.name, f.dataType) for f in out_schema.fields if _holds_timestamps(f.dataType)]
    wall_times = [n for n, _ in read if n not in exact[0]] + [n for n, _ in written if n not in exact[1]]
    read += written
    if not read:
        return
    try:
        for rules in (zone, zone_rules(zone)):  # pyspark's (the zone as pandas names it) and the workers' own
            pd.Timestamp(0, tz="UTC").tz_convert(rules)
    except Exception as error:  # noqa: BLE001 - pandas' and zoneinfo's errors differ by zone and version
        name, kind = read[0]
        role = "key" if name in (strategy.keys or ()) else "input" if name in schema.names else "output"
        raise WindowingConfigError(
            f"spark.sql.session.timeZone={zone!r} is a zone ID pandas cannot read ({type(error).__name__}), and the "
            f"Python workers may hold the {role} column {name!r} ({kind.simpleString()}) as wall times in it: set the "
            "session's zone to a region ID such as 'Asia/Kolkata' or an offset such as '+05:30' (instants are "
            "unchanged; only how strings and naive datetimes are read and shown changes)") from None
    warn_where_clocks_go_back(list(dict.fromkeys(wall_times)), zone)


def _holds_timestamps(kind: Any) -> bool:
    """Whether a Spark type is or holds a ``timestamp`` (not ``timestamp_ntz``), in arrays, maps and structs."""
    from pyspark.sql import types as T

    if isinstance(kind, T.TimestampType):
        return True
    if isinstance(kind, T.ArrayType):
        return _holds_timestamps(kind.elementType)
    if isinstance(kind, T.MapType):
        return _holds_timestamps(kind.keyType) or _holds_timestamps(kind.valueType)
    return isinstance(kind, T.StructType) and any(_holds_timestamps(f.dataType) for f in kind.fields)


def _utc_like(zone: str) -> bool:
    """Whether ``zone`` is UTC under another name (``Etc/UTC``, ``GMT``, ``+00:00``)."""
    import zoneinfo

    if re.fullmatch(r"(?:UTC|GMT|UT)?[+-]?0?0(?::?00)?|Z", zone.strip(), re.IGNORECASE):
        return True
    try:
        rules = zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    probes = [dt.datetime(year, month, 1, tzinfo=dt.timezone.utc) for year in (1900, 1970, 2024, 2100) for month in (1, 7)]
    return all(not probe.astimezone(rules).utcoffset() for probe in probes)


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
            f"watermark(delay={strategy.watermark_delay and strategy.watermark_delay.given!r}) on an input that already has "
            f"withWatermark on {watermarked!r}: "
            "Spark refuses to redefine a watermark; keep one of the two")
    if isinstance(strategy.windowing, GlobalWindowing) and type(strategy.trigger) is Default:
        # Beam's GroupByKey refuses it too: the global window fires when the watermark reaches the end of time, which
        # a stream's never does, so no pane came and the state grew for the query's life.
        raise WindowingConfigError(
            "a streaming .global_window() with the default trigger never fires: the watermark of a stream never "
            "reaches the end of time, so its state would grow for the query's life (Beam refuses it too). Give it a "
            "trigger that fires, e.g. .trigger(Repeatedly(AfterCount(100))) or "
            ".trigger(Repeatedly(AfterProcessingTime('1 minute')))")


def _case_sensitive(spark: Any) -> bool:
    return str(setting(spark.conf, "spark.sql.caseSensitive", "false")).lower() == "true"


def _check_names_apart_but_for_case(names: list[str]) -> None:
    """Refuse two output columns equal but for case (a key ``Timing`` beside ``timing``, ``aggregate(Total=...,
    total=...)``): Spark takes them for one column by default, so the panes were made but a select or a filter of
    either failed with ``AMBIGUOUS_REFERENCE``. Exactly equal ones are refused when the pipeline is built."""
    seen: dict[str, str] = {}
    for name in names:
        first = seen.setdefault(name.lower(), name)
        if first != name:
            raise WindowingConfigError(
                f"the output columns {first!r} and {name!r} are equal but for case, and Spark takes them for one column "
                "(spark.sql.caseSensitive is false): a select or filter of either would fail; rename the key column "
                "(windowed(key=...)) or the aggregation (aggregate(name=...))")


def _check_late_data_input(strategy: Strategy, schema: Any, case_sensitive: bool) -> None:
    """What ``run()``'s late data cannot carry, refused before the query starts (it failed at the first micro-batch
    that wrote late data): a map whose keys are not strings (JSON, which ``element`` is, has string keys only; Spark's
    ``from_json`` refuses such a map), and, where Spark takes names equal but for case for one (its default), a name
    equal but for case to a column ``run()`` adds (exactly equal ones are refused at planning)."""
    from pyspark.sql import types as T

    def non_string_map_key(data_type: Any) -> Any:
        if isinstance(data_type, T.MapType):
            if not isinstance(data_type.keyType, T.StringType):
                return data_type
            return non_string_map_key(data_type.keyType) or non_string_map_key(data_type.valueType)
        if isinstance(data_type, T.ArrayType):
            return non_string_map_key(data_type.elementType)
        if isinstance(data_type, T.StructType):
            return next((found for f in data_type.fields if (found := non_string_map_key(f.dataType)) is not None), None)
        return None

    for field in schema.fields:
        found = non_string_map_key(field.dataType)
        if found is not None:
            raise WindowingConfigError(
                f"run(): the input's column {field.name!r} holds a {found.simpleString()}, a map whose keys are not "
                "strings; late data carries each dropped row as JSON, whose maps have string keys only: cast the "
                "map's keys to strings first (or use aggregate(), which returns panes only)")
    if case_sensitive:
        return
    # late_data holds the input's columns beside LATE_DATA_COLUMNS; output the keys and aggregations beside KIND,
    # REASON and ELEMENT (an input column neither key nor aggregated only inside ELEMENT: any name of it runs).
    late, added = ({name.lower(): name for name in columns} for columns in (LATE_DATA_COLUMNS, (KIND, REASON, ELEMENT)))
    outputs = [*(strategy.keys or ()), *(name for name, _ in strategy.aggregations)]
    named = [(f.name, late) for f in schema.fields] + [(name, added) for name in outputs]
    clash, beside = next(((name, near[name.lower()]) for name, near in named
                          if name.lower() in near and name != near[name.lower()]), (None, None))
    if clash is not None:
        raise WindowingConfigError(
            f"run(): the name {clash!r} equals the column {beside!r} that run() adds but for case, and "
            "Spark takes them for one column (spark.sql.caseSensitive is false); rename it (or use aggregate(), "
            "which returns panes only)")


def _bucket(keys: list[str], bucketing: Bucketing, schema: Any) -> Any:
    """The group label of a row's bucket (`Bucketing`), an int column. A float key's NaN is hashed as its null:
    the engine takes the two for one missing key, as pandas does, and hashed apart they could land in two buckets,
    that key's panes then coming twice (or not, by the bucket count)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not keys or bucketing.count == 1:
        return F.lit(int(bucketing.labels()[0]))
    hashed = [F.nanvl(_col(k), F.lit(None).cast(schema[k].dataType))
              if isinstance(schema[k].dataType, (T.FloatType, T.DoubleType)) else _col(k) for k in keys]
    number = F.pmod(F.xxhash64(*hashed), F.lit(bucketing.count)).cast("int")
    if bucketing.placement != NUMBERS:  # one SQL literal, not a Column per label (benchmarks/query_definition.py)
        labels = F.expr(f"array({', '.join(map(str, bucketing.labels().tolist()))})")
        number = F.element_at(labels, number + 1)
    return F.coalesce(number, F.lit(0))  # never null, but Spark cannot tell: see `wire.bucket_field`


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
    taken as milliseconds, overflow the timestamp of Spark's watermark, and a batch's numeric time at
    either end of 64 bits (its window would not fit the axis). With ``epoch_unit``
    (``windowed(time_unit=...)``) the numbers become microseconds as `TimeAxis` makes them on pandas.
    """
    from pyspark.sql import functions as F

    column = _col(time)
    checked = F.when(column.isNull(), F.raise_error(F.lit(
        f"time column {time!r} has a missing value (null); every element needs an event time: "
        "filter such rows out before windowed()")))
    if epoch_unit is not None:
        checked, value = _epoch_micros(checked, column, time, epoch_unit, not integral(time_type))
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
    else:  # `TimeAxis.to_internal`'s range: the last instant of 64 bits is the end of time
        checked = checked.when((value < MIN_TIME) | (value >= MAX_TIME), F.raise_error(F.concat(
            F.lit(f"time column {time!r} holds "), column.cast("string"),
            F.lit(f", outside the engine's range ({NUMERIC_RANGE}): "
                  "filter such rows out before windowed()"))))
    if streaming:
        # Spark starts the watermark at 0 and never sets it lower (0 reads as "no watermark yet"): a stream of such
        # times fired no window and reported no late element, without a word, and times that crossed 0 got wrong
        # timings. A bounded DataFrame has no watermark, so no such limit.
        checked = checked.when(value < 0, F.raise_error(F.concat(
            F.lit(f"time column {time!r} holds "), column.cast("string"),
            F.lit(", before 1970-01-01 (below 0 for a numeric time): Spark's watermark starts at 0 and never goes "
                  "below it, so the windows of a stream's earlier times would never fire and their late elements "
                  "would go unreported; shift the times past 0 (add a constant), or run a bounded DataFrame"))))
    return checked.otherwise(value)


def _epoch_micros(checked: Any, column: Any, time: str, unit: str, floating: bool) -> tuple[Any, Any]:
    """``TimeAxis._epoch_micros`` on the JVM: epoch instants in ``unit`` as bigint microseconds,
    rounded to the nearest (half up), with the same double arithmetic for floats (`timeaxis._nearest_micros`);
    ``checked`` (a ``when`` chain) gets the checks that must come before the arithmetic."""
    from pyspark.sql import functions as F

    def outside(what: str) -> Any:
        return F.raise_error(F.concat(F.lit(f"time column {time!r} holds "), column.cast("string"), F.lit(
            f", {what} in windowed(time_unit={unit!r}): filter such rows out before windowed()")))

    if floating:
        number = column.cast("double")
        scaled = number / F.lit(1000.0) if unit == "ns" else number * F.lit(float(MICROS_PER_UNIT[unit]))
        beyond = F.abs(scaled) >= F.lit(2.0**62)
        if unit == "ns":
            beyond = beyond | (F.abs(number) >= F.lit(2.0**63))
        checked = checked.when(F.isnan(number) | beyond, outside("not finite or beyond the time axis"))
        return checked, _nearest_micros(number, time, unit)
    number = column.cast("long")
    if unit == "ns":
        # what rounds to the axis's first or last microsecond is on it, as on pandas
        checked = checked.when((number < MIN_MICROS * 1000 - 500) | (number > MAX_MICROS * 1000 + 499),
                               outside("outside the time axis"))
        return checked, _nanos_to_micros(f"CAST({_quoted(time)} AS BIGINT)")
    factor = MICROS_PER_UNIT[unit]
    low, high = -(-MIN_MICROS // factor), MAX_MICROS // factor
    checked = checked.when((number < low) | (number > high), outside("outside the time axis"))
    return checked, number * F.lit(factor)


def _nearest_micros(number: Any, time: str, unit: str) -> Any:
    """`timeaxis._nearest_micros` on the JVM, step by step in the same double arithmetic (Java's is IEEE's, and
    Catalyst reorders no double arithmetic): a float rounded as the number it holds."""
    from pyspark.sql import functions as F

    if unit == "ns":  # the whole nanoseconds decide
        return _nanos_to_micros(f"FLOOR(CAST({_quoted(time)} AS DOUBLE))")
    factor = F.lit(float(MICROS_PER_UNIT[unit]))
    whole = number.cast("long")  # toward zero, as np.trunc
    part = number - whole.cast("double")
    product = part * factor
    split = F.lit(DEKKER_SPLITTER) * part
    high = split - (split - part)
    error = (high * factor - product) + (part - high) * factor  # Dekker's: the product's rounding error, exactly
    floor = F.floor(product)
    above = product - floor.cast("double")
    up = (above > F.lit(0.5)) | ((above == F.lit(0.5)) & (error >= F.lit(0.0)))
    return whole * F.lit(MICROS_PER_UNIT[unit]) + floor + up.cast("long")


def _nanos_to_micros(nanos: str) -> Any:
    """Whole nanoseconds (a bigint SQL expression) as the nearest microseconds, half up:
    floor((t + 500) / 1000), exact and without overflow (``div`` truncates toward zero, pmod is the floor
    division's remainder; ``t - pmod(t, 1000)`` overflowed at the axis's first microsecond)."""
    from pyspark.sql import functions as F

    return F.expr(f"{nanos} div 1000 - CAST({nanos} < 0 AND pmod({nanos}, 1000) != 0 AS BIGINT)"
                  f" + CAST(pmod({nanos}, 1000) >= 500 AS BIGINT)")


def _finish(panes: Any, adapter: BucketStep) -> Any:
    """The workers' epoch microseconds as timestamps: the window bounds of a timestamp axis, and the columns that
    leave the workers as instants (`OutputColumn.instant`)."""
    from pyspark.sql import functions as F

    micros = [c.name for c in adapter.columns if c.instant] + (["window_start", "window_end"] if adapter.timestamp else [])
    if not micros:
        return panes
    return panes.select(*[F.timestamp_micros(_col(c)).alias(c) if c in micros else _col(c) for c in panes.columns])
