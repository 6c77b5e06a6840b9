"""Seconds the splitter's planner takes to hand out every block of N one-line files, K blocks a call.

    .venv/bin/python benchmarks/splitter_drain.py [--files 2000,8000,32000] [--blocks 16] [--storage-from DIR]

Each file is one block, and all are within the watermark's slack, so the state ends up remembering
every one: what a Spark source's driver does micro-batch after micro-batch over a directory of many
small files. The files are listed once (``freeze``, timed on its own); the drain is the
``next_blocks(K)`` calls after it, on a clock that stands still so nothing is listed again, and is
checked to hand out each file exactly once. ``--storage-from DIR`` imports ``storage`` from DIR
instead of this checkout, to time another revision on the same files
(``mkdir DIR && git archive REV storage | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def drain(directory: str, blocks_per_call: int) -> tuple[float, float, int]:
    """Seconds to list ``directory``, seconds to hand out all its blocks, and the calls that took."""
    from storage.splitter.config import SplitterConfig
    from storage.splitter.planner import BlockPlanner

    now = time.time() + 60
    planner = BlockPlanner(SplitterConfig(paths=(directory,), settle=0), clock=lambda: now)
    began = time.perf_counter()
    planner.freeze()
    listed = time.perf_counter()
    handed_out: list[str] = []
    calls = 0
    while blocks := planner.next_blocks(blocks_per_call):
        handed_out.extend(block.path for block in blocks)
        calls += 1
    drained = time.perf_counter()
    expected = sorted(os.path.join(directory, name) for name in os.listdir(directory))
    assert sorted(handed_out) == expected, "each file's one block must be handed out exactly once"
    return listed - began, drained - listed, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", default="2000,8000,32000", help="comma-separated numbers of files, one run each")
    parser.add_argument("--blocks", type=int, default=16, help="blocks handed out per call")
    parser.add_argument("--storage-from", metavar="DIR", default=os.path.join(os.path.dirname(__file__), ".."),
                        help="the directory holding the storage/ package to time (default: this checkout)")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.storage_from))
    import storage

    print(f"storage from {os.path.dirname(os.path.dirname(os.path.abspath(storage.__file__)))}")
    print("| files | blocks per call | calls | listing s | drain s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for count in (int(n) for n in args.files.split(",")):
        with tempfile.TemporaryDirectory(prefix="splitter-drain-") as directory:
            for i in range(count):
                with open(os.path.join(directory, f"f{i:06}.txt"), "w") as out:
                    out.write(f"line {i}\n")
            listing, drained, calls = drain(directory, args.blocks)
        print(f"| {count:,} | {args.blocks} | {calls:,} | {listing:.2f} | {drained:.2f} |", flush=True)


if __name__ == "__main__":
    main()
