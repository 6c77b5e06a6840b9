"""CPU seconds of a local Spark: its JVM and the Python processes it starts, from /proc.

On a shared machine wall time depends on the other jobs; CPU time much less so. The JVM
and Python are reported apart because they answer different questions: how much Spark's
row handling costs, and how much the Python functions and their conversions cost.
"""

from __future__ import annotations

import os
import time


def jvm_pid(spark) -> int:
    """The process id of the local SparkSession's JVM (driver and executors in ``local[n]``)."""
    return spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()


def cpu_seconds(root: int) -> tuple[float, float]:
    """``(jvm, python)``: CPU seconds (user + system) of ``root`` itself, and of all its
    descendants (Spark's Python daemon, workers and source runners), waited-for ones included;
    zeros where /proc is missing.

    A child the JVM has waited for (a Python data source's runner, which lives for one query)
    is gone from /proc; its time is in the JVM's children's time, so that counts as Python."""
    if not os.path.isdir("/proc"):
        return 0.0, 0.0
    parents, used, own = {}, {}, 0
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(pid)], used[int(pid)] = int(fields[1]), sum(int(x) for x in fields[11:15])
        if int(pid) == root:
            own = int(fields[11]) + int(fields[12])
    python, todo = used.get(root, 0) - own, [child for child, parent in parents.items() if parent == root]
    while todo:
        pid = todo.pop()
        python += used.get(pid, 0)
        todo += [child for child, parent in parents.items() if parent == pid]
    tick = os.sysconf("SC_CLK_TCK")
    return own / tick, python / tick


def wait_for_source_runners(root: int, timeout_s: float = 10.0) -> None:
    """Wait until the Python data source runners under ``root`` have exited and been reaped: one
    lives for each streaming query and exits just after it stops, so its CPU seconds (about 3 per
    query, mostly importing pyspark) land in the JVM's children's time only then, not in the next
    query's. An exited child not yet reaped (a zombie) has no command line, so any zombie child
    of ``root`` is waited for too."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_is_runner_or_zombie(pid, root) for pid in _pids()):
        time.sleep(0.05)


def _pids() -> list[str]:
    return [pid for pid in os.listdir("/proc") if pid.isdigit()]


def _is_runner_or_zombie(pid: str, root: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, parent = f.read().rsplit(")", 1)[1].split()[:2]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read()
    except OSError:
        return False
    return b"python_streaming_source_runner" in command or (state == "Z" and int(parent) == root)
