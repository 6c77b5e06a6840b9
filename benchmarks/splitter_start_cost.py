"""What one splitter query costs whatever the data: a 4-byte file, with and without the
skipped-blocks accumulator that ``FileSplitter.read_stream`` adds.

    .venv/bin/python benchmarks/splitter_start_cost.py [--repeat 3] [--pyspark-directory]

Prints wall seconds and Spark's Python CPU seconds per query, after one warm-up query.

Spark starts its Python processes with ``$SPARK_HOME/python/lib/pyspark.zip`` first on their
path, and Python compiles every module it imports from a zip archive, each time.
``--pyspark-directory`` runs Spark from a ``SPARK_HOME`` without that zip (links to the installed
pyspark's ``bin`` and ``jars``), so the processes import the installed, compiled pyspark: the
difference is what the zip costs a query.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from spark_cpu import jvm_pid  # noqa: E402
from splitter_bench import checked  # noqa: E402

from storage import FileSplitter  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pyspark-directory", action="store_true",
                        help="import pyspark from its installed directory, not from pyspark.zip")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    home = tempfile.mkdtemp(prefix="spark-home-") if args.pyspark_directory else None
    if home is not None:
        os.environ["SPARK_HOME"] = spark_home_without_zip(home)
    from pyspark.sql import SparkSession

    from storage.splitter.spark_source import read_stream

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    jvm = jvm_pid(spark)
    tiny = tempfile.mkdtemp(prefix="splitter-start-")
    try:
        with open(os.path.join(tiny, "one.txt"), "w") as out:
            out.write("abc\n")
        checked(FileSplitter(tiny, settle=0).read_stream(spark), jvm, 1, "warm-up")
        for _ in range(args.repeat):
            listed = checked(FileSplitter(tiny, settle=0).read_stream(spark), jvm, 1, "with the accumulator")
            unlisted = checked(read_stream(spark, FileSplitter(tiny, settle=0).config, None), jvm, 1, "without it")
            print(f"with the accumulator: {listed.wall:.2f} s, Python {listed.python:.2f} cpu s; "
                  f"without: {unlisted.wall:.2f} s, Python {unlisted.python:.2f} cpu s", flush=True)
    finally:
        shutil.rmtree(tiny, ignore_errors=True)
        spark.stop()
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)


def spark_home_without_zip(home: str) -> str:
    """A ``SPARK_HOME`` in ``home`` with the installed pyspark's ``bin`` and ``jars`` but no
    ``python/lib/pyspark.zip``: the path entry Spark adds for it then names nothing."""
    import pyspark

    installed = os.path.dirname(pyspark.__file__)
    for name in ("bin", "jars"):
        os.symlink(os.path.join(installed, name), os.path.join(home, name))
    return home


if __name__ == "__main__":
    main()
