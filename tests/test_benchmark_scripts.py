"""The benchmark scripts that need no Spark run to the end on tiny inputs and print their tables.

Nothing else runs the scripts in ``benchmarks/``, and they rot silently as the code under them
moves: ``step_bench.py`` fed the Spark runner's worker frames without the null flags it came to
expect, and wrote state that its own ``load`` refused. Each script runs here as a user runs it: a
fresh interpreter (this one), from the repository root, the checkout first on ``PYTHONPATH``, its
temporary files in the test's directory. The figures are not checked, only that the script ends
cleanly and prints what its readers look for. Scripts that start a SparkSession (`SPARK_RUNS`) run
the same way on inputs a JVM gets through in seconds: each starts its own, about 4.5 minutes for
all of them on 2 cores. `NOT_RUN` names the files that are no script, or need profilers the test
venv lacks.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

RUNS = {
    # script: (tiny arguments, a pattern its output holds)
    "engine_cpu.py": ([str(ROOT), "sessions", "--events", "10000", "--keys", "100"], r"(?m)^\d+\.\d{3}$"),
    "engine_pandas.py": (["--events", "10000", "--keys", "100"],
                         r"\| keys \| case \| events/s \| time vs groupby \| peak MiB \|(.|\n)*\| 100 \| fixed-stream-10-steps \|"),
    "file_sink_bench.py": (["--fs-calls"], r"\| format \| buckets \| batches \| parts \| calls \| by method \|"),
    "file_sink_read.py": (["--rows", "1000", "--repeat", "1"],
                          r"\| jsonl \| [\d.]+ \| [\d.]+ \| [\d.]+ \|(.|\n)*microseconds a write call"),
    # rocksdict comes with the optional `bench` extra, which the test venv does not install.
    "kv_bench.py": (["--keys", "1000", "--batch", "100", "--engines", "kv,kv-arrow,sqlite"],
                    r"\| keys \| engine \| batched puts \|(.|\n)*\| monotonic \| sqlite3 \(WAL\) \|"),
    "kv_call_overhead.py": (["--keys", "10000", "--repeat", "1"],
                            r"\| keys per call \| get_many \(list\) \|(.|\n)*\| per key \(slope 1k to 10k\) \|"),
    "packed_output_memory.py": (["--panes", "1000"], r"1,000 panes: the frame \d+ bytes a pane, packed"),
    "splitter_newline_search.py": (["--repeat", "1"], r"\| numpy flatnonzero \(used\) \| [\d.]+ ms \|"),
    "splitter_compressed.py": (["--lines", "2000", "--streams", "1,3", "--repeat", "1"],
                               r"\| uncompressed \| - \|(.|\n)*\| \.zst \| 3 \| [\d.]+ \| [\d.]+ \| \d+ \|"),
    "splitter_drain.py": (["--files", "200,400"],
                          r"\| 200 \| 16 \| 13 \| [\d.]+ \| [\d.]+ \|\n\| 400 \| 16 \| 25 \| [\d.]+ \| [\d.]+ \|"),
    "state_codec_threads.py": (["--repeats", "1"],
                               r"the codec's thresholds: 4,096 rows to encode, 81,920 bytes to decode on the pool(.|\n)*"
                               r"\| 31 \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| no, no \|(.|\n)*"
                               r"\| 100,000 \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| yes, yes \|"),
    "step_bench.py": (["--steps", "1"],
                      r"\| keys in the bucket \| elements per call \|(.|\n)*\| 3,125 \| 15,600 \| [\d.]+ \| [\d.]+ \| 3,125 \|"),
    "window_state_build_memory.py": (["--sessions", "1000", "--per-batch", "100"],
                                     r"micro-batch 0: resident \d+ MiB(.|\n)*CPU [\d.]+ s in all micro-batches"),
    "window_state_spill.py": (["--sessions", "1000", "--batches", "1"],
                              r"backend +micro-batch s(.|\n)* memory (.|\n)* store "),
}

# Scripts that start their own local Spark: (tiny arguments, the work directory's option or None, a pattern their
# output holds). Each costs a JVM start and its queries, tens of seconds.
SPARK_RUNS = {
    # No warm-up round here, the longest of these runs (every side runs once): `planned_rounds` is checked below,
    # and spark_stages.py's run, which uses it too, has one.
    "spark_bench.py": (["--events", "4000", "--keys", "20", "--rounds", "1", "--warmup-rounds", "0", "--batches", "2",
                        "--latency-events", "10",
                        "--latency-batches", "2", "--files-per-batch", "2", "--floor", "--floor-transform-with-state",
                        "--floor-no-timeout", "--floor-packed", "--foreach-batch", "--foreach-batch-runner",
                        "--baseline", "HEAD", "--conf", "windowing.spark.quickAck=true",
                        "--engine-conf", "spark.sql.execution.arrow.maxBytesPerBatch=2147483647"], "--work",
                       r"(?m)^round 1: 20 keys, fixed(.|\n)*"
                       r"2 micro-batches of 2 file\(s\).*rounds after 0 not counted, windowing.spark.quickAck=true$(.|\n)*"
                       r"^engine, spark.sql.execution.arrow.maxBytesPerBatch=2147483647: its queries ran with "
                       r"spark.sql.execution.arrow.maxBytesPerBatch=2147483647$(.|\n)*"
                       r"floor folded ms/batch \(jobs\) (.|\n)*^ +20 +fixed +\d+ +\d+ +[\d.]+ (.|\n)*"
                       r"^ +20 +sessions +\d+ +\d+ +[\d.]+ (.|\n)*"
                       r"latency of a micro-batch(.|\n)*floor transformWithState/native(.|\n)*floor no timeout/native"
                       r"(.|\n)*floor packed/native"
                       r"(.|\n)*foreachBatch runner sketch/native"
                       r"(.|\n)*engine at HEAD/native(.|\n)*engine, spark.sql.execution.arrow.maxBytesPerBatch=2147483647/native"
                       r"(.|\n)*round by round(.|\n)*^ +20 +sessions +engine at HEAD +[\d.]+ *$"
                       r"(.|\n)*^ +20 +sessions +engine, spark.sql.execution.arrow.maxBytesPerBatch=2147483647 +[\d.]+ *$"
                       r"(.|\n)*^ +10 +fixed, latency +floor folded +[\d.]+ *$"),
    "spark_stages.py": (["--events", "4000", "--keys", "20", "--rounds", "1", "--batches", "3", "--crossings", "1",
                         "--baseline", "HEAD", "--floor-no-timeout", "--floor-packed", "--conf", "windowing.spark.quickAck=true"],
                        "--work",
                        r"(?m)^warm-up round done\n^round 1 done(.|\n)*interleaved rounds after 1 not counted, "
                        r"windowing.spark.quickAck=true\n"
                        r"(.|\n)*^\W*native\W+\d+\W+\d+\W+\d+\W+\d+\W+\d+\W+\d+(.|\n)*^\W*floor folded\W+\d+(.|\n)*"
                        r"^\W*floor no timeout\W+\d+(.|\n)*^\W*floor packed\W+\d+(.|\n)*"
                        r"^\W*engine\W+\d+(.|\n)*^\W*engine at HEAD\W+\d+\W+\d+\W+\d+\W+\d+\W+\d+\W+\d+(.|\n)*"
                        r"^the stateful tasks by Spark's own metrics(.|\n)*^ *native +\d+ +\d+ +\d+ +- *$(.|\n)*"
                        r"^ *floor no timeout +\d+ +\d+ +\d+ +\d+ *$(.|\n)*^ *floor packed +\d+ +\d+ +\d+ +\d+ *$(.|\n)*"
                        r"^ *engine +\d+ +\d+ +\d+ +\d+ *$(.|\n)*"
                        r"\d+ ms in the JVM only, \d+ ms through a mapInArrow returning nothing"),
    "splitter_bench.py": (["--size-gb", "0.011", "--configs", "1:2"], None,
                          r"data: \d+ MiB, 160,000 lines(.|\n)*\| 1 MiB, 2: \d+, \d+ \| splitter, all 4 columns \| [\d.]+ \|"),
    "splitter_start_cost.py": (["--repeat", "1"], None,
                               r"with the accumulator: [\d.]+ s, Python [\d.]+ cpu s; without: [\d.]+ s"),
    "window_state_spark.py": (["--sessions", "100", "--batches", "1", "--warmup", "0", "--build-rows", "1000"], "--work",
                              r"(?m)^ +100 +1 +memory +[\d.]+ (.|\n)*^ +100 +1 +store +[\d.]+ "),
    "query_definition.py": (["--buckets", "2", "20", "--repeat", "1"], None,
                            r"\| buckets \| define s \|(.|\n)*\| 20 \| [\d.]+ \| [\d.]+ \| [\d.]+ \|"),
    "file_sink_bench.py": (["--rows", "2000", "--files", "2", "--rounds", "1"], None,
                           r"\| json \| FileSink \| [\d,]+ \|(.|\n)*\| parquet \| FileSink \(foreachBatch\) \| [\d,]+ \|"),
}

NOT_RUN = {
    # Java Flight Recorder and py-spy over a splitter query: py-spy comes with the optional `bench` extra only.
    "splitter_profile.py",
    # Helpers the Spark benchmarks import (the JVM's CPU time, py-spy over the workers): no script of their own.
    "spark_cpu.py", "worker_profile.py",
    # spark_bench.py's --foreach-batch-runner side; its panes are checked against the engine's below.
    "foreach_batch_runner.py",
}


def _run(script: str, args: list[str], tmp_path: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_every_script_is_run_here_or_named_as_not_run() -> None:
    """A new benchmark gets a row in `RUNS` or `SPARK_RUNS`, or is named in `NOT_RUN` with the reason."""
    scripts = {path.name for path in BENCHMARKS.glob("*.py")}
    assert scripts == set(RUNS) | set(SPARK_RUNS) | NOT_RUN


@pytest.mark.parametrize(("script", "args", "printed"), [(s, a, p) for s, (a, p) in RUNS.items()], ids=list(RUNS))
def test_script_runs_and_prints_its_table(script: str, args: list[str], printed: str, tmp_path: Path) -> None:
    done = _run(script, args, tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(printed, done.stdout), done.stdout


@pytest.mark.parametrize(("script", "args", "work", "printed"), [(s, *row) for s, row in SPARK_RUNS.items()],
                         ids=list(SPARK_RUNS))
def test_spark_script_runs_and_prints_its_table(script: str, args: list[str], work: str | None, printed: str,
                                                tmp_path: Path) -> None:
    done = _run(script, args + ([work, str(tmp_path / "work")] if work else []), tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-5000:]
    assert re.search(printed, done.stdout), done.stdout
    # The runner's settings go to the session, not the builder, whose launcher would warn it ignores them.
    assert "Ignoring non-Spark config property" not in done.stderr


def test_step_bench_times_a_baseline_side_by_side_and_refuses_no_repeat(tmp_path: Path) -> None:
    """``--baseline``: a row per side and shape, each side's open windows as this checkout's (the same calls)."""
    done = _run("step_bench.py", ["--steps", "1", "--baseline", "HEAD", "--repeats", "2", "--work", str(tmp_path / "work")],
                tmp_path)
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"(?m)^\| (this checkout|at HEAD) \| ([\d,]+) \| ([\d,]+) \| [\d.]+ \| [\d.]+ \| ([\d,]+) \|$", done.stdout)
    assert [(side, keys, elements) for side, keys, elements, _ in rows] == [
        (side, keys, elements) for keys, elements in (("31", "500"), ("31", "15,600"), ("3,125", "15,600"))
        for side in ("this checkout", "at HEAD")], done.stdout
    assert rows[0][3] == rows[1][3] and rows[4][3] == rows[5][3] == "3,125"
    refused = _run("step_bench.py", ["--repeats", "0"], tmp_path)
    assert refused.returncode == 2 and "--repeats must be at least 1, not 0" in refused.stderr


def test_state_codec_threads_refuses_no_repeat(tmp_path: Path) -> None:
    refused = _run("state_codec_threads.py", ["--repeats", "0"], tmp_path)
    assert refused.returncode == 2 and "--repeats must be at least 1, not 0" in refused.stderr


@pytest.mark.parametrize("script", ["splitter_bench.py", "splitter_profile.py"])
def test_splitter_scripts_refuse_a_size_that_writes_no_line(script: str, tmp_path: Path) -> None:
    """Refused before Spark starts, so splitter_profile's check runs here without its profilers."""
    done = _run(script, ["--size-gb", "0.001"], tmp_path)
    assert done.returncode == 2
    assert "--size-gb 0.001 writes no line: each of the 16 files holds whole blocks of 695,000 bytes; give at least 0.0107" \
        in done.stderr


