"""``FileSplitter``: the block planner and the block readers behind one object.

For pandas, ``blocks()`` hands out the next non-overlapping blocks and ``read_lines()``
(or ``read_records()``, which parses CSV) reads them; for Spark, ``read_stream(spark)`` gives a
streaming DataFrame through the Python Data Source in ``storage.splitter.spark_source``
(pyspark >= 4.2), which plans with its own ``BlockPlanner`` and never imports this module.
"""

from __future__ import annotations

import numbers
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from storage._units import Seconds, Size
from storage.splitter.config import DEFAULT_BLOCK_SIZE, SplitterConfig
from storage.splitter.metadata import BlockMetadata, FileMetadata, blocks_frame, blocks_from_frame, files_frame
from storage.splitter.planner import BlockPlanner
from storage.splitter.readers import SkippedBlock, read_csv, read_lines

if TYPE_CHECKING:
    import pandas as pd
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession


class FileSplitter:
    """Discovers files under ``paths`` and hands out their blocks exactly once.

    A ``.gz``, ``.bz2``, ``.xz``, ``.zst`` or ``.deflate`` file is one block per segment, decompressed in
    memory by one task, delivering the streams that end in the segment, its records' offsets in the
    decompressed content; ``.lz4``, ``.snappy`` and
    ``.zip`` files are refused (``storage.splitter.compression``, docs/splitter.md "Compressed files").

    See ``SplitterConfig`` for the parameters. ``clock`` (epoch seconds) and ``sleep`` are
    injectable so tests control the scan interval and the settle time, and the waits for files
    still settling, without waiting on the wall clock.
    """

    def __init__(
        self,
        paths: str | Sequence[str],
        *,
        recursive: bool = True,
        pattern: str | None = None,
        block_size: Size = DEFAULT_BLOCK_SIZE,
        blocks_per_batch: int = 16,
        scan_interval: Seconds = 10.0,
        settle: Seconds = 2.0,
        watermark_slack: Seconds | None = 3600.0,
        continuous: bool = True,
        strict: bool = False,
        storage_options: Mapping[str, str] | None = None,
        scan_trigger_file: str | None = None,
        format: str = "text",
        columns: str | Sequence[str] | None = None,
        header: bool = True,
        quick_ack: bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        config = SplitterConfig(
            paths=paths, recursive=recursive, pattern=pattern, block_size=block_size,  # type: ignore[arg-type]
            blocks_per_batch=blocks_per_batch, scan_interval=scan_interval, settle=settle,  # type: ignore[arg-type]
            watermark_slack=watermark_slack, continuous=continuous, strict=strict,  # type: ignore[arg-type]
            storage_options={} if storage_options is None else storage_options, scan_trigger_file=scan_trigger_file,
            format=format, columns=columns, header=header, quick_ack=quick_ack,  # type: ignore[arg-type]
        )
        self.config = config
        self._planner = BlockPlanner(config, clock, sleep)
        self.fs = self._planner.fs
        self._skipped: list[SkippedBlock] = []
        self._stream_skipped: list[Accumulator[list[SkippedBlock]]] = []

    def __repr__(self) -> str:
        return f"FileSplitter({self.config!r})"

    # -- scanning and handing out blocks: the planner's ---------------------------------------

    def trigger_scan(self) -> None:
        """Scan at the next ``blocks()`` call instead of waiting for ``scan_interval``.

        With ``scan_trigger_file`` it also writes a new token into that file, so every splitter
        watching it, such as a running Spark source in another process, scans at its next call.
        """
        self._planner.trigger_scan()

    def freeze(self) -> None:
        """Read only the files known now (listed at least once); later files are ignored."""
        self._planner.freeze()

    def next_blocks(self, limit: int | None) -> list[BlockMetadata]:
        """Hand out up to ``limit`` blocks never handed out before (all if ``None``); see
        ``BlockPlanner.next_blocks`` for when it lists and how it waits for settling files."""
        return self._planner.next_blocks(limit)

    def blocks(self, limit: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The next blocks (at most ``limit``, default ``blocks_per_batch``) as (files, blocks) frames."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1):
            # -1 handed out nothing (a loop until empty stopped with data left), 0 the default, 2.5 took a float
            raise ValueError(f"blocks(limit={limit!r}): limit must be an int of 1 or more, or None for "
                             f"blocks_per_batch ({self.config.blocks_per_batch})")
        taken = self.next_blocks(self.config.blocks_per_batch if limit is None else int(limit))
        segments: dict[tuple[str, int], BlockMetadata] = {}
        for block in taken:
            segments.setdefault((block.path, block.segment_start), block)
        files = [
            FileMetadata(b.path, b.segment_end, self._planner.mtime(b.path), b.segment_start, self.config.block_size)
            for b in segments.values()
        ]
        return files_frame(files), blocks_frame(taken)

    def read_lines(self, blocks: pd.DataFrame | None = None) -> pd.DataFrame:
        """Lines of the given blocks frame; without one, of every block available now."""
        return read_lines(self.fs, self._chosen(blocks), strict=self.config.strict, on_skip=self._skipped.append)

    def read_records(self, blocks: pd.DataFrame | None = None) -> pd.DataFrame:
        """The records of the given blocks frame as this splitter's ``format`` says: ``read_lines``
        for text; for CSV the columns (as strings, as the Spark source reads them), then ``path``,
        ``block_id``, ``offset``. Without a frame, of every block available now."""
        if self.config.format != "csv":
            return self.read_lines(blocks)
        names = [name for name, _ in self.config.columns or ()]
        return read_csv(self.fs, self._chosen(blocks), names, header=self.config.header, strict=self.config.strict,
                        on_skip=self._skipped.append)

    def _chosen(self, blocks: pd.DataFrame | None) -> Sequence[BlockMetadata]:
        return blocks_from_frame(blocks) if blocks is not None else self.next_blocks(None)

    @property
    def skipped_blocks(self) -> tuple[SkippedBlock, ...]:
        """Blocks left unread because their file could not be read (``strict=False``): those of this
        object's ``read_lines``/``read_records`` calls, then those of the tasks of its ``read_stream``
        queries, once each task has finished. A block Spark reads again (a replayed batch) is listed
        again; a new driver process starts with an empty list."""
        return (*self._skipped, *(block for skipped in self._stream_skipped for block in skipped.value))

    @property
    def remembered(self) -> int:
        """How many files the state remembers (bounded by the watermark slack)."""
        return self._planner.remembered

    # -- state, for offsets -------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return self._planner.state()

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a saved state; the next call lists the files again."""
        self._planner.restore(state)

    # -- Spark --------------------------------------------------------------------------------

    def read_stream(self, spark: "SparkSession") -> "DataFrame":
        """A streaming DataFrame (``value``, ``path``, ``block_id``, ``offset``) through this configuration;
        the blocks its tasks skip show in ``skipped_blocks``."""
        from storage.splitter.spark_source import read_stream, skipped_blocks_accumulator

        skipped = skipped_blocks_accumulator(spark)
        if skipped is not None:
            self._stream_skipped.append(skipped)
        return read_stream(spark, self.config, skipped)
