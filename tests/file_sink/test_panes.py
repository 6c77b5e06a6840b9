"""The pandas runner's panes written through the sink, exactly once per step."""

import pandas as pd
import pytest

from accumulations import Sum
from storage.file_sink import ColumnBuckets, FileSink
from windowing import TestStream, windowed

from .helpers import tree


def stream(steps: int = 4) -> TestStream:
    """Elements for keys a and b, the watermark moving 10 further each step; one late element."""
    script = TestStream()
    for s in range(steps):
        script = script.add_elements([{"ts": 10 * s + 1, "k": "a", "x": s}, {"ts": 10 * s + 5, "k": "b", "x": 10 + s}])
        if s == 1:
            script = script.add_elements([{"ts": 2, "k": "a", "x": 100}])  # late: window [0, 10) has fired
        script = script.advance_watermark_to(10 * (s + 1))
    return script


def panes_of(steps: int) -> pd.DataFrame:
    return windowed(stream(steps), time="ts", key="k").fixed(10).run(Sum("x")).panes


def as_written(panes: pd.DataFrame) -> pd.DataFrame:
    """Panes as JSON lines give them back: the ``timing`` category as plain strings."""
    return panes.astype({"timing": str}).astype({"timing": object})


def read(sink: FileSink) -> pd.DataFrame:
    return sink.read().astype({"timing": object})


@pytest.mark.parametrize("buckets", [None, ColumnBuckets("k")], ids=["one bucket", "by key"])
def test_test_stream_panes_read_back_equal_and_rewriting_duplicates_nothing(tmp_path, buckets):
    panes = panes_of(4)
    assert panes["step"].nunique() > 2 and len(panes) == 8  # several steps to commit
    sink = FileSink(str(tmp_path))
    if buckets is not None:
        sink = sink.with_buckets(buckets)
    assert sink.write_panes(panes, processing_time_ms=0) == panes["step"].nunique()
    back = read(sink).sort_values(["step", "k"], kind="stable").reset_index(drop=True)
    expected = as_written(panes).sort_values(["step", "k"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(back, expected)

    before = tree(tmp_path)
    assert sink.write_panes(panes, processing_time_ms=0) == 0  # every step already committed
    assert tree(tmp_path) == before


def test_a_longer_run_of_the_same_stream_adds_only_its_new_steps(tmp_path):
    sink = FileSink(str(tmp_path))
    short, full = panes_of(2), panes_of(4)
    sink.write_panes(short, processing_time_ms=0, end_of_input=False)  # parts stay in progress
    assert sink.read().empty
    written = sink.write_panes(full, processing_time_ms=0)
    assert written == full["step"].nunique() - short["step"].nunique()
    pd.testing.assert_frame_equal(read(sink), as_written(full))


def test_end_of_input_finishes_parts_whose_steps_were_all_committed_before(tmp_path):
    sink = FileSink(str(tmp_path))
    panes = panes_of(2)
    sink.write_panes(panes, processing_time_ms=0, end_of_input=False)
    assert sink.write_panes(panes, processing_time_ms=0) == 0  # no step to commit, yet the end of input
    pd.testing.assert_frame_equal(read(sink), as_written(panes))
    before = tree(tmp_path)
    assert sink.write_panes(panes, processing_time_ms=0) == 0
    assert tree(tmp_path) == before  # finishing again does nothing
    full = panes_of(4)  # finishing took no step id: a longer run still adds its new steps
    assert sink.write_panes(full, processing_time_ms=0) == full["step"].nunique() - panes["step"].nunique()
    pd.testing.assert_frame_equal(read(sink), as_written(full))


def test_panes_without_a_step_column_are_refused(tmp_path):
    result = windowed(pd.DataFrame({"ts": [1], "k": ["a"], "x": [1]}), time="ts", key="k").fixed(10).run(Sum("x"))
    with pytest.raises(ValueError, match=r"panes have no 'step' column .* write\(df\)"):
        FileSink(str(tmp_path)).write_panes(result.panes)
    with pytest.raises(ValueError, match=r"'step' must hold non-negative integers"):
        FileSink(str(tmp_path)).write_panes(result.panes.assign(step="one"))
    steps = pd.array([0, None, 1], dtype="Int64")  # failed with pandas' "boolean value of NA is ambiguous"
    panes = pd.DataFrame({"step": steps, "x": [10, 20, 30]})
    with pytest.raises(ValueError, match=r"'step' must hold non-negative integers \(the batch ids\), got <NA> at row 1"):
        FileSink(str(tmp_path)).write_panes(panes)
    with pytest.raises(ValueError, match=r"got -2 at row 2; nothing was written"):
        FileSink(str(tmp_path)).write_panes(panes.assign(step=[0, 1, -2]))
    assert FileSink(str(tmp_path)).read().empty
