"""CPU seconds of one `engine_pandas.run_case` of a given checkout: compares two commits in one venv.

    .venv/bin/python benchmarks/engine_cpu.py <checkout> fixed|sessions|fixed-stream-10-steps [--events N] [--keys K]

``<checkout>`` is a directory holding the project (e.g. ``git worktree add /tmp/before <commit>``);
its packages are imported ahead of the installed ones. Process CPU time, data generation included, is
steadier than wall time on a loaded machine; alternate the two checkouts and take medians.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout")
    parser.add_argument("case")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    sys.path[:0] = [args.checkout, os.path.join(args.checkout, "benchmarks")]
    import engine_pandas

    start = time.process_time()
    engine_pandas.run_case(args.case, args.events, args.keys)
    print(f"{time.process_time() - start:.3f}")


if __name__ == "__main__":
    main()
