"""Executor side of a Spark query: one task attempt writes its partition of a micro-batch into part files.

No row goes to the driver: each attempt writes hidden in-progress files and
returns a ``TaskReport`` (what it wrote, a few hundred bytes) that the driver
commits (``commit.py``). Attempts are told apart by a random token in their
part names, so a retried or duplicate attempt of the same partition never
writes into another's files, and the commit takes the parts of the one attempt
Spark reports for each partition; the others' files are deleted.

Rolling across batches: the partition's slot ``p<n>`` keeps its in-progress
parts from batch to batch where the filesystem appends. An attempt appends to
them in place only if it is the first of its batch to claim the slot (an
exclusive file) and each part is exactly its committed length; otherwise it
copies the committed bytes into parts of its own, so that an attempt that
lost, and may still be running, never shares a file with the one that goes on.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from queue import Queue
from typing import Any

import pyarrow as pa

from .config import SinkConfig
from .directory import INPROGRESS, TASKS_DIR, SinkDirectory
from .parts import PartFiles, PhaseHook, no_hook
from .state import PartRecord, SinkState, load_state

_COPY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class TaskInfo:
    """What Spark tells a task: whose batch, which one, which partition, which attempt, and the time."""

    owner: str
    batch_id: int
    partition: int
    attempt: int
    now_ms: int


@dataclass
class TaskReport:
    """What one task attempt wrote: the commit message it returns to the driver."""

    owner: str
    batch_id: int
    slot: str
    attempt: int
    token: str
    skipped: bool = False  # the batch was committed before (a replay): nothing written
    open_parts: list[PartRecord] = field(default_factory=list)  # the slot's parts still in progress
    pending: list[tuple[str, str, int, int, str]] = field(default_factory=list)  # rolled: in-progress, final, length,
    # CRC, schema digest
    schemas: dict[str, str] = field(default_factory=dict)  # the texts of the schemas its parts name
    superseded: list[str] = field(default_factory=list)  # the slot's parts this attempt copied into its own
    created: list[str] = field(default_factory=list)  # every file this attempt made
    rows: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> TaskReport:
        raw = json.loads(text)
        raw["open_parts"] = [PartRecord(**p) for p in raw["open_parts"]]
        raw["pending"] = [tuple(p) for p in raw["pending"]]
        return cls(**raw)


def attempts_dir(root: str, owner: str, batch_id: int) -> str:
    """Where the attempts of one batch say they ran, and claim their slot's parts."""
    return f"{root}/{TASKS_DIR}/{owner}-{batch_id}"


def base_writer_id(config: SinkConfig, owner: str) -> str:
    """The part-name writer id of a query's attempts: the sink's, else the query id's first 8 characters."""
    return config.writer_id or owner.removeprefix("query-")[:8]


def write_task(config: SinkConfig, task: TaskInfo, batches: Iterable[pa.RecordBatch | pa.Table],
               end_of_input: bool = False, hook: PhaseHook = no_hook) -> TaskReport:
    """Write one partition of batch ``task.batch_id`` as attempt ``task.attempt``; what it wrote, for the commit."""
    directory = SinkDirectory(config)
    fs, root = directory.fs, directory.root
    slot = f"p{task.partition}"
    token = uuid.uuid4().hex[:16]
    report = TaskReport(task.owner, task.batch_id, slot, task.attempt, token)
    state = load_state(fs, root)
    if state is not None and state.committed_for(task.owner) >= task.batch_id:
        report.skipped = True  # Spark replays a batch it had not marked done, which the sink had committed
        return report
    attempts = attempts_dir(root, task.owner, task.batch_id)
    fs.makedirs(attempts, exist_ok=True)
    fs.pipe_file(f"{attempts}/{slot}-{token}", b"")  # so the commit finds the files of the attempts that lost
    names = _TaskNames(config, directory, f"{base_writer_id(config, task.owner)}-{token}")
    files = PartFiles(config, directory, names, hook, slot)
    files.start_batch(task.now_ms)
    try:
        hook("before_claim", task.batch_id)
        files.adopt(_continue(config, directory, state, task, slot, names, files, report),
                    state.schemas if state is not None else {})
        hook("task_started", task.batch_id)
        for batch in prefetched(batches):
            table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
            if table.num_rows:
                files.write(table, task.now_ms, task.batch_id)
                report.rows += table.num_rows
        files.end_batch(task.now_ms, task.batch_id, end_of_input)
    finally:
        files.close()  # a failed attempt's too: Python workers are reused, and its files are deleted later
    for path in sorted(files.unsynced_files) + sorted(files.unsynced_dirs):
        directory.sync(path)  # durable before the driver commits what this report promises
    report.open_parts = files.open_records()
    report.pending = list(files.pending)
    report.schemas = dict(files.schemas.texts)
    report.created = sorted(names.created)
    return report


