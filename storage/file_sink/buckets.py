"""Bucket assigners: which sub-directory of the base path a row lands in.

Every assigner maps a whole Arrow table to one bucket id per row at once
(vectorized), because the sink sees micro-batches, never single rows.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable, Protocol
from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd
import pyarrow as pa


class BucketAssigner(Protocol):
    """Maps the rows of a batch to bucket ids ('' is the base path itself)."""

    def assign(self, table: pa.Table, processing_time_ms: int) -> list[str] | str:
        """One bucket id per row, or a single id for every row of the batch."""


def check_timezone(assigner: DateTimeBuckets | ColumnBuckets) -> None:
    """Refuse an assigner whose time zone zoneinfo does not know, when it is built rather than at its first batch."""
    if not isinstance(assigner.timezone, str):  # zoneinfo's own "expected str, bytes or os.PathLike" named neither
        raise ValueError(
            f"{type(assigner).__name__} timezone={assigner.timezone!r} must be an IANA time zone name, a str such as "
            "'UTC' or 'Europe/Berlin'"
        )
    try:
        ZoneInfo(assigner.timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"{type(assigner).__name__} timezone={assigner.timezone!r} is not a known IANA time zone; "
            "use a name such as 'UTC' or 'Europe/Berlin'"
        ) from exc


def shorten(text: str) -> str:
    """``text`` quoted for an error message, cut after 40 characters."""
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}..."


def check_bucket_id(bucket: Any, assigner: BucketAssigner, name_limit: int | None = None) -> None:
    """Refuse a bucket id that is not a directory below the base path that readers see, or that has a level of
    more than ``name_limit`` bytes, which the filesystem would refuse halfway through the batch (None: no limit)."""
    refused = f"FileSink bucket id {bucket!r} from {type(assigner).__name__} is refused"
    if not isinstance(bucket, str):
        raise TypeError(f"{refused}: a bucket id is a str")
    if "\x00" in bucket:  # no filesystem names a directory so: it failed with Python's bare "embedded null byte"
        raise ValueError(f"{refused}: it holds a NUL character, which no directory name may hold")
    for level in bucket.split("/") if bucket else []:
        if level in ("", ".", ".."):
            raise ValueError(f"{refused}: a level is {level!r}; a bucket id is '/'-separated directory names")
        if level[0] in "._":
            raise ValueError(f"{refused}: level {level!r} starts with {level[0]!r}, so readers would skip its rows")
        size = len(level.encode())
        if name_limit is not None and size > name_limit:
            raise ValueError(_long_name_error(level, size, name_limit, assigner))


def _long_name_error(level: str, size: int, limit: int, assigner: BucketAssigner) -> str:
    over = (f"is {size} bytes (UTF-8): more than the {limit} bytes the filesystem allows in a name, so the batch "
            "is refused and nothing of it is committed")
    if isinstance(assigner, ColumnBuckets):
        value = unquote(level.partition("=")[2])  # the escaped column holds no '='; unquote undoes hive_escape
        return (
            f"ColumnBuckets column={assigner.column!r} has a value of {len(value)} characters ({shorten(value)}) "
            f"whose directory name, escaped as Spark escapes it, {over}. Bucket by a shorter column derived from "
            "this one instead, such as a prefix or a hash of the value (Spark's sha2(col, 256) is 64 characters)"
        )
    return (
        f"FileSink bucket directory {shorten(level)} ({len(level)} characters) from {type(assigner).__name__} "
        f"{over}. Name buckets shorter, such as by a prefix or a hash of what names them"
    )


@dataclass(frozen=True)
class BasePathBuckets:
    """Every part file directly under the base path (one bucket)."""

    def assign(self, table: pa.Table, processing_time_ms: int) -> str:
        return ""


@dataclass(frozen=True)
class DateTimeBuckets:
    """Buckets named by time, Flink's ``yyyy-MM-dd--HH`` by default.

    ``column`` names the event-time column (timestamps, dates, or numbers in epoch
    milliseconds; another type, a string or boolean, is refused); ``None`` buckets by the batch's
    processing time instead.
    A null time fails the whole batch: no bucket would be right for it.
    """

    pattern: str = "%Y-%m-%d--%H"
    timezone: str = "UTC"
    column: str | None = None

    def __post_init__(self) -> None:
        check_timezone(self)
        if self.column is not None and not isinstance(self.column, str):  # an int picked a column by position
            raise ValueError(
                f"DateTimeBuckets column={self.column!r} must be a column name (a str), or None for processing time"
            )
        if not isinstance(self.pattern, str) or not self.pattern or "/" in self.pattern or ".." in self.pattern:
            raise ValueError(
                f"DateTimeBuckets pattern={self.pattern!r} must be a non-empty strftime pattern (a str) "
                "without '/' or '..'; a bucket is one directory level"
            )

    def assign(self, table: pa.Table, processing_time_ms: int) -> list[str] | str:
        if self.column is None:
            stamp = pd.Timestamp(processing_time_ms, unit="ms", tz="UTC")
            return stamp.tz_convert(self.timezone).strftime(self.pattern)
        kind = table.schema.field(self.column).type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        if not (pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_integer(kind)
                or pa.types.is_floating(kind)):
            raise ValueError(
                f"DateTimeBuckets column={self.column!r} is of type {kind}; it takes timestamps, dates or numbers "
                "(epoch milliseconds): parse or cast it first (Spark: to_timestamp(col))"
            )
        values = table.column(self.column)
        if pa.types.is_dictionary(values.type):  # a pandas Categorical is not numeric to pandas: its epoch
            values = values.cast(kind)           # milliseconds were read as nanoseconds, every row in 1970
        col = values.to_pandas()
        if pa.types.is_integer(kind) or pa.types.is_floating(kind):
            col = self._from_epoch_millis(col)
        else:
            col = pd.to_datetime(col, utc=True)
        nulls = int(col.isna().sum())
        if nulls:  # factorize would code them -1, and take(-1) the last bucket name
            raise ValueError(
                f"DateTimeBuckets column={self.column!r} has {nulls} null timestamp(s) in this batch; a row without "
                "a time has no bucket: fill or drop them, or bucket by processing time (column=None)"
            )
        # strftime per distinct second only: a batch has far fewer of them than rows. In seconds: pd.Timestamp.max
        # has no local time east of UTC in pandas' nanoseconds; and by integer floor division, since NumPy's cast of
        # pd.Timestamp.min to seconds wraps around to 2262.
        ticks = col.dt.tz_localize(None).to_numpy()
        per_second = np.timedelta64(1, "s") // np.timedelta64(1, np.datetime_data(ticks.dtype)[0])
        seconds = (ticks.view(np.int64) // per_second).astype("datetime64[s]")
        codes, uniques = pd.factorize(seconds)
        names = pd.DatetimeIndex(uniques).tz_localize("UTC").tz_convert(self.timezone).strftime(self.pattern)
        return list(pd.Index(names).take(codes))

    def _from_epoch_millis(self, millis: pd.Series) -> pd.Series:
        """``millis`` as UTC timestamps; a value pandas cannot hold as one (infinite, or too far from 1970) is
        refused naming the column and the value, where pandas' OutOfBoundsDatetime named neither."""
        try:
            return pd.to_datetime(millis, unit="ms", utc=True)
        except (OverflowError, ValueError):  # pandas' OutOfBoundsDatetime is a ValueError; pandas 2's inf Overflow
            stray = next((value for value in millis.dropna().tolist() if not _a_time(value)), None)
            if stray is None:
                raise
            raise ValueError(
                f"DateTimeBuckets column={self.column!r} has the value {stray!r} (epoch milliseconds), which is no "
                "time pandas can hold (infinite, or too far from 1970), so no bucket: drop, fill or clip such rows first"
            ) from None


