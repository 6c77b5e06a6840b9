"""The writer's lease that the key-value store's buckets and the file sink share (`storage._lease`)."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from storage import KVStore
from storage._lease import _pid_space
from storage.file_sink import FileSink
from storage.file_sink.directory import SinkDirectory
from storage.file_sink.errors import SinkHeldError
from storage.kv.errors import BucketHeldError, FencedError


def test_of_two_claims_at_one_moment_exactly_one_becomes_the_writer(tmp_path, monkeypatch):
    # The lease file was created empty and written after: a claim reading it in between took the lease for free and
    # claimed the next epoch, and both claims became writers. Here the second claim runs while the first writes.
    directory = SinkDirectory(FileSink(str(tmp_path / "out"), format="csv"))
    first, second = directory.lease(), directory.lease()
    outcomes, meanwhile = [], [second]
    write = os.write

    def claim_meanwhile(fd, data):
        if meanwhile:
            outcomes.append(_claimed(directory, meanwhile.pop()))
        return write(fd, data)

    monkeypatch.setattr(os, "write", claim_meanwhile)
    outcomes.append(_claimed(directory, first))
    assert sorted(outcomes) == ["claimed", "refused"]
    assert len(first.epochs()) == 1


def _claimed(directory, lease):
    try:
        directory.claim(lease, take_over=False)
    except SinkHeldError:
        return "refused"
    return "claimed"


def test_a_claim_whose_temporary_lease_file_a_newer_writer_cleaned_up_is_fenced_not_failed(tmp_path, monkeypatch):
    # A newer writer took the bucket over between this claim's link and its removal of the temporary file, which
    # the newer writer's cleanup deleted as an older epoch's: the claim failed with a bare FileNotFoundError.
    store = KVStore(str(tmp_path / "store"))
    unlink, newer, armed = os.unlink, [], [True]

    def a_take_over_first(path, *args, **kwargs):
        if armed and path.endswith(".tmp") and "/lease/." in path:
            armed.pop()
            newer.append(store.open(0, take_over=True))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", a_take_over_first)
    with pytest.raises(FencedError, match="was taken over by a newer writer"):
        store.open(0)
    monkeypatch.undo()
    newer[0].close()


@pytest.mark.parametrize("pid_space", ["this one", "another one"])
def test_a_gone_holder_frees_its_lease_only_where_it_ran_in_this_process_namespace(tmp_path, pid_space):
    # Containers that share a host name (Docker's host network) each number their own processes: a live writer of
    # another one has a pid this one does not run, and was taken for dead.
    store = KVStore(str(tmp_path / "store"))
    holder = store.open(0)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    lease = holder._catalog.lease
    held = json.loads(lease.fs.cat_file(lease.path(lease.epoch)))
    held.update(pid=int(gone.stdout), pid_space=_pid_space() if pid_space == "this one" else "pid:[1]")
    lease.fs.pipe_file(lease.path(lease.epoch), json.dumps(held).encode())
    if pid_space == "this one":
        store.open(0).close()
    else:
        with pytest.raises(BucketHeldError, match="is held by another writer"):
            store.open(0)


def test_a_leases_marks_are_in_its_file_from_the_claim_until_changed_and_after_its_release(tmp_path):
    # A successor reads what its predecessor owed from the lease file: written with the claim (a holder killed just
    # after it still tells), changed by `mark`, kept by `release`.
    directory = SinkDirectory(FileSink(str(tmp_path / "out"), format="csv"))
    first = directory.lease()
    first.claim(take_over=False, marked=lambda held: {"owed": held is None})
    assert first.read(first.epoch)["owed"] is True
    first.mark(owed=False)
    first.release()
    assert first.read(first.epoch)["owed"] is False
    second = directory.lease()
    second.claim(take_over=False, marked=lambda held: {"owed": not held["owed"]})
    assert second.read(second.epoch)["owed"] is True and second.previous["owed"] is False


def test_a_mark_cannot_change_the_leases_own_fields_and_an_unreadable_newest_lease_is_marked_as_saying_nothing(tmp_path):
    directory = SinkDirectory(FileSink(str(tmp_path / "out"), format="csv"))
    first = directory.lease()
    first.claim(take_over=False)
    first.mark(token="another", released=True)
    first.confirm()  # its token is its own still: a mark named "token" fenced its own writer on an object store
    assert first.read(first.epoch)["released"] is False
    with open(first.path(first.epoch), "w"):  # torn: created, never written
        pass
    told = []
    directory.lease().claim(take_over=False, marked=lambda held: told.append(held) or {})
    assert told == [{}]


@pytest.mark.parametrize(
    "body",
    ['{"expires": "soon"}', "[]", "5", '{"expires": null}', '{"token": [], "expires": 1e12}', ""],
    ids=["expires a str", "a list", "a number", "expires null", "token a list", "empty"],
)
def test_a_newest_lease_file_edited_by_hand_is_taken_as_one_that_cannot_be_read(tmp_path, body):
    # An empty or cut-short lease file says nothing of its holder: the next writer claims the directory (owing the
    # move of its in-progress parts). One edited into another value failed that writer with a bare TypeError or
    # AttributeError from the claim ('>' not supported between 'str' and 'float'; 'list' object has no 'get').
    sink = FileSink(str(tmp_path / "out")).with_writer_id("w")
    writer = sink.writer()
    writer.write_batch(pd.DataFrame({"id": [1, 2]}), 0, 0)
    writer.close()
    (lease,) = (tmp_path / "out" / "_file_sink" / "lease").glob("*.json")
    lease.write_text(body)
    directory = SinkDirectory(sink)
    assert directory.lease().read(1) is None
    told = []
    claim = directory.lease()
    claim.claim(take_over=False, marked=lambda held: told.append(held) or {})
    assert told == [{}]
    claim.release()
    writer = sink.writer()
    writer.write_batch(pd.DataFrame({"id": [3]}), 1, 1_000, end_of_input=True)
    writer.close()
    assert sorted(sink.read()["id"]) == [1, 2, 3]
