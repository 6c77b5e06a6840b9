"""The splitter as a Spark streaming source (PySpark's Python Data Source API, pyspark >= 4.2).

Offsets carry everything a micro-batch needs, so a replayed batch reads the same blocks:

    {"v": 1, "n": <batch number>, "block_size": int, "protocol": str,
     "batch": [[path, segment_start, segment_end, first_block_offset, end_offset], ...],
     "state": <SplitState.to_json()>}

``partitions(start, end)`` reads only ``end["batch"]``; ``latestOffset`` restores the
state from ``start`` whenever it is not the offset this process returned last (a restart).
Each block is one Spark partition, so blocks are read in parallel.

``read_stream`` passes the internal option ``skipped_accumulator``, the id of an accumulator of
``SkippedBlock`` lists: with ``strict=False`` a task that skips an unreadable block adds it there,
and Spark brings it to the driver, which the warning in the executor's log never reaches.

``read_stream`` asks the source for chunk rows (the internal option ``rows=chunks``): one row
per ~256 KiB of records, which the JVM cuts into lines with native expressions. Spark turns a
Python source's Arrow batches into JVM rows one row at a time, and doing that per line was most
of the source's cost. Without the option the source emits one row per line, as documented.
"""

from __future__ import annotations

import gc
import json
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import pyspark

# pyspark 4.0 and 4.1 call ``latestOffset()`` without the start offset (no admission control), so a
# restarted query could not know where it stood: it would hand out the files from the beginning again.
if tuple(int(part) for part in pyspark.__version__.split(".")[:2]) < (4, 2):
    raise ImportError(
        f"the file splitter's Spark source needs pyspark >= 4.2 (Python Data Source streaming API with "
        f"admission control); found pyspark {pyspark.__version__}. Upgrade pyspark, or use "
        f"FileSplitter.read_lines() with pandas."
    )

import fsspec
import pyarrow as pa
from pyspark import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, SupportsTriggerAvailableNow
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType

from storage.splitter.config import LOCATION_COLUMNS, SplitterConfig, quote_name
from storage.splitter.metadata import BlockMetadata, FileMetadata
from storage.splitter.planner import BlockPlanner
from storage.splitter.readers import OnSkip, SkippedBlock, chunk_batches, line_batches, read_csv_table
from storage.splitter.state import SplitState
from storage.worker_socket import acknowledge_arrivals_at_once

FORMAT = "file_splitter"
#: Line rows per Arrow batch: bounded batches let Spark start converting rows before a piece is sent.
_ROWS_PER_BATCH = 64 * 1024
#: The ``rows`` option: ``lines`` (default, ``SCHEMA``) or ``chunks`` (``CHUNK_SCHEMA``, text only).
ROWS = ("lines", "chunks")
#: Not nullable, like ``LINE_SCHEMA`` (no value is ever null): Spark then converts Arrow to rows
#: without a null check per value.
SCHEMA = StructType(
    [
        StructField("value", StringType(), nullable=False),
        StructField("path", StringType(), nullable=False),
        StructField("block_id", LongType(), nullable=False),
        StructField("offset", LongType(), nullable=False),
    ]
)


#: ``readers.CHUNK_SCHEMA`` as Spark declares it.
CHUNK_SCHEMA = StructType(
    [
        StructField("path", StringType(), nullable=False),
        StructField("block_id", LongType(), nullable=False),
        StructField("base", LongType(), nullable=False),
        StructField("text", BinaryType(), nullable=False),
        StructField("starts", ArrayType(IntegerType(), containsNull=False), nullable=False),
        StructField("lengths", ArrayType(IntegerType(), containsNull=False), nullable=False),
    ]
)


def source_schema(config: SplitterConfig) -> StructType:
    """``SCHEMA`` for text; for CSV, the columns as strings (as read) and then ``path, block_id, offset``."""
    if config.format != "csv":
        return SCHEMA
    return StructType([StructField(name, StringType()) for name, _ in config.columns or ()] + SCHEMA.fields[1:])


