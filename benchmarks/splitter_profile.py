"""Where a splitter query's time goes: the JVM's hot methods (Java Flight Recorder) and the
Python workers' hot functions (py-spy), for the splitter's whole rows and for native
``value, input_file_name()`` over the same data.

    .venv/bin/python benchmarks/splitter_profile.py [--size-gb 1] [--block-mb 128] [--top 25] [--depth 1]

Needs ``jcmd`` and ``jfr`` (JDK 17) on PATH or beside ``java``, and ``py-spy`` in the venv. Each
query reads every line with Trigger.AvailableNow into the ``noop`` sink after a warm-up that checks
its lines (the profiled run adds nothing per row, as ``splitter_bench``'s timed runs); the
JVM is recorded from its start to its end with JFR's ``profile`` settings (a sample every
10 ms per running thread), the Python workers with py-spy at 200 samples per second.
Prints, per query, the share of JVM samples per top frame and per Spark/Arrow component,
and the share of Python samples per innermost function.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from spark_cpu import jvm_pid  # noqa: E402
from splitter_bench import MB, checked, chunks_per_file, timed, write_data  # noqa: E402
from worker_profile import collapsed_stacks  # noqa: E402

from storage import FileSplitter  # noqa: E402

#: JVM frames grouped by what they do: the first rule whose prefix a sample's stack holds names it.
JVM_COMPONENTS = [
    ("Arrow batches from Python into rows", ("org.apache.spark.sql.execution.python.", "org.apache.spark.api.python.",
                                             "org.apache.arrow.", "org.apache.spark.sql.vectorized.",
                                             "org.apache.spark.sql.execution.datasources.v2.python.")),
    ("native text reader", ("org.apache.hadoop.", "org.apache.spark.sql.execution.datasources.HadoopFileLinesReader",
                            "org.apache.spark.sql.execution.datasources.text.")),
    ("generated code (projections, posexplode, substr)", ("org.apache.spark.sql.catalyst.expressions.GeneratedClass",)),
]


def jdk_tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    java = os.path.realpath(shutil.which("java") or "java")
    return os.path.join(os.path.dirname(java), name)


def python_workers(jvm: int) -> list[int]:
    """Pids of the ``pyspark.daemon`` processes under ``jvm`` (their forks run the tasks)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()
            if int(line.split()[1]) == jvm and "pyspark.daemon" in line and "worker.create" not in line]


def profile(run, jvm: int, directory: str, name: str,
            depth: int) -> tuple[collections.Counter, collections.Counter, int, int]:
    """Run ``run()`` under JFR and py-spy; (JVM top ``depth`` frames, Python innermost functions, samples of each)."""
    recording = os.path.join(directory, f"{name}.jfr")
    subprocess.run([jdk_tool("jcmd"), str(jvm), "JFR.start", "name=bench", "settings=profile"],
                   check=True, capture_output=True)
    spies = [subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--subprocesses",
                               "--nonblocking", "-r", "200", "-f", "raw", "-o", os.path.join(directory, f"{name}-{pid}.txt"),
                               "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for pid in python_workers(jvm)]
    time.sleep(1)  # py-spy attaches
    run()
    subprocess.run([jdk_tool("jcmd"), str(jvm), "JFR.stop", "name=bench", f"filename={recording}"],
                   check=True, capture_output=True)
    for spy in spies:
        spy.send_signal(2)
        spy.wait()
    events = json.loads(subprocess.run([jdk_tool("jfr"), "print", "--json", "--events", "jdk.ExecutionSample", recording],
                                       capture_output=True, text=True, check=True).stdout)["recording"]["events"]
    jvm_top: collections.Counter = collections.Counter()
    jvm_components: collections.Counter = collections.Counter()
    for event in events:
        frames = [f"{f['method']['type']['name']}.{f['method']['name']}".replace("/", ".")
                  for f in event["values"]["stackTrace"]["frames"]]
        if not frames:
            continue
        jvm_top[" < ".join(frames[:depth])] += 1
        component = next((label for label, prefixes in JVM_COMPONENTS
                          if any(frame.startswith(prefixes) for frame in frames)), "other")
        jvm_components[f"[{component}]"] += 1
    python: collections.Counter = collections.Counter()
    for path in os.listdir(directory):
        if path.startswith(f"{name}-") and path.endswith(".txt"):
            for frames, samples in collapsed_stacks(Path(directory, path)):
                if not any("idle" in frame for frame in frames):
                    python[frames[-1]] += samples
    return jvm_top + jvm_components, python, len(events), sum(python.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--block-mb", type=int, default=128)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--depth", type=int, default=1, help="JVM frames to show per sample, innermost first")
    args = parser.parse_args()
    try:
        chunks_per_file(args.size_gb)
    except ValueError as err:
        parser.error(str(err))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").appName("splitter-profile")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    data, scratch = tempfile.mkdtemp(prefix="splitter-profile-"), tempfile.mkdtemp(prefix="splitter-profile-out-")
    try:
        lines = write_data(data, args.size_gb)
        jvm = jvm_pid(spark)
        queries = {
            "splitter, all 4 columns": lambda: FileSplitter(data, block_size=args.block_mb * MB, blocks_per_batch=64,
                                                             settle=0).read_stream(spark),
            "native `value, input_file_name()`": lambda: spark.readStream.text(data).select(
                "value", F.input_file_name().alias("path")),
        }
        for make in queries.values():
            checked(make(), jvm, lines, "warm-up")
        print(f"data: {args.size_gb} GB, {lines:,} lines; load average {os.getloadavg()[0]:.1f}\n")
        for index, (label, make) in enumerate(queries.items()):
            result: list = []
            jvm_samples, python, jvm_total, python_total = profile(
                lambda result=result, make=make: result.append(timed(make(), jvm)[0]), jvm, scratch, f"q{index}", args.depth)
            run = result[0]
            print(f"### {label}: {run.wall:.1f} s wall, {run.processing:.1f} s processing, "
                  f"cpu s JVM {run.jvm:.1f} + Python {run.python:.1f}\n")
            print(f"JVM, {jvm_total} samples:\n")
            for frame, count in jvm_samples.most_common(args.top):
                print(f"- {100 * count / max(jvm_total, 1):5.1f} % {frame}")
            print(f"\nPython workers, {python_total} busy samples:\n")
            for frame, count in python.most_common(args.top):
                print(f"- {100 * count / max(python_total, 1):5.1f} % {frame}")
            print(flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
