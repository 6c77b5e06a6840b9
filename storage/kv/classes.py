"""Keys of very different lengths without padding the short ones to the long: runs kept by width class.

A run's rows are as wide as its longest key, so one 60 KB key among short ones
would make every row 60 KB. Keys are therefore kept in *width classes*: rows
up to 64 bytes wide are class 0, and each further class doubles the width
(class k: more than 64 * 2**(k - 1), at most 64 * 2**k bytes). A run of the
cache or of a log frame holds keys of one class, so a row is at most 64 bytes
or twice its key's length wide. A layer (a batch, the cache, a scan's result)
is one run per class it holds, their keys disjoint (a key's class is fixed by
its length); ``interleave`` orders such runs as one without widening any, and
``ordered_blocks`` cuts them into data blocks of mixed classes whose rows stay
within twice their keys' own widths.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .keys import Run, concat_values, encode, key_lengths, narrow, row_lengths, search, sortable, widen, width_for

#: Rows up to this wide share class 0: short keys of any mix of lengths stay one run, as wide as the longest.
CLASS0_WIDTH = 64


def width_classes(widths: np.ndarray) -> np.ndarray:
    """The class of each row width: 0 up to ``CLASS0_WIDTH``, then one more per doubling."""
    return np.frexp((np.asarray(widths, np.int64) - 1) // CLASS0_WIDTH)[1].astype(np.int64)


def own_widths(rows: np.ndarray) -> np.ndarray:
    """The width each row's key needs."""
    return width_for(row_lengths(rows))


def class_of(run: Run) -> int:
    """The class of a run whose rows are as wide as its longest key (a run of the cache, of a log frame)."""
    return int(width_classes(np.array([run.width]))[0])


def from_writes(keys: pa.LargeBinaryArray, values: pa.LargeBinaryArray) -> list[Run]:
    """Writes in order as one run per class (the last write of a key wins), each as wide as its longest key."""
    classes = width_classes(width_for(key_lengths(keys)))
    if not len(keys) or (classes == classes[0]).all():
        return [Run.from_writes(keys, values)]
    out = []
    for number in np.unique(classes):
        at = pa.array(np.flatnonzero(classes == number))
        out.append(Run.from_writes(keys.take(at), values.take(at)))
    return out


def split(run: Run) -> list[Run]:
    """``run`` as one run per class, each as narrow as its longest key: a data block (which may mix classes, or
    be as wide as a whole file of the old format) made a layer of runs of one class each."""
    if not len(run):
        return []
    widths = own_widths(run.rows)
    classes = width_classes(widths)
    if (classes == classes[0]).all():
        return [Run(narrow(run.rows, int(widths.max())), run.values)]
    out = []
    for number in np.unique(classes):
        at = np.flatnonzero(classes == number)
        out.append(Run(narrow(run.rows[at], int(widths[at].max())), run.values.take(pa.array(at))))
    return out


def by_class(runs: list[Run]) -> list[list[Run]]:
    """The non-empty ``runs`` (each of one class) grouped by class, narrowest first, each group in their order."""
    groups: dict[int, list[Run]] = {}
    for run in runs:
        if len(run):
            groups.setdefault(class_of(run), []).append(run)
    return [group for _, group in sorted(groups.items())]


def merge(runs: list[Run]) -> list[Run]:
    """One run per class of ``runs`` (each of one class, oldest first): a key's newest value wins, deletes kept."""
    return [Run.merge(group) for group in by_class(runs)]


def merge_layers(layers: list[Run]) -> list[Run]:
    """``merge`` of runs that may mix classes (data blocks among them), oldest first."""
    return merge([piece for layer in layers for piece in split(layer)])


def interleave(runs: list[Run]) -> list[np.ndarray]:
    """For sorted runs of disjoint keys, each entry's position among all of them in key order.

    Two runs are compared at the narrower one's width: ``narrow`` cuts the
    wider run's longer keys so that they compare with every key of that width
    as themselves, and no key is in both, so no row of one equals a row of the
    other and a binary search counts exactly the keys below.
    """
    ranks = [np.arange(len(run)) for run in runs]
    for i, run in enumerate(runs):
        for other in runs[:i] + runs[i + 1 :]:
            width = min(run.width, other.width)
            below = np.searchsorted(sortable(narrow(other.rows, width)), sortable(narrow(run.rows, width)))
            ranks[i] = ranks[i] + below
    return ranks


def order(runs: list[Run]) -> np.ndarray:
    """Positions into the runs' entries one after another, in key order."""
    ranks = interleave(runs)
    out = np.empty(sum(len(r) for r in runs), np.int64)
    out[np.concatenate(ranks)] = np.arange(len(out))
    return out


