"""A writer's lease on a directory, with fencing: the key-value store's buckets and the file sink share it.

Each writer that claims the directory takes the next *epoch*: it writes
``<epoch>.json`` (created exclusively where the filesystem can, read back
elsewhere) holding a random token, its expiry and who holds it. The newest
epoch is the directory's writer; an older one (a zombie Spark task, a query
restarted elsewhere) finds a newer lease when it checks (``confirm``) and stops.
A live lease refuses a new claim until it runs out or is released, unless the
claim takes it over: because its holder is known dead (``frees``), or told to.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from ._fs import fsync, is_local, put_atomic


@dataclass(frozen=True)
class LeaseWording:
    """How the errors name the directory and what to do, for each user of the lease."""

    what: str  # "bucket 3 of /store", "file sink /out": in the error that a live writer holds it
    name: str  # "bucket 3", "file sink /out": in the others
    rule: str  # "one writer per bucket"
    held_hint: str  # what to do when a live writer holds it
    fenced_hint: str  # what a fenced writer should know
    held_error: type[Exception]
    fenced_error: type[Exception]


class Lease:
    """The lease files in ``directory``: claim, confirm, renew, release."""

    def __init__(self, fs: Any, directory: str, seconds: float, durable: bool, wording: LeaseWording,
                 owner: str | None = None) -> None:
        self.fs, self.directory, self.seconds, self.durable, self.wording = fs, directory, seconds, durable, wording
        self.local = is_local(fs)
        self.owner = owner
        self.epoch = 0
        self.token = uuid.uuid4().hex[:8]
        self.previous: dict[str, Any] | None = None  # the newest lease when this one was claimed
        self.marks: dict[str, Any] = {}  # what the holder tells its successor, kept in its lease file (`mark`)
        self._renewed = 0.0

    def path(self, epoch: int) -> str:
        return f"{self.directory}/{epoch:010d}.json"

    def epochs(self) -> list[int]:
        try:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.directory, detail=False)]
        except FileNotFoundError:
            return []
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def read(self, epoch: int) -> dict[str, Any] | None:
        """The lease file of ``epoch``; None where it is missing or does not read as a lease: not JSON (torn, or
        created empty), or not an object with a str ``token`` and a number ``expires`` (edited by hand: ``[]``,
        ``5``, ``{"expires": "soon"}`` failed the next claim with a bare TypeError or AttributeError). Either way
        it says nothing of its holder, and is taken as such."""
        try:
            held = json.loads(self.fs.cat_file(self.path(epoch)))
        except (FileNotFoundError, ValueError):
            return None
        return held if _is_lease(held) else None

    def claim(self, take_over: bool, frees: Callable[[dict[str, Any]], bool] = lambda held: False,
              above: int = 0, marked: Callable[[dict[str, Any] | None], dict[str, Any]] = lambda held: {}) -> None:
        """Become the writer: the next epoch, unless a live writer holds the newest one.

        ``take_over`` claims regardless; ``frees(lease)`` says whether a live lease's holder
        may be taken over (it is known dead, or an earlier run of the same writer). The epoch
        claimed is above ``above`` too (the newest epoch the user's files name: leases may be lost).
        ``marked(newest lease)``: the `marks` the new lease file holds from the start, so that what the newest
        holder left undone is owed by this one even if it dies before it could say so; a newest lease that cannot be
        read (torn, or created empty) is given as ``{}``: it says nothing, so owes what a live holder would.
        """
        self.fs.makedirs(self.directory, exist_ok=True)
        epochs = self.epochs()
        top = epochs[-1] if epochs else 0
        self.previous = held = self.read(top) if top else None
        if top and not take_over:
            now = time.time()
            if held is not None and not held.get("released") and held.get("expires", 0) > now and not frees(held):
                raise self.wording.held_error(
                    f"{self.wording.what} is held by another writer (epoch {top}{_holder(held)}, its lease runs "
                    f"{held['expires'] - now:.0f} s more); {self.wording.rule}. {self.wording.held_hint}"
                )
        self.epoch = max(top, above) + 1
        self.marks = marked({} if held is None and top else held)
        body = self._body()
        path = self.path(self.epoch)
        raced = f"{self.wording.name}: another writer claimed epoch {self.epoch} at the same moment; {self.wording.rule}"
        if self.local:
            self._create_whole(path, body, raced)
            try:
                if self.durable:
                    fsync(self.directory)
            except BaseException:  # a claim that failed leaves no lease: the next open would find this one held
                with contextlib.suppress(OSError):
                    os.unlink(path)
                raise
        else:
            if self.fs.exists(path):
                raise self.wording.held_error(raced)
            self.fs.pipe_file(path, body)
            self.confirm()
        self._renewed = time.time()

    def _create_whole(self, path: str, body: bytes, raced: str) -> None:
        """Create the lease file whole, refusing an existing one: written under a temporary name and hard-linked,
        since a claim reading a file created empty and written after took the lease for free and claimed the
        next epoch beside its holder."""
        temp = f"{self.directory}/.{path.rsplit('/', 1)[-1]}.{self.token}.tmp"
        self._write_new(temp, body, exclusive=False)
        try:
            os.link(temp, path)
        except (FileExistsError, FileNotFoundError):  # not found: a newer writer's cleanup took the temporary file
            raise self.wording.held_error(raced) from None
        except OSError:  # no hard links here: created exclusively, then written
            try:
                self._write_new(path, body, exclusive=True)
            except FileExistsError:
                raise self.wording.held_error(raced) from None
        finally:
            # Gone: taken by a newer writer's cleanup, which fences this one. Not removed: left to that cleanup, as
            # failing here would leave the lease linked and held by a claim that raised.
            with contextlib.suppress(OSError):
                os.unlink(temp)

    def _write_new(self, path: str, body: bytes, exclusive: bool) -> None:
        fd = os.open(path, os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC) | os.O_WRONLY, 0o644)
        try:
            os.write(fd, body)
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _body(self, released: bool = False) -> bytes:
        expires = 0.0 if released else time.time() + self.seconds
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "pid_space": _pid_space(), "owner": self.owner}
        # The marks first: one named as a field of the lease's own cannot change it.
        return json.dumps({**self.marks, "token": self.token, "expires": expires, "released": released, **holder}
                          ).encode()

    def confirm(self, doing: str = "go on") -> None:
        """Raise the fenced error unless this writer's lease is still the newest one."""
        epochs = self.epochs()
        newest = epochs[-1] if epochs else None
        lease = self.read(self.epoch) if newest == self.epoch and not self.local else None
        if newest != self.epoch or (lease is not None and lease.get("token") != self.token):
            raise self.wording.fenced_error(
                f"{self.wording.name} was taken over by a newer writer (epoch {newest}; this one is epoch "
                f"{self.epoch}), so this writer cannot {doing}. {self.wording.fenced_hint}"
            )

    def renew(self, force: bool = False) -> None:
        """Extend the lease once a third of it has passed (a held lease refuses others until it runs out)."""
        if not force and time.time() - self._renewed < self.seconds / 3:
            return
        self.confirm("renew its lease")
        self._rewrite(self._body(), "renew its lease")
        self._renewed = time.time()

    def mark(self, **marks: Any) -> None:
        """Change `marks` in this writer's lease file (confirmed first: a fenced writer's marks are its successor's
        no more)."""
        self.confirm("mark its lease")
        self.marks = {**self.marks, **marks}
        self._rewrite(self._body(), "mark its lease")

    def release(self) -> None:
        """Mark the lease free (best effort: a fenced writer leaves the newer lease alone)."""
        try:
            self.confirm("release its lease")
            self._rewrite(self._body(True), "release its lease")
        except self.wording.fenced_error:
            return

    def _rewrite(self, body: bytes, doing: str) -> None:
        """Replace this writer's lease file; a newer writer's cleanup may take the temporary file it is written
        under (it deletes what older epochs left), which fences this writer rather than failing it otherwise."""
        try:
            put_atomic(self.fs, self.path(self.epoch), body, durable=self.durable)
        except FileNotFoundError:
            self.confirm(doing)
            raise


def _is_lease(held: Any) -> bool:
    """Whether ``held`` has the shape of what ``Lease._body`` writes, in the fields a claim compares."""
    if not isinstance(held, dict) or not isinstance(held.get("token"), str):
        return False
    expires = held.get("expires")
    return isinstance(expires, (int, float)) and not isinstance(expires, bool)


def _holder(held: dict[str, Any]) -> str:
    return f", process {held['pid']} on {held['host']}" if "pid" in held and "host" in held else ""


def holder_is_dead(held: dict[str, Any]) -> bool:
    """Whether the lease's holder was a process of this machine (and of this process namespace: containers sharing
    a host name each number their own processes) that no longer runs."""
    if held.get("host") != socket.gethostname() or not isinstance(held.get("pid"), int):
        return False
    if held.get("pid_space", _pid_space()) != _pid_space():
        return False
    try:
        os.kill(held["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _pid_space() -> str | None:
    """This process's PID namespace where the system names it (Linux), else None."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
