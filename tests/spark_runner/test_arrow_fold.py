"""The pre-shuffle fold in Arrow (`combine.arrow_folded`) against the pandas fold (`combine.lift`),
the reference: the same folded rows wherever it applies, and None where it might differ."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulations import Count, Max, Min, Sum
from windowing import windowed
from windowing.runners.spark import plan_spark
from windowing.runners.spark.combine import arrow_folded, lift, lift_and_pack

T = pytest.importorskip("pyspark.sql.types")
to_arrow_schema = pytest.importorskip("pyspark.sql.pandas.types").to_arrow_schema

SCHEMA = T.StructType([T.StructField("key", T.LongType()), T.StructField("ts", T.LongType(), False),
                       T.StructField("amount", T.LongType()), T.StructField("small", T.IntegerType(), False),
                       T.StructField("price", T.DoubleType(), False)])
AGGREGATIONS = {"total": Sum("amount"), "n": Count(), "present": Count("amount"), "low": Min("small"),
                "high": Max("amount"), "small_total": Sum("small")}


def _plan(aggregations: dict, sliding: bool = False):
    builder = windowed(None, time="ts", key="key")
    builder = builder.sliding(10, every=5) if sliding else builder.fixed(10)
    plan = plan_spark(builder.strategy(**aggregations), SCHEMA, 4)
    assert plan.lifting is not None
    return plan


def _wire(plan, keys, times, amounts, key_nulls=None, amount_nulls=None, price=None) -> pa.Table:
    """The projected rows as `query.run_spark` ships them to the fold: bucket, key, time, values, null flags."""
    n = len(keys)
    key_nulls = np.zeros(n, dtype=bool) if key_nulls is None else np.asarray(key_nulls)
    amount_nulls = np.zeros(n, dtype=bool) if amount_nulls is None else np.asarray(amount_nulls)
    columns = {"_b": pa.array(np.asarray(keys) % 4, pa.int32()), "_k0": pa.array(np.where(key_nulls, 0, keys), pa.int64()),
               "_k0_null": key_nulls, "_t": pa.array(times, pa.int64())}
    inputs = {"amount": (pa.array(np.where(amount_nulls, 0, amounts), pa.int64()), amount_nulls),
              "small": (pa.array(np.asarray(amounts) % 1000, pa.int32()), None),
              "price": (pa.array(np.asarray(amounts if price is None else price, dtype=np.float64)), None)}
    for i, column in enumerate(plan.input_columns):
        if column is not None:
            values, nulls = inputs[column]
            columns[f"_v{i}"] = values
            if f"_v{i}" in plan.adapter.nullable:
                columns[f"_v{i}_null"] = nulls
    return pa.table(columns)


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*[column.to_pylist() for column in table.columns]), key=repr)


def _pandas_folded(table: pa.Table, plan) -> pa.Table:
    lifted = to_arrow_schema(plan.lifted_schema)
    frames = list(lift(iter([table.to_pandas()]), plan.lifting))
    return pa.Table.from_batches([pa.RecordBatch.from_pandas(f, schema=lifted, preserve_index=False) for f in frames], lifted)


rows = st.lists(st.tuples(st.integers(0, 3), st.integers(-20, 30), st.integers(-2**40, 2**40), st.booleans()),
                min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(rows=rows, sliding=st.booleans())
def test_the_arrow_fold_gives_the_pandas_folds_rows(rows, sliding):
    """Keys with nulls, negative times, Sum, Count, Count(column), Min and Max of int64 and int32 columns."""
    plan = _plan(AGGREGATIONS, sliding)
    keys, times, amounts, key_null = (list(c) for c in zip(*rows))
    table = _wire(plan, keys, times, amounts, key_nulls=key_null)
    folded = arrow_folded(table, plan.lifting, to_arrow_schema(plan.lifted_schema))
    assert folded is not None
    assert folded.schema == to_arrow_schema(plan.lifted_schema)
    assert _rows(folded) == _rows(_pandas_folded(table, plan))


def test_a_null_value_in_the_partition_leaves_the_fold_to_pandas():
    plan = _plan(AGGREGATIONS)
    table = _wire(plan, [1, 1, 2], [0, 1, 2], [5, 6, 7], amount_nulls=[False, True, False])
    assert arrow_folded(table, plan.lifting, to_arrow_schema(plan.lifted_schema)) is None
    packed = next(lift_and_pack(iter(table.to_batches()), plan.lifting, to_arrow_schema(plan.lifted_schema)))
    assert packed.num_rows >= 1  # folded by pandas instead


def test_a_sum_that_might_leave_64_bits_leaves_the_fold_to_pandas():
    """pyarrow's integer sum wraps around silently: near the bound the pandas fold, which checks, folds."""
    plan = _plan({"total": Sum("amount")})
    table = _wire(plan, [1, 1], [0, 1], [2**62, 2**62])
    assert arrow_folded(table, plan.lifting, to_arrow_schema(plan.lifted_schema)) is None
    fine = _wire(plan, [1, 1], [0, 1], [2**61, 2**61 - 1])
    assert arrow_folded(fine, plan.lifting, to_arrow_schema(plan.lifted_schema)) is not None


def test_a_float_column_leaves_the_fold_to_pandas():
    """A float sum's last bits depend on the order of adding: the pandas fold's order is kept."""
    plan = _plan({"total": Sum("price")})
    table = _wire(plan, [1, 1, 1], [0, 1, 2], [1, 2, 3], price=[0.1, 0.2, 0.3])
    assert arrow_folded(table, plan.lifting, to_arrow_schema(plan.lifted_schema)) is None


def test_lift_and_pack_packs_the_arrow_folds_rows_as_it_packed_the_pandas_fold():
    plan = _plan(AGGREGATIONS)
    lifted = to_arrow_schema(plan.lifted_schema)
    rng = np.random.default_rng(3)
    table = _wire(plan, rng.integers(0, 50, 2000), rng.integers(0, 500, 2000), rng.integers(-100, 100, 2000))
    assert arrow_folded(table, plan.lifting, lifted) is not None
    packed = pa.Table.from_batches(list(lift_and_pack(iter(table.to_batches(max_chunksize=300)), plan.lifting, lifted)))
    unpacked = {name: np.concatenate(packed[name].to_numpy(zero_copy_only=False)) for name in ("_k0", "_t", "_v0", "_v1")}
    expected = _pandas_folded(table, plan).to_pandas()
    got = pd.DataFrame(unpacked).sort_values(["_k0", "_t"]).reset_index(drop=True)
    want = expected[["_k0", "_t", "_v0", "_v1"]].sort_values(["_k0", "_t"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
