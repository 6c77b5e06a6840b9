"""The commit record: what the sink has made durable, one record per commit.

One JSON file per commit under ``_file_sink/``, named by its sequence number
(hidden from readers by the directory's leading underscore). Writing it is the
commit point: a batch whose record exists is done, whatever happened to the
renames that follow. A record holds the last committed batch id of every
writer that wrote here (``owners``, Delta's ``txnAppId`` -> ``txnVersion``), the
parts still in progress with their committed lengths, the renames due, and the
parts this commit finished with their lengths. Every ``MANIFEST_EVERY`` commits
a manifest lists every finished part with its length, so readers can check each
part against the length it was committed with (Spark's compacted file sink log).
A manifest's name holds a random token besides its sequence number, and the record
names it: a writer killed between publishing its manifest and its record leaves a
manifest no record names, which the next writer's manifest of that number must not
take for another writer's commit (nor find its own name taken); it is pruned later.

In memory the paths are absolute; on disk they are relative to the sink's base
path, so the directory, moved or copied with its records or reached under
another URL (``/dbfs/out`` and ``dbfs:/out``), recovers where it is found.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from fsspec import AbstractFileSystem

from .._fs import is_local
from .errors import DamagedCommitRecordError, SinkFencedError

STATE_DIR = "_file_sink"
# 2 added the settings (a version 1 record reads with settings unknown, {}); 3 made the paths relative;
# 4 named records by sequence number, added the owners' batch ids, the finished parts' lengths and manifests;
# 5 added each part's schema (a digest in its entry, the texts in ``schemas``), and manifests became objects;
# 6 named the manifest's file (``manifest_file``: its number and a random token; before, ``<number>.manifest``).
VERSION = 6
MANIFEST_EVERY = 10
_KEEP = 3


@dataclass
class PartRecord:
    """An in-progress part as committed: its length and segment count on disk."""

    bucket: str
    number: int
    path: str
    final_path: str
    length: int
    segments: int
    created_ms: int
    last_write_ms: int
    batches: int
    slot: str = ""  # the writer slot appending to it: "" for a SinkWriter, "p<n>" for partition n of a query
    crc: int = 0  # CRC-32 of its committed bytes
    schema: str = ""  # the digest of its rows' Arrow schema (part_schemas.py); "" before version 5


@dataclass
class SinkState:
    """Everything needed to restore the sink after the commit ``sequence``."""

    writer_id: str
    batch_id: int = -1  # the batch the record's owner committed with it
    next_part: dict[str, int] = field(default_factory=dict)
    open_parts: list[PartRecord] = field(default_factory=list)
    finalize: list[tuple[str, str]] = field(default_factory=list)
    # Format, compression and key fingerprint the open parts were written with.
    settings: dict[str, str | None] = field(default_factory=dict)
    sequence: int = -1
    owner: str | None = None  # who wrote the record (and holds its open parts); None in versions 1 to 3
    owners: dict[str, int] = field(default_factory=dict)  # the last committed batch id of every writer
    finished: list[tuple[str, int, int, str]] = field(default_factory=list)  # parts it finished: length, CRC, schema
    removed: list[str] = field(default_factory=list)  # finished parts this commit removed (compaction)
    manifest: int | None = None  # the newest manifest (every finished part after that commit), if any
    chain_from: int = 0  # the first record whose ``finished`` the manifest does not hold
    manifest_file: str = ""  # the manifest's file name under STATE_DIR; "" before version 6: ``<manifest>.manifest``
    schemas: dict[str, str] = field(default_factory=dict)  # schema texts by digest: those its parts name, at least

    def committed_for(self, owner: str) -> int:
        """The last batch id ``owner`` committed here, -1 if none.

        A record of versions 1 to 3 does not say whose its batch id is: the
        directory had one writer, so the next writer takes it over as its own.
        """
        if owner in self.owners:
            return self.owners[owner]
        return self.batch_id if self.owner is None else -1

    def to_json(self, root: str) -> str:
        """The record with every path relative to ``root``, the base path."""
        relative = self._with_paths(lambda path: path[len(root) + 1 :])
        named = {p.schema for p in self.open_parts} | {entry[3] for entry in self.finished}
        relative.schemas = {key: text for key, text in self.schemas.items() if key in named}
        return json.dumps({"version": VERSION, **asdict(relative)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, root: str, sequence: int) -> SinkState:
        """The record numbered ``sequence``, with every path absolute below ``root`` wherever it was written."""
        raw = json.loads(text)
        version = raw.pop("version")
        if version not in (1, 2, 3, 4, 5, VERSION):  # not a torn record: skipping it would roll the directory back
            raise RuntimeError(
                f"file sink commit record version {version!r} is unknown; this release reads versions 1 to "
                f"{VERSION}: a newer release wrote it, write with that one"
            )
        raw["open_parts"] = [PartRecord(**p) for p in raw["open_parts"]]
        raw["finalize"] = [tuple(pair) for pair in raw["finalize"]]
        if version < 4:  # named by batch id, one writer, lengths of finished parts unknown
            state = cls(**raw, sequence=sequence, chain_from=sequence + 1)
        else:
            if raw["sequence"] != sequence:  # the newest by name decides: a record copied or renamed would roll back
                raise ValueError(f"it holds commit {raw['sequence']}, not commit {sequence} as its name says")
            raw["finished"] = [(*entry, "")[:4] for entry in raw["finished"]]  # no schema before version 5
            if version < 6 and raw["manifest"] is not None:
                raw["manifest_file"] = f"{raw['manifest']:020d}.manifest"
            state = cls(**raw)
        if version >= 3:
            return state._with_paths(lambda path: f"{root}/{path}")
        written_under = _base_path_written_under(state, root)
        return state._with_paths(lambda path: root + path[len(written_under) :])

    def _with_paths(self, change: Callable[[str], str]) -> SinkState:
        """A copy with ``change`` applied to every path."""
        return dataclasses.replace(
            self,
            open_parts=[
                dataclasses.replace(p, path=change(p.path), final_path=change(p.final_path)) for p in self.open_parts
            ],
            finalize=[(change(src), change(dst)) for src, dst in self.finalize],
            finished=[(change(path), *rest) for path, *rest in self.finished],
            removed=[change(path) for path in self.removed],
        )


def _base_path_written_under(state: SinkState, root: str) -> str:
    """The base path a version 1 or 2 record, which holds absolute paths, was written under.

    Each path is ``<base>/<bucket>/<name>`` with a bucket of ``next_part``, so
    each bucket that ends a path's directory gives a candidate base; the base is
    a candidate of every path (``root`` first: the record was not moved).
    """
    candidates = None
    for path in [p.path for p in state.open_parts] + [dst for _, dst in state.finalize]:
        directory = path.rsplit("/", 1)[0]
        found = {directory.removesuffix(f"/{b}") for b in state.next_part if not b or directory.endswith(f"/{b}")}
        candidates = found if candidates is None else candidates & found
    if candidates is None or root in candidates:
        return root
    if len(candidates) == 1:
        return candidates.pop()
    raise RuntimeError(
        f"file sink commit record under {root} holds absolute paths (version 1 or 2) below another base path, "
        f"which cannot be told from them (candidates: {sorted(candidates)}); write the next batch at the old "
        "path first: its commit record (version 3) holds relative paths, which any path reads"
    )


def _numbered(listed: list[str], suffix: str, tokens: bool = False) -> list[tuple[int, str]]:
    """The paths of ``listed`` named ``<number><suffix>`` (or, with ``tokens``, ``<number>.<token><suffix>`` too),
    by number."""
    found = []
    for path in listed:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        number = name[: -len(suffix)].split(".", 1)[0] if tokens else name[: -len(suffix)]
        if name.endswith(suffix) and number.isdigit():
            found.append((int(number), path))
    return sorted(found)


def _record_paths(fs: AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    try:
        return _numbered(fs.ls(f"{root}/{STATE_DIR}", detail=False), ".json")
    except FileNotFoundError:
        return []


# A record that does not parse: JSON cut short or of other bytes (UnicodeDecodeError is a ValueError), or not a record.
_UNREADABLE = (ValueError, KeyError, TypeError, AttributeError)


def _read_record(fs: AbstractFileSystem, root: str, sequence: int, path: str) -> SinkState:
    return SinkState.from_json(fs.cat_file(path).decode(), root, sequence)


def load_state(fs: AbstractFileSystem, root: str) -> SinkState | None:
    """The newest complete commit record, or None before the first commit.

    Newer records that do not read are skipped where a crash can leave one torn
    (a filesystem without atomic rename), as the next commit overwrites it. On the
    local disk ``_put`` publishes a record whole, so one that does not read was
    damaged since: refused, as going back to the record before it would forget the
    commits after it (and the next commit would find its number taken, as if fenced).
    """
    unreadable: list[tuple[str, Exception]] = []
    for sequence, path in reversed(_record_paths(fs, root)):
        try:
            state = _read_record(fs, root, sequence, path)
        except _UNREADABLE as exc:
            unreadable.append((path, exc))
            continue
        _refuse_damaged_newest(fs, unreadable, state)
        return state
    _refuse_damaged_newest(fs, unreadable, None)
    return None


def _refuse_damaged_newest(fs: AbstractFileSystem, unreadable: list[tuple[str, Exception]],
                           readable: SinkState | None) -> None:
    if unreadable and is_local(fs):
        raise _damaged(
            fs, unreadable[::-1],
            f"The sink goes no further rather than go back to the newest record that reads, {_named(readable)}, "
            "which would forget the commits after it.",
            f"move {'it' if len(unreadable) == 1 else 'them'} out of {STATE_DIR}/ to go back to "
            f"{'that record' if readable is not None else 'no record'}",
        )


def _damaged(fs: AbstractFileSystem, unreadable: list[tuple[str, Exception]], why: str, back: str
             ) -> DamagedCommitRecordError:
    """The error for local records that do not read: which, how, why the sink stops and what can be done."""
    which = " and ".join(f"{path} ({fs.size(path)} bytes: {type(exc).__name__}: {exc})" for path, exc in unreadable)
    plural = len(unreadable) > 1
    return DamagedCommitRecordError(
        f"file sink commit record{'s' if plural else ''} {which} {'are' if plural else 'is'} damaged: on the local "
        "disk a record is published whole (written, fsynced, then linked into place), so no crash leaves one torn; "
        f"{'they were' if plural else 'it was'} truncated, zeroed or overwritten since. {why} Restore "
        f"{'them' if plural else 'it'} from a backup; or {back}, knowing what that undoes: the commits after it are "
        "forgotten (what they wrote to in-progress parts is truncated away or deleted, the parts they finished stay, "
        "read unchecked) and committed_batch_id goes back, but Spark replays only the batches it had not marked "
        "done: rows of the forgotten batches may be lost or read twice"
    )


def _named(state: SinkState | None) -> str:
    if state is None:
        return "no record (as before the first commit)"
    owner = f" of {state.owner!r}" if state.owner is not None else ""
    return f"record {state.sequence} (batch {state.batch_id}{owner})"


@dataclass
class Finished:
    """The finished parts a commit knows: what each was committed with, and the texts of their schemas."""

    parts: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # path: length, CRC-32, schema digest
    schemas: dict[str, str] = field(default_factory=dict)

    def apply(self, state: SinkState) -> None:
        """The parts after ``state``'s commit, which removed some and finished others."""
        for path in state.removed:
            self.parts.pop(path, None)
        self.parts.update((path, (length, crc, schema)) for path, length, crc, schema in state.finished)
        self.schemas.update(state.schemas)


