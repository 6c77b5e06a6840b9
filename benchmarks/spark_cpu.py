"""CPU seconds of a local Spark: its JVM and the Python processes it starts, from /proc.

On a shared machine wall time depends on the other jobs; CPU time much less so. The JVM
and Python are reported apart because they answer different questions: how much Spark's
row handling costs, and how much the Python functions and their conversions cost.
"""

from __future__ import annotations

import os


def jvm_pid(spark) -> int:
    """The process id of the local SparkSession's JVM (driver and executors in ``local[n]``)."""
    return spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()


def cpu_seconds(root: int) -> tuple[float, float]:
    """``(jvm, python)``: CPU seconds (user + system, waited-for children included) of ``root``
    and of all its descendants (Spark's Python daemon, workers and source runners); zeros where
    /proc is missing."""
    if not os.path.isdir("/proc"):
        return 0.0, 0.0
    parents, used = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(pid)], used[int(pid)] = int(fields[1]), sum(int(x) for x in fields[11:15])
    python, todo = 0, [child for child, parent in parents.items() if parent == root]
    while todo:
        pid = todo.pop()
        python += used.get(pid, 0)
        todo += [child for child, parent in parents.items() if parent == pid]
    tick = os.sysconf("SC_CLK_TCK")
    return used.get(root, 0) / tick, python / tick
