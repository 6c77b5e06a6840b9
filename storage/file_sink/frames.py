"""Arrow tables as pandas frames, exact: what ``read()`` gives of every format's parts.

``to_pandas`` alone loses integers beside nulls (float64) and refuses whole tables over one column that pandas
holds neither as NumPy nor as Python values; here neither happens.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa


def as_frame(table: pa.Table) -> pd.DataFrame:
    """``table.to_pandas()`` with integer columns holding nulls as pandas' nullable integers: ``to_pandas`` makes
    them float64 (unless pandas' own metadata asks for more), so 2**53 + 1 read back as 2**53."""
    try:
        frame = table.to_pandas()
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        frame = _frame_by_column(table)
    for i, column in enumerate(table.columns):
        if pa.types.is_integer(column.type) and column.null_count and frame.dtypes.iloc[i] == np.float64:
            frame.isetitem(i, pd.arrays.IntegerArray(column.fill_null(0).to_numpy(), column.is_null().to_numpy()))
        elif pa.types.is_nested(column.type) and pd.api.types.is_object_dtype(frame.dtypes.iloc[i]) \
                and _integers_beside_nulls(column):
            frame.isetitem(i, pd.Series(column.to_pylist(), index=frame.index, dtype=object))
    return frame


def _integers_beside_nulls(values: pa.ChunkedArray | pa.Array) -> bool:
    """Whether a nested column holds integers beside nulls (a null element of a list, a null field of a struct,
    or a null struct, whose fields Parquet and ORC store as nulls): ``to_pandas`` makes those integers floats
    inside its lists and dicts, so 1 came back 1.0 and 2**53 + 1 as 2**53; their Python values are exact."""
    if isinstance(values, pa.ChunkedArray):
        return any(_integers_beside_nulls(chunk) for chunk in values.chunks)
    kind = values.type
    if pa.types.is_integer(kind):
        return values.null_count > 0
    if pa.types.is_struct(kind):
        return any(_integers_beside_nulls(values.field(i)) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _integers_beside_nulls(values.keys) or _integers_beside_nulls(values.items)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _integers_beside_nulls(values.flatten())
    return False


def _frame_by_column(table: pa.Table) -> pd.DataFrame:
    """The table as pandas where ``to_pandas`` refuses a column, each column converted alone: one that pandas
    cannot hold as NumPy or Python values (a date outside the years 1 to 9999, a ``time64[ns]`` below the
    microsecond, a dtype named in pandas' metadata that this pandas does not know, such as
    ``list<item: int64>[pyarrow]``) keeps its Arrow values as ``pd.ArrowDtype``, exact, so the part's rows are
    read rather than refused."""
    columns = {}
    for name, column in zip(table.column_names, table.columns):
        try:
            columns[name] = column.to_pandas()
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            columns[name] = pd.Series(pd.arrays.ArrowExtensionArray(column), name=name)
    return pd.DataFrame(columns, index=pd.RangeIndex(table.num_rows))
