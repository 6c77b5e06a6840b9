"""What built a bucket's window table, stored beside it in the state row, and the refusal of a restart by another
pipeline, which would read that table wrongly. Pyspark-free: the workers compare it at every load."""

from __future__ import annotations

import re
from typing import Any, Iterable

from ...errors import WindowingConfigError
from ...spec import EngineSpec
from .wire import WIRE

EXACT_INSTANTS = "timestamps held"
"""The part saying that the table holds timestamp keys and built-ins' timestamp values as UTC wall times, exact
(`planning.exact_instants`); a table without it holds them as wall times in the session zone, where two instants of
the hour the clocks go back share one, and keeps them so (`worker.BucketStep.as_written`)."""

LATER_PARTS = ("key columns", "session time zone", EXACT_INSTANTS)
"""Parts the description gained after checkpoints were written without them: such a checkpoint is not refused for
lacking one (it restarts as it did before)."""


def pipeline_of(spec: EngineSpec, window_state: Any = None, described: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """What builds a bucket's window table: a restart with other windows, trigger, mode, keys or aggregations would
    read it wrongly (a fixed window as a session, one aggregation's accumulator as another's), so it is refused by
    name instead; so is one with or without ``.window_state(store)`` where the checkpoint was written the other way,
    and one whose checkpoint kept the windows' small fields in its state rows ("payloads in a key-value store": the
    store then holds no window table).
    ``described``: what the driver adds (`planning._described_state`): the key columns and their types, the
    session time zone where the table holds wall times in it, and `EXACT_INSTANTS`."""
    spilled = {} if window_state is None else {"window_state": "windows per key in a key-value store"}
    return spilled | {
        "windows": _described(spec.windows),
        "trigger": _described(spec.trigger),
        "mode": spec.mode.value,
        "keys": str(spec.n_keys),
        "aggregations": ", ".join(f"{a.name}={_described(a.accumulation)} of {a.input_dtype}" for a in spec.aggregations),
    } | dict(described)


def differences(written_by: dict[str, str], pipeline: dict[str, str]) -> list[str]:
    """The parts that ``written_by`` (a state row's description) and ``pipeline`` describe otherwise, but for a part of
    `LATER_PARTS` the state row lacks."""
    return [part for part in dict.fromkeys([*pipeline, *written_by])
            if written_by.get(part) != pipeline.get(part) and not (part in LATER_PARTS and part not in written_by)]


#: A ``Count`` as the description names it, lifted (`combine.lifted_aggregations`: a Sum of the partial counts, which
#: no longer says the Count's column) or not.
_COUNT = re.compile(r"Sum\('" + re.escape(WIRE.partial_count(0)).removesuffix("0") + r"\d+'\) of int64"
                    r"|Count\((?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")?\) of \S+")


def refuse_another_pipeline(written_by: dict[str, str], pipeline: dict[str, str]) -> None:
    """Refuse a state row written by another pipeline, naming every part that changed. Aggregations that differ
    only by a lifted ``Count`` go unnamed beside another change: the trigger decides the lifting, so a change of
    trigger alone named an aggregation change the user never made, in a column name of the runner's own. (A lifted
    Count no longer says its column, so a Count's column changed with the trigger goes unnamed too; the refusal
    stands, naming the trigger.)"""
    parts = differences(written_by, pipeline)
    counted_alike = _counted(written_by.get("aggregations", "")) == _counted(pipeline.get("aggregations", ""))
    if len(parts) > 1 and "aggregations" in parts and counted_alike:
        parts.remove("aggregations")
    changed = "; ".join(f"{part} {written_by.get(part)} then, {pipeline.get(part)} now" for part in parts)
    if changed:
        raise WindowingConfigError(
            f"the checkpoint's state was written by another pipeline ({changed}): its window table would be "
            "read wrongly; restore the pipeline, or start from a new checkpoint")


def _described(part: Any) -> str:
    """``repr``, or the class name where the repr is object's own (it holds a memory address)."""
    own_repr = type(part).__repr__ is not object.__repr__  # type: ignore[comparison-overlap]
    return repr(part) if own_repr else type(part).__qualname__


def _counted(aggregations: str) -> str:
    """An aggregations description with each ``Count``, lifted or not, as one word."""
    return _COUNT.sub("Count", aggregations)
