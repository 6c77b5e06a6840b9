"""The Spark types of the output columns: derived from an accumulation and its input column's
type (the mapping in docs/spark.md), sampled by running the accumulation once, or stated by the
user with `spark_typed`. pyspark is imported inside the functions (the driver calls them)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from accumulations import Accumulation
from accumulations.base import Reduction

from ...errors import WindowingConfigError


class SparkTyped(Accumulation[Any, Any, Any]):
    """An accumulation with its Spark output type stated: ``spark_typed(Fold(...), "double")``.

    Everything else is delegated to the wrapped accumulation, so the engine
    runs it unchanged.
    """

    def __init__(self, inner: Accumulation[Any, Any, Any], spark_type: Any):
        if not isinstance(inner, Accumulation):
            raise WindowingConfigError(f"spark_typed(accumulation={inner!r}) is not an Accumulation; give e.g. Fold(...)")
        if not isinstance(spark_type, str) and type(spark_type).__module__.split(".")[0] != "pyspark":
            raise WindowingConfigError(
                f"spark_typed(spark_type={spark_type!r}): give a Spark DataType or a DDL string such as 'double' or 'array<string>'")
        self.inner, self.spark_type, self.column = inner, spark_type, inner.column

    def default_accumulated_value(self) -> Any:
        return self.inner.default_accumulated_value()

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return self.inner.accumulate(accumulated, value)

    def accumulate_all(self, accumulated: Any, values: Iterable[Any]) -> Any:
        return self.inner.accumulate_all(accumulated, values)

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return self.inner.merge(accumulated1, accumulated2)

    def get_output(self, accumulated: Any) -> Any:
        return self.inner.get_output(accumulated)

    def get_retraction(self, output: Any) -> Any:
        return self.inner.get_retraction(output)

    def vector_fields(self) -> Mapping[str, Reduction] | None:
        return self.inner.vector_fields()

    def vector_defaults(self, dtype: np.dtype) -> dict[str, Any]:
        return self.inner.vector_defaults(dtype)

    def vector_lift(self, values: pd.Series) -> dict[str, np.ndarray]:
        return self.inner.vector_lift(values)

    def vector_output(self, fields: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.inner.vector_output(fields)

    def for_input(self, dtype: Any) -> 'Accumulation[Any, Any, Any]':
        return SparkTyped(self.inner.for_input(dtype), self.spark_type)

    def __repr__(self) -> str:
        return f"spark_typed({self.inner!r}, {self.spark_type!r})"


def spark_typed(accumulation: Accumulation[Any, Any, Any], spark_type: Any) -> SparkTyped:
    """State the Spark type of an accumulation's output (``Fold``, ``Reduce``, your own) where running it
    on one sample value does not give it: an output type that depends on the values, a dict, None."""
    return SparkTyped(accumulation, spark_type)


def output_type(name: str, acc: Accumulation[Any, Any, Any], input_type: Any) -> Any:
    """The Spark type of an accumulation's output column (the mapping in docs/spark.md)."""
    from pyspark.sql import types as T

    if isinstance(acc, SparkTyped):
        if not isinstance(acc.spark_type, str):
            return acc.spark_type
        try:
            return _ddl(acc.spark_type)
        except Exception as error:  # noqa: BLE001 - Spark's ParseException, whose class differs by pyspark and Connect
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise WindowingConfigError(
                f"aggregate({name}={acc!r}): spark_typed(spark_type={acc.spark_type!r}) is not a Spark type ({reason}); "
                "give a DDL type such as 'bigint', 'double', 'string' or 'array<double>'") from None
    kind = acc.output_kind  # declared by the accumulation (`Accumulation.output_kind`)
    if kind in ("sum", "mean") and not isinstance(input_type, (T.NumericType, T.BooleanType, T.DayTimeIntervalType)):
        # Not a missing output type: spark_typed would not help.
        raise WindowingConfigError(
            f"aggregate({name}={acc!r}): column {acc.column!r} has Spark type {input_type.simpleString()}; "
            f"{type(acc).__name__} needs numbers: cast the column first, e.g. col({acc.column!r}).cast('double')")
    if kind == "count":
        return T.LongType()
    if isinstance(input_type, T.DayTimeIntervalType) and kind in ("sum", "extreme", "mean"):
        # As Spark's sum, min, max and avg of an interval: the workers hold it as a pandas timedelta.
        return T.DayTimeIntervalType() if kind == "mean" else input_type
    if kind == "mean":
        return T.DoubleType()
    if kind in ("sum", "extreme"):
        if integral(input_type):
            return T.LongType()
        if isinstance(input_type, (T.FloatType, T.DoubleType)):
            return T.DoubleType()
        if isinstance(input_type, T.DecimalType):  # Spark's sum of decimal(p, s) is decimal(p + 10, s), 38 digits at most
            return T.DecimalType(min(38, input_type.precision + 10), input_type.scale) if kind == "sum" else input_type
    if kind == "extreme" and isinstance(input_type, (T.StringType, T.DateType, T.TimestampType, T.BooleanType)):
        return input_type
    if kind == "collection" and input_type is not None:
        return T.ArrayType(input_type)
    sampled = _sampled_output_type(acc, input_type)
    if sampled is not None:
        return sampled
    stated, why = "double", "any Spark DDL type"
    if input_type is not None and acc.output_kind == "extreme":  # a value of it
        stated = input_type.simpleString()
    elif isinstance(input_type, T.DecimalType):  # a sum's scale; a product's or a mean's grows, which it would round
        stated, why = f"decimal(38,{input_type.scale})", ("exact for an output of the input's scale, as a sum's; "
                                                          "one whose scale grows needs more digits, or 'double'")
    raise WindowingConfigError(
        f"aggregate({name}={acc!r}): cannot derive the Spark type of its output"
        + (f" from input type {input_type.simpleString()}" if input_type is not None else "")
        + f"; state it with windowing.spark_typed({acc!r}, {stated!r}) ({why})")


