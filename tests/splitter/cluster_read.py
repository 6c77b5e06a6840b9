"""The splitter's Spark source on ``local-cluster[2,1,1024]``, for the executor-kill test.

``python -m tests.splitter.cluster_read <work dir>`` starts two executor JVMs, writes the
application id to ``app_id``, and reads ``in/`` through ``FileSplitter.read_stream`` with
``trigger(availableNow=True)``, each micro-batch overwriting ``out/batch=<id>``. While ``armed``
exists, the first task of micro-batch ``GATED`` to get there writes its executor's pid to
``reached`` and waits until that JVM is gone: the test kills it there, mid-batch. A query that
fails is started again from its checkpoint (``restarts`` in ``result.json`` counts them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests import sparks

#: The micro-batch whose task the test kills: not the first, so the query has committed a batch before.
GATED = 1


def gate(work: Path, batch_id: int):
    """A ``mapInArrow`` function passing batches through, which blocks as the module docstring says.
    Defined in a function, so that it travels to the workers by value."""
    import os
    import time

    def executor_pid() -> int:
        pid = os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        raise RuntimeError("not in an executor")

    def pass_through(batches):
        if batch_id == GATED and (work / "armed").exists():
            try:  # only one task, on either executor, ever claims the kill
                os.close(os.open(work / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                claimed = True
            except FileExistsError:
                claimed = False
            if claimed:
                executor = executor_pid()
                (work / "reached.tmp").write_text(str(executor))
                os.rename(work / "reached.tmp", work / "reached")
                while os.path.exists(f"/proc/{executor}"):  # killed with its executor's JVM, or left behind by it
                    time.sleep(0.1)
                os._exit(1)
        yield from batches

    return pass_through


def main(work: Path) -> None:
    from storage import FileSplitter

    spark = sparks.session(sparks.CLUSTER, "splitter-cluster")
    (work / "app_id").write_text(spark.sparkContext.applicationId)
    lines = FileSplitter(str(work / "in"), settle=0, block_size=2048, blocks_per_batch=4).read_stream(spark)

    def write(frame, batch_id: int) -> None:
        gated = frame.mapInArrow(gate(work, batch_id), frame.schema)
        gated.write.mode("overwrite").parquet(str(work / "out" / f"batch={batch_id}"))

    restarts, batches = 0, []
    while True:
        query = (lines.writeStream.foreachBatch(write).option("checkpointLocation", str(work / "chk"))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination()
            break
        except Exception:  # a restart from the checkpoint, as a job scheduler would do it
            restarts += 1
            if restarts > 3:
                raise
        finally:
            batches += [p["batchId"] for p in query.recentProgress if p["numInputRows"]]
    (work / "result.json").write_text(json.dumps({"restarts": restarts, "batches": batches}))
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
