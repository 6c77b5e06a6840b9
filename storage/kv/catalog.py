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
from dataclasses import asdict, dataclass, field
from typing import Any

from .._fs import fsync, is_local, put_atomic
from .._lease import Lease, LeaseWording
from .errors import BucketHeldError, CorruptStoreError, FencedError

FORMAT = 1
#: How many epochs a take-over claims before giving up, when each is taken by a writer claiming at once.
_CLAIM_RACES = 8
_META = re.compile(r"(\d{10})-(\d{12})-([0-9a-f]{8})\.json")
_SEQUENCED = re.compile(r"(\d{10})-(\d{10})-([0-9a-f]{8})\.(wal|kvd)")


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
        return json.dumps({"format": FORMAT, **asdict(self)}, sort_keys=True).encode()


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
        for attempt in range(_CLAIM_RACES):
            try:
                self.lease.claim(take_over)
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
        """The newest metadata written by a writer whose lease it carries; None for a new bucket."""
        found = []
        for name in self.names("meta"):
            match = _META.fullmatch(name)
            if match:
                found.append((int(match.group(1)), int(match.group(2)), match.group(3), name))
        tokens: dict[int, str | None] = {}
        for epoch, _, token, name in sorted(found, reverse=True):
            if epoch >= self.epoch:
                continue  # a writer that claimed after this one
            if epoch not in tokens:
                lease = self._read_lease(epoch)
                tokens[epoch] = lease.get("token") if lease else None
            if tokens[epoch] != token:
                continue  # written by a writer that lost the race for its epoch (or whose lease is gone)
            path = self.path("meta", name)
            try:
                raw = json.loads(self.fs.cat_file(path))
                if raw.pop("format") != FORMAT:
                    raise CorruptStoreError(path, f"metadata format {raw.get('format')} is not {FORMAT}")
                return Meta(**raw)
            except (ValueError, TypeError, KeyError) as exc:
                raise CorruptStoreError(path, f"the metadata cannot be read ({exc})") from None
        return None

    def write_meta(self, meta: Meta) -> None:
        try:
            put_atomic(self.fs, self.path("meta", meta.name), meta.to_json(), durable=self.durable)
        except FileNotFoundError:
            self.confirm("write its metadata")  # a newer writer's cleanup took the temporary file: fenced
            raise

    def remove(self, sub: str, names: list[str]) -> None:
        for name in names:
            try:
                self.fs.rm_file(self.path(sub, name))
            except FileNotFoundError:
                pass

    def unreferenced(self, meta: Meta) -> dict[str, list[str]]:
        """The files ``meta`` does not need, by directory: what a crash, a flush or a zombie left behind.

        Files of a newer epoch are never listed: a writer that claimed the
        bucket since this one checked its lease owns them.
        """
        keep_log = {name for name, _ in meta.log}
        keep_data = {f["name"] for f in meta.files}
        out = {"meta": [n for n in self.names("meta") if n != meta.name and self._epoch_of(n) <= self.epoch]}
        out["lease"] = [n for n in self.names("lease") if self._epoch_of(n) < self.epoch]
        out["data"] = [n for n in self.names("data") if n not in keep_data and self._epoch_of(n) <= self.epoch]
        out["log"] = [
            n for n in self.names("log")
            if n not in keep_log and self._epoch_of(n) <= self.epoch and not self._mine_unpublished(n, meta)
        ]
        return out

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
