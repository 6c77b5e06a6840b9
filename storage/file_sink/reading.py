"""Reading a sink's output back: the finished parts, each checked against what was committed.

The commit records know every finished part's length, CRC-32 and schema
(``state.finished_parts``), so a part that is shorter, longer or other than
committed is reported by name, whatever its format (a JSON lines or CSV part cut
at a row boundary, or with a digit changed, reads back without an error otherwise).
A committed part that is missing is an error too; one whose
rename is still due (its writer stopped between its commit and its renames) is
read from its pending file. Where the records know every finished part (a
directory written by version 4 of the record from its first commit), a visible
file no record finished is not read: a copy of a part would duplicate its rows.
A JSON lines or CSV part whose schema the records keep (version 5) reads back
as the types written; one written before, as JSON holds them or CSV infers them.
"""

from __future__ import annotations

import json
import re
import warnings
import zlib
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from .codec import decompress, unseal
from .config import SinkConfig
from .directory import refuse_a_file
from .errors import CommittedPartMissingError, CorruptPartError
from .formats import FORMATS, Csv, JsonLines, Orc
from .part_schemas import SchemaBook
from .state import SinkState, finished_parts, load_state


def _exists_or_refuse(fs: Any, root: str, path: str) -> None:
    if not fs.exists(root):
        raise FileNotFoundError(f"FileSink path {path!r} does not exist; nothing was ever written there (a typo?)")
    refuse_a_file(fs, root, path)


def _refuse_other_settings(config: SinkConfig, state: SinkState | None) -> None:
    """A format (or a row format's compression) other than the one the newest commit wrote with decodes no part:
    the first failed as damage (``CorruptPartError: finished part ... cannot be read back: JSONDecodeError``)."""
    if state is None:
        return
    names = ("format",) if FORMATS[config.format].bulk else ("format", "compression")
    for name in names:
        if name in state.settings and state.settings[name] != getattr(config, name):  # a version 1 record: not said
            raise ValueError(
                f"FileSink {name}={getattr(config, name)!r} differs from {name}={state.settings[name]!r}, which the "
                f"parts under {config.path} were written with (commit record {state.sequence}); read them with "
                f"FileSink({config.path!r}, {name}={state.settings[name]!r})"
            )


def finished_files(config: SinkConfig) -> list[str]:
    """Finished part files in bucket and part order, as a plain listing finds them (hidden files skipped)."""
    fs, root = config.fs_and_root
    _exists_or_refuse(fs, root, config.path)
    found = [p for p in fs.find(root) if not any(s[:1] in "._" for s in p[len(root) + 1 :].split("/"))]
    return sorted(found, key=natural_order)


#: How many commits in a row a `read` that meets a commit record, manifest or part gone under it reads again from.
READ_TRIES = 5


def read(config: SinkConfig) -> pd.DataFrame:
    """The rows of every finished part, decrypted (authenticated), decompressed and checked against its commit.

    The rows of the newest commit when it starts: a writer committing meanwhile prunes the records and manifest that
    commit chains to, and a compaction deletes the parts it replaced, so a read failing where the directory's newest
    commit is no longer the one it read reads again from the newer one (up to ``READ_TRIES`` times); where it is the
    same, the failure is the directory's, and raised.
    """
    fs, root = config.fs_and_root
    _exists_or_refuse(fs, root, config.path)
    state = load_state(fs, root)
    for _ in range(READ_TRIES - 1):
        try:
            return _read_commit(config, fs, root, state)
        except Exception:
            newest = load_state(fs, root)
            if (newest.sequence if newest else None) == (state.sequence if state else None):
                raise
            state = newest
    return _read_commit(config, fs, root, state)


def _read_commit(config: SinkConfig, fs: Any, root: str, state: SinkState | None) -> pd.DataFrame:
    _refuse_other_settings(config, state)
    finished = finished_parts(fs, root, state)
    committed = finished.parts
    schemas = SchemaBook(finished.schemas)
    due = {dst: src for src, dst in state.finalize} if state is not None else {}
    replaced = set(state.removed) if state is not None else set()  # a compaction's inputs, not yet deleted
    visible = [path for path in finished_files(config) if path not in replaced]
    if state is not None and state.chain_from == 0:  # the records know every finished part: no other file is one
        visible = _committed_only(visible, committed, root, lambda: _finished_since(fs, root, state))
    missing = sorted(set(committed) - set(visible))
    frames, untyped, recorded = [], [], []
    for path in sorted(set(visible) | set(missing), key=natural_order):
        data = _read_part(fs, path, due.get(path), state)
        schema = None
        if path in committed:  # before decoding: pyarrow 14's ORC reader aborts the process on a changed byte
            length, crc, schema_key = committed[path]
            _check(path, data, length, crc)
            schema = schemas.schema(schema_key)
        if schema is None:
            untyped.append((len(frames), path, data))
        elif schema not in recorded:
            recorded.append(schema)
        frames.append(_decode_as_written(config, path, data, schema))
    if isinstance(config.file_format, (JsonLines, Csv)):
        for i, path, data in untyped:
            frames[i] = _typed_like_other_parts(config, path, data, frames[i], recorded)
    return concat_parts(frames)


