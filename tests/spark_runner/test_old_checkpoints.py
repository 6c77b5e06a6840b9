"""Streaming checkpoints written before nullable integers crossed to the workers exactly (58c6201).

The code before got a bigint column holding a null as float64: its window tables could hold such
a key column as float64, 2**53 + 1 became 2**53 in them, and a Min that saw only nulls held the
int64 minimum. ``data/checkpoints-<pyspark major.minor>/`` holds checkpoints that code wrote
(``data/old_checkpoints.py`` says how; ``old.json`` keeps what it emitted), each stopped with
open windows. Today's code restarts them with more input and must emit the pandas runner's panes:
an old key and its new rows one key, the null key's state kept, integers exact, no pane lost or
repeated.

``data/numbered-<pyspark major.minor>/`` holds checkpoints written by 04d14e3, whose window tables
numbered the state of nested triggers by position (``data/numbered_checkpoints.py``); today's code
names it by role and must restart them with their counts.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from windowing import TestStream

pytestmark = pytest.mark.spark

DATA = Path(__file__).parent / "data"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DATA / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


old = _load("old_checkpoints")
numbered = _load("numbered_checkpoints")
wall = _load("wall_time_checkpoints")


def _fixture(case: str, folder: str = "checkpoints", script: str = "old_checkpoints") -> Path:
    import pyspark

    version = ".".join(pyspark.__version__.split(".")[:2])
    path = DATA / f"{folder}-{version}" / case
    if not path.is_dir():
        pytest.fail(f"no checkpoint written by the old code for pyspark {version}: {path} is missing; "
                    f"make it as data/{script}.py says")
    return path


@pytest.mark.parametrize("case", list(old.CASES))
def test_a_checkpoint_from_before_exact_integers_restarts_with_exact_keys_and_values(spark, tmp_path, case):
    fixture = _fixture(case)
    written = json.loads((fixture / "old.json").read_text())
    shutil.copytree(fixture / "checkpoint", tmp_path / "checkpoint")
    (tmp_path / "in").mkdir()  # new files only: the checkpoint lists the old ones by their old paths
    inputs, panes = old.run(spark, case, tmp_path / "in", tmp_path / "checkpoint", old.AFTER)
    assert sum(inputs) == sum(map(len, old.AFTER))
    restarted_at = len(written["inputs"])
    expected = _pandas_runner(case, written["inputs"] + inputs)
    assert sorted(map(_row, panes)) == sorted(_row(p) for p in expected if p["step"] >= restarted_at)


@pytest.mark.parametrize("case", list(numbered.CASES))
def test_a_checkpoint_with_nested_trigger_state_numbered_by_position_restarts_with_its_counts(spark, tmp_path, case):
    fixture = _fixture(case, "numbered", "numbered_checkpoints")
    written = json.loads((fixture / "old.json").read_text())
    shutil.copytree(fixture / "checkpoint", tmp_path / "checkpoint")
    (tmp_path / "in").mkdir()
    inputs, panes = old.run(spark, case, tmp_path / "in", tmp_path / "checkpoint", numbered.AFTER,
                            build=numbered.pipeline, combine="true")
    assert sum(inputs) == sum(map(len, numbered.AFTER))
    restarted_at = len(written["inputs"])
    parts, stream = iter(numbered.BEFORE + numbered.AFTER), TestStream()
    for n in written["inputs"] + inputs:
        stream = stream.add_elements(old.frame(next(parts) if n else []))
    expected = numbered.pipeline(stream, case)
    expected = expected[expected["step"] < len(stream.actions)].to_dict("records")  # Spark's stream has no end of input
    assert any(p["timing"] == "LATE" for p in expected if p["step"] >= restarted_at)
    assert sorted(map(_row, panes)) == sorted(_row(p) for p in expected if p["step"] >= restarted_at)


@pytest.mark.parametrize("case", list(wall.CASES))
def test_a_checkpoint_holding_wall_times_in_the_session_zone_restarts_holding_them_so(spark, tmp_path, case):
    """Its buckets go on holding timestamp keys and values as the zone's wall times (`worker.BucketStep.as_written`):
    taken as UTC ones, a key's new rows became another key beside its old ones, and its old values came back
    shifted by the zone's offset (7 hours)."""
    fixture = _fixture(case, "wall-times", "wall_time_checkpoints")
    written = json.loads((fixture / "old.json").read_text())
    shutil.copytree(fixture / "checkpoint", tmp_path / "checkpoint")
    if (fixture / "store").is_dir():
        shutil.copytree(fixture / "store", tmp_path / "store")
    (tmp_path / "in").mkdir()
    inputs, panes = wall.run(spark, case, tmp_path / "in", tmp_path / "checkpoint", wall.AFTER)
    assert sum(inputs) == sum(map(len, wall.AFTER))
    restarted_at = len(written["inputs"])
    parts, stream = iter(wall.BEFORE + wall.AFTER), TestStream()
    for n in written["inputs"] + inputs:
        stream = stream.add_elements(wall.frame(next(parts) if n else [], zoned=False))
    expected = wall.pipeline(stream, case)
    expected = expected[expected["step"].between(restarted_at, len(stream.actions) - 1)].drop(columns="step")
    assert {p["k"] for p in panes} == {None, *(_micros(wall.KEYS[k]) for k in "ab")}
    assert sorted(map(_in_micros, panes), key=repr) == sorted(map(_in_micros, expected.to_dict("records")), key=repr)


