"""Compaction of finished parts: many small parts of a bucket merged into few, committed atomically.

Flink's FileSink compacts pending files before it commits them; here the parts
are already finished (a query with many partitions and short batches leaves
many small ones), so a compaction is a commit of its own: each group of small
neighbouring parts of a bucket, up to ``target_size`` bytes, is written as one
new hidden part (row formats: the parts' rows concatenated, as Flink's
``ConcatFileCompactor`` does, under one CSV header, segments sealed again;
bulk formats: the parts' rows read and written again, as its
``RecordWiseFileCompactor``), or as several where its parts differ in schema
or CSV header, so no row is read under another's columns. The new parts are
named as the directory's writer names its next parts, numbered on (no
replaced part's name, which recovery deletes, and none a later writer gives);
then one commit record names them and the parts they replace. Publishing it
deletes the old parts, then renames the new ones in; a crash between is
finished by the next writer. ``FileSink.read()`` never sees a row twice or
misses one; a reader listing the directory while the commit publishes may
miss a group's rows for that moment.

The compaction holds the directory's lease, so it runs between a query's runs
(after a scheduled ``availableNow`` run, for example); with ``spark`` its
groups are merged by Spark tasks, so no row passes through the driver.
"""

from __future__ import annotations

import dataclasses
import pickle
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

from .codec import decompress, unseal
from .config import SinkConfig
from .directory import INPROGRESS, SinkDirectory
from .parts import FLUSH_BYTES, SpillingOutput
from .reading import natural_order
from .state import PartRecord, SinkState, finished_parts

DEFAULT_TARGET_SIZE = 128 * 1024 * 1024


@dataclass(frozen=True)
class Compacted:
    """What a compaction did: how many finished parts it replaced by how many."""

    replaced: int
    written: int


@dataclass(frozen=True)
class _Group:
    bucket_dir: str
    inputs: tuple[tuple[str, int, int, str], ...]  # finished path, committed length, CRC-32, schema digest


def compact(config: SinkConfig, target_size: int = DEFAULT_TARGET_SIZE, spark: Any = None,
            take_over: bool = False) -> Compacted:
    """Merge small finished parts; a group is neighbouring parts of one bucket of at most ``target_size`` bytes."""
    if isinstance(target_size, bool) or not isinstance(target_size, int) or target_size <= 0:
        raise ValueError(f"FileSink.compact target_size={target_size!r} must be a positive number of bytes")
    directory = SinkDirectory(config)
    lease = directory.lease("compaction")
    try:
        state = directory.take(lease, take_over)
        if state is None:
            return Compacted(0, 0)
        finished = finished_parts(directory.fs, directory.root, state)
        # Parts finished under other settings keep theirs: merged into this format, their rows would be garbage.
        groups = _groups({path: part for path, part in finished.parts.items() if config.as_written(path) is config},
                         target_size)
        if not groups:
            return Compacted(0, 0)
        token = uuid.uuid4().hex[:12]
        work = [(config, group, f".compaction-{token}-{i}") for i, group in enumerate(groups)]
        if spark is not None:
            outputs = _merged_by_spark_tasks(spark, work)
        else:
            outputs = [_merge(*args) for args in work]
        merged = [rec for recs in outputs for rec in recs]
        try:
            written, next_part = _named(directory, state, merged)
        except ValueError:
            directory.remove([r.path for r in merged])
            raise
        committed = dataclasses.replace(
            state,
            next_part=next_part,
            finalize=[(r.path, r.final_path) for r in written],
            finished=[(r.final_path, r.length, r.crc, r.schema) for r in written],
            removed=[path for group in groups for path, *_ in group.inputs],
            schemas={**finished.schemas, **state.schemas},
            sequence=state.sequence + 1,
        )
        directory.publish(committed, lease, [r.path for r in written], lambda phase, batch_id: None)
        return Compacted(len(committed.removed), len(written))
    finally:
        lease.release()


