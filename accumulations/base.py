"""The `Accumulation` interface: how a window's state absorbs elements.

Every accumulation has the scalar interface of the seed operator
(`default_accumulated_value`, `accumulate`, `merge`, `get_output`,
`get_retraction`). An accumulation may also declare a vectorized path: its
accumulator is then a fixed set of numeric *fields*, each combined by one of
the reductions pandas' groupby runs in compiled code (``sum``, ``min``,
``max``). The engine uses that path to aggregate a whole step of many keys and
windows in one groupby instead of a Python call per element.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, Iterable, Literal, Mapping, TypeVar

import numpy as np
import pandas as pd

from triggers.errors import WindowingConfigError

In = TypeVar("In")
Acc = TypeVar("Acc")
Out = TypeVar("Out")

Reduction = Literal["sum", "min", "max"]

OutputKind = Literal["count", "mean", "sum", "extreme", "collection"]
"""What an accumulation's output is, for a runner that types it before any data (`Accumulation.output_kind`)."""


#: The default of a required ``column``: left out, the error names the accumulation (a subclass's missing argument
#: named the base class's ``__init__``, ``_Numeric.__init__()`` for ``Sum()``).
NO_COLUMN: Any = object()


FOLDING = ("default_accumulated_value", "accumulate", "merge", "get_output")
"""The methods that say how an accumulation folds values (api.md's interface)."""

SHORTCUTS = ("vector_fields", "accumulate_all", "output_dtype", "liftable", "output_kind", "fresh_outputs")
"""What a class declares about how it folds, for the runners to fold faster than by calling `FOLDING`: valid for
that class's own folding only (`Accumulation.__init_subclass__`)."""


def require_column(name: str, column: Any) -> str:
    """``column`` if it is a column's name; else the error naming accumulation ``name``."""
    if column is NO_COLUMN:
        raise WindowingConfigError(f"{name}() needs the column it reads, e.g. {name}('amount')")
    if not isinstance(column, str) or not column:
        raise WindowingConfigError(f"{name}(column={column!r}): column must be a non-empty column name")
    return column


