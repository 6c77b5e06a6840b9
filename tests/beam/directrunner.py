"""A `tests.beam.pipelines.Pipeline` on Beam's DirectRunner (Python SDK, streaming, TestStream).

Its panes come back as ``(key, window_start, window_end, value, timing, pane_index)``, without the
step (the runner does not say which TestStream event made a pane).
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger as bt
from apache_beam.transforms import window
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

from .pipelines import Pipeline
from .reference import Clock, beam_trigger

_TIMINGS = {0: "EARLY", 1: "ON_TIME", 2: "LATE"}
COLLECTED: list[tuple] = []  # the runner pickles its functions by reference: they append here


def _bound(t: Any) -> int | str:
    """A window bound as an int, the global window's as ``"G-"`` and ``"G+"`` (its end is Beam's maximum less a day)."""
    return "G-" if t <= MIN_TIMESTAMP else "G+" if t >= MAX_TIMESTAMP - 86400 else int(t)


def _collect(pane: tuple) -> None:
    COLLECTED.append(pane)


class _PaneOf(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        key, value = kv
        yield key, _bound(w.start), _bound(w.end), value, _TIMINGS[pane.timing], pane.index


def run_direct(pipeline: Pipeline) -> list[tuple]:
    stream = TestStream()
    for kind, arg in pipeline.actions:
        if kind == "add":
            stream = stream.add_elements([window.TimestampedValue((k, v), t) for k, t, v in arg])
        elif kind == "watermark":
            stream = stream.advance_watermark_to(arg)
        else:
            stream = stream.advance_processing_time(arg)
    stream = stream.advance_watermark_to_infinity()
    kind, *size = pipeline.windows
    window_fn = (window.FixedWindows(*size) if kind == "fixed" else window.SlidingWindows(*size)
                 if kind == "sliding" else window.GlobalWindows() if kind == "global" else window.Sessions(size[0]))
    mode = bt.AccumulationMode.ACCUMULATING if pipeline.accumulating else bt.AccumulationMode.DISCARDING
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    COLLECTED.clear()
    with beam.Pipeline(runner="DirectRunner", options=options) as p:
        (p | stream
         | beam.WindowInto(window_fn, trigger=beam_trigger(pipeline.trigger, Clock(), java=False), accumulation_mode=mode,
                           allowed_lateness=pipeline.lateness)
         | beam.CombinePerKey(sum) | beam.ParDo(_PaneOf()) | beam.Map(_collect))
    return sorted(COLLECTED)