def _merged_by_spark_tasks(spark: Any, work: list[tuple[SinkConfig, _Group, str]]) -> list[list[PartRecord]]:
    """``_merge`` of each group in a Spark task of its own, the outputs in the groups' order: a DataFrame of group
    numbers through ``mapInPandas``, which a Spark Connect session runs too (it has no SparkContext)."""
    import pandas as pd

    def merge(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            for i in frame["i"].tolist():
                yield pd.DataFrame({"i": [i], "records": [pickle.dumps(_merge(*work[i]))]})

    groups = spark.range(0, len(work), 1, len(work)).selectExpr("CAST(id AS INT) AS i")
    rows = groups.mapInPandas(merge, "i int, records binary").collect()
    return [pickle.loads(row["records"]) for row in sorted(rows, key=lambda row: row["i"])]


def _groups(finished: dict[str, tuple[int, int, str]], target_size: int) -> list[_Group]:
    """Neighbouring finished parts per bucket directory, each group of 2 or more summing to ``target_size`` at most."""
    by_dir: dict[str, list[tuple[str, int, int, str]]] = {}
    for path, (length, crc, schema) in finished.items():
        by_dir.setdefault(path.rsplit("/", 1)[0], []).append((path, length, crc, schema))
    groups = []
    for folder, parts in sorted(by_dir.items()):
        current: list[tuple[str, int, int, str]] = []
        for part in sorted(parts, key=lambda p: natural_order(p[0])):
            if current and sum(p[1] for p in current) + part[1] > target_size:
                if len(current) > 1:
                    groups.append(_Group(folder, tuple(current)))
                current = []
            if part[1] < target_size:
                current.append(part)
        if len(current) > 1:
            groups.append(_Group(folder, tuple(current)))
    return groups


def _named(directory: SinkDirectory, state: SinkState, outputs: list[PartRecord]
           ) -> tuple[list[PartRecord], dict[str, int]]:
    """The outputs with the final names the directory's writer would give its next parts, and the part numbers
    after them.

    Numbered on from the record's ``next_part``, which the commit advances, so a
    later writer numbers its parts after them. A name that a file of the bucket
    directory (a replaced part among them), an open part or another output has
    is refused: renaming onto it would lose rows, and recovery deletes a replaced name.
    """
    next_part = dict(state.next_part)
    taken = {p.final_path for p in state.open_parts}
    listed: set[str] = set()
    named = []
    for rec in outputs:
        folder = rec.path.rsplit("/", 1)[0]
        if folder not in listed:
            taken.update(f"{folder}/{p.rstrip('/').rsplit('/', 1)[-1]}" for p in directory.fs.ls(folder, detail=False))
            listed.add(folder)
        bucket = folder[len(directory.root) + 1 :]
        number = next_part.get(bucket, 0)
        next_part[bucket] = number + 1
        final_path = f"{folder}/{directory.config.part_file_name(state.writer_id, number)}"
        if final_path in taken:
            raise ValueError(
                f"FileSink.compact: part {number} of bucket {bucket!r} would be named {final_path!r}, which "
                "another part already has; renaming onto it would lose its rows. A with_part_names fn must use "
                "the part number; if that part is another writer's, give this sink a prefix of its own"
            )
        taken.add(final_path)
        named.append(dataclasses.replace(rec, bucket=bucket, number=number, final_path=final_path))
    return named, next_part


def _merge(config: SinkConfig, group: _Group, stem: str) -> list[PartRecord]:
    """Write one group as new hidden parts (one, unless its parts differ in schema, recorded or a bulk file's own, or
    CSV header); their records, to be given final names once every group is merged."""
    directory = SinkDirectory(config)
    fs, fmt = directory.fs, config.file_format
    outputs = _Outputs(config, directory, group.bucket_dir, stem)

    def plain(path: str, length: int, crc: int) -> bytes:
        data = fs.cat_file(path)
        if len(data) != length or zlib.crc32(data) != crc:
            raise ValueError(f"FileSink.compact: finished part {path} is not as committed; read() names the damage")
        return unseal(data, config.key)

    if fmt.bulk:
        writer, schema, schema_key = None, None, None
        for path, length, crc, recorded in group.inputs:
            table = fmt.read_table(plain(path, length, crc))
            if writer is None or not table.schema.equals(schema) or recorded != schema_key:  # another schema
                if writer is not None:
                    writer.close()
                writer = fmt.open_writer(outputs.start(recorded), config.compression)
                schema, schema_key = table.schema, recorded
            writer.write(table)
        assert writer is not None
        writer.close()
    else:
        header, schema_key = None, None
        for path, length, crc, recorded in group.inputs:
            text = decompress(plain(path, length, crc), config.compression)
            part_header = fmt.header_of(text)
            if (part_header, recorded) != (header, schema_key):  # the first part, or another header or schema: a new part
                header, schema_key, out = part_header, recorded, outputs.start(recorded)
                out.write(header)
            out.write(text[len(part_header) :])
    return outputs.finish()


class _Outputs:
    """The new hidden parts ``<stem>-<i>`` a group is written as, one after the other."""

    def __init__(self, config: SinkConfig, directory: SinkDirectory, folder: str, stem: str) -> None:
        self._config, self._directory, self._folder, self._stem = config, directory, folder, stem
        self._records: list[PartRecord] = []
        self._current: SpillingOutput | None = None

    def start(self, schema: str) -> SpillingOutput:
        """Finish the current part and start the next, of the schema digest ``schema``; a row format's is sealed
        per flush, as a writer's."""
        self._finish_current()
        rec = PartRecord("", 0, f"{self._folder}/{self._stem}-{len(self._records)}{INPROGRESS}", "", 0, 0, 0, 0, 0,
                         schema=schema)
        self._records.append(rec)
        if self._config.file_format.bulk:
            self._current = SpillingOutput(self._directory.fs, rec.path, self._config.key)
        else:
            self._current = SpillingOutput(self._directory.fs, rec.path, self._config.key, self._config.compression,
                                           FLUSH_BYTES)
        return self._current

    def finish(self) -> list[PartRecord]:
        """Finish the last part and make them all durable; their records."""
        self._finish_current()
        for rec in self._records:
            self._directory.sync(rec.path)
        self._directory.sync(self._folder)
        return self._records

    def _finish_current(self) -> None:
        if self._current is not None:
            self._current.finish()
            rec = self._records[-1]
            rec.length, rec.segments, rec.crc = self._current.length, self._current.segments, self._current.crc
