"""``FileSplitter``: scanner, state and block readers behind one object.

For pandas, ``blocks()`` hands out the next non-overlapping blocks and ``read_lines()``
(or ``read_records()``, which parses CSV) reads them; for Spark, ``read_stream(spark)`` gives a streaming DataFrame through the
Python Data Source in ``storage.splitter.spark_source`` (pyspark >= 4.2).
"""

from __future__ import annotations

import time
import uuid
import warnings
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import fsspec

from storage.splitter.config import DEFAULT_BLOCK_SIZE, Seconds, Size, SplitterConfig
from storage.splitter.metadata import BlockMetadata, FileMetadata, blocks_frame, blocks_from_frame, files_frame
from storage.splitter.readers import SkippedBlock, read_csv, read_lines
from storage.splitter.scanner import Listing, Scanner, UnsettledFileWarning
from storage.splitter.state import SplitState

if TYPE_CHECKING:
    import pandas as pd
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession


def open_filesystem(config: SplitterConfig) -> tuple[fsspec.AbstractFileSystem, tuple[str, ...]]:
    """The one fsspec filesystem of all ``paths`` and the paths in its own form; checks they exist."""
    fs, _, roots = fsspec.core.get_fs_token_paths(list(config.paths), storage_options=dict(config.storage_options))
    for given, root in zip(config.paths, roots):
        if not fs.exists(root):
            raise FileNotFoundError(f"paths: {given!r} does not exist; create it or fix the path")
    return fs, tuple(roots)


