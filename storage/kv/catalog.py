"""A bucket's directory: the owner's lease, the metadata versions, the names of log and data files.

Nothing here is ever renamed into place on an object store or appended to
there: every commit writes new, uniquely named objects, so the same steps are
safe on a local disk, HDFS and S3.

Fencing. Each writer that opens a bucket claims the next *epoch*: it writes
``lease/<epoch>.json`` (created exclusively where the filesystem can, read back
elsewhere) holding a random token. Every file it writes carries its epoch and
token in its name, and readers take the metadata of the newest epoch whose
lease holds that token. A writer that lost its bucket (a zombie Spark task)
finds a newer lease when it checks, after writing its commit and before it
deletes anything, and stops with ``FencedError``; what it wrote before the
check is either adopted whole by the new owner (who listed it) or ignored.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

from .._fs import fsync, is_local, put_atomic
from .._lease import Lease, LeaseWording, holder_is_dead
from .errors import BucketHeldError, CorruptStoreError, FencedError

#: Metadata format 2 carries a CRC-32 (``crc``) of the canonical JSON of its other fields; format 1
#: (written by earlier releases, no CRC) is still read.
FORMAT = 2
_FORMATS = (1, 2)
#: How many epochs a take-over claims before giving up, when each is taken by a writer claiming at once.
_CLAIM_RACES = 8
_META = re.compile(r"(\d{10})-(\d{12})-([0-9a-f]{8})\.json")
_SEQUENCED = re.compile(r"(\d{10})-(\d{10})-([0-9a-f]{8})\.(wal|kvd)")
#: The writer's token in the name of a metadata, data or log file (or the temporary name one is written under first).
_WRITTEN_BY = re.compile(r"\.?\d{10}-\d+-([0-9a-f]{8})\.")


@dataclass
class Meta:
    """One metadata version: the committed state of a bucket.

    ``files`` hold the data as of ``flushed_batch_id``; replaying the log
    segments ``log`` (each to the length given), then the segments its writer
    wrote from sequence number ``tail_from`` on, gives ``batch_id`` and after.
    """

    epoch: int
    token: str
    version: int
    batch_id: int = -1
    flushed_batch_id: int = -1
    files: list[dict[str, Any]] = field(default_factory=list)
    log: list[list[Any]] = field(default_factory=list)
    tail_from: int = 0

    @property
    def name(self) -> str:
        return f"{self.epoch:010d}-{self.version:012d}-{self.token}.json"

    def to_json(self) -> bytes:
        body = {"format": FORMAT, **asdict(self)}
        return json.dumps({**body, "crc": _crc(body)}, sort_keys=True).encode()


def _crc(body: dict[str, Any]) -> int:
    """The CRC-32 of a metadata version's fields (all but ``crc``) as canonical JSON."""
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


