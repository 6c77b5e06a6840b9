"""The Python worker's end of its TCP connection to Spark's JVM: acknowledge what arrives at once.

Spark's JVM writes to its Python workers over TCP with Nagle's algorithm on (no ``TCP_NODELAY``
on that connection up to pyspark 4.3 at least, the stall SPARK-51667 fixed only for
``transformWithStateInPandas``'s state server), so a small write waits for the ACK of the one
before; the worker's kernel, seeing a request-and-answer exchange, delays that ACK by 40 ms.
Every exchange of a task with its worker (the rows, then the timed-out keys of a stateful task)
could wait that long for bytes already written: a small micro-batch of the windowing runner took 1.59
to 1.76 times native's latency with them, 1.29 to 1.36 without (docs/spark.md, "Python workers over
TCP"), and the splitter's Spark source, which exchanges once per block, read faster too
(docs/splitter.md, "Speed"). Both start it in their workers (`windowing.runners.spark.worker_python`,
`storage.splitter.spark_source`); it lives here, below both, and needs the standard library only.

The JVM's end cannot be reached from Python; the worker's can: ``TCP_QUICKACK``, set when data
has arrived, sends the pending ACK and leaves the delayed mode, so the JVM's next write goes out
at once. Linux only (``epoll``, ``TCP_QUICKACK``); elsewhere, and over a Unix domain socket
(``spark.python.unix.domain.socket.enabled``), nothing is done.
"""

from __future__ import annotations

import ipaddress
import os
import select
import socket
import threading

_STARTED_IN_PROCESS: list[int] = []


def acknowledge_arrivals_at_once() -> None:
    """Once per worker process: ``TCP_NODELAY`` on its loopback TCP sockets (its own small writes go
    out at once too) and a daemon thread that sets ``TCP_QUICKACK`` whenever data arrives on them.

    Called from the first task a worker runs with this package's code; pyspark reuses a worker and
    its connection for later tasks, which then exchange without the delayed ACKs. Only a matter of
    speed: where the system refuses any of it (no ``/proc``, a socket option not allowed), the task
    goes on as it would without."""
    if os.getpid() in _STARTED_IN_PROCESS:
        return
    _STARTED_IN_PROCESS.append(os.getpid())
    if not (hasattr(socket, "TCP_QUICKACK") and hasattr(select, "epoll")):
        return
    sockets: list[socket.socket] = []
    arrivals = None
    try:
        sockets = _loopback_tcp_sockets()
        for sock in sockets:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sockets:  # set up here, not in the thread: on return the helper holds all it will hold
            arrivals = select.epoll()
            for sock in sockets:
                arrivals.register(sock.fileno(), select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET)
    except OSError:
        for sock in sockets:
            sock.close()
        if arrivals is not None:
            arrivals.close()
        return
    if arrivals is not None:
        threading.Thread(target=_acknowledge, args=(arrivals, sockets), name="windowing-quickack", daemon=True).start()


def _loopback_tcp_sockets() -> list[socket.socket]:
    """This process's connected TCP sockets to a loopback address (the connection to Spark's JVM:
    the JVM reaches its local worker daemon on loopback), one per socket, as duplicates of their
    file descriptors."""
    found: dict[str, socket.socket] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
            if not target.startswith("socket:") or target in found:
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:  # closed meanwhile (the listing's own descriptor among them)
            continue
        try:
            loopback = (sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
                        and ipaddress.ip_address(sock.getpeername()[0]).is_loopback)
        except OSError:  # not connected
            loopback = False
        if loopback:
            found[target] = sock
        else:
            sock.close()
    return list(found.values())


def _acknowledge(arrivals: select.epoll, sockets: list[socket.socket]) -> None:
    """Wait for data to arrive on ``sockets``, registered with ``arrivals`` (edge-triggered: once per arrival,
    whether or not the worker has read it yet) and acknowledge it at once; stop with the last connection closed."""
    by_fd = {sock.fileno(): sock for sock in sockets}
    with arrivals:
        while by_fd:
            for fd, events in arrivals.poll():
                try:
                    if events & (select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR):
                        raise OSError("closed")
                    by_fd[fd].setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                except OSError:
                    arrivals.unregister(fd)
                    by_fd.pop(fd).close()
