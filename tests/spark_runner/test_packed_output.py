"""The stateful function's packed output (`worker.packed_output`), without Spark: a packed column
converts to Arrow, element by element, as the unpacked column does in pyspark (values, nulls,
NaN as null), in packed rows of at most ``OUTPUT_PACK_ROWS`` rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windowing.runners.spark import worker
from windowing.runners.spark.worker import packed_output

TIMINGS = ["EARLY", "ON_TIME", "LATE"]
TYPES = {"key": pa.int64(), "value": pa.float64(), "exact": pa.int64(), "timing": pa.string(), "reason": pa.string(),
         "flag": pa.bool_()}


def frame_of(rows: list[tuple]) -> pd.DataFrame:
    """Columns shaped as `BucketStep.output` leaves them: int64, float64 with NaN, Python ints and None,
    timing codes as a categorical, strings and None, bools."""
    keys, values, exact, timings, reasons, flags = zip(*rows) if rows else ([],) * 6
    frame = pd.DataFrame({
        "key": np.array(keys, dtype=np.int64),
        "value": np.array(values, dtype=np.float64),
        "exact": np.array(exact, dtype=object),
        "timing": pd.Categorical.from_codes(np.array(timings, dtype=np.int8), categories=TIMINGS),
        "reason": np.array(reasons, dtype=object),
        "flag": np.array(flags, dtype=bool),
    })
    frame["reason"] = frame["reason"].astype("str") if rows and None not in reasons else frame["reason"]
    return frame


def arrow_alone(column: pd.Series, arrow_type: pa.DataType) -> pa.Array:
    """What pyspark makes of an unpacked column (``PandasToArrowConversion``: categoricals as their
    categories' type, nulls by ``isnull``)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        column = column.astype(column.dtype.categories.dtype)
    mask = None if hasattr(column.array, "__arrow_array__") else column.isnull()
    return pa.Array.from_pandas(column, mask=mask, type=arrow_type)


rows = st.lists(st.tuples(
    st.integers(-2**63, 2**63 - 1),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(float("nan"))),
    st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    st.integers(0, 2),
    st.one_of(st.none(), st.text(max_size=5)),
    st.booleans(),
), max_size=30)


@settings(max_examples=200, deadline=None)
@given(rows=rows, pack_rows=st.integers(1, 8))
def test_packed_rows_convert_as_the_rows_do(rows: list[tuple], pack_rows: int) -> None:
    frame = frame_of(rows)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(worker, "OUTPUT_PACK_ROWS", pack_rows)
        packed = list(packed_output([frame]))
    assert len(packed) == -(-len(frame) // pack_rows)
    assert all(len(row) == 1 for row in packed)
    for name, arrow_type in TYPES.items():
        lists = [pa.Array.from_pandas(row[name], type=pa.list_(arrow_type)) for row in packed]
        assert all(len(cells[0]) <= pack_rows for cells in lists)
        flattened = pa.concat_arrays([cells.flatten() for cells in lists]) if lists else pa.array([], arrow_type)
        assert flattened.equals(arrow_alone(frame[name], arrow_type)), name


def test_empty_output_gives_no_packed_row() -> None:
    assert list(packed_output([frame_of([]), frame_of([])])) == []
