"""A sink directory on its filesystem: durability, the writer's lease, recovery to the newest commit record,
and publishing a commit (record, then renames).

Recovery makes the directory what the newest record says: due renames are
redone (renaming is idempotent), in-progress parts longer than their
committed length are truncated back, in-progress files no record knows (of a
batch that never committed, or of a task attempt that lost) are deleted. A
committed part that is gone is an error naming it: its rows would be lost.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import uuid
import zlib
from typing import Any, Callable

from .._fs import fsync, is_local, protocols
from .._lease import Lease, LeaseWording, holder_is_dead
from .buckets import shorten
from .codec import key_fingerprint, seal
from .config import SinkConfig
from .errors import CommittedPartMissingError, DamagedCommitRecordError, SinkFencedError, SinkHeldError
from .state import STATE_DIR, PartRecord, SinkState, commit_state, load_state

INPROGRESS = ".inprogress"
#: How many record numbers a writer that took over a live one tries to fence it off at (`SinkDirectory.fence`): its
#: predecessor publishes at most one more record, then finds its lease gone.
FENCE_TRIES = 3
#: The most bytes a name may have where the filesystem does not say: NAME_MAX of Linux and macOS filesystems,
#: HDFS's default dfs.namenode.fs-limits.max-component-length.
NAME_MAX = 255
#: Filesystems other than the local one that keep directories of their own and limit each name: HDFS, and servers
#: on a disk. Object stores (s3, gs, abfs) and memory:// limit the whole key (s3's 1024 bytes), not a name in it.
NAME_LIMITED_PROTOCOLS = frozenset({"hdfs", "arrow_hdfs", "webhdfs", "sftp", "ssh", "smb", "ftp"})
#: Where task attempts of a query claim their slot's parts and say they ran (``tasks.py``).
TASKS_DIR = f"{STATE_DIR}/tasks"
#: Leases held in this process by work that can say whether it still runs (a streaming query), by token:
#: once it has stopped, a new writer takes the lease over at once instead of waiting for its release. An entry
#: stays when its query stops (a few bytes a query), so a lease read before its release is still known stopped.
RUNNING_HERE: dict[str, Callable[[], bool]] = {}
#: The lease mark of a writer that took over one that may still run, until it has detached its parts: a successor
#: finding it (the taker died, or gave up, between its claim and its detach) detaches them itself, as the taker's
#: death says nothing of the writer before it, which may still append to them.
DETACH_OWED = "detach_owed"


def _may_still_write(held: dict[str, Any] | None) -> bool:
    """Whether a writer before the holder of lease ``held`` may still append to the parts the newest record names."""
    if held is None:
        return False
    return bool(held.get(DETACH_OWED)) or (
        not held.get("released") and not holder_is_dead(held) and not _stopped_here(held))


def taken_over_writer_id(writer_id: str, epoch: int) -> str:
    """The writer id that names the new parts of a writer that took over one that may still run: the old one and
    the epoch (``w.e3``; ``w.e5`` taken over again). Both named their next part by the same id and number from the
    same record: the old writer appended into the new one's in-progress part of that name, or left a file of it."""
    base, dot, tail = writer_id.rpartition(".e")
    return f"{base if dot and tail.isdigit() else writer_id}.e{epoch}"


def _stopped_here(held: dict[str, Any]) -> bool:
    running = RUNNING_HERE.get(held.get("token", ""))
    if held.get("pid") != os.getpid() or running is None:
        return False
    try:
        return not running()
    except Exception:  # noqa: BLE001 - the query could not say (a failed py4j or Connect call): not known stopped
        return False


def max_name_bytes(fs: Any, root: str) -> int | None:
    """The most bytes (UTF-8) a file or directory name may have under ``root``; None where names have no limit."""
    if not is_local(fs):
        return NAME_MAX if NAME_LIMITED_PROTOCOLS.intersection(protocols(fs)) else None
    existing = root
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # AttributeError: no pathconf (Windows)
        return NAME_MAX
    return limit if limit > 0 else None  # -1: the filesystem sets no limit


