"""Driver side of a Spark query: commit the task reports of a micro-batch atomically under its batch id.

The commit record is the only thing the driver writes besides the final
segment of an encrypted part it finishes (no row): the parts of the attempts
Spark reports, one per partition, become the batch's; pending parts are
renamed to their finished names; the files of attempts that lost (retried,
duplicated, killed) and parts an attempt copied are deleted. A batch the
records already hold (Spark replays the batch it had not marked done) is not
committed again: what its replay wrote is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._lease import Lease
from .config import SinkConfig
from .directory import INPROGRESS, SinkDirectory
from .errors import DamagedCommitRecordError
from .parts import PhaseHook, no_hook
from .rolling import PartStats
from .state import PartRecord, SinkState, load_state
from .tasks import TaskReport, attempts_dir, base_writer_id


def now_ms() -> int:
    """The wall clock in milliseconds: a query's processing time."""
    return int(time.time() * 1000)


def fenced_lease(config: SinkConfig, fence: tuple[int, str]) -> Lease:
    """The lease a query holds, as another process (the commit of a Python data source) checks it."""
    lease = SinkDirectory(config).lease()
    lease.epoch, lease.token = fence
    return lease


def commit_batch(config: SinkConfig, batch_id: int, reports: Sequence[TaskReport], lease: Lease | None, now_ms: int,
                 end_of_input: bool = False, hook: PhaseHook = no_hook) -> bool:
    """Commit the batch the reports wrote; False if the records already held it (a replay, undone)."""
    written = [r for r in reports if not r.skipped]
    if not written:
        return False
    owner = written[0].owner
    directory = SinkDirectory(config)
    state = load_state(directory.fs, directory.root)
    if state is not None and state.committed_for(owner) >= batch_id:
        discard_reports(config, written, state)
        return False
    state = state or SinkState(writer_id=base_writer_id(config, owner))
    directory.refuse_changed_settings(state)
    mine = [p for p in state.open_parts if state.owner == owner]
    others = [p for p in state.open_parts if state.owner != owner]  # another writer's: finished now
    reported = {r.slot for r in written}
    open_parts = [p for r in written for p in r.open_parts]
    finishing: list[PartRecord] = list(others)
    for part in mine:
        if part.slot in reported:
            continue
        idle = PartStats(part.length, part.batches, part.created_ms, part.last_write_ms)
        if config.rolling.roll_on_processing_time(idle, now_ms):
            finishing.append(part)
        else:
            open_parts.append(part)
    if end_of_input:  # every part finished: all committed rows readable
        finishing, open_parts = finishing + open_parts, []
    for part in finishing:
        directory.seal_final(part)
    pending = [entry for r in written for entry in r.pending]
    pending += [(p.path, p.final_path, p.length, p.crc, p.schema) for p in finishing]
    _refuse_clashing_names(config, directory, pending)
    committed = SinkState(
        writer_id=state.writer_id,
        batch_id=batch_id,
        next_part=dict(state.next_part),
        open_parts=open_parts,
        finalize=[(src, dst) for src, dst, *_ in pending],
        settings=directory.settings(),
        sequence=state.sequence + 1,
        owner=owner,
        owners={**state.owners, owner: batch_id},
        finished=[(dst, n, crc, schema) for _, dst, n, crc, schema in pending],
        manifest=state.manifest,
        manifest_file=state.manifest_file,
        chain_from=state.chain_from,
        schemas={key: text for texts in [state.schemas, *(r.schemas for r in written)] for key, text in texts.items()},
    )
    directory.publish(committed, lease, [], hook)
    directory.remove([path for r in written for path in r.superseded])
    _remove_losers(directory, committed, written, owner, batch_id)
    return True


def discard_reports(config: SinkConfig, reports: Sequence[TaskReport], state: SinkState | None) -> None:
    """Delete the files of attempts whose batch is not committed by them (aborted, or a replay of a committed one)."""
    directory = SinkDirectory(config)
    known = set()
    if state is not None:
        known = {p.path for p in state.open_parts} | {src for src, _ in state.finalize}
    directory.remove([path for r in reports for path in r.created if path not in known])