class _SkippedBlocksParam(AccumulatorParam):
    """Joins lists of ``SkippedBlock``: each task adds its own, the driver reads them all. A new list
    each time, as the driver's value is read while Spark's thread adds to it."""

    def zero(self, value: list[SkippedBlock]) -> list[SkippedBlock]:
        return []

    def addInPlace(self, value1: list[SkippedBlock], value2: list[SkippedBlock]) -> list[SkippedBlock]:
        return value1 + value2


class NoSkippedBlocksListWarning(UserWarning):
    """The session has no accumulators: blocks skipped by a query show in executors' logs only."""


def skipped_blocks_accumulator(spark: SparkSession) -> Accumulator[list[SkippedBlock]] | None:
    """An empty accumulator for ``read_stream(..., skipped)``, or None with a warning where the session
    has no SparkContext (Spark Connect, some shared clusters): the query still runs, and the blocks
    it skips are only in the executors' logs, as with ``format("file_splitter")`` used directly."""
    try:
        context = spark.sparkContext
    except Exception as err:  # Connect raises its own "not implemented"; restricted clusters, a JVM error
        warnings.warn(f"cannot list the blocks this query skips (strict=False) in skipped_blocks: the session "
                      f"has no SparkContext ({type(err).__name__}: {err}); they are in the executors' logs only. "
                      f"Use strict=True to stop at an unreadable file instead.", NoSkippedBlocksListWarning,
                      stacklevel=3)
        return None
    return context.accumulator([], _SkippedBlocksParam())


class BlockPartition(InputPartition):
    """One block to read, with what an executor needs to open its filesystem."""

    def __init__(self, block: BlockMetadata, protocol: str, storage_options: dict[str, str], strict: bool) -> None:
        super().__init__(block)
        self.protocol = protocol
        self.storage_options = storage_options
        self.strict = strict


def _batch_ranges(blocks: Sequence[BlockMetadata]) -> list[list[Any]]:
    """Consecutive blocks of one segment as ``[path, segment_start, segment_end, first, end]``."""
    ranges: list[list[Any]] = []
    for b in blocks:
        last = ranges[-1] if ranges else None
        if last is not None and last[0] == b.path and last[1] == b.segment_start and last[4] == b.offset:
            last[4] = b.end
        else:
            ranges.append([b.path, b.segment_start, b.segment_end, b.offset, b.end])
    return ranges


def _blocks_of(ranges: list[list[Any]], block_size: int) -> Iterator[BlockMetadata]:
    for path, segment_start, segment_end, first, end in ranges:
        for block in FileMetadata(path, segment_end, 0.0, segment_start, block_size).blocks(first):
            if block.offset >= end:
                break
            yield block


class SplitterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches of at most ``blocks_per_batch`` blocks on the driver."""

    def __init__(self, config: SplitterConfig, rows: str = "lines", skipped_id: int | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self._config = config
        self._rows = rows
        self._skipped_id = skipped_id
        self._planner = BlockPlanner(config, clock, sleep)
        protocol = self._planner.fs.protocol
        self._protocol = protocol if isinstance(protocol, str) else protocol[0]
        self._last: dict[str, Any] | None = None

    def initialOffset(self) -> dict:
        return {"v": 1, "n": 0, "block_size": self._config.block_size, "protocol": self._protocol,
                "batch": [], "state": SplitState().to_json()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The next batch's end offset; ``start`` itself when there is nothing new.

        With nothing stable to hand out, it waits for the listed files still settling, at most
        ``settle`` seconds (``BlockPlanner.next_blocks``): returning ``start`` tells Spark there is
        no new data, which ends a bounded query and returns ``processAllAvailable()``, though a file
        just dropped would be stable moments later.
        """
        if start != self._last:
            self._planner.restore(start["state"])
        if isinstance(limit, ReadAllAvailable):  # Trigger.Once: this one batch is the whole run
            self._planner.freeze()
        blocks = self._planner.next_blocks(self._block_limit(limit))
        if not blocks:
            self._last = start
            return start
        # This run's block size: a restart with another one cut the new batch's ranges by the checkpoint's first,
        # and its blocks ran into the next batch's (lines read twice). A replay reads by the offset's own.
        self._last = {**start, "n": start["n"] + 1, "block_size": self._config.block_size, "protocol": self._protocol,
                      "batch": _batch_ranges(blocks), "state": self._planner.state()}
        return self._last

    def getDefaultReadLimit(self) -> ReadLimit:
        """``blocks_per_batch`` blocks, said in bytes: the only built-in limits are rows, files and bytes."""
        return ReadMaxBytes(self._config.blocks_per_batch * self._config.block_size)

    def _block_limit(self, limit: ReadLimit) -> int | None:
        if isinstance(limit, ReadAllAvailable):
            return None  # Trigger.Once, or the engine overriding our limit: everything in one batch
        if isinstance(limit, ReadMaxBytes):
            return max(1, limit.max_bytes // self._config.block_size)
        return self._config.blocks_per_batch

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow reads the files listed now, in batches of ``blocks_per_batch``, then ends."""
        self._planner.freeze()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []
        options = dict(self._config.storage_options)
        return [BlockPartition(b, end["protocol"], options, self._config.strict)
                for b in _blocks_of(end["batch"], end["block_size"])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The block's rows as Arrow batches, on a Spark Python worker.

        First ``gc.freeze()``: pyspark's worker runs a full ``gc.collect()`` after every task, and
        each walked every object alive in the worker (modules, classes, caches), about 30 ms of
        Python per task (docs/splitter.md, "Speed"). What is alive when a task starts, right after
        that collection, is such lasting state; frozen, the collector skips it. Reference counting
        still frees frozen objects, and the frozen set stayed the same size over 512 tasks in each
        of two workers (docs/splitter.md).

        With ``quick_ack`` (the default) the worker then acknowledges at once what the JVM sends it
        over TCP (`storage.worker_socket`, once per worker process): its exchange for each block
        otherwise could wait 40 ms for a delayed ACK (docs/splitter.md, "Speed").
        """
        gc.freeze()
        if self._config.quick_ack:
            acknowledge_arrivals_at_once()
        fs = fsspec.filesystem(partition.protocol, **partition.storage_options)
        on_skip = self._on_skip()
        if self._rows == "chunks":  # one Arrow batch per piece read: Spark converts one while the next is read
            yield from chunk_batches(fs, partition.value, strict=partition.strict, on_skip=on_skip)
            return
        if self._config.format == "csv":
            names = [name for name, _ in self._config.columns or ()]
            table = read_csv_table(fs, partition.value, names, header=self._config.header, strict=partition.strict,
                                   on_skip=on_skip)
            yield from table.to_batches(max_chunksize=_ROWS_PER_BATCH)
            return
        for batch in line_batches(fs, partition.value, strict=partition.strict, on_skip=on_skip):
            for first in range(0, batch.num_rows, _ROWS_PER_BATCH):
                yield batch.slice(first, _ROWS_PER_BATCH)

    def _on_skip(self) -> OnSkip | None:
        """Adds a skipped block to the driver's accumulator: the worker sends what a task added with
        its result (its registry of accumulators is emptied before each task)."""
        if self._skipped_id is None:
            return None
        skipped = Accumulator(self._skipped_id, [], _SkippedBlocksParam())
        return lambda block: skipped.add([block])

    def commit(self, end: dict) -> None:
        """Nothing to clean up: the state travels in the offsets."""


class SplitterDataSource(DataSource):
    """``spark.readStream.format("file_splitter").option(...).load(path)``; options as ``SplitterConfig``,
    plus the internal ``rows`` and ``skipped_accumulator`` (see the module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        internal = {k.lower(): v for k, v in options.items() if k.lower() in ("rows", "skipped_accumulator")}
        self.config = SplitterConfig.from_options({k: v for k, v in options.items() if k.lower() not in internal})
        self.rows = internal.get("rows", "lines").lower()
        skipped = internal.get("skipped_accumulator")
        if skipped is not None and not skipped.isdigit():
            raise ValueError(f"skipped_accumulator={skipped!r} must be the id of an accumulator, an integer")
        self.skipped_id = None if skipped is None else int(skipped)
        if self.rows not in ROWS:
            raise ValueError(f"rows={self.rows!r} is not supported; use one of {list(ROWS)}")
        if self.rows == "chunks" and self.config.format != "text":
            raise ValueError(f"rows='chunks' reads text only; format={self.config.format!r} needs rows='lines'")

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return CHUNK_SCHEMA if self.rows == "chunks" else source_schema(self.config)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SplitterStreamReader(self.config, self.rows, self.skipped_id)


def _options(config: SplitterConfig) -> dict[str, str]:
    """Spark's options for ``config``, its local paths absolute (`SplitterConfig`): the source runs in a Python worker,
    which resolved a relative one in the JVM's working directory, not this process's (a notebook's ``%cd``)."""
    options = {
        "paths": json.dumps(config.paths), "recursive": str(config.recursive), "block_size": str(config.block_size),
        "blocks_per_batch": str(config.blocks_per_batch), "scan_interval": str(config.scan_interval),
        "settle": str(config.settle), "watermark_slack": str(config.watermark_slack),
        "continuous": str(config.continuous), "strict": str(config.strict), "quick_ack": str(config.quick_ack),
        **{f"storage.{k}": v for k, v in config.storage_options.items()},
    }
    if config.pattern is not None:
        options["pattern"] = config.pattern
    if config.scan_trigger_file is not None:
        options["scan_trigger_file"] = config.scan_trigger_file
    if config.format != "text":
        options["format"] = config.format
        options["header"] = str(config.header)
        options["columns"] = ", ".join(f"{quote_name(name)} {kind}" for name, kind in config.columns or ())
    return options


def read_stream(spark: SparkSession, config: SplitterConfig,
                skipped: Accumulator[list[SkippedBlock]] | None = None) -> DataFrame:
    """Register the source and return the streaming DataFrame for ``config``; the blocks its tasks
    skip (``strict=False``) are added to ``skipped`` (see ``skipped_blocks_accumulator``).

    Text is read as chunk rows and cut into lines here, on the JVM: ``posexplode`` over a chunk's
    record starts, and per record a ``substr`` of the chunk's bytes, so Spark converts one Python
    row per chunk, not per line. CSV columns with a type other than ``string`` are cast here too,
    with ``try_cast``: a value that does not parse becomes null, as in Spark's own CSV reader
    (``PERMISSIVE``).
    """
    _refuse_names_equal_but_for_case(spark, config)
    spark.dataSource.register(SplitterDataSource)
    options = _options(config)
    if skipped is not None:
        options["skipped_accumulator"] = str(skipped.aid)
    if config.format == "text":
        chunks = spark.readStream.format(FORMAT).options(**options, rows="chunks").load()
        records = chunks.selectExpr("path", "block_id", "base", "text", "lengths", "posexplode(starts) AS (i, start)")
        bom = "IF(base + start = 0 AND substr(text, 1, 3) = X'EFBBBF', 3, 0)"  # not text at the file's first byte
        return records.selectExpr(
            f"CAST(substr(text, start + 1 + {bom}, element_at(lengths, i + 1) - {bom}) AS STRING) AS value",
            "path", "block_id", "base + start AS offset",
        )
    frame = spark.readStream.format(FORMAT).options(**options).load()
    if config.format == "csv" and any(kind != "string" for _, kind in config.columns or ()):
        frame = frame.selectExpr(
            *[f"try_cast({quote_name(name)} AS {kind}) AS {quote_name(name)}" for name, kind in config.columns or ()],
            *SCHEMA.fieldNames()[1:],
        )
    return frame


def _refuse_names_equal_but_for_case(spark: SparkSession, config: SplitterConfig) -> None:
    """CSV columns named alike but for case (``a, A``; ``Path`` beside the location column ``path``) make every
    reference to them ambiguous where Spark resolves names ignoring case, as it does by default; pandas keeps them
    apart, so ``SplitterConfig`` takes them."""
    if config.columns is None or str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true":
        return
    names = [name for name, _ in config.columns] + list(LOCATION_COLUMNS)
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise ValueError(
                f"columns: {other!r} and {name!r} differ only in case, and Spark resolves column names ignoring case "
                "(spark.sql.caseSensitive is false), so a reference to either would be ambiguous; rename one")
