"""Keys as fixed-width rows, and sorted runs of (key, value) pairs, all vectorized.

A key of any length is encoded into a row of ``width`` bytes (a multiple of 8):
its bytes, zero padding, and its length as two big-endian bytes at the end.
Comparing rows byte by byte (NumPy's ``S`` dtype) orders them as the keys
themselves (a key sorts before its extensions: ``b"a" < b"a\\x00"``), so a run
is sorted with one ``argsort`` and a range is found with ``searchsorted``.
Exact lookups go through a 64-bit hash of the row instead: ``searchsorted`` on
integers is ten times faster than on byte strings, and every hit is checked
against the whole row, so a hash collision never returns a wrong value. A few
probes into a large run skip the index and binary-search the rows: building it
costs a sort of the whole run.
"""

from __future__ import annotations

import reprlib
from collections.abc import KeysView, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Literal, TypeVar

import numpy as np
import pyarrow as pa

_LEN_BYTES = 2
#: Keys may be up to this many bytes: a data block's header keeps the row width in 16 bits, and 65,528 is the
#: widest row (a multiple of 8) it holds, the key's two length bytes included.
MAX_KEY_BYTES = 65528 - _LEN_BYTES
_MULTIPLY = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_VALUE = pa.large_binary()
_OR_NONE = " (or None for a missing value)"
#: A run's hash index (hash all rows, sort them) pays off from about one probe per this many rows;
#: fewer probes binary-search the sorted rows instead.
_PROBES_PER_INDEX = 16
_Length = TypeVar("_Length", int, np.ndarray)


def width_for(max_length: _Length) -> _Length:
    """The row width for keys up to ``max_length`` bytes (one or an array of them): room for the length, rounded
    up to 8."""
    return -(-(max_length + _LEN_BYTES) // 8) * 8


def as_binary(values: Any, name: str, *, nulls: bool = False) -> pa.LargeBinaryArray:
    """``values`` (bytes, a list of bytes, an Arrow, NumPy or pandas column) as one Arrow large_binary array."""
    if isinstance(values, str):
        raise TypeError(f"{name}={values!r} is one str, which would be split into its characters; pass a list of "
                        f"bytes, [{values.encode()!r}] for this one")
    if isinstance(values, (AbstractSet, Mapping)) and not isinstance(values, KeysView):  # a dict's keys keep its order
        raise TypeError(f"{name} is a {type(values).__name__}, whose order would pair keys and values by chance; "
                        "pass a list in the order meant (a dict as list(d) and list(d.values()))")
    if isinstance(values, (bytes, bytearray, memoryview)):
        values = [bytes(values)]
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if not isinstance(values, pa.Array):
        if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):  # pandas
            values = values.to_numpy(dtype=object)
        if isinstance(values, np.ndarray) and values.dtype.kind == "S":
            raise TypeError(
                f"{name} is a NumPy bytes array (dtype {values.dtype}), which drops trailing zero bytes; "
                "pass a list of bytes, an object array or an Arrow binary array"
            )
        if isinstance(values, np.ndarray) and values.dtype.kind == "U":
            raise TypeError(
                f"{name} is a NumPy str array (dtype {values.dtype}), which Arrow would cut to its first "
                f"character; pass {name}.astype(object) or pa.array({name}) (stored as UTF-8), or a list of bytes"
            )
        if not isinstance(values, (list, np.ndarray)):
            try:
                values = list(values)
            except TypeError as exc:
                raise TypeError(f"{name} must hold bytes{_OR_NONE if nulls else ''}: {exc}") from None
        if isinstance(values, list):
            _refuse_str(values, name)
        else:
            _refuse_str_beside_bytes(values, name)
        try:
            values = pa.array(values, _VALUE)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise TypeError(f"{name} must hold bytes{_OR_NONE if nulls else ''}: {exc}") from None
    if is_view(values.type):
        values = values.cast(_VALUE)
    if pa.types.is_binary(values.type) or pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = values.cast(_VALUE) if not pa.types.is_string(values.type) else values.cast(pa.binary()).cast(_VALUE)
    elif pa.types.is_fixed_size_binary(values.type):
        values = values.cast(pa.binary()).cast(_VALUE)
    elif not pa.types.is_large_binary(values.type):
        raise TypeError(f"{name} must be a binary column, not Arrow type {values.type}")
    if not nulls and values.null_count:
        first = values.is_null().to_numpy(zero_copy_only=False).argmax()
        raise ValueError(f"{name} holds {values.null_count} null(s), the first at position {first}; keys must be bytes")
    return values