@pytest.mark.parametrize("script", ["spark_bench.py", "spark_stages.py"])
def test_spark_scripts_refuse_a_setting_without_a_value(script: str, tmp_path: Path) -> None:
    done = _run(script, ["--conf", "spark.sql.shuffle.partitions"], tmp_path)
    assert done.returncode == 2
    assert "--conf 'spark.sql.shuffle.partitions': give KEY=VALUE" in done.stderr


def test_spark_bench_gives_spark_s_settings_to_the_builder_and_the_runner_s_to_the_session(monkeypatch) -> None:
    spark_bench = _spark_script(monkeypatch)
    assert spark_bench.split_settings(["spark.a=1", "windowing.spark.quickAck=false", "spark.b=x=y"]) == (
        {"spark.a": "1", "spark.b": "x=y"}, {"windowing.spark.quickAck": "false"})


@pytest.mark.parametrize("script", ["spark_bench.py", "spark_stages.py"])
def test_spark_scripts_refuse_a_negative_warmup(script: str, tmp_path: Path) -> None:
    done = _run(script, ["--warmup-rounds", "-1"], tmp_path)
    assert done.returncode == 2
    assert "--warmup-rounds -1: give 0 or more" in done.stderr


def test_spark_stages_counts_only_the_labelled_jobs_of_the_micro_batches_asked(tmp_path: Path, monkeypatch) -> None:
    """A warm-up round's jobs run unlabelled: left out, as is a micro-batch outside the range."""
    spark_stages = _spark_script(monkeypatch, "spark_stages")

    def job(job_stage: int, batch: int, side: str | None) -> list[dict]:
        properties = {spark_stages.BATCH: str(batch), **({spark_stages.SIDE: side} if side else {})}
        return [{"Event": "SparkListenerJobStart", "Properties": properties,
                 "Stage Infos": [{"Stage ID": job_stage, "Parent IDs": []}]},
                {"Event": "SparkListenerStageCompleted",
                 "Stage Info": {"Stage ID": job_stage, "Submission Time": 0, "Completion Time": 10 * job_stage}},
                {"Event": "SparkListenerTaskEnd", "Stage ID": job_stage,
                 "Task Info": {"Launch Time": 0, "Finish Time": 5 * job_stage},
                 "Task Metrics": {"Executor CPU Time": 1e6 * job_stage}}]

    events = job(1, 1, None) + job(2, 1, "native") + job(3, 0, "native") + job(4, 2, "native")
    (tmp_path / "app").write_text("\n".join(json.dumps(event) for event in events))
    times = spark_stages.stage_times(tmp_path, 1, 2)
    assert list(times) == ["native"]
    assert times["native"]["before shuffle stage"] == [(20,), (40,)]
    assert times["native"]["before shuffle task"] == [(10, 2.0), (20, 4.0)]


