"""The commit record: what the sink has made durable, keyed by batch id.

One JSON file per committed batch under ``_file_sink/`` (hidden from readers
by its leading underscore). Writing it is the commit point: a batch whose
record exists is done, whatever happened to the renames that follow.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from fsspec import AbstractFileSystem

STATE_DIR = "_file_sink"
VERSION = 2  # 2 added the settings; a version 1 record reads with settings unknown ({})
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

    def to_json(self) -> str:
        return json.dumps({"version": VERSION, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SinkState:
        raw = json.loads(text)
        version = raw.pop("version")
        if version not in (1, VERSION):  # not a torn record: skipping it would roll the directory back
            raise RuntimeError(
                f"file sink commit record version {version!r} is unknown; this release reads versions 1 to "
                f"{VERSION}: a newer release wrote it, write with that one"
            )
        raw["open_parts"] = [PartRecord(**p) for p in raw["open_parts"]]
        raw["finalize"] = [tuple(pair) for pair in raw["finalize"]]
        return cls(**raw)


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
            return SinkState.from_json(fs.cat_file(path).decode())
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
    fs.pipe_file(temp, state.to_json().encode())
    sync(temp)
    fs.mv(temp, final)
    sync(directory)
    for _, old in _record_paths(fs, root)[:-_KEEP]:
        fs.rm_file(old)
