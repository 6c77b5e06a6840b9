"""A streaming checkpoint written by the Spark runner of 562141d, whose ``.window_state(KVStore(path))`` kept
each bucket's light window table (keys, bounds, flags, trigger state) in its Spark state row and only the
windows' payloads in the store. Today the store holds the whole table, so such a checkpoint's windows are
in no store: `test_window_state_stream.py` checks that a restart refuses it by name.

Made with the code of 562141d, once per pyspark the tests run on::

    mkdir /tmp/old && git archive 562141d | tar -x -C /tmp/old
    cp tests/spark_runner/data/light_table_checkpoints.py /tmp/old/tests/spark_runner/data/
    cd /tmp/old && PYTHONPATH=/tmp/old <venv>/bin/python tests/spark_runner/data/light_table_checkpoints.py

with ``<venv>`` this repository's ``.venv`` and ``.venv-spark35``. Each writes
``light-table-<pyspark major.minor>/checkpoint/`` beside the script (copy it back here); the store the query
wrote is not kept: the refusal comes before any read of it.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = [("a", 1, 5), ("b", 3, 1), ("a", 12, 7)]


def main() -> None:
    import pyspark

    sys.path.insert(0, str(HERE.parents[2]))
    from storage import KVStore
    from tests.spark_runner.helpers import events
    from tests.spark_runner.streaming import start, write_batch
    from tests.spark_runner.test_window_state_stream import sessions
    from tests.sparks import session

    out = HERE / f"light-table-{'.'.join(pyspark.__version__.split('.')[:2])}"
    shutil.rmtree(out, ignore_errors=True)
    spark = session(app="light-table-checkpoints")
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        query = start(spark, base / "in", base / "out", out / "checkpoint", sessions(KVStore(str(base / "kv"))))
        try:
            write_batch(base / "in", 0, events(ROWS))
            query.processAllAvailable()
        finally:
            query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
