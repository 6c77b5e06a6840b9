"""The splitter's configuration: one frozen dataclass, validated on construction.

Every check names the parameter and the value, so a typo in a Spark option or a
keyword argument fails before any file is listed.
"""

from __future__ import annotations

import json
import operator
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Mapping

from fsspec.core import split_protocol

from .._fs import absolute_if_local
from .._units import parse_seconds, parse_size

#: 128 MiB, as Spark's own ``spark.sql.files.maxPartitionBytes`` and HDFS's block size: in
#: benchmarks/splitter_bench.py 128 MiB blocks read faster than 32 MiB (fewer tasks, each with a
#: cost of its own), and a task's memory does not grow with its block (it reads 4 MiB pieces).
#: Smaller blocks give more parallel tasks per file.
DEFAULT_BLOCK_SIZE = 128 * 1024 * 1024

#: Record formats: lines, or CSV records without newlines inside values.
FORMATS = ("text", "csv")
#: Columns every record carries after its own; a CSV column may not take these names.
LOCATION_COLUMNS = ("path", "block_id", "offset")
#: Types a CSV column may have: the Spark types a string casts to as a scalar (``read_stream``
#: applies them with ``try_cast``), aliases included; ``decimal`` may say ``(precision, scale)``.
#: Anything else (a typo, ``array<int>``, an interval) would fail inside a Spark query, or pass
#: unnoticed with pandas, which reads every column as a string.
CSV_TYPES = (
    "string", "boolean", "tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long",
    "float", "real", "double", "decimal", "dec", "numeric", "date", "timestamp", "timestamp_ntz",
    "timestamp_ltz", "binary",
)
_DECIMAL_RE = re.compile(r"(decimal|dec|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
#: Spark's largest decimal precision.
_MAX_PRECISION = 38

#: File names the scanner never offers: hidden ('.x', '_SUCCESS') and temporary files.
TEMPORARY_SUFFIXES = (".tmp", ".temp", ".crc", ".inprogress", ".partial", ".swp", "~")


def _positive_int(name: str, value: int | str) -> int:
    """An int or a string of one; a float is refused rather than cut (2.9 is not 2 blocks)."""
    try:
        number = int(value) if isinstance(value, str) else operator.index(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} must be a positive integer") from None
    if number <= 0 or isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return number


@dataclass(frozen=True)
class SplitterConfig:
    """What to scan and how to cut it into blocks.

    ``paths``: files or directories, all on one fsspec filesystem (local when no protocol).
    ``pattern``: a regular expression that must match the whole file name (not the directory).
    ``block_size``: bytes per block; a record belongs to the block holding its first byte. A
    compressed file (``.gz``, ``.bz2``, ``.xz``, ``.zst``, ``.deflate``) is one block whatever it says.
    ``blocks_per_batch``: at most this many blocks per micro-batch (Apex's blocksThreshold).
    ``scan_interval``: seconds between two listings; a listing is reused until then.
    ``settle``: a file is stable once its size and mtime have stayed the same this many seconds
    (its mtime is that old, or the scans have seen them unchanged that long); unstable files
    wait, and a hand-out that finds nothing else to give waits for them, at most ``settle``
    seconds (``BlockPlanner.next_blocks``).
    ``watermark_slack``: files whose mtime is older than the newest fully read file minus this
    slack are forgotten and never offered again; ``None`` (or ``"none"``) remembers every file (unbounded).
    ``continuous``: keep scanning for new files; ``False`` reads what the first scan found and ends.
    ``strict``: an unreadable file (a corrupt compressed one included; one ending inside a stream is
    not), or a refused ``.lz4``, ``.snappy`` or ``.zip`` one, raises instead of being skipped with a warning.
    ``format``: ``"text"`` (one record per line) or ``"csv"`` (CSV records without newlines in
    values; needs ``columns``).
    ``columns``: for CSV, the column names in file order, each optionally with one of
    ``CSV_TYPES`` (``"ts timestamp, user, amount long"``; the default type is ``string``).
    ``header``: for CSV, the first non-blank line of each file is a header, not a record (blank
    lines, empty or of characters up to U+0020 only, are skipped, as Spark's CSV reader skips them).
    ``scan_trigger_file``: a file whose content changing (``FileSplitter.trigger_scan()`` writes a
    new token into it) makes the next hand-out list the files at once, whatever ``scan_interval``
    says; it reaches a Spark source running in another process. Name it with a leading ``_`` or
    ``.`` (or keep it outside ``paths``) so it is never read as data.
    ``quick_ack``: on Spark, the Python workers reading the blocks acknowledge at once what the JVM
    sends them over TCP (`storage.worker_socket`), so no exchange waits for a delayed ACK; ``False``
    leaves their sockets as pyspark set them. Speed only: the rows read are the same either way.
    """

    paths: tuple[str, ...]
    recursive: bool = True
    pattern: str | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    blocks_per_batch: int = 16
    scan_interval: float = 10.0
    settle: float = 2.0
    watermark_slack: float | None = 3600.0
    continuous: bool = True
    strict: bool = False
    storage_options: Mapping[str, str] = field(default_factory=dict)
    scan_trigger_file: str | None = None
    format: str = "text"
    columns: tuple[tuple[str, str], ...] | None = None
    header: bool = True
    quick_ack: bool = True

    def __post_init__(self) -> None:
        try:
            paths = (self.paths,) if isinstance(self.paths, str) else tuple(self.paths)
        except TypeError:  # not iterable (123, None): refused below, naming the value
            paths = ()
        if not paths or not all(isinstance(p, str) and p for p in paths):
            raise ValueError(f"paths={self.paths!r} must be one or more non-empty path strings")
        paths = tuple(absolute_if_local(path) for path in paths)  # where the splitter is made, as a sink's path
        object.__setattr__(self, "paths", paths)
        if not isinstance(self.storage_options, Mapping) or not all(isinstance(k, str) for k in self.storage_options):
            raise ValueError(f"storage_options={self.storage_options!r} must be a mapping of fsspec option names to values")
        object.__setattr__(self, "storage_options", dict(self.storage_options))
        for name in ("recursive", "continuous", "strict", "header", "quick_ack"):  # "false" would count as true
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if self.pattern is not None and not isinstance(self.pattern, str):
            raise ValueError(f"pattern={self.pattern!r} must be a regular expression in a string")
        if self.pattern == "":  # it must match the whole name: only a file named "" would pass
            raise ValueError("pattern='' matches no file name (it must match the whole name); give None for every file")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as err:
                raise ValueError(f"pattern={self.pattern!r} is not a valid regular expression: {err}") from None
        object.__setattr__(self, "block_size", parse_size("block_size", self.block_size))
        object.__setattr__(self, "blocks_per_batch", _positive_int("blocks_per_batch", self.blocks_per_batch))
        object.__setattr__(self, "scan_interval", parse_seconds("scan_interval", self.scan_interval))
        given_settle, settle = self.settle, parse_seconds("settle", self.settle)
        if settle == float("inf"):
            raise ValueError(f"settle={self.settle!r} must be a finite number of seconds: no file would ever be stable")
        object.__setattr__(self, "settle", settle)
        slack = self.watermark_slack
        if isinstance(slack, str) and slack.strip().lower() == "none":  # as the Spark option says it
            slack = None
        object.__setattr__(self, "watermark_slack", parse_seconds("watermark_slack", slack, allow_none=True))
        if self.watermark_slack is not None and self.watermark_slack < settle:
            raise ValueError(
                f"watermark_slack={slack!r} must be at least settle={given_settle!r}: a file is handed out settle "
                "seconds after its mtime at the earliest, so a smaller slack counts a file still settling as read "
                "once a file dated ahead of the clock has moved the watermark to the clock")
        object.__setattr__(self, "columns", _parse_columns(self.columns))
        if self.format not in FORMATS:
            raise ValueError(f"format={self.format!r} is not supported; use one of {list(FORMATS)}")
        if self.format == "csv" and not self.columns:
            raise ValueError("format='csv' needs columns, the CSV column names in file order "
                             "(for example columns='ts timestamp, user, amount long')")
        if self.format != "csv" and self.columns is not None:
            raise ValueError(f"columns={self.columns!r} only apply to format='csv'; format={self.format!r}")
        if self.scan_trigger_file is not None:
            if not isinstance(self.scan_trigger_file, str):
                raise ValueError(f"scan_trigger_file={self.scan_trigger_file!r} must be a path string")
            name = self.scan_trigger_file.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
            if not name:
                raise ValueError(f"scan_trigger_file={self.scan_trigger_file!r} must name a file")
            if any(normalised_path(self.scan_trigger_file) == normalised_path(p) for p in paths):
                raise ValueError(
                    f"scan_trigger_file={self.scan_trigger_file!r} is one of paths, which reads a file it names "
                    "whatever its name: it would be read as data; put it elsewhere"
                )
            if self.accepts(name) and any(_inside(self.scan_trigger_file, p) for p in paths):
                raise ValueError(
                    f"scan_trigger_file={self.scan_trigger_file!r} is inside paths and would be read as data; "
                    f"start its name with '_' or '.', or put it elsewhere"
                )
            object.__setattr__(self, "scan_trigger_file", absolute_if_local(self.scan_trigger_file))

    def accepts(self, name: str, named: bool = False) -> bool:
        """Whether a file name passes the hidden/temporary filter and the pattern; a file ``named`` in ``paths``
        itself passes the filter, as Spark reads a file its path names whatever the name (``_part.log``)."""
        if not named and (name.startswith((".", "_")) or name.endswith(TEMPORARY_SUFFIXES)):
            return False
        return self.pattern is None or re.fullmatch(self.pattern, name) is not None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "SplitterConfig":
        """Build from Spark's string options (``path``/``paths``: see ``_parse_paths``)."""
        opts = {k.lower(): v for k, v in options.items()}
        if opts.get("paths") and opts.get("path"):
            raise ValueError(f"options 'paths'={opts['paths']!r} and 'path'={opts['path']!r} (from .load(path)) both "
                             "name what to read: give one")
        paths_option = "paths" if opts.get("paths") else "path"
        raw_paths = opts.pop("paths", None) or opts.pop("path", None)
        if not raw_paths:
            raise ValueError("option 'path' is missing: give .load(path) or .option('paths', 'a,b')")
        kwargs: dict = {"paths": _parse_paths(paths_option, raw_paths)}
        for name in ("recursive", "continuous", "strict", "header", "quick_ack"):
            if name in opts:
                kwargs[name] = _parse_bool(name, opts.pop(name))
        for name in ("pattern", "block_size", "blocks_per_batch", "scan_interval", "settle", "watermark_slack",
                     "scan_trigger_file", "format", "columns"):
            if name in opts:
                kwargs[name] = opts.pop(name)
        storage = {k[len("storage.") :]: opts.pop(k) for k in list(opts) if k.startswith("storage.")}
        if opts:
            raise ValueError(f"unknown splitter option(s) {sorted(opts)}; known: {sorted(_OPTION_NAMES)}")
        return cls(storage_options=storage, **kwargs)


_OPTION_NAMES = {
    "path", "paths", "recursive", "pattern", "block_size", "blocks_per_batch", "scan_interval",
    "settle", "watermark_slack", "continuous", "strict", "scan_trigger_file",
    "format", "columns", "header", "quick_ack", "storage.<fsspec option>",
}


def _parse_paths(name: str, raw: str) -> tuple[str, ...]:
    """A JSON array of strings, as ``read_stream`` passes them (a path may hold commas and spaces),
    or paths separated by commas and stripped of spaces, as a user writes ``.option('paths', 'a,b')``.

    JSON that is not an array of strings is refused: split at commas it would give paths no one
    meant (``'["a", 1]'`` as ``'["a"'`` and ``'1]'``)."""
    if raw.lstrip().startswith("["):
        try:
            paths = json.loads(raw)
        except ValueError:  # not JSON: a path that starts with '['
            pass
        else:
            if isinstance(paths, list) and paths and all(isinstance(path, str) for path in paths):
                return tuple(paths)
            raise ValueError(f"option {name}={raw!r} must be a JSON array of path strings, or paths separated by "
                             f"commas; write a path that starts with '[' in a JSON array, as '[\"[1]/x\"]'")
    return tuple(path.strip() for path in raw.split(",") if path.strip())


def _parse_columns(value: object) -> tuple[tuple[str, str], ...] | None:
    """``"a, b long"``, ``["a", "b long"]``, ``[("a", "string"), ...]`` or ``{"a": "string", ...}`` as ``(name, type)``
    pairs (a dict was taken as its keys, every type dropped for ``string``).

    In strings a name is bare or in backticks, a backtick inside doubled, as Spark SQL writes it
    (``quote_name``); in pairs it is taken as it is.
    """
    if value is None:
        return None
    try:
        items = [value] if isinstance(value, str) else list(value.items()) if isinstance(value, Mapping) \
            else list(value)  # type: ignore[call-overload]
    except TypeError:  # not iterable: 5
        items = [value]
    named: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, str):
            named += _columns_in(item, value)
        elif isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(part, str) for part in item):
            named.append((item[0], item[1]))
        else:
            raise ValueError(f"columns={value!r}: {item!r} is not a column; give a string of 'name type' columns "
                             f"separated by commas, or a list of such strings or of (name, type) pairs of strings")
    columns: list[tuple[str, str]] = []
    for name, kind in named:
        if not name:
            raise ValueError(f"columns={value!r} has an empty column name")
        columns.append((name, _csv_type(value, name, kind.strip() or "string")))
    names = [n for n, _ in columns]
    clash = sorted({n for n in names if names.count(n) > 1 or n in LOCATION_COLUMNS})
    if clash:
        raise ValueError(f"columns={value!r}: {clash} repeated or taken by {list(LOCATION_COLUMNS)}; rename them")
    return tuple(columns)