def refuse_a_file(fs: Any, root: str, path: str) -> None:
    """Refuse a sink path that is a file: writing and reading failed on it with a bare NotADirectoryError."""
    if fs.isfile(root):
        raise NotADirectoryError(f"FileSink path {path!r} is a file, not a directory: give the directory the sink "
                                 "writes its parts into (it is made if missing)")


class SinkDirectory:
    """One sink directory: its filesystem, base path and the steps every writer shares."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.fs, self.root = config.fs_and_root
        self.local = is_local(self.fs)

    # --------------------------------------------------------------- basics

    @functools.cached_property
    def name_limit(self) -> int | None:
        """The most bytes a name may have in the sink's directories (``max_name_bytes``), asked once."""
        return max_name_bytes(self.fs, self.root)

    def check_part_name(self, name: str) -> None:
        """Refuse a part name whose in-progress form, the longer one, is longer than a name may be here."""
        size = len(f".{name}{INPROGRESS}".encode())
        if self.name_limit is not None and size > self.name_limit:
            raise ValueError(
                f"FileSink part name {shorten(name)} is {size} bytes (UTF-8) in progress, as .<name>{INPROGRESS}: "
                f"more than the {self.name_limit} bytes the filesystem allows in a name, so the batch is refused and "
                "nothing of it is committed. Give parts a shorter prefix, suffix or writer id (with_part_names, "
                "with_writer_id), or shorter names from a with_part_names fn"
            )

    def sync(self, path: str) -> None:
        """Make a local file's data, or a local directory's entries, durable; other filesystems decide themselves."""
        if self.local:
            fsync(path)

    def truncate(self, path: str, length: int) -> None:
        if self.local:
            os.truncate(path, length)
        else:  # no truncate on object stores: rewrite the committed prefix
            self.fs.pipe_file(path, self.fs.cat_file(path, start=0, end=length) if length else b"")

    def settings(self) -> dict[str, str | None]:
        """What the bytes of a part depend on."""
        config = self.config
        return {"format": config.format, "compression": config.compression,
                "key_fingerprint": key_fingerprint(config.key)}

    def lease(self, owner: str | None = None) -> Lease:
        """The lease that makes one writer the directory's only one (not yet claimed)."""
        wording = LeaseWording(
            what=f"file sink {self.root}",
            name=f"file sink {self.root}",
            rule="one writer per sink directory",
            held_hint="Close that writer first (SinkWriter.close(), or stop its query); if it is dead, wait for its "
            "lease to run out or take it over (FileSink.writer(take_over=True), FileSink.start(..., take_over=True)): "
            "it is then fenced off and can commit nothing more",
            fenced_hint="Its batch was not acknowledged; the writer that took over recovers the directory and "
            "writes the batch again unless its commit record already holds it",
            held_error=SinkHeldError,
            fenced_error=SinkFencedError,
        )
        return Lease(self.fs, f"{self.root}/{STATE_DIR}/lease", self.config.lease_seconds, False, wording, owner)

    def claim(self, lease: Lease, take_over: bool, same_writer: Callable[[dict[str, Any]], bool] = lambda held: False
              ) -> bool:
        """Claim ``lease``; a holder that is a dead process of this machine, a query of this process that
        stopped, or ``same_writer``, is taken over. True when the writer before may still be running (it was
        taken over, or its lease ran out, or it took over one itself and died before its ``detach``): then its
        in-progress parts must not be appended to (``detach``), and the lease says so until they are not."""
        refuse_a_file(self.fs, self.root, self.config.path)
        if not self.fs.exists(f"{self.root}/{STATE_DIR}"):  # a claim makes it: a crash leaves it there
            self._refuse_parts_without_records()
        if self.local:
            load_state(self.fs, self.root)  # refuses a damaged record (DamagedCommitRecordError) before writing a lease
        lease.claim(take_over, frees=lambda held: holder_is_dead(held) or _stopped_here(held) or same_writer(held),
                    marked=lambda held: {DETACH_OWED: True} if _may_still_write(held) else {})
        return bool(lease.marks.get(DETACH_OWED))

    def take(self, lease: Lease, take_over: bool = False,
             same_writer: Callable[[dict[str, Any]], bool] = lambda held: False) -> SinkState | None:
        """Become the directory's writer: claim ``lease``, recover to the newest record, detach a live
        predecessor's parts; the newest record (None before the first commit). The caller releases the lease."""
        unclean = self.claim(lease, take_over, same_writer)
        state = load_state(self.fs, self.root)
        if state is not None:
            self.refuse_changed_settings(state)
        if unclean:
            state = self.fence(state, lease, self.config.writer_id or uuid.uuid4().hex[:12])
        self.recover(state)
        return self.detach(state, lease) if unclean else state

    def _refuse_parts_without_records(self) -> None:
        """In-progress parts in a directory without ``_file_sink/``: its records were deleted (a writer makes the
        directory before its first part), and the parts may hold committed rows, which recovery deleted."""
        found = next(iter(self._stray_parts(set())), None)
        if found is not None and not self.fs.exists(f"{self.root}/{STATE_DIR}"):  # else a first writer just claimed it
            raise DamagedCommitRecordError(
                f"in-progress part {found} is in {self.root}, but its commit records ({STATE_DIR}/) are not: they were "
                "deleted, and the part may hold committed rows, which a new writer would delete. Restore "
                f"{STATE_DIR}/, or move the .inprogress files out of the directory to start it afresh")

    def refuse_changed_settings(self, state: SinkState) -> None:
        """Appending to in-progress parts under other settings than they were written with would corrupt them."""
        if not state.open_parts:
            return
        for name, value in self.settings().items():
            recorded = state.settings.get(name, value)  # a version 1 record does not say
            if recorded != value:
                raise ValueError(
                    f"FileSink {name}={value!r} differs from {name}={recorded!r}, the setting that "
                    f"{len(state.open_parts)} in-progress part(s) under {self.root} were written with; "
                    "appending would corrupt them. Finish them with the old settings first "
                    "(writer().finish(processing_time_ms) on the sink as it was), then change it"
                )

    # --------------------------------------------------------------- recovery

    def recover(self, state: SinkState | None) -> None:
        """Make the directory what ``state`` (the newest record) says; strays of uncommitted work are deleted."""
        known: set[str] = set()
        if state is not None:
            self.remove(state.removed)  # parts a compaction replaced
            self.finish_renames(state.finalize, state, recovering=True)
            for rec in state.open_parts:
                known.add(rec.path)
                self.check_open_part(rec, state, truncate=True)
        for path in self._stray_parts(known):
            self.fs.rm_file(path)  # written by a batch that never committed, or by an attempt that lost
        if self.fs.exists(f"{self.root}/{TASKS_DIR}"):
            self.fs.rm(f"{self.root}/{TASKS_DIR}", recursive=True)

    def _stray_parts(self, known: set[str]) -> list[str]:
        """The hidden in-progress parts under the directory but ``known``, and but those of another sink inside it
        (a directory holding its own ``_file_sink/``): its writer's records hold them, and this one deleted them."""
        paths = self.fs.find(self.root) if self.fs.exists(self.root) else []
        marker = f"/{STATE_DIR}/"
        inner = {path.split(marker, 1)[0] + "/" for path in paths
                 if marker in path and path.split(marker, 1)[0] != self.root}
        return [path for path in paths if path.rsplit("/", 1)[-1].startswith(".") and path.endswith(INPROGRESS)
                and path not in known and not any(path.startswith(root) for root in inner)]

    def check_open_part(self, rec: PartRecord, state: SinkState, truncate: bool) -> int:
        """The size of a committed in-progress part; an error naming it if it is gone or shorter than committed."""
        where = f"commit record {state.sequence} (batch {state.batch_id})"
        try:
            size = self.fs.size(rec.path)
        except FileNotFoundError:
            raise CommittedPartMissingError(
                f"in-progress part {rec.path} of {where} is missing: it holds {rec.length} committed bytes, whose "
                "rows would be lost (a cleanup of hidden or .inprogress files?). Restore the file; the sink goes "
                "no further without it"
            ) from None
        if size < rec.length:
            raise RuntimeError(
                f"in-progress part {rec.path} has {size} bytes but {rec.length} were committed; "
                f"the sink directory was changed by someone else ({where}): the committed rows past byte {size} "
                "would be lost. Restore the file; the sink goes no further without it"
            )
        if size > rec.length and truncate:
            self.truncate(rec.path, rec.length)
        return size

    def finish_renames(self, renames: list[tuple[str, str]], state: SinkState, recovering: bool = False,
                       hook: Callable[[str, int], None] | None = None) -> None:
        """Rename pending parts to their finished names, then make the renames durable.

        Recovery is idempotent (a crash may have done some already) and loud: a
        committed part that is neither pending nor finished is an error naming it.
        """
        for i, (src, dst) in enumerate(renames):
            if not recovering:
                self.fs.mv(src, dst)
                if i == 0 and hook is not None:
                    hook("mid_rename", state.batch_id)
            elif self.fs.exists(src):
                self.fs.mv(src, dst)
            elif not self.fs.exists(dst):
                raise CommittedPartMissingError(
                    f"part {dst} of batch {state.batch_id} (commit record {state.sequence} under {self.root}) is "
                    f"neither pending ({src}) nor finished: it was deleted or moved, and its committed rows with "
                    "it. Restore the file; the sink goes no further, as it would lose them without a word"
                )
        # Durable before the next record, which no longer lists them: else a crash leaves a stray in-progress file.
        for directory in sorted({dst.rsplit("/", 1)[0] for _, dst in renames}):
            self.sync(directory)

    def fence(self, state: SinkState | None, lease: Lease, writer_id: str) -> SinkState:
        """Before recovery deletes anything of a writer that may still run: publish the newest record ``state`` again
        under the next number (none: an empty first record of ``writer_id``), which its commit in flight then finds
        taken (records are published with a hard link) and stops. Recovery would delete the parts it staged, and its
        record, published after, named them: its successor's next record was refused and ``read()`` failed. Where
        it published that number first, its batch counts, and the fence follows it. The lease is checked before
        each try (a fence of a writer taken over itself took the number its successor's next commit needs) and
        after the one that lands (taken over meanwhile, its recovery deleted the newer writer's parts).
        The fence names new parts by another writer id (`taken_over_writer_id`). Call before ``recover``.
        """
        for _ in range(FENCE_TRIES):
            fenced = (SinkState(writer_id=self._new_writer_id(writer_id, lease.epoch), sequence=0) if state is None else
                      dataclasses.replace(state, sequence=state.sequence + 1,  # its removals too: recovery does them
                                          writer_id=self._new_writer_id(state.writer_id, lease.epoch)))
            lease.confirm("fence off the writer it took over")  # taken over itself: a newer writer fences instead
            try:
                commit_state(self.fs, self.root, fenced, self.sync, lambda phase: None)
            except SinkFencedError:
                state = load_state(self.fs, self.root)  # the predecessor's record took that number
                if state is not None:
                    self.refuse_changed_settings(state)
                continue
            lease.confirm("recover after fencing off the writer it took over")  # else its recovery deletes another's
            return fenced
        raise SinkFencedError(f"{self.root}: records kept being published while this writer fenced off the one it "
                              f"took over ({FENCE_TRIES} tries); is another writer taking the directory over?")

    def _new_writer_id(self, writer_id: str, epoch: int) -> str:
        """`taken_over_writer_id`, or a digest of the old id and the epoch where that makes part names pass the name
        limit (the old id fitted, a few bytes longer every batch was refused, after restarts too); the old id where
        neither fits (a prefix filling the limit: the names may then clash with the old writer's, as before)."""
        digest = f"{hashlib.sha256(writer_id.encode()).hexdigest()[:8]}e{epoch}"
        for candidate in (taken_over_writer_id(writer_id, epoch), digest):
            name = self.config.part_file_name(candidate, 10**9)  # room for any part number
            if self.name_limit is None or len(f".{name}{INPROGRESS}".encode()) <= self.name_limit:
                return candidate
        return writer_id

    def detach(self, state: SinkState | None, lease: Lease) -> SinkState | None:
        """Move the in-progress parts of a writer that may still run to copies it does not know, and commit that.

        A writer taken over while alive (a zombie) may still append to the
        files it holds open; its successor goes on in copies of their committed
        bytes (a copy on the filesystem's side), so what the zombie appends is
        never committed. Call after ``recover``; the lease's `DETACH_OWED` mark goes once it is done.
        """
        if state is None or not state.open_parts:
            lease.mark(**{DETACH_OWED: False})
            return state
        moved, old = [], []
        for rec in state.open_parts:
            self.check_open_part(rec, state, truncate=False)
            copy = self._taken_over_copy(rec, lease.epoch)
            self.fs.cp_file(rec.path, copy)
            if self.fs.size(copy) > rec.length:
                self.truncate(copy, rec.length)
            moved.append(dataclasses.replace(rec, path=copy))
            old.append(rec.path)
        detached = dataclasses.replace(state, open_parts=moved, finalize=[], finished=[], removed=[],
                                       sequence=state.sequence + 1)
        self.publish(detached, lease, [p.path for p in moved], lambda phase, batch_id: None)
        lease.mark(**{DETACH_OWED: False})
        self.remove(old)
        return detached

    def _taken_over_copy(self, rec: PartRecord, epoch: int) -> str:
        """The in-progress name of a taken-over part's copy: its final name and the new epoch, so that a part taken
        over again is not named longer each time (``.e3.e5``); where that passes the name limit (a part name near it
        gains ``.e<epoch>``), the epoch and a digest of the final name. Both are unique to the part and the epoch."""
        folder, final = rec.path.rsplit("/", 1)[0], rec.final_path.rsplit("/", 1)[-1]
        name = f".{final}.e{epoch}{INPROGRESS}"
        if self.name_limit is not None and len(name.encode()) > self.name_limit:
            name = f".e{epoch}-{hashlib.sha256(final.encode()).hexdigest()[:40]}{INPROGRESS}"
        return f"{folder}/{name}"

    def seal_final(self, rec: PartRecord) -> None:
        """Append an idle row-format part's final (empty) segment, when encrypted, so that it can be finished."""
        if self.config.key is None:
            return
        segment = seal(b"", self.config.key, rec.segments, final=True)
        with self.fs.open(rec.path, "ab") as handle:
            handle.write(segment)
        rec.length += len(segment)
        rec.segments += 1
        rec.crc = zlib.crc32(segment, rec.crc)
        self.sync(rec.path)

    # --------------------------------------------------------------- commit

    def publish(self, state: SinkState, lease: Lease | None, unsynced: list[str],
                hook: Callable[[str, int], None]) -> None:
        """Commit ``state``: make what it promises durable, write its record, then do its renames.

        The lease is checked after the record is written, before anything is
        renamed or deleted (as the key-value store does): a writer taken over
        meanwhile stops there, and the new writer's recovery decides.
        """
        for path in unsynced:
            self.sync(path)  # the record must never promise bytes or files a crash can take back
        commit_state(self.fs, self.root, state, self.sync, lambda phase: hook(phase, state.batch_id))
        if lease is not None:
            lease.confirm(f"publish batch {state.batch_id}")
        hook("after_commit_record", state.batch_id)
        self.remove(state.removed)  # parts a compaction replaced go before their replacement is renamed in
        self.finish_renames(state.finalize, state, hook=hook)

    def remove(self, paths: list[str]) -> None:
        """Delete files that no commit needs (best effort: a file already gone is fine)."""
        for path in paths:
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                pass