def ordered(runs: list[Run]) -> tuple[pa.LargeBinaryArray, pa.LargeBinaryArray]:
    """The keys and values of ``runs`` (one per class) in key order, decoded without widening any row."""
    if len(runs) == 1:
        return runs[0].keys(), runs[0].values
    take = pa.array(order(runs))
    keys = concat_values([r.keys() for r in runs]).take(take)
    return keys, concat_values([r.values for r in runs]).take(take)


def count_up_to(runs: list[Run], key: bytes) -> int:
    """How many keys of ``runs`` are at most ``key``."""
    bound = encode(pa.array([key], pa.large_binary()))
    return sum(search(sortable(r.rows), bound, r.width, "right") for r in runs)


def concat(runs: list[Run]) -> Run:
    """Runs of one class, each after the one before in key order, as one run."""
    width = max(r.width for r in runs)
    return Run(np.concatenate([widen(r.rows, width) for r in runs]), concat_values([r.values for r in runs]))


def ordered_blocks(runs: list[Run], block_size: int) -> list[Run]:
    """The entries of ``runs`` (one per class) in key order, as blocks of about ``block_size`` bytes, each at its
    own width: a block's rows are at most ``CLASS0_WIDTH`` wide or twice their keys' own widths, so a long key
    among short ones gets a block of its own (or with a neighbour or two) instead of widening its neighbours."""
    runs = [r for r in runs if len(r)]
    if len(runs) == 1:  # one class: every block is within bounds, and slices of the run itself
        return [runs[0].slice(start, stop) for start, stop in cut(_costs(runs[0]), block_size)]
    positions = order(runs)
    rows = [r.rows for r in runs]
    starts = np.cumsum([0] + [len(r) for r in runs])
    source = np.searchsorted(starts, positions, side="right") - 1
    within = positions - starts[source]
    own = [own_widths(r.rows) for r in runs]
    widths = np.concatenate(own)[positions]
    costs = np.concatenate([_costs(r, w) for r, w in zip(runs, own)])[positions]
    values = concat_values([r.values for r in runs]).take(pa.array(positions))
    blocks = []
    for start, stop in cut(costs, block_size):
        for lo, hi in _within_bounds(widths[start:stop]):
            lo, hi = start + lo, start + hi
            width = int(widths[lo:hi].max())
            block_rows = np.empty((hi - lo, width), np.uint8)
            for number in np.unique(source[lo:hi]):
                mine = source[lo:hi] == number
                block_rows[mine] = narrow(rows[number][within[lo:hi][mine]], width)
            blocks.append(Run(block_rows, values.slice(lo, hi - lo)))
    return blocks


def _costs(run: Run, widths: np.ndarray | int | None = None) -> np.ndarray:
    """Each entry's bytes in a block: its row (at ``widths``, default the run's), value offset and value."""
    offsets = np.frombuffer(run.values.buffers()[1], np.int64, len(run) + 1, run.values.offset * 8)
    return np.diff(offsets) + (run.width if widths is None else widths) + 8


def cut(costs: np.ndarray, block_size: int) -> list[tuple[int, int]]:
    """Entries of ``costs`` bytes cut into blocks of about ``block_size`` bytes (at least one entry each)."""
    ends = np.cumsum(costs)
    bounds, start = [], 0
    while start < len(costs):
        stop = int(np.searchsorted(ends, (ends[start - 1] if start else 0) + block_size, side="right"))
        stop = min(max(stop, start + 1), len(costs))
        bounds.append((start, stop))
        start = stop
    return bounds


def _within_bounds(widths: np.ndarray) -> list[tuple[int, int]]:
    """A block's entries (their own row widths, in key order) as stretches whose rows, padded to the widest,
    take at most ``CLASS0_WIDTH`` or twice their own bytes: the whole block unless it mixes far apart widths; else
    its stretches of one class, neighbours joined while they stay within bounds (a loop over those stretches)."""
    if _fits(len(widths), int(widths.max()), int(widths.sum())):
        return [(0, len(widths))]
    classes = width_classes(widths)
    edges = [0, *(np.flatnonzero(np.diff(classes)) + 1).tolist(), len(widths)]
    out: list[tuple[int, int]] = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        if out:
            start = out[-1][0]
            if _fits(hi - start, int(widths[start:hi].max()), int(widths[start:hi].sum())):
                out[-1] = (start, hi)
                continue
        out.append((lo, hi))
    return out


def _fits(count: int, width: int, own: int) -> bool:
    return width <= CLASS0_WIDTH or count * width <= 2 * own