class FileSplitter:
    """Discovers files under ``paths`` and hands out their blocks exactly once.

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
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        config = SplitterConfig(
            paths=paths, recursive=recursive, pattern=pattern, block_size=block_size,  # type: ignore[arg-type]
            blocks_per_batch=blocks_per_batch, scan_interval=scan_interval, settle=settle,  # type: ignore[arg-type]
            watermark_slack=watermark_slack, continuous=continuous, strict=strict,  # type: ignore[arg-type]
            storage_options=dict(storage_options or {}), scan_trigger_file=scan_trigger_file,
            format=format, columns=columns, header=header,  # type: ignore[arg-type]
        )
        self._init(config, clock, sleep)

    @classmethod
    def from_config(cls, config: SplitterConfig, clock: Callable[[], float] = time.time,
                    sleep: Callable[[float], None] = time.sleep) -> "FileSplitter":
        splitter = cls.__new__(cls)
        splitter._init(config, clock, sleep)
        return splitter

    def _init(self, config: SplitterConfig, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.config = config
        self.fs, roots = open_filesystem(config)
        self._clock = clock
        self._sleep = sleep
        self._scanner = Scanner(config, self.fs, roots, clock)
        self._state = SplitState()
        self._stable: Listing = {}
        self._last_scan: float | None = None
        self._scan_requested = True
        self._trigger_seen = self._read_trigger()
        self._skipped: list[SkippedBlock] = []
        self._stream_skipped: list[Accumulator[list[SkippedBlock]]] = []

    def __repr__(self) -> str:
        return f"FileSplitter({self.config!r})"

    # -- scanning -----------------------------------------------------------------------------

    def trigger_scan(self) -> None:
        """Scan at the next ``blocks()`` call instead of waiting for ``scan_interval``.

        With ``scan_trigger_file`` it also writes a new token into that file, so every splitter
        watching it, such as a running Spark source in another process, scans at its next call.
        """
        self._scan_requested = True
        if self.config.scan_trigger_file is not None:
            self.fs.pipe_file(self.config.scan_trigger_file, uuid.uuid4().hex.encode())
            self._trigger_seen = self._read_trigger()

    def _read_trigger(self) -> bytes | None:
        """The trigger file's content (``None`` when absent or not configured)."""
        if self.config.scan_trigger_file is None:
            return None
        try:
            return self.fs.cat_file(self.config.scan_trigger_file)
        except FileNotFoundError:
            return None

    def _scan_if_due(self) -> None:
        now = self._clock()
        due = self._last_scan is None or now - self._last_scan >= self.config.scan_interval
        if self.config.scan_trigger_file is not None:
            token = self._read_trigger()
            if token != self._trigger_seen:
                self._trigger_seen, self._scan_requested = token, True
        if self._scan_requested or due:
            self._scan()

    def _scan(self) -> None:
        self._last_scan = self._clock()
        self._stable = self._scanner.scan()
        self._scan_requested = False
        if not self.config.continuous:
            self.freeze()

    def freeze(self) -> None:
        """Read only the files known now (listed at least once); later files are ignored."""
        if self._last_scan is None:
            self._scan_if_due()
        self._scanner.freeze()

    # -- handing out blocks -------------------------------------------------------------------

    def next_blocks(self, limit: int | None) -> list[BlockMetadata]:
        """Scan if due, then hand out up to ``limit`` blocks never handed out before (all if ``None``).

        Listed files still settling are waited for where they would otherwise be missed: when
        nothing stable is left to hand out, and, with ``limit=None`` (everything available now),
        before handing out. The wait lists again each time the earliest of them can be stable,
        and lasts at most ``settle`` seconds: a file still changing then is left for a later
        listing, with an ``UnsettledFileWarning`` naming it when the run is bounded (it ends now).
        """
        self._scan_if_due()
        give_up = self._clock() + self.config.settle
        while True:
            if limit is not None:  # stable blocks go at once; settling files matter when there are none
                taken = self._take(limit)
                if taken:
                    return taken
            settling = self._settling_with_new_bytes()
            now = self._clock()
            if not settling or now >= give_up:
                if settling and self._scanner.frozen:
                    self._warn_unsettled(settling)
                return self._take(None) if limit is None else []
            self._sleep(max(0.0, min(*settling.values(), give_up) - now))
            self._scan()

    def _take(self, limit: int | None) -> list[BlockMetadata]:
        return self._state.take(self._stable, self.config.block_size, limit, self.config.watermark_slack)

    def _settling_with_new_bytes(self) -> dict[str, float]:
        """Path -> when it can be stable, of the settling files that would give blocks once stable."""
        slack = self.config.watermark_slack
        return {path: seen.stable_at for path, seen in self._scanner.settling.items()
                if self._state.offers(path, seen.size, seen.mtime, slack)}

    def _warn_unsettled(self, settling: Mapping[str, float]) -> None:
        warnings.warn(
            f"this bounded run ends without {sorted(settling)}: still changing {self.config.settle:g} s "
            f"(settle) after it listed them, so probably still being written; they are not marked as read, "
            f"and the next run reads them once they are stable", UnsettledFileWarning, stacklevel=3)

    def blocks(self, limit: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The next blocks (at most ``limit``, default ``blocks_per_batch``) as (files, blocks) frames."""
        taken = self.next_blocks(limit or self.config.blocks_per_batch)
        segments: dict[tuple[str, int], BlockMetadata] = {}
        for block in taken:
            segments.setdefault((block.path, block.segment_start), block)
        files = [
            FileMetadata(b.path, b.segment_end, self._state_mtime(b.path), b.segment_start, self.config.block_size)
            for b in segments.values()
        ]
        return files_frame(files), blocks_frame(taken)

    def _state_mtime(self, path: str) -> float:
        entry = self._state.files.get(path)
        return entry.mtime if entry is not None else self._stable.get(path, (0, 0.0))[1]

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
        return len(self._state.files)

    # -- state, for offsets -------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return self._state.to_json()

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a saved state; the next call lists the files again."""
        self._state = SplitState.from_json(state)
        self._scan_requested = True

    # -- Spark --------------------------------------------------------------------------------

    def read_stream(self, spark: "SparkSession") -> "DataFrame":
        """A streaming DataFrame (``value``, ``path``, ``block_id``, ``offset``) through this configuration;
        the blocks its tasks skip show in ``skipped_blocks``."""
        from storage.splitter.spark_source import read_stream, skipped_blocks_accumulator

        skipped = skipped_blocks_accumulator(spark)
        if skipped is not None:
            self._stream_skipped.append(skipped)
        return read_stream(spark, self.config, skipped)
