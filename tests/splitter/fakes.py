"""A fake clock and sleep for the splitter's tests: scan intervals, settle times and the waits
for settling files never depend on the wall clock."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable


class Clock:
    """A settable clock. ``sleep`` (the splitter's, when given ``sleep=clock.sleep``) records the
    wait, moves the clock on, then calls ``while_asleep``: what a writer still at work did meanwhile."""

    def __init__(self) -> None:
        self.now = time.time() + 1  # files written by the test are older than "now"
        self.slept: list[float] = []
        self.while_asleep: Callable[[], None] = lambda: None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self.while_asleep()


def write(path: Path, text: str, mtime: float | None = None) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return str(path)


def append(path: Path, text: str, mtime: float) -> None:
    """Append as a writer would, the file's mtime then being ``mtime``."""
    with open(path, "a") as f:
        f.write(text)
    os.utime(path, (mtime, mtime))
