"""The layering rules of style.md, checked: Spark stays out of the core."""

import subprocess
import sys


def test_importing_the_packages_loads_no_pyspark():
    code = (
        "import sys, windowing, accumulations, triggers, storage;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark');"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
