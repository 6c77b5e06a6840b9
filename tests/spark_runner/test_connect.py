"""The runner (batch and streaming, late data included), the file sink and the splitter over Spark
Connect: each scenario of `connect_driver` runs in a client process of its own against one server."""

from __future__ import annotations

import pytest

from tests import sparks

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def connect_url():
    missing = sparks.connect_server_missing()
    if missing:
        pytest.skip(missing)
    with sparks.connect_server() as url:
        yield url


@pytest.mark.parametrize("scenario", ["batch", "stream_with_watermark", "stream_with_builder_watermark", "stream_unpacked",
                                      "stream_aggregate_then_run", "file_sink", "file_sink_foreach_batch", "compaction",
                                      "window_state_foreach_batch", "splitter"])
def test_over_spark_connect(connect_url, tmp_path, scenario):
    sparks.run_driver("tests.spark_runner.connect_driver", scenario, connect_url, str(tmp_path))
