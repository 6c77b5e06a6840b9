"""A sketch of a runner of another shape than ``api.md``'s, measured beside the engine
(``spark_bench.py --foreach-batch-runner``): what the ``foreachBatch`` shape costs doing the windowing.

Each micro-batch reaches ``foreachBatch`` as a batch DataFrame. Spark's own aggregation folds the rows
before the shuffle where the engine's combiner lifting is exact (fixed windows: a partial sum per bucket,
key and window), with no Python before the shuffle; then one ``applyInPandas`` call per key bucket runs
the engine's own step (`windowing.engine.step`, through the runner's `BucketStep`) on the bucket's rows
and its windows, which live in a file per bucket and micro-batch between micro-batches, and the panes go
to the ``noop`` sink. Every bucket gets a marker row in every micro-batch, so that it is called (and its
windows fire) when it has no rows. The watermark is the runner's own: the largest event time of the
micro-batches before, which each call writes beside its state, less the delay, as Spark computes its own.

It is a sketch for the measurement, not a runner: it restarts from nothing (its files are not tied to
Spark's checkpoint, so a replayed micro-batch is not recognised), fires nothing after the last input (no
micro-batch without data reaches ``foreachBatch``), keeps no late data, knows no processing time, and takes
the benchmark's columns (``key``, ``ts``, ``amount``, none null) and pipelines (``Sum`` in fixed windows
or sessions, on-time panes). What it would take to make it one is in docs/spark_benchmark.md ("A runner of that
shape, sketched").
"""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

import fsspec
import numpy as np
import pandas as pd

#: The column that is true in the marker rows, one per bucket in every micro-batch, false in the input's.
MARKER = "_m"


def to_noop(panes, batch_id: int) -> None:
    """The benchmark's sink: Spark computes the panes and writes nothing."""
    panes.write.format("noop").mode("overwrite").save()


def foreach_batch_runner(shape: str, delay: str, sink=to_noop):
    """``spark_bench``'s side for ``shape`` ("fixed" or "sessions"): a function of the stream returning its
    ``DataStreamWriter``; ``delay`` is the watermark delay, as the engine's side is given it; ``sink`` writes a
    micro-batch's panes (a batch DataFrame, window bounds as microseconds) and is given the batch id."""
    def build(stream):
        from pyspark import cloudpickle
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        from accumulations import Sum
        from windowing import windowed
        from windowing.runners.spark import plan_spark
        from windowing.runners.spark.buckets import Bucketing
        from windowing.runners.spark.query import _bucket  # the runner's own bucket column, so keys land alike
        from windowing.timeaxis import MIN_TIME

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers do not have benchmarks/ on their path
        count = int(stream.sparkSession.conf.get("spark.sql.shuffle.partitions"))
        bucketing = Bucketing(count)
        pipeline = windowed(stream, time="ts", key="key")
        pipeline = pipeline.fixed("1 minute") if shape == "fixed" else pipeline.sessions("5 minutes")
        schema = T.StructType([T.StructField("key", T.LongType(), False), T.StructField("ts", T.TimestampType(), False),
                               T.StructField("amount", T.LongType(), False)])
        planned = plan_spark(pipeline.watermark(delay).strategy(Sum("amount")), schema, bucketing)
        step_of_bucket = dataclasses.replace(planned.adapter, packed=False)  # rows arrive as rows, not packed
        delay_ns = int(step_of_bucket.plan.watermark_delay)
        files = Path(tempfile.mkdtemp(prefix="foreach-batch-runner-"))
        atexit.register(shutil.rmtree, files, True)
        watermark = [MIN_TIME]  # nanoseconds, the driver's between micro-batches

        # Columns built once: a micro-batch pays only for its DataFrame calls, each analysed by the driver.
        bucket = _bucket(["key"], bucketing, schema).alias("_b")
        micros, no, zero = F.expr("unix_micros(ts)"), F.lit(False), F.lit(0).cast("long")
        if planned.lifting is not None:
            unit, offset = planned.lifting.unit, planned.lifting.offset
            start = F.expr(f"floor((unix_micros(ts) - {offset}) / {unit}) * {unit} + {offset}").cast("long")
            keys = [bucket, F.col("key").alias("_k0"), start.alias("_t")]
            folds = [F.sum("amount").alias("_v0"), F.max(micros).alias("_tmax"), F.max(no).alias(MARKER)]

            def rows_of(batch):
                return batch.groupBy(*keys).agg(*folds)
        else:
            row = [bucket, F.col("key").alias("_k0"), micros.alias("_t"), F.col("amount").alias("_v0"), micros.alias("_tmax"),
                   no.alias(MARKER)]

            def rows_of(batch):
                return batch.select(*row)
        # Made by Spark from a range, not sent from Python: a local relation cost about 20 ms a micro-batch.
        label_of = F.array(*[F.lit(int(label)) for label in bucketing.labels()])
        marker = [F.element_at(label_of, (F.col("id") + 1).cast("int")).alias("_b"), zero.alias("_k0"), zero.alias("_t"),
                  zero.alias("_v0"), zero.alias("_tmax"), F.lit(True).alias(MARKER)]

        def each_batch(batch, batch_id: int) -> None:
            markers = batch.sparkSession.range(count).select(*marker)
            step = bucket_step(step_of_bucket, files, batch_id, watermark[0])
            panes = rows_of(batch).union(markers).groupBy("_b").applyInPandas(step, planned.out_schema)
            sink(panes, batch_id)
            latest = [int(path.read_text()) for path in files.glob(f"*/{batch_id}.latest")]
            if latest:
                watermark[0] = max(watermark[0], max(latest) * 1000 - delay_ns)

        return stream.writeStream.foreachBatch(each_batch)
    return build


def bucket_step(step_of_bucket, files: Path, batch_id: int, watermark: int):
    """The ``applyInPandas`` function of micro-batch ``batch_id``: a bucket's windows from its latest file before
    this micro-batch, the engine's step at ``watermark``, the windows into this micro-batch's file (whole or not at
    all: `storage._fs.put_atomic`) and the largest event time of its rows beside them; the panes returned."""
    def step_bucket(frame: pd.DataFrame) -> pd.DataFrame:
        from storage._fs import put_atomic
        from windowing.engine import step

        bucket = files / str(int(frame["_b"].iloc[0]))
        bucket.mkdir(exist_ok=True)
        rows = frame[~frame[MARKER].to_numpy()]
        earlier = sorted((int(p.stem) for p in bucket.glob("*.state") if int(p.stem) < batch_id), reverse=True)
        table = step_of_bucket.load((bucket / f"{earlier[0]}.state").read_bytes()) if earlier else step_of_bucket.fresh_state()
        elements = step_of_bucket.elements([rows])
        result = step(step_of_bucket.plan.spec, table, elements, watermark, 0)
        # Not made durable (no fsync), as Spark's state store does not on a local disk.
        local = fsspec.filesystem("file")
        put_atomic(local, str(bucket / f"{batch_id}.state"), step_of_bucket.save(result.state), durable=False)
        if len(rows):
            put_atomic(local, str(bucket / f"{batch_id}.latest"), str(int(np.max(rows["_tmax"].to_numpy()))).encode(), durable=False)
        for old in earlier[1:]:
            (bucket / f"{old}.state").unlink(missing_ok=True)
            (bucket / f"{old}.latest").unlink(missing_ok=True)
        return step_of_bucket.output(result.panes, result.dropped, elements)
    return step_bucket

