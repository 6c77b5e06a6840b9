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
from windowing.runners.spark.combine import arrow_folded, lift, lift_and_pack, with_null_flags

T = pytest.importorskip("pyspark.sql.types")
to_arrow_schema = pytest.importorskip("pyspark.sql.pandas.types").to_arrow_schema

SCHEMA = T.StructType([T.StructField("key", T.LongType()), T.StructField("ts", T.LongType(), False),
                       T.StructField("amount", T.LongType()), T.StructField("small", T.IntegerType(), False),
                       T.StructField("price", T.DoubleType(), False)])
AGGREGATIONS = {"total": Sum("amount"), "n": Count(), "present": Count("amount"), "low": Min("small"),
                "high": Max("amount"), "small_total": Sum("small")}


def _plan(aggregations: dict, sliding: int = 0, keys: tuple[str, ...] = ("key",)):
    """Fixed windows of 10, or sliding ones of 10 every ``sliding`` (4: lifted in units of 2)."""
    builder = windowed(None, time="ts", key=list(keys))
    builder = builder.sliding(10, every=sliding) if sliding else builder.fixed(10)
    plan = plan_spark(builder.strategy(**aggregations), SCHEMA, 4)
    assert plan.lifting is not None
    return plan


def _shipped(plan, keys, times, amounts, key_nulls=None, amount_nulls=None, price=None) -> pa.Table:
    """The projected rows as `query.run_spark` ships them to the fold: bucket, key, time, values, with their nulls."""
    n = len(keys)
    key_nulls = np.zeros(n, dtype=bool) if key_nulls is None else np.asarray(key_nulls)
    amount_nulls = np.zeros(n, dtype=bool) if amount_nulls is None else np.asarray(amount_nulls)
    columns = {"_b": pa.array(np.asarray(keys) % 4, pa.int32()), "_k0": pa.array(keys, pa.int64(), mask=key_nulls),
               "_t": pa.array(times, pa.int64())}
    inputs = {"amount": pa.array(amounts, pa.int64(), mask=amount_nulls),
              "small": pa.array(np.asarray(amounts) % 1000, pa.int32()),
              "price": pa.array(np.asarray(amounts if price is None else price, dtype=np.float64))}
    if len(plan.lifting.key_columns) == 2:  # keyed by ("key", "small")
        columns["_k1"] = inputs["small"]
    for i, column in enumerate(plan.input_columns):
        if column is not None:
            columns[f"_v{i}"] = inputs[column]
    return pa.table(columns)


def _wire(plan, *args, **kwargs) -> pa.Table:
    """`_shipped` as the fold takes it: each nullable integer column as its value, 0 where null, and its null flag."""
    shipped = _shipped(plan, *args, **kwargs)
    return pa.Table.from_batches([with_null_flags(b, plan.adapter.nullable) for b in shipped.to_batches()])


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*[column.to_pylist() for column in table.columns]), key=repr)


def _pandas_folded(table: pa.Table, plan) -> pa.Table:
    lifted = to_arrow_schema(plan.lifted_schema)
    frames = list(lift(iter([table.to_pandas()]), plan.lifting))
    return pa.Table.from_batches([pa.RecordBatch.from_pandas(f, schema=lifted, preserve_index=False) for f in frames], lifted)


rows = st.lists(st.tuples(st.integers(0, 3), st.integers(-20, 30), st.integers(-2**40, 2**40), st.booleans()),
                min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(rows=rows, sliding=st.sampled_from([0, 5, 4]))
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
    shipped = _shipped(plan, [1, 1, 2], [0, 1, 2], [5, 6, 7], amount_nulls=[False, True, False])
    packed = next(lift_and_pack(iter(shipped.to_batches()), plan.lifting, to_arrow_schema(plan.lifted_schema)))
    assert packed.num_rows >= 1  # folded by pandas instead
    present = plan.input_columns.index("amount", list(AGGREGATIONS).index("present"))
    assert sum(v for row in packed[f"_v{present}"].to_pylist() for v in row) == 2  # the null is counted by no one


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
    columns = rng.integers(0, 50, 2000), rng.integers(0, 500, 2000), rng.integers(-100, 100, 2000)
    table = _wire(plan, *columns)
    assert arrow_folded(table, plan.lifting, lifted) is not None
    shipped = _shipped(plan, *columns)
    packed = pa.Table.from_batches(list(lift_and_pack(iter(shipped.to_batches(max_chunksize=300)), plan.lifting, lifted)))
    unpacked = {name: np.concatenate(packed[name].to_numpy(zero_copy_only=False)) for name in ("_k0", "_t", "_v0", "_v1")}
    expected = _pandas_folded(table, plan).to_pandas()
    got = pd.DataFrame(unpacked).sort_values(["_k0", "_t"]).reset_index(drop=True)
    want = expected[["_k0", "_t", "_v0", "_v1"]].sort_values(["_k0", "_t"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), max_size=40),
       width=st.sampled_from([pa.int64(), pa.int32()]))