#: One column of a ``columns`` string: a name, bare or in backticks, then an optional type whose
#: parentheses may hold commas (``decimal(10,2)``), then a comma before the next column, or the end.
_COLUMN_RE = re.compile(r"\s*(?:`(?P<quoted>(?:[^`]|``)*)`|(?P<bare>[^\s,`]+))(?P<kind>[^,`(]*(?:\([^)]*\))?)\s*(?:,(?!\s*\Z)|\Z)")


def _columns_in(text: str, value: object) -> list[tuple[str, str]]:
    """The ``(name, type)`` pairs of a ``columns`` string, names unquoted."""
    columns: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        match = _COLUMN_RE.match(text, pos)
        if match is None:
            raise ValueError(
                f"columns={value!r}: cannot read a column at {text[pos:].strip()!r}; write 'name type' separated by "
                f"commas, and put a name holding a space, comma or backtick in backticks, doubling a backtick "
                f"inside: `a``b` long"
            )
        quoted = match["quoted"]
        columns.append((match["bare"] if quoted is None else quoted.replace("``", "`"), match["kind"]))
        pos = match.end()
    return columns


def quote_name(name: str) -> str:
    """``name`` as a Spark SQL identifier: in backticks, a backtick inside doubled (```a``b```)."""
    return "`" + name.replace("`", "``") + "`"


