"""A store's parsed settings: what its buckets and file writers read, without the store itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .datafile import BlockCache


@dataclass(frozen=True)
class StoreSettings:
    """Sizes in bytes, the lease in seconds, and the filesystem with the store's root on it.

    ``cache`` is the block cache shared by every bucket opened from one ``KVStore``.
    """

    path: str
    fs: Any
    root: str
    cache: BlockCache
    flush_entries: int
    flush_batches: int
    flush_bytes: int
    max_file_size: int
    block_size: int
    max_log_segment: int
    compression: str | None
    lease: float
    fsync: bool
