"""The workers' end of their TCP connection to Spark's JVM (`storage.worker_socket`): which sockets
it takes, that it lets go of them, and that the runner's functions start it in Spark's workers (the
splitter's source starting it: tests/splitter/test_spark_source.py).
What it is for, fewer waits for delayed ACKs, is a matter of time, measured by
``benchmarks/spark_bench.py`` (docs/spark.md, "Python workers over TCP"), not asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from windowing import windowed
from windowing.errors import WindowingConfigError
from windowing.runners.spark import COMBINE_CONF, QUICK_ACK_CONF
from windowing.runners.spark.worker_python import on_workers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_QUICKACK and epoll are Linux's")

#: Run in a fresh interpreter (the helper starts once per process): a loopback TCP connection with
#: both ends in the process, a listening socket and a Unix socket pair beside it.
PROCESS = """
import json, os, socket, threading
from storage.worker_socket import acknowledge_arrivals_at_once

listener = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(listener.getsockname())
server, _ = listener.accept()
unix_a, unix_b = socket.socketpair()
fds = len(os.listdir("/proc/self/fd"))
{call}
acknowledge_arrivals_at_once()  # a second call: nothing more
helpers = [t for t in threading.enumerate() if t.name == "windowing-quickack"]
taken = len(os.listdir("/proc/self/fd")) - fds
nodelay = [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0 for s in (client, server)]
client.sendall(b"x" * 100)
received = server.recv(100)
server.sendall(b"y")
client.recv(1)
for end in (client, server):
    end.shutdown(socket.SHUT_RDWR)
    end.close()
for helper in helpers:
    helper.join(timeout=60)
print(json.dumps({{"helpers": len(helpers), "taken": taken, "nodelay": nodelay, "received": len(received),
                  "alive": any(h.is_alive() for h in helpers), "left": len(os.listdir("/proc/self/fd")) - fds + 2}}))
"""


def _in_fresh_process(call: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PROCESS.format(call=call))], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_helper_takes_the_loopback_connection_only_and_lets_go_when_it_closes():
    report = _in_fresh_process("acknowledge_arrivals_at_once()")
    # one helper thread, its epoll and a duplicate of each end of the TCP connection, not of the listener or the
    # Unix pair
    assert report["helpers"] == 1 and report["taken"] == 3
    assert report["nodelay"] == [True, True]
    assert report["received"] == 100
    # both ends hung up: the helper closed its duplicates and its epoll and ended (the closed ends' own 2
    # descriptors gone too)
    assert not report["alive"] and report["left"] == 0


def test_the_helper_holds_its_descriptors_when_the_call_returns_before_its_thread_runs():
    """Its epoll and its duplicates are made by the call, not by the thread, so the count above waits on
    nothing: here the thread never starts (kept, not started), and the call still took all three."""
    never_started = "unstarted = []\nthreading.Thread.start = lambda self: unstarted.append(self)\n"
    report = _in_fresh_process(never_started + "acknowledge_arrivals_at_once()")
    assert report["helpers"] == 0 and report["taken"] == 3 and report["nodelay"] == [True, True]


def test_a_function_shipped_without_quick_ack_leaves_the_sockets_alone():
    ship = ("import pickle; from pyspark import cloudpickle; from windowing.runners.spark.worker_python import on_workers\n"
            "shipped = pickle.loads(cloudpickle.dumps(on_workers(lambda rows: sum(rows), {flag})))\n"
            "assert shipped([1, 2]) == 3\n")
    started = _in_fresh_process(ship.format(flag=True))
    assert started["helpers"] == 1 and started["nodelay"] == [True, True]
    # the second call of the script would start it: mark the process as started, as the shipped function would have
    left_alone = _in_fresh_process(ship.format(flag=False) + "from storage import worker_socket\n"
                                   "assert not worker_socket._STARTED_IN_PROCESS\n"
                                   "worker_socket._STARTED_IN_PROCESS.append(os.getpid())\n")
    assert left_alone["helpers"] == 0 and left_alone["nodelay"] == [False, False]


REFUSE = "def refuse(*args):\n    raise PermissionError('refused')\n"


@pytest.mark.parametrize("refusal", [
    "real = os.listdir\nos.listdir = refuse\nacknowledge_arrivals_at_once()\nos.listdir = real\n",
    "real = socket.socket.setsockopt\nsocket.socket.setsockopt = lambda self, *args: refuse()\n"
    "acknowledge_arrivals_at_once()\nsocket.socket.setsockopt = real\n",
], ids=["no /proc listing", "socket option refused"])
def test_a_system_that_refuses_it_leaves_the_task_going_without_it(refusal):
    """No error, no helper, no descriptor kept."""
    report = _in_fresh_process(REFUSE + refusal)
    assert report["helpers"] == 0 and report["taken"] == 0 and report["nodelay"] == [False, False]


@pytest.mark.spark
def test_the_runners_functions_start_the_helper_in_sparks_workers_over_tcp(spark):
    """Over TCP (pyspark 3.5, or 4.1+ without spark.python.unix.domain.socket.enabled) a worker that ran one of the
    runner's functions has its connection to the JVM without Nagle and the helper thread; over a Unix socket
    (the suite's pyspark 4) it has no loopback TCP connection and no helper."""
    import pyspark

    def report(frames):
        import socket
        import threading

        from storage.worker_socket import _loopback_tcp_sockets

        sockets = _loopback_tcp_sockets()
        nodelay = all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0 for s in sockets)
        helper = any(t.name == "windowing-quickack" for t in threading.enumerate())
        for s in sockets:
            s.close()
        for _ in frames:
            pass
        yield pd.DataFrame({"tcp": [len(sockets)], "nodelay": [nodelay], "helper": [helper]})

    rows = spark.range(4, numPartitions=2).mapInPandas(on_workers(report), "tcp long, nodelay boolean, helper boolean").collect()
    version = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
    over_unix_socket = version >= (4, 1) and spark.conf.get("spark.python.unix.domain.socket.enabled", "false") == "true"
    for row in rows:
        if over_unix_socket:
            assert row.tcp == 0 and not row.helper
        else:
            assert row.tcp >= 1 and row.nodelay and row.helper


@pytest.mark.spark
@pytest.mark.parametrize("setting", [COMBINE_CONF, QUICK_ACK_CONF])
def test_a_switch_that_is_neither_true_nor_false_is_refused_naming_it(spark, setting):
    from accumulations import Sum

    frame = spark.createDataFrame(pd.DataFrame({"user": ["a"], "ts": [1_000], "amount": [1]}))
    spark.conf.set(setting, "Sometimes")  # named as set: it was lower-cased
    try:
        with pytest.raises(WindowingConfigError, match=rf"{setting}='Sometimes' must be 'true' or 'false'"):
            windowed(frame, time="ts", key="user").fixed(10).aggregate(Sum("amount"))
    finally:
        spark.conf.unset(setting)