def is_view(kind: pa.DataType) -> bool:
    """An Arrow binary or string view (pyarrow 16 on: Polars' binary and str)."""
    return any(getattr(pa.types, test, lambda _: False)(kind) for test in ("is_binary_view", "is_string_view"))


def _refuse_str(values: list[Any], name: str) -> None:
    """A str in a list of keys or values is refused, as ``put`` refuses it (Arrow would store its UTF-8 bytes:
    a list mixing ``"a"`` and ``b"a"`` would write one key twice, unnoticed). The types are gathered in C
    (``map(type)``) before any Python loop, which only a list holding a str pays."""
    if not any(issubclass(kind, str) for kind in set(map(type, values))):
        return
    at = next(i for i, value in enumerate(values) if isinstance(value, str))
    raise TypeError(f"{name}[{at}]={reprlib.repr(values[at])} is a str; {name} must hold bytes, as put takes "
                    "them (encode it, or pass an Arrow string column, taken as UTF-8)")


def _refuse_str_beside_bytes(values: np.ndarray, name: str) -> None:
    """An object array (or pandas column) of text is taken as UTF-8, the way out of a NumPy ``U`` array; one that
    mixes text and bytes is refused, as a list holding a str is: ``"a"`` and ``b"a"`` would be one key, written twice."""
    kinds = set(map(type, values))
    if any(issubclass(kind, str) for kind in kinds) and any(issubclass(kind, (bytes, bytearray)) for kind in kinds):
        at = next(i for i, value in enumerate(values) if isinstance(value, str))
        raise TypeError(f"{name}[{at}]={reprlib.repr(values[at])} is a str beside bytes in one column; encode it, so "
                        f"that text and bytes of the same characters are not one {name[:-1]} written twice")


def check_key_lengths(keys: pa.LargeBinaryArray, name: str) -> None:
    """Refuse a write of a key longer than ``MAX_KEY_BYTES`` when it is made, not at the commit that stores it."""
    lengths = key_lengths(keys)
    if len(lengths) and int(lengths.max()) > MAX_KEY_BYTES:
        at = int(lengths.argmax())
        raise ValueError(
            f"{name}[{at}] has {int(lengths[at]):,} bytes, more than the {MAX_KEY_BYTES:,} a key may have "
            "(a data block keeps its row width in 16 bits)"
        )


def _offsets(array: pa.LargeBinaryArray) -> tuple[np.ndarray, np.ndarray]:
    """The value offsets (n + 1, relative to the first) and the data bytes of a large_binary array."""
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, len(array) + 1, array.offset * 8)
    start, stop = int(offsets[0]), int(offsets[-1])
    if data_buf is None or stop == start:
        return offsets - start, np.zeros(0, np.uint8)
    data = np.frombuffer(data_buf, np.uint8, stop - start, start)
    return offsets - start, data


def key_lengths(keys: pa.LargeBinaryArray) -> np.ndarray:
    offsets, _ = _offsets(keys)
    return np.diff(offsets)


def encode(keys: pa.LargeBinaryArray, width: int | None = None) -> np.ndarray:
    """Rows ``(n, width)`` of uint8 for ``keys``; ``width`` defaults to the smallest that holds them."""
    offsets, data = _offsets(keys)
    lengths = np.diff(offsets)
    longest = int(lengths.max()) if len(lengths) else 0
    if longest > MAX_KEY_BYTES:
        raise ValueError(f"a key of {longest} bytes is longer than the {MAX_KEY_BYTES} bytes a key may have")
    width = width_for(longest) if width is None else width
    if longest + _LEN_BYTES > width:
        raise ValueError(f"a key of {longest} bytes does not fit rows of {width} bytes")  # a bug, not input
    n = len(keys)
    rows = np.zeros((n, width), np.uint8)
    if n and longest and (lengths == longest).all():
        rows[:, :longest] = data.reshape(n, longest)
    elif len(data):
        row = np.repeat(np.arange(n), lengths)
        col = np.arange(len(data)) - np.repeat(offsets[:-1], lengths)
        rows[row, col] = data
    rows[:, -2] = lengths >> 8
    rows[:, -1] = lengths & 0xFF
    return rows


def widen(rows: np.ndarray, width: int) -> np.ndarray:
    """The same keys as rows of a larger ``width``."""
    if rows.shape[1] == width:
        return rows
    out = np.zeros((len(rows), width), np.uint8)
    out[:, : rows.shape[1] - _LEN_BYTES] = rows[:, :-_LEN_BYTES]
    out[:, -_LEN_BYTES:] = rows[:, -_LEN_BYTES:]
    return out


