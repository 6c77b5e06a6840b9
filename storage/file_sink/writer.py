"""``SinkWriter``: the part-file lifecycle and the exactly-once commit, one micro-batch at a time, in one process.

Lifecycle of a part file (Flink's, with Apex's recovery by truncation)::

    .part-w-3.jsonl.inprogress   in-progress: hidden, appended to, batch after batch
    .part-w-3.jsonl.inprogress   pending: rolled, waiting for its batch's commit
    part-w-3.jsonl               finished: renamed after the commit record is durable

A batch is committed by writing the commit record (``state.py``) that holds
the batch id, the committed length of every in-progress part and the renames
still due. On restart the newest record is the truth (``directory.py``). A
batch id at or below the writer's committed one is a replay and writes nothing.
The writer holds the directory's lease while it lives: a second writer is
refused, and one that took over a dead writer's lease fences it off.
"""

from __future__ import annotations

import dataclasses
import numbers
import uuid
import weakref
from collections import OrderedDict
from typing import Any

import pandas as pd
import pyarrow as pa

from .._lease import Lease
from .config import SinkConfig
from .directory import INPROGRESS, SinkDirectory
from .errors import SinkFencedError
from .parts import PartFiles, PhaseHook, no_hook, refuse_duplicate_columns, refuse_rows_without_columns
from .state import PartRecord, SinkState, load_state

#: The owner (whose batch ids the commit records keep) of a writer given no writer id.
DEFAULT_OWNER = "default"
#: Bucket directories whose names the writer keeps, the most recently used: a stream that moves on
#: to new buckets forever (``DateTimeBuckets``) must not keep every directory it ever wrote to.
LISTED_DIRECTORIES = 256


