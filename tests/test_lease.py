"""The writer's lease that the key-value store's buckets and the file sink share (`storage._lease`)."""

import os

from storage.file_sink import FileSink
from storage.file_sink.directory import SinkDirectory
from storage.file_sink.errors import SinkHeldError


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
