"""The writer's lease that the key-value store's buckets and the file sink share (`storage._lease`)."""

import os

import pytest

from storage import KVStore
from storage.file_sink import FileSink
from storage.file_sink.directory import SinkDirectory
from storage.file_sink.errors import SinkHeldError
from storage.kv.errors import FencedError


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