def test_null_flags_made_in_arrow_keep_every_value_exact_and_flag_exactly_the_nulls(values, width):
    if width == pa.int32():
        values = [None if v is None else v % 2**31 for v in values]
    batch = pa.RecordBatch.from_arrays(  # not pa.record_batch(dict): pyarrow 14 (make test-spark35) has no such form
        [pa.array([0] * len(values), pa.int32()), pa.array(values, width), pa.array(range(len(values)), pa.int64())],
        names=["_b", "_k0", "_t"])
    flagged = with_null_flags(batch, ("_k0",))
    assert flagged.schema.names == ["_b", "_k0", "_k0_null", "_t"]
    assert flagged.column("_k0").type == width and flagged.column("_k0").null_count == 0
    assert flagged.column("_k0_null").to_pylist() == [v is None for v in values]
    assert flagged.column("_k0").to_pylist() == [0 if v is None else v for v in values]


def _packed_rows(batches) -> list[tuple]:
    """The rows in packed batches, unpacked, each with its packed row's bucket (a null flag's null list: no
    null in that packed row; any other null list fails); sorted."""
    from windowing.runners.spark.wire import WIRE

    out = []
    for batch in batches:
        table = pa.Table.from_batches([batch])
        names = [name for name in table.column_names if name not in ("_b", "_tmax")]
        for i, bucket in enumerate(table["_b"].to_pylist()):
            cells = {name: table[name][i].as_py() for name in names}
            rows = len(cells["_t"])
            out += [(bucket, *row) for row in zip(*[[False] * rows if cell is None and WIRE.is_null_flag(name) else cell
                                                     for name, cell in cells.items()])]
    return sorted(out, key=repr)


@settings(max_examples=60, deadline=None)
@given(rows=rows, value_nulls=st.booleans(), floats=st.booleans(), count=st.sampled_from([1, 2, 3, 200]),
       keys=st.sampled_from([("key",), ("key", "small")]))
def test_rows_bucketed_after_the_fold_are_packed_as_rows_bucketed_before_it(rows, value_nulls, floats, count, keys):
    """``lift_and_pack`` with a ``bucketing`` gets rows without their bucket and labels the folded rows (or, where
    pandas folds: a null value, a float sum, the rows): the same packed rows as when every row came labelled,
    as `with_buckets` labels them, null keys and a second key column (an int after a bigint) included."""
    from windowing.runners.spark.buckets import Bucketing
    from windowing.runners.spark.combine import with_buckets

    aggregations = {**AGGREGATIONS, "spent": Sum("price")} if floats else AGGREGATIONS
    plan = _plan(aggregations, keys=keys)
    lifted, bucketing = to_arrow_schema(plan.lifted_schema), Bucketing(count)
    key_values, times, amounts, key_null = (list(c) for c in zip(*rows))
    amount_nulls = [value_nulls and i % 3 == 0 for i in range(len(key_values))]
    shipped = _shipped(plan, key_values, times, amounts, key_nulls=key_null, amount_nulls=amount_nulls).drop(["_b"])
    unlabelled = shipped.to_batches(max_chunksize=7)
    labelled = list(with_buckets(iter(unlabelled), len(keys), bucketing))
    after = list(lift_and_pack(iter(unlabelled), plan.lifting, lifted, bucketing=bucketing))
    before = list(lift_and_pack(iter(labelled), plan.lifting, lifted))
    assert _packed_rows(after) == _packed_rows(before)
    assert {b.num_rows for b in after} == {b.num_rows for b in before}
