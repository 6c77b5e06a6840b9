"""Crash-test hooks for the Spark path, in a module of their own: Spark pickles them to its Python workers,
which import them as ``tests.file_sink.spark_hooks`` (the test modules are imported under other names)."""

from __future__ import annotations

from dataclasses import dataclass


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
