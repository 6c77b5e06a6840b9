"""Accumulations made of your functions: ``Fold`` and ``Reduce``.

They hand every value to your functions, missing ones included (the built-ins skip those), and keep what
the functions return as it is.
"""

from __future__ import annotations

from typing import Any, Callable

from triggers.errors import WindowingConfigError

from .base import Accumulation, require_column


class Fold(Accumulation[Any, Any, Any]):
    """A user fold: ``add(acc, value)`` per element, ``merge(acc1, acc2)`` for merges.

    ``initial`` must be immutable or ``add`` must not mutate it: every window
    starts from the same object.
    """

    def __init__(self, column: str, initial: Any, add: Callable[[Any, Any], Any],
                 merge: Callable[[Any, Any], Any], output: Callable[[Any], Any] | None = None):
        self.column = require_column("Fold", column)
        for name, fn in (("add", add), ("merge", merge)):
            if not callable(fn):
                raise WindowingConfigError(f"Fold({name}={fn!r}): {name} must be callable")
        self.initial, self._add, self._merge = initial, add, merge
        self._output = output or (lambda acc: acc)

    def default_accumulated_value(self) -> Any:
        return self.initial

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return self._add(accumulated, value)

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return self._merge(accumulated1, accumulated2)

    def get_output(self, accumulated: Any) -> Any:
        return self._output(accumulated)


class _ReducedToNone:
    """A `Reduce` whose value is None, told apart from None, its empty window.

    Only a reduction that gave None holds it, so the common accumulator (None or a value) keeps its cheap
    storage in Spark state, and a checkpoint written before it (None: empty) reads the same. Pickled by
    name: the one instance comes back.
    """

    def __reduce__(self) -> str:
        return "REDUCED_TO_NONE"

    def __repr__(self) -> str:
        return "REDUCED_TO_NONE"


REDUCED_TO_NONE = _ReducedToNone()


class Reduce(Accumulation[Any, Any, Any]):
    """A user reduction ``fn(a, b)`` over the values, as Beam's ``BinaryCombineFn``: the first value as it is,
    then ``fn`` with each next; None for an empty window. A None value, or ``fn`` giving None, is a value
    like any other: ``fn`` sees it next."""

    def __init__(self, column: str, fn: Callable[[Any, Any], Any]):
        self.column = require_column("Reduce", column)
        if not callable(fn):
            raise WindowingConfigError(f"Reduce(fn={fn!r}): fn must be callable")
        self._fn = fn

    def default_accumulated_value(self) -> Any:
        return None

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return self._held(value if accumulated is None else self._fn(self.get_output(accumulated), value))

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        if accumulated1 is None:
            return accumulated2
        if accumulated2 is None:
            return accumulated1
        return self._held(self._fn(self.get_output(accumulated1), self.get_output(accumulated2)))

    def get_output(self, accumulated: Any) -> Any:
        return None if accumulated is REDUCED_TO_NONE else accumulated

    @staticmethod
    def _held(value: Any) -> Any:
        return REDUCED_TO_NONE if value is None else value