def _sampled_output_type(acc: Accumulation[Any, Any, Any], input_type: Any) -> Any:
    """The Spark type of ``acc``'s output for one value of its input type (1, 1.5, "a", ...), or None.

    For accumulations no table types (``Fold``, ``Reduce``, your own): Spark needs the output schema
    before any row is seen, and their output type is in their code, so the driver runs it once.
    """
    from pyspark.sql import types as T

    samples = [(T.BooleanType, True), (T.FloatType, 1.5), (T.DoubleType, 1.5), (T.StringType, "a"),
               (T.BinaryType, b"a"), (T.TimestampType, pd.Timestamp("2024-01-01")), (T.DateType, dt.date(2024, 1, 1)),
               (T.DayTimeIntervalType, pd.Timedelta(1, "s"))]
    sample = 1 if integral(input_type) else next((v for cls, v in samples if isinstance(input_type, cls)), None)
    if sample is None and input_type is not None:  # no value of that type to run it on: the default would answer
        return None
    try:
        return _python_value_type(acc.get_output(acc.accumulate(acc.default_accumulated_value(), sample)))
    except Exception:  # the code refuses the sample: the type stays to be stated
        return None


def _python_value_type(value: Any) -> Any:
    """The Spark type a Python value crosses to Arrow as, or None where it is not clear."""
    from pyspark.sql import types as T

    scalars = [((bool, np.bool_), T.BooleanType), ((dt.timedelta, np.timedelta64), T.DayTimeIntervalType),  # before
               ((int, np.integer), T.LongType), ((float, np.floating), T.DoubleType),  # np.integer: np.timedelta64 is one
               ((str,), T.StringType), ((bytes,), T.BinaryType), ((dt.datetime, np.datetime64), T.TimestampType),
               ((dt.date,), T.DateType)]
    for classes, spark_type in scalars:
        if isinstance(value, classes):
            return spark_type()
    if isinstance(value, (list, tuple, set, frozenset, np.ndarray)) and len(value):
        element = _python_value_type(next(iter(value)))
        return None if element is None else T.ArrayType(element)
    return None


def nested_kinds(spark_type: Any) -> tuple[str, Any] | None:
    """A map, a struct, or an array of one of them, of arrays or of decimals, as the workers check a pane's values against it
    (`output_values.Kinds`), with its DDL; None for any other type, which `output_values.check_kinds` checks itself."""
    from pyspark.sql import types as T

    array = isinstance(spark_type, T.ArrayType)
    element = spark_type.elementType if array else spark_type
    if not isinstance(element, (T.ArrayType, T.MapType, T.StructType)) and not (array and isinstance(element, T.DecimalType)):
        return None  # an array of decimals too: `check_kinds` rounds only a scalar decimal to its scale
    return spark_type.simpleString(), _kinds(spark_type)


def _kinds(spark_type: Any) -> Any:
    from pyspark.sql import types as T

    if isinstance(spark_type, T.ArrayType):
        return ("array", _kinds(spark_type.elementType))
    if isinstance(spark_type, T.MapType):
        return ("map", _kinds(spark_type.keyType), _kinds(spark_type.valueType))
    if isinstance(spark_type, T.StructType):
        return ("struct", tuple((field.name, _kinds(field.dataType)) for field in spark_type.fields))
    if integral(spark_type):
        return f"int{integer_bits(spark_type)}"
    if isinstance(spark_type, T.DecimalType):
        return f"decimal:{spark_type.precision}:{spark_type.scale}"
    leaves: list[tuple[Any, str]] = [(T.BooleanType, "boolean"), (T.StringType, "string"), (T.BinaryType, "binary"),
              ((T.FloatType, T.DoubleType), "double"), (T.TimestampNTZType, "timestamp_ntz"),
              (T.TimestampType, "timestamp"), (T.DateType, "date"), (T.DayTimeIntervalType, "interval")]
    return next((kind for classes, kind in leaves if isinstance(spark_type, classes)), "any")


def integral(spark_type: Any) -> bool:
    from pyspark.sql import types as T

    return isinstance(spark_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType))


def integer_bits(spark_type: Any) -> int:
    """The width of an integer type, or of an array's integer elements (64 for any other type)."""
    from pyspark.sql import types as T

    element = spark_type.elementType if isinstance(spark_type, T.ArrayType) else spark_type
    widths: dict[type, int] = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32}
    return widths.get(type(element), 64)


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


def numpy_dtype(spark_type: Any) -> Any:
    from pyspark.sql import types as T

    table = [(T.LongType, np.int64), (T.IntegerType, np.int32), (T.ShortType, np.int16), (T.ByteType, np.int8),
             (T.DoubleType, np.float64), (T.FloatType, np.float32), (T.BooleanType, np.bool_)]
    for cls, dtype in table:
        if isinstance(spark_type, cls):
            return np.dtype(dtype)
    if isinstance(spark_type, T.DayTimeIntervalType):  # pyspark hands it to pandas as a timedelta, to the nanosecond
        return np.dtype("timedelta64[ns]")
    return np.dtype(object)
