"""Streaming queries into the file sink on a ``local-cluster`` Spark, in a process of their own.

``python -m tests.file_sink.cluster_driver <work directory> faults|resume``

* ``faults``: for each sink of ``SINKS`` (JSON lines and Parquet, with and without
  compression and encryption) a query over the files ``in/0..3``, one micro-batch each,
  with a fault per batch, played by ``Faults`` in the tasks:
  batch 0, both partitions write at once (each waits for the other: one per executor);
  batch 1, partition 0's task dies mid-write (its Python worker exits), Spark retries it;
  batch 2, partition 1's task is duplicated: before it claims its slot, a duplicate attempt
  of the same partition writes (rows with negative ids) and claims it; Spark only ever
  reports the real attempt, so the duplicate's files must vanish;
  batch 3, partition 0's task kills its executor's JVM mid-write.
  Each fault happens once (a lost executor makes Spark run the stage again, from attempt 0).
  Then two streaming ``windowed(...)`` queries (the Spark runner) into Parquet sinks, one after
  the other, each with its executor killed mid-batch: one on Spark's default state store, one on
  RocksDB with changelog checkpointing (``WINDOWED``). Then each sink's query runs on over ``in/4..5`` and stops at a
  point of batch 4 (in a task or in the driver's commit) until the test kills this process.
* ``resume``: the same queries, restarted from their checkpoints, run to the end.

Everything the test checks is in the work directory: the sinks, ``markers/`` and each windowed
query's ``<name>-inputs.json``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from storage.file_sink import ColumnBuckets, FileSink, RollingPolicy
from storage.file_sink.tasks import TaskInfo, write_task
from tests import sparks
from tests.spark_runner.streaming import ROCKSDB_CHANGELOG

KEY = b"cluster-test-key"  # 16 bytes
ROWS_PER_FILE = 300
FAULT_FILES, ALL_FILES = 4, 6
KILL_BATCH = 4
SCHEMA = "id long, k string"


def sinks(work: Path) -> dict[str, FileSink]:
    """The sinks under test, by name; row formats roll every 2 batches, so their tasks append across batches."""
    every_two = RollingPolicy(max_batches=2)
    return {
        "jsonl": FileSink(str(work / "jsonl")).with_rolling_policy(every_two),
        "jsonl-gzip-aes": FileSink(str(work / "jsonl-gzip-aes"), compression="gzip").with_encryption(KEY)
        .with_rolling_policy(every_two).with_buckets(ColumnBuckets("k")),
        "parquet": FileSink(str(work / "parquet"), format="parquet").with_buckets(ColumnBuckets("k")),
        "parquet-zstd-aes": FileSink(str(work / "parquet-zstd-aes"), format="parquet", compression="zstd")
        .with_encryption(KEY),
    }


#: Where each sink's query stops for the driver's kill: in a task (holding a core) or in the commit.
KILL_POINTS = {"jsonl": "after_commit_record", "parquet": "mid_rename",
               "jsonl-gzip-aes": "mid_write", "parquet-zstd-aes": "task_started"}


def mark(work: str, name: str, text: str = "") -> None:
    directory = Path(work) / "markers"
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text)


def marked(work: str, name: str) -> bool:
    return (Path(work) / "markers" / name).exists()


def wait_marked(work: str, name: str, timeout: float = 120.0) -> None:
    sparks.wait_for(lambda: marked(work, name), f"marker {name}", timeout)


def kill_my_executor() -> None:
    """SIGKILL the executor JVM this task runs in (by its pid), then end this Python worker."""
    os.kill(executor_jvm_of(os.getpid()), signal.SIGKILL)
    os._exit(3)


def executor_jvm_of(pid: int) -> int:
    """The executor JVM a Python worker runs under (its nearest such ancestor)."""
    while pid > 1:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"CoarseGrainedExecutorBackend" in cmdline:
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("not running under an executor JVM")


@dataclass(frozen=True)
class Faults:
    """The faults of one sink's query, played in its tasks (pickled to the executors)."""

    work: str
    name: str
    sink: FileSink
    kill_point: str | None = None  # in batch KILL_BATCH: stop there until the driver is killed

    def __call__(self, phase: str, batch_id: int) -> None:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:  # the driver's commit
            if phase == self.kill_point and batch_id == KILL_BATCH:
                self._stop_for_the_kill()
            return
        partition, here = context.partitionId(), (batch_id, context.partitionId(), phase)
        if phase == "task_started":  # every attempt, of every stage attempt, by its task id
            mark(self.work, f"{self.name}-b{batch_id}-p{partition}-t{context.taskAttemptId()}-started",
                 str(executor_jvm_of(os.getpid())))
        if batch_id == 0 and phase == "task_started" and self._once(f"b0-p{partition}-first"):
            wait_marked(self.work, f"{self.name}-b0-p{1 - partition}-first")  # both partitions run at once
        # Each fault once (a lost executor makes Spark retry the stage, whose tasks start again at attempt 0).
        if here == (1, 0, "mid_write") and self._once("b1-died"):
            os._exit(3)  # the Python worker dies mid-write: the task fails and is retried
        if here == (2, 1, "before_claim") and self._once("b2-duplicate"):
            self._duplicate(batch_id, partition, context)
        if here == (3, 0, "mid_write") and self._once("b3-killed-executor"):
            kill_my_executor()
        if here == (KILL_BATCH, 0, self.kill_point):
            self._stop_for_the_kill()

    def _once(self, fault: str) -> bool:
        """Whether ``fault`` is due (not done yet); marks it done, with this task's executor JVM."""
        if marked(self.work, f"{self.name}-{fault}"):
            return False
        mark(self.work, f"{self.name}-{fault}", str(executor_jvm_of(os.getpid())))
        return True

    def _duplicate(self, batch_id: int, partition: int, context: object) -> None:
        """A second attempt of this task, run before it claims the slot; Spark never hears of it."""
        owner = f"query-{context.getLocalProperty('sql.streaming.queryId')}"
        rows = pa.table({"id": [-1 - i for i in range(10)], "k": ["k0"] * 10})
        report = write_task(self.sink, TaskInfo(owner, batch_id, partition, 9, int(time.time() * 1000)), [rows])
        mark(self.work, f"{self.name}-b{batch_id}-duplicate-report", report.to_json())

    def _stop_for_the_kill(self) -> None:
        mark(self.work, f"{self.name}-stopped", str(os.getpid()))
        time.sleep(600)  # the test kills the driver (and with it this process's executors) meanwhile
        os._exit(4)


