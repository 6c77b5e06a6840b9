"""A long key costs about its own length, not its length times the number of other keys.

Rows are as wide as the longest key they hold, so before width classes one
60 KB key among 2,000 short ones made a data file of 134 MB instead of about
110 KB, and the log frame and the cache's run alike. Sizes are asserted here,
never times.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import KVStore
from storage.kv.format import encode_frame, encode_run
from storage.kv.keys import Run

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
LONG = b"L" * 60_000
SHORT = [b"key%06d" % i for i in range(2000)]
VALUE = b"v" * 16
#: What the keys and values themselves take: the size everything below is held to a small multiple of.
OWN_BYTES = len(LONG) + sum(len(k) + len(VALUE) for k in SHORT)


def files_of(root: str, suffix: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names if f.endswith(suffix))


@pytest.mark.parametrize("long_write", ["put", "delete of an absent key"])
def test_one_long_key_among_short_ones_costs_about_its_own_length(tmp_path, long_write):
    store = KVStore(str(tmp_path), fsync=False, flush_bytes="1GB", block_cache="1GB")
    with store.open(0) as b:
        b.begin(0)
        b.put_many(SHORT, [VALUE] * len(SHORT))
        b.put(LONG, b"x") if long_write == "put" else b.delete(LONG)
        b.commit()
        (log,) = files_of(str(tmp_path), ".wal")
        assert os.path.getsize(log) < 2 * OWN_BYTES  # the log frame
        assert b.cached_bytes < 2 * OWN_BYTES  # the cache's runs
        assert b.scan_table().num_rows == len(SHORT) + (long_write == "put")
        b.flush()
        b.compact()
        (data,) = files_of(str(tmp_path), ".kvd")
        assert os.path.getsize(data) < 2 * OWN_BYTES
    with store.open(0) as b:
        assert b.get_many([*SHORT, LONG]) == [VALUE] * len(SHORT) + [b"x" if long_write == "put" else None]
        assert len(list(b.scan())) == len(SHORT) + (long_write == "put")
        assert store.cache.nbytes < 3 * OWN_BYTES  # the blocks and index the reads keep


def old_data_file(entries: dict[bytes, bytes], per_block: int) -> bytes:
    """A data file of format 1 ("KVDATA01"): every block and index key as wide as the file's longest key."""
    run = Run.from_writes(pa.array(list(entries), pa.large_binary()), pa.array(list(entries.values()), pa.large_binary()))
    body, refs, firsts = b"", [], []
    for start in range(0, len(run), per_block):
        block = encode_run(run.slice(start, min(start + per_block, len(run))))
        refs.append([len(body), len(block), len(block), zlib.crc32(block), min(per_block, len(run) - start)])
        firsts.append(run.rows[start].tobytes().hex())
        body += block
    index = json.dumps({"width": run.width, "codec": None, "blocks": refs, "first": firsts}).encode()
    return body + index + struct.pack("<QI8s", len(index), zlib.crc32(index), b"KVDATA01")


def test_a_store_written_in_the_old_format_opens_and_reads(tmp_path):
    """Data files of format 1 and log frames of one block as wide as its longest key (what every store written
    before width classes holds) are read as they are, and rewritten in the new format by the next flush."""
    flushed = {**{k: b"f" + k for k in SHORT[:300]}, LONG: b"long"}
    logged = {b"key000007": None, b"M" * 9000: b"m", b"key000100": b"new"}
    store = KVStore(str(tmp_path), fsync=False, flush_batches=100, block_size="4KB", max_file_size="1MB")
    with store.open(0) as b:
        b.begin(0)
        b.put_many(list(flushed), list(flushed.values()))
        b.commit()
        b.flush()
        b.begin(1)
        b.put_many(list(logged), list(logged.values()))
        b.commit()
    (data,) = files_of(str(tmp_path), ".kvd")
    old = old_data_file(flushed, per_block=64)
    Path(data).write_bytes(old)
    (meta_path,) = files_of(os.path.join(str(tmp_path), "bucket-0", "meta"), ".json")
    meta = json.loads(Path(meta_path).read_text())
    run = Run.from_writes(pa.array(list(flushed), pa.large_binary()), pa.array(list(flushed.values()), pa.large_binary()))
    meta["files"][0].update(size=len(old), first=run.rows[0].tobytes().hex(), last=run.rows[-1].tobytes().hex())
    del meta["crc"]  # metadata of format 1, as the releases that wrote KVDATA01 files wrote it: no CRC
    meta["format"] = 1
    Path(meta_path).write_text(json.dumps(meta))
    (log,) = files_of(str(tmp_path), ".wal")
    frame = encode_frame(1, [Run.from_writes(pa.array(list(logged), pa.large_binary()),
                                             pa.array(list(logged.values()), pa.large_binary()))], None)
    assert frame[:4] == b"KVW1"  # one block as wide as the 9,000-byte key: the frame of format 1
    Path(log).write_bytes(frame)
    expected = {**flushed, **logged}
    expected = {k: v for k, v in expected.items() if v is not None}
    for reopen in range(2):
        with store.open(0) as b:
            assert b.committed_batch_id == 1
            probes = [*expected, b"key000007", b"absent", b"L" * 59_999]
            assert b.get_many(probes) == [expected.get(k) for k in probes]
            assert list(b.scan()) == sorted(expected.items())
            assert list(b.scan(b"key000050", limit=3)) == sorted(i for i in expected.items() if i[0] >= b"key000050")[:3]
            if not reopen:
                b.compact()  # rewritten in format 2
    assert all(Path(p).read_bytes()[-8:] == b"KVDATA02" for p in files_of(str(tmp_path), ".kvd"))


#: Keys of every width class: short ones, and long ones sharing long prefixes (so that rows cut to a narrower
#: width tie, and index keys of blocks between them are long), with short tails.
KEYS = st.builds(lambda prefix, tail: prefix + tail,
                 st.sampled_from([b"", b"k", b"k" * 61, b"k" * 62, b"k" * 600, b"k" * 5000, b"k" * 60_000]),
                 st.binary(max_size=3))
BOUNDS = st.none() | KEYS


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(KEYS, st.none() | st.binary(max_size=3)), max_size=8), min_size=1,
                        max_size=6),
       steps=st.lists(st.sampled_from(["flush", "compact", "reopen", None]), min_size=6, max_size=6),
       scans=st.lists(st.tuples(BOUNDS, BOUNDS, st.none() | st.integers(0, 4)), min_size=3, max_size=3))
def test_keys_of_any_length_match_a_dict_across_flushes_compactions_and_reopening(tmp_path_factory, batches, steps,
                                                                               scans):
    store = KVStore(str(tmp_path_factory.mktemp("kv")), fsync=False, flush_batches=100, block_size="16KB",
                    max_file_size="200KB")
    model: dict[bytes, bytes] = {}
    b = store.open(0)
    try:
        for batch_id, (writes, step) in enumerate(zip(batches, steps)):
            b.begin(batch_id)
            for key, value in writes:
                b.put(key, value) if value is not None else b.delete(key)
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
            b.commit()
            if step in ("flush", "compact"):
                getattr(b, step)()
            elif step == "reopen":
                b.close()
                b = store.open(0)
            probes = [k for k, _ in writes] + [b"k" * 600, b"k" * 60_000 + b"\x00"]
            assert b.get_many(probes) == [model.get(k) for k in probes]
        for start, end, limit in scans:
            expected = sorted((k, v) for k, v in model.items()
                              if (start is None or k >= start) and (end is None or k < end))
            assert list(b.scan(start, end, limit=limit)) == expected[:limit]
    finally:
        b.close()