_INTS = ("epoch", "version", "batch_id", "flushed_batch_id", "tail_from")
_FILE_FIELDS = {"name": str, "size": int, "count": int, "first": str, "last": str}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_meta(data: bytes, name: str) -> Meta:
    """The metadata version ``data`` of the file ``name``; ``ValueError`` saying what is wrong with it.

    Format 2 is checked against its CRC; format 1 (no CRC) against its structure only, as is format 2:
    every field of the right type, every data file entry and log segment whole, and the name it is stored
    under the one its fields give.
    """
    raw = json.loads(data)
    if not isinstance(raw, dict):
        raise ValueError("it is not a JSON object")
    fmt = raw.get("format")
    if fmt not in _FORMATS:
        raise ValueError(f"metadata format {fmt!r} is not one of {list(_FORMATS)} (written by a newer release?)")
    if fmt >= 2:
        crc = raw.pop("crc", None)
        if not _is_int(crc) or crc != _crc(raw):
            raise ValueError("it fails its CRC")
    elif "crc" in raw:
        raise ValueError("a format 1 metadata file has no CRC")
    del raw["format"]
    fields = {"token", "files", "log", *_INTS}
    if set(raw) != fields:
        raise ValueError(f"its fields are {sorted(raw)}, not {sorted(fields)}")
    if not all(_is_int(raw[key]) for key in _INTS) or not isinstance(raw["token"], str):
        raise ValueError("a field has the wrong type")
    files, log = raw["files"], raw["log"]
    if not isinstance(files, list) or not isinstance(log, list):
        raise ValueError("its files or log is not a list")
    for i, entry in enumerate(files):
        if (not isinstance(entry, dict) or set(entry) != set(_FILE_FIELDS)
                or not all(type(entry[k]) is t for k, t in _FILE_FIELDS.items())
                or parse_sequenced(entry["name"]) is None or not entry["name"].endswith(".kvd")):
            raise ValueError(f"data file entry {i} is malformed: {entry!r:.200}")
        try:
            bytes.fromhex(entry["first"]), bytes.fromhex(entry["last"])
        except ValueError:
            raise ValueError(f"data file entry {i} has a first or last key that is not hex: {entry!r:.200}") from None
    for i, segment in enumerate(log):
        if (not isinstance(segment, list) or len(segment) != 2 or not isinstance(segment[0], str)
                or parse_sequenced(segment[0]) is None or not segment[0].endswith(".wal") or not _is_int(segment[1])):
            raise ValueError(f"log segment {i} is malformed: {segment!r:.200}")
    meta = Meta(**raw)
    if meta.name != name:
        raise ValueError(f"its fields name it {meta.name}")
    return meta


def sequenced_name(epoch: int, seq: int, token: str, kind: str) -> str:
    return f"{epoch:010d}-{seq:010d}-{token}.{kind}"


def parse_sequenced(name: str) -> tuple[int, int, str] | None:
    match = _SEQUENCED.fullmatch(name)
    return (int(match.group(1)), int(match.group(2)), match.group(3)) if match else None


