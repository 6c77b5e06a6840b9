"""The HDHT-style key-value store (issue 17); see docs/kv_store.md."""

from .bucket import Bucket
from .errors import BucketHeldError, CorruptStoreError, FencedError, KVStoreError
from .store import KVStore

__all__ = ["Bucket", "BucketHeldError", "CorruptStoreError", "FencedError", "KVStore", "KVStoreError"]