def test_spark_stages_reads_spark_s_metrics_of_the_stateful_tasks(tmp_path: Path, monkeypatch) -> None:
    """Each stateful task's update, commit and Python times, as Spark logged them; a side whose tasks lack one
    (native Spark runs no Python) gets "-", not a zero."""
    spark_stages = _spark_script(monkeypatch, "spark_stages")

    def stateful_job(stage: int, side: str, metrics: dict[str, object]) -> list[dict]:
        return [{"Event": "SparkListenerJobStart", "Properties": {spark_stages.BATCH: "1", spark_stages.SIDE: side},
                 "Stage Infos": [{"Stage ID": stage, "Parent IDs": [stage - 1]}]},
                {"Event": "SparkListenerTaskEnd", "Stage ID": stage,
                 "Task Info": {"Launch Time": 0, "Finish Time": 70,
                               "Accumulables": [{"Name": name, "Update": value} for name, value in metrics.items()]
                               + [{"Name": "number of output rows", "Update": 5}]},
                 "Task Metrics": {"Executor CPU Time": 1e7}}]

    events = (stateful_job(2, "native", {"time to update": 14, "time to commit changes": "31"})
              + stateful_job(4, "floor folded", {"time to update": 18, "time to commit changes": 38,
                                                 "time to run Python workers": 15})
              + stateful_job(6, "floor folded", {"time to update": 20, "time to commit changes": 36,
                                                 "time to run Python workers": 17}))
    (tmp_path / "app").write_text("\n".join(json.dumps(event) for event in events))
    times = spark_stages.stage_times(tmp_path, 1, 1)
    assert times["native"]["stateful metrics"] == [(14.0, 31.0, None)]
    assert spark_stages.stateful_row("native", times["native"]["stateful task"], times["native"]["stateful metrics"]) \
        == {"side": "native", "task wall ms": 70, "time to update ms": 14, "time to commit changes ms": 31,
            "time to run Python workers ms": "-"}
    floor = spark_stages.stateful_row("floor folded", times["floor folded"]["stateful task"],
                                      times["floor folded"]["stateful metrics"])
    assert floor["time to update ms"] == 19 and floor["time to run Python workers ms"] == 16


