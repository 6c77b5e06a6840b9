"""The layering rules of style.md, checked: no import cycles, layers import one way, Spark and storage stay
out of the engine core."""

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

NOT_CORE = {"windowing.__main__"}
"""The demo (``make demo``) drives Spark and the storage sidecars. The Spark runner's modules are
checked too: they import pyspark only inside the functions that talk to Spark."""


def _modules(package: str) -> list[str]:
    """Every module of ``package``, from its files (nothing is imported here)."""
    names = []
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


CORE_MODULES = sorted(m for package in ("accumulations", "triggers", "windowing") for m in _modules(package)
                      if m not in NOT_CORE)

PRODUCT = ("windowing", "triggers", "accumulations", "storage")


def _source(module: str) -> Path:
    """The file of ``module``: ``pkg/mod.py``, or a package's ``pkg/__init__.py``."""
    path = ROOT / (module.replace(".", "/") + ".py")
    return path if path.exists() else ROOT / module.replace(".", "/") / "__init__.py"


def _imports(module: str) -> set[str]:
    """The product modules ``module`` imports, read from its source: lazy imports (inside functions)
    included. ``from package import name`` counts as importing ``package.name`` where that is a module."""
    path = _source(module)
    is_package = path.name == "__init__.py"
    known = set(ALL_MODULES)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.update(f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin for alias in node.names)
    return {name for name in found if name in known and name != module}


ALL_MODULES = sorted(m for package in PRODUCT for m in _modules(package))


def test_no_import_cycles_in_the_product():
    graph = {module: _imports(module) for module in ALL_MODULES}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        pytest.fail(f"import cycle, each module imported by the next: {' -> '.join(cycle.args[1])}")


def test_the_cycle_check_sees_lazy_and_relative_imports():
    assert "windowing.runners.spark.query" in _imports("windowing.runners.spark")  # the package's own __init__
    assert "windowing.runners.spark" in _imports("windowing.api")  # imported inside a method
    assert "windowing.columns" in _imports("windowing.runners.spark.wire")  # from ... import columns


def test_runners_ask_accumulations_instead_of_importing_the_built_ins():
    """What lifting and output typing need, accumulations declare (``liftable``, ``output_kind``)."""
    runners = [m for m in ALL_MODULES if m.startswith("windowing.runners")]
    assert {m: "accumulations.builtins" for m in runners if "accumulations.builtins" in _imports(m)} == {}


MAX_MODULE_LINES = 550
"""About 500 lines: a module that grows past it holds more than one concern."""


def test_no_product_module_is_over_about_500_lines():
    sizes = {m: len(_source(m).read_text().splitlines()) for m in ALL_MODULES}
    assert {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES} == {}
    assert sizes["windowing"] > 0 and sizes["storage.kv"] > 0  # packages (their __init__.py) counted too


def test_layers_import_one_way():
    """``triggers``, ``accumulations`` and ``storage`` never import ``windowing``."""
    below = [m for m in ALL_MODULES if m.split(".")[0] in ("triggers", "accumulations", "storage")]
    assert {m: sorted(i for i in _imports(m) if i.startswith("windowing")) for m in below
            if any(i.startswith("windowing") for i in _imports(m))} == {}


FORKED = """
import importlib, os, sys, traceback
import numpy, pandas, pyarrow  # no module under the roots checked: loaded once, before the forks share them
for module in {modules!r}:
    child = os.fork()
    if child == 0:
        try:
            importlib.import_module(module)
            print(module + "=" + ",".join(sorted(m for m in sys.modules if m.split(".")[0] in {roots!r})), flush=True)
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    if os.waitpid(child, 0)[1] != 0:
        sys.exit("importing " + module + " failed")
"""