def _typed_like_other_parts(config: SinkConfig, path: str, data: bytes, frame: pd.DataFrame,
                            recorded: list[pa.Schema]) -> pd.DataFrame:
    """A JSON lines or CSV part whose record keeps no schema (written before version 5) as the types of the first
    schema another part of the read was recorded with that has its columns, where its text parses as them; else as
    its text gives them. A sink written on across the upgrade read back with one column of both: ISO strings beside
    Timestamps (which ``sort_values`` refused), floats beside integers, lists beside arrays."""
    for schema in recorded:
        if sorted(schema.names) == sorted(frame.columns):
            try:
                return _decode(config, path, data, schema, lenient=False)
            except CorruptPartError:  # not its types after all (another pipeline's columns of the same names)
                continue
    return frame


def concat_parts(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts' frames (changed in place) as one, each column of one type whatever the parts' rows: ``pd.concat``
    makes categories that differ (each part holds those of its own rows) plain values, and an Arrow column (a
    ``time64[ns]`` below the microsecond, a date before the year 1: `frames.as_frame`) beside a part whose values
    pandas holds as Python objects objects too, which lost the nanoseconds, or failed on the date."""
    frames = [f for f in frames if len(f)]
    if len(frames) < 2:
        return frames[0].reset_index(drop=True) if frames else pd.DataFrame()
    order = list(dict.fromkeys(name for frame in frames for name in frame.columns))  # as pd.concat orders them
    arrow_columns = {}
    for name in order:
        columns = [frame[name] for frame in frames if name in frame.columns]
        arrow = next((c.dtype for c in columns if isinstance(c.dtype, pd.ArrowDtype)), None)
        if arrow is not None and _as_arrow(frames, name, arrow):
            arrow_columns[name] = arrow.pyarrow_dtype
        elif all(isinstance(c.dtype, pd.CategoricalDtype) for c in columns):
            _union_of_categories(frames, name, columns)
        elif len(columns) < len(frames):
            _added_where_missing(frames, name, columns)
    joined = pd.concat([frame.drop(columns=[name for name in arrow_columns if name in frame.columns]) for frame in frames],
                       ignore_index=True)
    for name, kind in arrow_columns.items():  # pandas 2's concat of them looks at a value as Python's, which may fail
        chunks = [pa.array(frame[name]) if name in frame.columns else pa.nulls(len(frame), kind) for frame in frames]
        joined[name] = pd.arrays.ArrowExtensionArray(pa.chunked_array([chunk for part in chunks for chunk in (
            part.chunks if isinstance(part, pa.ChunkedArray) else [part])], kind))
    return joined[order]


def _added_where_missing(frames: list[pd.DataFrame], name: str, columns: list[pd.Series]) -> None:
    """Column ``name``, where the parts holding it agree on its type, added all missing to the parts without it, of
    that type (a NumPy integer or bool as pandas' nullable one): ``pd.concat`` made such a column floats (2**53 + 1
    read back as 2**53; an ``Int64`` too, on pandas 2, which warned that it would change how it picks the type)."""
    kinds = {str(_nullable(column.dtype)) for column in columns}  # a part's int64 beside another's Int64 (a null)
    if len(kinds) > 1:
        return
    dtype = _nullable(columns[0].dtype)
    for frame in frames:
        if name in frame.columns:
            frame[name] = frame[name].astype(dtype)
        else:
            frame[name] = pd.Series(pd.array([None] * len(frame), dtype=dtype), index=frame.index)


def _nullable(dtype: Any) -> Any:
    """A NumPy integer or bool dtype as pandas' nullable one, which holds a missing value exactly; others as they are."""
    if isinstance(dtype, np.dtype) and dtype.kind in "iub":
        return pd.api.types.pandas_dtype("boolean" if dtype.kind == "b" else
                                         f"{'UInt' if dtype.kind == 'u' else 'Int'}{dtype.itemsize * 8}")
    return dtype


def _as_arrow(frames: list[pd.DataFrame], name: str, dtype: pd.ArrowDtype) -> bool:
    """Column ``name`` of every frame as ``dtype``, and True, where each part's values are of its kind (times beside
    times, dates beside dates) and convert to it exactly; where not (a column whose type changed between parts),
    False, and the frames keep their own types, as ``pd.concat`` joins them. Arrow alone would take integers for
    dates or times, and a timestamp's time of day for a time."""
    target = dtype.pyarrow_dtype
    converted = []
    for frame in frames:
        if name not in frame.columns or frame[name].dtype == dtype:
            converted.append(None)
            continue
        try:
            values = pa.array(frame[name], from_pandas=True)
            if not (pa.types.is_null(values.type) or _same_kind(values.type, target)):
                return False
            converted.append(pd.Series(pd.arrays.ArrowExtensionArray(values.cast(target)), index=frame.index))
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            return False
    for frame, column in zip(frames, converted):
        if column is not None:
            frame[name] = column
    return True


def _same_kind(found: pa.DataType, target: pa.DataType) -> bool:
    """Whether values Arrow found of type ``found`` are of ``target``'s kind, in another unit or width at most."""
    if pa.types.is_timestamp(found) and pa.types.is_timestamp(target):
        return found.tz == target.tz
    return found.equals(target) or any(test(found) and test(target) for test in (
        pa.types.is_time, pa.types.is_date, pa.types.is_duration, pa.types.is_decimal))


def _union_of_categories(frames: list[pd.DataFrame], name: str, columns: list[pd.Series]) -> None:
    """Column ``name`` of every frame a category of the union of its parts' categories, where the categories are
    of one type (a part whose values are all missing has none, of no type to speak of); text in one part and
    numbers in another stay values, as before."""
    holding = [c for c in columns if len(c.dtype.categories)]
    if not holding or len({str(c.dtype.categories.dtype) for c in holding}) > 1:
        return
    union = pd.api.types.union_categoricals([c.array for c in holding], ignore_order=True).categories
    for frame in frames:
        if name in frame.columns:
            frame[name] = frame[name].cat.set_categories(union)


def _committed_only(visible: list[str], committed: dict[str, Any], root: str,
                    finished_since: Callable[[], set[str]]) -> list[str]:
    """The visible files a commit finished; the others (a part copied beside itself, another tool's file) are
    not read, as Spark reads its own file sink's output through its metadata log only, and named in a warning,
    but for the parts of commits that landed since the read's (the warning called them not this sink's)."""
    foreign = [path for path in visible if path not in committed]
    if foreign:
        foreign = [path for path in foreign if path not in finished_since()]
    if foreign:
        shown = ", ".join(path[len(root) + 1 :] for path in foreign[:5])
        warnings.warn(
            f"FileSink.read() under {root} skipped {len(foreign)} file(s) no commit record finished "
            f"({shown}{', ...' if len(foreign) > 5 else ''}): not this sink's parts, so their rows are not read",
            stacklevel=5,  # the caller of FileSink.read()
        )
    return [path for path in visible if path in committed]


def _finished_since(fs: Any, root: str, state: SinkState) -> set[str]:
    """The parts the commits after ``state`` finished, as the newest record knows them (none where it reads not)."""
    try:
        newest = load_state(fs, root)
        if newest is None or newest.sequence == state.sequence:
            return set()
        return set(finished_parts(fs, root, newest).parts)
    except Exception:  # noqa: BLE001 - a record damaged or pruned since: none known, so the files are warned of
        return set()


def _check(path: str, data: bytes, length: int, crc: int) -> None:
    """Refuse a part whose bytes are not the ones committed."""
    if len(data) != length:
        raise CorruptPartError(
            f"finished part {path} has {len(data)} bytes, but {length} were committed: it was "
            f"{'truncated' if len(data) < length else 'appended to'} or replaced since"
        )
    if zlib.crc32(data) != crc:
        raise CorruptPartError(
            f"finished part {path} has the {length} bytes committed, but not the same ones (CRC-32 "
            f"{zlib.crc32(data):08x}, committed {crc:08x}): it was changed since"
        )


def _read_part(fs: Any, path: str, pending: str | None, state: Any) -> bytes:
    """A finished part's bytes; from its pending file while its rename is due."""
    for candidate in (path, pending, path):  # the rename may happen between the two looks
        if candidate is None:
            continue
        try:
            return fs.cat_file(candidate)
        except FileNotFoundError:
            continue
    raise CommittedPartMissingError(
        f"finished part {path} is missing, and no pending file holds it"
        f"{f' (commit record {state.sequence})' if state is not None else ''}: its committed rows are lost unless "
        "the file is restored"
    )


def _decode_as_written(config: SinkConfig, path: str, data: bytes, schema: pa.Schema | None) -> pd.DataFrame:
    """A committed part's rows with the reader's settings; where they do not decode so (nor as the types recorded)
    and the part's default name says another format or row compression (`SinkConfig.as_written`), with those. A
    directory holds both after a change of settings: a CSV read of JSON lines parts gave rows of garbage. Decoded
    first as the reader says, since the name is only a guess (a suffix of one's own may look like a format's)."""
    written = config.as_written(path) if schema is not None else config  # a file no commit finished: as before
    if written is config:
        return _decode(config, path, data, schema)
    try:
        return _decode(config, path, data, schema, lenient=False)
    except CorruptPartError:
        return _decode(written, path, data, schema)


def _decode(config: SinkConfig, path: str, data: bytes, schema: pa.Schema | None, lenient: bool = True
            ) -> pd.DataFrame:
    """One part's rows, JSON lines and CSV as the types of ``schema`` where known; any failure names the part.
    ``lenient``: a JSON lines or CSV part that does not parse as its recorded types is read as its text gives it."""
    fmt = config.file_format
    try:
        plain = unseal(data, config.key)
        if isinstance(fmt, (JsonLines, Csv)):
            text = decompress(plain, config.compression)
            if lenient or schema is None:
                return _typed_or_as_text(fmt, path, text, schema)
            _refuse_other_rows(fmt, text, schema)
            return fmt.decode(text, schema)
        if not FORMATS[config.format].bulk:  # text lines: one column of text, whatever it was written from
            return fmt.decode(decompress(plain, config.compression))
        if schema is None:
            return fmt.decode(plain)
        frame = fmt.decode_as(plain, schema) if isinstance(fmt, Orc) else fmt.decode(plain)
        return _timestamp_units_back(frame, schema)
    except Exception as exc:
        raise CorruptPartError(f"finished part {path} cannot be read back: {type(exc).__name__}: {exc}") from exc


def _refuse_other_rows(fmt: JsonLines | Csv, text: bytes, schema: pa.Schema) -> None:
    """Refuse text that does not hold this format's rows of ``schema``, which its decoder would read anyway: a CSV
    part's first line must be its columns' header, and a JSON lines part's every line an object of its columns
    (a text part of JSON strings read as JSON lines gave a null per row)."""
    names = set(schema.names)
    if isinstance(fmt, Csv):
        if fmt.header_of(text) != fmt.header(schema.empty_table()):
            raise ValueError("its first line is not the CSV header of its recorded columns")
        return
    for line in text.splitlines():
        row = json.loads(line) if line.strip() else None
        if row is not None and (not isinstance(row, dict) or not set(row) <= names):
            raise ValueError(f"a line is not a JSON object of its recorded columns {sorted(names)}")


def _typed_or_as_text(fmt: JsonLines | Csv, path: str, text: bytes, schema: pa.Schema | None) -> pd.DataFrame:
    """The part's rows as the types written; where its text does not parse as one of them (a CSV timestamp after
    the year 9999, a date before the year 1, ...), as the text holds them, as before schemas were kept, with a
    warning: the part was committed whole (its CRC-32 holds), so the rows are read, not refused."""
    if schema is not None:
        try:
            return fmt.decode(text, schema)
        except Exception as exc:  # noqa: BLE001 - any parse or conversion failure of a value: read the text instead
            warnings.warn(
                f"FileSink.read(): part {path} does not read back as the types it was written from "
                f"({type(exc).__name__}: {exc}); its rows are read as {fmt.name} text gives them",
                stacklevel=7,  # the caller of FileSink.read()
            )
    return fmt.decode(text)


def _timestamp_units_back(frame: pd.DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """Timestamp columns in the unit they were written in: ORC stores nanoseconds, Avro seconds as microseconds
    (exact: the values are whole units of the column's own)."""
    for field in schema:
        if pa.types.is_timestamp(field.type) and field.name in frame.columns:
            unit, tz = field.type.unit, field.type.tz
            wanted = pd.DatetimeTZDtype(unit=unit, tz=tz) if tz else np.dtype(f"datetime64[{unit}]")
            if frame[field.name].dtype != wanted:
                frame[field.name] = frame[field.name].astype(wanted)
    return frame


def natural_order(path: str) -> list[Any]:
    """Sort key: numbers in a path compare as numbers (part-10 after part-9)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]
