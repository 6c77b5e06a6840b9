"""Golden scenarios: YAML transcripts in ``scenarios/`` run through the TestStream runner.

Each file holds one pipeline, a script of actions and the panes expected
after each action, derived by hand from Beam's semantics and ../shared/api.md
(each file says how). The format:

```yaml
description: what the scenario shows and how its panes follow
columns: [k, ts, x]            # the input columns; rows of `add` are in this order
time: ts                       # the event-time column
tz: Europe/Berlin              # optional: ts holds ISO strings, made tz-aware in this zone
timestamps: true               # optional: ts holds ISO strings, made naive timestamps
key: k                         # or null (not keyed)
window: {fixed: 10}            # {sliding: 10, every: 5} | {sessions: 10} | global
trigger: AtWatermark().with_early_firings_every(1)   # a `triggers` expression (default Default())
mode: accumulating_and_retracting                    # default discarding
lateness: 0
fire_only_updated: false
aggregate: Sum('x')            # an `accumulations` expression
actions:                       # one step each, numbered from 0
  - add: [[a, 1, 5]]
  - watermark: 10              # or: watermark: infinity
  - processing_time: 5         # a duration
panes:                         # [step, key..., start, end, value, timing, pane_index] (+ retraction)
  - [1, a, 0, 10, 5, ON_TIME, 0]
  - [2, a, 0, 10, 5, ON_TIME, 0, retraction]
late_data:                     # optional: [step, input columns..., reason]
  - [3, a, 2, 7, beyond allowed lateness]
```

Panes are compared per step as multisets (the order of windows within a step
is not part of the contract); that a retraction comes immediately before the
pane replacing it is checked separately.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import accumulations
import triggers
from windowing import TestStream, windowed

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))


def load(path: Path) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)


def to_frame(sc: dict, rows: list[list]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=sc["columns"])
    if sc.get("tz"):
        frame[sc.get("time", "ts")] = pd.to_datetime(frame[sc.get("time", "ts")], utc=True).dt.tz_convert(sc["tz"])
    elif sc.get("timestamps"):
        frame[sc.get("time", "ts")] = pd.to_datetime(frame[sc.get("time", "ts")])
    return frame


def instant(sc: dict, value):
    if sc.get("tz"):
        return pd.Timestamp(value).tz_convert(sc["tz"])
    return pd.Timestamp(value) if sc.get("timestamps") else value


def build_stream(sc: dict) -> TestStream:
    stream = TestStream()
    for action in sc["actions"]:
        (kind, arg), = action.items()
        if kind == "add":
            stream = stream.add_elements(to_frame(sc, arg))
        elif kind == "watermark":
            stream = (stream.advance_watermark_to_infinity() if arg == "infinity"
                      else stream.advance_watermark_to(instant(sc, arg)))
        elif kind == "processing_time":
            stream = stream.advance_processing_time(arg)
        else:
            raise ValueError(f"unknown action {kind!r}")
    return stream


def build_pipeline(sc: dict):
    pipeline = windowed(build_stream(sc), time=sc.get("time", "ts"), key=sc.get("key"))
    window = sc["window"]
    if window == "global":
        pipeline = pipeline.global_window()
    elif "fixed" in window:
        pipeline = pipeline.fixed(window["fixed"])
    elif "sliding" in window:
        pipeline = pipeline.sliding(window["sliding"], every=window["every"])
    else:
        pipeline = pipeline.sessions(window["sessions"])
    pipeline = pipeline.allowed_lateness(sc.get("lateness", 0))
    pipeline = pipeline.trigger(eval(sc.get("trigger", "Default()"), vars(triggers)))
    pipeline = getattr(pipeline, sc.get("mode", "discarding"))()
    if sc.get("fire_only_updated"):
        pipeline = pipeline.fire_only_updated_panes()
    return pipeline


def plain(value):
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value.item() if isinstance(value, np.generic) else value


def pane_rows(sc: dict, panes: pd.DataFrame) -> list[tuple]:
    keys = [sc["key"]] if isinstance(sc.get("key"), str) else list(sc.get("key") or [])
    columns = ["step", *keys, "window_start", "window_end", "value", "timing", "pane_index", "is_retraction"]
    return [tuple(plain(v) for v in row) for row in panes[columns].itertuples(index=False)]


def expected_rows(sc: dict) -> list[tuple]:
    n_keys = 1 if isinstance(sc.get("key"), str) else len(sc.get("key") or [])
    out = []
    for row in sc.get("panes") or []:
        step, keys, (start, end, value, timing, index), flag = row[0], row[1:1 + n_keys], row[1 + n_keys:6 + n_keys], row[6 + n_keys:]
        assert flag in ([], ["retraction"]), f"bad pane row {row}"
        out.append((step, *keys, plain(instant(sc, start)), plain(instant(sc, end)), value, timing, index, bool(flag)))
    return out


def global_bounds(row: tuple) -> tuple:
    """YAML writes the global window of an int64 time column as `min`/`max`."""
    bounds = {"min": int(np.iinfo(np.int64).min), "max": int(np.iinfo(np.int64).max)}
    return tuple(bounds.get(v, v) if isinstance(v, str) and v in bounds else v for v in row)


def by_step(rows: list[tuple]) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for row in rows:
        out.setdefault(row[0], []).append(row)
    return {step: sorted(group, key=repr) for step, group in out.items()}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_golden_scenario(path: Path):
    sc = load(path)
    aggregate = eval(sc["aggregate"], vars(accumulations))
    result = build_pipeline(sc).run(aggregate)
    got = pane_rows(sc, result.panes)
    expected = [global_bounds(r) for r in expected_rows(sc)]
    assert by_step(got) == by_step(expected)

    # a retraction comes immediately before the pane that replaces it (if one fires in that step)
    window_of = lambda row: row[:-4]  # noqa: E731  (step, keys, start, end)
    for i, row in enumerate(got):
        if row[-1] and any(window_of(other) == window_of(row) and not other[-1] for other in got):
            assert i + 1 < len(got) and window_of(got[i + 1]) == window_of(row) and not got[i + 1][-1], (
                f"retraction {row} is not followed by its replacement")

    if sc.get("tz"):
        assert str(result.panes["window_start"].dt.tz) == sc["tz"]
    late = result.late_data
    got_late = [] if len(late) == 0 else sorted(
        tuple(plain(v) for v in r) for r in late[["step", *sc["columns"], "reason"]].itertuples(index=False))
    want_late = sorted(tuple(r[:1]) + tuple(plain(instant(sc, v)) if c == sc.get("time", "ts") else v
                                          for c, v in zip(sc["columns"], r[1:-1])) + (r[-1],)
                       for r in sc.get("late_data") or [])
    assert got_late == want_late