def prefetched(items: Iterable[Any], depth: int = 8) -> Iterator[Any]:
    """``items``, pulled by a thread of their own up to ``depth`` ahead.

    Spark's JVM writes a task's record batches to a socket that holds about one;
    without a reader ahead, it waits while this process encodes and writes the
    one before. Arrow and numpy let the GIL go, so the two overlap.
    """
    queue: Queue[Any] = Queue(maxsize=depth)
    done = object()

    def pull() -> None:
        try:
            for item in items:
                queue.put(item)
            queue.put(done)
        except BaseException as failure:  # noqa: BLE001 - handed over to the consumer, which raises it
            queue.put(_Failure(failure))

    threading.Thread(target=pull, daemon=True, name="file-sink-prefetch").start()
    while True:
        item = queue.get()
        if item is done:
            return
        if isinstance(item, _Failure):
            raise item.error
        yield item


@dataclass(frozen=True)
class _Failure:
    error: BaseException


def _continue(config: SinkConfig, directory: SinkDirectory, state: SinkState | None, task: TaskInfo, slot: str,
              names: _TaskNames, files: PartFiles, report: TaskReport) -> list[PartRecord]:
    """The slot's committed in-progress parts this attempt goes on with: in place if it may, else copies."""
    if state is None or state.owner != task.owner or config.file_format.bulk:
        return []
    committed = [p for p in state.open_parts if p.slot == slot]
    if not committed:
        return []
    claimed = _claim(directory, f"{attempts_dir(directory.root, task.owner, task.batch_id)}/{slot}.claim")
    out = []
    for rec in committed:
        if claimed and directory.check_open_part(rec, state, truncate=False) == rec.length:
            out.append(rec)
            continue
        _, temp, final = names(rec.bucket)
        _copy_prefix(directory, rec.path, temp, rec.length)
        files.unsynced_files.add(temp)
        out.append(PartRecord(**{**vars(rec), "number": names.count - 1, "path": temp, "final_path": final}))
        report.superseded.append(rec.path)
    return out


def _claim(directory: SinkDirectory, path: str) -> bool:
    """Whether this attempt is the first of its batch to claim the slot (an exclusive create)."""
    if directory.local:
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        return True
    if directory.fs.exists(path):  # memory://: one process, where this check and the write do not race
        return False
    directory.fs.pipe_file(path, b"")
    return True


def _copy_prefix(directory: SinkDirectory, source: str, target: str, length: int) -> None:
    """Copy the first ``length`` bytes of ``source`` (its committed bytes) into the new file ``target``."""
    fs = directory.fs
    with fs.open(source, "rb") as src, fs.open(target, "wb") as dst:
        left = length
        while left:
            chunk = src.read(min(left, _COPY_BYTES))
            if not chunk:
                raise RuntimeError(f"in-progress part {source} ends before its {length} committed bytes")
            dst.write(chunk)
            left -= len(chunk)


class _TaskNames:
    """Part names of one attempt: ``<prefix>-<writer id>-<token>-<n><suffix>``, unique to the attempt."""

    def __init__(self, config: SinkConfig, directory: SinkDirectory, writer_id: str) -> None:
        self._config, self._directory, self._writer_id = config, directory, writer_id
        self._made: set[str] = set()
        self.count = 0
        self.created: set[str] = set()

    def __call__(self, bucket: str) -> tuple[int, str, str]:
        number = self.count
        self.count += 1
        name = self._config.part_file_name(self._writer_id, number)
        self._directory.check_part_name(name)
        levels = bucket.split("/") if bucket else []
        folder = "/".join([self._directory.root, *levels])
        if folder not in self._made:
            self._directory.fs.makedirs(folder, exist_ok=True)
            self._made.add(folder)
        temp = f"{folder}/.{name}{INPROGRESS}"
        self.created.add(temp)
        return number, temp, f"{folder}/{name}"


def describe_task_context(context: Any, now_ms: int, batch_id: int | None = None) -> TaskInfo:
    """A ``TaskInfo`` from pyspark's ``TaskContext`` of a streaming query's task."""
    query = context.getLocalProperty("sql.streaming.queryId")
    if batch_id is None:
        batch_id = int(context.getLocalProperty("streaming.sql.batchId"))
    return TaskInfo(f"query-{query}", batch_id, context.partitionId(), context.attemptNumber(), now_ms)
