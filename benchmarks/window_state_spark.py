"""Window state on a real Spark streaming query: the in-memory backend (the bucket's whole window
table in its state row) against ``.window_state(KVStore(dir))``, same data, same machine.

    .venv/bin/python benchmarks/window_state_spark.py --sessions 20000 200000 [--backends memory store]
        [--batches 5] [--touched K] [--build-rows 1000000] [--profile DIR]

The job: ``windowed(stream, time="ts", key="k").sessions("1 hour").watermark("1 hour")
.aggregate(values=ToList("x"))`` (with ``.window_state(KVStore(dir))`` for ``store``: the store's
defaults, fsync on) on ``local[2]``, 2 shuffle partitions (so 2 key buckets), UI off, the workers
running this interpreter. The input is Parquet read with ``maxFilesPerTrigger=1``, one file written
and run (``processAllAvailable``) at a time:

- building files: N open sessions of 10 values each (int64 keys, the 10 values one second apart),
  ``--build-rows`` rows a file at most, a session never split between files;
- touching files (``--warmup`` + ``--batches``, the first ``--warmup`` left out: a young JVM spends most
  of its CPU compiling Spark's code paths (the JIT), which a long-running query does not): one element
  each to 1% of the sessions (``--touched K``: to K), random keys, inside their sessions. Nothing fires
  and nothing is purged: the watermark stays an hour behind the events.

Each N and backend runs in a driver process of its own (a fresh JVM and fresh Python workers).
Reported per case:

- ``batch s``: the median ``triggerExecution`` of the touching micro-batches;
- ``JVM cpu s`` and ``Python cpu s``: CPU seconds per touching micro-batch of Spark's JVM and of its
  Python processes (`spark_cpu`, from /proc), summed over both cores; the JVM's also by thread (the JIT
  compiler, the query's driver thread, the task threads, ...);
- ``peak RSS``: the largest peak resident set (``VmHWM``) of one Spark Python process, sampled from
  /proc every 0.1 s: ``build`` over the building batches, ``touch`` over the touching ones (the peak is
  reset between them by writing 5 to ``/proc/<pid>/clear_refs``);
- ``state``: Spark's state store memory (``memoryUsedBytes`` of the stateful operator: the state
  rows of the buckets, each version the provider keeps in memory) and the key-value store's bytes on
  disk.

``--profile DIR`` also samples the Python workers during the touching batches with ``py-spy record
--subprocesses`` (``pip install -e '.[bench]'``; it needs ptrace rights over the workers) and prints where
their time goes, by the kind of work (`CATEGORIES`), with the query progress' own split of a
micro-batch (``durationMs`` and the state operator's update and commit times).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_cpu import cpu_seconds, jvm_pid, proc_stat, read_bytes  # noqa: E402
from worker_profile import collapsed_stacks, descendants, start_profile, stop_profile  # noqa: E402

VALUES_PER_SESSION = 10
START = pd.Timestamp("2024-01-01")
SHUFFLE_PARTITIONS = 2
SCHEMA = "k long, ts timestamp, x long"

STAGE_METRICS = {
    "time to execute Python code",  # the worker's own clock around its processing, summed over tasks
    "time to update", "time to remove", "time to commit changes",  # the state operator's
    "scan time",
}
"""Not "time to initialize Python workers" nor "time to start ...": with reused workers the worker's clock
starts when it begins waiting for its next task, so those hold the idle time between tasks."""

CATEGORIES = [  # (name, the calls whose time it is: (function, a fragment of its file's path)); see `categorized`
    ("state row decode", [("BucketStep.load", "runners/spark/worker.py")]),
    ("state row encode", [("BucketStep.save", "runners/spark/worker.py")]),
    ("timeouts", [("BucketStep._set_timeout", "runners/spark/worker.py")]),
    ("elements in", [("BucketStep.elements", "runners/spark/worker.py")]),
    ("panes out", [("BucketStep.output", "runners/spark/worker.py")]),
    ("window_state: index, records, pickles", [("keyed_step", "windowing/window_state.py")]),
    ("store reads and writes", [("", "storage/kv/")]),
    ("engine step", [("step", "windowing/engine.py")]),
    ("Arrow to pandas (input, state rows)", [("ArrowStreamSerializer.load_stream", "serializers.py"),
                                             ("read_udfs.<locals>.to_pandas", "worker.py")]),
    ("pandas to Arrow (output, state rows)", [("read_udfs.<locals>.construct_record_batch", "worker.py")]),
    ("pyspark's (un)pickling of the state row", [("read_udfs.<locals>.construct_state", "worker.py"),
                                                 ("read_udfs.<locals>.construct_state_pdf", "worker.py")]),
    # No deeper Python frame: native work at the end of the call, when the step's tables are freed.
    ("end of the call (the step's tables freed)", [("read_udfs.<locals>.apply_udf_to_group.<locals>.<genexpr>",
                                                   "worker.py")]),
]


# -- input --------------------------------------------------------------------------------------
def frame(keys: np.ndarray, offsets_s: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"k": keys.astype(np.int64),
                         "ts": (START + pd.to_timedelta(offsets_s, unit="s")).astype("datetime64[us]"),
                         "x": values.astype(np.int64)})


def building_files(n: int, build_rows: int) -> list[pd.DataFrame]:
    """N sessions of 10 values, ``build_rows`` rows a file at most, whole sessions per file."""
    per_file = max(1, build_rows // VALUES_PER_SESSION)
    files = []
    for first in range(0, n, per_file):
        keys = np.repeat(np.arange(first, min(first + per_file, n)), VALUES_PER_SESSION)
        offsets = np.tile(np.arange(VALUES_PER_SESSION), len(keys) // VALUES_PER_SESSION)
        files.append(frame(keys, offsets, keys * VALUES_PER_SESSION + offsets))
    return files


def touching_files(n: int, count: int, touched: int) -> list[pd.DataFrame]:
    """One element to ``touched`` random sessions per file, at second 5 of the session: inside it."""
    rng = np.random.default_rng(7)
    return [frame(np.sort(rng.choice(n, touched, replace=False)), np.full(touched, 5), np.full(touched, 10**9 + b))
            for b in range(count)]


def write_file(source: Path, index: int, data: pd.DataFrame) -> None:
    tmp = source / f".part-{index:05d}.parquet"
    data.to_parquet(tmp, index=False)
    os.replace(tmp, source / f"part-{index:05d}.parquet")  # the source never sees a half-written file


# -- the Python workers' memory ------------------------------------------------------------------
class PythonPeaks:
    """The peak resident set of every Python process under the JVM, sampled from /proc in a thread."""

    def __init__(self, jvm: int, every_s: float = 0.1):
        self.jvm, self.every_s = jvm, every_s
        self.peaks: dict[int, int] = {}
        self._lock = threading.Lock()  # a sample read before a reset must not land after it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def python_pids(self) -> list[int]:
        """``python -m pyspark.daemon`` and the workers it forks: not the JVM's own short-lived children (a
        shell command Hadoop runs), which for a moment carry the JVM's command line, ``pyspark`` in it."""
        return [pid for pid in descendants(self.jvm) if b"-m\0pyspark." in read_bytes(f"/proc/{pid}/cmdline")]

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def sample(self) -> None:
        with self._lock:
            for pid in self.python_pids():
                peak = _status_kib(pid, "VmHWM")
                if peak is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), peak)

    def take(self) -> float:
        """The largest peak in MiB since the last `take`, then reset every process's peak (where /proc lets
        this process write ``clear_refs``; where not, the next figure includes this one)."""
        self.sample()
        with self._lock:
            largest = max(self.peaks.values(), default=0) / 1024
            self.peaks.clear()
            for pid in self.python_pids():
                try:
                    with open(f"/proc/{pid}/clear_refs", "w") as f:
                        f.write("5")  # resets VmHWM to the current resident set (Linux 4.0 on)
                except OSError:
                    pass
        return largest

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _status_kib(pid: int, field: str) -> int | None:
    for line in read_bytes(f"/proc/{pid}/status").splitlines():
        if line.startswith(field.encode() + b":"):
            return int(line.split()[1])
    return None