def _loaded(modules: list[str], roots: tuple[str, ...]) -> dict[str, str]:
    """For each module, imported alone (in a fork of an interpreter that loaded none of ``roots``), the
    modules under ``roots`` it loaded. Forks of one interpreter, not a fresh one each: pandas, NumPy
    and pyarrow load once, where a fresh interpreter per module took 30 s for the engine's modules."""
    run = subprocess.run([sys.executable, "-c", FORKED.format(modules=modules, roots=roots)], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    loaded = dict(line.split("=", 1) for line in run.stdout.splitlines())
    assert sorted(loaded) == sorted(modules), run.stdout
    return loaded


def test_a_forked_import_reports_what_the_module_loads():
    """The check can fail: a module that loads pyspark is reported with it, as is a failing import."""
    assert "pyspark" in _loaded(["pyspark.sql"], ("pyspark",))["pyspark.sql"]
    with pytest.raises(AssertionError, match="importing windowing.no_such_module failed"):
        _loaded(["windowing", "windowing.no_such_module"], ("pyspark",))


def test_the_engine_core_modules_are_all_checked():
    assert {"accumulations.builtins", "triggers.library", "windowing.engine", "windowing.state_codec",
            "windowing.runners.pandas", "windowing.runners.spark.worker", "windowing.runners.spark.combine"} <= set(CORE_MODULES)
    assert not NOT_CORE & set(CORE_MODULES)


def test_importing_an_engine_core_module_loads_neither_pyspark_nor_storage():
    loaded = _loaded(CORE_MODULES, ("pyspark", "storage"))
    assert {module: names for module, names in loaded.items() if names} == {}


def test_importing_the_packages_loads_no_pyspark():
    loaded = _loaded(["windowing", "accumulations", "triggers", "storage"], ("pyspark",))
    assert {module: names for module, names in loaded.items() if names} == {}


WITHOUT_PYSPARK = '''
import sys
sys.modules["pyspark"] = None  # every import of pyspark fails, as where it is not installed

import dataclasses

from accumulations import Fold, Sum
from storage import FileSink, FileSplitter, KVStore
from triggers import AfterCount, Repeatedly
from windowing import TestStream, windowed


def counter(column):
    @dataclasses.dataclass
    class Tally:  # two classes of one name: each cell pickled with its class's code, by cloudpickle
        n: int = 0

    return Fold(column, Tally(), lambda a, v: Tally(a.n + 1), lambda a, b: Tally(a.n + b.n), output=lambda a: a.n)


stream = TestStream().add_elements([{"k": "a", "ts": 1, "x": 5}]).add_elements([{"k": "a", "ts": 2, "x": 7}])
built = windowed(stream, time="ts", key="k").window_state(KVStore("kv")).fixed(10)
panes = built.trigger(Repeatedly(AfterCount(1))).accumulating().run(x=counter("x"), y=counter("x"), total=Sum("x")).panes
print(panes[["x", "y", "total"]].values.tolist())
print(FileSink("out").write_panes(panes), len(FileSink("out").read()))
with open("in.log", "w") as log:
    log.write("one\\ntwo\\n")
print(FileSplitter(".", pattern=r".*[.]log").read_lines()["value"].tolist())
'''


def test_the_pandas_runner_and_the_storage_run_without_pyspark(tmp_path):
    """pyspark is an extra: Databricks brings its own, which pip does not see, so requiring it pulled PyPI's over it.
    The pandas runner with window state in a store (classes pickled by value by cloudpickle, not pyspark's copy), the
    file sink and the splitter's pandas reader work where importing pyspark fails."""
    done = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[[1, 1, 5], [2, 2, 12], [2, 2, 12]]", "3 3", "['one', 'two']"]


def test_state_written_where_pyspark_was_installed_reads_back_without_it(tmp_path):
    """A class pickled by value with pyspark's copy of cloudpickle names ``pyspark.cloudpickle``: a window state written
    so (every one before pyspark became an extra) failed with ModuleNotFoundError once pyspark was gone."""
    from windowing import state_classes

    def made_here():
        class Tally:
            def __init__(self, n):
                self.n = n

        return Tally(7)

    blob = state_classes.dumps(made_here())
    assert b"pyspark.cloudpickle" in blob
    (tmp_path / "blob").write_bytes(blob)
    code = ('import sys; sys.modules["pyspark"] = None\n'
            'from windowing import state_classes\n'
            'value = state_classes.loads(open("blob", "rb").read())\n'
            'print(type(value).__name__, value.n)')
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Tally", "7"]
