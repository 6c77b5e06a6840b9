"""Compressed files through the splitter's Spark source (pyspark 4's Python data source): the rows of
pandas and of ``spark.read.text``, and each file once across a crash and restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import FileSplitter
from tests.splitter.test_compressed import CODECS, compressed


def _stream_rows(splitter: FileSplitter, spark, checkpoint: Path) -> list[tuple]:
    """Every row of a bounded ``read_stream`` query, through a foreachBatch sink."""
    collected: list[tuple] = []
    query = (splitter.read_stream(spark).writeStream.option("checkpointLocation", str(checkpoint))
             .foreachBatch(lambda batch, _: collected.extend(tuple(r) for r in batch.collect()))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return collected


@pytest.mark.spark
def test_compressed_files_through_spark_give_the_rows_of_pandas_and_of_spark_read_text(spark, tmp_path):
    """Each codec's file through ``read_stream`` (chunk rows, and CSV's line rows), with blocks of 4 bytes:
    the rows pandas reads from the same content uncompressed, each file one block; and for .gz, .bz2
    and .deflate the lines ``spark.read.text`` decompresses (Hadoop's codecs)."""
    text = "ts,user\r\n\r\n1,alice é\n2,bob\n\n3,carol".encode()
    for kind in ("c", "p"):
        (tmp_path / kind).mkdir()
    lines: list[tuple] = []
    for suffix in sorted(CODECS):
        (tmp_path / "c" / f"x{suffix}").write_bytes(compressed(suffix, text, members=2))
        (tmp_path / "p" / f"x{suffix}.txt").write_bytes(text)
    for options in ({}, {"format": "csv", "columns": "ts long, user"}):
        got = _stream_rows(FileSplitter(str(tmp_path / "c"), settle=0, block_size=4, blocks_per_batch=2, **options),
                           spark, tmp_path / f"cp{len(options)}")
        plain = FileSplitter(str(tmp_path / "p"), settle=0, block_size=4, **options).read_records()
        *fields, path, block_id, offset = plain.columns
        if options:
            plain["ts"] = plain["ts"].astype("int64")
        expected = sorted((*r[:-2], r[-2].removesuffix(".txt").replace("/p/", "/c/"), 0, r[-1])
                          for r in plain[[*fields, path, offset]].itertuples(index=False, name=None))
        assert sorted(got) == expected and len(got) > 2 * len(CODECS)
        lines = lines if options else got
    for suffix in (".gz", ".bz2", ".deflate"):
        values = sorted(r[0] for r in lines if r[1].endswith(suffix))
        native = sorted(r.value for r in spark.read.text(str(tmp_path / "c" / f"x{suffix}")).collect())
        assert values == native == sorted(["ts,user", "", "1,alice é", "2,bob", "", "3,carol"]), suffix


@pytest.mark.spark
def test_a_query_restarted_after_a_crash_reads_each_compressed_file_exactly_once(spark, tmp_path):
    """As ``test_spark_source.test_restart_from_checkpoint_reads_every_line_exactly_once``, with
    compressed files among the plain one: a crash after writing batch 1, the batch replayed, each line once."""
    from collections import Counter

    from tests.splitter.test_spark_source import BatchRecorder, start

    data = tmp_path / "in"
    data.mkdir()
    expected = []
    for i, suffix in enumerate([".gz", ".zst", ".bz2", ""]):
        lines = [f"file{i} line{j}" for j in range(30)]
        content = "\n".join(lines).encode() + b"\n"
        (data / f"part{i}.log{suffix}").write_bytes(compressed(suffix, content, 2) if suffix else content)
        expected += lines
    splitter = FileSplitter(str(data), block_size=128, blocks_per_batch=2, settle=0, scan_interval=0)
    first = BatchRecorder(crash_at=1)
    with pytest.raises(Exception, match="simulated crash after writing batch 1"):
        start(splitter, spark, tmp_path / "cp", first, availableNow=True).awaitTermination()
    second = BatchRecorder()
    start(splitter, spark, tmp_path / "cp", second, availableNow=True).awaitTermination()
    assert second.calls[0] == (1, first.by_batch()[1])  # the uncommitted batch replayed, the same blocks
    batches = {**first.by_batch(), **second.by_batch()}
    assert Counter(row[0] for rows in batches.values() for row in rows) == Counter(expected)
    assert len(first.by_batch()) < len(batches)
    compressed_blocks = [(path, block_id) for rows in batches.values() for _, path, block_id, _ in rows
                         if not path.endswith(".log")]
    assert set(block_id for _, block_id in compressed_blocks) == {0}
