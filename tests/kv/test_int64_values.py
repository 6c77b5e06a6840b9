"""`encode_int64` and `decode_int64` (counters as 8-byte values), on every pyarrow the package takes: these need no
Spark, so `make test-spark35` runs them on pyarrow 14 too, where `decode_int64` failed (it cast binary to a fixed
size, which pyarrow 14 does not do)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from storage.kv.spark import decode_int64, encode_int64


def test_int64_values_round_trip_and_absent_keys_count_zero():
    values = encode_int64(np.array([0, 1, -5, 2**62]))
    assert values.type == pa.binary() and values[1].as_py() == (1).to_bytes(8, "big")
    assert decode_int64(values).tolist() == [0, 1, -5, 2**62]
    assert decode_int64(pa.array([None, (7).to_bytes(8, "big")], pa.binary())).tolist() == [0, 7]


@pytest.mark.parametrize("values, bad", [([1.7], "1.7"), ([1.0, float("nan")], "nan"), ([2**64 - 1], "18446744073709551615"),
                                         (["a"], "'a'"), ([1, None], "None")], ids=str)
def test_int64_values_that_are_not_int64s_are_refused_naming_the_first(values, bad):
    """The cast truncated 1.7 to 1, made NaN a huge negative count and wrapped 2**64 - 1 to -1, without a word."""
    array = np.array(values, dtype=np.uint64 if bad.isdigit() else None)
    with pytest.raises(ValueError, match=rf"encode_int64 values: .*{bad}.* is not an int64; cast the column to int64"):
        encode_int64(array)
    assert decode_int64(encode_int64(np.array([1.0, -2.0]))).tolist() == [1, -2]  # whole floats are taken


def test_int64_values_are_read_from_any_slice_chunking_or_binary_type_and_other_widths_are_refused():
    values = encode_int64(np.array([0, 1, -5, 2**62]))
    assert decode_int64(values.slice(1, 2)).tolist() == [1, -5]
    assert decode_int64(values.cast(pa.large_binary()).slice(2)).tolist() == [-5, 2**62]
    assert decode_int64(pa.chunked_array([values.slice(3), values.slice(0, 1)])).tolist() == [2**62, 0]
    assert decode_int64(pa.array([(9).to_bytes(8, "big"), None], pa.binary(8)), missing=-1).tolist() == [9, -1]
    assert decode_int64(pa.array([], pa.binary())).tolist() == []
    with pytest.raises(ValueError, match=r"decode_int64 values: a value of 3 bytes is not one of encode_int64's \(8 bytes\)"):
        decode_int64(pa.array([(1).to_bytes(8, "big"), b"abc"]))


def test_decode_int64_takes_a_list_of_values_and_refuses_text_and_a_missing_that_is_no_int64():
    # A list failed with "'list' object has no attribute 'null_count'"; a string array's 8 characters were read as an
    # integer, and missing=1.5 was truncated to 1, without a word.
    assert decode_int64([(3).to_bytes(8, "big"), None], missing=-1).tolist() == [3, -1]
    if hasattr(pa, "binary_view"):  # pyarrow 16 on: Polars' binary
        assert decode_int64(pa.array([(4).to_bytes(8, "big")], pa.binary_view())).tolist() == [4]
    with pytest.raises(ValueError, match=r"decode_int64 values: an array of string, not encode_int64's binary values"):
        decode_int64(pa.array(["abcdefgh"]))
    with pytest.raises(ValueError, match=r"decode_int64 values: list is not encode_int64's 8-byte values"):
        decode_int64([1, 2])
    with pytest.raises(ValueError, match=r"decode_int64 missing=1.5 must be an int64"):
        decode_int64(pa.array([None], pa.binary()), missing=1.5)