def test_kv_call_overhead_refuses_fewer_keys_than_its_largest_call(tmp_path: Path) -> None:
    done = _run("kv_call_overhead.py", ["--keys", "1000"], tmp_path)
    assert done.returncode == 2
    assert "--keys 1,000 is fewer than the largest call's 10,000 keys" in done.stderr


def test_kv_bench_refuses_an_engine_it_does_not_know(tmp_path: Path) -> None:
    done = _run("kv_bench.py", ["--keys", "100", "--engines", "kv,leveldb"], tmp_path)
    assert done.returncode == 2
    assert "--engines: 'leveldb' is none of kv, kv-arrow, rocksdict, sqlite" in done.stderr


def _spark_script(monkeypatch: pytest.MonkeyPatch, name: str = "spark_bench"):
    """benchmarks/<name>.py as a module (spark_bench.py and spark_stages.py start Spark only in ``main``), the
    path changes of importing it undone after."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    return importlib.import_module(name)


def test_spark_bench_baseline_runs_the_engine_of_a_revision_under_its_own_name(tmp_path: Path, monkeypatch) -> None:
    import pandas as pd

    from accumulations import Sum
    spark_bench = _spark_script(monkeypatch)
    name = spark_bench.baseline_package("HEAD", tmp_path)  # any commit; HEAD is in a shallow clone too
    assert name.startswith("windowing_at_") and str(tmp_path / "baselines") in os.environ["PYTHONPATH"].split(os.pathsep)
    baseline = importlib.import_module(name)
    assert Path(baseline.__file__).parent == tmp_path / "baselines" / name
    frame = pd.DataFrame({"k": [1, 1, 2], "t": [1, 2, 15], "x": [3, 4, 5]})
    panes = baseline.windowed(frame, time="t", key="k").fixed(10).aggregate(Sum("x"))
    assert list(zip(panes["k"], panes["window_start"], panes["value"])) == [(1, 0, 7), (2, 10, 5)]


def test_spark_bench_runs_the_warm_up_rounds_first_and_does_not_count_them(monkeypatch) -> None:
    spark_bench = _spark_script(monkeypatch)
    assert spark_bench.planned_rounds(1, 2) == [(-1, "warm-up round", False), (0, "round 1", True),
                                                (1, "round 2", True)]
    assert spark_bench.planned_rounds(0, 1) == [(0, "round 1", True)]


def test_spark_bench_pairs_the_sides_round_by_round(monkeypatch) -> None:
    spark_bench = _spark_script(monkeypatch)
    assert spark_bench.round_by_round([2.0, 3.0], [1.0, 4.0]) == "2.00 0.75"
    # latency: two timed micro-batches a round, each round's medians compared
    assert spark_bench.round_by_round([10, 30, 5, 5], [10, 10, 20, 40], per_round=2) == "2.00 0.17"
    with pytest.raises(ValueError, match="3 and 4 figures: not rounds of 2 each"):
        spark_bench.round_by_round([1, 2, 3], [1, 2, 3, 4], per_round=2)


def test_spark_bench_refuses_a_baseline_git_does_not_know(tmp_path: Path, monkeypatch) -> None:
    spark_bench = _spark_script(monkeypatch)
    with pytest.raises(ValueError, match=r"--baseline 'no-such-revision': git knows no such commit here"):
        spark_bench.baseline_package("no-such-revision", tmp_path)


def test_spark_bench_finds_a_baseline_that_imports_windowing_by_name(tmp_path: Path, monkeypatch) -> None:
    """Such a package would run this checkout's code under the baseline's name: `baseline_package` refuses it."""
    spark_bench = _spark_script(monkeypatch)
    (tmp_path / "windowing" / "runners").mkdir(parents=True)
    (tmp_path / "windowing" / "__init__.py").write_text("from .api import windowed\n")
    (tmp_path / "windowing" / "runners" / "spark.py").write_text("import numpy\n    from windowing.api import x\n")
    (tmp_path / "windowing" / "cli.py").write_text("import windowing_extras\n")
    assert spark_bench.absolute_imports(tmp_path) == ["windowing/runners/spark.py"]


class _SessionConf:
    """The part of ``SparkSession.conf`` that `spark_bench.side_settings` uses, over a dict."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.settings = settings

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.settings.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.settings[key] = value

    def unset(self, key: str) -> None:
        del self.settings[key]


