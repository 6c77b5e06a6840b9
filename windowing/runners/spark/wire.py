"""The wire schema: the columns the Spark runner ships from the input to its Python workers, and the Spark
schemas of the rows that carry them.

The query projects the input into these columns (`query`), the pre-shuffle combining folds and
packs them (`combine`), the worker reads them back into the engine's element frame (`worker`).
Names are those of the engine's element frame (`windowing.columns`) plus the runner's own:

==================  ==============================================================================
``_b``              the group label of the row's key bucket (`buckets.Bucketing`), int
``_k<i>``           key column ``i`` (``_k0`` a constant 0 when not keyed)
``_t``              the event time, int64 (microseconds for timestamps)
``_v<i>``           the input column of aggregation ``i`` (absent where it reads none)
``_e``              the whole input row as JSON, for ``run()``'s late data
``_tmax``           packed or lifted rows: the latest event time folded in (the watermark's input)
``_wm``             streams: the column Spark's watermark is on, shifted forward (`query`); null in the
                    checked bucket's copy of a row (`combine.with_checked_bucket_copy`)
``<name>_null``     the null flag of an integer key or value column that may hold nulls
==================  ==============================================================================

Integer columns that may hold a null reach pandas as the value (0 where null) and its null flag:
pyspark hands an integer column holding a null to pandas as float64, which rounds beyond 2**53.
Where a ``mapInArrow`` runs before the shuffle they are shipped as they are and it makes the
flags (`combine.with_null_flags`); otherwise Spark ships both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ... import columns


@dataclass(frozen=True)
class WireSchema:
    """The shipped column names; `WIRE` is the one instance every module asks."""

    bucket: str = "_b"
    time: str = columns.TIME
    element: str = "_e"
    latest: str = "_tmax"
    watermark: str = "_wm"
    null_suffix: str = "_null"

    @staticmethod
    def key(i: int) -> str:
        return columns.key(i)

    @staticmethod
    def keys(n: int) -> list[str]:
        return columns.keys(n)

    @staticmethod
    def value(i: int) -> str:
        return columns.value(i)

    @staticmethod
    def partial_count(i: int) -> str:
        """The input column a lifted ``Count`` (aggregation ``i``) becomes a ``Sum`` of: it arrives as ``_v<i>``."""
        return f"_count{i}"

    def null_flag(self, name: str) -> str:
        """The column that is true where integer column ``name`` is null (and ``name`` holds 0)."""
        return f"{name}{self.null_suffix}"

    def is_null_flag(self, name: str) -> bool:
        return name.endswith(self.null_suffix)


WIRE = WireSchema()


def packed_schema(schema: Any) -> Any:
    """The Spark schema of `combine.pack`'s rows: ``_b``, every other column as an array, ``_tmax``."""
    from pyspark.sql import types as T

    arrays = [bucket_field() if f.name == WIRE.bucket else T.StructField(f.name, T.ArrayType(f.dataType))
              for f in schema if f.name != WIRE.latest]
    return T.StructType(arrays + [T.StructField(WIRE.latest, T.LongType())])


def nullable_watermark(schema: Any) -> Any:
    """``schema`` with ``_wm`` nullable (`combine.with_checked_bucket_copy`), its metadata kept: by it the stateful
    step finds the watermark's column."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, f.dataType, True, f.metadata) if f.name == WIRE.watermark else f
                         for f in schema.fields])


def with_bucket_field(schema: Any) -> Any:
    """``schema`` with ``_b`` first, as `combine.with_buckets` puts it."""
    from pyspark.sql import types as T

    return T.StructType([bucket_field(), *schema.fields])


def bucket_field() -> Any:
    """``_b`` as the stateful step's key: an int that is never null, in every shape of the query. pyspark 3.5 takes
    a restart's key as the checkpoint's only where it is no more nullable: a query of one bucket written unpacked
    (a literal, not null) failed to restart packed (nullable) with ``StateSchemaNotCompatible``."""
    from pyspark.sql import types as T

    return T.StructField(WIRE.bucket, T.IntegerType(), nullable=False)


def flagged_schema(schema: Any, nullable: tuple[str, ...]) -> Any:
    """The Spark schema of `combine.with_null_flags`'s batches from that of the shipped ones: each of the
    columns ``nullable`` followed by its null flag."""
    from pyspark.sql import types as T

    fields = []
    for field in schema.fields:
        fields.append(field)
        if field.name in nullable:
            fields.append(T.StructField(WIRE.null_flag(field.name), T.BooleanType(), False))
    return T.StructType(fields)


def packed_output_schema(schema: Any) -> Any:
    """The schema of the stateful function's packed output rows (`worker.packed_output`): each column
    an array of its type. None where a column's type might convert otherwise inside an array than
    alone (timestamps, decimals, arrays, ...): those queries' functions return rows."""
    from pyspark.sql import types as T

    plain = (T.LongType, T.IntegerType, T.ShortType, T.ByteType, T.BooleanType, T.StringType, T.DoubleType)
    if not all(isinstance(f.dataType, plain) for f in schema.fields):
        return None
    return T.StructType([T.StructField(f.name, T.ArrayType(f.dataType)) for f in schema.fields])
