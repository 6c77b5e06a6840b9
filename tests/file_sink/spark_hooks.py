"""Crash-test hooks for the Spark path, in a module of their own: Spark pickles them to its Python workers,
which import them as ``tests.file_sink.spark_hooks`` (the test modules are imported under other names)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


class Injected(RuntimeError):
    pass


@dataclass(frozen=True)
class FailAt:
    """Raise at ``phase`` of ``batch_id``, in a task or in the driver's commit, whichever reaches it."""

    phase: str
    batch_id: int

    def __call__(self, phase: str, batch_id: int) -> None:
        if (phase, batch_id) == (self.phase, self.batch_id):
            raise Injected(f"injected failure at {phase} of batch {batch_id}")


@dataclass(frozen=True)
class DamageNewestRecord:
    """Zero the sink's newest commit record while a task of ``batch_id`` writes its rows (after it read the
    records): a record damaged between the tasks and the driver's commit."""

    root: str
    batch_id: int

    def __call__(self, phase: str, batch_id: int) -> None:
        if (phase, batch_id) == ("mid_write", self.batch_id):
            records = sorted(p for p in Path(self.root, "_file_sink").iterdir() if re.fullmatch(r"\d{20}\.json", p.name))
            records[-1].write_bytes(bytes(records[-1].stat().st_size))