def jvm_threads(jvm: int) -> dict[int, tuple[str, int]]:
    """Thread id -> (name, CPU ticks) of every thread of the JVM, from /proc."""
    threads = {}
    for tid in os.listdir(f"/proc/{jvm}/task"):
        stat = proc_stat(f"/proc/{jvm}/task/{tid}/stat")
        if stat is not None:
            name, fields = stat
            threads[int(tid)] = (name, int(fields[11]) + int(fields[12]))
    return threads


def thread_split(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], total_s: float,
                 batches: int) -> dict[str, float]:
    """JVM CPU seconds per micro-batch by kind of thread (Linux keeps 15 characters of a thread's name, digits
    dropped here to group pools); ``threads that ended`` is the process's CPU no live thread accounts for."""
    tick, split = os.sysconf("SC_CLK_TCK"), Counter()
    for tid, (name, ticks) in after.items():
        split["".join(c for c in name if not c.isdigit()).strip(" -#")] += ticks - before.get(tid, (name, 0))[1]
    out = {name: ticks / tick / batches for name, ticks in split.most_common() if ticks > 0}
    out["threads that ended"] = max(0.0, total_s / batches - sum(out.values()))
    return {name: round(seconds, 3) for name, seconds in out.items()}


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


# -- one case, in a driver process of its own ------------------------------------------------------
def run_case(backend: str, n: int, batches: int, warmup: int, touched: int, build_rows: int, work: Path,
             profile: Path | None) -> dict:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from accumulations import ToList
    from storage import KVStore
    from windowing import windowed

    shutil.rmtree(work, ignore_errors=True)
    source, checkpoint, kv, events = work / "in", work / "chk", work / "kv", work / "events"
    source.mkdir(parents=True)
    events.mkdir()
    spark = (SparkSession.builder.master("local[2]").appName(f"window_state_spark-{backend}-{n}")
             .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
             .config("spark.default.parallelism", str(SHUFFLE_PARTITIONS))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
             .config("spark.driver.memory", "6g")
             .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", str(events))
             .config("spark.eventLog.compress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    jvm = jvm_pid(spark)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    pipeline = windowed(stream, time="ts", key="k").sessions("1 hour").watermark("1 hour")
    if backend == "store":
        pipeline = pipeline.window_state(KVStore(str(kv)))
    query = (pipeline.aggregate(values=ToList("x")).writeStream.format("noop").outputMode("append")
             .option("checkpointLocation", str(checkpoint)).start())
    peaks = PythonPeaks(jvm)
    try:
        building, touching = building_files(n, build_rows), touching_files(n, warmup + batches, touched)
        for i, data in enumerate(building):
            write_file(source, i, data)
            query.processAllAvailable()
        build_peak = peaks.take()
        for i, data in enumerate(touching[:warmup]):  # left out of the figures: see the module's docstring
            write_file(source, len(building) + i, data)
            query.processAllAvailable()
        peaks.take()
        spy = start_profile(jvm, profile / f"{backend}-{n}.txt") if profile else None
        cpu_before, threads_before = cpu_seconds(jvm), jvm_threads(jvm)
        for i, data in enumerate(touching[warmup:]):
            write_file(source, len(building) + warmup + i, data)
            query.processAllAvailable()
        cpu_after, threads_after = cpu_seconds(jvm), jvm_threads(jvm)
        if spy is not None:
            stop_profile(spy)
        touch_peak = peaks.take()
        progress = sorted((p for p in query.recentProgress if p["numInputRows"] > 0), key=lambda p: p["batchId"])
    finally:
        query.stop()
        peaks.stop()
        spark.stop()
    measured = progress[len(building) + warmup:]
    assert len(measured) == batches and all(p["numInputRows"] == touched for p in measured), \
        f"expected {batches} touching batches of {touched} rows, got {[p['numInputRows'] for p in measured]}"
    state = measured[-1]["stateOperators"][0]
    median = _median
    return {
        "batch_s": median([p["durationMs"]["triggerExecution"] for p in measured]) / 1000,
        "build_batch_s": median([p["durationMs"]["triggerExecution"] for p in progress[:len(building)]]) / 1000,
        "jvm_cpu_s": (cpu_after[0] - cpu_before[0]) / batches,
        "python_cpu_s": (cpu_after[1] - cpu_before[1]) / batches,
        "build_peak_mib": build_peak, "touch_peak_mib": touch_peak,
        "state_memory_mib": state.get("memoryUsedBytes", 0) / 2**20,
        "state_rows": state.get("numRowsTotal"),
        "store_disk_mib": disk_bytes(kv) / 2**20,
        "jvm_threads_s": thread_split(threads_before, threads_after, cpu_after[0] - cpu_before[0], batches),
        "durations_ms": {name: median([p["durationMs"].get(name, 0) for p in measured])
                         for name in measured[0]["durationMs"]},
        "stages": stages(events, [p["batchId"] for p in measured]),
        "operator_ms": {name: median([p["stateOperators"][0].get(name, 0) for p in measured])
                        for name in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs")},
    }


def stages(events: Path, batch_ids: list[int]) -> list[dict]:
    """Per stage of a touching micro-batch (in the order they ran), medians over the batches, from Spark's
    event log: its wall time, its tasks' run and CPU time summed (the JVM threads' CPU: a task thread waiting
    for its Python worker uses none), their GC time, and the stage's SQL metrics in `STAGE_METRICS`."""
    jobs: dict[int, int] = {}  # job -> batch
    per_batch: dict[int, list[int]] = {}  # batch -> its stages in order
    info: dict[int, dict] = {}
    tasks: dict[int, Counter] = {}
    for path in sorted(p for p in events.rglob("*") if p.is_file() and not p.name.startswith(".")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                batch = (event.get("Properties") or {}).get("streaming.sql.batchId")
                if batch is not None and int(batch) in batch_ids:
                    jobs[event["Job ID"]] = int(batch)
                    per_batch.setdefault(int(batch), []).extend(sorted(event["Stage IDs"]))
            elif kind == "SparkListenerTaskEnd" and "Task Metrics" in event:
                m, total = event["Task Metrics"], tasks.setdefault(event["Stage ID"], Counter())
                total["tasks run ms"] += m["Executor Run Time"]
                total["tasks CPU ms"] += m["Executor CPU Time"] / 1e6
                total["tasks GC ms"] += m["JVM GC Time"]
                total["tasks deserialize ms"] += m["Executor Deserialize Time"]
                total["shuffle write ms"] += m["Shuffle Write Metrics"]["Shuffle Write Time"] / 1e6
            elif kind == "SparkListenerStageCompleted":
                stage = event["Stage Info"]
                info[stage["Stage ID"]] = stage
    rows: list[list[dict]] = []
    for batch in batch_ids:
        ran = [s for s in per_batch.get(batch, []) if s in info and "Completion Time" in info[s]]
        rows.append([{"stage": s, "wall ms": info[s]["Completion Time"]
                      - info[s]["Submission Time"], **tasks.get(s, Counter()),
                      **{a["Name"]: float(a["Value"]) for a in info[s].get("Accumulables", [])
                         if a.get("Name") in STAGE_METRICS}}
                     for s in ran])
    shapes = {len(r) for r in rows}
    if len(shapes) != 1:
        return [{"stages per batch differ": sorted(shapes)}]
    return [{"stage": "stateful" if "time to update" in rows[0][i] else "map",
             **{name: round(_median([r[i].get(name, 0) for r in rows]), 1) for name in rows[0][i] if name != "stage"}}
            for i in range(len(rows[0]))]


def _median(values: list[float]) -> float:
    return float(np.median(values))


def categorized(collapsed: Path) -> Counter:
    """Samples per category of py-spy's collapsed stacks: a sample counts for the innermost call of its stack
    that `CATEGORIES` names (a store read inside ``keyed_step`` is the store's; the engine's step inside it
    the engine's); ``pyspark's worker loop, other`` where none is named."""
    counts: Counter = Counter()
    for frames, samples in collapsed_stacks(collapsed):
        counts[_category(frames)] += samples
    return counts


def _category(frames: list[str]) -> str:
    found = "pyspark's worker loop, other"
    for frame_ in frames:  # outermost first: the last match is the innermost
        function, _, where = frame_.partition(" (")
        for name, calls in CATEGORIES:
            if any((not f or function == f) and path in where for f, path in calls):
                found = name
    return found


# -- the command line ------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--backends", nargs="+", choices=["memory", "store"], default=["memory", "store"])
    parser.add_argument("--batches", type=int, default=5, help="touching micro-batches measured (default 5)")
    parser.add_argument("--warmup", type=int, default=20, help="touching micro-batches run first, not measured")
    parser.add_argument("--touched", type=int, default=None,
                        help="sessions each touching micro-batch touches (default: 1%% of the open sessions)")
    parser.add_argument("--build-rows", type=int, default=1_000_000, help="rows per building file at most")
    parser.add_argument("--work", type=Path, default=Path("/tmp/window_state_spark"))
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the workers; collapsed stacks into DIR")
    args = parser.parse_args()
    print(f"local[2], {SHUFFLE_PARTITIONS} shuffle partitions (2 buckets), {args.batches} touching batches measured "
          f"after {args.warmup}; "
          f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    header = (f"{'sessions':>10} {'touched':>8} {'backend':>7} {'batch s':>8} {'JVM cpu s':>9} {'Py cpu s':>8} "
              f"{'build s':>8} {'RSS build MiB':>13} {'RSS touch MiB':>13} {'state MiB':>9} {'store MiB':>9}")
    print(header, flush=True)
    for n in args.sessions:
        touched = args.touched or max(1, n // 100)
        for backend in args.backends:
            command = [sys.executable, __file__, "--case", backend, str(n), str(args.batches), str(args.warmup), str(touched),
                       str(args.build_rows), str(args.work), str(args.profile or "")]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{backend} at {n} sessions failed:\n{done.stderr[-4000:]}")
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{n:>10} {touched:>8} {backend:>7} {r['batch_s']:>8.2f} {r['jvm_cpu_s']:>9.2f} "
                  f"{r['python_cpu_s']:>8.2f} {r['build_batch_s']:>8.1f} {r['build_peak_mib']:>13.0f} "
                  f"{r['touch_peak_mib']:>13.0f} {r['state_memory_mib']:>9.1f} {r['store_disk_mib']:>9.1f}", flush=True)
            print(f"{'':>10} durationMs medians {r['durations_ms']}, state operator {r['operator_ms']}", flush=True)
            print(f"{'':>10} JVM CPU s per batch by thread {r['jvm_threads_s']}", flush=True)
            for stage in r["stages"]:
                print(f"{'':>10} stage {stage}", flush=True)
            if args.profile:
                counts = categorized(args.profile / f"{backend}-{n}.txt")
                total = sum(counts.values())
                shares = ", ".join(f"{name} {100 * c / total:.0f}%" for name, c in counts.most_common())
                print(f"{'':>10} Python workers' samples ({total}): {shares}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--case":
        backend_, n_, batches_, warmup_, touched_, rows_, work_, profile_ = sys.argv[2:10]
        print(json.dumps(run_case(backend_, int(n_), int(batches_), int(warmup_), int(touched_), int(rows_), Path(work_),
                                  Path(profile_) if profile_ else None)))
    else:
        main()
