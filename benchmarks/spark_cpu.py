"""CPU seconds of a local Spark: its JVM and the Python processes it starts, from /proc.

On a shared machine wall time depends on the other jobs; CPU time much less so. The JVM
and Python are reported apart because they answer different questions: how much Spark's
row handling costs, and how much the Python functions and their conversions cost. The /proc readers
here (``pids``, ``proc_stat``, ``read_bytes``) serve the other benchmarks' process accounting too.
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
    for pid in pids():
        stat = proc_stat(f"/proc/{pid}/stat")
        if stat is None:
            continue
        fields = stat[1]
        parents[pid], used[pid] = int(fields[1]), sum(int(x) for x in fields[11:15])
        if pid == root:
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
    while time.monotonic() < deadline and any(_is_runner_or_zombie(pid, root) for pid in pids()):
        time.sleep(0.05)


def pids() -> list[int]:
    """Every process id in /proc."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def proc_stat(path: str) -> tuple[str, list[str]] | None:
    """A process's or a thread's ``stat`` file (``/proc/<pid>/stat``, ``/proc/<pid>/task/<tid>/stat``) as its
    command name and the fields after it: ``[0]`` the state, ``[1]`` the parent, ``[11]`` and ``[12]`` user and
    system ticks, ``[13]`` and ``[14]`` those of its waited-for children. None where it has gone. The name is
    read between the first " (" and the last ")": it may hold spaces and parentheses."""
    stat = read_bytes(path)
    if not stat:
        return None
    name, _, rest = stat.partition(b" (")[2].rpartition(b")")
    return name.decode(errors="replace"), rest.decode().split()


def read_bytes(path: str) -> bytes:
    """The bytes of a /proc file, empty where the process has gone."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _is_runner_or_zombie(pid: int, root: int) -> bool:
    stat = proc_stat(f"/proc/{pid}/stat")
    if stat is None:
        return False
    state, parent = stat[1][:2]
    return b"python_streaming_source_runner" in read_bytes(f"/proc/{pid}/cmdline") or (state == "Z" and int(parent) == root)