class Catalog:
    """The files of one bucket directory and the lease of the writer using it."""

    def __init__(self, fs: Any, directory: str, bucket: int, lease_seconds: float, durable: bool) -> None:
        self.fs, self.directory, self.bucket = fs, directory, bucket
        self.local = is_local(fs)
        self.durable = durable
        self.lease_seconds = lease_seconds
        where = directory.rsplit("/", 1)[0]
        wording = LeaseWording(
            what=f"bucket {bucket} of {where}",
            name=f"bucket {bucket}",
            rule="one writer per bucket",
            held_hint="If that writer is dead (a Spark task being retried), open with take_over=True: "
            "the old writer is then fenced off and cannot change the bucket",
            fenced_hint="Anything it wrote since is ignored unless the new writer had already adopted it: "
            "its committed_batch_id tells. Open the bucket again to go on",
            held_error=BucketHeldError,
            fenced_error=FencedError,
        )
        self.lease = Lease(fs, self.path("lease"), lease_seconds, durable, wording)

    def path(self, sub: str, name: str = "") -> str:
        return f"{self.directory}/{sub}/{name}" if name else f"{self.directory}/{sub}"

    def names(self, sub: str) -> list[str]:
        try:
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.path(sub), detail=False))
        except FileNotFoundError:
            return []

    def sync(self, path: str) -> None:
        if self.local and self.durable:
            fsync(path)

    # ------------------------------------------------------------------ the lease

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def token(self) -> str:
        return self.lease.token

    def _read_lease(self, epoch: int) -> dict[str, Any] | None:
        return self.lease.read(epoch)

    def claim(self, take_over: bool) -> None:
        """Become the bucket's writer: the next epoch, unless a live writer holds it (and ``take_over`` is off).

        A take-over that loses the race for an epoch to a writer claiming it at the same moment (a failed
        query's task still running, opening the bucket as the restarted query's task does) claims the next
        one: it is told to take the bucket whoever holds it, so it does not fail for being second.
        """
        for sub in ("meta", "log", "data"):
            self.fs.makedirs(self.path(sub), exist_ok=True)
        # Above every epoch a file names too: with the leases lost, the epoch they held must not be claimed again
        # (its files would pass for this writer's, its metadata for a newer writer's).
        named = max((self._epoch_of(n) for sub in ("meta", "log", "data") for n in self.names(sub)), default=0)
        for attempt in range(_CLAIM_RACES):
            try:
                self.lease.claim(take_over, frees=holder_is_dead, above=named)  # a crashed writer: reopened at once
                return
            except (BucketHeldError, FencedError):
                if not take_over or attempt == _CLAIM_RACES - 1:
                    raise  # with take_over, only a lost race raises: the epoch exists, or another token took it

    def confirm(self, doing: str = "go on") -> None:
        """Raise ``FencedError`` unless this writer's lease is still the newest one."""
        self.lease.confirm(doing)

    def renew(self) -> None:
        """Extend the lease once a third of it has passed (a held bucket is refused to others until it runs out)."""
        self.lease.renew()

    def release(self) -> None:
        """Mark the lease free (best effort: a fenced writer leaves the newer lease alone)."""
        self.lease.release()

    # ------------------------------------------------------------------ metadata

    def load_meta(self) -> Meta | None:
        """The newest metadata written by a writer whose lease it carries; None for a new bucket.

        A metadata file whose epoch's lease holds another token was written by a writer that lost the race
        for its epoch (or by a zombie whose lease a newer writer's cleanup deleted): it is passed over, as a
        newer writer's metadata always stands beside it. When no metadata reads as a valid writer's but the
        bucket shows history (metadata passed over that holds committed state, data files, log segments),
        the metadata or the lease it is checked against is missing or damaged: ``CorruptStoreError``, and
        the caller deletes nothing. Only a bucket without history is new: never opened, or its first
        writer stopped before its first metadata (a lease alone), or a lost race's empty metadata.
        """
        found = []
        for name in self.names("meta"):
            match = _META.fullmatch(name)
            if match:
                found.append((int(match.group(1)), int(match.group(2)), match.group(3), name))
        tokens: dict[int, str | None] = {}
        passed: list[tuple[str, str, str]] = []  # (the file at fault, what is wrong, metadata passed over)
        for epoch, _, token, name in sorted(found, reverse=True):
            if epoch >= self.epoch:
                continue  # a writer that claimed after this one
            lease_path = self.lease.path(epoch)
            if epoch not in tokens:
                tokens[epoch] = self._lease_token(epoch)
            held = tokens[epoch]
            if held != token:
                # A lost race or a zombie's late metadata (a newer writer's stands beside it), or damage.
                problem = (
                    f"the lease of epoch {epoch} is missing" if held is None and not self.fs.exists(lease_path)
                    else f"the lease of epoch {epoch} cannot be read" if held is None
                    else f"the lease of epoch {epoch} holds token {held!r}"
                )
                passed.append((lease_path, problem, name))
                continue
            return self._read_meta(name)
        self._refuse_without_metadata(passed)
        return None

    def _lease_token(self, epoch: int) -> str | None:
        lease = self._read_lease(epoch)
        token = lease.get("token") if isinstance(lease, dict) else None
        return token if isinstance(token, str) else None

    def _read_meta(self, name: str) -> Meta:
        path = self.path("meta", name)
        try:
            return _parse_meta(self.fs.cat_file(path), name)
        except FileNotFoundError:
            raise CorruptStoreError(path, "the metadata file is missing") from None
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptStoreError(path, f"the metadata cannot be read ({exc})") from None

    def _refuse_without_metadata(self, passed: list[tuple[str, str, str]]) -> None:
        """Raise ``CorruptStoreError`` if a bucket with no valid metadata shows history (see ``load_meta``)."""
        for lease_path, problem, name in passed:
            meta = self._read_meta(name)  # damaged metadata is named as such
            if meta.batch_id >= 0 or meta.files or meta.log:
                raise CorruptStoreError(
                    lease_path,
                    f"{problem}, so the metadata {name} (batch {meta.batch_id} or later) cannot be checked as its "
                    "writer's and no other metadata reads; nothing was deleted",
                )
        history = {
            sub: [n for n in self.names(sub) if (parsed := parse_sequenced(n)) and parsed[0] < self.epoch]
            for sub in ("data", "log")
        }
        if history["data"] or history["log"]:
            what = (
                f"{passed[0][1]} (the metadata {passed[0][2]} was passed over)" if passed
                else "no metadata file is there"
            )
            raise CorruptStoreError(
                self.path("meta"),
                f"{what}, but the bucket holds {len(history['data'])} data files and {len(history['log'])} log "
                f"segments (first {(history['data'] + history['log'])[0]}): its metadata is missing or damaged; "
                "nothing was deleted",
            )

    def write_meta(self, meta: Meta) -> None:
        try:
            put_atomic(self.fs, self.path("meta", meta.name), meta.to_json(), durable=self.durable)
        except FileNotFoundError:
            self.confirm("write its metadata")  # a newer writer's cleanup took the temporary file: fenced
            raise

    def remove(self, sub: str, names: list[str]) -> None:
        """Delete files no metadata needs; a directory someone made among them (a backup) is left alone: the store
        writes none, and failing on it failed every open of the bucket."""
        for name in names:
            try:
                self.fs.rm_file(self.path(sub, name))
            except (FileNotFoundError, IsADirectoryError):
                pass

    def unreferenced(self, meta: Meta, data_names: list[str] | None = None) -> dict[str, list[str]]:
        """The files ``meta`` does not need, by directory: what a crash, a flush or a zombie left behind.

        Files of a newer epoch are never listed: a writer that claimed the
        bucket since this one checked its lease owns them (so ``data_names``, a listing of the data files
        this writer made before, misses none of its own).
        """
        keep_log = {name for name, _ in meta.log}
        out = {"meta": [n for n in self.names("meta") if n != meta.name and self._ours_or_older(n)]}
        out["lease"] = [n for n in self.names("lease") if self._epoch_of(n) < self.epoch]
        out["data"] = self.unnamed_data(meta, self.names("data") if data_names is None else data_names)
        out["log"] = [
            n for n in self.names("log")
            if n not in keep_log and self._ours_or_older(n) and not self._mine_unpublished(n, meta)
        ]
        return out

    def unnamed_data(self, meta: Meta, data_names: list[str]) -> list[str]:
        """The data files of ``data_names`` that ``meta`` does not name and this writer may delete (`unreferenced`)."""
        keep_data = {f["name"] for f in meta.files}
        return [n for n in data_names if n not in keep_data and self._ours_or_older(n)]

    def _ours_or_older(self, name: str) -> bool:
        """A file of an older epoch, or of this one and this writer's token: on an object store, where a claim
        cannot be exclusive, two writers may claim one epoch, and each deleted the other's metadata (the bucket
        then read as having none)."""
        epoch = self._epoch_of(name)
        if epoch != self.epoch:
            return epoch < self.epoch
        written_by = _WRITTEN_BY.match(name)
        return written_by is None or written_by.group(1) == self.token

    @staticmethod
    def _epoch_of(name: str) -> int:
        """The epoch a file name starts with (every name the store writes does, and the temporary name
        ``.<name>.<random>.tmp`` a metadata or lease file is written under first); a stray name counts as old."""
        digits = name[1:11] if name.startswith(".") and name.endswith(".tmp") else name[:10]
        return int(digits) if digits.isdigit() else -1

    def _mine_unpublished(self, name: str, meta: Meta) -> bool:
        """A file this writer wrote after ``meta`` (its log tail): not garbage."""
        parsed = parse_sequenced(name)
        return parsed is not None and parsed[0] == self.epoch and parsed[2] == self.token and parsed[1] >= meta.tail_from
