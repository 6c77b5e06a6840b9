"""The file sink's errors: each names the file or directory, what happened and what to do."""

from __future__ import annotations


class CorruptPartError(ValueError):
    """A finished part cannot be read back as it was committed: damaged, truncated or tampered with."""


class DamagedCommitRecordError(RuntimeError):
    """A commit record on the local disk does not read: no crash tears one there, so it was damaged since."""


class CommittedPartMissingError(RuntimeError):
    """A part a commit record holds is neither in progress, pending nor finished: its rows would be lost."""


class SinkHeldError(RuntimeError):
    """Another writer holds the sink directory's lease."""


class SinkFencedError(RuntimeError):
    """A newer writer took the sink directory over: this one's work is refused."""
