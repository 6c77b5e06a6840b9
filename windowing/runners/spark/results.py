"""What ``run()`` returns for a Spark source: its output and the views of panes and late data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .worker import ELEMENT, KIND, LATE, PANE, REASON

# to_json/from_json keep microseconds (the default formats keep milliseconds: timestamp_ntz's too), written in UTC
# (an offset of the session's zone is written without its seconds: Kolkata's +05:21:10 of 1900 moved times by 10 s).
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
                "timeZone": "UTC"}


@dataclass
class SparkRun:
    """What ``run`` returns for a Spark source.

    ``output``: the one DataFrame the stateful step produces, panes (``kind = PANE``) and dropped
    elements (``kind = LATE``, with ``reason`` and the input row as JSON in ``element``).
    ``panes`` and ``late_data`` are its two filtered views: ``panes`` has the columns of
    shared/api.md (as ``aggregate()``), ``late_data`` the input row's columns plus
    ``window_start``, ``window_end``, ``reason`` (as the pandas runner's ``late_data``).
    Each view started as its own streaming query runs the stateful step again, on its own
    checkpoint; to get both from one query, write ``output`` with ``foreachBatch`` and
    ``split`` each micro-batch (docs/spark.md).
    """

    panes: Any
    output: Any
    input_schema: Any

    @property
    def late_data(self) -> Any:
        return late_data_of(self.output, self.input_schema)

    def split(self, batch: Any) -> tuple[Any, Any]:
        """``(panes, late_data)`` of one micro-batch of ``output`` (inside ``foreachBatch``)."""
        return panes_of(batch), late_data_of(batch, self.input_schema)


def panes_of(output: Any) -> Any:
    """The pane rows of a run's ``output``, with the columns of shared/api.md."""
    from pyspark.sql import functions as F

    return output.where(F.col(KIND) == PANE).drop(KIND, REASON, ELEMENT)


def late_data_of(output: Any, input_schema: Any) -> Any:
    """The late rows of a run's ``output``: the input row's columns, ``window_start``, ``window_end``, ``reason``."""
    from pyspark.sql import functions as F

    row = F.from_json(F.col(ELEMENT), input_schema, JSON_OPTIONS).alias("_row")
    late = output.where(F.col(KIND) == LATE).select(row, "window_start", "window_end", REASON)
    return late.select(*[F.col("_row").getField(f.name).alias(f.name) for f in input_schema.fields],
                       "window_start", "window_end", REASON)


def spark_run(out: Any, late_data: bool, schema: Any) -> Any:
    """What `run_spark` returns: the `SparkRun` of ``out``, or with ``late_data`` False ``out`` itself (panes only)."""
    return SparkRun(panes_of(out), output=out, input_schema=schema) if late_data else out
