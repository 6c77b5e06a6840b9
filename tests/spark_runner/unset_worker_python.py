"""A driver that sets nothing about Spark's Python workers, as a new user would (`test_worker_python.py`).

``python -m tests.spark_runner.unset_worker_python`` starts a local Spark without ``PYSPARK_PYTHON``,
so its workers would run the ``python3`` on ``PATH``, defines a windowed query, and prints the
error that refuses it (or ``defined`` when none does).
"""

from __future__ import annotations

from tests import sparks


def main() -> None:
    spark = sparks.session(sparks.LOCAL, "unset-worker-python", python=None)
    from accumulations import Sum
    from windowing import windowed
    from windowing.errors import WindowingConfigError

    from .helpers import events

    try:
        windowed(spark.createDataFrame(events([("a", 1, 5)])), time="ts", key="user").fixed("10 seconds").aggregate(Sum("amount"))
        print("defined")
    except WindowingConfigError as err:
        print(f"refused: {err}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
