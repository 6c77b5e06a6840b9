"""Key buckets: rows are grouped by a bucket of keys, ``pmod(xxhash64(keys), count)``, not by the
raw key, so that one Python call runs the vectorized engine step over all keys of a bucket."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import WindowingConfigError

BUCKETS_CONF = "windowing.spark.buckets"
PLACEMENT_CONF = "windowing.spark.bucketPlacement"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
MASTER_CONF = "spark.master"


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

    def labels_of(self, keys: Sequence[pa.Array | pa.ChunkedArray], rows: int) -> np.ndarray:
        """The group label of each of ``rows`` rows with integer ``keys`` (none: not keyed), as the JVM
        labels them (`query._bucket`)."""
        labels = self.labels()
        if not keys or self.count == 1:
            return np.full(rows, labels[0], dtype=np.int32)
        return labels[bucket_numbers(keys, self.count)].astype(np.int32, copy=False)

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


#: The primes of Spark's xxHash64 (``XXH64``), unsigned.
_XXH_P1, _XXH_P2, _XXH_P3, _XXH_P4, _XXH_P5 = (np.uint64(p) for p in (
    0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5))
#: The seed of Spark's ``xxhash64()``.
_XXH_SEED = 42


def bucket_numbers(keys: Sequence[pa.Array | pa.ChunkedArray], count: int) -> np.ndarray:
    """``pmod(xxhash64(*keys), count)`` of integer key columns (Arrow int8 to int64, nulls and all) as Spark
    computes it, so that a worker puts each key in the bucket the JVM would (`query._bucket`).

    Spark hashes a bigint with ``XXH64.hashLong`` and a smaller integer, widened to int, with ``hashInt``,
    each column seeded with the hash of the columns before it (42 for the first); a null leaves the hash
    as it is. ``tests/spark_runner/test_buckets.py`` checks it against Spark's own.
    """
    n = len(keys[0]) if keys else 0
    hashed = np.full(n, _XXH_SEED, dtype=np.uint64)
    for key in keys:
        if not pa.types.is_integer(key.type) or pa.types.is_unsigned_integer(key.type):
            raise TypeError(f"bucket_numbers hashes Spark's integer columns, not {key.type}")
        values = pc.fill_null(key, 0).to_numpy()
        nulls = pc.is_null(key).to_numpy(zero_copy_only=False)
        if key.type == pa.int64():
            hashed = np.where(nulls, hashed, _xxh64_long(values.view(np.uint64), hashed))
        else:
            hashed = np.where(nulls, hashed, _xxh64_int(values.astype(np.int32).view(np.uint32).astype(np.uint64), hashed))
    return np.mod(hashed.view(np.int64), count)


def _rotl(x: np.ndarray, bits: int) -> np.ndarray:
    return (x << np.uint64(bits)) | (x >> np.uint64(64 - bits))


def _xxh64_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """``XXH64.hashLong`` of each of ``values`` (a bigint's bits) with its own seed, wrapping as Java's longs do."""
    h = seed + (_XXH_P5 + np.uint64(8))
    h ^= _rotl(values * _XXH_P2, 31) * _XXH_P1
    return _xxh64_mix(_rotl(h, 27) * _XXH_P1 + _XXH_P4)


def _xxh64_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """``XXH64.hashInt`` of each of ``values`` (an int's 32 bits, zero-extended) with its own seed."""
    h = seed + (_XXH_P5 + np.uint64(4))
    h ^= values * _XXH_P1
    return _xxh64_mix(_rotl(h, 23) * _XXH_P2 + _XXH_P3)


def _xxh64_mix(h: np.ndarray) -> np.ndarray:
    """xxHash64's final avalanche (``fmix``)."""
    h = (h ^ (h >> np.uint64(33))) * _XXH_P2
    h = (h ^ (h >> np.uint64(29))) * _XXH_P3
    return h ^ (h >> np.uint64(32))


def bucketing_of(source: Any, keyed: bool) -> Bucketing:
    """``windowing.spark.buckets`` if set, else one bucket per shuffle partition, fewer on a local master
    with fewer cores (`default_bucket_count`; docs/spark.md, "Key buckets")."""
    conf = source.sparkSession.conf
    placement = setting(conf, PLACEMENT_CONF, PARTITIONS)
    if placement not in (PARTITIONS, NUMBERS):
        raise WindowingConfigError(
            f"{PLACEMENT_CONF}={placement!r} must be {PARTITIONS!r} (the default) or {NUMBERS!r} (for checkpoints "
            "written before buckets were placed on partitions)")
    raw = setting(conf, BUCKETS_CONF, None)
    value = None if raw is None else _positive_int(raw)
    if raw is not None and value is None:  # refused unkeyed too: a typo waited for the first keyed query
        raise WindowingConfigError(f"{BUCKETS_CONF}={raw!r} must be a positive integer (the number of key buckets)")
    if not keyed:
        return Bucketing(1, placement, "not keyed")
    if value is None:
        partitions = _positive_int(setting(conf, SHUFFLE_PARTITIONS_CONF))  # its built-in default if unset
        given = f"{SHUFFLE_PARTITIONS_CONF}={partitions}"
        if partitions is None:  # not a number, e.g. Databricks' "auto"
            partitions, given = SPARK_SHUFFLE_PARTITIONS, (f"{SHUFFLE_PARTITIONS_CONF} not a number: Spark's default "
                                                           f"of {SPARK_SHUFFLE_PARTITIONS}")
        master = _master(conf)
        count = default_bucket_count(partitions, local_cores(master))
        if count == partitions:
            return Bucketing(count, placement, f"{BUCKETS_CONF} unset: one per shuffle partition, {given}")
        return Bucketing(count, placement, f"{BUCKETS_CONF} unset: {given}, at most one per core of the local "
                                           f"master {master}, dividing the partitions")
    return Bucketing(value, placement, f"{BUCKETS_CONF}={value}")


def default_bucket_count(partitions: int, cores: int | None) -> int:
    """One bucket per shuffle partition, except where ``cores`` (a local master's) are fewer: then the
    largest divisor of ``partitions`` not above ``cores``.

    On one machine a bucket beyond the cores is one more Python call a micro-batch on the same cores
    (Spark's default of 200 shuffle partitions made 200 calls on a laptop's few cores). A divisor, so
    that `bucket_labels` still puts every bucket on a partition of its own. A cluster keeps one per
    partition: its cores can grow after the query starts, and the count is fixed in the checkpoint.
    """
    if cores is None or cores >= partitions:
        return partitions
    return max(d for d in range(1, cores + 1) if partitions % d == 0)


def _master(conf: Any) -> str | None:
    """The session's master, or None where the server will not say (a Connect server may refuse to
    read Spark's settings, as ``CONFIG_NOT_AVAILABLE``): then one bucket per partition."""
    try:
        return conf.get(MASTER_CONF, None)
    except Exception:  # classic and Connect raise different classes: not local then
        return None


def setting(conf: Any, key: str, *default: Any) -> Any:
    """``conf.get(key, *default)`` (without a default, Spark's own where unset), or the default (None if none is
    given) where the server will not read ``key``: Databricks serverless refuses to read a key outside the
    settings it allows, default or not (``[CONFIG_NOT_AVAILABLE] Configuration windowing.spark.buckets is not
    available``), which would fail every query where it is defined; a key the server will not read cannot have
    been set there either."""
    try:
        return conf.get(key, *default)
    except Exception as error:  # classic and Connect raise different classes
        if "CONFIG_NOT_AVAILABLE" not in str(error):
            raise
        return default[0] if default else None


def local_cores(master: str | None) -> int | None:
    """The worker threads of a local master (``local``, ``local[n]``, ``local[*]``, ``local[n, retries]``), None for
    any other (a cluster's, ``local-cluster[...]`` included, or unknown)."""
    if master == "local":
        return 1
    found = re.fullmatch(r"local\[\s*(\d+|\*)\s*(?:,\s*\d+\s*)?\]", master or "")
    if found is None:
        return None
    return (os.cpu_count() or 1) if found.group(1) == "*" else max(1, int(found.group(1)))


def _positive_int(raw: Any) -> int | None:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None