def finished_parts(fs: AbstractFileSystem, root: str, state: SinkState | None) -> Finished:
    """Every part finished up to ``state``'s commit, with the length, CRC-32 and schema it was committed with.

    Parts finished before version 4 of the record are not known: their lengths were never kept.
    A record between the manifest and ``state`` that does not read is skipped where a crash can tear one,
    refused on the local disk (see ``load_state``): only it knows the parts it finished or removed.
    """
    finished = Finished()
    if state is None:
        return finished
    if state.manifest is not None:
        finished = _manifest(fs, root, state)
    start = state.manifest + 1 if state.manifest is not None else state.chain_from
    records = {sequence: path for sequence, path in _record_paths(fs, root)}
    for sequence in range(start, state.sequence):
        if sequence not in records:
            raise RuntimeError(
                f"file sink commit record {sequence} under {root} is missing; the records from {start} to "
                f"{state.sequence} are kept for the lengths of the parts they finished"
            )
        try:
            older = _read_record(fs, root, sequence, records[sequence])
        except _UNREADABLE as exc:
            if is_local(fs):
                raise _damaged(
                    fs, [(records[sequence], exc)],
                    f"Commit {state.sequence} reads the parts finished since the last manifest from the records "
                    "before it, and only this one knows the parts it finished or removed: without it, reading back "
                    "would leave the parts it finished unchecked (and report the parts it removed missing), and the "
                    "next manifest would drop them for good.",
                    f"move it and the records after it out of {STATE_DIR}/ to go back to the records before it",
                ) from None
            continue
        finished.apply(older)
    finished.apply(state)
    return finished


