"""Bad configuration fails at construction, naming the parameter and the value."""

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from storage.file_sink import CallableBuckets, ColumnBuckets, DateTimeBuckets, FileSink, RollingPolicy

from . import helpers  # noqa: F401  (registers noappend://)

KEY = b"k" * 32


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda p: FileSink(p, format="xml"), r"format='xml' is unknown"),
        (lambda p: FileSink(p).with_format("xml"), r"format='xml' is unknown"),
        (lambda p: FileSink(p, compression="rar"), r"compression='rar' is unknown"),
        (lambda p: FileSink(p, format="parquet", compression="bz2"), r"compression='bz2' is unknown for format 'parquet'"),
        (lambda p: FileSink(p, format="avro", compression="zstd"), r"compression='zstd' is unknown for format 'avro'"),
        (lambda p: FileSink(p, encryption="aes-gcm"), r"encryption='aes-gcm' needs a key"),
        (lambda p: FileSink(p, encryption="rot13", key=KEY), r"encryption='rot13' is unknown"),
        (lambda p: FileSink(p).with_encryption(b"short"), r"key has length 5; an AES key is 16, 24 or 32 bytes"),
        (lambda p: FileSink(p).with_encryption("k" * 16), r"key must be bytes, got str"),
        (lambda p: FileSink(p, key=KEY), r"key is set but encryption=None"),
        (lambda p: FileSink(p).with_open_files(0), r"max_open_files=0 must be a positive integer"),
        (lambda p: FileSink(p).with_lease(True), r"lease_seconds=True must be a number of seconds or a timedelta, not a bool"),
        (lambda p: FileSink(p).with_lease(timedelta(0)), r"lease_seconds=datetime.timedelta\(0\) must be more than 0 seconds"),
        (lambda p: FileSink(p).with_open_files(3, expire_after_ms=-5), r"expire_after_ms=-5"),
        (lambda p: FileSink(p).with_open_files(3, expire_after_ms=True), r"expire_after_ms=True must be"),
        (lambda p: FileSink(p).with_part_names(prefix=".hidden"), r"prefix='.hidden'"),
        (lambda p: FileSink(p).with_writer_id("a/b"), r"writer_id='a/b'"),
        (lambda p: FileSink(p).with_part_names(suffix="/x.json"), r"suffix='/x.json' must be letters, digits"),
        (lambda p: ColumnBuckets("_k"), r"ColumnBuckets column='_k' would name directories that readers skip"),
        (
            lambda p: FileSink(p, format="parquet").with_rolling_policy(RollingPolicy(max_part_size=10)),
            r"format 'parquet' cannot be appended to; use RollingPolicy.on_every_batch",
        ),
        (lambda p: RollingPolicy(max_part_size=-1), r"max_part_size=-1 must be a positive integer"),
        (lambda p: RollingPolicy(max_batches=0), r"max_batches=0"),
        (lambda p: RollingPolicy(rollover_ms=1.5), r"rollover_ms=1.5"),
        (lambda p: RollingPolicy(inactivity_ms=-1), r"inactivity_ms=-1"),
        (lambda p: DateTimeBuckets(timezone="Mars/Olympus"), r"timezone='Mars/Olympus' is not a known"),
        (lambda p: DateTimeBuckets(pattern="%Y/%m"), r"pattern='%Y/%m' must be"),
        # Python's "argument of type 'int' is not iterable"; a list failed in pandas' strftime at the first write.
        (lambda p: DateTimeBuckets(pattern=5), r"DateTimeBuckets pattern=5 must be a non-empty strftime pattern"),
        (lambda p: DateTimeBuckets(pattern=["%Y"]), r"DateTimeBuckets pattern=\['%Y'\] must be a non-empty strftime"),
        # Accepted until a batch was written (AttributeError, TypeError), or taken as true ("no"); "" wrote to and
        # recovered the working directory, deleting its hidden .inprogress files.
        (lambda p: FileSink(""), r"FileSink path='' must be a directory's path or URL, a non-empty str"),
        (lambda p: FileSink(None), r"FileSink path=None must be"),
        (lambda p: FileSink(p).with_buckets("k"), r"FileSink buckets='k' must be a bucket assigner: BasePathBuckets"),
        (lambda p: FileSink(p).with_rolling_policy({"every_batch": True}), r"rolling_policy=\{'every_batch': True\}"),
        (lambda p: FileSink(p).with_part_names(fn="x"), r"part name fn='x' must be a function"),
        (lambda p: CallableBuckets(3), r"CallableBuckets fn=3 must be a function"),
        # Before: accepted, and the first batch failed with Python's "takes 1 positional argument but 2 were given"
        (lambda p: CallableBuckets(lambda row: row["k"]), r"CallableBuckets fn=<function .*> must take two arguments, "
                                                          r"\(row: dict, processing_time_ms\): too many positional"),
        (lambda p: RollingPolicy(every_batch="no"), r"every_batch='no' must be True or False"),
        (lambda p: FileSink(p).with_writer_id(3), r"writer_id=3 must be a str of letters"),
        (lambda p: FileSink(p).with_part_names(suffix=3), r"suffix=3 must be letters"),
        # Python's own errors, naming no parameter: "'int' object is not subscriptable", "expected str, bytes or
        # os.PathLike object, not NoneType", "unhashable type: 'list'"; a prefix None named parts "None-<id>-0.jsonl".
        (lambda p: ColumnBuckets(5), r"ColumnBuckets column=5 must be a column name, a str"),
        (lambda p: ColumnBuckets("k", timezone=None), r"ColumnBuckets timezone=None must be an IANA time zone name"),
        (lambda p: DateTimeBuckets(timezone=5), r"DateTimeBuckets timezone=5 must be an IANA time zone name"),
        (lambda p: DateTimeBuckets(column=5), r"DateTimeBuckets column=5 must be a column name \(a str\), or None"),
        (lambda p: FileSink(p, format=["jsonl"]), r"FileSink format=\['jsonl'\] is unknown; choose one of"),
        (lambda p: FileSink(p, prefix=None), r"FileSink prefix=None must be a str of letters, digits"),
        (lambda p: FileSink(p).with_part_names(prefix=None), r"FileSink prefix=None must be a str of letters, digits"),
    ],
)
def test_bad_configuration_is_refused_at_construction(tmp_path, build, match):
    with pytest.raises(ValueError, match=match):
        build(str(tmp_path))


