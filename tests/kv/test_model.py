"""The store against a dict: random puts, deletes, reads, scans, flushes, commits, crashes, replays, reopenings.

Two stores run side by side, one on the local disk (log segments appended to)
and one on ``memory://`` (no append, no rename: an object store's rules), with
tiny files and blocks so that flushes split and rewrite many files.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from storage import KVStore

#: Few keys, so that they are overwritten and deleted often; the empty key, trailing zero bytes, a key
#: longer than the others (wider rows) and 0xff (no successor) included.
ALL_KEYS = [b"", b"\x00", b"a", b"a\x00", b"a\x00\x00", b"ab", b"b", b"ba", b"\xff", b"\xff\xff", b"k" * 6, b"k" * 21]
KEYS = st.sampled_from(ALL_KEYS)
BOUNDS = st.none() | KEYS | st.binary(max_size=3)
VALUES = st.binary(max_size=12)
#: A file the store leaves open shows up as an unraisable ResourceWarning: here it fails the test.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
SETTINGS = dict(flush_entries=7, flush_batches=3, flush_bytes=900, max_file_size=200, block_size=48, block_cache=600, lease=600)


def die(bucket) -> None:
    """What a writer's process dying leaves of it: the OS closes its open log segment; nothing is committed,
    flushed, released or cleaned up. (Dropping the object instead would leave the handle to the garbage collector.)"""
    if bucket._segment is not None:
        bucket._segment[1].close()


def expected_scan(model: dict[bytes, bytes], start: bytes | None, end: bytes | None) -> list[tuple[bytes, bytes]]:
    return sorted((k, v) for k, v in model.items() if (start is None or k >= start) and (end is None or k < end))


class StoreAgainstDict(RuleBasedStateMachine):
    root_kind = "local"

    @initialize()
    def start(self) -> None:
        if self.root_kind == "local":
            import tempfile

            self.root = tempfile.mkdtemp(prefix="kv-model-")
        else:
            self.root = f"memory://kv-model-{uuid.uuid4().hex}"
        self.store = KVStore(self.root, **SETTINGS)
        self.bucket = self.store.open(0)
        self.committed: dict[bytes, bytes] = {}
        self.writes: dict[bytes, bytes | None] | None = None
        self.committed_id = -1

    def teardown(self) -> None:
        if hasattr(self, "bucket"):
            self.bucket.close()
        if self.root_kind == "local":
            import shutil

            shutil.rmtree(self.root, ignore_errors=True)
        else:
            self.store.fs.rm(self.store.root, recursive=True)

    # ------------------------------------------------------------ batches

    @rule(gap=st.integers(1, 3))
    def begin(self, gap: int) -> None:
        batch_id = self.committed_id + gap
        self.bucket.begin(batch_id)
        self.writes = {}
        self.batch_id = batch_id

    @precondition(lambda self: self.writes is not None)
    @rule(key=KEYS, value=VALUES)
    def put(self, key: bytes, value: bytes) -> None:
        self.bucket.put(key, value)
        self.writes[key] = value

    @precondition(lambda self: self.writes is not None)
    @rule(pairs=st.lists(st.tuples(KEYS, st.none() | VALUES), max_size=12), arrow=st.booleans())
    def put_many(self, pairs: list[tuple[bytes, bytes | None]], arrow: bool) -> None:
        keys = [k for k, _ in pairs]
        values = [v for _, v in pairs]
        if arrow:
            self.bucket.put_many(pa.array(keys, pa.binary()), pa.array(values, pa.binary()))
        else:
            self.bucket.put_many(keys, values)
        for k, v in pairs:
            self.writes[k] = v

    @precondition(lambda self: self.writes is not None)
    @rule(key=KEYS)
    def delete(self, key: bytes) -> None:
        self.bucket.delete(key)
        self.writes[key] = None

    @precondition(lambda self: self.writes is not None)
    @rule()
    def commit(self) -> None:
        self.bucket.commit()
        for k, v in self.writes.items():
            if v is None:
                self.committed.pop(k, None)
            else:
                self.committed[k] = v
        self.committed_id = self.batch_id
        self.writes = None

    @precondition(lambda self: self.writes is not None)
    @rule()
    def commit_and_flush(self) -> None:
        self.commit()
        self.bucket.flush()

    @rule()
    def flush(self) -> None:
        self.bucket.flush()

    @rule()
    def compact(self) -> None:
        self.bucket.compact()

    # ------------------------------------------------------------ failures

    @rule()
    def crash(self) -> None:
        """The writer dies without closing: its lease stays, so the next one takes over."""
        die(self.bucket)
        self.bucket = self.store.open(0, take_over=True)
        self.writes = None

    @rule()
    def reopen(self) -> None:
        self.bucket.close()
        self.store = KVStore(self.root, **SETTINGS)  # a cold block cache too
        self.bucket = self.store.open(0)
        self.writes = None

    @precondition(lambda self: self.committed_id >= 0)
    @rule()
    def replay_last_batch(self) -> None:
        """Spark retrying the last batch: refused as already committed; nothing is applied twice."""
        with pytest.raises(ValueError, match="already applied"):
            self.bucket.begin(self.committed_id)
        self.writes = None

    # ------------------------------------------------------------ reads

    @rule(keys=st.lists(KEYS, max_size=8), arrow=st.booleans())
    def get_many(self, keys: list[bytes], arrow: bool) -> None:
        if arrow:
            got = self.bucket.get_many(pa.array(keys, pa.binary())).to_pylist()
        else:
            got = self.bucket.get_many(keys)
        assert got == [self.committed.get(k) for k in keys]

    @rule(start=BOUNDS, end=BOUNDS)
    def scan(self, start: bytes | None, end: bytes | None) -> None:
        assert list(self.bucket.scan(start, end)) == expected_scan(self.committed, start, end)

    @rule(start=BOUNDS, end=BOUNDS, limit=st.integers(0, 6))
    def scan_limited(self, start: bytes | None, end: bytes | None, limit: int) -> None:
        table = self.bucket.scan_table(start, end, limit=limit)
        got = list(zip(table["key"].to_pylist(), table["value"].to_pylist()))
        assert got == expected_scan(self.committed, start, end)[:limit]

    @rule(prefix=KEYS | st.binary(max_size=3))
    def scan_prefix(self, prefix: bytes) -> None:
        table = self.bucket.scan_table(prefix=prefix)
        expected = sorted((k, v) for k, v in self.committed.items() if k.startswith(prefix))
        assert list(zip(table["key"].to_pylist(), table["value"].to_pylist())) == expected

    @invariant()
    def matches_the_model(self) -> None:
        """After every step: the batch id, every key (committed and uncommitted views) and a full scan."""
        if not hasattr(self, "bucket"):
            return
        assert self.bucket.committed_batch_id == self.committed_id
        assert self.bucket.get_many(ALL_KEYS) == [self.committed.get(k) for k in ALL_KEYS]
        uncommitted = {**self.committed, **(self.writes or {})}
        assert self.bucket.get_uncommitted_many(ALL_KEYS) == [uncommitted.get(k) for k in ALL_KEYS]
        assert list(self.bucket.scan()) == sorted(self.committed.items())


class MemoryStoreAgainstDict(StoreAgainstDict):
    root_kind = "memory"


MACHINE_SETTINGS = settings(
    max_examples=40, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestLocalStore = StoreAgainstDict.TestCase
TestLocalStore.settings = MACHINE_SETTINGS
TestMemoryStore = MemoryStoreAgainstDict.TestCase
TestMemoryStore.settings = MACHINE_SETTINGS