def narrow(rows: np.ndarray, width: int) -> np.ndarray:
    """Rows re-encoded at another ``width``, a new array unless it is theirs (a scan's bound rows are shared by all
    its layers). A key too long for it keeps its first ``width - 2`` bytes and the length 0xFFFF: it then sorts
    right after them, so it compares with every key that fits as the key itself does (never equal to one)."""
    if rows.shape[1] == width:
        return rows
    if rows.shape[1] < width:
        return widen(rows, width)
    out = rows[:, :width].copy()  # not ascontiguousarray: one row cut short is contiguous already, a view
    out[:, -_LEN_BYTES:] = rows[:, -_LEN_BYTES:]
    out[row_lengths(rows) > width - _LEN_BYTES, -_LEN_BYTES:] = 0xFF
    return out


def row_lengths(rows: np.ndarray) -> np.ndarray:
    return (rows[:, -2].astype(np.int64) << 8) | rows[:, -1]


def decode(rows: np.ndarray) -> pa.LargeBinaryArray:
    """The keys of ``rows`` as an Arrow large_binary array."""
    n = len(rows)
    lengths = row_lengths(rows)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if n and (lengths == lengths[0]).all():
        data = np.ascontiguousarray(rows[:, : int(lengths[0])]).ravel()
    else:
        data = rows[np.arange(rows.shape[1])[None, :] < lengths[:, None]]
    return pa.Array.from_buffers(_VALUE, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def sortable(rows: np.ndarray) -> np.ndarray:
    """A 1-d ``S<width>`` view of the rows: NumPy compares these as the keys compare."""
    rows = np.ascontiguousarray(rows)
    return rows.view(f"S{rows.shape[1]}").ravel()


def hashes(rows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row (a multiply-xorshift over its 8-byte words)."""
    words = np.ascontiguousarray(rows).view(np.uint64)
    h = np.full(len(rows), 0x2545F4914F6CDD1D, np.uint64)
    with np.errstate(over="ignore"):
        for column in range(words.shape[1]):
            h ^= words[:, column]
            h *= _MULTIPLY
            h ^= h >> np.uint64(29)
        h *= _MIX
        h ^= h >> np.uint64(32)
    return h


def successor(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with ``prefix``; None when there is none (all 0xff)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


@dataclass
class Run:
    """Sorted, unique keys (as rows) and their values; a null value marks a delete (a tombstone)."""

    rows: np.ndarray
    values: pa.LargeBinaryArray
    _index: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return self.rows.shape[1]

    @property
    def nbytes(self) -> int:
        index = sum(a.nbytes for a in self._index) if self._index is not None else 0
        return self.rows.nbytes + self.values.nbytes + index

    @classmethod
    def empty(cls) -> Run:
        return cls(np.zeros((0, 8), np.uint8), pa.array([], _VALUE))

    @classmethod
    def from_writes(cls, keys: pa.LargeBinaryArray, values: pa.LargeBinaryArray) -> Run:
        """A run of writes in order: the last write of a key wins."""
        return cls.from_rows(encode(keys), values)

    @classmethod
    def from_rows(cls, rows: np.ndarray, values: pa.Array) -> Run:
        if not len(rows):
            return cls(rows, pa.array([], _VALUE))
        rows = np.ascontiguousarray(rows)
        order = np.argsort(sortable(rows), kind="stable")
        in_order = bool((order[1:] > order[:-1]).all())
        words = rows.view(np.uint64) if in_order else rows[order].view(np.uint64)
        last = np.ones(len(order), bool)  # the last write of each key (equal rows compared as 8-byte words)
        last[:-1] = (words[1:] != words[:-1]).any(axis=1)
        if in_order and last.all():
            return cls(rows, values)
        keep = order[last]
        return cls(np.ascontiguousarray(rows[keep]), values.take(pa.array(keep)))

    @classmethod
    def merge(cls, runs: list[Run]) -> Run:
        """One run of ``runs`` (oldest first): a key's newest value wins, tombstones kept."""
        runs = [r for r in runs if len(r)]
        if len(runs) <= 1:
            return runs[0] if runs else cls.empty()
        width = max(r.width for r in runs)
        rows = np.concatenate([widen(r.rows, width) for r in runs])
        if all(sortable(rows[:1])[0] < sortable(rows[1:2])[0] for rows in _seams(runs, width)):
            return cls(rows, concat_values([r.values for r in runs]))  # already in order: monotonic keys
        values = pa.chunked_array([r.values for r in runs], _VALUE)
        merged = cls.from_rows(rows, values)
        if isinstance(merged.values, pa.ChunkedArray):
            merged.values = merged.values.combine_chunks()
        return merged

    def without_tombstones(self) -> Run:
        if not self.values.null_count:
            return self
        live = self.values.is_valid().to_numpy(zero_copy_only=False)
        return Run(self.rows[live], self.values.filter(pa.array(live)))

    def keys(self) -> pa.LargeBinaryArray:
        return decode(self.rows)

    def slice(self, start: int, stop: int) -> Run:
        return Run(self.rows[start:stop], self.values.slice(start, stop - start))

    def bounds(self, start_rows: np.ndarray | None, stop_rows: np.ndarray | None) -> tuple[int, int]:
        """Positions ``[lo, hi)`` of the keys ``start <= key < stop`` (a bound of None is open)."""
        keys = sortable(self.rows)
        lo = 0 if start_rows is None else search(keys, start_rows, self.width, "left")
        hi = len(self) if stop_rows is None else search(keys, stop_rows, self.width, "left")
        return lo, max(lo, hi)

    def _hash_index(self) -> tuple[np.ndarray, np.ndarray]:
        if self._index is None:
            h = hashes(self.rows)
            order = np.argsort(h, kind="stable")
            self._index = (h[order], order)
        return self._index

    def find(self, probe_rows: np.ndarray, probe_hashes: np.ndarray) -> np.ndarray:
        """The position of each probe's key in this run, -1 where absent.

        ``probe_rows`` are at this run's width, ``probe_hashes`` their hashes
        (best sorted: ``searchsorted`` is then cache-friendly).
        """
        if not len(self) or not len(probe_rows):
            return np.full(len(probe_rows), -1, np.int64)
        if self._index is None and len(probe_rows) * _PROBES_PER_INDEX < len(self):
            return self._find_sorted(probe_rows)
        sorted_hashes, order = self._hash_index()
        at = np.searchsorted(sorted_hashes, probe_hashes)
        np.minimum(at, len(sorted_hashes) - 1, out=at)
        same_hash = sorted_hashes[at] == probe_hashes
        found = order[at]
        equal = same_hash & _rows_equal(self.rows[found], probe_rows)
        collided = np.flatnonzero(same_hash ^ equal)  # same hash, another key: look at the others
        found[~equal] = -1
        for i in collided:
            j = int(at[i]) + 1
            while j < len(sorted_hashes) and sorted_hashes[j] == probe_hashes[i]:
                if _rows_equal(self.rows[order[j]][None, :], probe_rows[i][None, :])[0]:
                    found[i] = order[j]
                    break
                j += 1
        return found

    def _find_sorted(self, probe_rows: np.ndarray) -> np.ndarray:
        """`find` by binary search over the sorted rows: no index to build, for a few probes into a large run
        (a freshly read data block that a sparse batch of gets touches once)."""
        at = np.searchsorted(sortable(self.rows), sortable(probe_rows))
        np.minimum(at, len(self) - 1, out=at)
        return np.where(_rows_equal(self.rows[at], probe_rows), at, -1)


def _seams(runs: list[Run], width: int) -> Iterator[np.ndarray]:
    """For each pair of neighbouring runs, the older one's last row and the newer one's first, at ``width``."""
    for older, newer in zip(runs, runs[1:]):
        yield np.concatenate([widen(older.rows[-1:], width), widen(newer.rows[:1], width)])


def search(sorted_keys: np.ndarray, bound_rows: np.ndarray, width: int, side: Literal["left", "right"]) -> int:
    """Where the one key of ``bound_rows`` goes among ``sorted_keys`` (``sortable`` rows of ``width``)."""
    return int(np.searchsorted(sorted_keys, sortable(narrow(bound_rows, width))[0], side=side))


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.shape[1] % 8 == 0:
        return (a.view(np.uint64) == b.view(np.uint64)).all(axis=1)
    return (a == b).all(axis=1)


def concat_values(pieces: Iterable[pa.Array]) -> pa.LargeBinaryArray:
    chunks = [p for p in pieces if len(p)]
    if not chunks:
        return pa.array([], _VALUE)
    return pa.concat_arrays(chunks) if len(chunks) > 1 else chunks[0]