def _csv_type(columns: object, name: str, kind: str) -> str:
    """``kind`` in lower case (decimal arguments as ``decimal(p,s)``) if it is one of ``CSV_TYPES``."""
    lowered = kind.lower()
    if lowered in CSV_TYPES:
        return lowered
    decimal = _DECIMAL_RE.fullmatch(lowered)
    if decimal is None:
        raise ValueError(
            f"columns={columns!r}: column {name!r} has type {kind!r}, which is not supported; "
            f"use one of {', '.join(CSV_TYPES)}, or decimal(precision, scale)"
        )
    family, precision, scale = decimal.group(1), int(decimal.group(2)), int(decimal.group(3) or 0)
    if not 1 <= precision <= _MAX_PRECISION or scale > precision:
        raise ValueError(
            f"columns={columns!r}: column {name!r} has type {kind!r}; a decimal needs a precision of 1 to "
            f"{_MAX_PRECISION} and a scale of 0 to the precision"
        )
    return f"{family}({precision},{scale})" if decimal.group(3) else f"{family}({precision})"


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it, however either is spelled (``/d/./x``, relative)."""
    path, root = normalised_path(path), normalised_path(root).rstrip("/")
    return path == root or path.startswith(root + "/")


def normalised_path(path: str) -> str:
    """``path`` absolute and normalised when local; otherwise normalised behind its protocol."""
    protocol, rest = split_protocol(path)
    if protocol in (None, "file", "local"):
        return os.path.abspath(rest)
    return f"{protocol}://{posixpath.normpath(rest)}"


def _parse_bool(name: str, value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}={value!r} must be true or false")
