"""The wire schema: the columns the Spark runner ships from the input to its Python workers.

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
``_wm``             streams: the column Spark's watermark is on, shifted forward (`query`)
``<name>_null``     the null flag of an integer key or value column that may hold nulls
==================  ==============================================================================

Integer columns that may hold a null reach pandas as the value (0 where null) and its null flag:
pyspark hands an integer column holding a null to pandas as float64, which rounds beyond 2**53.
Where a ``mapInArrow`` runs before the shuffle they are shipped as they are and it makes the
flags (`combine.with_null_flags`); otherwise Spark ships both.
"""

from __future__ import annotations

from dataclasses import dataclass

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
