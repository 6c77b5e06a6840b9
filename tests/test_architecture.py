"""The layering rules of style.md, checked: Spark and storage stay out of the engine core."""

import subprocess
import sys
from pathlib import Path

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

LOADED = "import importlib, sys; importlib.import_module({module!r}); " \
         "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {roots!r})))"


def _loaded(modules: list[str], roots: tuple[str, ...]) -> dict[str, str]:
    """For each module, imported alone in a fresh interpreter, the modules under ``roots`` it loaded."""
    runs = {m: subprocess.Popen([sys.executable, "-c", LOADED.format(module=m, roots=roots)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for m in modules}
    out = {}
    for module, run in runs.items():
        stdout, stderr = run.communicate()
        assert run.returncode == 0, f"importing {module} failed:\n{stderr}"
        out[module] = stdout.strip()
    return out


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
