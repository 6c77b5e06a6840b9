"""The Sparks the suite runs on, in one place: the shared local session's settings, a
``local-cluster`` driver in a process of its own, a Spark Connect server, and waiting on
conditions.

One Python process holds one SparkContext, so a test that needs two executor JVMs (to kill
one) runs its driver as a subprocess (``python -m tests.<module> ...``) built with
``session("local-cluster[2,1,1024]")``, and watches it from the test through files it writes.
For the same reason a Spark Connect session talks to a server in a process of its own
(`connect_server`), beside the suite's classic session.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent

LOCAL = "local[2]"
CLUSTER = "local-cluster[2,1,1024]"
"""Two executor JVMs of one core and 1 GiB each; starts in about 20 s from the pip pyspark."""

SETTINGS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # What docs/spark.md recommends (Spark 4.1+; pyspark 3.5 ignores it, so make test-spark35 runs over TCP).
    "spark.python.unix.domain.socket.enabled": "true",
}
"""The settings of every test Spark (the shared session adds the driver's memory)."""


def session(master: str = LOCAL, app: str = "tests", python: str | None = sys.executable, **settings: str) -> Any:
    """A SparkSession with the suite's settings whose Python workers run ``python`` (None: whatever
    ``PYSPARK_PYTHON`` says, else the ``python3`` on ``PATH``, as for a user who set nothing)."""
    if python is not None:
        os.environ["PYSPARK_PYTHON"] = python
        os.environ["PYSPARK_DRIVER_PYTHON"] = python
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app)
    for name, value in {**SETTINGS, **settings}.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 300.0, poll: float = 0.2,
             alive: Callable[[], bool] = lambda: True) -> Any:
    """Wait until ``condition()`` is truthy and return its value.

    The timeout only turns a hang into a failure (CI's machine is loaded, so it is generous);
    ``alive`` stops the wait early when what should make the condition true has died.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if not alive():
            raise AssertionError(f"gave up waiting for {what}: the process that should get there has ended")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(poll)


def executor_pids(app_id: str) -> dict[str, int]:
    """Executor id -> pid of the executor JVMs of application ``app_id`` (a ``local-cluster`` app)."""
    # -ww: without it ps cuts lines at 80 columns where it finds no terminal (under pytest), before the ids
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    pids = {}
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        words = args.split()
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in words and app_id in words:
            pids[words[words.index("--executor-id") + 1]] = int(pid)
    return pids


def kill_executor(app_id: str, executor_id: str | None = None) -> int:
    """SIGKILL one executor JVM of ``app_id`` (the first by id unless named); returns its pid."""
    pids = executor_pids(app_id)
    assert pids, f"application {app_id} has no executor running"
    pid = pids[executor_id if executor_id is not None else sorted(pids)[0]]
    os.kill(pid, signal.SIGKILL)
    return pid


def run_driver(module: str, *args: str, timeout: float = 600.0,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> <args>`` from the repository root (in environment ``env``, default
    this one's); fail with its stderr's tail."""
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, timeout=timeout,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, f"{module} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done


def start_driver(module: str, *args: str) -> subprocess.Popen[str]:
    """Start ``python -m <module> <args>`` in a session of its own (``os.killpg`` ends it whole)."""
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill_driver(process: subprocess.Popen[str]) -> None:
    """SIGKILL a driver started by ``start_driver``: Python, its JVM and the JVM's children."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


def connect_server_missing() -> str | None:
    """Why this pyspark cannot start a Spark Connect server here, or None. pip's pyspark 4 ships the
    server; pyspark 3.5 does not (``spark-submit --packages org.apache.spark:spark-connect_2.12``
    fetches it from Maven)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if any(jars.glob("spark-connect_*.jar")):
        return None
    return (f"pyspark {pyspark.__version__} from pip ships no Spark Connect server (no spark-connect jar in {jars}); "
            "it would come from Maven with --packages")


@contextlib.contextmanager
def connect_server(master: str = LOCAL, **settings: str) -> Iterator[str]:
    """A Spark Connect server on ``master`` with the suite's settings, in a process group of its own,
    its Python workers running this interpreter from the repository root; yields its address
    (``sc://localhost:<port>``, for ``SparkSession.builder.remote``) once it accepts connections, and
    ends it afterwards. Its port is one the system had free; where another process took it before the
    server bound it, the server starts again on another (``BIND_TRIES`` times)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    for tries_left in reversed(range(BIND_TRIES)):
        with socket.socket() as probe:
            probe.bind(("localhost", 0))
            port = probe.getsockname()[1]
        confs = [f"--conf={name}={value}" for name, value in {**SETTINGS, **settings,
                                                              "spark.connect.grpc.binding.port": str(port)}.items()]
        with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: a full pipe would stall the server
            server = subprocess.Popen([str(home / "bin" / "spark-submit"), "--master", master, "--class", CONNECT_SERVER,
                                       "--name", "tests-connect", *confs], cwd=ROOT, env=env, start_new_session=True,
                                      stdout=log, stderr=subprocess.STDOUT, text=True)
            try:
                try:
                    wait_for(functools.partial(_accepts, port), "the Spark Connect server to listen",
                             alive=functools.partial(_running, server))
                except AssertionError as err:
                    log.seek(0)
                    ending = log.read()[-4000:]
                    if tries_left and re.search(r"BindException|Address already in use|Failed to bind", ending):
                        continue
                    raise AssertionError(f"{err}; its log ends:\n{ending}") from None
                yield f"sc://localhost:{port}"
                return
            finally:
                kill_driver(server)


#: How many ports `connect_server` tries its server on.
BIND_TRIES = 3


def _running(process: subprocess.Popen[str]) -> bool:
    return process.poll() is None


def _accepts(port: int) -> bool:
    with socket.socket() as client:
        return client.connect_ex(("localhost", port)) == 0
