"""The store's errors: each says which bucket or file, what happened and what to do."""

from __future__ import annotations


class KVStoreError(RuntimeError):
    """Base class of the key-value store's errors."""


class BucketHeldError(KVStoreError):
    """Another writer holds the bucket's lease."""


class FencedError(KVStoreError):
    """This writer lost its bucket to a newer one: its work is refused."""


class CorruptStoreError(KVStoreError):
    """Committed data failed a check: a damaged or altered file."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(
            f"{path}: {problem}. This file holds committed data, so the store refuses to guess: "
            "restore it from a backup (or delete the bucket's directory to start it empty)"
        )
        self.path = path