class Accumulation(ABC, Generic[In, Acc, Out]):
    """Folds the values of one window into an accumulator and reads it out.

    ``column`` names the input column the accumulation reads; ``None`` means
    it needs no column (``Count``) and receives ``None`` per element.
    """

    column: str | None = None

    output_kind: ClassVar[OutputKind | None] = None
    """What the output is, declared for runners that must type it before any data (Spark's output
    schema): ``"count"`` an integer; ``"mean"`` a float average of numbers; ``"sum"`` a sum of the
    input's numbers (their type, widened); ``"extreme"`` one of the input values; ``"collection"``
    a list of input values. None: undeclared (the Spark runner runs it once on a sample value). Like every one
    of `SHORTCUTS`, dropped by a subclass that folds otherwise."""

    liftable: ClassVar[bool] = False
    """Whether partial outputs over any split of a window's elements combine, by `of_partials`, into
    the output over all of them: the Spark runner then folds rows before the shuffle. A subclass
    that changes how values fold drops it (`__init_subclass__`)."""

    fresh_outputs: ClassVar[bool] = False
    """Whether `get_output` always returns a value that shares nothing mutable with the accumulator (a number,
    a new list, a frozenset). If not, the engine deep-copies each output it emits: an accumulator that
    `accumulate` or `merge` mutate in place would otherwise change panes already emitted, and the last emitted
    value that retractions carry and `fire_only_updated_panes()` compares with."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that folds otherwise than the class that declared a shortcut (overrides one of `FOLDING` below
        it: ``class SumOfSquares(Sum)`` with its own ``accumulate``) drops that shortcut for the interface's plain
        one: the runners then call its methods, where the built-in's vectorized path would have summed the values.
        Only overrides outside this package count: the built-ins, composed of classes that fold in parts, vouch for
        their own shortcuts, and a subclass that overrides none of `FOLDING` keeps them all."""
        super().__init_subclass__(**kwargs)
        mro = cls.__mro__
        depth = {name: next(i for i, owner in enumerate(mro) if name in vars(owner)) for name in SHORTCUTS}
        own = [i for i, owner in enumerate(mro) if not owner.__module__.startswith(f"{__package__}.")
               and any(name in vars(owner) for name in FOLDING)]
        if not own:
            return
        for name in SHORTCUTS:
            if depth[name] > min(own) and mro[depth[name]] is not Accumulation:
                setattr(cls, name, vars(Accumulation)[name])

    def of_partials(self, column: str) -> "Accumulation[Any, Any, Any]":
        """For a `liftable` accumulation: the accumulation that combines its partial outputs, read
        from ``column`` where it needs another column than its own (a count is a sum of counts)."""
        return self

    @abstractmethod
    def default_accumulated_value(self) -> Acc:
        """The accumulator of an empty window (also after a discarding firing)."""

    @abstractmethod
    def accumulate(self, accumulated: Acc, value: In) -> Acc:
        """Return the accumulator with one more element; may mutate and return it.

        The runners may also call it on a made-up value of the column's type (None without a column) to type an
        output column before any pane (`output_kind`): keep it free of side effects, as Beam asks of a CombineFn."""

    @abstractmethod
    def merge(self, accumulated1: Acc, accumulated2: Acc) -> Acc:
        """Combine two accumulators (session merging, combining partial results)."""

    @abstractmethod
    def get_output(self, accumulated: Acc) -> Out:
        """The value a pane carries."""

    def get_retraction(self, output: Out) -> Out:
        """What a downstream additive consumer applies to undo ``output``.

        The engine's retraction rows carry the previous output itself (with
        ``is_retraction`` true); this method is for consumers that fold panes
        into a running total. The default returns the output unchanged.
        """
        return output

    def for_input(self, dtype: Any) -> "Accumulation[In, Acc, Out]":
        """This accumulation set up for an input column of ``dtype`` (pandas or NumPy).

        The plan calls it once, before any data: an accumulation refuses a dtype it cannot
        aggregate here, with a ValueError naming the column and the dtype, rather than fail
        (or compute nonsense) on the first element. By default: itself.
        """
        return self

    def output_dtype(self) -> Any:
        """The dtype of the output column when the accumulation knows it (a Min of timestamps:
        the column's dtype, even when every pane is empty), else None: pandas infers it."""
        return None

    # ---- the optional vectorized path -------------------------------------------------

    def vector_fields(self) -> Mapping[str, Reduction] | None:
        """Field name -> reduction, or None when there is no vectorized path."""
        return None

    def vector_defaults(self, dtype: np.dtype) -> dict[str, Any]:
        """The fields of an empty accumulator, for an input column of ``dtype``."""
        raise NotImplementedError

    def vector_lift(self, values: pd.Series) -> dict[str, np.ndarray]:
        """One accumulator per element, as field arrays (reduced by group afterwards)."""
        raise NotImplementedError

    def vector_output(self, fields: Mapping[str, np.ndarray]) -> np.ndarray:
        """The output of many accumulators at once."""
        raise NotImplementedError

    def accumulate_all(self, accumulated: Acc, values: Iterable[In]) -> Acc:
        """Fold many values; the slow path's inner loop."""
        for value in values:
            accumulated = self.accumulate(accumulated, value)
        return accumulated

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.column!r})" if self.column else f"{type(self).__name__}()"


class MergeAccumulation(Accumulation[Any, Acc, Out]):
    """An accumulation over two streams (the seed's WindowedMergeOperator).

    Elements arrive as ``(side, value)`` pairs, side 0 for the left stream and
    1 for the right; ``accumulate`` routes them to ``accumulate_left`` or
    ``accumulate_right``.
    """

    @abstractmethod
    def accumulate_left(self, accumulated: Acc, value: Any) -> Acc: ...

    @abstractmethod
    def accumulate_right(self, accumulated: Acc, value: Any) -> Acc: ...

    def accumulate(self, accumulated: Acc, value: tuple[int, Any]) -> Acc:
        side, item = value
        if side == 0:
            return self.accumulate_left(accumulated, item)
        return self.accumulate_right(accumulated, item)
