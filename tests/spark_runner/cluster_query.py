"""The runner's streaming query on ``local-cluster[2,1,1024]``, for the executor-kill test.

``python -m tests.spark_runner.cluster_query <work dir>`` starts two executor JVMs, writes the
application id to ``app_id``, and runs `pipeline` over the files in ``in/`` (one micro-batch
each) into ``out/batch=<id>`` (each batch overwriting itself). While ``armed`` exists, the first
task to add amount `BLOCK` writes its executor's pid to ``reached`` and waits until that JVM is
gone: the test kills it there, mid-batch. A query that fails is started again from its
checkpoint (``restarts`` counts them). Writes the rows each micro-batch read to ``inputs.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests import sparks

BLOCK = 777


def where_run(work: Path):
    """An accumulation (a sum, so that the blocking element shows in the panes) whose output is the pid
    of the executor JVM that made the pane; adding `BLOCK` blocks as described above. Defined in a
    function, so that it travels to the workers by value."""
    import os
    import time

    from accumulations import Accumulation
    from windowing.runners.spark import spark_typed

    def executor_pid() -> int:
        pid = os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        raise RuntimeError("not in an executor")

    class WhereRun(Accumulation):
        column = "amount"

        def default_accumulated_value(self):
            return 0

        def accumulate(self, accumulated, value):
            if value == BLOCK and (work / "armed").exists() and not (work / "reached").exists():
                executor = executor_pid()
                (work / "reached.tmp").write_text(str(executor))
                (work / "reached.tmp").rename(work / "reached")
                while os.path.exists(f"/proc/{executor}"):  # killed with its executor's JVM, or left behind by it
                    time.sleep(0.1)
                os._exit(1)
            return accumulated + value

        def merge(self, accumulated1, accumulated2):
            return accumulated1 + accumulated2

        def get_output(self, accumulated):
            return executor_pid()

    return spark_typed(WhereRun(), "bigint")


def pipeline(source, work: Path):
    from accumulations import Count, Sum
    from windowing import windowed

    return (windowed(source, time="ts", key="user").fixed("10 seconds").watermark("5 seconds")
            .aggregate(total=Sum("amount"), n=Count(), executor=where_run(work)))


def main(work: Path, store: str) -> None:
    """``store``: ``default`` (Spark's own state store) or ``rocksdb`` (with changelog checkpointing)."""
    from .streaming import ROCKSDB_CHANGELOG, batch_inputs, start

    spark = sparks.session(sparks.CLUSTER, "cluster-query", **({} if store == "default" else ROCKSDB_CHANGELOG))
    (work / "app_id").write_text(spark.sparkContext.applicationId)
    inputs, restarts = [], 0
    while True:
        query = start(spark, work / "in", work / "out", work / "chk", lambda s: pipeline(s, work))
        try:
            query.processAllAvailable()
            inputs += batch_inputs(query)
            break
        except Exception:  # a restart from the checkpoint, as a job scheduler would do it
            inputs += batch_inputs(query)  # the failed batch has no progress: the restart runs it again
            restarts += 1
            if restarts > 3:
                raise
        finally:
            query.stop()
    (work / "inputs.json").write_text(json.dumps({"inputs": inputs, "restarts": restarts}))
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
