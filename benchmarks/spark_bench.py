"""Spark benchmark: this engine versus Spark's native windowed aggregations, streaming.

Same Parquet data for all, read as a stream with one file per micro-batch
(``maxFilesPerTrigger=1``, ``trigger(availableNow=True)``; ``--files-per-batch N`` writes the
micro-batches' rows into N files each, N input partitions), written to the ``noop`` sink in append mode:

- native fixed:    withWatermark + groupBy(key, window(ts, "1 minute")).agg(sum)
- native sessions: withWatermark + groupBy(key, session_window(ts, "5 minutes")).agg(sum)
- engine fixed / engine sessions: windowed(...).fixed / .sessions with the default
  on-time trigger, the same watermark delay, ``aggregate(Sum("amount"))``.

The runner's defaults: no ``windowing.spark.*`` setting (one key bucket per shuffle partition, at most one per
core of ``local[2]`` dividing the partitions: 2 buckets with an even number of partitions) unless ``--buckets``
is given. Rounds are interleaved (native then engine for every case, the order swapped every other round) in one
SparkSession, and each figure is the median over the rounds, after ``--warmup-rounds`` (default 1) not counted:
the session's first query of a shape paid the JVM's warm-up (native's first query took about three times its later
time), which fell on whichever side ran first. Event times advance through the data with bounded out-of-order jitter; for sessions every key
alternates 10 minutes of activity and 10 minutes of pause, so sessions close. Also
reported: CPU seconds of Spark's JVM and of its Python processes per query (``spark_cpu``), the
median milliseconds of a micro-batch and of its Spark jobs, every side (``addBatch``; the rest is Structured
Streaming's bookkeeping, the same work for every side), state bytes per open window (one
bucket's window table encoded), and the latency of a small micro-batch: the median
``triggerExecution`` time of micro-batches of ``--latency-events`` events on as many keys (one
file each, the first batch, which plans the query, left out). Last, every side against native in each round
(`round_by_round`): the drift within the run, beside the medians.
``--floor`` adds two more sides, `floor_folded` and `floor_unfolded`: the same stream through
do-nothing Python of the engine's shape on ``applyInPandasWithState`` (with and without a
``mapInArrow`` before the shuffle), the least any runner built on that API pays, with their CPU seconds
(JVM and Python together) beside the engine's; ``--floor-transform-with-state`` adds the folded floor on
``transformWithStateInPandas``, PySpark 4's other stateful API (its queries on the RocksDB state store, which that
API requires); ``--floor-no-timeout`` the folded floor without the event-time timeout (`floor_no_timeout`: what
Spark's pass over timed-out keys costs; no runner can go without it); ``--floor-packed`` the engine's own query with a
stateful call that does nothing (`floor_packed`: every element shipped, as sessions must be).
``--foreach-batch`` adds `foreach_batch_shape`: the same stream through ``foreachBatch`` instead, each micro-batch a
batch query handed to Python and nothing done with it (another shape than ``api.md``'s, for comparison);
``--foreach-batch-runner`` adds the sketch of a runner of that shape doing the windowing (`foreach_batch_runner`: the
engine's step per bucket, its windows in files between micro-batches, Spark's own partial aggregation before the
shuffle for fixed windows). ``--uncompressed-state`` adds the engine with its
state values uncompressed (``windowing.spark.stateCompression=none``); ``--engine-conf KEY=VALUE`` the engine
with session settings of its own while its queries start (say Spark's
``spark.sql.execution.arrow.maxBytesPerBatch``), beside the engine without. ``--baseline REV`` adds the engine of
git revision ``REV`` (its ``windowing/`` package under another name, `baseline_package`) beside this checkout's:
separate runs of the two drift on a shared machine more than most changes move them, sides of one session do
not. ``--profile DIR`` runs the engine
once more per case after the timed rounds, with py-spy on Spark's Python workers (``worker_profile``), and
prints the calls they spent their samples in.

    .venv/bin/python benchmarks/spark_bench.py --events 2000000 --keys 1000 100000 --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from foreach_batch_runner import foreach_batch_runner  # noqa: E402
from spark_cpu import cpu_seconds, jvm_pid  # noqa: E402
from worker_profile import innermost, start_profile, stop_profile  # noqa: E402

MINUTE_S = 60
DELAY = "10 seconds"


def make_data(root: Path, events: int, keys: int, files: int, sessions: bool, seed: int = 7) -> Path:
    out = root / f"{'sessions' if sessions else 'fixed'}-{events}-{keys}-{files}"
    if out.exists():
        return out
    rng = np.random.default_rng(seed)
    span_s = max(2 * 3600, events // 500)  # about 500 events per second of event time
    t = np.sort(rng.uniform(0, span_s, events))
    key = rng.integers(0, keys, events)
    if sessions:  # active 10 minutes, paused 10 minutes, phase per key
        phase = (key * 7919 % 1200).astype(np.float64)
        inactive = ((t + phase) % 1200) >= 600
        t = np.where(inactive, t + 600, t)
        order = np.argsort(t, kind="stable")
        t, key = t[order], key[order]
    t = t - rng.uniform(0, 10, events)  # bounded out of order: at most 10 s late
    frame = pd.DataFrame({
        "key": key.astype(np.int64),
        "ts": pd.to_datetime(1_704_067_200 + t, unit="s").astype("datetime64[us]"),
        "amount": rng.integers(1, 100, events).astype(np.int64),
    })
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for i, part in enumerate(np.array_split(np.arange(events), files)):
        frame.iloc[part].to_parquet(tmp / f"part-{i:04d}.parquet", index=False)
    tmp.rename(out)
    return out


def split_settings(settings: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``--conf KEY=VALUE`` settings as the session builder's (``spark.*``) and the session's (the runner's own
    ``windowing.spark.*``: given to the builder they would reach the session too, but Spark's launcher warns
    "Ignoring non-Spark config property" for each); a setting without ``=`` is refused by name."""
    builder: dict[str, str] = {}
    session: dict[str, str] = {}
    for key, value in parsed_settings(settings, "--conf").items():
        (builder if key.startswith("spark.") else session)[key] = value
    return builder, session


