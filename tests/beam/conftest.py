"""A tally of the differential's pipelines, printed after the run (``make test-beam``)."""

from __future__ import annotations

from collections import Counter

import pytest

TALLY = pytest.StashKey[Counter]()


@pytest.fixture(scope="session")
def tally(request) -> Counter:
    return request.config.stash.setdefault(TALLY, Counter())


def pytest_terminal_summary(terminalreporter, config) -> None:
    counts = config.stash.get(TALLY, None)
    if counts:
        terminalreporter.write_line("differential: " + ", ".join(f"{name} {n}" for name, n in sorted(counts.items())))
