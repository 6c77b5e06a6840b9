"""Classes of state cells that pickle cannot find by name, named in the cell and found in the running pipeline.

An accumulator of a class defined in a notebook's or a script's ``__main__`` (which a Spark worker rebuilds from
the pipeline, under another ``__main__``) or inside a function cannot be pickled by reference, and pickled by
value (cloudpickle) every cell carried the class's code (a kilobyte a cell, fifty times slower), and a query
restarted from its checkpoint read its state back as the checkpoint's copy of the class: its old methods, and no
instance of the class the restarted pipeline checks for. `dumps` writes such a class as its module and qualified
name; `class_named` reads it back as the class of that name that the running pipeline's accumulations name
(`remember_classes`) or that this process pickled.
"""

from __future__ import annotations

import inspect
import io
import pickle
import sys
import types
from typing import Any, Iterable

from accumulations import Accumulation

_CLASSES: dict[tuple[str, str], type] = {}


def dumps(value: Any) -> bytes:
    """``value`` pickled (protocol 4), a class pickle cannot find by name as a reference to it (`class_named`)."""
    buffer = io.BytesIO()
    _ByName(buffer, protocol=4).dump(value)
    return buffer.getvalue()


class _ByName(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) and _imported(obj.__module__, obj.__qualname__) is not obj:
            _CLASSES[(obj.__module__, obj.__qualname__)] = obj
            return class_named, (obj.__module__, obj.__qualname__)
        return NotImplemented


def class_named(module: str, qualname: str) -> type:
    """The class of that module and qualified name that the running pipeline names, or that this process pickled."""
    found = _CLASSES.get((module, qualname)) or _imported(module, qualname)
    if found is None:
        raise pickle.UnpicklingError(
            f"the window state holds an instance of class {qualname} (module {module}), which none of the pipeline's "
            "accumulations names: keep the class the state was written with (its name, and where it is defined), "
            "or start the query on a new checkpoint")
    return found


def remember_classes_of(spec: Any) -> None:
    """`remember_classes` of an engine spec's accumulations, once per spec in a row (a worker runs one pipeline)."""
    global _last_remembered
    if spec is not _last_remembered:
        remember_classes(agg.accumulation for agg in spec.aggregations)
        _last_remembered = spec


_last_remembered: Any = None


def remember_classes(roots: Iterable[Any]) -> None:
    """Make the classes that ``roots`` (the pipeline's accumulations) name findable by `class_named`: their own,
    and those their functions and methods name (globals, closures, defaults), as many levels down as they go."""
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):
            if obj.__module__ not in ("builtins",) and _imported(obj.__module__, obj.__qualname__) is not obj:
                _CLASSES[(obj.__module__, obj.__qualname__)] = obj  # the running pipeline's, over one pickled before
            todo.extend(_named_by_class(obj))
        elif isinstance(obj, types.FunctionType):
            todo.extend(_named_by_function(obj))
        elif isinstance(obj, (list, tuple)):
            todo.extend(obj)
        elif isinstance(obj, Accumulation) or (hasattr(obj, "__dict__") and not isinstance(obj, types.ModuleType)
                                               and type(obj).__module__.split(".")[0] not in _LIBRARIES):
            todo.append(type(obj))
            todo.extend(vars(obj).values())


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