def _a_time(millis: Any) -> bool:
    """Whether pandas holds ``millis`` epoch milliseconds as a time."""
    try:
        pd.to_datetime(pd.Series([millis]), unit="ms", utc=True)
    except (OverflowError, ValueError):
        return False
    return True


# What Hive and Spark percent-escape in a partition directory name (Hive's FileUtils.escapePathName);
# their readers, and pyarrow's hive partitioning, decode it back.
HIVE_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x20)}


# What Hive and Spark write for a null or empty partition value, and read back as null (Spark refuses a
# ``k=`` directory with nothing after the ``=``).
HIVE_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def hive_escape(text: str) -> str:
    """``text`` as Hive and Spark write it in a partition directory name."""
    return "".join(f"%{ord(c):02X}" if c in HIVE_ESCAPED else c for c in text)


def java_float_text(number: np.floating) -> str:
    """``number`` as Java's ``Double.toString`` (``Float.toString`` for a float32) prints it, which Spark uses.

    The digits are the shortest that read back as ``number`` at its width (where
    one digit would do, the closer of one or two), as Java 19 and later choose
    them; Java 17 and older print more for some (``9.999999999999999E22`` for
    ``1e23``). Plain for 10^-3 <= |number| < 10^7, else ``d.dddE<exponent>``;
    always a digit after the point.
    """
    if np.isnan(number):
        return "NaN"
    if np.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0:
        return "-0.0" if np.signbit(number) else "0.0"
    sign, digits, exponent = Decimal(str(number)).normalize().as_tuple()  # numpy prints the shortest digits
    if len(digits) == 1:
        two_digits = np.format_float_scientific(number, precision=1, unique=False)
        if type(number)(two_digits) == number:
            sign, digits, exponent = Decimal(two_digits).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(digits) + exponent  # digits before the decimal point
    if -2 <= point <= 7:
        if point <= 0:
            plain = "0." + "0" * -point + text
        else:
            plain = text[:point].ljust(point, "0") + "." + (text[point:] or "0")
    else:
        plain = f"{text[0]}.{text[1:] or '0'}E{point - 1}"
    return "-" + plain if sign else plain