def check_batch_arguments(owner: str, batch_id: Any, processing_time_ms: Any) -> None:
    """Refuse a batch id or time that is not a non-negative int, naming the parameter and the value."""
    for name, value in (("batch_id", batch_id), ("processing_time_ms", processing_time_ms)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(
                f"{owner} {name}={value!r} must be an int, not {type(value).__name__}"
                + ("; batch ids are Spark's, or your own counter from 0" if name == "batch_id"
                   else "; milliseconds since 1970, e.g. int(time.time() * 1000)")
            )
        if value < 0:
            raise ValueError(
                f"{owner} {name}={value!r} must be 0 or more"
                + ("; batch ids count from 0, and a negative one would be skipped as already committed"
                   if name == "batch_id" else "; milliseconds since 1970")
            )


class SinkWriter:
    """Writes micro-batches into part files of one sink directory, as its only writer."""

    def __init__(self, sink: SinkConfig, hook: PhaseHook | None = None, take_over: bool = False) -> None:
        self._sink = sink
        self._hook = hook or no_hook
        self._directory = SinkDirectory(sink)
        self._owner = sink.writer_id or DEFAULT_OWNER
        self._lease = self._directory.lease(owner=self._owner)
        self._unclean = self._directory.claim(self._lease, take_over)
        self._released = weakref.finalize(self, self._lease.release)  # also when the writer is dropped unclosed
        self._rollback_failure: BaseException | None = None
        self._fenced: SinkFencedError | None = None
        self._state = SinkState(writer_id=sink.writer_id or uuid.uuid4().hex[:12])  # kept until the first record
        self._names = _WriterNames(sink, self._directory)
        self._files = PartFiles(sink, self._directory, self._names, self._hook)
        self._orphans: list[PartRecord] = []  # open parts another writer left: finished at the next commit
        try:
            self._restore()
        except BaseException:
            self.close()
            raise

    @property
    def committed_batch_id(self) -> int:
        """The id of this writer's last committed batch, -1 before its first."""
        return self._state.committed_for(self._owner)

    @property
    def lease(self) -> Lease:
        """The writer's hold on the directory."""
        return self._lease

    @property
    def open_handle_count(self) -> int:
        """How many part files the writer holds open right now."""
        return self._files.open_handle_count

    # ---------------------------------------------------------------- recovery

    def _restore(self) -> None:
        """Forget everything uncommitted: close the streams, reload the newest record, recover the directory to it."""
        self._files.close()
        state = load_state(self._directory.fs, self._directory.root)
        if state is not None:
            self._directory.refuse_changed_settings(state)
        if self._unclean:
            state = self._directory.fence(state, self._lease, self._state.writer_id)
        self._state = state or SinkState(writer_id=self._state.writer_id)
        self._names.forget(self._state)
        self._files = PartFiles(self._sink, self._directory, self._names, self._hook)
        self._directory.recover(state)
        if self._unclean:
            state = self._directory.detach(state, self._lease)
            self._state = state or self._state
            self._names.forget(self._state)
            self._unclean = False
        mine = state is not None and state.owner in (None, self._owner)
        parts = state.open_parts if state is not None else []
        self._files.adopt([p for p in parts if mine and not p.slot], state.schemas if state is not None else {})
        self._orphans = [p for p in parts if not mine or p.slot]

    # ------------------------------------------------------------------ writing

    def write_batch(
        self, data: pa.Table | pd.DataFrame, batch_id: int, processing_time_ms: int, end_of_input: bool = False
    ) -> bool:
        """Write and commit one batch; False if ``batch_id`` was already committed (a replay).

        The pandas runner feeds its panes here, one step or micro-batch per call.
        A batch that raises is rolled back to the last commit, so the same
        writer can retry it (or write another) without losing or duplicating rows.
        """
        check_batch_arguments("SinkWriter.write_batch", batch_id, processing_time_ms)
        self._refuse_if_broken()
        if batch_id <= self.committed_batch_id:
            return False
        table = to_table(data)
        self._sink.check_bucket_column(table.schema)
        self._run(table, int(batch_id), int(processing_time_ms), end_of_input)
        return True

    def finish(self, processing_time_ms: int) -> bool:
        """Finish every in-progress part, committed again under the last batch id; False if none was open.

        End of input for a run whose batches were all committed before: a new
        batch id would be skipped as a replay by a later, longer run of the same stream.
        """
        check_batch_arguments("SinkWriter.finish", 0, processing_time_ms)
        self._refuse_if_broken()
        if not self._files.parts and not self._orphans:
            return False
        self._run(pa.table({}), self.committed_batch_id, int(processing_time_ms), end_of_input=True)
        return True

    def _refuse_if_broken(self) -> None:
        if self._fenced is not None:
            raise SinkFencedError(f"SinkWriter cannot write: {self._fenced}") from self._fenced
        if self._rollback_failure is not None:
            raise RuntimeError(
                f"SinkWriter cannot write: rolling back a failed batch failed too ({self._rollback_failure!r}); "
                "make a new writer with FileSink.writer(), which recovers the directory from its commit record"
            ) from self._rollback_failure

    def _run(self, data: pa.Table, batch_id: int, now: int, end_of_input: bool) -> None:
        try:
            self._lease.renew()
            self._stage_and_commit(data, batch_id, now, end_of_input)
        except SinkFencedError as fenced:
            self._stop_fenced(fenced)
            raise
        except BaseException as failure:
            try:
                self._lease.confirm("roll a failed batch back")  # a writer taken over fails for that reason
            except SinkFencedError as fenced:
                self._stop_fenced(fenced)
                raise fenced from failure
            self._roll_back()
            raise

    def _stop_fenced(self, fenced: SinkFencedError) -> None:
        self._fenced = fenced  # the directory is another writer's now: touch nothing
        self._files.close()

    def _roll_back(self) -> None:
        try:
            self._restore()
        except BaseException as failure:
            self._rollback_failure = failure  # half restored: refuse to write on top of it
            raise

    def _stage_and_commit(self, data: pa.Table, batch_id: int, now: int, end_of_input: bool) -> None:
        self._files.start_batch(now)
        self._files.write(data, now, batch_id)
        self._files.end_batch(now, batch_id, end_of_input)
        self._hook("after_staging", batch_id)
        for orphan in self._orphans:
            self._directory.seal_final(orphan)
        rolled = self._files.pending + [(p.path, p.final_path, p.length, p.crc, p.schema) for p in self._orphans]
        pending = [(src, dst) for src, dst, *_ in rolled]
        finished = [(dst, n, crc, schema) for _, dst, n, crc, schema in rolled]
        state = self._state
        committed = dataclasses.replace(
            state,
            batch_id=batch_id,
            open_parts=self._files.open_records(),
            finalize=pending,
            settings=self._directory.settings(),
            sequence=state.sequence + 1,
            owner=self._owner,
            owners={**state.owners, self._owner: batch_id},
            finished=finished,
            removed=[],
            schemas={**state.schemas, **self._files.schemas.texts},
            next_part=dict(state.next_part),
        )
        unsynced = sorted(self._files.unsynced_files) + sorted(self._files.unsynced_dirs)
        self._directory.publish(committed, self._lease, unsynced, self._commit_hook(committed))
        self._orphans = []

    def _commit_hook(self, committed: SinkState) -> PhaseHook:
        """The hook, and the committed state adopted as soon as the record is durable."""

        def hook(phase: str, batch_id: int) -> None:
            if phase == "after_commit_record":
                self._state = self._names.state = committed  # only now: until the record is written it is not
            self._hook(phase, batch_id)

        return hook

    def close(self) -> None:
        """Close every open stream and give the directory up; parts stay in progress (committed) for the next writer."""
        self._files.close()
        self._released()


class _WriterNames:
    """Part names of a ``SinkWriter``: ``<prefix>-<writer id>-<n><suffix>``, numbered per bucket in the record.

    A class of its own, not the writer's method, so that the writer's part files
    do not refer back to it: a writer dropped without ``close()`` is freed, and
    gives its lease up, at once.
    """

    def __init__(self, sink: SinkConfig, directory: SinkDirectory) -> None:
        self._sink, self._directory = sink, directory
        self.state = SinkState(writer_id="")
        self._names_in_directory: OrderedDict[str, set[str]] = OrderedDict()  # least recently used first

    def forget(self, state: SinkState) -> None:
        """Name from ``state`` on, listing each directory again (after a restore)."""
        self.state = state
        self._names_in_directory = OrderedDict()

    def __call__(self, bucket: str) -> tuple[int, str, str]:
        """The number, in-progress path and final path of the bucket's next part, in a directory that exists."""
        number = self.state.next_part.get(bucket, 0)
        self.state.next_part[bucket] = number + 1
        name = self._sink.part_file_name(self.state.writer_id, number)
        self._directory.check_part_name(name)
        levels = bucket.split("/") if bucket else []
        directory = "/".join([self._directory.root, *levels])
        temp = f".{name}{INPROGRESS}"
        taken = self._names_in(directory)
        if name in taken or temp in taken:  # renaming onto it would lose rows
            raise ValueError(
                f"FileSink part {number} of bucket {bucket!r} would be named {name!r}, which another part already "
                f"has ({name if name in taken else temp!r} in {directory}); renaming onto it would lose its rows. "
                "If that part is another writer's, or, on a case-insensitive filesystem, one in a directory whose "
                "name differs only in case (ColumnBuckets of earlier releases named k=True what is now k=true), give "
                "this sink a prefix of its own, with_part_names(prefix='part2'); if this writer named it, a "
                "with_part_names fn must use the part number"
            )
        taken.update((temp, name))
        return number, f"{directory}/{temp}", f"{directory}/{name}"

    def _names_in(self, directory: str) -> set[str]:
        """The file names in a bucket directory, which is made if missing.

        Listed once (and after a rollback, or once ``LISTED_DIRECTORIES`` other
        directories were used since), then kept up to date by the writer, the
        directory's only one: no round trip per new part.
        """
        names = self._names_in_directory.pop(directory, None)
        if names is None:
            fs = self._directory.fs
            try:
                names = {path.rstrip("/").rsplit("/", 1)[-1] for path in fs.ls(directory, detail=False)}
            except FileNotFoundError:
                names = set()
            if not names:
                fs.makedirs(directory, exist_ok=True)
        self._names_in_directory[directory] = names
        while len(self._names_in_directory) > LISTED_DIRECTORIES:
            self._names_in_directory.popitem(last=False)
        return names


def to_table(df: Any) -> pa.Table:
    """An Arrow table from pandas or Arrow (Spark frames are written by their executors, ``spark.py``)."""
    if isinstance(df, pa.Table):
        return df
    if isinstance(df, pd.DataFrame):
        # A named index holds values (a groupby's keys): written as columns, as reset_index() makes them (they were
        # dropped without a word). An unnamed one holds positions (a filter's leftovers) and is not written.
        named = [name for name in df.index.names if name is not None]
        refuse_duplicate_columns([*named, *df.columns.tolist()])  # as any batch's, before pyarrow's own words for it
        table = pa.Table.from_pandas(df.reset_index(level=named) if named else df, preserve_index=False)
        refuse_rows_without_columns(len(df), table.num_columns)  # pyarrow's table of no columns has no rows
        return table
    raise TypeError(f"FileSink cannot write a {type(df).__name__}; pass a pandas, Arrow or Spark DataFrame")
