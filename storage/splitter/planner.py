"""``BlockPlanner``: the scanner and the hand-out state, which decide the blocks to read next.

Both ``FileSplitter`` (pandas) and the Spark source's driver side plan with it; neither needs
the other, so the Spark source never imports the pandas-facing splitter.
"""

from __future__ import annotations

import os
import reprlib
import time
import uuid
import warnings
from typing import Any, Callable, Mapping

import fsspec

from storage._fs import is_local
from storage.splitter.config import SplitterConfig, normalised_path
from storage.splitter.metadata import BlockMetadata
from storage.splitter.scanner import Listing, Scanner, UnsettledFileWarning
from storage.splitter.state import SplitState


def open_filesystem(config: SplitterConfig) -> tuple[fsspec.AbstractFileSystem, dict[str, str]]:
    """The one fsspec filesystem of all ``paths``, and each path in its own form, as written -> as
    the files under it are named (``_local_normalised``); checks they exist.

    Paths are taken literally: ``[``, ``?``, ``*`` and ``::`` in a path are characters of its name,
    not a glob or a URL chain (``fsspec.core.get_fs_token_paths`` expanded them, so ``logs[1]`` read
    ``logs1``); only a protocol written out (``simplecache::s3://...``) chains filesystems.
    """
    filesystems, roots = [], {}
    for given in config.paths:
        fs, root = _literal_path(given, dict(config.storage_options))
        if not fs.exists(root):
            raise FileNotFoundError(f"paths: {given!r} does not exist; create it or fix the path")
        filesystems.append(fs)
        roots[root] = _local_normalised(fs, root)
    if any(fs != filesystems[0] for fs in filesystems):
        raise ValueError(f"paths={config.paths!r} must all be on one filesystem")
    return filesystems[0], roots


def _local_normalised(fs: fsspec.AbstractFileSystem, root: str) -> str:
    """A local ``root`` normalised, as the files listed under it are then named: the scanner keys
    files by name, so ``/d`` and ``/d/./a.log`` (or ``/d//a.log``, ``/d/x/../a.log``) read ``a.log``
    twice otherwise. Kept as written when the normalised path is another file: ``..`` after a
    symbolic link goes up from the link's target for the OS. Other filesystems keep the path: an
    object store's key may hold ``.``, ``..`` and ``//`` as characters, naming another object."""
    if not is_local(fs):
        return root
    normal = normalised_path(root)
    return normal if normal == root or (os.path.exists(normal) and os.path.samefile(normal, root)) else root