def write_inputs(work: Path) -> None:
    source = work / "in"
    source.mkdir(exist_ok=True)
    for i in range(ALL_FILES):
        ids = range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE)
        lines = [json.dumps({"id": n, "k": f"k{n % 3}"}) for n in ids]
        (source / f".in-{i}.tmp").write_text("\n".join(lines) + "\n")


def publish_inputs(work: Path, upto: int) -> None:
    """Make the input files ``0 .. upto - 1`` visible to the stream (a rename each)."""
    for i in range(upto):
        hidden, visible = work / "in" / f".in-{i}.tmp", work / "in" / f"in-{i:03d}.json"
        if hidden.exists():
            os.replace(hidden, visible)


def start(spark, work: Path, name: str, sink: FileSink, hook: Faults | None):
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(work / "in"))
    return sink.start(stream.repartition(2, "id"), checkpoint_location=str(work / "checkpoints" / name),
                      trigger={"availableNow": True}, hook=hook)


def pane_parts() -> list:
    """The windowed query's input files: the Spark runner tests' events, cut into three micro-batches."""
    from tests.spark_runner.helpers import events
    from tests.spark_runner.test_spark_stream import ROWS

    return [events(ROWS[a:b]) for a, b in ((0, 4), (4, 9), (9, len(ROWS)))]