def test_spark_bench_side_settings_hold_while_the_side_runs_and_give_the_session_back(monkeypatch) -> None:
    """The transformWithState floor's queries run on RocksDB, and the sides after it on the session's own store,
    set or unset as it was, even when the side's query fails."""
    spark_bench = _spark_script(monkeypatch)
    side, key = "floor transformWithState", spark_bench.STATE_STORE_PROVIDER
    for before in ({key: "the session's own provider", "other": "x"}, {"other": "x"}):
        spark = types.SimpleNamespace(conf=_SessionConf(dict(before)))
        with pytest.raises(RuntimeError, match="the query failed"):
            with spark_bench.side_settings(spark, spark_bench.SIDE_SETTINGS[side]):
                assert spark.conf.settings[key] == spark_bench.ROCKSDB_PROVIDER
                raise RuntimeError("the query failed")
        assert spark.conf.settings == before
        with spark_bench.side_settings(spark, {}):  # a side with no settings of its own
            assert spark.conf.settings == before


def test_spark_bench_engine_conf_is_parsed_and_refused_by_name_without_a_value(monkeypatch) -> None:
    spark_bench = _spark_script(monkeypatch)
    assert spark_bench.parsed_settings(["spark.a=1", "windowing.b=x=y"], "--engine-conf") == {
        "spark.a": "1", "windowing.b": "x=y"}
    with pytest.raises(ValueError, match="--engine-conf 'spark.a': give KEY=VALUE"):
        spark_bench.parsed_settings(["spark.a"], "--engine-conf")