def _micros(at: dt.datetime | None) -> int | None:
    return None if at is None or pd.isna(at) else int(pd.Timestamp(at).value // 1000)


def _in_micros(pane: dict) -> tuple:
    """A pane of either runner with its timestamps as epoch microseconds (a list's sorted), as sorted pairs."""
    out = {}
    for name, value in pane.items():
        if name == "all":
            value = sorted(v if isinstance(v, int) else _micros(v) for v in value)
        elif name in ("k", "window_start", "window_end", "lo", "hi") and not isinstance(value, int):
            value = _micros(value)
        elif hasattr(value, "item"):
            value = value.item()
        out[name] = value
    return tuple(sorted(out.items()))


def _pandas_runner(case: str, inputs: list[int]) -> list[dict]:
    """The pandas runner's panes over the micro-batches Spark ran (a no-data batch is an empty step),
    with the elements of the windows open at the restart keyed as the old code keyed them.

    Those windows hold only the last old micro-batch. It holds a null key, and pyspark hands a
    bigint column holding a null to pandas as float64 (lifted, row by row), pyspark 3.5 an
    array<bigint> holding one too (packed; pyspark 4 as objects): the old code read 2**53 + 1 as
    2**53 there. Today's code keeps those windows as they are; new rows of 2**53 + 1 form windows
    of their own.
    """
    import pyspark

    before = list(old.BEFORE)
    if not case.endswith("-packed") or int(pyspark.__version__.split(".")[0]) < 4:
        before[-1] = [(old.BIG if k == old.BIG + 1 else k, s, v) for k, s, v in before[-1]]
    parts, stream = iter(before + old.AFTER), TestStream()
    for n in inputs:
        stream = stream.add_elements(old.frame(next(parts) if n else []))
    panes = old.pipeline(stream, case)
    return panes[panes["step"] < len(stream.actions)].to_dict("records")  # Spark's stream has no end of input


def _row(pane: dict) -> tuple:
    """A pane of either runner as sorted (column, value) pairs: window bounds in seconds, a missing
    value as None, numbers as Python numbers (an int stays an int)."""
    out = []
    for name, value in pane.items():
        if name == "step":
            continue
        if isinstance(value, dt.datetime):
            value = old.seconds(value)
        elif value is pd.NA:
            value = None
        elif hasattr(value, "item"):
            value = value.item()
        out.append((name, type(value).__name__, value))
    return tuple(sorted(out))
