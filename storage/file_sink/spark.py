"""The Spark adapter: executors write the part files, the driver commits each micro-batch under its batch id.

pyspark 4.1 and later: a Python data source (``spark_source.py``), so the query
is ``df.writeStream.format(<the sink's source>)``; its writer's ``write`` runs
in each task and its ``commit`` on the driver. pyspark 3.5 and 4.0: the same
steps in ``foreachBatch``: the batch's tasks write through ``mapInArrow`` and
return their reports, which the driver commits. Either way only the reports
(a few hundred bytes per task) reach the driver.

Whose batch ids: a query's, ``query-<its id>`` (kept in its checkpoint, so a
restart is the same writer and a new checkpoint a new one).
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._fs import absolute_if_local
from .._lease import Lease
from .commit import commit_batch, discard_after_failed_commit, finish_open_parts, now_ms
from .config import SinkConfig
from .directory import RUNNING_HERE, SinkDirectory
from .parts import PhaseHook, no_hook, refuse_duplicate_columns, refuse_rows_without_columns
from .state import load_state
from .tasks import TaskReport, describe_task_context, write_task

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

APIS = ("auto", "data_source", "foreach_batch")


def has_data_source_writer() -> bool:
    """Whether pyspark has the streaming Arrow writer of Python data sources (4.1 and later)."""
    try:
        from pyspark.sql.datasource import DataSourceStreamArrowWriter  # noqa: F401
    except ImportError:
        return False
    return True


def is_bounded(trigger: Mapping[str, Any] | None) -> bool:
    """Whether the trigger ends the query when the input available at its start is written."""
    return bool(trigger) and bool(trigger.get("availableNow") or trigger.get("once"))


def check_frame(config: SinkConfig, df: DataFrame) -> None:
    """Refuse on the driver what every task would fail on: two columns of one name (a row of a file holds each
    name once), a stream of no columns, a bucket column or column type the sink cannot write
    (``SinkConfig.check_schema``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    refuse_duplicate_columns(df.columns)
    if not df.columns and df.isStreaming:  # a batch's rows are counted when it is written (`write_with_tasks`)
        raise ValueError("FileSink cannot write a stream without columns: no format keeps a row of no values; select "
                         "the columns to write")
    for field in df.schema.fields:
        if _holds_variant(field.dataType):
            raise ValueError(
                f"FileSink cannot write column {field.name!r} of type {field.dataType.simpleString()}: pyspark hands a "
                "variant to Arrow as its binary encoding, which would be written as such (no reader gets the value "
                "back); write its JSON text instead (to_json(col))"
            )
    timezone = {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_schema).parameters else {}
    try:  # pyspark 4 names a timestamp's Arrow type only with a time zone (and raised AssertionError without)
        schema = to_arrow_schema(df.schema, **timezone)
    except Exception:  # noqa: BLE001 - a type this pyspark cannot name in Arrow: its tasks say what they make of it
        return
    config.check_schema(schema)


def _holds_variant(data_type: Any) -> bool:
    """Whether a Spark type is or holds a variant (pyspark 4's VariantType; pyspark 3.5 has none)."""
    if type(data_type).__name__ == "VariantType":
        return True
    children = [getattr(data_type, name, None) for name in ("elementType", "keyType", "valueType")]
    children += [f.dataType for f in getattr(data_type, "fields", None) or []]
    return any(child is not None and _holds_variant(child) for child in children)


def task_function(config: SinkConfig, end_of_input: bool, hook: PhaseHook, owner: str | None, batch_id: int,
                  names: list[str], processing_time_ms: int | None = None
                  ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function writing its partition and yielding its report (column ``report``); ``names``
    are the columns' own names, given back to the batches that arrive under positional ones. The task's
    processing time is ``processing_time_ms``, or its own clock where that is None (a query's micro-batch)."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        now = now_ms() if processing_time_ms is None else processing_time_ms
        task = describe_task_context(TaskContext.get(), now, batch_id)
        if owner is not None:
            task = type(task)(owner, task.batch_id, task.partition, task.attempt, task.now_ms)
        named = (pa.RecordBatch.from_arrays(batch.columns, names=names) for batch in batches)
        report = write_task(config, task, named, end_of_input, hook)
        yield pa.record_batch([pa.array([report.to_json()], pa.string())], names=["report"])

    return write


def write_with_tasks(config: SinkConfig, df: DataFrame, owner: str | None, batch_id: int, lease: Lease | None,
                     end_of_input: bool, hook: PhaseHook = no_hook, processing_time_ms: int | None = None) -> bool:
    """Write ``df`` (a bounded frame, or a micro-batch in ``foreachBatch``) from its tasks and commit it.

    ``processing_time_ms`` is the batch's processing time in every task and in the commit (``FileSink.write``'s);
    None: each task's clock and the driver's, as for a query's micro-batches.
    pyspark's ``mapInArrow`` resolves each column by its name, where a dot is a field access (```a.b``` fails):
    the columns go under positional names and get theirs back in the task.
    """
    names = df.columns
    if not names:  # a batch of no columns reaches the tasks without its rows
        refuse_rows_without_columns(df.count(), 0)
    function = task_function(config, end_of_input, hook, owner, batch_id, names, processing_time_ms)
    rows = df.toDF(*[f"_{i}" for i in range(len(names))]).mapInArrow(function, "report string").collect()
    reports = [TaskReport.from_json(row.report) for row in rows]
    if not any(not r.skipped for r in reports):
        return False
    try:
        now = now_ms() if processing_time_ms is None else processing_time_ms
        return commit_batch(config, batch_id, reports, lease, now, end_of_input, hook)
    except BaseException:
        discard_after_failed_commit(config, reports)
        raise


def _checkpoint_query_id(checkpoint_location: str) -> str | None:
    """The id of the query a checkpoint belongs to (Spark keeps it in ``<checkpoint>/metadata``), if readable."""
    try:
        from fsspec.core import url_to_fs

        fs, path = url_to_fs(checkpoint_location)
        return str(json.loads(fs.cat_file(f"{path.rstrip('/')}/metadata").decode().splitlines()[0])["id"])
    except Exception:  # noqa: BLE001 - a new checkpoint, or a filesystem fsspec cannot read: not the same query
        return None


def start_query(
    sink: SinkConfig,
    df: DataFrame,
    checkpoint_location: str,
    options: Mapping[str, str],
    trigger: Mapping[str, Any] | None = None,
    hook: PhaseHook | None = None,
    take_over: bool = False,
    api: str = "auto",
) -> StreamingQuery:
    """Start a streaming query writing ``df`` into ``sink``; it holds the directory's lease while it runs."""
    if api not in APIS:
        raise ValueError(f"FileSink.start api={api!r} is unknown; choose one of {APIS}")
    if api == "data_source" and not has_data_source_writer():
        raise ValueError("FileSink.start api='data_source' needs pyspark 4.1 or later; use api='foreach_batch'")
    hook = hook or no_hook
    if not isinstance(checkpoint_location, str) or not checkpoint_location.strip():
        raise ValueError(f"FileSink.start checkpoint_location={checkpoint_location!r} must be a directory's path or URL")
    # Spark takes a relative one from the JVM's working directory, and this process read the query id from its own
    # (a notebook's %cd): a restart of a query that died was then refused as held until its lease ran out.
    checkpoint_location = absolute_if_local(checkpoint_location)
    check_frame(sink, df)
    bounded = is_bounded(trigger)
    query_id = _checkpoint_query_id(checkpoint_location)
    owner = f"query-{query_id}" if query_id else None
    directory = SinkDirectory(sink)
    lease = directory.lease(owner)
    try:
        directory.take(lease, take_over, lambda held: owner is not None and held.get("owner") == owner)
        if bounded:
            finish_open_parts(sink, lease, hook)  # what an earlier unbounded run left open becomes readable now
        if api == "data_source" or (api == "auto" and has_data_source_writer()):
            from .spark_source import register_source

            name = register_source(df.sparkSession, sink, (lease.epoch, lease.token), bounded, hook)
            stream = df.writeStream.format(name)
        else:
            stream = df.writeStream.foreachBatch(_each_batch(sink, lease, bounded, hook, checkpoint_location))
        stream = stream.option("checkpointLocation", checkpoint_location)
        for key, value in options.items():
            stream = stream.option(key, value)
        if trigger:
            stream = stream.trigger(**trigger)
        query = stream.start()
    except BaseException:
        lease.release()
        raise
    RUNNING_HERE[lease.token] = lambda: bool(query.isActive)
    threading.Thread(target=_keep_lease, args=(query, lease), daemon=True, name="file-sink-lease").start()
    return query


def _each_batch(sink: SinkConfig, lease: Lease, bounded: bool, hook: PhaseHook,
                checkpoint_location: str) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function of pyspark 3.5 and 4.0."""

    def each(batch: DataFrame, batch_id: int) -> None:
        owner = f"query-{_running_query_id(batch, checkpoint_location)}"
        directory = SinkDirectory(sink)
        state = load_state(directory.fs, directory.root)
        if state is not None and state.committed_for(owner) >= batch_id:
            return  # a replay of a committed batch: do not even compute it
        write_with_tasks(sink, batch, owner, batch_id, lease, bounded, hook)

    return each


def _running_query_id(batch: DataFrame, checkpoint_location: str) -> str:
    """The id of the query a ``foreachBatch`` call belongs to: a local property of the SparkContext, or over Spark
    Connect, which has none, the one Spark wrote into the checkpoint when the query started."""
    from pyspark.errors import PySparkAttributeError

    try:
        return str(batch.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId"))
    except PySparkAttributeError:  # Spark Connect: "Attribute 'sparkContext' is not supported"
        query_id = _checkpoint_query_id(checkpoint_location)
        if query_id is None:
            raise RuntimeError(f"the file sink found no query id in the checkpoint {checkpoint_location!r} "
                               "(Spark writes it into <checkpoint>/metadata when the query starts)") from None
        return query_id


def _keep_lease(query: StreamingQuery, lease: Lease) -> None:
    """Renew the lease while the query runs, then release it.

    Only a query seen stopped is marked so in ``RUNNING_HERE``, and its entry stays: a new writer that read the lease
    just before the release checks it just after, and must still see the holder stopped (dropping the entry refused
    that writer). An error asking the query or renewing (a py4j or Spark Connect call, the filesystem) is tried again
    until the lease would have run out since its last renewal; fenced, or failing that long (the JVM gone), the entry
    goes: the query is no longer known running or stopped here, and its commits check the lease themselves.
    """
    renewed = time.monotonic()
    while True:
        try:
            if not query.isActive:
                break
            if time.monotonic() - renewed >= lease.seconds / 3:
                lease.renew(force=True)
                renewed = time.monotonic()
        except Exception as error:  # noqa: BLE001 - any error of the call or the filesystem: see above
            if isinstance(error, lease.wording.fenced_error) or time.monotonic() - renewed >= lease.seconds:
                RUNNING_HERE.pop(lease.token, None)
                return
        time.sleep(0.5)
    RUNNING_HERE[lease.token] = _stopped
    try:
        lease.release()
    except Exception:  # noqa: BLE001 - the lease runs out by itself; the entry says the query stopped
        pass


def _stopped() -> bool:
    return False