def _literal_path(path: str, storage_options: dict[str, str]) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem of ``path`` and ``path`` in its form, without expanding anything in it."""
    protocol, _ = fsspec.core.split_protocol(path)
    if protocol is not None and "::" in protocol:
        return fsspec.core.url_to_fs(path, **storage_options)
    fs = fsspec.filesystem(protocol or "file", **storage_options)
    return fs, fs._strip_protocol(path)


class BlockPlanner:
    """Lists the files under ``config.paths`` and hands out their blocks exactly once.

    ``clock`` (epoch seconds) and ``sleep`` are injectable so tests control the scan interval,
    the settle time and the waits for files still settling, without waiting on the wall clock.
    """

    def __init__(self, config: SplitterConfig, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.fs, roots = open_filesystem(config)
        #: The roots normalised, by their spelling: state from before they were (``restore``) names them so.
        self._respelled = {written: root for written, root in roots.items() if written != root}
        self._clock = clock
        self._sleep = sleep
        self._roots = tuple(roots.values())
        self._scanner = Scanner(config, self.fs, self._roots, clock)
        self._state = SplitState()
        self._stable: Listing = {}
        self._last_scan: float | None = None
        self._scan_requested = True
        self._trigger_seen = self._read_trigger()

    # -- scanning -----------------------------------------------------------------------------

    def trigger_scan(self) -> None:
        """Scan at the next hand-out instead of waiting for ``scan_interval``.

        With ``scan_trigger_file`` it also writes a new token into that file, so every planner
        watching it, such as a running Spark source in another process, scans at its next call.
        """
        self._scan_requested = True
        if self.config.scan_trigger_file is not None:
            self.fs.pipe_file(self.config.scan_trigger_file, uuid.uuid4().hex.encode())
            self._trigger_seen = self._read_trigger()

    def _read_trigger(self) -> bytes | None:
        """The trigger file's content (``None`` when absent or not configured)."""
        if self.config.scan_trigger_file is None:
            return None
        try:
            return self.fs.cat_file(self.config.scan_trigger_file)
        except FileNotFoundError:
            return None

    def _scan_if_due(self) -> None:
        now = self._clock()
        due = self._last_scan is None or now - self._last_scan >= self.config.scan_interval
        if self.config.scan_trigger_file is not None:
            token = self._read_trigger()
            if token != self._trigger_seen:
                self._trigger_seen, self._scan_requested = token, True
        if self._scan_requested or due:
            self._scan()

    def _scan(self) -> None:
        self._last_scan = self._clock()
        self._stable = self._scanner.scan()
        self._scan_requested = False
        if not self.config.continuous:
            self.freeze()

    def freeze(self) -> None:
        """Read only the files known now (listed at least once); later files are ignored."""
        if self._last_scan is None:
            self._scan_if_due()
        self._scanner.freeze()

    # -- handing out blocks -------------------------------------------------------------------

    def next_blocks(self, limit: int | None) -> list[BlockMetadata]:
        """Scan if due, then hand out up to ``limit`` blocks never handed out before (all if ``None``).

        Listed files still settling are waited for where they would otherwise be missed: when
        nothing stable is left to hand out, and, with ``limit=None`` (everything available now),
        before handing out. The wait lists again each time the earliest of them can be stable,
        and lasts at most ``settle`` seconds: a file still changing then is left for a later
        listing, with an ``UnsettledFileWarning`` naming it when the run is bounded (it ends now).
        """
        self._scan_if_due()
        give_up = self._clock() + self.config.settle
        while True:
            if limit is not None:  # stable blocks go at once; settling files matter when there are none
                taken = self._take(limit)
                if taken:
                    return taken
            settling = self._settling_with_new_bytes()
            now = self._clock()
            if not settling or now >= give_up:
                if settling and self._scanner.frozen:
                    self._warn_unsettled(settling)
                return self._take(None) if limit is None else []
            self._sleep(max(0.0, min(*settling.values(), give_up) - now))
            self._scan()

    def _take(self, limit: int | None) -> list[BlockMetadata]:
        changing = {path: (seen.size, seen.mtime) for path, seen in self._scanner.settling.items()}
        return self._state.take(self._stable, self.config.block_size, limit, self.config.watermark_slack,
                                self._clock(), changing)

    def _settling_with_new_bytes(self) -> dict[str, float]:
        """Path -> when it can be stable, of the settling files that would give blocks once stable."""
        slack = self.config.watermark_slack
        return {path: seen.stable_at for path, seen in self._scanner.settling.items()
                if self._state.offers(path, seen.size, seen.mtime, slack)}

    def _warn_unsettled(self, settling: Mapping[str, float]) -> None:
        warnings.warn(
            f"this bounded run ends without {sorted(settling)}: still changing {self.config.settle:g} s "
            f"(settle) after it listed them, so probably still being written; they are not marked as read, "
            f"and the next run reads them once they are stable", UnsettledFileWarning, stacklevel=4)

    def mtime(self, path: str) -> float:
        """The mtime a handed-out file had when it was listed."""
        entry = self._state.files.get(path)
        return entry.mtime if entry is not None else self._stable.get(path, (0, 0.0))[1]

    @property
    def remembered(self) -> int:
        """How many files the state remembers (bounded by the watermark slack)."""
        return len(self._state.files)

    # -- state, for offsets -------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return self._state.to_json()

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a saved state; the next call lists the files again.

        Files remembered under a root as written, by a version that did not normalise it, are
        renamed under the normalised root, as the listing names them now: otherwise read again.
        """
        if not isinstance(state, dict) or not {"files", "watermark"} <= state.keys():
            hint = " (a Spark offset of the splitter's source: pass its 'state')" if isinstance(state, dict) \
                and isinstance(state.get("state"), dict) else ""
            raise ValueError(f"restore({reprlib.repr(state)}): not a state of FileSplitter.state(){hint}; a state is "
                             "a dict of 'files' and 'watermark'")
        if self._respelled:
            state = {**state, "files": {self._respell(path): entry for path, entry in state["files"].items()}}
        try:
            restored = SplitState.from_json(state)
        except ValueError as err:
            raise ValueError(f"restore({reprlib.repr(state)}): not a state of FileSplitter.state(): {err}") from None
        foreign = [path for path in restored.files if not any(
            path == root or path.startswith(root.rstrip("/") + "/") for root in self._roots)]
        if foreign:  # they were read on, whatever the paths said, from where that state left them
            warnings.warn(
                f"restore(): {len(foreign)} file(s) of the state are under none of paths={list(self.config.paths)!r} "
                f"(first {sorted(foreign)[0]!r}): forgotten, not read on (a state of another splitter, or paths "
                "narrowed since)", UserWarning, stacklevel=3)
            gone = set(foreign)
            restored = SplitState({path: e for path, e in restored.files.items() if path not in gone}, restored.watermark)
        self._state = restored
        self._scan_requested = True

    def _respell(self, path: str) -> str:
        for written, root in self._respelled.items():
            if path == written or path.startswith(written.rstrip("/") + "/"):
                return root + path[len(written.rstrip("/")):]
        return path