#: The integer type a float's bits are viewed as.
SAME_WIDTH_INTEGER = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}

#: Timestamp units per second, to count in microseconds, Spark's unit.
UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@dataclass(frozen=True)
class ColumnBuckets:
    """One bucket per distinct value of a column, named ``<column>=<value>``.

    The value is written as Spark's own ``partitionBy`` writes it, so Spark's
    partition discovery reads the directories back as it reads Spark's:
    ``true``, Java's float texts (``NaN``, ``-Infinity``, ``1.0E7``),
    decimals with all their scale's digits, timestamps as
    ``yyyy-MM-dd HH:mm:ss[.ffffff]`` (trailing zeros cut, floored to
    microseconds) in ``timezone`` when the column has a time zone (Spark's
    session time zone; naive ones as they are). Name and value are escaped as
    Hive escapes them ('/' as ``%2F``, ...), so a value can neither add
    directory levels nor hide its rows. A null or empty value is
    ``<column>=__HIVE_DEFAULT_PARTITION__``, which Spark and pyarrow read back
    as null. Another column type is refused: Spark would not read its names
    back as the values; so is a batch with a value whose name is longer than
    the filesystem allows (``check_bucket_id``), before anything is written.
    """

    column: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if not isinstance(self.column, str):  # Python's "'int' object is not subscriptable" named neither
            raise ValueError(f"ColumnBuckets column={self.column!r} must be a column name, a str")
        if not self.column or self.column[0] in "._":
            raise ValueError(
                f"ColumnBuckets column={self.column!r} would name directories that readers skip "
                "(empty, or starting with '.' or '_'); bucket by another column, or rename it"
            )
        check_timezone(self)

    def assign(self, table: pa.Table, processing_time_ms: int) -> list[str]:
        values = table.column(self.column).combine_chunks()
        kind = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
        texts = self._texts_of(kind)
        # Name each distinct value once.
        if pa.types.is_dictionary(values.type):
            distinct, indices = values.dictionary, values.indices
        elif pa.types.is_floating(kind):  # encoded by their bits, which tell -0.0 from 0.0
            encoded = values.view(SAME_WIDTH_INTEGER[kind.bit_width]).dictionary_encode()
            distinct, indices = encoded.dictionary.view(kind), encoded.indices
        else:
            encoded = values.dictionary_encode()
            distinct, indices = encoded.dictionary, encoded.indices
        prefix = f"{hive_escape(self.column)}="
        null_name = prefix + HIVE_NULL_PARTITION
        names = [prefix + hive_escape(text) if text else null_name for text in texts(distinct)]
        return [null_name if i is None else names[i] for i in indices.to_pylist()]

    def _timestamp_text(self, ticks: int, kind: pa.TimestampType) -> str:
        micros = ticks * 1_000_000 // UNITS_PER_SECOND[kind.unit]  # floored, as Spark takes nanoseconds in
        epoch = datetime(1970, 1, 1, tzinfo=None if kind.tz is None else timezone.utc)
        try:
            moment = epoch + timedelta(microseconds=micros)
            if kind.tz is not None:
                moment = moment.astimezone(ZoneInfo(self.timezone))
        except OverflowError as exc:
            raise ValueError(
                f"ColumnBuckets column={self.column!r} has a timestamp of {ticks} {kind.unit} since 1970, outside "
                f"the years 1 to 9999 in timezone={self.timezone!r}, which a directory name can hold; "
                "drop or clip such rows, or bucket by another column"
            ) from exc
        fraction = f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else ""
        return f"{moment.year:04d}-{moment:%m-%d %H:%M:%S}{fraction}"

    def _texts_of(self, kind: pa.DataType) -> Callable[[pa.Array], list[str | None]]:
        """How Spark casts values of ``kind`` to strings for partition directories (None for null)."""

        def each(text: Callable[[Any], str]) -> Callable[[pa.Array], list[str | None]]:
            return lambda values: [None if v is None else text(v) for v in values.to_pylist()]

        if pa.types.is_null(kind):
            return each(str)  # every value is None
        if pa.types.is_boolean(kind):
            return each(lambda v: "true" if v else "false")
        if pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return each(str)
        if pa.types.is_floating(kind):
            width = np.dtype(kind.to_pandas_dtype()).type
            return each(lambda v: java_float_text(width(v)))
        if pa.types.is_decimal(kind):
            return each(lambda v: format(v, "f"))  # all the scale's digits, never an exponent
        if pa.types.is_date(kind):
            return each(lambda v: v.isoformat())
        if pa.types.is_timestamp(kind):
            ticks = each(lambda t: self._timestamp_text(t, kind))
            return lambda values: ticks(values.cast(pa.int64()))
        raise TypeError(
            f"ColumnBuckets column={self.column!r} has type {kind}, whose directory names Spark would read back "
            "as other values; bucket by a boolean, integer, float, string, date, timestamp or decimal column "
            "(cast it first, to a string for example)"
        )

@dataclass(frozen=True)
class CallableBuckets:
    """A user function ``(row: dict, processing_time_ms) -> bucket id`` per row."""

    fn: Callable[[dict, int], str]

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ValueError(f"CallableBuckets fn={self.fn!r} must be a function (row: dict, processing_time_ms) -> str")
        try:
            inspect.signature(self.fn).bind({}, 0)
        except TypeError as err:  # else the first batch failed with Python's "takes 1 positional argument but 2 ..."
            raise ValueError(f"CallableBuckets fn={self.fn!r} must take two arguments, (row: dict, processing_time_ms): "
                             f"{err}") from None
        except ValueError:  # no signature to read (some built-ins): the first call tells
            pass

    def assign(self, table: pa.Table, processing_time_ms: int) -> list[str]:
        ids = [self.fn(row, processing_time_ms) for row in table.to_pylist()]
        for bucket in ids:
            if not isinstance(bucket, str):  # str() of it made directories named "None" or "['x']"
                check_bucket_id(bucket, self)
        return ids
