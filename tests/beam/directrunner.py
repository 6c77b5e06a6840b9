"""A `tests.beam.pipelines.Pipeline` on Beam's DirectRunner (Python SDK, streaming, TestStream).

Its panes come back as ``(key, window_start, window_end, value, timing, pane_index)``, without the
step (the runner does not say which TestStream event made a pane).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger as bt
from apache_beam.transforms import window

from .pipelines import Pipeline
from .reference import Clock, beam_trigger

_TIMINGS = {0: "EARLY", 1: "ON_TIME", 2: "LATE"}
COLLECTED: list[tuple] = []  # the runner pickles its functions by reference: they append here


def _collect(pane: tuple) -> None:
    COLLECTED.append(pane)


class _PaneOf(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        key, value = kv
        yield key, int(w.start), int(w.end), value, _TIMINGS[pane.timing], pane.index


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
                 if kind == "sliding" else window.Sessions(size[0]))
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