def _manifest(fs: AbstractFileSystem, root: str, state: SinkState) -> Finished:
    """The finished parts the manifest ``state`` names lists, with their lengths, CRC-32s and schemas; a manifest
    that is missing or does not read is refused naming it (it is published whole, so it was damaged since).
    Before version 5 a manifest is the list of parts alone."""
    path = f"{root}/{STATE_DIR}/{state.manifest_file}"
    try:
        raw = json.loads(fs.cat_file(path).decode())
        listed = raw["parts"] if isinstance(raw, dict) else raw
        parts = {f"{root}/{part}": (length, crc, schema) for part, length, crc, schema in (
            (*entry, "")[:4] for entry in listed)}
        return Finished(parts, raw["schemas"] if isinstance(raw, dict) else {})
    except FileNotFoundError:
        problem = "is missing"
    except _UNREADABLE as exc:
        problem = f"does not read ({fs.size(path)} bytes: {type(exc).__name__}: {exc})"
    raise DamagedCommitRecordError(
        f"file sink manifest {path} {problem}: the sink takes the finished parts' lengths from it, so reading back "
        "or the next manifest would leave every part it lists unchecked or forgotten. "
        "Restore it from a backup"
    )


def commit_state(fs: AbstractFileSystem, root: str, state: SinkState, sync: Callable[[str], None],
                 hook: Callable[[str], None] = lambda phase: None) -> None:
    """Write the record atomically (temporary name, then rename) and durably (``sync``), and prune old ones.

    Every ``MANIFEST_EVERY`` commits the record is preceded by a manifest of every finished part (``hook``
    is called with ``after_manifest`` once it is published). Manifests that no record from this one on can
    name are pruned: older ones, and those of commits that never published their record (a writer killed
    between the two)."""
    directory = f"{root}/{STATE_DIR}"
    if not fs.exists(directory):
        fs.makedirs(directory, exist_ok=True)
    if state.sequence == 0:
        sync(root)  # the directory's entry for _file_sink/ (made by the lease, or just now)
    since = state.manifest if state.manifest is not None else state.chain_from - 1
    if state.sequence - since >= MANIFEST_EVERY:
        previous = dataclasses.replace(state, finished=[], removed=[])
        finished = finished_parts(fs, root, previous)
        finished.apply(state)
        parts = sorted([path[len(root) + 1 :], n, crc, schema] for path, (n, crc, schema) in finished.parts.items())
        named = {entry[3] for entry in parts}
        schemas = {key: text for key, text in finished.schemas.items() if key in named}
        name = f"{state.sequence:020d}.{secrets.token_hex(8)}.manifest"
        _put(fs, directory, name, json.dumps({"parts": parts, "schemas": schemas}, sort_keys=True).encode(), sync)
        state.manifest, state.manifest_file = state.sequence, name
        hook("after_manifest")
    _put(fs, directory, f"{state.sequence:020d}.json", state.to_json(root).encode(), sync)
    sync(directory)
    keep_from = min(state.sequence - _KEEP + 1, state.manifest if state.manifest is not None else state.chain_from)
    listed = fs.ls(directory, detail=False)
    _remove(fs, [path for sequence, path in _numbered(listed, ".json") if sequence < keep_from])
    manifests = _numbered(listed, ".manifest", tokens=True)
    _remove(fs, [path for sequence, path in manifests
                 if sequence <= state.sequence and path.rsplit("/", 1)[-1] != state.manifest_file])


def _put(fs: AbstractFileSystem, directory: str, name: str, data: bytes, sync: Callable[[str], None]) -> None:
    """Publish a record or manifest whole; locally only if no other writer published that number first."""
    temp = f"{directory}/.{name}.tmp"
    fs.pipe_file(temp, data)
    sync(temp)
    final = f"{directory}/{name}"
    if not is_local(fs):
        fs.mv(temp, final)  # an object store publishes an upload whole; it cannot refuse an existing name
        return
    try:
        os.link(temp, final)  # fails if the name exists: a writer taken over cannot overwrite its successor's
    except FileExistsError:
        os.unlink(temp)
        raise SinkFencedError(
            f"file sink commit {name} under {directory} was published by another writer first: this writer was "
            "taken over and its batch is refused; the writer that took over recovers the directory"
        ) from None
    except OSError:  # a filesystem without hard links
        os.replace(temp, final)
        return
    os.unlink(temp)


def _remove(fs: AbstractFileSystem, paths: Iterable[str]) -> None:
    for path in paths:
        fs.rm_file(path)
