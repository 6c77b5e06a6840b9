"""Key buckets: rows are grouped by a bucket of keys, ``pmod(xxhash64(keys), count)``, not by the
raw key, so that one Python call runs the vectorized engine step over all keys of a bucket."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import WindowingConfigError

BUCKETS_CONF = "windowing.spark.buckets"
PLACEMENT_CONF = "windowing.spark.bucketPlacement"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"


#: Spark's own default shuffle partitions: the default bucket count where the setting holds no number.
SPARK_SHUFFLE_PARTITIONS = 200
#: Bucket placements (`Bucketing`): ``PARTITIONS`` labels the buckets so that n of them land one to one
#: on n shuffle partitions; ``NUMBERS`` labels bucket i as i, as checkpoints written before did.
PARTITIONS, NUMBERS = "partitions", "numbers"


@dataclass(frozen=True)
class Bucketing:
    """How keys are grouped: bucket ``pmod(xxhash64(keys), count)``, grouped under its label.

    Spark places a group on shuffle partition ``pmod(murmur3(label), partitions)`` (``groupBy``'s hash
    partitioning), so with ``PARTITIONS`` placement `bucket_labels` picks labels that put ``count``
    buckets one to one on ``count`` partitions (and evenly on any number of partitions dividing it).
    ``origin`` says where the count came from, for messages.
    """

    count: int
    placement: str = PARTITIONS
    origin: str = ""

    def labels(self) -> np.ndarray:
        """Bucket i's group label at index i."""
        if self.placement == NUMBERS:
            return np.arange(self.count, dtype=np.int32)
        return bucket_labels(self.count)

    def same_labels(self, count: int, placement: str) -> bool:
        """Whether ``count`` buckets placed by ``placement`` group every key under the same label as these."""
        return count == self.count and (count == 1 or placement == self.placement)

    def described(self) -> str:
        return f"{self.count} bucket{'s' if self.count != 1 else ''}" + (f" ({self.origin})" if self.origin else "")


@functools.lru_cache(maxsize=16)
def bucket_labels(count: int) -> np.ndarray:
    """For each i < ``count``, the smallest int label >= 0 whose group Spark puts on partition i of
    ``count``: ``pmod(murmur3(label, seed 42), count) == i``, as ``groupBy`` partitions an int column.

    Found by hashing candidates in blocks until every partition has one; about ``count * ln(count)``
    candidates (a million for 80,000 buckets). The array is shared: do not modify it.
    """
    labels = np.full(count, -1, dtype=np.int64)
    start, block = 0, max(1024, 4 * count)
    while (labels < 0).any():
        candidates = np.arange(start, start + block, dtype=np.int64)
        partitions = np.mod(_murmur3_int(candidates).astype(np.int64), count)
        found, first = np.unique(partitions, return_index=True)
        free = labels[found] < 0
        labels[found[free]] = candidates[first[free]]
        start += block
    labels = labels.astype(np.int32)
    labels.flags.writeable = False
    return labels


def _murmur3_int(values: np.ndarray, seed: int = 42) -> np.ndarray:
    """Spark's ``hash()`` of int values (Murmur3 x86 32-bit of a 4-byte int, ``Murmur3_x86_32.hashInt``)."""
    with np.errstate(over="ignore"):
        k = values.astype(np.uint32) * np.uint32(0xCC9E2D51)
        k = ((k << np.uint32(15)) | (k >> np.uint32(17))) * np.uint32(0x1B873593)
        h = np.uint32(seed) ^ k
        h = ((h << np.uint32(13)) | (h >> np.uint32(19))) * np.uint32(5) + np.uint32(0xE6546B64)
        h = h ^ np.uint32(4)
        h = (h ^ (h >> np.uint32(16))) * np.uint32(0x85EBCA6B)
        h = (h ^ (h >> np.uint32(13))) * np.uint32(0xC2B2AE35)
        h = h ^ (h >> np.uint32(16))
    return h.view(np.int32)


def bucketing_of(source: Any, keyed: bool) -> Bucketing:
    """``windowing.spark.buckets`` if set, else one bucket per shuffle partition (docs/spark.md, "Key buckets")."""
    conf = source.sparkSession.conf
    placement = conf.get(PLACEMENT_CONF, PARTITIONS)
    if placement not in (PARTITIONS, NUMBERS):
        raise WindowingConfigError(
            f"{PLACEMENT_CONF}={placement!r} must be {PARTITIONS!r} (the default) or {NUMBERS!r} (for checkpoints "
            "written before buckets were placed on partitions)")
    if not keyed:
        return Bucketing(1, placement, "not keyed")
    raw = conf.get(BUCKETS_CONF, None)
    if raw is None:
        partitions = _positive_int(conf.get(SHUFFLE_PARTITIONS_CONF))  # its built-in default if unset
        if partitions is None:  # not a number, e.g. Databricks' "auto"
            return Bucketing(SPARK_SHUFFLE_PARTITIONS, placement, f"{BUCKETS_CONF} unset and {SHUFFLE_PARTITIONS_CONF} "
                             f"not a number: Spark's default of {SPARK_SHUFFLE_PARTITIONS}")
        return Bucketing(partitions, placement, f"{BUCKETS_CONF} unset: one per shuffle partition, "
                                                f"{SHUFFLE_PARTITIONS_CONF}={partitions}")
    value = _positive_int(raw)
    if value is None:
        raise WindowingConfigError(f"{BUCKETS_CONF}={raw!r} must be a positive integer (the number of key buckets)")
    return Bucketing(value, placement, f"{BUCKETS_CONF}={value}")


def _positive_int(raw: Any) -> int | None:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None
