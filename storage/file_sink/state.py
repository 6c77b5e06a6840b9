"""The commit record: what the sink has made durable, keyed by batch id.

One JSON file per committed batch under ``_file_sink/`` (hidden from readers
by its leading underscore). Writing it is the commit point: a batch whose
record exists is done, whatever happened to the renames that follow.

In memory the paths are absolute; on disk they are relative to the sink's base
path, so the directory, moved or copied with its records or reached under
another URL (``/dbfs/out`` and ``dbfs:/out``), recovers where it is found.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from fsspec import AbstractFileSystem

STATE_DIR = "_file_sink"
# 2 added the settings (a version 1 record reads with settings unknown, {}); 3 made the paths relative.
VERSION = 3
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


@dataclass
class SinkState:
    """Everything needed to restore the sink after the batch ``batch_id``."""

    writer_id: str
    batch_id: int = -1
    next_part: dict[str, int] = field(default_factory=dict)
    open_parts: list[PartRecord] = field(default_factory=list)
    finalize: list[tuple[str, str]] = field(default_factory=list)
    # Format, compression and key fingerprint the open parts were written with.
    settings: dict[str, str | None] = field(default_factory=dict)

    def to_json(self, root: str) -> str:
        """The record with every path relative to ``root``, the base path."""
        relative = self._with_paths(lambda path: path[len(root) + 1 :])
        return json.dumps({"version": VERSION, **asdict(relative)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, root: str) -> SinkState:
        """The record with every path absolute below ``root``, wherever the record was written."""
        raw = json.loads(text)
        version = raw.pop("version")
        if version not in (1, 2, VERSION):  # not a torn record: skipping it would roll the directory back
            raise RuntimeError(
                f"file sink commit record version {version!r} is unknown; this release reads versions 1 to "
                f"{VERSION}: a newer release wrote it, write with that one"
            )
        raw["open_parts"] = [PartRecord(**p) for p in raw["open_parts"]]
        raw["finalize"] = [tuple(pair) for pair in raw["finalize"]]
        state = cls(**raw)
        if version == VERSION:
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


def _record_paths(fs: AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    directory = f"{root}/{STATE_DIR}"
    if not fs.exists(directory):
        return []
    found = []
    for path in fs.ls(directory, detail=False):
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            found.append((int(name[:-5]), path))
    return sorted(found)


def load_state(fs: AbstractFileSystem, root: str) -> SinkState | None:
    """The newest complete commit record, or None before the first commit."""
    for _, path in reversed(_record_paths(fs, root)):
        try:
            return SinkState.from_json(fs.cat_file(path).decode(), root)
        except (ValueError, KeyError, TypeError):
            continue  # a record torn by a crash on a filesystem without atomic rename
    return None


def commit_state(fs: AbstractFileSystem, root: str, state: SinkState, sync: Callable[[str], None]) -> None:
    """Write the record atomically (temporary name, then rename) and durably (``sync``), and prune old ones."""
    directory = f"{root}/{STATE_DIR}"
    if not fs.exists(directory):
        fs.makedirs(directory, exist_ok=True)
        sync(root)
    final = f"{directory}/{state.batch_id:020d}.json"
    temp = f"{directory}/.{state.batch_id:020d}.json.tmp"
    fs.pipe_file(temp, state.to_json(root).encode())
    sync(temp)
    fs.mv(temp, final)
    sync(directory)
    for _, old in _record_paths(fs, root)[:-_KEEP]:
        fs.rm_file(old)
