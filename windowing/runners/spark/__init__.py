"""The Spark runner: the engine step inside ``applyInPandas`` / ``applyInPandasWithState``.

Rows are grouped by a *bucket* of keys (`buckets`), not by the raw key: one Python call then runs
the vectorized engine step over all keys of a bucket (`worker.BucketStep`), and the bucket's state
holds the window table of all its keys (`windowing.state_codec`). Not keyed: one bucket. Before
the shuffle, rows are lifted (pre-aggregated) where that is exact, and otherwise packed into one
row of arrays per bucket (`combine`). The columns shipped to the workers are named by one wire
schema (`wire`).

- Batch DataFrame: ``groupBy(bucket).applyInPandas``; every bucket runs one step with all its
  rows, then end of input (watermark to infinity) fires every window, as the pandas runner does
  with a bounded DataFrame.
- Streaming DataFrame: ``groupBy(bucket).applyInPandasWithState`` in append mode. Each call is one
  step at the micro-batch's watermark and processing time (Spark's batch timestamp, the same on
  replay). A bucket's timeout is the earliest of its windows' timers
  (`windowing.engine.next_timers`), so windows fire in the micro-batch in which the watermark
  passes their end even when no new row arrives.

Modules: `planning` (the driver's plan, once per query), `query` (the DataFrame operations),
`worker` (pyspark-free, runs in the workers), `combine` (before the shuffle, in the workers),
`output_types`, `instants` (timestamps leave the workers as epoch microseconds), `pipelines` (what built a
state row's window table, compared at restarts), `results` (`SparkRun`),
`buckets`, `wire`, `old_checkpoints`, `worker_python`
(which starts `storage.worker_socket`, the workers' end of their TCP connection to the JVM).
pyspark is imported lazily, inside the functions that talk to Spark: importing this package loads
no pyspark.
"""

from .buckets import BUCKETS_CONF, NUMBERS, PARTITIONS, PLACEMENT_CONF, Bucketing, bucket_labels
from .combine import COMBINE_CONF
from .output_types import SparkTyped, output_type, spark_typed
from .pipelines import pipeline_of
from .planning import SparkPlan, plan_spark
from .query import QUICK_ACK_CONF, STATE_COMPRESSION_CONF, run_spark
from .results import SparkRun, late_data_of, panes_of
from .worker import BucketStep, stacked, uses_processing_time
from .worker_python import worker_import_hint

__all__ = ["BUCKETS_CONF", "COMBINE_CONF", "NUMBERS", "PARTITIONS", "PLACEMENT_CONF", "QUICK_ACK_CONF",
           "STATE_COMPRESSION_CONF", "BucketStep",
           "Bucketing", "SparkPlan", "SparkRun", "SparkTyped", "bucket_labels", "late_data_of", "output_type", "pipeline_of",
           "panes_of", "plan_spark", "run_spark", "spark_typed", "stacked", "uses_processing_time", "worker_import_hint"]
