"""The benchmark scripts that need no Spark run to the end on tiny inputs and print their tables.

Nothing else runs the scripts in ``benchmarks/``, and they rot silently as the code under them
moves: ``step_bench.py`` fed the Spark runner's worker frames without the null flags it came to
expect, and wrote state that its own ``load`` refused. Each script runs here as a user runs it: a
fresh interpreter (this one), from the repository root, the checkout first on ``PYTHONPATH``, its
temporary files in the test's directory. The figures are not checked, only that the script ends
cleanly and prints what its readers look for. Scripts that start a SparkSession are listed apart
(`SPARK_ONLY`) and not run here: a JVM per script would cost the suite minutes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    # rocksdict comes with the optional `bench` extra, which the test venv does not install.
    "kv_bench.py": (["--keys", "1000", "--batch", "100", "--engines", "kv,kv-arrow,sqlite"],
                    r"\| keys \| engine \| batched puts \|(.|\n)*\| monotonic \| sqlite3 \(WAL\) \|"),
    "kv_call_overhead.py": (["--keys", "10000", "--repeat", "1"],
                            r"\| keys per call \| get_many \(list\) \|(.|\n)*\| per key \(slope 1k to 10k\) \|"),
    "packed_output_memory.py": (["--panes", "1000"], r"1,000 panes: the frame \d+ bytes a pane, packed"),
    "splitter_newline_search.py": (["--repeat", "1"], r"\| numpy flatnonzero \(used\) \| [\d.]+ ms \|"),
    "step_bench.py": (["--steps", "1"],
                      r"\| keys in the bucket \| elements per call \|(.|\n)*\| 3,125 \| 15,600 \| [\d.]+ \| [\d.]+ \| 3,125 \|"),
    "window_state_build_memory.py": (["--sessions", "1000", "--per-batch", "100"],
                                     r"micro-batch 0: resident \d+ MiB(.|\n)*CPU [\d.]+ s in all micro-batches"),
    "window_state_spill.py": (["--sessions", "1000", "--batches", "1"],
                              r"backend +micro-batch s(.|\n)* memory (.|\n)* store "),
}

SPARK_ONLY = {
    # file_sink_bench.py runs above with --fs-calls, its one mode without Spark.
    "spark_bench.py", "splitter_bench.py", "splitter_profile.py", "splitter_start_cost.py", "window_state_spark.py",
    # Helpers the Spark benchmarks import (the JVM's CPU time, py-spy over the workers): no script of their own.
    "spark_cpu.py", "worker_profile.py",
}


def _run(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_every_script_is_run_here_or_needs_spark() -> None:
    """A new benchmark gets a row in `RUNS`, or is named as needing Spark."""
    scripts = {path.name for path in BENCHMARKS.glob("*.py")}
    assert scripts == set(RUNS) | SPARK_ONLY


@pytest.mark.parametrize(("script", "args", "printed"), [(s, a, p) for s, (a, p) in RUNS.items()], ids=list(RUNS))
def test_script_runs_and_prints_its_table(script: str, args: list[str], printed: str, tmp_path: Path) -> None:
    done = _run(script, args, tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(printed, done.stdout), done.stdout


def test_kv_call_overhead_refuses_fewer_keys_than_its_largest_call(tmp_path: Path) -> None:
    done = _run("kv_call_overhead.py", ["--keys", "1000"], tmp_path)
    assert done.returncode == 2
    assert "--keys 1,000 is fewer than the largest call's 10,000 keys" in done.stderr


def test_kv_bench_refuses_an_engine_it_does_not_know(tmp_path: Path) -> None:
    done = _run("kv_bench.py", ["--keys", "100", "--engines", "kv,leveldb"], tmp_path)
    assert done.returncode == 2
    assert "--engines: 'leveldb' is none of kv, kv-arrow, rocksdict, sqlite" in done.stderr


def _spark_bench(monkeypatch: pytest.MonkeyPatch):
    """benchmarks/spark_bench.py as a module (it starts Spark only in ``main``), its path changes undone after."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    import spark_bench
    return spark_bench


def test_spark_bench_baseline_runs_the_engine_of_a_revision_under_its_own_name(tmp_path: Path, monkeypatch) -> None:
    import importlib

    import pandas as pd

    from accumulations import Sum
    spark_bench = _spark_bench(monkeypatch)
    name = spark_bench.baseline_package("HEAD", tmp_path)  # any commit; HEAD is in a shallow clone too
    assert name.startswith("windowing_at_") and str(tmp_path / "baselines") in os.environ["PYTHONPATH"].split(os.pathsep)
    baseline = importlib.import_module(name)
    assert Path(baseline.__file__).parent == tmp_path / "baselines" / name
    frame = pd.DataFrame({"k": [1, 1, 2], "t": [1, 2, 15], "x": [3, 4, 5]})
    panes = baseline.windowed(frame, time="t", key="k").fixed(10).aggregate(Sum("x"))
    assert list(zip(panes["k"], panes["window_start"], panes["value"])) == [(1, 0, 7), (2, 10, 5)]


def test_spark_bench_refuses_a_baseline_git_does_not_know(tmp_path: Path, monkeypatch) -> None:
    spark_bench = _spark_bench(monkeypatch)
    with pytest.raises(ValueError, match=r"--baseline 'no-such-revision': git knows no such commit here"):
        spark_bench.baseline_package("no-such-revision", tmp_path)


def test_spark_bench_finds_a_baseline_that_imports_windowing_by_name(tmp_path: Path, monkeypatch) -> None:
    """Such a package would run this checkout's code under the baseline's name: `baseline_package` refuses it."""
    spark_bench = _spark_bench(monkeypatch)
    (tmp_path / "windowing" / "runners").mkdir(parents=True)
    (tmp_path / "windowing" / "__init__.py").write_text("from .api import windowed\n")
    (tmp_path / "windowing" / "runners" / "spark.py").write_text("import numpy\n    from windowing.api import x\n")
    (tmp_path / "windowing" / "cli.py").write_text("import windowing_extras\n")
    assert spark_bench.absolute_imports(tmp_path) == ["windowing/runners/spark.py"]