@pytest.mark.parametrize("checkpoint", [None, " ", 5])
def test_a_checkpoint_location_that_is_no_path_is_refused_naming_it(tmp_path, checkpoint):
    # It reached the checkpoint's reading (None: a TypeError in fsspec naming no parameter).
    with pytest.raises(ValueError, match=rf"FileSink.start checkpoint_location={checkpoint!r} must be a directory's"):
        FileSink(str(tmp_path)).start(None, checkpoint)


def test_a_part_name_function_needs_no_prefix(tmp_path):
    # Refused with the prefix None that named parts "None-<id>-0.jsonl" without a function.
    sink = FileSink(str(tmp_path)).with_part_names(prefix=None, fn=lambda writer_id, n: f"p-{writer_id}-{n}")
    sink.write(pd.DataFrame({"x": [1]}))
    assert sink.read()["x"].tolist() == [1]


def test_a_lease_may_be_a_timedelta_and_counts_numpy_integers_as_the_key_value_store_does(tmp_path):
    # with_lease(timedelta(...)) and with_open_files(np.int64(5)) were refused; KVStore took both.
    sink = FileSink(str(tmp_path)).with_lease(timedelta(seconds=30)).with_open_files(np.int64(5), expire_after_ms=np.int64(9))
    sink = sink.with_rolling_policy(RollingPolicy(max_batches=np.int64(2)))
    assert (sink.lease_seconds, sink.max_open_files, sink.expire_after_ms) == (30.0, 5, 9)
    assert type(sink.max_open_files) is int and type(sink.rolling_policy.max_batches) is int
    sink.write(pd.DataFrame({"x": [1, 2]}))
    assert sink.read()["x"].tolist() == [1, 2]


def test_builder_steps_return_new_objects(tmp_path):
    base = FileSink(str(tmp_path))
    gz = base.with_compression("gzip")
    assert base.compression is None and gz.compression == "gzip"
    assert "key=" not in repr(base.with_encryption(KEY))  # never print the key


@pytest.mark.parametrize(("first", "then"), [("jsonl", "parquet"), ("parquet", "csv")])
def test_with_format_builds_the_sink_the_format_argument_builds(tmp_path, first, then):
    # The default rolling policy follows the format: a part per batch for bulk formats, by size and time for rows.
    switched = FileSink(str(tmp_path), format=first).with_format(then)
    assert switched == FileSink(str(tmp_path), format=then)
    switched.write(pd.DataFrame({"x": [1, 2]}))
    assert switched.read()["x"].tolist() == [1, 2]


def test_filesystems_that_cannot_append_need_a_part_per_batch():
    # The same row format and policy: accepted where files can be appended to, refused where they cannot.
    size_only = RollingPolicy(max_part_size=10)
    assert FileSink("memory://appends/x", format="jsonl").with_rolling_policy(size_only).rolling == size_only
    with pytest.raises(ValueError, match=r"'noappend://x' cannot be appended to; use RollingPolicy.on_every_batch"):
        FileSink("noappend://x", format="jsonl").with_rolling_policy(size_only)
    with pytest.raises(ValueError, match=r"'noappend://x' cannot be appended to"):
        FileSink("noappend://x").with_rolling_policy(RollingPolicy(max_batches=2))
    assert FileSink("noappend://x").rolling == RollingPolicy.on_every_batch()  # the default there
    assert FileSink("noappend://x").with_rolling_policy(RollingPolicy.on_every_batch()).rolling.every_batch


def test_default_names_follow_prefix_writer_part_suffix(tmp_path):
    sink = FileSink(str(tmp_path), compression="zstd")
    assert sink.part_file_name("w", 7) == "part-w-7.jsonl.zst"
    named = sink.with_part_names(prefix="out", suffix=".json")
    assert named.part_file_name("w", 0) == "out-w-0.json"
    custom = sink.with_part_names(fn=lambda writer, n: f"{writer}_{n:04d}.log")
    assert custom.part_file_name("w", 3) == "w_0003.log"