def discard_after_failed_commit(config: SinkConfig, reports: Sequence[TaskReport]) -> None:
    """After a commit failed: delete the reports' files that the records do not name. Where the records do not read
    (a record damaged since the tasks began, which failed the commit too), nothing is deleted, since which files
    they name is not known, and the commit's own error is raised alone, not again chained to this read's."""
    directory = SinkDirectory(config)
    try:
        state = load_state(directory.fs, directory.root)
    except DamagedCommitRecordError:
        return
    discard_reports(config, reports, state)


def _refuse_clashing_names(config: SinkConfig, directory: SinkDirectory,
                           pending: list[tuple[str, str, int, int, str]]) -> None:
    """A ``with_part_names`` fn may give two parts one name: renaming onto a part would lose its rows."""
    if config.part_name is None:
        return  # the default names hold each attempt's random token
    seen: set[str] = set()
    for _, dst, *_ in pending:
        if dst in seen or directory.fs.exists(dst):
            raise ValueError(
                f"FileSink part name fn gave {dst.rsplit('/', 1)[-1]!r} to a part of this batch, which another "
                f"part already has (in {dst.rsplit('/', 1)[0]}); renaming onto it would lose its rows. The fn "
                "must use the writer id it is given (each task attempt has its own) and the part number"
            )
        seen.add(dst)


def _remove_losers(directory: SinkDirectory, committed: SinkState, written: Sequence[TaskReport], owner: str,
                   batch_id: int) -> None:
    """Delete what the attempts that lost wrote, in the directories their partition's winner wrote to.

    Every attempt says it ran in the batch's attempts directory; an attempt
    Spark did not report lost (it failed, was killed, or a duplicate won).
    """
    fs = directory.fs
    attempts = attempts_dir(directory.root, owner, batch_id)
    try:
        ran = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(attempts, detail=False)]
    except FileNotFoundError:
        ran = []
    winners = {f"{r.slot}-{r.token}" for r in written}
    lost_slots = {name.rsplit("-", 1)[0] for name in ran if not name.endswith(".claim") and name not in winners}
    if lost_slots:
        keep = {p.path for p in committed.open_parts}
        folders = {path.rsplit("/", 1)[0] for r in written if r.slot in lost_slots
                   for path in [p.path for p in r.open_parts] + [entry[0] for entry in r.pending]}
        folders.add(directory.root)
        for folder in sorted(folders):
            for path in fs.ls(folder, detail=False):
                name = path.rstrip("/").rsplit("/", 1)[-1]
                if name.startswith(".") and name.endswith(INPROGRESS) and path not in keep:
                    directory.remove([path])
    if fs.exists(attempts):
        fs.rm(attempts, recursive=True)


def finish_open_parts(config: SinkConfig, lease: Lease | None, hook: PhaseHook = no_hook) -> bool:
    """Finish every part left in progress (end of input), committed again under its writer's batch id.

    A bounded query calls it before it starts, for parts an earlier unbounded run left open.
    """
    directory = SinkDirectory(config)
    state = load_state(directory.fs, directory.root)
    if state is None or not state.open_parts:
        return False
    directory.refuse_changed_settings(state)
    for part in state.open_parts:
        directory.seal_final(part)
    committed = SinkState(
        writer_id=state.writer_id,
        batch_id=state.batch_id,
        next_part=dict(state.next_part),
        finalize=[(p.path, p.final_path) for p in state.open_parts],
        settings=directory.settings(),
        sequence=state.sequence + 1,
        owner=state.owner,
        owners=dict(state.owners),
        finished=[(p.final_path, p.length, p.crc, p.schema) for p in state.open_parts],
        manifest=state.manifest,
        manifest_file=state.manifest_file,
        chain_from=state.chain_from,
        schemas=state.schemas,
    )
    directory.publish(committed, lease, [], hook)
    return True
