"""py-spy over a local Spark's Python workers: where their time goes, in collapsed stacks.

``start_profile`` attaches ``py-spy record`` to Spark's Python daemon (the workers are its children) and
``stop_profile`` makes it write its samples; ``innermost`` adds them up by the innermost call of each stack.
Used by ``spark_bench.py --profile`` and ``window_state_spark.py --profile``.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from spark_cpu import pids, proc_stat, read_bytes


def start_profile(jvm: int, out: Path) -> subprocess.Popen:
    """``py-spy record`` on Spark's Python daemon and its workers, collapsed stacks into ``out``."""
    daemons = _daemons(jvm)
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit(f"--profile needs py-spy, not found on PATH nor at {spy}: pip install -e '.[bench]'")
    return subprocess.Popen([spy, "record", "--subprocesses", "--format", "raw", "--rate", "200", "--nonblocking",
                             "--pid", str(daemons[0]), "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _daemons(jvm: int) -> list[int]:
    daemons = [pid for pid in descendants(jvm) if b"pyspark.daemon" in read_bytes(f"/proc/{pid}/cmdline")]
    parents = set(daemons)
    roots = [pid for pid in daemons if _parent(pid) not in parents]
    assert roots, "no pyspark.daemon under the JVM to profile"
    return roots


def stop_profile(spy: subprocess.Popen) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    _, err = spy.communicate(timeout=120)
    assert spy.returncode in (0, -signal.SIGINT), f"py-spy failed: {err[-2000:]}"


def _parent(pid: int) -> int | None:
    stat = proc_stat(f"/proc/{pid}/stat")
    return None if stat is None else int(stat[1][1])


def descendants(root: int) -> list[int]:
    """The process ids under ``root``, children and their children."""
    parents = {pid: parent for pid in pids() if (parent := _parent(pid)) is not None}
    found, todo = [], [root]
    while todo:
        parent = todo.pop()
        children = [pid for pid, p in parents.items() if p == parent]
        found += children
        todo += children
    return found


def collapsed_stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    """The stacks of a py-spy collapsed file (``frame;frame;... count`` a line), outermost frame first, each
    with its samples; a frame reads ``function (file:line)``."""
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            yield stack.split(";"), int(count)


def innermost(collapsed: list[Path]) -> Counter:
    """Samples per innermost call (``function (file)``, no line) of py-spy's collapsed stacks in ``collapsed``."""
    counts: Counter = Counter()
    for path in collapsed:
        for frames, samples in collapsed_stacks(path):
            function, _, where = frames[-1].partition(" (")
            counts[f"{function} ({where.rsplit(':', 1)[0].rsplit('/', 1)[-1]})"] += samples
    return counts
