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
    return frame


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