def parsed_settings(settings: list[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` settings as a dict; a setting without ``=`` is refused naming ``option`` and the setting."""
    parsed: dict[str, str] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep:
            raise ValueError(f"{option} {setting!r}: give KEY=VALUE")
        parsed[key] = value
    return parsed


def run_query(spark, data: Path, build, checkpoints: Path, files_per_batch: int = 1) -> tuple[float, float, float, list[dict]]:
    """Wall seconds, CPU seconds of the JVM and of Spark's Python processes, and the ``durationMs`` of every
    micro-batch that read rows (``triggerExecution``, the whole micro-batch; ``addBatch``, its Spark jobs; the
    rest is Structured Streaming's bookkeeping: offsets, write-ahead log, commit, planning), of one query that reads
    ``files_per_batch`` files (input partitions) per micro-batch.

    The query's checkpoint is a new directory under ``checkpoints``: the RocksDB state store of a stopped query
    may still upload into its checkpoint until the next maintenance (``stateStore.maintenanceInterval``), so a
    directory shared by the queries, emptied for each, would get a stopped query's files."""
    from pyspark.sql.streaming import DataStreamWriter

    checkpoints.mkdir(parents=True, exist_ok=True)
    checkpoint = tempfile.mkdtemp(prefix="query-", dir=checkpoints)
    stream = spark.readStream.schema("key long, ts timestamp, amount long").option("maxFilesPerTrigger", files_per_batch).parquet(str(data))
    jvm = jvm_pid(spark)
    cpu_before = cpu_seconds(jvm)
    began = time.perf_counter()
    built = build(stream)  # a DataFrame for the noop sink, or a side's own DataStreamWriter (foreach_batch_shape)
    writer = built if isinstance(built, DataStreamWriter) else built.writeStream.format("noop").outputMode("append")
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - began
    cpu_after = cpu_seconds(jvm)
    batches = [p["durationMs"] for p in sorted(query.recentProgress, key=lambda p: p["batchId"]) if p["numInputRows"] > 0]
    return seconds, cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1], batches


def print_profile(spark, data: Path, build, checkpoints: Path, out: Path, case: str, files_per_batch: int,
                  top: int = 15) -> None:
    """One more run of ``build``, not timed, with py-spy on Spark's Python workers; the ``top`` innermost calls
    by share of the samples. Run after the timed rounds: the workers' first task pays their imports once, which
    the medians leave out, and py-spy's sampling slows the run it watches."""
    spy = start_profile(jvm_pid(spark), out)
    try:
        run_query(spark, data, build, checkpoints, files_per_batch)
    finally:
        stop_profile(spy)
    counts = innermost([out])
    total = sum(counts.values())
    print(f"\nprofile of the engine, {case}: {total} samples of Spark's Python workers at 200 Hz ({out})")
    for call, samples in counts.most_common(top):
        print(f"{samples / total:6.1%}  {call}")


def native_fixed(stream):
    from pyspark.sql import functions as F
    return stream.withWatermark("ts", DELAY).groupBy("key", F.window("ts", "1 minute")).agg(F.sum("amount"))


def native_sessions(stream):
    from pyspark.sql import functions as F
    return stream.withWatermark("ts", DELAY).groupBy("key", F.session_window("ts", "5 minutes")).agg(F.sum("amount"))


def engine_fixed(stream, package: str = "windowing"):
    from accumulations import Sum
    windowed = importlib.import_module(package).windowed
    return windowed(stream, time="ts", key="key").fixed("1 minute").watermark(DELAY).aggregate(Sum("amount"))


def engine_sessions(stream, package: str = "windowing"):
    from accumulations import Sum
    windowed = importlib.import_module(package).windowed
    return windowed(stream, time="ts", key="key").sessions("5 minutes").watermark(DELAY).aggregate(Sum("amount"))


ENGINES = {"fixed": engine_fixed, "sessions": engine_sessions}  # the engine's query of each window shape


def baseline_package(revision: str, work: Path) -> str:
    """The ``windowing/`` package of git revision ``revision`` as a package named ``windowing_at_<commit>``,
    importable here and by Spark's Python workers (on ``PYTHONPATH``, so set before the session starts).
    Its own imports must be relative (an absolute ``windowing`` import would run this checkout's code under
    the baseline's name: refused); ``triggers`` and ``accumulations`` are this checkout's. ValueError names a
    revision git does not know or that has no such package."""
    root = Path(__file__).resolve().parents[1]
    found = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "--verify", f"{revision}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode:
        raise ValueError(f"--baseline {revision!r}: git knows no such commit here ({found.stderr.strip()})")
    commit = found.stdout.strip()
    name, packages = f"windowing_at_{commit}", work / "baselines"
    if not (packages / name).exists():
        archive = subprocess.run(["git", "-C", str(root), "archive", commit, "windowing"], capture_output=True)
        if archive.returncode:
            raise ValueError(f"--baseline {revision!r}: commit {commit} has no windowing/ package to run")
        unpacked = packages / f"{name}.tmp"
        shutil.rmtree(unpacked, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(unpacked, filter="data")
        absolute = absolute_imports(unpacked)
        if absolute:
            shutil.rmtree(unpacked)
            raise ValueError(f"--baseline {revision!r}: {', '.join(absolute)} import windowing by name, which would "
                             "run this checkout's code under the baseline's name")
        (unpacked / "windowing").rename(packages / name)
        unpacked.rmdir()
    sys.path.insert(0, str(packages))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(packages), os.environ.get("PYTHONPATH")]))
    return name


def absolute_imports(directory: Path) -> list[str]:
    """The Python files under ``directory`` that import ``windowing`` by name."""
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*.py")
                  if re.search(r"^\s*(from|import) windowing\b", path.read_text(), re.MULTILINE))


def engine_at(package: str):
    """``--baseline``'s side: the engine of ``package`` (`baseline_package`) on the same query."""
    def of_shape(shape: str):
        engine = ENGINES[shape]
        return lambda stream: engine(stream, package)
    return of_shape


def _floor_labels(stream) -> np.ndarray:
    from windowing.runners.spark.buckets import bucketing_of

    return bucketing_of(stream, keyed=True).labels()  # the engine's buckets


def _default_buckets(spark) -> int:
    from windowing.runners.spark.buckets import bucketing_of

    return bucketing_of(spark.range(1), keyed=True).count


def _quick_ack(stream) -> bool:
    """Whether the runner's workers would acknowledge what the JVM sends at once (``windowing.spark.quickAck``), which
    the floors then do too: they are what a runner of that shape pays, and their workers are the engine's anyway."""
    from windowing.runners.spark.query import QUICK_ACK_CONF

    return str(stream.sparkSession.conf.get(QUICK_ACK_CONF, "true")).lower() == "true"


def _acknowledge(quick: bool) -> None:
    if quick:
        from storage.worker_socket import acknowledge_arrivals_at_once

        acknowledge_arrivals_at_once()


def _counting_rows(quick: bool):
    """The floors' stateful function: adds up a bucket's rows."""
    def count_rows(key, frames, state):
        _acknowledge(quick)
        yield pd.DataFrame({"bucket": [key[0]], "n": [sum(int(frame["n"].sum()) for frame in frames)]})
    return count_rows


def floor_folded(stream, timeout: str = "EventTimeTimeout"):
    """The least a runner of the engine's shape pays on ``applyInPandasWithState``, doing no windowing: every row
    crosses into Python once (a ``mapInArrow`` folding each partition's rows to one row per bucket, in Arrow),
    a shuffle, and one call per bucket (the engine's buckets) that adds up its rows."""
    return (_folded_to_buckets(stream).withWatermark("ts", DELAY).groupBy("bucket")
            .applyInPandasWithState(_counting_rows(_quick_ack(stream)), "bucket int, n long", "n long", "append",
                                    timeout))


def floor_no_timeout(stream):
    """``floor_folded`` without the event-time timeout: what Spark's pass over the timed-out keys costs. With a
    timeout, every stateful task starts a second exchange with a Python worker after the rows', even when no key
    has timed out (pyspark 4.3's ``FlatMapGroupsInPandasWithStateExec.processTimedOutState``). No runner can do
    without it: without a timeout a bucket is called only in micro-batches that bring it rows, so a window would
    not fire when the watermark passes it, nor at all after the last input."""
    return floor_folded(stream, "NoTimeout")


def _folded_to_buckets(stream):
    """The floors' fold before the shuffle: a ``mapInArrow`` turning each Arrow batch's rows into one row per bucket
    (its latest event time and its number of rows), in Arrow."""
    import pyarrow as pa

    labels, quick = _floor_labels(stream), _quick_ack(stream)

    def fold(batches):
        _acknowledge(quick)
        for batch in batches:
            bucket = labels[np.mod(batch.column("key").to_numpy(), len(labels))]
            folded = pa.table({"bucket": bucket, "ts": batch.column("ts")}).group_by("bucket").aggregate(
                [("ts", "max"), ("ts", "count")])
            yield from folded.rename_columns(["bucket", "ts", "n"]).to_batches()

    return stream.mapInArrow(fold, "bucket int, ts timestamp, n long")


def floor_unfolded(stream):
    """The same with no Python before the shuffle: the bucket computed in the JVM, every row shuffled as it is
    and crossing into Python in the stateful call (fewer Python tasks, more rows through the shuffle)."""
    from pyspark.sql import functions as F

    return (stream.withWatermark("ts", DELAY).select(_jvm_bucket(stream).alias("bucket"), "ts", F.lit(1).cast("long").alias("n"))
            .groupBy("bucket")
            .applyInPandasWithState(_counting_rows(_quick_ack(stream)), "bucket int, n long", "n long", "append", "EventTimeTimeout"))


def _jvm_bucket(stream):
    """The floors' bucket of a row's ``key``, computed by Spark."""
    from pyspark.sql import functions as F

    labels = _floor_labels(stream)
    return F.element_at(F.array(*[F.lit(int(label)) for label in labels]), (F.pmod("key", F.lit(len(labels))) + 1).cast("int"))


FLOORS = {"floor folded": floor_folded, "floor unfolded": floor_unfolded}

STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def floor_transform_with_state(stream):
    """``floor_folded`` on PySpark 4's other stateful API, ``transformWithStateInPandas``: the same fold before the
    shuffle, then one call per bucket that adds up its rows into a value state and sets an event-time timer (a
    runner's next due window), which fires in a later micro-batch and does nothing. That API runs only on the
    RocksDB state store, so this side's queries start with it (`SIDE_SETTINGS`)."""
    from pyspark.sql.streaming import StatefulProcessor

    quick = _quick_ack(stream)

    class CountingProcessor(StatefulProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.count = handle.getValueState("n", "n long")

        def handleInputRows(self, key, rows, timerValues):
            _acknowledge(quick)
            n = sum(int(frame["n"].sum()) for frame in rows)
            before = self.count.get()
            self.count.update((n + (before[0] if before else 0),))
            self.handle.registerTimer(max(timerValues.getCurrentWatermarkInMs(), 0) + MINUTE_S * 1000)
            yield pd.DataFrame({"bucket": [key[0]], "n": [n]})

        def close(self) -> None:
            pass

    return (_folded_to_buckets(stream).withWatermark("ts", DELAY).groupBy("bucket")
            .transformWithStateInPandas(CountingProcessor(), "bucket int, n long", "append", "EventTime"))


# Settings a side's queries start with, the session's own restored after (`side_settings`).
SIDE_SETTINGS = {"floor transformWithState": {STATE_STORE_PROVIDER: ROCKSDB_PROVIDER}}


@contextlib.contextmanager
def side_settings(spark, settings: dict[str, str]):
    """The session with a side's ``settings`` (`SIDE_SETTINGS`, ``--engine-conf``) while its query runs."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _counting_frame(quick: bool):
    """The foreachBatch shape's function: counts a bucket's rows."""
    def count_frame(frame: pd.DataFrame) -> pd.DataFrame:
        _acknowledge(quick)
        return pd.DataFrame({"bucket": [frame["bucket"].iloc[0]], "n": [len(frame)]})
    return count_frame


def foreach_batch_shape(shape: str):
    """Another shape than the engine's, for comparison (``--foreach-batch``): each micro-batch as a batch DataFrame
    in ``foreachBatch``, handed to Python as a runner of that shape would hand it, and nothing done with it. Fixed
    windows: Spark's own partial aggregation per (bucket, key, window start) (no ``mapInArrow``), then one
    ``applyInPandas`` call per bucket counting the folded rows; sessions: every row to that call. No state is kept
    (a runner would keep its windows and watermark itself, in files: ``foreachBatch`` has no state store), no
    watermark and no late rows: a floor of that shape, not a runner. Its result is no DataFrame a user could
    write to any sink, which ``windowed(...)`` on a streaming DataFrame returns (``api.md``)."""
    def build(stream):
        from pyspark.sql import functions as F

        bucket, count = _jvm_bucket(stream), _counting_frame(_quick_ack(stream))

        def each_batch(batch, batch_id):
            rows = batch.select(bucket.alias("bucket"), "key", "ts", "amount")
            if shape == "fixed":
                # The window's start, not the window: a struct column reaches pandas as a column of dicts, slowly.
                start = F.window("ts", "1 minute").start.alias("start")
                rows = rows.groupBy("bucket", "key", start).agg(F.sum("amount"), F.max("ts"))
            rows.groupBy("bucket").applyInPandas(count, "bucket int, n long").write.format("noop").mode("overwrite").save()

        return stream.writeStream.foreachBatch(each_batch)
    return build


def floor_packed(shape: str):
    """The engine's own query, lifted and packed as the runner does it (`windowing.runners.spark.combine`), with a
    stateful call that takes in its bucket's rows and does nothing with them (``--floor-packed``): no element
    frame, no step, no state, no timeout set. For sessions, which no exact fold can lift, this is the least an
    exact runner of the engine's shape on ``applyInPandasWithState`` pays: every element crosses into Python before
    the shuffle and again after it, where `floor_folded` ships one row per bucket."""
    import dataclasses
    from unittest import mock

    from windowing.runners.spark import query
    from windowing.runners.spark.worker import BucketStep

    engine, plan_spark = ENGINES[shape], query.plan_spark

    class DiscardingStep(BucketStep):
        def run_stream(self, key, frames, state):
            for _ in frames:  # pyspark turns each packed row's Arrow into pandas as it is taken
                pass
            return iter(())

    def planned(*args, **kwargs):
        plan = plan_spark(*args, **kwargs)
        fields = {field.name: getattr(plan.adapter, field.name) for field in dataclasses.fields(plan.adapter)}
        return dataclasses.replace(plan, adapter=DiscardingStep(**fields))

    def build(stream):
        with mock.patch.object(query, "plan_spark", planned):  # the plan is made when the query is defined
            return engine(stream)
    return build


def engine_state_uncompressed(shape: str):
    """The engine with ``windowing.spark.stateCompression=none`` (``--uncompressed-state``): its buckets' state
    values as plain Arrow, as before they were compressed."""
    from windowing.runners.spark import STATE_COMPRESSION_CONF

    engine = ENGINES[shape]

    def build(stream):
        conf = stream.sparkSession.conf
        given = conf.get(STATE_COMPRESSION_CONF, None)  # a --conf of the run, which the other sides keep
        conf.set(STATE_COMPRESSION_CONF, "none")  # read when the query is defined
        try:
            return engine(stream)
        finally:
            if given is None:
                conf.unset(STATE_COMPRESSION_CONF)
            else:
                conf.set(STATE_COMPRESSION_CONF, given)
    return build


def state_bytes_per_window(data: Path, shape: str, compression: str = "zstd") -> float:
    """Encode the window table of one bucket after the first file (``compression``): bytes per open window."""
    from pyspark.sql import types as T

    from accumulations import Sum
    from windowing import windowed
    from windowing.engine import step
    from windowing.runners.spark import plan_spark
    from windowing.state_codec import encode
    from windowing.timeaxis import MIN_TIME

    frame = pd.read_parquet(sorted(data.glob("*.parquet"))[0])
    # Not nullable, as the data has no nulls: the frame below is shipped without null flags.
    schema = T.StructType([T.StructField("key", T.LongType(), False), T.StructField("ts", T.TimestampType(), False),
                           T.StructField("amount", T.LongType(), False)])
    w = windowed(frame, time="ts", key="key")
    w = w.fixed("1 minute") if shape == "fixed" else w.sessions("5 minutes")
    adapter = plan_spark(w.strategy(value=Sum("amount")), schema, 1, combine=False).adapter
    micros = frame["ts"].astype("datetime64[us]").to_numpy().view(np.int64)
    elements = adapter.elements([pd.DataFrame({"_k0": frame["key"], "_t": micros, "_v0": frame["amount"]})])
    table = step(adapter.plan.spec, adapter.fresh_state(), elements, MIN_TIME, 0).state
    return len(encode(table, 1, compression=compression)) / max(1, len(table))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="rounds run first and not counted (default 1): the session's first query of each shape "
                             "pays the JVM's warm-up, which fell on whichever side ran first")
    parser.add_argument("--buckets", type=int, default=None, help="windowing.spark.buckets (default: unset)")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--windows", nargs="+", choices=["fixed", "sessions"], default=["fixed", "sessions"],
                        help="the window shapes to run (default: both)")
    parser.add_argument("--files-per-batch", type=int, default=1,
                        help="files per micro-batch, each its own input partition (default 1: the micro-batch in one task)")
    parser.add_argument("--latency-events", type=int, default=1000)
    parser.add_argument("--latency-batches", type=int, default=11)
    parser.add_argument("--floor", action="store_true",
                        help="also run the FLOORS beside native and the engine: what a Python runner pays doing nothing")
    parser.add_argument("--floor-transform-with-state", action="store_true",
                        help="also run floor_transform_with_state: the folded floor on transformWithStateInPandas "
                             "(its queries on the RocksDB state store)")
    parser.add_argument("--floor-packed", action="store_true",
                        help="also run floor_packed: the engine's query, lifted and packed, with a stateful call that "
                             "does nothing with its rows (the least an exact runner of sessions pays on this API)")
    parser.add_argument("--floor-no-timeout", action="store_true",
                        help="also run floor_no_timeout: the folded floor without the event-time timeout, whose "
                             "pass over the timed-out keys costs every stateful task a second exchange with Python")
    parser.add_argument("--foreach-batch", action="store_true",
                        help="also run foreach_batch_shape: the same data through foreachBatch, doing nothing")
    parser.add_argument("--foreach-batch-runner", action="store_true",
                        help="also run foreach_batch_runner: a sketch of a foreachBatch runner doing the windowing")
    parser.add_argument("--uncompressed-state", action="store_true",
                        help="also run engine_state_uncompressed: the engine with windowing.spark.stateCompression=none")
    parser.add_argument("--engine-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="also run the engine with these session settings while its queries start (repeatable: "
                             "one side with all of them), beside the engine without: a setting's effect within one run")
    parser.add_argument("--baseline", metavar="REV", default=None,
                        help="also run the engine of git revision REV (its windowing/ package) beside this checkout's")
    parser.add_argument("--work", type=Path, default=Path("/tmp/spark_bench"))
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="after the timed rounds, run the engine once more per case with py-spy on Spark's Python "
                             "workers (warm: their imports done), collapsed stacks into DIR, and print where they spent it")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the benchmark's session (repeatable), e.g. "
                             "spark.python.unix.domain.socket.enabled=true")
    args = parser.parse_args()
    if args.warmup_rounds < 0:
        parser.error(f"--warmup-rounds {args.warmup_rounds}: give 0 or more")
    for name, value in (("--events", args.events), ("--rounds", args.rounds),
                        ("--shuffle-partitions", args.shuffle_partitions),
                        ("--files-per-batch", args.files_per_batch), *(("--keys", k) for k in args.keys)):
        if value < 1:
            parser.error(f"{name} {value}: give at least 1")
    if args.batches < 2:  # the first micro-batch of each query plans it: the per-micro-batch figures leave it out
        parser.error(f"--batches {args.batches}: give at least 2 (the first micro-batch plans the query and is left "
                     "out of the per-micro-batch figures)")
    if args.latency_batches < 2:  # numpy's array_split failed on 0, and one batch left no batch to time
        parser.error(f"--latency-batches {args.latency_batches}: give at least 2 (the first micro-batch plans the "
                     "query and is not timed)")
    if args.latency_events < 1:
        parser.error(f"--latency-events {args.latency_events}: give at least 1")

    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        baseline = baseline_package(args.baseline, args.work) if args.baseline else None  # before the workers start
    except ValueError as err:
        parser.error(str(err))
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("spark_bench")
               .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "3g"))
    try:
        builder_settings, session_settings = split_settings(args.conf)
        engine_conf = parsed_settings(args.engine_conf, "--engine-conf")
    except ValueError as err:
        parser.error(str(err))
    for key, value in builder_settings.items():
        builder = builder.config(key, value)
    if args.buckets is not None:
        session_settings["windowing.spark.buckets"] = str(args.buckets)
    shutil.rmtree(args.work / "chk", ignore_errors=True)  # the checkpoints of an earlier run (`run_query`)
    spark = builder.getOrCreate()
    for key, value in session_settings.items():
        spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("ERROR")

    shapes = [(shape, native, engine) for shape, native, engine in
              (("fixed", native_fixed, engine_fixed), ("sessions", native_sessions, engine_sessions)) if shape in args.windows]
    cases = [(keys, shape, native, engine) for keys in args.keys for shape, native, engine in shapes]
    runs: dict[tuple, list] = {}
    extra_sides = [(side, lambda shape, build=build: build) for side, build in FLOORS.items()] if args.floor else []
    extra_sides += [("floor transformWithState", lambda shape: floor_transform_with_state)] if args.floor_transform_with_state else []
    extra_sides += [("floor no timeout", lambda shape: floor_no_timeout)] if args.floor_no_timeout else []
    extra_sides += [("floor packed", floor_packed)] if args.floor_packed else []
    extra_sides += [("foreachBatch shape", foreach_batch_shape)] if args.foreach_batch else []
    extra_sides += [("foreachBatch runner sketch", lambda shape: foreach_batch_runner(shape, DELAY))] if args.foreach_batch_runner else []
    extra_sides += [("engine, state uncompressed", engine_state_uncompressed)] if args.uncompressed_state else []
    extra_sides += [(f"engine at {args.baseline}", engine_at(baseline))] if baseline else []
    settings_of = dict(SIDE_SETTINGS)
    held: dict[str, dict[str, str | None]] = {}  # each side's settings as the session held them while its query ran
    if engine_conf:
        engine_side = "engine, " + ", ".join(f"{key}={value}" for key, value in engine_conf.items())
        extra_sides.append((engine_side, ENGINES.__getitem__))
        settings_of[engine_side] = engine_conf

    def sides_of(shape: str, native, engine) -> list[tuple]:
        return [("native", native), ("engine", engine)] + [(side, of_shape(shape)) for side, of_shape in extra_sides]

    def case_data(keys: int, shape: str) -> Path:
        """The case's data: ``--batches`` micro-batches of ``--files-per-batch`` files each."""
        return make_data(args.work, args.events, keys, args.batches * args.files_per_batch, shape == "sessions")

    for round_, name, counted in planned_rounds(args.warmup_rounds, args.rounds):
        kept = runs if counted else {}  # a warm-up round's figures are thrown away
        for keys, shape, native, engine in cases:
            data = case_data(keys, shape)
            sides = sides_of(shape, native, engine)
            for side, build in sides if round_ % 2 == 0 else sides[::-1]:
                with side_settings(spark, settings_of.get(side, {})):
                    run = run_query(spark, data, build, args.work / "chk", args.files_per_batch)
                    held[side] = {key: spark.conf.get(key, None) for key in settings_of.get(side, {})}
                if len(run[3]) != args.batches:  # every figure per micro-batch assumes the micro-batches asked for
                    raise SystemExit(f"{side}, {keys} keys, {shape}: {len(run[3])} micro-batches read rows, "
                                     f"{args.batches} of {args.files_per_batch} file(s) each expected")
                kept.setdefault((keys, shape, side), []).append(run)
            print(f"{name}: {keys} keys, {shape}: native {kept[keys, shape, 'native'][-1][0]:.1f} s, "
                  f"engine {kept[keys, shape, 'engine'][-1][0]:.1f} s", flush=True)
        for shape, native, engine in shapes:
            data = make_data(args.work, args.latency_events * args.latency_batches, args.latency_events,
                             args.latency_batches, shape == "sessions")
            for side, build in sides_of(shape, native, engine):
                with side_settings(spark, settings_of.get(side, {})):
                    batches = run_query(spark, data, build, args.work / "chk")[3][1:]  # the first batch plans the query
                kept.setdefault(("latency", shape, side), []).extend(b["triggerExecution"] for b in batches)

    if args.profile:
        for keys, shape, _, engine in cases:
            print_profile(spark, case_data(keys, shape), engine,
                          args.work / "chk", args.profile / f"{shape}-{keys}.txt", f"{keys} keys, {shape}",
                          args.files_per_batch)

    def median(values: list[float]) -> float:
        return float(np.median(values))

    def per_batch(queries: list[tuple]) -> str:
        """Median milliseconds of a micro-batch (the first of each query, which plans it, left out) and, in
        brackets, of its Spark jobs (``addBatch``)."""
        batches = [b for query in queries for b in query[3][1:]]
        return f"{median([b['triggerExecution'] for b in batches]):.0f} ({median([b['addBatch'] for b in batches]):.0f})"

    rows = []
    for keys, shape, _, _ in cases:
        n, e = runs[keys, shape, "native"], runs[keys, shape, "engine"]
        n_s, e_s = median([r[0] for r in n]), median([r[0] for r in e])
        rows.append({"keys": keys, "windows": shape, "native ev/s": round(args.events / n_s),
                     "engine ev/s": round(args.events / e_s), "engine/native": round(n_s / e_s, 2),
                     "native JVM cpu s": round(median([r[1] for r in n]), 1),
                     "engine JVM cpu s": round(median([r[1] for r in e]), 1),
                     "engine Python cpu s": round(median([r[2] for r in e]), 1),
                     "native ms/batch (jobs)": per_batch(n), "engine ms/batch (jobs)": per_batch(e),
                     **{f"{side}/native": round(n_s / median([r[0] for r in runs[keys, shape, side]]), 2) for side, _ in extra_sides},
                     **{f"{side} JVM+Python cpu s": round(median([r[1] + r[2] for r in runs[keys, shape, side]]), 1)
                        for side, _ in extra_sides},
                     **{f"{side} ms/batch (jobs)": per_batch(runs[keys, shape, side]) for side, _ in extra_sides},
                     **{f"state B/window{'' if c == 'zstd' else ', uncompressed'}": round(state_bytes_per_window(
                         case_data(keys, shape), shape, c))
                        for c in ("zstd", "none")[:1 + args.uncompressed_state]}})
    latency = [{"windows": shape, "native ms": round(median(runs["latency", shape, "native"])),
                "engine ms": round(median(runs["latency", shape, "engine"])),
                "engine/native": round(median(runs["latency", shape, "engine"]) / median(runs["latency", shape, "native"]), 2),
                **{f"{side}/native": round(median(runs["latency", shape, side]) / median(runs["latency", shape, "native"]), 2)
                   for side, _ in extra_sides}}
               for shape in args.windows]
    compared = ["engine", *(side for side, _ in extra_sides)]
    rounds = [{"keys": keys, "windows": shape, "side": side, "/native, round by round": round_by_round(
                   [r[0] for r in runs[keys, shape, "native"]], [r[0] for r in runs[keys, shape, side]])}
              for keys, shape, _, _ in cases for side in compared]
    rounds += [{"keys": args.latency_events, "windows": f"{shape}, latency", "side": side,
                "/native, round by round": round_by_round(runs["latency", shape, side], runs["latency", shape, "native"],
                                                         args.latency_batches - 1)}
               for shape in args.windows for side in compared]
    # The settings as the session holds them (read back: the runner reads them there).
    buckets = spark.conf.get("windowing.spark.buckets", None) or f"{_default_buckets(spark)} (default)"
    settings = [setting.partition("=")[0] for setting in args.conf]
    print()
    print(f"{args.events} events, {args.batches} micro-batches of {args.files_per_batch} file(s), local[2], "
          f"{args.shuffle_partitions} shuffle partitions, "
          f"{buckets} buckets, medians of {args.rounds} interleaved rounds after {args.warmup_rounds} not counted"
          + "".join(f", {key}={spark.conf.get(key, None)}" for key in settings))
    for side, side_held in held.items():
        if side_held:
            print(f"{side}: its queries ran with " + ", ".join(f"{key}={value}" for key, value in side_held.items()))
    print(table(rows))
    print()
    print(f"latency of a micro-batch of {args.latency_events} events on {args.latency_events} keys "
          f"(median triggerExecution over {args.rounds} x {args.latency_batches - 1} batches)")
    print(table(latency))
    print()
    print("each side against native in each round (throughput: native's time over the side's; latency: the side's "
          "median over native's)")
    print(table(rounds))
    spark.stop()
    shutil.rmtree(args.work / "chk", ignore_errors=True)


def planned_rounds(warmup_rounds: int, rounds: int) -> list[tuple[int, str, bool]]:
    """Each round's number (the warm-up rounds' negative, so the sides' order still alternates), its name as
    printed, and whether its figures count: the ``warmup_rounds`` come first and do not, as the session's first
    query of a shape pays the JVM's warm-up."""
    return [(round_, f"round {round_ + 1}" if round_ >= 0 else "warm-up round", round_ >= 0)
            for round_ in range(-warmup_rounds, rounds)]


def round_by_round(numerator: list[float], denominator: list[float], per_round: int = 1) -> str:
    """The ratio of two sides' medians in each round, ``per_round`` figures of each side a round, as text.

    Each round runs every side once, one after the other, so a round's ratio compares queries that ran minutes
    apart, while the medians over rounds above pair sides that ran up to the whole run apart: the spread of
    these ratios is the drift within the run, the margin by which a target is met or missed in it."""
    if len(numerator) != len(denominator) or len(numerator) % per_round:
        raise ValueError(f"{len(numerator)} and {len(denominator)} figures: not rounds of {per_round} each")
    return " ".join(f"{np.median(numerator[i:i + per_round]) / np.median(denominator[i:i + per_round]):.2f}"
                    for i in range(0, len(numerator), per_round))


def table(rows: list[dict]) -> str:
    """``rows`` as a Markdown table (where ``tabulate`` is installed) or as pandas prints a frame."""
    frame = pd.DataFrame(rows)
    return frame.to_markdown(index=False) if _has_tabulate() else frame.to_string(index=False)


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    main()
