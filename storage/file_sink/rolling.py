"""Rolling policies: when an in-progress part file is closed and becomes pending.

As in Flink, a policy is three small predicates: on a write (size), on
processing time (rollover interval, inactivity) and at the end of a
micro-batch (every batch, every n batches).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._units import is_whole_number


@dataclass(frozen=True)
class PartStats:
    """What a policy may look at for one in-progress part file."""

    size: int
    batches: int
    created_ms: int
    last_write_ms: int


@dataclass(frozen=True)
class RollingPolicy:
    """Roll a part when any configured condition holds.

    * ``max_part_size``: bytes; a part is rolled once it reaches at least this size
      (it exceeds it by at most one row).
    * ``max_batches``: rolled at the end of the n-th micro-batch that wrote to it.
    * ``rollover_ms``: rolled at the end of a batch once it has been open this long.
    * ``inactivity_ms``: rolled at the end of a batch that finds it unwritten this long.
    * ``every_batch``: rolled at the end of every batch that wrote to it; the only
      choice for bulk formats and for filesystems that cannot append.
    """

    max_part_size: int | None = None
    max_batches: int | None = None
    rollover_ms: int | None = None
    inactivity_ms: int | None = None
    every_batch: bool = False

    def __post_init__(self) -> None:
        for name in ("max_part_size", "max_batches", "rollover_ms", "inactivity_ms"):
            value = getattr(self, name)
            if is_whole_number(value):  # a NumPy integer (read from a settings table) is one
                value = int(value)
                object.__setattr__(self, name, value)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(
                    f"RollingPolicy {name}={value!r} must be a positive integer or None; "
                    "a part could never be rolled or would roll before its first row"
                )
        if not isinstance(self.every_batch, bool):
            raise ValueError(f"RollingPolicy every_batch={self.every_batch!r} must be True or False")

    @classmethod
    def on_every_batch(cls) -> RollingPolicy:
        """Roll every part at the end of each micro-batch."""
        return cls(every_batch=True)

    def roll_on_write(self, part: PartStats) -> bool:
        """True when the part is full and the next row must go to a new part."""
        return self.max_part_size is not None and part.size >= self.max_part_size

    def roll_on_processing_time(self, part: PartStats, now_ms: int) -> bool:
        """True when the part has been open, or idle, for too long."""
        if self.rollover_ms is not None and now_ms - part.created_ms >= self.rollover_ms:
            return True
        return self.inactivity_ms is not None and now_ms - part.last_write_ms >= self.inactivity_ms

    def roll_on_batch_end(self, part: PartStats, wrote_this_batch: bool) -> bool:
        """True when the part must be rolled at the end of the current batch."""
        if self.every_batch and wrote_this_batch:
            return True
        return self.max_batches is not None and part.batches >= self.max_batches