@dataclass(frozen=True)
class KillExecutorAt:
    """Kill the executor of query ``name``'s partition 0 task, once, when it starts writing batch ``batch_id``."""

    work: str
    name: str
    batch_id: int

    def __call__(self, phase: str, batch_id: int) -> None:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None or (phase, batch_id) != ("task_started", self.batch_id):
            return
        mark(self.work, f"{self.name}-b{batch_id}-p{context.partitionId()}-t{context.taskAttemptId()}-started")
        if context.partitionId() == 0 and not marked(self.work, f"{self.name}-b{batch_id}-killed-executor"):
            mark(self.work, f"{self.name}-b{batch_id}-killed-executor")
            kill_my_executor()


#: The windowed queries, by name (their sink, checkpoint and markers): the session settings each starts with.
WINDOWED = {"panes": {}, "panes-rocksdb": ROCKSDB_CHANGELOG}


def windowed_query(spark, work: Path, name: str) -> None:
    """The Spark runner's panes (fixed windows, ``tests.spark_runner``) into a Parquet sink; an executor dies.
    The query starts with ``WINDOWED[name]``'s settings, which it keeps (Spark copies the session at start)."""
    from tests.spark_runner.streaming import SCHEMA as EVENTS
    from tests.spark_runner.streaming import batch_inputs, write_batch
    from tests.spark_runner.test_spark_stream import _on_time

    if not (work / "events").exists():
        for i, part in enumerate(pane_parts()):
            write_batch(work / "events", i, part)
    sink = FileSink(str(work / name), format="parquet")
    events = spark.readStream.schema(EVENTS).option("maxFilesPerTrigger", 1).parquet(str(work / "events"))
    settings = WINDOWED[name]
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        query = sink.start(_on_time(events), checkpoint_location=str(work / "checkpoints" / name),
                           trigger={"availableNow": True}, hook=KillExecutorAt(str(work), name, 1))
    finally:
        for key in settings:
            spark.conf.unset(key)
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    (work / f"{name}-inputs.json").write_text(json.dumps(batch_inputs(query)))


def main(work: Path, mode: str) -> None:
    log = open(work / f"driver-{mode}.log", "w")  # noqa: SIM115 - this process's stderr, and its JVM's, to its end
    os.dup2(log.fileno(), 2)  # not a pipe that Spark's logs could fill and block
    spark = sparks.session(sparks.CLUSTER, f"file-sink-{mode}", **{
        "spark.executorEnv.PYTHONPATH": str(sparks.ROOT),  # the executors import the hooks from tests/
        "spark.task.maxFailures": "4",
        # Up to five executor kills within seconds (four sinks' batch 3 and the windowed query): each fails the
        # stage attempts then running on the lost executor's shuffle output, so on a loaded machine one stage can
        # lose more than Spark's default of 4 consecutive attempts to kills meant for other queries.
        "spark.stage.maxConsecutiveAttempts": "16",
    })
    by_name = sinks(work)
    if mode == "faults":
        write_inputs(work)
        publish_inputs(work, 1)
        for name, sink in by_name.items():  # one at a time: each batch 0 needs both executors
            start(spark, work, name, sink, Faults(str(work), name, sink)).awaitTermination()
        publish_inputs(work, FAULT_FILES)
        queries = [start(spark, work, name, sink, Faults(str(work), name, sink)) for name, sink in by_name.items()]
        for name in WINDOWED:  # meanwhile: one executor kill may serve several queries
            windowed_query(spark, work, name)
        for query in queries:
            query.awaitTermination()
        publish_inputs(work, ALL_FILES)
        for group in (("jsonl", "parquet"), ("jsonl-gzip-aes", "parquet-zstd-aes")):  # commit stops, then task stops
            for name in group:
                start(spark, work, name, by_name[name], Faults(str(work), name, by_name[name], KILL_POINTS[name]))
            for name in group:
                wait_marked(str(work), f"{name}-stopped", timeout=300)
        mark(str(work), "all-stopped")
        time.sleep(600)  # killed by the test
    else:
        queries = [start(spark, work, name, sink, None) for name, sink in by_name.items()]
        for query in queries:
            query.awaitTermination()
        mark(str(work), "resumed")
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