class _RecordingQuery:
    """A streaming query of `run_query`'s fakes: ends at once, having made no progress."""

    recentProgress: list[dict] = []

    def awaitTermination(self) -> None:
        pass


class _RecordingWriter:
    """``DataFrame.writeStream`` of `run_query`'s fakes: records each query's checkpoint directory as it starts,
    with what that directory holds then."""

    def __init__(self, started: list[tuple[Path, list[str]]]) -> None:
        self.started, self.options = started, {}

    def __getattr__(self, name: str):  # format, outputMode, trigger: nothing to record
        return lambda *args, **kwargs: self

    def option(self, key: str, value: str) -> "_RecordingWriter":
        self.options[key] = value
        return self

    def start(self) -> _RecordingQuery:
        checkpoint = Path(self.options["checkpointLocation"])
        self.started.append((checkpoint, sorted(p.name for p in checkpoint.iterdir())))
        (checkpoint / "offsets").mkdir()  # what a query leaves behind, for a stopped query's store to add to
        return _RecordingQuery()


def test_spark_bench_run_query_starts_every_query_in_a_new_empty_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """A stopped query's RocksDB store may still upload into its own checkpoint: the next query must not share it."""
    spark_bench = _spark_script(monkeypatch)
    monkeypatch.setattr(spark_bench, "jvm_pid", lambda spark: 0)
    monkeypatch.setattr(spark_bench, "cpu_seconds", lambda pid: (0.0, 0.0))
    started: list[tuple[Path, list[str]]] = []

    class Stream:
        def __getattr__(self, name: str):  # readStream's schema, option, parquet
            return lambda *args, **kwargs: self

    spark = types.SimpleNamespace(readStream=Stream())
    build = lambda stream: types.SimpleNamespace(writeStream=_RecordingWriter(started))  # noqa: E731
    for _ in range(2):
        spark_bench.run_query(spark, tmp_path / "data", build, tmp_path / "chk")
    (first, first_held), (second, second_held) = started
    assert first != second and first.parent == second.parent == tmp_path / "chk"
    assert first_held == second_held == []
    assert (first / "offsets").is_dir()  # the first query's directory left as it was, not emptied under it


