"""Classes of state cells that pickle cannot find by name, named in the cell where the running pipeline names one.

An accumulator of a class defined in a notebook's or a script's ``__main__`` (which a Spark worker rebuilds from
the pipeline, under another ``__main__``) or inside a function cannot be pickled by reference. Pickled by value
(cloudpickle) every cell carries the class's code (a kilobyte a cell, twenty times slower), and a query restarted
from its checkpoint reads its state back as the checkpoint's copy of the class: its old methods, and no instance
of the class the restarted pipeline checks for. So `dumps` writes such a class as its module and qualified name
where the running pipeline's accumulations name exactly one class of that name (`remember_classes`), and
`class_named` reads it back as that class; a class they do not name, or name twice (two classes a factory made,
or the class a ``slots=True`` dataclass replaced), is pickled by value, with its code.
"""

from __future__ import annotations

import functools
import inspect
import io
import pickle
import sys
import types
from typing import Any, Iterable

from accumulations import Accumulation

_CLASSES: dict[tuple[str, str], type] = {}
"""The classes the running pipeline names exactly once under their module and qualified name (`remember_classes`)."""


def dumps(value: Any) -> bytes:
    """``value`` pickled (protocol 4) by cloudpickle, a class of `_CLASSES` as a reference to it (`class_named`)."""
    buffer = io.BytesIO()
    _by_name_pickler()(buffer, protocol=4).dump(value)
    return buffer.getvalue()


@functools.cache
def _by_name_pickler() -> Any:
    """cloudpickle's Pickler naming `_CLASSES` by reference; made on first use, as the pandas runner imports no
    pyspark (`tests/test_architecture.py`). pyspark's own copy of cloudpickle where pyspark is installed (what the
    Spark workers have always written), else the cloudpickle package: pyspark is an extra, absent where only pandas
    runs, and on Databricks the runtime's or Databricks Connect's."""
    try:
        from pyspark import cloudpickle
    except ImportError:
        import cloudpickle  # type: ignore[no-redef, import-untyped]

    class ByName(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, type) and _CLASSES.get((obj.__module__, obj.__qualname__)) is obj:
                return class_named, (obj.__module__, obj.__qualname__)
            return super().reducer_override(obj)  # type: ignore[no-untyped-call]

    return ByName


def loads(blob: bytes) -> Any:
    """``blob`` unpickled. A pickle of pyspark's copy of cloudpickle (state written where pyspark was installed, as it
    always was before pyspark became an extra) is read with the cloudpickle package where pyspark is not: it named
    ``pyspark.cloudpickle`` and failed with ``ModuleNotFoundError`` there."""
    try:
        return pickle.loads(blob)
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("pyspark"):
            raise
        return _WithoutPyspark(io.BytesIO(blob)).load()


class _WithoutPyspark(pickle.Unpickler):
    """Reads pyspark's copy of cloudpickle's functions as the cloudpickle package's."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "pyspark.cloudpickle" or module.startswith("pyspark.cloudpickle."):
            module = module.removeprefix("pyspark.")
        return super().find_class(module, name)


def class_named(module: str, qualname: str) -> type:
    """The class of that module and qualified name that the running pipeline names."""
    found = _CLASSES.get((module, qualname)) or _imported(module, qualname)
    if found is None:
        raise pickle.UnpicklingError(
            f"the window state holds an instance of class {qualname} (module {module}), which the pipeline's "
            "accumulations name not once: keep the class the state was written with (its name, and where it is "
            "defined), or start the query on a new checkpoint")
    return found


def remember_classes_of(spec: Any) -> None:
    """`remember_classes` of an engine spec's accumulations, once per spec in a row (a worker runs one task at a
    time)."""
    global _last_remembered
    if spec is not _last_remembered:
        remember_classes(agg.accumulation for agg in spec.aggregations)
        _last_remembered = spec


_last_remembered: Any = None

_WALKED_AT_MOST = 10_000
"""Objects one walk visits at most (a function may name a large structure), and items of a list or tuple."""
_ITEMS_AT_MOST = 64


def remember_classes(roots: Iterable[Any]) -> None:
    """Make `_CLASSES` the classes that ``roots`` (the pipeline's accumulations) name exactly once under their
    module and qualified name, pickle cannot find by it: their own, and those their functions and methods name
    (globals, closures, defaults), as many levels down as they go."""
    found: dict[tuple[str, str], list[type]] = {}
    seen: set[int] = set()
    todo = list(roots)
    while todo and len(seen) < _WALKED_AT_MOST:
        obj = todo.pop()
        if id(obj) in seen or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):
            key = (obj.__module__, obj.__qualname__)
            if obj.__module__ != "builtins" and _imported(*key) is not obj and obj not in found.get(key, []):
                found.setdefault(key, []).append(obj)
            todo.extend(_named_by_class(obj))
        elif isinstance(obj, types.FunctionType):
            todo.extend(_named_by_function(obj))
        elif isinstance(obj, (list, tuple)):
            todo.extend(obj[:_ITEMS_AT_MOST])
        elif isinstance(obj, Accumulation) or (hasattr(obj, "__dict__") and not isinstance(obj, types.ModuleType)
                                               and type(obj).__module__.split(".")[0] not in _LIBRARIES):
            todo.append(type(obj))
            todo.extend(vars(obj).values())
    _CLASSES.clear()
    _CLASSES.update({key: classes[0] for key, classes in found.items() if len(classes) == 1})


def _named_by_class(cls: type) -> list[Any]:
    if cls.__module__ == "builtins" or cls.__module__.split(".")[0] in _LIBRARIES:
        return []
    out: list[Any] = []
    for value in vars(cls).values():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        if isinstance(value, (types.FunctionType, type)):
            out.append(value)
    return out + [base for base in cls.__bases__ if base is not object]


def _named_by_function(fn: types.FunctionType) -> list[Any]:
    names: set[str] = set()
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(const for const in code.co_consts if inspect.iscode(const))
    out = [fn.__globals__[name] for name in names if name in fn.__globals__]
    out += [_contents(cell) for cell in fn.__closure__ or ()]
    return out + list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a name not bound yet)
        return None


#: Packages whose classes are importable and whose code names none of a user's classes: not walked.
_LIBRARIES = {"numpy", "pandas", "pyarrow", "pyspark", "windowing", "accumulations", "triggers", "storage"}


def _imported(module: str, qualname: str) -> Any:
    """The object ``module.qualname`` names where it is imported, or None."""
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return found