def test_proc_stat_reads_a_command_name_with_spaces_and_parentheses(tmp_path: Path, monkeypatch) -> None:
    """The name sits in parentheses in /proc/<pid>/stat; the fields are read after its last one."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from spark_cpu import proc_stat
    odd = tmp_path / "py) (x 1"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        name, fields = proc_stat(f"/proc/{child.pid}/stat")
        assert (name, int(fields[1])) == ("py) (x 1", os.getpid())
    finally:
        child.communicate(b"")
    assert proc_stat(f"/proc/{child.pid}/stat") is None  # gone once waited for


def test_collapsed_stacks_reads_frames_outermost_first(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from worker_profile import collapsed_stacks, innermost
    collapsed = tmp_path / "stacks.txt"
    collapsed.write_text("main (a.py:1);step (pkg/engine.py:40) 7\nmain (a.py:1);load (pkg/state.py:9) 2\n"
                         "main (a.py:1);step (pkg/engine.py:41) 1\n")
    assert list(collapsed_stacks(collapsed))[1] == (["main (a.py:1)", "load (pkg/state.py:9)"], 2)
    assert innermost([collapsed]) == {"step (engine.py)": 8, "load (state.py)": 2}


@pytest.mark.spark
@pytest.mark.parametrize("shape", ["fixed", "sessions"])
def test_foreach_batch_runner_sketch_emits_the_engines_panes(spark, shape: str, tmp_path: Path, monkeypatch) -> None:
    """The sketch spark_bench.py measures does the engine's work: on the benchmark's data, micro-batch by
    micro-batch, it emits the engine's panes. The engine runs without micro-batches that bring no data, which no
    ``foreachBatch`` function is called for: there it would also fire the windows the last input leaves due."""
    import pandas as pd

    spark_bench = _spark_script(monkeypatch)
    data = spark_bench.make_data(tmp_path, 6000, 30, 4, shape == "sessions")

    def stream():
        return spark.readStream.schema("key long, ts timestamp, amount long").option("maxFilesPerTrigger", 1).parquet(str(data))

    written: list[pd.DataFrame] = []
    sketch = spark_bench.foreach_batch_runner(shape, spark_bench.DELAY, lambda panes, batch_id: written.append(panes.toPandas()))
    sketch(stream()).option("checkpointLocation", str(tmp_path / "sketch")).trigger(availableNow=True).start().awaitTermination()
    engine = {"fixed": spark_bench.engine_fixed, "sessions": spark_bench.engine_sessions}[shape](stream())
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    try:
        query = (engine.writeStream.format("memory").queryName(f"engine_{shape}").outputMode("append")
                 .option("checkpointLocation", str(tmp_path / "engine")).trigger(availableNow=True).start())
        query.awaitTermination()
    finally:
        spark.conf.unset("spark.sql.streaming.noDataMicroBatches.enabled")
    expected = spark.table(f"engine_{shape}").toPandas()
    actual = pd.concat(written, ignore_index=True)
    for bound in ("window_start", "window_end"):  # the sketch leaves them as microseconds, as the workers do
        actual[bound] = pd.to_datetime(actual[bound], unit="us")
        expected[bound] = pd.to_datetime(expected[bound]).astype("datetime64[us]").astype("datetime64[ns]")
    assert len(written) == 4 and len(expected) > 0

    def rows(panes: pd.DataFrame) -> list[tuple]:
        return sorted(map(tuple, panes[list(expected.columns)].astype(str).to_numpy()))
    assert rows(actual) == rows(expected)


@pytest.mark.parametrize("shape", ["fixed", "sessions"])
def test_floor_packed_runs_the_engines_query_and_ships_every_row_to_a_call_that_keeps_nothing(spark, shape: str,
                                                                                              tmp_path: Path, monkeypatch) -> None:
    """spark_bench.py's ``--floor-packed`` side: the runner's own query (the same stages before the stateful step),
    whose stateful call takes in every row and emits, keeps and schedules nothing, where the engine's emits panes
    and keeps windows."""
    spark_bench = _spark_script(monkeypatch)
    data = spark_bench.make_data(tmp_path, 6000, 30, 3, shape == "sessions")
    engine = {"fixed": spark_bench.engine_fixed, "sessions": spark_bench.engine_sessions}[shape]

    def run(name: str, build) -> tuple[int, list[dict], str]:
        stream = spark.readStream.schema("key long, ts timestamp, amount long").option("maxFilesPerTrigger", 1).parquet(str(data))
        query = (build(stream).writeStream.format("memory").queryName(f"{name}_{shape}").outputMode("append")
                 .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True).start())
        query.awaitTermination()
        plan = io.StringIO()
        with contextlib.redirect_stdout(plan):
            query.explain()
        return spark.table(f"{name}_{shape}").count(), query.recentProgress, plan.getvalue()

    panes, floor_progress, floor_plan = run("floor", spark_bench.floor_packed(shape))
    engine_panes, engine_progress, engine_plan = run("engine", engine)
    assert panes == 0 and engine_panes > 0
    for progress in (floor_progress, engine_progress):
        assert sum(p["numInputRows"] for p in progress) == 6000
    # The same plan: the runner's mapInArrow (lift or pack) before the shuffle, then the stateful step.
    for plan in (floor_plan, engine_plan):
        assert "MapInArrow" in plan and "FlatMapGroupsInPandasWithState" in plan, plan
    states = [max(p["stateOperators"][0]["numRowsTotal"] for p in progress) for progress in (floor_progress, engine_progress)]
    assert states[0] == 0 and states[1] > 0


def test_splitter_bench_counts_only_the_triggers_that_ran_a_batch_as_processing(monkeypatch) -> None:
    """Spark reports a trigger that found nothing to run as progress too, with its ``triggerExecution`` but no
    ``addBatch`` and no rows: not a micro-batch, so not the query's processing seconds."""
    splitter_bench = _spark_script(monkeypatch, "splitter_bench")
    monkeypatch.setattr(splitter_bench, "wait_for_source_runners", lambda jvm: None)
    progress = [
        {"numInputRows": 0, "durationMs": {"triggerExecution": 5_000}},  # idle: the first trigger found nothing yet
        {"numInputRows": 700, "durationMs": {"addBatch": 900, "triggerExecution": 1_000}},
        {"numInputRows": 300, "durationMs": {"addBatch": 400, "triggerExecution": 500}},
        {"numInputRows": 0, "durationMs": {"addBatch": 10, "triggerExecution": 250}},  # a no-data batch that ran
    ]

    class Query:
        recentProgress = progress

        def awaitTermination(self) -> None:
            pass

    class Frame:
        class writeStream:  # noqa: N801 - pyspark's names
            format = trigger = staticmethod(lambda *args, **kwargs: Frame.writeStream)
            start = staticmethod(lambda: Query())

    run, _ = splitter_bench.timed(Frame(), jvm=0, cpu_of=lambda jvm: (1.0, 2.0))
    assert run.processing == 1.75
    assert run.batches == 2
